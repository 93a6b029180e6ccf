"""The arguments safetensors' verbs share, checked the same way on every path.

``device`` (``None`` means the CPU, as in safetensors), ``framework`` (accepted, never
obeyed: the results are JAX arrays), ``backend`` and ``staging_bytes``.
"""

from __future__ import annotations

import os
from typing import Any

import jax

from ..device import DeviceLike, resolve
from ..errors import CheckpointError, InvalidDeviceError
from .messages import shown
from .source import PathLike

__all__ = ["check_framework", "checked_staging", "maps_file", "resolve_target"]

# safetensors.safe_open's framework argument: every value it accepts, and its aliases.
_FRAMEWORKS = frozenset(
    {"pt", "torch", "np", "numpy", "flax", "jax", "tf", "tensorflow", "mlx", "paddle"}
)
# safetensors' backend argument: "mmap" maps the file, "pread" reads it.
_BACKENDS = ("mmap", "pread")


def resolve_target(device: DeviceLike | None) -> jax.Device:
    """Where a loader puts its arrays: ``device``, with ``None`` meaning the CPU."""
    return resolve("cpu" if device is None else device)


def check_framework(path: PathLike, framework: Any) -> None:
    """Refuse a ``framework`` safetensors does not know (often a device in its place)."""
    if framework is not None and framework not in _FRAMEWORKS:
        raise InvalidDeviceError(
            f"safe_open({shown(os.fspath(path))}, {shown(framework)}): the second argument "
            f"is safetensors' framework ({', '.join(sorted(_FRAMEWORKS))}), and "
            "tj.safe_open always returns JAX arrays. To choose where they go, pass "
            f"device={shown(framework)}"
        )


def maps_file(backend: str) -> bool:
    """Whether ``backend`` (safetensors' argument) allows arrays over a memory map."""
    if backend not in _BACKENDS:
        raise InvalidDeviceError(
            f"backend={shown(backend)} is not one of safetensors' backends: 'mmap' maps "
            "the file (the default), 'pread' reads it into memory the arrays own"
        )
    return backend == "mmap"


def checked_staging(staging_bytes: int) -> int:
    """``staging_bytes``, if it is a positive number of bytes."""
    if type(staging_bytes) is not int or staging_bytes < 1:
        raise CheckpointError(
            f"staging_bytes={shown(staging_bytes)}: give the host memory for staging "
            "transfers as a positive number of bytes (256 * 2**20 by default)"
        )
    return staging_bytes
