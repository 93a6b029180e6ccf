"""The "Devices" and "Default device" sections: ``torch.device(...)``, strings that name
an indexed device, and ``with torch.device(...):``."""

from __future__ import annotations

import ast

from .base import Recogniser

__all__ = ["default_device_block", "device_call", "indexed_device_string"]

_DEVICE_PREFIXES = ("cuda:", "cpu:", "gpu:", "mps:", "xpu:", "tpu:")


def device_call(r: Recogniser, call: ast.Call) -> None:
    """``device-*`` rows: ``torch.device(...)`` becomes ``tj.device(...)`` (same grammar)."""
    first = call.args[0] if call.args else None
    if isinstance(first, ast.JoinedStr) or (first is not None and _formats_a_device(first)):
        r.reported.add(id(first))  # this finding covers the string: not again on its own
    strings = [first.body, first.orelse] if isinstance(first, ast.IfExp) else []
    if strings:
        r.reported.add(id(first))  # device-select covers the names it chooses from
    if first is None and any(k.arg == "type" for k in call.keywords):
        first = next(k.value for k in call.keywords if k.arg == "type")
    if strings and all(isinstance(s, ast.Constant) for s in strings):
        rule = "device-select"
    elif len(call.args) == 2 or any(k.arg == "index" for k in call.keywords):
        rule = "device-type-index"
    elif isinstance(first, ast.Constant) and isinstance(first.value, int):
        rule = "device-accelerator-index"
    elif isinstance(first, ast.Constant) and isinstance(first.value, str):
        rule = "device-indexed" if ":" in first.value else "device-type"
    elif isinstance(first, ast.JoinedStr) or (first is not None and _formats_a_device(first)):
        rule = "device-indexed"
    else:
        rule = "device-from-spec"
    r.add(
        call,
        rule,
        f"tj.device({r.arguments(call)})",
        rewrite=r.rename(call.func, "tj.device"),
        call=call,
        tj_name="tj.device",
        effect="value",
        subject=call,
        policy="device",
    )


def default_device_block(r: Recogniser, node: ast.With, call: ast.Call) -> None:
    """``default-device-context``: ``with torch.device(...):`` becomes ``with tj.device(...):``."""
    r.add(
        call,
        "default-device-context",
        f"tj.device({r.arguments(call)})",
        rewrite=r.rename(call.func, "tj.device"),
        call=call,
        tj_name="tj.device",
        effect="default",
        block=node.body,
    )


def indexed_device_string(r: Recogniser, node: ast.AST) -> None:
    """``f"cuda:{i}"``, ``"cuda:{}".format(i)``, ``"cuda:%d" % i`` outside ``torch.device``."""
    if id(node) in r.reported:
        return
    if isinstance(node, ast.JoinedStr):
        first = node.values[0] if node.values else None
        found = (
            len(node.values) == 2
            and isinstance(first, ast.Constant)
            and isinstance(first.value, str)
            and first.value in _DEVICE_PREFIXES
            and isinstance(node.values[1], ast.FormattedValue)
        )
    elif isinstance(node, ast.BinOp):
        left = node.left
        found = (
            isinstance(node.op, ast.Mod)
            and isinstance(left, ast.Constant)
            and isinstance(left.value, str)
            and left.value in ("cuda:%d", "cuda:%s", "cuda:%i")
        )
    elif isinstance(node, ast.Call):
        func = node.func
        found = (
            isinstance(func, ast.Attribute)
            and func.attr == "format"
            and isinstance(func.value, ast.Constant)
            and isinstance(func.value.value, str)
            and func.value.value.startswith(_DEVICE_PREFIXES)
            and func.value.value.endswith("{}")
            and func.value.value.count("{") == 1
        )
    else:
        found = False
    if found:
        r.add(node, "device-indexed", f"tj.device({r.text(node)})")


def _formats_a_device(node: ast.AST) -> bool:
    """``"cuda:{}".format(i)`` or ``"cuda:%d" % i``: an indexed device name."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        template = node.func.value if node.func.attr == "format" else None
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        template = node.left
    else:
        return False
    return (
        isinstance(template, ast.Constant)
        and isinstance(template.value, str)
        and template.value.startswith(_DEVICE_PREFIXES)
    )
