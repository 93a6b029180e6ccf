"""``torch.accelerator`` for JAX: the machine's accelerator, whichever kind it is.

The accelerator is the first platform JAX has devices for among CUDA, ROCm, TPU and Metal (``mps``).
[`tj.accelerator.current_accelerator`][torch2jax_device.accelerator.current_accelerator] and
[`tj.accelerator.is_available`][torch2jax_device.accelerator.is_available] never raise; the index
functions raise
[`tj.DeviceUnavailableError`][torch2jax_device.DeviceUnavailableError] when
there is no accelerator, with torch's message. The first call starts JAX's backends.

Examples:
    >>> import torch2jax_device as tj
    >>> accelerator = tj.accelerator.current_accelerator()
    >>> device = accelerator if accelerator is not None else tj.device("cpu")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._src import platforms as _platforms
from ._src import runtime as _runtime
from ._src.device import Device
from ._src.errors import DeviceUnavailableError

if TYPE_CHECKING:
    from ._src.device import DeviceLike

__all__ = [
    "current_accelerator",
    "current_device_index",
    "device_count",
    "device_index",
    "is_available",
    "set_device_index",
    "synchronize",
]


def _platform() -> str | None:
    return _runtime.current_platform(_platforms.ACCELERATORS)


def _require() -> str:
    platform = _platform()
    if platform is None:
        raise DeviceUnavailableError(
            "Cannot access accelerator device when none is available: JAX found no "
            "CUDA, ROCm, TPU or Metal device. Fix: "
            f"{_platforms.missing_platform_hint('cuda')}."
        )
    return platform


def current_accelerator(check_available: bool = False) -> Device | None:
    """The accelerator's device type, unindexed, or ``None``.

    The ``torch.accelerator.current_accelerator`` of JAX.

    ``check_available`` is accepted for torch compatibility: JAX only reports
    accelerators it can use, so the answer is the same either way.

    Examples:
        >>> import torch2jax_device as tj
        >>> accelerator = tj.accelerator.current_accelerator()
        >>> accelerator is None or accelerator.index is None
        True
    """
    platform = _platform()
    return None if platform is None else Device(_platforms.device_type_of(platform))


def is_available() -> bool:
    """Whether JAX has any accelerator here (``torch.accelerator.is_available``). Never raises."""
    return _platform() is not None


def device_count() -> int:
    """How many devices the accelerator has in this process; 0 without one."""
    platform = _platform()
    return 0 if platform is None else _runtime.device_count(platform)


def current_device_index() -> int:
    """This thread's current accelerator index (``torch.accelerator.current_device_index``).

    Raises:
        DeviceUnavailableError: there is no accelerator.
    """
    return _runtime.current_index(_require(), "accelerator")


def set_device_index(device: DeviceLike) -> None:
    """Set this thread's current accelerator device (``torch.accelerator.set_device_index``).

    Raises:
        DeviceUnavailableError: there is no accelerator, or not that many devices.
    """
    platform = _require()
    _runtime.set_current(device, platform, "accelerator")


class device_index(_runtime.CurrentDeviceContext):  # torch's name
    """Context manager changing the current accelerator device (``torch.accelerator.device_index``).

    ``None`` changes nothing, as in torch.

    Raises:
        DeviceUnavailableError: on entering, when there is no accelerator.
    """

    _what = "accelerator"

    def _platform(self) -> str:
        return _require()


def synchronize(device: DeviceLike | None = None) -> None:
    """Wait for all work on an accelerator device (``torch.accelerator.synchronize``).

    Raises:
        DeviceUnavailableError: there is no accelerator.
    """
    platform = _require()
    _runtime.synchronize(_runtime.device_for(device, platform, "accelerator"))
