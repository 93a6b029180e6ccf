"""Pinned host memory: allocated in a device's ``pinned_host`` memory kind, and pooled.

Pinned memory comes from XLA's host allocator, capped at ``XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB``
(64 GB by default); allocating it costs a dispatch and a page-locking, so the buffers
that carry pieces to a device are reused: ``POOL`` keeps, per device, at most
``POOL_BUFFERS`` buffers of a size and ``POOL_BYTES`` in all, and drops them after
``IDLE_SECONDS`` unused. ``pinned_array`` allocates an array there directly (raising
``OutOfMemoryError`` with the fix when the allocator is full), ``writable_bytes`` is its
memory as a writable NumPy array. ``host_staging`` decides the routes that use them.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from .errors import OutOfMemoryError

__all__ = [
    "IDLE_SECONDS",
    "PINNED",
    "POOL",
    "POOL_BUFFERS",
    "POOL_BYTES",
    "Buffer",
    "Cancellable",
    "Schedule",
    "empty_in",
    "has_pinned_host",
    "pinned_array",
    "writable_bytes",
]

PINNED = "pinned_host"
#: Pinned buffers of a size kept per device (and pieces in flight per transfer): one
#: being filled, two transferring.
POOL_BUFFERS = 3
#: Pinned bytes the pool keeps per device: a checkpoint load's staging buffers (3 of
#: 85 MiB by default) or eight whole pieces.
POOL_BYTES = 256 * 2**20
#: Pooled buffers unused this long are returned to XLA's pinned allocator.
IDLE_SECONDS = 10.0


def has_pinned_host(device: jax.Device) -> bool:
    """Whether ``device`` lists a ``pinned_host`` memory kind."""
    try:
        return any(memory.kind == PINNED for memory in device.addressable_memories())
    except (jax.errors.JaxRuntimeError, NotImplementedError):
        return False


class Buffer(NamedTuple):
    """A pinned host buffer: the array that is sent, and a writable view of its bytes."""

    array: jax.Array  # uint8 in pinned_host memory
    view: np.ndarray[Any, np.dtype[np.uint8]]


class Cancellable(Protocol):
    """What a ``Schedule`` returns: a pending call that can be called off."""

    def cancel(self) -> None: ...


#: Runs a callback once after a delay in seconds, and returns its handle.
Schedule = Callable[[float, Callable[[], None]], Cancellable]


def _daemon_timer(delay: float, callback: Callable[[], None]) -> Cancellable:
    """``callback`` on a daemon thread after ``delay`` seconds: the pool's real schedule."""
    timer = threading.Timer(delay, callback)
    timer.daemon = True
    timer.start()
    return timer


class _Pool:
    """Pinned buffers per device, each of one exact size, reused, dropped when idle.

    A buffer is taken at the size of what it carries (a piece: ``device_put`` sends the
    whole buffer, so a larger one would move bytes nobody asked for). Given back, it is
    kept for a later take of that size, at most ``POOL_BUFFERS`` of a size and
    ``POOL_BYTES`` on a device: past either, the buffers given back longest ago go back
    to XLA's allocator first. ``clock`` (seconds) and ``schedule`` measure the idle
    time; tests give a pool a manual clock instead of the wall clock and a real timer,
    so that no test depends on when a timer fires.
    """

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, schedule: Schedule = _daemon_timer
    ) -> None:
        self._clock = clock
        self._schedule = schedule
        self._lock = threading.Lock()
        self._free: dict[jax.Device, list[Buffer]] = {}  # per device, oldest first
        self._last_use = 0.0
        self._timer: Cancellable | None = None
        self._timers = itertools.count()  # which timer is the current one
        self._current = -1

    def take(self, device: jax.Device, nbytes: int) -> Buffer:
        """A pinned buffer of exactly ``nbytes`` on ``device``: a kept one, else a new one.

        Raises:
            OutOfMemoryError: XLA's pinned host allocator is full.
        """
        with self._lock:
            free = self._free.get(device, [])
            for index in range(len(free) - 1, -1, -1):  # the most recently given first
                if free[index].view.nbytes == nbytes:
                    return free.pop(index)
        return Buffer(*_pinned_empty(device, nbytes))

    def give(self, device: jax.Device, buffer: Buffer) -> None:
        """Return ``buffer`` (its transfers complete) for reuse."""
        with self._lock:
            free = self._free.setdefault(device, [])
            free.append(buffer)
            size = buffer.view.nbytes
            while sum(kept.view.nbytes == size for kept in free) > POOL_BUFFERS:
                free.pop(next(i for i, kept in enumerate(free) if kept.view.nbytes == size))
            while sum(kept.view.nbytes for kept in free) > POOL_BYTES:
                free.pop(0)
            self._last_use = self._clock()
            if self._timer is None:
                self._start_timer(IDLE_SECONDS)

    def clear(self) -> None:
        """Drop every pooled buffer (XLA's allocator gets their memory back) and the idle
        timer with them: the next buffer given back starts a timer of ``IDLE_SECONDS``."""
        with self._lock:
            self._free.clear()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
                self._current = -1

    def held(self) -> int:
        """How many buffers the pool holds."""
        with self._lock:
            return sum(len(free) for free in self._free.values())

    def kept(self, device: jax.Device) -> list[int]:
        """The sizes of the buffers the pool holds for ``device``, given back longest ago
        first."""
        with self._lock:
            return [kept.view.nbytes for kept in self._free.get(device, [])]

    def _start_timer(self, delay: float) -> None:
        number = self._current = next(self._timers)
        self._timer = self._schedule(delay, lambda: self._expire(number))

    def _expire(self, number: int) -> None:
        with self._lock:
            if number != self._current:
                return  # cancelled by clear() while it waited for the lock
            idle = self._clock() - self._last_use
            if idle >= IDLE_SECONDS:
                self._free.clear()
                self._timer = None
                self._current = -1
            else:
                self._start_timer(IDLE_SECONDS - idle)


POOL = _Pool()


@functools.cache
def empty_in(sharding: jax.sharding.Sharding) -> Any:
    """A jitted ``(shape, dtype) -> uninitialized array`` made directly in ``sharding``."""
    return jax.jit(jnp.empty, static_argnums=(0, 1), out_shardings=sharding)


def _pinned_empty(
    device: jax.Device, nbytes: int
) -> tuple[jax.Array, np.ndarray[Any, np.dtype[np.uint8]]]:
    """A uint8 array of ``nbytes`` in ``device``'s pinned host memory, and a writable view."""
    array = pinned_array(device, (nbytes,), np.dtype(np.uint8))
    return array, writable_bytes(array)


def pinned_array(device: jax.Device, shape: tuple[int, ...], dtype: np.dtype[Any]) -> jax.Array:
    sharding = jax.sharding.SingleDeviceSharding(device, memory_kind=PINNED)
    nbytes = math.prod(shape) * dtype.itemsize
    try:
        array: jax.Array = empty_in(sharding)(shape, dtype)
        array.block_until_ready()
    except jax.errors.JaxRuntimeError as err:
        if "RESOURCE_EXHAUSTED" not in str(err):
            raise
        raise OutOfMemoryError(
            f"pinned host memory of {device} is exhausted: {nbytes:,} bytes more do not fit "
            "XLA's pinned host allocator, which is capped at XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB "
            f"(now {os.environ.get('XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB', 'unset: 64 GB')}). "
            "Fix: pin batches rather than whole datasets and drop pinned arrays you no "
            "longer need, or raise the cap by setting XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB "
            "before JAX starts"
        ) from err
    return array


def writable_bytes(array: jax.Array) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """The bytes of the host-resident ``array`` as a writable NumPy array (no copy)."""
    if not array.nbytes:
        return np.empty(0, np.uint8)
    raw = (ctypes.c_uint8 * array.nbytes).from_address(array.unsafe_buffer_pointer())
    raw.owner = array  # type: ignore[attr-defined]  # views keep the memory alive
    return np.ctypeslib.as_array(raw)
