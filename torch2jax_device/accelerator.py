"""`torch.accelerator` for JAX: the machine's accelerator, whichever kind it is.

The accelerator is the first platform JAX has devices for among CUDA, ROCm, TPU and
Metal (`mps`). [`current_accelerator`][torch2jax_device.accelerator.current_accelerator],
[`is_available`][torch2jax_device.accelerator.is_available] and
[`device_count`][torch2jax_device.accelerator.device_count] never raise; the index
functions raise [`tj.DeviceUnavailableError`][torch2jax_device.DeviceUnavailableError]
when there is no accelerator, with torch's message. The first call starts JAX's backends.

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
from ._src.errors import DeviceUnavailableError, NoSuchAttributeError

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
    """Equivalent to `torch.accelerator.current_accelerator`.

    The accelerator's device type, unindexed (`device(type='cuda')`), or `None` without
    one. Never raises.

    Note:
        TPUs count as accelerators (`tpu`), which torch does not know. `check_available` is
        accepted for torch compatibility: JAX only reports accelerators it can use, so the
        answer is the same either way.

    Examples:
        >>> import torch2jax_device as tj
        >>> accelerator = tj.accelerator.current_accelerator()
        >>> accelerator is None or accelerator.index is None
        True
    """
    platform = _platform()
    return None if platform is None else Device(_platforms.device_type_of(platform))


def is_available() -> bool:
    """Equivalent to `torch.accelerator.is_available`.

    Whether JAX has any accelerator (CUDA, ROCm, TPU or Metal) in this process. Never
    raises.

    Examples:
        >>> import torch2jax_device as tj
        >>> tj.accelerator.is_available() == (tj.accelerator.current_accelerator() is not None)
        True
    """
    return _platform() is not None


def device_count() -> int:
    """Equivalent to `torch.accelerator.device_count`.

    How many devices the accelerator has in this process; 0 without one. Never raises.

    Examples:
        >>> import torch2jax_device as tj
        >>> tj.accelerator.device_count() == 0 or tj.accelerator.is_available()
        True
    """
    platform = _platform()
    return 0 if platform is None else _runtime.device_count(platform)


def current_device_index() -> int:
    """Equivalent to `torch.accelerator.current_device_index`.

    This thread's current accelerator index: the lowest until
    [`set_device_index`][torch2jax_device.accelerator.set_device_index] changes it.

    Note:
        Shared with the platform's own module: on a CUDA machine it is
        [`tj.cuda.current_device`][torch2jax_device.cuda.current_device].

    Raises:
        DeviceUnavailableError: there is no accelerator.

    Examples:
        >>> import torch2jax_device as tj
        >>> if tj.accelerator.is_available():
        ...     index = tj.accelerator.current_device_index()
        ...     assert 0 <= index < tj.accelerator.device_count()
    """
    return _runtime.current_index(_require(), "accelerator")


def set_device_index(device: DeviceLike) -> None:
    """Equivalent to `torch.accelerator.set_device_index`.

    Set this thread's current accelerator device: an unindexed device of the accelerator's
    type resolves to it.

    A negative index is a no-op, as in torch.

    Raises:
        DeviceUnavailableError: there is no accelerator, or not that many devices.
        InvalidDeviceError: `device` has no index (`None`, `1.5`): a `ValueError` with
            torch's message.

    Examples:
        >>> import torch2jax_device as tj
        >>> if tj.accelerator.device_count() > 1:
        ...     tj.accelerator.set_device_index(1)
        >>> tj.accelerator.set_device_index(-1)  # changes nothing, as in torch
    """
    _runtime.require_index(device)
    if not _runtime.changes_nothing(device):
        _runtime.set_current(device, _require(), "accelerator")


class device_index(_runtime.CurrentDeviceContext):  # torch's name
    """Equivalent to `torch.accelerator.device_index`.

    Context manager that makes an accelerator device the current one for a block, then
    restores the previous one. `None` changes nothing, as in torch; any index needs an
    accelerator, and a negative one is refused there, as torch's runtime refuses it
    (`tj.cuda.device(-1)` is the context that changes nothing, as `torch.cuda.device(-1)`).

    Raises:
        DeviceUnavailableError: on entering, when there is no accelerator (`None` aside).
        InvalidDeviceError: on entering, for a negative index on an accelerator.

    Examples:
        >>> import torch2jax_device as tj
        >>> if tj.accelerator.device_count() > 1:
        ...     with tj.accelerator.device_index(1):
        ...         assert tj.accelerator.current_device_index() == 1
    """

    _what = "accelerator"
    _negative_is_invalid = True

    def _platform(self) -> str:
        return _require()


def synchronize(device: DeviceLike | None = None) -> None:
    """Equivalent to `torch.accelerator.synchronize`.

    Wait for all work on an accelerator device.

    Note:
        As for [`tj.cuda.synchronize`][torch2jax_device.cuda.synchronize]: JAX has no
        device-wide barrier, so this waits for every live array on the device and for
        pending JAX effects.

    Raises:
        DeviceUnavailableError: there is no accelerator.

    Examples:
        >>> import torch2jax_device as tj
        >>> if tj.accelerator.is_available():
        ...     tj.accelerator.synchronize()
    """
    platform = _require()
    _runtime.synchronize(_runtime.device_for(device, platform, "accelerator"))


def __getattr__(name: str) -> object:
    """``tj.accelerator.<name>`` for a ``torch.accelerator`` name this module does not map: the
    library's error, naming the torch name and the fix, instead of Python's."""
    raise NoSuchAttributeError.unmapped("accelerator", name)
