"""``torch.cuda`` for JAX: availability, current device and properties of CUDA GPUs.

Backed by JAX's ``cuda`` backend. The predicates (:func:`is_available`,
:func:`device_count`, :func:`is_bf16_supported`) never raise on a machine without a
GPU; the rest raise :class:`~torch2jax_device.DeviceUnavailableError`, as torch's do.
The first call starts JAX's backends (JAX's rule: finding out whether a GPU exists
creates the CUDA context), so set ``JAX_PLATFORMS`` or other start-up settings first.

Example:
    >>> import torch2jax_device as tj
    >>> device = tj.device("cuda" if tj.cuda.is_available() else "cpu")
    >>> device.type in ("cuda", "cpu")
    True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _runtime
from ._errors import DeviceUnavailableError
from ._runtime import DeviceProperties

if TYPE_CHECKING:
    from ._device import DeviceLike

__all__ = [
    "DeviceProperties",
    "current_device",
    "device",
    "device_count",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "is_available",
    "is_bf16_supported",
    "set_device",
    "synchronize",
]

_PLATFORM = "cuda"
_WHAT = "CUDA"


def is_available() -> bool:
    """Whether JAX can use a CUDA GPU here (``torch.cuda.is_available``). Never raises.

    Example:
        >>> import torch2jax_device as tj
        >>> isinstance(tj.cuda.is_available(), bool)
        True
    """
    return bool(_runtime.quiet_local_devices(_PLATFORM))


def device_count() -> int:
    """How many CUDA GPUs this process can use (``torch.cuda.device_count``); 0 if none.

    Example:
        >>> import torch2jax_device as tj
        >>> tj.cuda.device_count() >= 0
        True
    """
    return _runtime.device_count(_PLATFORM)


def current_device() -> int:
    """The index of this thread's current CUDA device (``torch.cuda.current_device``).

    Raises:
        DeviceUnavailableError: there is no CUDA GPU.
    """
    _runtime.require(_PLATFORM, _WHAT)
    return _runtime.index_of(None, _PLATFORM, _WHAT)


def set_device(device: DeviceLike) -> None:
    """Set this thread's current CUDA device (``torch.cuda.set_device``).

    Unindexed ``tj.device("cuda")`` resolves to it. A negative index is a no-op, as
    in torch.

    Args:
        device: An index, ``"cuda:N"``, a ``tj.device``, ``torch.device`` or
            ``jax.Device``.

    Raises:
        DeviceUnavailableError: there is no CUDA GPU, or not that many.
        InvalidDeviceError: ``device`` is not a CUDA device.
    """
    _runtime.set_current(device, _PLATFORM, _WHAT)


class device(_runtime.CurrentDeviceContext):  # torch's name
    """Context manager that changes the current CUDA device (``torch.cuda.device``).

    Args:
        device: An index, ``"cuda:N"`` or device object; a negative index or ``None``
            does nothing.

    Example:
        >>> import torch2jax_device as tj
        >>> if tj.cuda.device_count() > 1:
        ...     with tj.cuda.device(1):
        ...         assert tj.cuda.current_device() == 1
    """

    _what = _WHAT

    def _platform(self) -> str:
        return _PLATFORM


def get_device_name(device: DeviceLike | None = None) -> str:
    """The GPU's name, e.g. ``"NVIDIA H100 80GB HBM3"`` (``torch.cuda.get_device_name``).

    Raises:
        DeviceUnavailableError: there is no such CUDA GPU.
    """
    return get_device_properties(device).name


def get_device_properties(device: DeviceLike | None = None) -> DeviceProperties:
    """Name, memory, SM count and compute capability (``torch.cuda.get_device_properties``).

    ``total_memory`` is what JAX's allocator may use (see :class:`DeviceProperties`).

    Raises:
        DeviceUnavailableError: there is no such CUDA GPU.
    """
    return _runtime.properties(_runtime.device_for(device, _PLATFORM, _WHAT))


def get_device_capability(device: DeviceLike | None = None) -> tuple[int, int]:
    """The compute capability ``(major, minor)`` (``torch.cuda.get_device_capability``).

    Raises:
        DeviceUnavailableError: there is no such CUDA GPU, or JAX does not report it.
    """
    props = get_device_properties(device)
    if props.major is None or props.minor is None:
        raise DeviceUnavailableError(
            f"JAX reports no compute capability for {props.type}:{props.index} ({props.name})."
        )
    return props.major, props.minor


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether the current CUDA GPU can compute in bfloat16 (``torch.cuda.is_bf16_supported``).

    XLA runs bfloat16 on every CUDA GPU, emulating it before compute capability 8.0
    (Ampere); ``including_emulation=False`` asks for native support. ``False`` when
    there is no GPU. Never raises.
    """
    if not is_available():
        return False
    if including_emulation:
        return True
    major = get_device_properties().major
    return major is not None and major >= 8


def synchronize(device: DeviceLike | None = None) -> None:
    """Wait for all work on a CUDA GPU (``torch.cuda.synchronize``).

    JAX has no device-wide barrier: this waits for every live array on the device
    (every result the program can still see) and for pending JAX effects.

    Raises:
        DeviceUnavailableError: there is no such CUDA GPU.
    """
    _runtime.synchronize(_runtime.device_for(device, _PLATFORM, _WHAT))
