"""Room on a device: refuse a transfer that cannot fit, and explain one that ran out.

JAX's GPU allocator works inside a pool (``bytes_limit`` of ``Device.memory_stats()``),
set when the backend starts: 75 % of the card by default, ``XLA_CLIENT_MEM_FRACTION``
(or the deprecated ``XLA_PYTHON_CLIENT_MEM_FRACTION``) otherwise, the whole card under
``XLA_PYTHON_CLIENT_ALLOCATOR=platform``. A load that needs more than the pool has free
fails in JAX with ``RESOURCE_EXHAUSTED`` only once the allocation happens, after seconds
of reading. ``check_fits`` compares first; ``explained_oom`` turns JAX's error inside the
library's own transfers into [`tj.OutOfMemoryError`][torch2jax_device.OutOfMemoryError]
with the sizes and the fix. Devices that report no memory figures (JAX's CPU backend)
are never refused.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

import jax

from .errors import OutOfMemoryError

__all__ = ["check_fits", "explained_oom", "explained_oom_on", "free_bytes", "memory_stats"]

_GIB = 2**30


def memory_stats(device: jax.Device) -> dict[str, Any]:
    """``device.memory_stats()``, or ``{}`` where JAX reports none (the CPU backend)."""
    try:
        return dict(device.memory_stats() or {})
    except (jax.errors.JaxRuntimeError, NotImplementedError):
        return {}


def check_fits(device: jax.Device, nbytes: int, what: str) -> None:
    """Raise ``OutOfMemoryError`` if ``nbytes`` more cannot fit in ``device``'s free memory.

    ``what`` says what needs the room (``"loading 'model.safetensors'"``). Nothing happens
    where the device reports no limit.

    Examples:
        >>> import jax
        >>> from torch2jax_device._src.capacity import check_fits
        >>> check_fits(jax.devices("cpu")[0], 2**40, "a test")  # the CPU reports no limit
    """
    free, limit = _room(device)
    if free is not None and nbytes > free:
        raise OutOfMemoryError(_message(device, what, nbytes, free, limit))


def free_bytes(device: jax.Device) -> int | None:
    """The bytes ``check_fits`` would let a transfer to ``device`` take now, or ``None``
    where the device reports no limit (JAX's CPU backend)."""
    return _room(device)[0]


@contextlib.contextmanager
def explained_oom(device: jax.Device, nbytes: int, what: str) -> Iterator[None]:
    """Re-raise JAX's ``RESOURCE_EXHAUSTED`` inside the block as ``OutOfMemoryError``.

    The library's message (sizes, limit, its source, the fix) is chained from JAX's.
    """
    with explained_oom_on({device: nbytes}, what):
        yield


@contextlib.contextmanager
def explained_oom_on(needs: Mapping[jax.Device, int], what: str) -> Iterator[None]:
    """``explained_oom`` for a load spread over devices, ``needs[device]`` bytes on each.

    JAX's error does not say reliably which device ran out, so the message names the one
    with the least room left for its share (free bytes minus the bytes it needs).
    """
    try:
        yield
    except jax.errors.JaxRuntimeError as err:
        if "RESOURCE_EXHAUSTED" not in str(err):
            raise
        rooms = {device: _room(device) for device in needs}

        def spare(device: jax.Device) -> float:
            free = rooms[device][0]
            return float("inf") if free is None else free - needs[device]

        device = min(needs, key=spare)
        free, limit = rooms[device]
        raise OutOfMemoryError(_message(device, what, needs[device], free, limit)) from err


def _room(device: jax.Device) -> tuple[int | None, Any]:
    """``device``'s free bytes (``None`` where it reports no pool, or no positive limit)
    and its pool's limit."""
    stats = memory_stats(device)
    limit = stats.get("bytes_limit")
    if not isinstance(limit, int) or limit <= 0:
        return None, limit
    return max(limit - int(stats.get("bytes_in_use", 0)), 0), limit


def limit_source() -> str:
    """Which setting decides the device pool's size, as the environment says now."""
    allocator = os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "")
    if allocator == "platform":
        return "XLA_PYTHON_CLIENT_ALLOCATOR=platform (no pool: the card's memory)"
    for name in ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"):
        value = os.environ.get(name)
        if value:
            return f"{name}={value}"
    preallocate = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "")
    if preallocate in ("false", "False", "0"):
        return (
            "JAX's default fraction, 75 % of the card (XLA_CLIENT_MEM_FRACTION unset; "
            "XLA_PYTHON_CLIENT_PREALLOCATE=false only delays taking it)"
        )
    return "JAX's default fraction, 75 % of the card, preallocated (XLA_CLIENT_MEM_FRACTION unset)"


def _message(device: jax.Device, what: str, nbytes: int, free: int | None, limit: Any) -> str:
    room = (
        f"{_gib(free)} free of a {_gib(limit)} pool"
        if free is not None and isinstance(limit, int)
        else "no figures reported"
    )
    return (
        f"{device} is out of memory: {what} needs {_gib(nbytes)}, and the device has {room} "
        f"(the pool's size comes from {limit_source()}). Fix: load onto device='cpu' and "
        "move batches with tj.to_device, spread the arrays over several devices with a "
        "sharding, free arrays you no longer need, or start JAX with a larger pool "
        "(XLA_CLIENT_MEM_FRACTION, e.g. tj.configure(memory_fraction=0.9))"
    )


def _gib(nbytes: Any) -> str:
    return f"{nbytes / _GIB:.2f} GiB ({nbytes:,} bytes)"
