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
backends, so ``JAX_PLATFORMS`` and memory settings can still be made after it. The
checkpoint, feeding, distributed and porting parts load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._src import preflight as _preflight  # first: in a program, _src imports JAX, checked

# In a program: the public names now, with JAX imported and its environment checked (a
# value JAX refuses raises tj.ConfigError here). The torch2jax-device command line's own
# process binds none of them, so that `scan` and `run` start without importing JAX.
if TYPE_CHECKING or not _preflight.started_as_command_line():
    from . import accelerator as accelerator
    from . import backends as backends
    from . import cuda as cuda
    from ._src.casting import ComplexCastWarning as ComplexCastWarning
    from ._src.defaults import get_default_device as get_default_device
    from ._src.defaults import set_default_device as set_default_device
    from ._src.device import Device as Device
    from ._src.device import DeviceLike as DeviceLike
    from ._src.device import resolve as resolve
    from ._src.dtypes import DtypeNarrowingWarning as DtypeNarrowingWarning
    from ._src.errors import AlreadyInitializedError as AlreadyInitializedError
    from ._src.errors import ArgumentTypeError as ArgumentTypeError
    from ._src.errors import BackendInitError as BackendInitError
    from ._src.errors import CheckpointError as CheckpointError
    from ._src.errors import CheckpointFileNotFoundError as CheckpointFileNotFoundError
    from ._src.errors import CheckpointIsADirectoryError as CheckpointIsADirectoryError
    from ._src.errors import CheckpointNotADirectoryError as CheckpointNotADirectoryError
    from ._src.errors import ConfigError as ConfigError
    from ._src.errors import ConversionError as ConversionError
    from ._src.errors import DeviceTypeError as DeviceTypeError
    from ._src.errors import DeviceUnavailableError as DeviceUnavailableError
    from ._src.errors import DistributedError as DistributedError
    from ._src.errors import DTypeError as DTypeError
    from ._src.errors import EmptyTreeError as EmptyTreeError
    from ._src.errors import InvalidDeviceError as InvalidDeviceError
    from ._src.errors import InvalidIndexError as InvalidIndexError
    from ._src.errors import MemoryFormatError as MemoryFormatError
    from ._src.errors import MissingFrameworkError as MissingFrameworkError
    from ._src.errors import MissingKeyError as MissingKeyError
    from ._src.errors import MixedDeviceError as MixedDeviceError
    from ._src.errors import NoSuchAttributeError as NoSuchAttributeError
    from ._src.errors import OutOfMemoryError as OutOfMemoryError
    from ._src.errors import SeedError as SeedError
    from ._src.errors import StateDictError as StateDictError
    from ._src.errors import Torch2JaxDeviceError as Torch2JaxDeviceError
    from ._src.errors import UnsupportedOperationError as UnsupportedOperationError
    from ._src.interop import to_jax as to_jax
    from ._src.interop import to_torch as to_torch
    from ._src.location import Parameter as Parameter
    from ._src.location import check_same_device as check_same_device
    from ._src.location import device_of as device_of
    from ._src.location import get_device as get_device
    from ._src.location import parameters as parameters
    from ._src.memory import ArrayReport as ArrayReport
    from ._src.memory import live_arrays as live_arrays
    from ._src.memory import track_arrays as track_arrays
    from ._src.placement import to_device as to_device
    from ._src.runtime import available_backends as available_backends
    from ._src.runtime import list_devices as list_devices
    from ._src.startup import configure as configure

    #: ``tj.device`` is the [`Device`][torch2jax_device.Device] class, as ``torch.device``
    #: is a class.
    device = Device

if TYPE_CHECKING:
    from . import distributed as distributed
    from . import porting as porting
    from ._src.checkpoints.device_map import DeviceMap as DeviceMap
    from ._src.checkpoints.module_state import load_state as load_state
    from ._src.checkpoints.module_state import state_dict as state_dict
    from ._src.checkpoints.one_device import TensorSlice as TensorSlice
    from ._src.checkpoints.safetensors import load_file as load_file
    from ._src.checkpoints.safetensors import safe_open as safe_open
    from ._src.checkpoints.safetensors import save_file as save_file
    from ._src.checkpoints.sharded import ShardingRule as ShardingRule
    from ._src.checkpoints.torch_load import load as load
    from ._src.feeding import DeviceLoader as DeviceLoader
    from ._src.feeding import ForkAfterJaxWarning as ForkAfterJaxWarning
    from ._src.feeding import pin_memory as pin_memory
    from ._src.feeding import prefetch_to_device as prefetch_to_device
    from ._src.host_staging import PinnedMemoryWarning as PinnedMemoryWarning
    from ._src.strict import CpuComputationWarning as CpuComputationWarning
    from ._src.strict import StrictPlacement as StrictPlacement
    from ._src.strict import set_strict_placement as set_strict_placement
    from ._src.strict import strict_placement as strict_placement

__version__ = "0.1.0"

