"""The "Feeding the device" section: ``pin_memory=`` and ``x.pin_memory()``."""

from __future__ import annotations

import ast

from .._rewrites import Rewrite
from .._values import TJ
from .base import Recogniser

__all__ = ["pin_memory_call", "pin_memory_keys", "pin_memory_keywords", "pinned_query"]

_KEYWORDS = ("pin_memory", "pin_memory_device")


def pin_memory_keywords(r: Recogniser, call: ast.Call) -> None:
    """``dataloader-pin-memory``: ``DataLoader(..., pin_memory=True)`` (not tj's own)."""
    for keyword in call.keywords:
        if keyword.arg in _KEYWORDS and not (r.qualname(call.func) or "").startswith(TJ):
            r.add(
                keyword, "dataloader-pin-memory", position=r.file.position(r.file.span(keyword)[0])
            )


def pin_memory_keys(r: Recogniser, node: ast.Dict) -> None:
    """``DataLoader(**{"pin_memory": True, ...})``: keyword arguments built as a dict."""
    for key in node.keys:
        if isinstance(key, ast.Constant) and key.value in _KEYWORDS:
            r.add(key, "dataloader-pin-memory")


def pin_memory_call(
    r: Recogniser, call: ast.Call, method: ast.Attribute, where: tuple[int, int]
) -> None:
    """``tensor-pin-memory``: ``x.pin_memory()`` becomes ``tj.pin_memory(x)`` (not a module's)."""
    receiver = method.value
    if r.file.values.module_framework(receiver) is not None:
        return
    start, end = r.file.span(call)
    r.add(
        call,
        "tensor-pin-memory",
        f"tj.pin_memory({r.text(receiver)})",
        position=where,
        rewrite=Rewrite(start, end, ("tj.pin_memory(", r.file.receiver_span(method), ")")),
        call=call,
        tj_name="tj.pin_memory",
        effect="value",
        subject=call,
    )


def pinned_query(r: Recogniser, call: ast.Call, receiver: ast.expr, where: tuple[int, int]) -> None:
    """``tensor-pin-memory``: ``x.is_pinned()``."""
    r.add(
        call,
        "tensor-pin-memory",
        f'{r.text(receiver)}.sharding.memory_kind == "pinned_host"',
        position=where,
    )
