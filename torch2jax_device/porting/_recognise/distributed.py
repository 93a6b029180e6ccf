"""The "Distributed" section's attributes and methods: ``ddp.module``, ``ddp.no_sync()``,
``ddp.require_backward_grad_sync``, and a torch ``DeviceMesh``'s queries
(``mesh.get_local_rank("tp")``)."""

from __future__ import annotations

import ast

from .._values import DEVICE_MESH, WRAPPED, last_name
from .base import Recogniser

__all__ = ["MESH_METHODS", "collective_advice", "mesh_query", "wrapper_attribute"]

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
    if node.attr in ("device_ids", "output_device") and (
        WRAPPED in r.file.values.kinds(receiver)
        or r.file.values.module_framework(receiver) is not None
    ):
        r.add(node, "dist-ddp-gradient", position=where)  # model.device_ids of DDP's
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


def collective_advice(r: Recogniser, call: ast.Call | None, name: str) -> str | None:
    """``dist-other``'s advice for the collective the line calls, with its own arguments:
    ``dist.broadcast(t, 0)`` is a broadcast from process 0, not the row's allgather;
    ``None`` for the others (the row's advice)."""
    if call is None or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    given = {k.arg: k.value for k in call.keywords if k.arg is not None}
    arguments = dict(zip(_COLLECTIVE_PARAMETERS.get(name, ()), call.args, strict=False))
    arguments.update({k: v for k, v in given.items() if k in _COLLECTIVE_PARAMETERS.get(name, ())})
    if name == "torch.distributed.broadcast" and {"tensor", "src"} <= set(arguments):
        tensor, src = r.text(arguments["tensor"]), r.text(arguments["src"])
        return (
            f"{tensor} = multihost_utils.broadcast_one_to_all({tensor}, "
            f"is_source=jax.process_index() == {src})"
        )
    if name == "torch.distributed.all_gather" and {"tensor_list", "tensor"} <= set(arguments):
        gathered, tensor = r.text(arguments["tensor_list"]), r.text(arguments["tensor"])
        return f"{gathered} = list(multihost_utils.process_allgather({tensor}))"
    return None


# torch.distributed's collectives and their parameters, in order.
_COLLECTIVE_PARAMETERS = {
    "torch.distributed.broadcast": ("tensor", "src"),
    "torch.distributed.all_gather": ("tensor_list", "tensor"),
}


def defined_here(r: Recogniser, method: ast.Attribute) -> bool:
    """``self.method`` where the enclosing class defines ``method`` (its body is found)."""
    if not (isinstance(method.value, ast.Name) and method.value.id in ("self", "cls")):
        return False
    owner = r.file.names.enclosing(method, ast.ClassDef)
    return isinstance(owner, ast.ClassDef) and any(
        isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == method.attr
        for item in owner.body
    )