# Public names whose modules load on first use (PEP 562): name -> (module, attribute),
# attribute None for a submodule.
_LAZY: dict[str, tuple[str, str | None]] = {
    "distributed": (".distributed", None),
    "optim": (".optim", None),
    "porting": (".porting", None),
    "ShardingRule": ("._src.checkpoints.sharded", "ShardingRule"),
    "DeviceMap": ("._src.checkpoints.device_map", "DeviceMap"),
    "TensorSlice": ("._src.checkpoints.one_device", "TensorSlice"),
    "load_file": ("._src.checkpoints.safetensors", "load_file"),
    "safe_open": ("._src.checkpoints.safetensors", "safe_open"),
    "save_file": ("._src.checkpoints.safetensors", "save_file"),
    "load": ("._src.checkpoints.torch_load", "load"),
    "load_state": ("._src.checkpoints.module_state", "load_state"),
    "state_dict": ("._src.checkpoints.module_state", "state_dict"),
    "DeviceLoader": ("._src.feeding", "DeviceLoader"),
    "ForkAfterJaxWarning": ("._src.feeding", "ForkAfterJaxWarning"),
    "pin_memory": ("._src.feeding", "pin_memory"),
    "prefetch_to_device": ("._src.feeding", "prefetch_to_device"),
    "CpuComputationWarning": ("._src.strict", "CpuComputationWarning"),
    "ComplexCastWarning": ("._src.casting", "ComplexCastWarning"),
    "PinnedMemoryWarning": ("._src.host_staging", "PinnedMemoryWarning"),
    "StrictPlacement": ("._src.strict", "StrictPlacement"),
    "set_strict_placement": ("._src.strict", "set_strict_placement"),
    "strict_placement": ("._src.strict", "strict_placement"),
}

__all__ = [
    "AlreadyInitializedError",
    "ArgumentTypeError",
    "ArrayReport",
    "BackendInitError",
    "CheckpointError",
    "CheckpointFileNotFoundError",
    "CheckpointIsADirectoryError",
    "CheckpointNotADirectoryError",
    "ComplexCastWarning",
    "ConfigError",
    "ConversionError",
    "CpuComputationWarning",
    "DTypeError",
    "Device",
    "DeviceLike",
    "DeviceLoader",
    "DeviceMap",
    "DeviceTypeError",
    "DeviceUnavailableError",
    "DistributedError",
    "DtypeNarrowingWarning",
    "EmptyTreeError",
    "ForkAfterJaxWarning",
    "InvalidDeviceError",
    "InvalidIndexError",
    "MemoryFormatError",
    "MissingFrameworkError",
    "MissingKeyError",
    "MixedDeviceError",
    "NoSuchAttributeError",
    "OutOfMemoryError",
    "Parameter",
    "PinnedMemoryWarning",
    "SeedError",
    "ShardingRule",
    "StateDictError",
    "StrictPlacement",
    "TensorSlice",
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
    "get_device",
    "list_devices",
    "live_arrays",
    "load",
    "load_file",
    "load_state",
    "optim",
    "parameters",
    "pin_memory",
    "porting",
    "prefetch_to_device",
    "resolve",
    "safe_open",
    "save_file",
    "set_default_device",
    "set_strict_placement",
    "state_dict",
    "strict_placement",
    "to_device",
    "to_jax",
    "to_torch",
    "track_arrays",
]


def __getattr__(name: str) -> Any:
    """Load the lazily imported public names on first access."""
    if name in __all__ and name != "porting" and _preflight.started_as_command_line():
        raise AttributeError(
            f"torch2jax_device.{name} is not loaded in the {_preflight.COMMAND} command "
            "line's own process, which imports JAX only for the commands that use it; "
            "a program that imports torch2jax_device has every public name"
        )
    try:
        module_name, attribute = _LAZY[name]
    except KeyError:
        raise _no_such_name(name) from None
    module = importlib.import_module(module_name, __name__)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def _no_such_name(name: str) -> AttributeError:
    """The error for ``tj.<name>``: for a torch name the migration guide has a row for
    (``tj.manual_seed``, ``tj.compile``), that row's port; Python's own for a private one."""
    if name.startswith("_"):  # dunders and tools' probes
        return AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ._src.errors import NoSuchAttributeError
    from .porting import catalog  # only on this error path: the tools stay unloaded

    row = next((row for row in catalog.CATALOG if f"torch.{name}" in row.torch_api), None)
    if row is None:
        return NoSuchAttributeError(
            f"module {__name__!r} has no attribute {name!r}. If it is torch.{name}: "
            "torch2jax_device maps only torch's device idioms; run `torch2jax-device scan` "
            "on the file, which says what to write instead, or keep the line torch's"
        )
    port = row.tj.splitlines()[0]
    return NoSuchAttributeError(
        f"tj has no {name!r}: torch.{name} is ported as `{port}` (migration guide "
        f"#{row.id}; `torch2jax-device scan --explain {row.id}` shows the whole entry)"
    )


def __dir__() -> list[str]:
    return sorted(__all__)
