"""The "Distributed" section's attributes and methods: ``ddp.module``, ``ddp.no_sync()``,
``ddp.require_backward_grad_sync``, and a torch ``DeviceMesh``'s queries
(``mesh.get_local_rank("tp")``)."""

from __future__ import annotations

import ast

from .._values import DEVICE_MESH, WRAPPED, last_name
from .base import Recogniser

__all__ = ["MESH_METHODS", "mesh_query", "wrapper_attribute"]

#: A torch ``DeviceMesh``'s methods that ask where this process is in it; none of them is
#: a method of JAX's ``Mesh`` (whose ``size`` is a number, not a call).
MESH_METHODS = frozenset({"get_local_rank", "get_rank", "size", "get_group", "get_coordinate"})


def wrapper_attribute(r: Recogniser, node: ast.Attribute) -> bool:
    """``ddp-module``, ``ddp-no-sync``; ``True`` if one was reported (its receiver is
    then visited)."""
    receiver = node.value
    where = r.file.method_position(node)
    if node.attr == "module" and (
        WRAPPED in r.file.values.kinds(receiver)
        or r.file.values.module_framework(receiver) is not None
    ):
        r.add(node, "ddp-module", r.text(receiver), position=where)
        r.visit(receiver)
        return True
    if node.attr == "require_backward_grad_sync":
        parent = r.parent(node)
        r.add(parent if isinstance(parent, ast.Assign) else node, "ddp-no-sync", position=where)
        r.visit(receiver)
        return True
    return False


def mesh_query(r: Recogniser, call: ast.Call, method: ast.Attribute) -> bool:
    """``dist-mesh-queries``: ``mesh.get_local_rank("tp")`` on a mesh from
    ``init_device_mesh``, or on a name that says it is one (``device_mesh.size(0)``, a mesh
    handed to a function); ``True`` if reported."""
    receiver = method.value
    named = last_name(receiver)
    if DEVICE_MESH not in r.file.values.kinds(receiver) and (
        named is None or "mesh" not in named.lower()
    ):
        return False
    r.add(call, "dist-mesh-queries", position=r.file.method_position(method))
    return True
