"""Device memory: torch.cuda-style statistics from ``Device.memory_stats()``, live arrays.

JAX reports allocator statistics per device as a dict whose keys vary by platform and
version (``bytes_in_use``, ``peak_bytes_in_use``, ``pool_bytes``, ...; ``None`` on
CPU). Everything here reads them defensively and names the torch equivalent.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import jax

from . import platforms
from .device import Device, DeviceLike, resolve

__all__ = ["ArrayReport", "live_arrays", "raw_stats", "torch_style_stats", "track_arrays"]

# torch.cuda.memory_stats() key -> JAX memory_stats() keys, first present wins.
_TORCH_KEYS: dict[str, tuple[str, ...]] = {
    "allocated_bytes.all.current": ("bytes_in_use",),
    "allocated_bytes.all.peak": ("peak_bytes_in_use",),
    "reserved_bytes.all.current": ("pool_bytes", "bytes_reserved"),
    "reserved_bytes.all.peak": ("peak_pool_bytes", "peak_bytes_reserved"),
    "allocation.all.current": ("num_allocs",),
    "largest_alloc_size": ("largest_alloc_size",),
    "largest_free_block_bytes": ("largest_free_block_bytes",),
    "bytes_limit": ("bytes_limit",),
}


def raw_stats(device: jax.Device) -> dict[str, int]:
    """``device.memory_stats()`` with integer values only; ``{}`` where JAX reports none."""
    stats = device.memory_stats() or {}
    return {key: int(value) for key, value in stats.items() if isinstance(value, int)}


def torch_style_stats(raw: dict[str, int]) -> dict[str, int]:
    """torch.cuda.memory_stats() keys for what JAX reports, then JAX's own as ``jax.<key>``.

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
