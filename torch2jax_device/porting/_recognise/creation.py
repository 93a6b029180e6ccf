"""The "Creating tensors" section: torch calls told ``device=``, ``x.new_zeros(...)``."""

from __future__ import annotations

import ast

from .._tables import TENSOR_FACTORIES
from .base import Recogniser

__all__ = ["factory"]


def factory(r: Recogniser, call: ast.Call, name: str) -> None:
    """``factory-device`` and friends: a torch call told ``device=``."""
    keyword = next(k for k in call.keywords if k.arg == "device")
    last = name.rsplit(".", 1)[-1]
    if name in TENSOR_FACTORIES:
        rule = "factory-tensor-device"
    elif name == "torch.Generator":
        rule = "generator-device"
    elif name.startswith("torch.nn.") and last[:1].isupper():
        rule = "module-device-kwarg"
    else:
        rule = "factory-device"
    r.add(call, rule, position=r.file.position(r.file.span(keyword)[0]))
