"""What runs here, per platform: the bodies of ``tj.cuda``, ``tj.accelerator``, discovery.

Each function takes the JAX platform it is about (``"cuda"``, ``"tpu"``, ...), so the
torch look-alike modules stay thin and the logic is tested on the CPU platform. Every
device argument is turned into a ``jax.Device`` by the one resolver
(``Device.jax_device``), with its messages.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import TYPE_CHECKING, Any

import jax

from . import context, memory, platforms
from .detect import is_torch_device
from .device import Device, DeviceLike, for_platform, is_index
from .errors import ArgumentTypeError, BackendInitError, DeviceUnavailableError, InvalidDeviceError

if TYPE_CHECKING:
    from types import TracebackType

__all__ = [
    "CurrentDeviceContext",
    "DeviceProperties",
    "available_backends",
    "changes_nothing",
    "current_index",
    "current_platform",
    "device_count",
    "device_for",
    "list_devices",
    "properties",
    "quiet_local_devices",
    "require",
    "require_index",
    "set_current",
    "synchronize",
]


@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    """What JAX reports about one device, in the shape of torch's `_CudaDeviceProperties`.

    [`tj.cuda.get_device_properties`][torch2jax_device.cuda.get_device_properties]
    returns it.

    Attributes:
        name: The device kind, e.g. `"NVIDIA H100 80GB HBM3"` (`device_kind`).
        type: The torch-style device type, e.g. `"cuda"`.
        index: The device index in this process.
        total_memory: The card's memory in bytes as the CUDA driver reports it, as
            torch's; where the driver library cannot be loaded (or on another
            platform), what JAX's allocator may use (`bytes_limit` of
            `memory_stats()`: the preallocated fraction, 75 % by default); `None`
            where JAX reports no memory figures (CPU).
        multi_processor_count: Streaming multiprocessors (GPU `core_count`), or
            `None`.
        major: Compute capability major version (GPU), or `None`.
        minor: Compute capability minor version (GPU), or `None`.
        platform_version: The backend's version string, e.g. `"cuda 12080"`.

    Examples:
        >>> import torch2jax_device as tj
        >>> if tj.cuda.is_available():
        ...     props = tj.cuda.get_device_properties()
        ...     label = f"{props.name}: {props.total_memory / 2**30:.0f} GiB"
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
        return platforms.local_devices(platform)
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
    """The local devices of ``platform``, or a ``DeviceUnavailableError``."""
    devices = platforms.local_devices(platform)
    if not devices:
        device_type = platforms.device_type_of(platform)
        raise DeviceUnavailableError(
            f"{what} is not available: JAX has no '{platform}' backend in this process. "
            f"Fix: {platforms.missing_platform_hint(device_type)}."
        )
    return devices


def device_for(
    device: DeviceLike | None, platform: str, what: str, *, kind_first: bool = False
) -> jax.Device:
    """The ``jax.Device`` a ``torch.cuda``-style ``device`` argument names on ``platform``.

    ``None`` is the current device and an int an index; anything else must name a device
    of ``platform``. torch checks in either order, depending on the function: most ask
    for the platform first; ``mem_get_info``, ``memory_summary`` and
    ``reset_peak_memory_stats`` read the argument first (``kind_first``), so a CPU device
    is a ``ValueError`` even without a GPU.

    Raises:
        DeviceUnavailableError: there is no ``platform`` device, or not that one.
        InvalidDeviceError: ``device`` names a device of another platform.
    """
    if not kind_first:
        require(platform, what)
    named = _named(platform, device)
    require(platform, what)
    return named.jax_device


def _named(platform: str, device: DeviceLike | None) -> Device:
    """The device a ``torch.cuda``-style argument names; torch's message for another type."""
    return for_platform(platform, device, platforms.device_type_of(platform))


def current_index(platform: str, what: str) -> int:
    """The index of this thread's current ``platform`` device (its lowest until set)."""
    index = platforms.device_index(device_for(None, platform, what))
    assert index is not None  # the resolver only returns this process's devices
    return index


def set_current(device: DeviceLike | None, platform: str, what: str) -> int | None:
    """Make ``device`` the current one of ``platform``; return the previous setting.

    The previous setting is ``None`` when nothing had set one; giving it back to
    ``context.set_current_index`` restores "the lowest index". A negative index is a
    no-op returning ``None``, as in ``torch.cuda.set_device``; so is ``None``.
    """
    if changes_nothing(device):
        return None
    named = _named(platform, device)  # the wrong kind of device fails first
    require(platform, what)  # then a missing platform, as in torch
    target = named.jax_device  # validate before changing anything
    return context.set_current_index(platform, platforms.device_index(target))


def require_index(device: object, platform: str | None = None) -> None:
    """torch's rule for ``set_device``: an int, or a device with an index.

    A device of another platform than ``platform`` passes: the resolver then refuses it
    with torch's message for the wrong kind of device, as torch checks the kind first.

    Raises:
        InvalidDeviceError: anything else (``None``, ``1.5``, ``"cuda"``), with torch's
            message (a ``ValueError``, as torch's).
    """
    if is_index(device):
        return
    indexed = False
    if isinstance(device, (str, bytes, Device, jax.Device)) or is_torch_device(device):
        named = Device(device)
        if platform is not None and platform not in platforms.platforms_for_type(named.type):
            return
        indexed = named.index is not None
    if not indexed:
        raise InvalidDeviceError(
            f"Expected a torch.device with a specified index or an integer, but got:{device}"
        )


