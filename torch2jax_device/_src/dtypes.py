"""Dtypes from any framework, and the int64 -> int32 narrowing JAX does without x64.

JAX without ``jax_enable_x64`` turns 64-bit data into 32-bit data on every entry
(``device_put``, ``jnp.asarray``, DLPack), silently and with a copy. PyTorch users'
default integer dtype is int64, so token ids and indices narrow all the time; this
module makes that visible once per dtype, with the fix.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes  # noqa: F401 - registers bfloat16 and the float8 kinds with NumPy
import numpy as np

from .detect import is_torch_dtype
from .errors import DTypeError

__all__ = [
    "DtypeNarrowingWarning",
    "caller_stacklevel",
    "canonical",
    "is_inexact",
    "to_numpy_dtype",
]


class DtypeNarrowingWarning(UserWarning):
    """64-bit data became 32-bit because ``jax_enable_x64`` is off."""


_warned: set[str] = set()


def to_numpy_dtype(dtype: Any) -> np.dtype[Any]:
    """The NumPy dtype for a JAX/NumPy dtype, a dtype name or a ``torch.dtype``.

    Raises:
        DTypeError: JAX does not know the dtype; the message names it.
    """
    name = str(dtype).removeprefix("torch.") if is_torch_dtype(dtype) else dtype
    try:
        return np.dtype(jnp.dtype(name))
    except (TypeError, ValueError) as err:
        raise DTypeError(
            f"unknown dtype {dtype!r}: JAX dtypes are NumPy dtypes plus bfloat16 and the "
            "float8 kinds; pass e.g. jnp.float32, 'bfloat16' or torch.float16"
        ) from err


def canonical(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype JAX will actually use for ``dtype``; warns once per narrowed dtype."""
    result = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    if result != dtype and dtype.name not in _warned:
        _warned.add(dtype.name)
        warnings.warn(
            f"{dtype.name} data becomes {result.name} in JAX because jax_enable_x64 is off "
            "(values outside the 32-bit range change). To keep 64-bit data, call "
            "jax.config.update('jax_enable_x64', True) before creating arrays.",
            DtypeNarrowingWarning,
            stacklevel=caller_stacklevel(),
        )
    return result


def is_inexact(dtype: np.dtype[Any]) -> bool:
    """Floating point or complex, including bfloat16 and float8 (what ``Module.to`` casts)."""
    return bool(jnp.issubdtype(dtype, jnp.inexact))


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside this package."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and os.path.dirname(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level
