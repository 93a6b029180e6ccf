"""Recognize other frameworks' objects without importing the frameworks.

A torch or flax object can only exist if that framework was imported by someone, so
looking the class up in ``sys.modules`` is enough and never imports it (the einops
and array-api-compat approach).
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any, TypeGuard

import jax

from .errors import MissingFrameworkError

__all__ = [
    "import_torch",
    "is_equinox_module",
    "is_nnx_module",
    "is_nnx_state",
    "is_torch_device",
    "is_torch_dtype",
    "is_torch_module",
    "is_torch_tensor",
    "is_tracer",
    "type_name",
]


def _instance_of(obj: object, module: str, name: str) -> bool:
    cls = getattr(sys.modules.get(module), name, None)
    return isinstance(cls, type) and isinstance(obj, cls)


def is_torch_device(obj: object) -> TypeGuard[Any]:
    """Whether ``obj`` is a ``torch.device``, without importing torch."""
    return _instance_of(obj, "torch", "device")


def is_torch_tensor(obj: object) -> TypeGuard[Any]:
    """Whether ``obj`` is a ``torch.Tensor``, without importing torch."""
    return _instance_of(obj, "torch", "Tensor")


def is_torch_dtype(obj: object) -> TypeGuard[Any]:
    """Whether ``obj`` is a ``torch.dtype``, without importing torch."""
    return _instance_of(obj, "torch", "dtype")


def is_torch_module(obj: object) -> TypeGuard[Any]:
    """Whether ``obj`` is a ``torch.nn.Module``, without importing torch."""
    return _instance_of(obj, "torch.nn", "Module")


def is_nnx_module(obj: object) -> TypeGuard[Any]:
    """Whether ``obj`` is a Flax NNX module, without importing flax."""
    return _instance_of(obj, "flax.nnx", "Module")


def is_nnx_state(obj: object) -> TypeGuard[Any]:
    """Whether ``obj`` is a Flax NNX ``State``, without importing flax."""
    return _instance_of(obj, "flax.nnx", "State")


def is_equinox_module(obj: object) -> TypeGuard[Any]:
    """Whether ``obj`` is an Equinox module, without importing equinox."""
    return _instance_of(obj, "equinox", "Module")


def is_tracer(obj: object) -> bool:
    """Whether ``obj`` is a JAX tracer (an array inside ``jit``/``grad``: no device)."""
    return isinstance(obj, jax.core.Tracer)


def import_torch(purpose: str) -> ModuleType:
    """``torch``, or a ``MissingFrameworkError`` saying what needed it and how to install it."""
    try:
        return importlib.import_module("torch")
    except ImportError as err:
        raise MissingFrameworkError(
            f"{purpose} needs PyTorch, which is not installed ({err}). Fix: pip install "
            "torch (the CPU build: pip install torch --index-url "
            "https://download.pytorch.org/whl/cpu), or keep this data in JAX."
        ) from err


def type_name(obj: object) -> str:
    """``obj``'s class as messages name it: ``list``, ``torch.nn.modules.linear.Linear``."""
    cls = type(obj)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )
