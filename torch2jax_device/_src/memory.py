"""Device memory: torch.cuda's figures from XLA's allocator and the CUDA driver; live arrays.

JAX reports allocator statistics per device as a dict whose keys vary by platform and
version (``None`` on the CPU). What each of XLA's figures means (its BFC allocator, the
GPU default):

=========================  ===================================================================
``bytes_in_use``           bytes of live allocations: arrays, and buffers of running programs
``peak_bytes_in_use``      the most ``bytes_in_use`` ever, for the whole process (XLA cannot
                           reset it)
``num_allocs``             allocations made so far (a running count, not the live ones)
``largest_alloc_size``     the largest single allocation so far
``bytes_limit``            the most the allocator may hand out: the pool's size, the memory
                           fraction of the card (75 % by default)
``pool_bytes``             bytes the allocator has taken from the driver: the whole
                           ``bytes_limit`` at the first operation when it preallocates (JAX's
                           default), else what it grew to
``peak_pool_bytes``        the most ``pool_bytes`` ever
``bytes_reserved``         bytes set aside through the allocator's reservation interface (0 on
                           GPUs in practice), with ``peak_bytes_reserved`` and
                           ``bytes_reservable_limit``
``largest_free_block_bytes``  the largest free contiguous block of the pool
=========================  ===================================================================

torch's meanings, and where they come from here:

* ``memory_reserved`` (what torch's caching allocator holds): ``pool_bytes`` when the
  pool grows as needed (``tj.configure(preallocate=False)``: the same meaning as
  torch's). When the pool was preallocated whole, the whole pool says nothing about the
  program, so it is the part of the pool the allocator has handed out at its most
  (``peak_bytes_in_use``): what a grow-as-needed cache would hold.
* Peaks (``max_memory_allocated``, ``max_memory_reserved``) can be reset: XLA's own peak
  cannot, so a reset records it, and the peak since is XLA's when XLA's has grown past
  the recorded one (exact), else the highest figure any memory call has seen since the
  reset (a lower bound: a peak between two calls that stays under the old one is missed).
* The card's free and total memory (``mem_get_info``, ``total_memory``) come from the
  CUDA driver itself (``libcuda``: ``cuMemGetInfo`` and ``cuDeviceTotalMem``, what
  ``cudaMemGetInfo`` and torch report), for the device of the same CUDA ordinal (so
  ``CUDA_VISIBLE_DEVICES`` means the same to both). Without the driver library (or for
  another platform) they fall back to JAX's pool: ``bytes_limit`` and what of it is not
  in use.

No figure here raises for a device that exists: a missing figure is 0 (as torch's CPU
build answers).
"""

from __future__ import annotations

import ctypes
import dataclasses
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import jax

from . import platforms
from .device import Device, DeviceLike, resolve

__all__ = [
    "ArrayReport",
    "card_memory",
    "card_total",
    "live_arrays",
    "pool_memory",
    "raw_stats",
    "reset_peaks",
    "stats",
    "torch_style_stats",
    "track_arrays",
]

# torch.cuda.memory_stats() key -> JAX memory_stats() keys, first present wins. The two
# reserved figures and both peaks are worked out by `stats` (see the module's text).
_TORCH_KEYS: dict[str, tuple[str, ...]] = {
    "allocated_bytes.all.current": ("bytes_in_use",),
    "allocated_bytes.all.peak": ("peak_bytes_in_use",),
    "reserved_bytes.all.current": ("pool_bytes", "bytes_reserved"),
    "reserved_bytes.all.peak": ("peak_pool_bytes", "peak_bytes_reserved"),
    "allocation.all.allocated": ("num_allocs",),
    "largest_alloc_size": ("largest_alloc_size",),
    "largest_free_block_bytes": ("largest_free_block_bytes",),
    "bytes_limit": ("bytes_limit",),
}
_ALLOCATED, _RESERVED = "allocated_bytes.all", "reserved_bytes.all"


def raw_stats(device: jax.Device) -> dict[str, int]:
    """``device.memory_stats()`` with integer values only; ``{}`` where JAX reports none."""
    stats = device.memory_stats() or {}
    return {key: int(value) for key, value in stats.items() if isinstance(value, int)}


def torch_style_stats(raw: dict[str, int]) -> dict[str, int]:
    """torch.cuda.memory_stats() keys for what JAX reports, then JAX's own as ``jax.<key>``.

    The figures as XLA reports them; ``stats`` applies torch's meanings of the reserved
    figure and of the peaks.

    Examples:
        >>> from torch2jax_device._src.memory import torch_style_stats
        >>> stats = torch_style_stats({"bytes_in_use": 512, "peak_bytes_in_use": 1024})
        >>> stats["allocated_bytes.all.current"], stats["jax.peak_bytes_in_use"]
        (512, 1024)
    """
    mapped: dict[str, int] = {}
    for torch_key, jax_keys in _TORCH_KEYS.items():
        value = next((raw[key] for key in jax_keys if raw.get(key, -1) >= 0), None)
        if value is not None:
            mapped[torch_key] = value
    mapped.update({f"jax.{key}": value for key, value in raw.items()})
    return mapped


@dataclasses.dataclass
class _Mark:
    """A reset peak: XLA's lifetime peak at the reset, and the highest figure seen since."""

    lifetime_at_reset: int
    highest_seen: int


# (device, "allocated_bytes.all" or "reserved_bytes.all") -> its mark since the last reset.
_MARKS: dict[tuple[jax.Device, str], _Mark] = {}
_MARKS_LOCK = threading.Lock()


def _reserved(raw: dict[str, int]) -> tuple[int, int] | None:
    """(current, lifetime peak) of what the allocator holds, in torch's sense, or ``None``."""
    pool, limit = raw.get("pool_bytes", -1), raw.get("bytes_limit", -1)
    if pool < 0:
        current, peak = raw.get("bytes_reserved", -1), raw.get("peak_bytes_reserved", -1)
        return None if current < 0 else (current, max(current, peak))
    if 0 <= limit <= pool:  # preallocated whole: the part ever handed out
        handed_out = max(raw.get("peak_bytes_in_use", 0), raw.get("bytes_in_use", 0))
        return handed_out, handed_out
    return pool, max(pool, raw.get("peak_pool_bytes", -1))


def _lifetime_figures(device: jax.Device) -> dict[str, int]:
    """torch-style figures of ``device`` with torch's reserved meaning, XLA's lifetime peaks."""
    raw = raw_stats(device)
    figures = torch_style_stats(raw)
    reserved = _reserved(raw)
    figures.pop(f"{_RESERVED}.current", None)
    figures.pop(f"{_RESERVED}.peak", None)
    if reserved is not None:
        figures[f"{_RESERVED}.current"], figures[f"{_RESERVED}.peak"] = reserved
    return figures


def stats(device: jax.Device) -> dict[str, int]:
    """torch.cuda.memory_stats() of ``device``, with torch's meanings (see the module).

    Every call also updates the peaks tracked since ``reset_peaks``.
    """
    figures = _lifetime_figures(device)
    with _MARKS_LOCK:
        for prefix in (_ALLOCATED, _RESERVED):
            mark = _MARKS.get((device, prefix))
            if mark is None or f"{prefix}.current" not in figures:
                continue
            current = figures[f"{prefix}.current"]
            lifetime = figures.get(f"{prefix}.peak", current)
            mark.highest_seen = max(mark.highest_seen, current)
            grown = lifetime > mark.lifetime_at_reset
            figures[f"{prefix}.peak"] = lifetime if grown else mark.highest_seen
    return figures


def reset_peaks(device: jax.Device) -> None:
    """Start the peaks of ``device`` again from what is in use now, as torch's reset does."""
    figures = _lifetime_figures(device)
    with _MARKS_LOCK:
        for prefix in (_ALLOCATED, _RESERVED):
            current = figures.get(f"{prefix}.current", 0)
            lifetime = figures.get(f"{prefix}.peak", current)
            _MARKS[(device, prefix)] = _Mark(lifetime_at_reset=lifetime, highest_seen=current)


# -- the card, as the CUDA driver reports it ------------------------------------------------

_DRIVER_LIBRARY = "libcuda.so.1"
_driver: ctypes.CDLL | None = None
_driver_loaded = False
_driver_lock = threading.Lock()


def _cuda_driver() -> ctypes.CDLL | None:
    """The CUDA driver library, initialised; ``None`` where it cannot be loaded."""
    global _driver, _driver_loaded
    with _driver_lock:
        if not _driver_loaded:
            _driver_loaded = True
            try:
                library = ctypes.CDLL(_DRIVER_LIBRARY)
                _driver = library if library.cuInit(0) == 0 else None
            except (OSError, AttributeError):
                _driver = None
        return _driver


def _cuda_ordinal(device: jax.Device) -> int | None:
    if platforms.platform_of(device) != "cuda":
        return None
    return platforms.device_index(device)


def _cuda_device(device: jax.Device) -> tuple[ctypes.CDLL, ctypes.c_int] | None:
    """(the driver library, its handle of ``device``), or ``None`` for a device that is
    not a CUDA GPU, without the driver library, or one the driver does not know."""
    ordinal = _cuda_ordinal(device)
    driver = _cuda_driver() if ordinal is not None else None
    if driver is None or ordinal is None:
        return None
    handle = ctypes.c_int()
    if driver.cuDeviceGet(ctypes.byref(handle), ordinal) != 0:
        return None
    return driver, handle


def card_total(device: jax.Device) -> int | None:
    """The card's memory in bytes as the driver reports it (``cuDeviceTotalMem``), or ``None``.

    ``None`` for a device that is not a CUDA GPU, or without the driver library.
    """
    found = _cuda_device(device)
    if found is None:
        return None
    driver, handle = found
    total = ctypes.c_size_t()
    if driver.cuDeviceTotalMem_v2(ctypes.byref(total), handle) != 0:
        return None
    return int(total.value)


def card_memory(device: jax.Device) -> tuple[int, int] | None:
    """``(free, total)`` bytes of the card as ``cudaMemGetInfo`` reports them, or ``None``.

    Asked of the driver in the device's primary context, the one JAX and torch use (it
    exists as soon as JAX has started the device, so asking creates nothing). ``None`` for
    a device that is not a CUDA GPU, or without the driver library.
    """
    found = _cuda_device(device)
    if found is None:
        return None
    driver, handle = found
    context = ctypes.c_void_p()
    if driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), handle) != 0:
        return None
    try:
        if driver.cuCtxPushCurrent_v2(context) != 0:
            return None
        try:
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            if driver.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) != 0:
                return None
            return int(free.value), int(total.value)
        finally:
            driver.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
    finally:
        driver.cuDevicePrimaryCtxRelease_v2(handle)


def pool_memory(device: jax.Device) -> tuple[int, int] | None:
    """``(free, total)`` of JAX's pool on ``device`` (``card_memory``'s fallback), or ``None``."""
    raw = raw_stats(device)
    limit = raw.get("bytes_limit", -1)
    if limit < 0:
        return None
    return max(limit - raw.get("bytes_in_use", 0), 0), limit


def live_arrays(device: DeviceLike | None = None) -> list[jax.Array]:
    """Every JAX array still alive, on every backend or with data on one device.

    ``jax.live_arrays()`` covers the default backend only; this covers all of them.
    A sharded array is listed once if any of its shards is on ``device``.

    Args:
        device: Anything [`tj.device`][torch2jax_device.Device] accepts; ``None`` for all.

    Examples:
        >>> import jax.numpy as jnp
        >>> import torch2jax_device as tj
        >>> x = jnp.ones(3)
        >>> any(a is x for a in tj.live_arrays("cpu"))
        True
    """
    target = None if device is None else resolve(device)
    return [
        array
        for platform in platforms.jax_backends()
        for array in jax.live_arrays(platform)
        if target is None or target in array.devices()
    ]


@dataclasses.dataclass
class ArrayReport:
    """The arrays a block of code created and left alive.

    [`tj.track_arrays`][torch2jax_device.track_arrays] yields it and fills it when the
    block ends. Printing it lists the count, the bytes, and the ten largest arrays.

    Attributes:
        device: The device tracked, or `None` for all.
        arrays: Arrays created inside the block that were still alive at its end.

    Examples:
        >>> import jax.numpy as jnp
        >>> import torch2jax_device as tj
        >>> with tj.track_arrays("cpu") as report:
        ...     kept = jnp.zeros(8)
        >>> print(report)
        1 array(s), 32 bytes left on cpu
          float32[8] on cpu
    """

    device: Device | None
    arrays: list[jax.Array] = dataclasses.field(default_factory=list)

    @property
    def nbytes(self) -> int:
        """Bytes those arrays hold on the tracked device (on all devices if untracked)."""
        total = 0
        for array in self.arrays:
            for shard in array.addressable_shards:
                if self.device is None or shard.device == self.device:
                    total += shard.data.nbytes
        return total

    def __str__(self) -> str:
        where = "all devices" if self.device is None else str(self.device)
        lines = [f"{len(self.arrays)} array(s), {self.nbytes} bytes left on {where}"]
        largest = sorted(self.arrays, key=lambda array: array.nbytes, reverse=True)
        for array in largest[:10]:
            placement = ", ".join(sorted(str(Device(d)) for d in array.devices()))
            lines.append(f"  {array.dtype}{list(array.shape)} on {placement}")
        if len(largest) > 10:
            lines.append(f"  ... and {len(largest) - 10} more")
        return "\n".join(lines)


@contextmanager
def track_arrays(device: DeviceLike | None = None) -> Iterator[ArrayReport]:
    """Report the arrays a block leaves alive on a device: a leak finder for ports.

    The report is filled when the block ends. Arrays that existed before the block, and
    arrays the block created and dropped, are not in it.

    Args:
        device: Anything [`tj.device`][torch2jax_device.Device] accepts; ``None`` for all.

    Examples:
        >>> import jax.numpy as jnp
        >>> import torch2jax_device as tj
        >>> cache = []
        >>> with tj.track_arrays("cpu") as report:
        ...     cache.append(jnp.zeros(256))
        ...     scratch = jnp.ones(1024) + 1
        ...     del scratch  # dropped: not reported
        >>> len(report.arrays), report.nbytes
        (1, 1024)
    """
    target = None if device is None else Device(device)
    # jax.Array is unhashable: remember ids, with weak references to tell reused ids apart.
    before = {id(array): weakref.ref(array) for array in live_arrays(target)}
    report = ArrayReport(device=None if target is None else Device(resolve(target)))
    yield report
    report.arrays = [
        array
        for array in live_arrays(target)
        if (seen := before.get(id(array))) is None or seen() is not array
    ]
