"""Recognize other frameworks' objects without importing the frameworks.

A torch object can only exist if torch was imported by someone, so looking the class
up in ``sys.modules`` is enough and never imports torch (the einops and
array-api-compat approach).
"""

from __future__ import annotations

import sys
from typing import Any, TypeGuard

__all__ = ["is_torch_device"]


def is_torch_device(obj: object) -> TypeGuard[Any]:
    """Whether ``obj`` is a ``torch.device``, without importing torch."""
    torch = sys.modules.get("torch")
    device_cls = getattr(torch, "device", None)
    return isinstance(device_cls, type) and isinstance(obj, device_cls)