def changes_nothing(device: object) -> bool:
    """``None`` or a negative index: torch's "leave the current device alone"."""
    return device is None or (
        isinstance(device, int) and not isinstance(device, bool) and device < 0
    )


def properties(device: jax.Device) -> DeviceProperties:
    """Everything ``DeviceProperties`` holds, read defensively from ``device``."""
    platform = platforms.platform_of(device)
    index = platforms.device_index(device)
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
    limit = memory.card_total(device)
    if limit is None:
        limit = stats.get("bytes_limit")
    return DeviceProperties(
        name=str(device.device_kind),
        type=platforms.device_type_of(platform),
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
    platform = platforms.platform_of(device)
    pending = [array for array in jax.live_arrays(platform) if device in array.devices()]
    jax.block_until_ready(pending)
    jax.effects_barrier()


class CurrentDeviceContext:
    """Sets a platform's current device for a ``with`` block, then restores it.

    The shared half of ``tj.cuda.device`` and ``tj.accelerator.device_index``:
    subclasses say which platform (``_platform``) and how to name it in errors.
    ``None`` changes nothing, as in torch; so does a negative index unless
    ``_negative_is_invalid`` (torch's accelerator context passes it to the runtime, which
    refuses it: "invalid device ordinal", seen with torch 2.11 on an H200).
    """

    _what = "device"
    _negative_is_invalid = False

    def __init__(self, device: DeviceLike | None) -> None:
        self._device = device
        self._restore: tuple[str, int | None] | None = None

    def _platform(self) -> str:
        raise NotImplementedError

    def __enter__(self) -> None:
        if self._device is None:
            return
        platform = self._platform()  # may raise: torch checks for an accelerator first
        if changes_nothing(self._device):
            if self._negative_is_invalid:
                raise InvalidDeviceError(
                    f"{self._what}.device_index({self._device!r}): invalid device ordinal "
                    f"(this machine's {platform} devices are numbered from 0), as "
                    "torch.accelerator.device_index refuses it. Fix: pass None to keep the "
                    "current device, or an index from 0 to device_count() - 1"
                )
            return
        self._restore = (platform, set_current(self._device, platform, self._what))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._restore is not None:
            context.set_current_index(*self._restore)
            self._restore = None


def available_backends() -> list[str]:
    """Every JAX backend usable here, default first (e.g. ``['cuda', 'cpu']``).

    ``jax.devices()`` only shows the default backend and probing others means
    catching ``RuntimeError``; this asks JAX once for all of them. It respects
    ``JAX_PLATFORMS``. The first call starts JAX's backends (creating a CUDA context
    on a GPU machine), so make start-up settings before calling it.

    Raises:
        BackendInitError: JAX could not start (e.g. ``JAX_PLATFORMS`` lists a
            platform this machine lacks); the message says how to fix it.

    Examples:
        >>> import torch2jax_device as tj
        >>> "cpu" in tj.available_backends()
        True
    """
    return platforms.available_platforms()


def list_devices(backend: str | None = None) -> list[Device]:
    """Every device of this process, on every backend or on one, default backend first.

    Args:
        backend: A JAX platform name (``"cuda"``, ``"rocm"``, ``"tpu"``, ``"METAL"``,
            ``"cpu"``) or a device type that names platforms (``"gpu"``: CUDA's and
            ROCm's) to list only their devices; a backend this machine lacks gives
            ``[]``.

    Raises:
        InvalidDeviceError: ``backend`` names no platform (``"bogus"``, ``"CPU"``).
        ArgumentTypeError: ``backend`` is not a string.
        BackendInitError: JAX could not start (see
            [`tj.available_backends`][torch2jax_device.available_backends]).

    Examples:
        >>> import torch2jax_device as tj
        >>> tj.device("cpu") in tj.list_devices("cpu")
        True
        >>> try:
        ...     tj.list_devices("CPU")
        ... except tj.InvalidDeviceError as error:
        ...     print(error)  # doctest: +ELLIPSIS
        list_devices: no backend is named 'CPU'. Fix: pass a JAX platform name (cuda, ...
    """
    names = platforms.available_platforms() if backend is None else _platforms_named(backend)
    return [Device(device) for name in names for device in platforms.local_devices(name)]


def _platforms_named(backend: str) -> tuple[str, ...]:
    """The JAX platforms ``list_devices(backend)`` lists: the one named (in the platform
    table, or started by JAX from a plugin), or those that serve the device type named."""
    if not isinstance(backend, str):
        raise ArgumentTypeError(
            f"list_devices: backend must be a str (a JAX platform name), got "
            f"{type(backend).__name__} {backend!r}. Fix: tj.list_devices('cuda'), or "
            "tj.list_devices() for every backend"
        )
    names = tuple(platform.name for platform in platforms.PLATFORMS)
    if backend in names:
        return (backend,)
    serving = platforms.platforms_for_type(backend)
    if serving:
        return serving
    if backend in platforms.jax_backends():  # a plugin's platform the table lacks
        return (backend,)
    raise InvalidDeviceError(
        f"list_devices: no backend is named {backend!r}. Fix: pass a JAX platform name "
        f"({', '.join(names)}) or a device type that names them ('gpu'); "
        f"tj.available_backends() lists this machine's: {platforms.available_platforms()}"
    )
