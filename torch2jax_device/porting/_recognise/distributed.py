"""The "Distributed" section's attributes: ``ddp.module``, ``ddp.no_sync()``,
``ddp.require_backward_grad_sync``."""

from __future__ import annotations

import ast

from .._values import WRAPPED
from .base import Recogniser

__all__ = ["wrapper_attribute"]


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
