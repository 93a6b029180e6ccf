"""torch2jax_device: PyTorch's device idioms on JAX.

``tj.device``, ``tj.cuda``, ``tj.accelerator``, ``with tj.device("cpu"):`` and
``tj.set_default_device`` do what their torch namesakes do, on JAX backends, default
devices and ``jax.device_put``, so a script ports line by line::

    import torch2jax_device as tj

    device = tj.device("cuda" if tj.cuda.is_available() else "cpu")
    with tj.device("cpu"):
        ...  # new JAX arrays are created on the CPU

Importing this package imports neither torch nor flax and does not start JAX's
backends, so ``JAX_PLATFORMS`` and memory settings can still be made after it.
"""

from . import accelerator as accelerator
from . import backends as backends
from . import cuda as cuda
from . import idioms as idioms
from ._defaults import get_default_device as get_default_device
from ._defaults import set_default_device as set_default_device
from ._device import Device as Device
from ._device import DeviceLike as DeviceLike
from ._device import resolve as resolve
from ._discovery import available_backends as available_backends
from ._discovery import list_devices as list_devices
from ._errors import BackendInitError as BackendInitError
from ._errors import DeviceTypeError as DeviceTypeError
from ._errors import DeviceUnavailableError as DeviceUnavailableError
from ._errors import InvalidDeviceError as InvalidDeviceError
from ._errors import Torch2JaxDeviceError as Torch2JaxDeviceError

#: ``tj.device`` is the :class:`Device` class, as ``torch.device`` is a class.
device = Device

__version__ = "0.1.0"

__all__ = [
    "BackendInitError",
    "Device",
    "DeviceLike",
    "DeviceTypeError",
    "DeviceUnavailableError",
    "InvalidDeviceError",
    "Torch2JaxDeviceError",
    "__version__",
    "accelerator",
    "available_backends",
    "backends",
    "cuda",
    "device",
    "get_default_device",
    "idioms",
    "list_devices",
    "resolve",
    "set_default_device",
]
