"""Per-platform runtime queries shared by ``tj.cuda`` and ``tj.accelerator``.

Each function takes the JAX platform it is about (``"cuda"``, ``"tpu"``, ...), so the
torch look-alike modules stay thin and the logic is tested on the CPU platform.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import TYPE_CHECKING, Any

import jax

from . import _platforms
from ._current import current_index, set_current_index
from ._device import Device, DeviceLike
from ._errors import BackendInitError, DeviceUnavailableError, InvalidDeviceError

if TYPE_CHECKING:
    from types import TracebackType

__all__ = [
    "CurrentDeviceContext",
    "DeviceProperties",
    "current_platform",
    "device_count",
    "device_for",
    "index_of",
    "properties",
    "quiet_local_devices",
    "require",
    "set_current",
    "synchronize",
]


@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    """What JAX reports about one device (``torch.cuda.get_device_properties``).

    Attributes:
        name: The device kind, e.g. ``"NVIDIA H100 80GB HBM3"`` (``device_kind``).
        type: The torch-style device type, e.g. ``"cuda"``.
        index: The device index in this process.
        total_memory: Bytes JAX's allocator may use on the device (``bytes_limit`` of
            ``memory_stats()``), or ``None`` where JAX reports no memory figures (CPU).
            With preallocation this is the preallocated fraction of the card
            (75 % by default), not the physical total that torch reports.
        multi_processor_count: Streaming multiprocessors (GPU ``core_count``), or
            ``None``.
        major: Compute capability major version (GPU), or ``None``.
        minor: Compute capability minor version (GPU), or ``None``.
        platform_version: The backend's version string, e.g. ``"cuda 12080"``.
    """

    name: str
    type: str
    index: int
    total_memory: int | None
    multi_processor_count: int | None
    major: int | None
    minor: int | None
    platform_version: str


def quiet_local_devices(platform: str) -> list[jax.Device]:
    """Local devices of ``platform``; ``[]`` (with a warning) if JAX cannot start.

    The availability predicates use this: like ``torch.cuda.is_available()``, they
    answer ``False`` instead of raising when the runtime is broken.
    """
    try:
        return _platforms.local_devices(platform)
    except BackendInitError as err:
        warnings.warn(str(err), RuntimeWarning, stacklevel=3)
        return []


def current_platform(candidates: tuple[str, ...]) -> str | None:
    """The first of ``candidates`` that has devices here, or ``None``. Never raises."""
    return next((name for name in candidates if quiet_local_devices(name)), None)


def device_count(platform: str) -> int:
    """How many devices of ``platform`` this process has (0 if none)."""
    return len(quiet_local_devices(platform))


def require(platform: str, what: str) -> list[jax.Device]:
    """The local devices of ``platform``, or a :class:`DeviceUnavailableError`."""
    devices = _platforms.local_devices(platform)
    if not devices:
        device_type = _platforms.torch_type_of_platform(platform)
        raise DeviceUnavailableError(
            f"{what} is not available: JAX has no '{platform}' backend in this process. "
            f"Fix: {_platforms.missing_platform_hint(device_type)}."
        )
    return devices


def index_of(device: DeviceLike | None, platform: str, what: str) -> int:
    """The index a ``torch.cuda``-style ``device`` argument names on ``platform``.

    ``None`` is the current device; an int is an index; anything else must name a
    device of ``platform`` (torch raises ``ValueError`` for a CPU device given to a
    ``torch.cuda`` function, and so does this, through :class:`InvalidDeviceError`).
    """
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    named = None if device is None else Device(device)
    if named is not None and platform not in _platforms.platforms_for_type(named.type):
        raise InvalidDeviceError(f"Expected a {what} device, but got: {named}")
    if named is None or named.index is None:
        return current_index(platform, min(_platforms.device_indices(platform), default=0))
    return named.index


def device_for(device: DeviceLike | None, platform: str, what: str) -> jax.Device:
    """The ``jax.Device`` a ``torch.cuda``-style ``device`` argument names."""
    require(platform, what)
    by_index = _platforms.device_indices(platform)
    index = index_of(device, platform, what)
    if index not in by_index:
        raise DeviceUnavailableError(
            f"Invalid device index {index}: this process has {len(by_index)} {what} "
            f"device(s), indices {', '.join(map(str, sorted(by_index)))}."
        )
    return by_index[index]


def set_current(device: DeviceLike | None, platform: str, what: str) -> int | None:
    """Make ``device`` the current one of ``platform``; return the previous index.

    A negative index is a no-op returning ``None``, as in ``torch.cuda.set_device``.
    """
    index = index_of(device, platform, what)
    if index < 0:
        return None
    device_for(index, platform, what)  # validate before changing anything
    return set_current_index(platform, index)


def properties(device: jax.Device) -> DeviceProperties:
    """Everything :class:`DeviceProperties` holds, read defensively from ``device``."""
    platform = _platforms.platform_of(device)
    index = _platforms.device_index(device)
    if index is None:
        raise DeviceUnavailableError(f"{device!r} belongs to another JAX process")
    stats: dict[str, Any] = device.memory_stats() or {}
    capability = getattr(device, "compute_capability", None)
    major = minor = None
    if isinstance(capability, str) and "." in capability:
        major_text, minor_text = capability.split(".", 1)
        if major_text.isdigit() and minor_text.isdigit():
            major, minor = int(major_text), int(minor_text)
    cores = getattr(device, "core_count", None)
    limit = stats.get("bytes_limit")
    return DeviceProperties(
        name=str(device.device_kind),
        type=_platforms.torch_type_of_platform(platform),
        index=index,
        total_memory=int(limit) if isinstance(limit, int) and limit >= 0 else None,
        multi_processor_count=cores if isinstance(cores, int) else None,
        major=major,
        minor=minor,
        platform_version=str(device.client.platform_version),
    )


def synchronize(device: jax.Device) -> None:
    """Wait until every live array on ``device`` is computed, then for JAX effects.

    JAX has no device-wide barrier; waiting on every live array placed on the device
    covers all work whose result the program can still observe.
    """
    platform = _platforms.platform_of(device)
    pending = [array for array in jax.live_arrays(platform) if device in array.devices()]
    jax.block_until_ready(pending)
    jax.effects_barrier()


class CurrentDeviceContext:
    """Sets a platform's current device for a ``with`` block, then restores it.

    The shared half of ``tj.cuda.device`` and ``tj.accelerator.device_index``:
    subclasses say which platform (:meth:`_platform`) and how to name it in errors.
    ``None`` and negative indices change nothing, as in torch.
    """

    _what = "device"

    def __init__(self, device: DeviceLike | None) -> None:
        self._device = device
        self._restore: tuple[str, int] | None = None

    def _platform(self) -> str:
        raise NotImplementedError

    def __enter__(self) -> None:
        if self._device is None:
            return
        platform = self._platform()
        previous = set_current(self._device, platform, self._what)
        if previous is not None:
            self._restore = (platform, previous)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._restore is not None:
            set_current_index(*self._restore)
            self._restore = None
