"""`torch.cuda` for JAX: availability, current device, properties and memory of CUDA GPUs.

Backed by JAX's `cuda` backend. Every function opens with the `torch.cuda` function it
stands for; the JAX differences are in its Note. The predicates
([`is_available`][torch2jax_device.cuda.is_available],
[`device_count`][torch2jax_device.cuda.device_count],
[`is_bf16_supported`][torch2jax_device.cuda.is_bf16_supported]) and the memory
counters ([`memory_allocated`][torch2jax_device.cuda.memory_allocated], ...) never raise
on a machine without a GPU; the rest raise
[`tj.DeviceUnavailableError`][torch2jax_device.DeviceUnavailableError], as torch's do.
The first call starts JAX's backends (JAX's rule: finding out whether a GPU exists
creates the CUDA context), so make start-up settings
([`tj.configure`][torch2jax_device.configure], `JAX_PLATFORMS`) first.

Examples:
    >>> import torch2jax_device as tj
    >>> device = tj.device("cuda" if tj.cuda.is_available() else "cpu")
    >>> device.type in ("cuda", "cpu")
    True
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import jax

from ._src import memory as _memory
from ._src import platforms as _platforms
from ._src import runtime as _runtime
from ._src import startup as _startup
from ._src.device import Device, for_platform
from ._src.errors import (
    ConfigError,
    DeviceUnavailableError,
    NoSuchAttributeError,
    SeedError,
    UnsupportedOperationError,
)
from ._src.runtime import DeviceProperties

if TYPE_CHECKING:
    from ._src.device import DeviceLike

__all__ = [
    "DeviceProperties",
    "current_device",
    "device",
    "device_count",
    "empty_cache",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_peak_memory_stats",
    "set_device",
    "set_per_process_memory_fraction",
    "synchronize",
]

_PLATFORM = "cuda"
_WHAT = "CUDA"


def is_available() -> bool:
    """Equivalent to `torch.cuda.is_available`.

    Whether JAX can use a CUDA GPU in this process. Never raises.

    Note:
        A CUDA runtime JAX cannot start answers `False` with a `RuntimeWarning` giving
        JAX's reason. The first call starts JAX's backends, so make start-up settings
        before it.

    Examples:
        >>> import torch2jax_device as tj
        >>> device = tj.device("cuda" if tj.cuda.is_available() else "cpu")
        >>> isinstance(tj.cuda.is_available(), bool)
        True
    """
    return bool(_runtime.quiet_local_devices(_PLATFORM))


def device_count() -> int:
    """Equivalent to `torch.cuda.device_count`.

    How many CUDA GPUs this process can use; 0 without one. Never raises.

    Note:
        It counts this process's GPUs, as torch does; `jax.device_count()` counts the
        devices of every process of a multi-process job, on the default backend only.

    Examples:
        >>> import torch2jax_device as tj
        >>> tj.cuda.device_count() >= 0
        True
    """
    return _runtime.device_count(_PLATFORM)


def current_device() -> int:
    """Equivalent to `torch.cuda.current_device`.

    The index of this thread's current CUDA device: the lowest index until
    [`set_device`][torch2jax_device.cuda.set_device] or
    [`tj.cuda.device`][torch2jax_device.cuda.device] changes it.

    Note:
        JAX has no current device; torch2jax_device keeps one per thread, as CUDA does,
        and an unindexed `tj.device("cuda")` resolves to it.

    Raises:
        DeviceUnavailableError: there is no CUDA GPU.

    Examples:
        >>> import torch2jax_device as tj
        >>> if tj.cuda.is_available():
        ...     index = tj.cuda.current_device()
        ...     assert tj.device("cuda", index).jax_device == tj.device("cuda").jax_device
    """
    return _runtime.current_index(_PLATFORM, _WHAT)


def set_device(device: DeviceLike) -> None:
    """Equivalent to `torch.cuda.set_device`.

    Set this thread's current CUDA device: unindexed `tj.device("cuda")` and the
    `device=None` arguments of `tj.cuda` resolve to it. A negative index is a no-op, as in
    torch; `None`, an unindexed device and a non-integer are refused, as torch refuses them.

    Note:
        The setting is per thread, like CUDA's current device. It places nothing by itself:
        JAX arrays go where [`tj.set_default_device`][torch2jax_device.set_default_device] or
        an explicit device sends them.

    Args:
        device: An index, `"cuda:N"`, a `tj.device`, `torch.device` or `jax.Device`.

    Raises:
        DeviceUnavailableError: there is no CUDA GPU, or not that many.
        InvalidDeviceError: `device` is not a CUDA device, or has no index (`None`,
            `"cuda"`, `1.5`): a `ValueError` with torch's message.

    Examples:
        >>> import torch2jax_device as tj
        >>> if tj.cuda.device_count() > 1:
        ...     tj.cuda.set_device(1)
        >>> try:
        ...     tj.cuda.set_device("cpu")
        ... except ValueError as error:  # torch raises ValueError here too
        ...     print(error)
        Expected a cuda device, but got: cpu
    """
    _runtime.require_index(device, _PLATFORM)
    _runtime.set_current(device, _PLATFORM, _WHAT)


class device(_runtime.CurrentDeviceContext):  # torch's name
    """Equivalent to `torch.cuda.device`.

    Context manager that makes a CUDA device the current one for a block, then restores
    the previous one (also on exceptions).

    Note:
        Like [`set_device`][torch2jax_device.cuda.set_device], it changes which GPU an
        unindexed `"cuda"` means; to make new arrays land on a device, use
        `with tj.device("cuda:1"):` instead.

    Args:
        device: An index, `"cuda:N"` or device object; a negative index or `None`
            does nothing.

    Examples:
        >>> import torch2jax_device as tj
        >>> if tj.cuda.device_count() > 1:
        ...     with tj.cuda.device(1):
        ...         assert tj.cuda.current_device() == 1
        >>> with tj.cuda.device(None):  # changes nothing, as in torch
        ...     pass
    """

    _what = _WHAT

    def _platform(self) -> str:
        return _PLATFORM


def get_device_name(device: DeviceLike | None = None) -> str:
    """Equivalent to `torch.cuda.get_device_name`.

    The GPU's name, e.g. `"NVIDIA H100 80GB HBM3"`.

    Note:
        It is JAX's `device_kind`, which is the name torch reports.

    Raises:
        DeviceUnavailableError: there is no such CUDA GPU.

    Examples:
        >>> import torch2jax_device as tj
        >>> if tj.cuda.is_available():
        ...     assert tj.cuda.get_device_name().startswith("NVIDIA")
    """
    return get_device_properties(device).name


def get_device_properties(device: DeviceLike | None = None) -> DeviceProperties:
    """Equivalent to `torch.cuda.get_device_properties`.

    Name, memory, SM count and compute capability of a GPU, as a
    [`DeviceProperties`][torch2jax_device.cuda.DeviceProperties].

    Note:
        `total_memory` is the card's memory as the CUDA driver reports it, as in torch
        (JAX's pool, the preallocated share, when the driver library cannot be loaded).

    Raises:
        DeviceUnavailableError: there is no such CUDA GPU.

    Examples:
        >>> import torch2jax_device as tj
        >>> if tj.cuda.is_available():
        ...     props = tj.cuda.get_device_properties(0)
        ...     assert props.type == "cuda" and props.index == 0
    """
    return _runtime.properties(_runtime.device_for(device, _PLATFORM, _WHAT))


def get_device_capability(device: DeviceLike | None = None) -> tuple[int, int]:
    """Equivalent to `torch.cuda.get_device_capability`.

    The compute capability `(major, minor)` of a GPU, e.g. `(9, 0)` for an H100.

    Raises:
        DeviceUnavailableError: there is no such CUDA GPU, or JAX does not report it.

    Examples:
        >>> import torch2jax_device as tj
        >>> if tj.cuda.is_available():
        ...     major, minor = tj.cuda.get_device_capability()
        ...     tensor_cores = (major, minor) >= (7, 0)
    """
    props = get_device_properties(device)
    if props.major is None or props.minor is None:
        raise DeviceUnavailableError(
            f"JAX reports no compute capability for {props.type}:{props.index} ({props.name})."
        )
    return props.major, props.minor


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Equivalent to `torch.cuda.is_bf16_supported`.

    Whether the current CUDA GPU can compute in bfloat16; `False` without a GPU. Never
    raises.

    Note:
        XLA runs bfloat16 on every CUDA GPU, emulating it before compute capability 8.0
        (Ampere); `including_emulation=False` asks for native support.

    Examples:
        >>> import jax.numpy as jnp
        >>> import torch2jax_device as tj
        >>> dtype = jnp.bfloat16 if tj.cuda.is_bf16_supported() else jnp.float32
    """
    if not is_available():
        return False
    if including_emulation:
        return True
    major = get_device_properties().major
    return major is not None and major >= 8


def synchronize(device: DeviceLike | None = None) -> None:
    """Equivalent to `torch.cuda.synchronize`.

    Wait for all work on a CUDA GPU.

    Note:
        JAX has no device-wide barrier: this waits for every live array on the device
        (every result the program can still see) and for pending JAX effects. To wait
        for one result, `jax.block_until_ready(x)` is cheaper.

    Raises:
        DeviceUnavailableError: there is no such CUDA GPU.

    Examples:
        >>> import torch2jax_device as tj
        >>> if tj.cuda.is_available():
        ...     tj.cuda.synchronize()  # e.g. before reading a timer
    """
    _runtime.synchronize(_runtime.device_for(device, _PLATFORM, _WHAT))


def memory_stats(device: DeviceLike | None = None) -> dict[str, int]:
    """Equivalent to `torch.cuda.memory_stats`.

    Allocator statistics of a CUDA GPU; `{}` without a GPU, as torch's CPU build answers.

    Note:
        torch's keys for what JAX reports (`allocated_bytes.all.current` from
        `bytes_in_use`, `allocated_bytes.all.peak` since the last
        [`reset_peak_memory_stats`][torch2jax_device.cuda.reset_peak_memory_stats],
        `reserved_bytes.all.current` as [`memory_reserved`][torch2jax_device.cuda.memory_reserved]
        reports it, `allocation.all.allocated` from `num_allocs`, ...), then every figure
        of JAX's `Device.memory_stats()` as `jax.<key>` (their meanings:
        [GPU memory](memory.md#what-each-figure-means)). torch's per-pool and per-size
        keys have no JAX source and are absent.

    Raises:
        InvalidDeviceError: `device` is not a CUDA device (a `ValueError`, as torch's).

    Examples:
        >>> import torch2jax_device as tj
        >>> stats = tj.cuda.memory_stats()
        >>> stats.get("allocated_bytes.all.current", 0) >= 0
        True
    """
    if not is_available():
        return {}
    return _memory.stats(_device(device))


def _stat(device: DeviceLike | None, key: str) -> int:
    return memory_stats(device).get(key, 0)


def memory_allocated(device: DeviceLike | None = None) -> int:
    """Equivalent to `torch.cuda.memory_allocated`.

    Bytes JAX arrays occupy on a CUDA GPU; 0 without one.

    Note:
        JAX's `bytes_in_use` also counts buffers of compiled programs and arrays no Python
        object holds any more until the garbage collector frees them;
        [`tj.track_arrays`][torch2jax_device.track_arrays] tells which arrays a block left.

    Examples:
        >>> import torch2jax_device as tj
        >>> tj.cuda.memory_allocated() >= 0
        True
    """
    return _stat(device, "allocated_bytes.all.current")


def max_memory_allocated(device: DeviceLike | None = None) -> int:
    """Equivalent to `torch.cuda.max_memory_allocated`.

    The most bytes ever in use on a CUDA GPU in this process; 0 without one.

    Note:
        Since the last
        [`reset_peak_memory_stats`][torch2jax_device.cuda.reset_peak_memory_stats], as in
        torch. XLA's own peak cannot be reset, so after a reset this is XLA's peak once it
        has grown past the one at the reset (exact), and until then the highest figure a
        memory call has seen since: a peak between two calls that stays below the old
        one is missed.

    Examples:
        >>> import torch2jax_device as tj
        >>> tj.cuda.max_memory_allocated() >= tj.cuda.memory_allocated()
        True
    """
    return _stat(device, "allocated_bytes.all.peak")


def memory_reserved(device: DeviceLike | None = None) -> int:
    """Equivalent to `torch.cuda.memory_reserved`.

    Bytes JAX's allocator holds for the program on a CUDA GPU; 0 without one.

    Note:
        With `tj.configure(preallocate=False)` the pool grows as needed, as torch's cache
        does, and this is the pool (`pool_bytes`). With preallocation (JAX's default) the
        whole pool is taken at the first operation, which says nothing about the program:
        this is then the part of the pool the allocator has handed out at its most
        (`peak_bytes_in_use`), what a grow-as-needed cache would hold. The whole pool is
        `memory_stats()["jax.pool_bytes"]`, and the card's free memory
        ([`mem_get_info`][torch2jax_device.cuda.mem_get_info]) shows it taken.

    Examples:
        >>> import torch2jax_device as tj
        >>> tj.cuda.memory_reserved() >= 0
        True
    """
    return _stat(device, "reserved_bytes.all.current")


def max_memory_reserved(device: DeviceLike | None = None) -> int:
    """Equivalent to `torch.cuda.max_memory_reserved`.

    The most bytes JAX's allocator ever held on a CUDA GPU; 0 without one.

    Note:
        Since the last
        [`reset_peak_memory_stats`][torch2jax_device.cuda.reset_peak_memory_stats], as in
        torch, tracked as for
        [`max_memory_allocated`][torch2jax_device.cuda.max_memory_allocated].

    Examples:
        >>> import torch2jax_device as tj
        >>> tj.cuda.max_memory_reserved() >= tj.cuda.memory_reserved()
        True
    """
    return _stat(device, "reserved_bytes.all.peak")


def mem_get_info(device: DeviceLike | None = None) -> tuple[int, int]:
    """Equivalent to `torch.cuda.mem_get_info`.

    `(free, total)` bytes of a CUDA GPU, as the driver reports them (`cudaMemGetInfo`).

    Note:
        Asked of the CUDA driver (`libcuda`), as torch does: the whole card, so memory
        JAX preallocated counts as used. Where the driver library cannot be loaded, it
        falls back to JAX's pool: `total` is the pool's size (`bytes_limit`, the
        preallocated fraction) and `free` what of it is not in use.

    Raises:
        DeviceUnavailableError: there is no such CUDA GPU.
        InvalidDeviceError: `device` is not a CUDA device (a `ValueError`, as torch's).

    Examples:
        >>> import torch2jax_device as tj
        >>> if tj.cuda.is_available():
        ...     free, total = tj.cuda.mem_get_info()
        ...     assert 0 <= free <= total
        >>> try:
        ...     tj.cuda.mem_get_info("cpu")
        ... except ValueError as error:  # torch's error and message
        ...     print(error)
        Expected a cuda device, but got: cpu
    """
    target = _device(device, kind_first=True)
    figures = _memory.card_memory(target) or _memory.pool_memory(target)
    if figures is None:
        raise UnsupportedOperationError(
            f"neither the CUDA driver nor JAX reports the memory of {Device(target)} "
            "(libcuda.so.1 cannot be loaded and memory_stats() has no bytes_limit)"
        )
    return figures


def memory_summary(device: DeviceLike | None = None, abbreviated: bool = False) -> str:
    """Equivalent to `torch.cuda.memory_summary`.

    A readable table of a CUDA GPU's memory figures, in MiB.

    Note:
        The table lists the torch-named figures of
        [`memory_stats`][torch2jax_device.cuda.memory_stats]; torch's longer table has
        rows JAX keeps no figures for. `abbreviated` is accepted for torch compatibility.

    Raises:
        DeviceUnavailableError: there is no such CUDA GPU.
        InvalidDeviceError: `device` is not a CUDA device (a `ValueError`, as torch's).

    Examples:
        >>> import torch2jax_device as tj
        >>> if tj.cuda.is_available():
        ...     assert tj.cuda.memory_summary().startswith("JAX memory summary")
    """
    target = _device(device, kind_first=True)
    stats = memory_stats(target)
    rows = [(key, value) for key, value in stats.items() if not key.startswith("jax.")]
    width = max((len(key) for key, _ in rows), default=0)
    lines = [f"JAX memory summary, {Device(target)} ({target.device_kind})"]
    lines += [f"  {key.ljust(width)}  {value / 2**20:12.1f} MiB" for key, value in rows]
    if not rows:
        lines.append("  JAX reports no memory statistics for this device")
    return "\n".join(lines)


def reset_peak_memory_stats(device: DeviceLike | None = None) -> None:
    """Equivalent to `torch.cuda.reset_peak_memory_stats`.

    Start the peaks ([`max_memory_allocated`][torch2jax_device.cuda.max_memory_allocated],
    [`max_memory_reserved`][torch2jax_device.cuda.max_memory_reserved]) again from what
    is in use now.

    Note:
        XLA's own peak (`memory_stats()["jax.peak_bytes_in_use"]`) lasts for the
        process; this library records it at the reset and tracks the peak since (see
        [`max_memory_allocated`][torch2jax_device.cuda.max_memory_allocated] for what
        that can and cannot see).

    Raises:
        DeviceUnavailableError: there is no such CUDA GPU.
        InvalidDeviceError: `device` is not a CUDA device (a `ValueError`, as torch's).

    Examples:
        >>> import torch2jax_device as tj
        >>> if tj.cuda.is_available():
        ...     tj.cuda.reset_peak_memory_stats()
        ...     assert tj.cuda.max_memory_allocated() >= tj.cuda.memory_allocated()
    """
    _memory.reset_peaks(_device(device, kind_first=True))


def empty_cache() -> None:
    """Equivalent to `torch.cuda.empty_cache`.

    Free what JAX can free without touching live data: runs the garbage collector
    (dropping unreachable arrays) and `jax.clear_caches()` (compiled programs and their
    constants).

    Note:
        It never deletes arrays the program still references, and it cannot hand the
        allocator's pool back to the driver: with JAX's default BFC allocator the pool
        stays reserved ([`memory_reserved`][torch2jax_device.cuda.memory_reserved] does not
        drop). Only `tj.configure(allocator="platform")` returns memory, at a speed cost.

    Examples:
        >>> import torch2jax_device as tj
        >>> tj.cuda.empty_cache()
    """
    gc.collect()
    jax.clear_caches()


def set_per_process_memory_fraction(fraction: float, device: DeviceLike | None = None) -> None:
    """Equivalent to `torch.cuda.set_per_process_memory_fraction`.

    Cap the share of GPU memory JAX may use.

    Note:
        JAX applies one fraction to every GPU and reads it when it starts: this is
        `tj.configure(memory_fraction=fraction)` and must run before anything touches a
        device, where torch accepts it at any time and per device.

    Raises:
        AlreadyInitializedError: JAX's backends are already running.
        ConfigError: `fraction` outside (0, 1], or a device other than the first GPU.
        InvalidDeviceError: a device that is not a GPU (`"cpu"`), as torch's ValueError.

    Examples:
        >>> import torch2jax_device as tj
        >>> tj.cuda.set_per_process_memory_fraction(0.5)  # doctest: +SKIP
        >>> try:
        ...     tj.cuda.set_per_process_memory_fraction(1.5)
        ... except tj.ConfigError as error:
        ...     print(error)  # doctest: +ELLIPSIS
        memory_fraction must be in (0, 1], got 1.5: it is the share of the GPU's memory ...
    """
    if device is not None:
        named = for_platform(_PLATFORM, device, _WHAT)  # torch's "Expected a cuda device"
        if named.index not in (None, 0):
            raise ConfigError(
                f"JAX applies one memory fraction to every GPU; cannot set it for {named} "
                "alone. Fix: call it without a device (or with device=0), for every GPU"
            )
    _startup.configure(memory_fraction=fraction)


def _device(device: DeviceLike | None, *, kind_first: bool = False) -> jax.Device:
    return _runtime.device_for(device, _PLATFORM, _WHAT, kind_first=kind_first)


def manual_seed(seed: int) -> None:
    """Equivalent to `torch.cuda.manual_seed`.

    Checks the seed as torch does (anything ``int()`` takes) and seeds nothing: JAX
    has no per-device generators. Random numbers come from keys, and a key made with
    ``jax.random.key(seed)`` gives the same numbers on every device.

    Args:
        seed: The seed, as torch takes it.

    Raises:
        SeedError: ``int(seed)`` fails, or the seed is outside torch's 64-bit range (a
            ``ValueError`` and ``TypeError``, as torch's).

    Examples:
        >>> import jax
        >>> import torch2jax_device as tj
        >>> tj.cuda.manual_seed(0)
        >>> key = jax.random.key(0)  # what seeds JAX's random numbers

    Note:
        torch itself ignores this call on a machine without CUDA; a ported script that
        no longer runs torch on the GPU has no CUDA generator left to seed. Seed the
        global torch generator (``torch.manual_seed``) for torch code that remains,
        and create JAX keys after ``init_process_group`` (a key is an array: it starts
        JAX).
    """
    _seed(seed, "manual_seed")


def manual_seed_all(seed: int) -> None:
    """Equivalent to `torch.cuda.manual_seed_all`.

    Like [`tj.cuda.manual_seed`][torch2jax_device.cuda.manual_seed]: the seed is
    checked as torch checks it and nothing is seeded, since JAX's random numbers come
    from keys, the same on every device.

    Args:
        seed: The seed, as torch takes it.

    Raises:
        SeedError: ``int(seed)`` fails, or the seed is outside torch's 64-bit range (a
            ``ValueError`` and ``TypeError``, as torch's).

    Examples:
        >>> import torch2jax_device as tj
        >>> tj.cuda.manual_seed_all(1337)

    Note:
        See [`tj.cuda.manual_seed`][torch2jax_device.cuda.manual_seed].
    """
    _seed(seed, "manual_seed_all")


# The seeds torch's generators take: a signed or unsigned 64-bit integer.
_SEED_RANGE = range(-(2**63), 2**64)


def _seed(seed: object, function: str) -> None:
    try:
        number = int(seed)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite float
        raise SeedError(
            f"tj.cuda.{function}: the seed must be an integer, got {seed!r}; pass an int, "
            f"e.g. tj.cuda.{function}(0), and seed JAX with jax.random.key(seed)"
        ) from None
    if number not in _SEED_RANGE:
        raise SeedError(
            f"tj.cuda.{function}: Overflow when unpacking long long: a seed of "
            f"{number.bit_length()} bits ({seed!r:.40}) is outside the 64-bit range torch's "
            "generators take (-2**63 to 2**64 - 1); pass a seed in that range"
        )


def is_initialized() -> bool:
    """Equivalent to `torch.cuda.is_initialized`.

    Whether JAX has started a CUDA backend in this process. Never starts JAX itself, so
    it is safe before ``tj.configure`` and ``init_process_group``.

    Examples:
        >>> import torch2jax_device as tj
        >>> tj.cuda.is_initialized() in (True, False)
        True

    Note:
        JAX starts every backend at once, at the first device query or array, where
        torch initializes CUDA at its first CUDA call; after that, this is ``True``
        exactly when JAX has a CUDA GPU (``tj.cuda.is_available()``).
    """
    return _platforms.backends_initialized() and _PLATFORM in _platforms.jax_backends()


def __getattr__(name: str) -> object:
    """``tj.cuda.<name>`` for a ``torch.cuda`` name this module does not map: the
    library's error, naming the torch name and the fix, instead of Python's."""
    raise NoSuchAttributeError.unmapped("cuda", name)
