"""torch2jax_device: PyTorch's device idioms on JAX.

``tj.device``, ``tj.cuda``, ``tj.accelerator``, ``with tj.device("cpu"):``,
``tj.set_default_device`` and ``tj.to_device`` do what their torch namesakes do, on
JAX backends, default devices and ``jax.device_put``, so a script ports line by line::

    import torch2jax_device as tj

    device = tj.device("cuda" if tj.cuda.is_available() else "cpu")
    model = tj.to_device(model, device)                  # model.to(device)
    device = next(tj.parameters(model)).device           # next(model.parameters()).device
    with tj.device("cpu"):
        ...  # new JAX arrays are created on the CPU

Importing this package imports neither torch nor flax and does not start JAX's
backends, so ``JAX_PLATFORMS`` and memory settings can still be made after it.
"""

from . import accelerator as accelerator
from . import backends as backends
from . import cuda as cuda
from . import distributed as distributed
from . import idioms as idioms
from ._config import configure as configure
from ._defaults import get_default_device as get_default_device
from ._defaults import set_default_device as set_default_device
from ._device import Device as Device
from ._device import DeviceLike as DeviceLike
from ._device import resolve as resolve
from ._discovery import available_backends as available_backends
from ._discovery import list_devices as list_devices
from ._dtypes import DtypeNarrowingWarning as DtypeNarrowingWarning
from ._errors import AlreadyInitializedError as AlreadyInitializedError
from ._errors import BackendInitError as BackendInitError
from ._errors import CheckpointError as CheckpointError
from ._errors import ConfigError as ConfigError
from ._errors import ConversionError as ConversionError
from ._errors import DeviceTypeError as DeviceTypeError
from ._errors import DeviceUnavailableError as DeviceUnavailableError
from ._errors import DistributedError as DistributedError
from ._errors import DTypeError as DTypeError
from ._errors import EmptyTreeError as EmptyTreeError
from ._errors import InvalidDeviceError as InvalidDeviceError
from ._errors import InvalidIndexError as InvalidIndexError
from ._errors import MixedDeviceError as MixedDeviceError
from ._errors import Torch2JaxDeviceError as Torch2JaxDeviceError
from ._errors import UnsupportedOperationError as UnsupportedOperationError
from ._interop import to_jax as to_jax
from ._interop import to_torch as to_torch
from ._memory import ArrayReport as ArrayReport
from ._memory import live_arrays as live_arrays
from ._memory import track_arrays as track_arrays
from ._placement import check_same_device as check_same_device
from ._placement import device_of as device_of
from ._placement import parameters as parameters
from ._placement import to_device as to_device
from .data import DeviceLoader as DeviceLoader
from .data import ForkAfterJaxWarning as ForkAfterJaxWarning
from .data import pin_memory as pin_memory
from .data import prefetch_to_device as prefetch_to_device
from .io import load as load
from .io import load_file as load_file
from .io import safe_open as safe_open
from .io import save_file as save_file

#: ``tj.device`` is the :class:`Device` class, as ``torch.device`` is a class.
device = Device

__version__ = "0.1.0"

__all__ = [
    "AlreadyInitializedError",
    "ArrayReport",
    "BackendInitError",
    "CheckpointError",
    "ConfigError",
    "ConversionError",
    "DTypeError",
    "Device",
    "DeviceLike",
    "DeviceLoader",
    "DeviceTypeError",
    "DeviceUnavailableError",
    "DistributedError",
    "DtypeNarrowingWarning",
    "EmptyTreeError",
    "ForkAfterJaxWarning",
    "InvalidDeviceError",
    "InvalidIndexError",
    "MixedDeviceError",
    "Torch2JaxDeviceError",
    "UnsupportedOperationError",
    "__version__",
    "accelerator",
    "available_backends",
    "backends",
    "check_same_device",
    "configure",
    "cuda",
    "device",
    "device_of",
    "distributed",
    "get_default_device",
    "idioms",
    "list_devices",
    "live_arrays",
    "load",
    "load_file",
    "parameters",
    "pin_memory",
    "prefetch_to_device",
    "resolve",
    "safe_open",
    "save_file",
    "set_default_device",
    "to_device",
    "to_jax",
    "to_torch",
    "track_arrays",
]
