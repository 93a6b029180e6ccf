"""One exception hierarchy for the whole library.

Every error raised on purpose by torch2jax_device derives from
``tj.Torch2JaxDeviceError``, so ``except tj.Torch2JaxDeviceError`` catches all of them.
Each one also derives from the builtin exception that PyTorch raises in the same
situation, so ``except RuntimeError`` (or ``AssertionError``, ``TypeError``) clauses
ported from PyTorch code keep working unchanged.
"""

from __future__ import annotations

__all__ = [
    "AlreadyInitializedError",
    "BackendInitError",
    "CheckpointError",
    "ConfigError",
    "ConversionError",
    "DTypeError",
    "DeviceTypeError",
    "DeviceUnavailableError",
    "DistributedError",
    "EmptyTreeError",
    "InvalidDeviceError",
    "InvalidIndexError",
    "MixedDeviceError",
    "SeedError",
    "Torch2JaxDeviceError",
    "UnsupportedOperationError",
]


class Torch2JaxDeviceError(Exception):
    """Base class of every error raised by torch2jax_device."""


class InvalidDeviceError(Torch2JaxDeviceError, RuntimeError, ValueError):
    """A device specification is malformed or names the wrong kind of device.

    PyTorch raises ``RuntimeError`` for malformed strings (``torch.device("cuda:01")``)
    and ``ValueError`` when a ``torch.cuda`` function gets a non-CUDA device; this
    class is both.
    """


class DeviceTypeError(Torch2JaxDeviceError, TypeError):
    """A device argument has a Python type that cannot name a device (``True``, ``1.5``)."""


class DeviceUnavailableError(Torch2JaxDeviceError, RuntimeError, AssertionError):
    """A well-formed device does not exist on this machine.

    PyTorch raises ``RuntimeError`` for this on builds with CUDA support and
    ``AssertionError("Torch not compiled with CUDA enabled")`` on CPU-only builds; this
    class is both, so ported ``except`` clauses catch it either way. The message
    names the devices that do exist and how to get the missing one.
    """


class BackendInitError(Torch2JaxDeviceError, RuntimeError):
    """JAX could not initialize its backends (usually a ``JAX_PLATFORMS`` setting)."""


class MixedDeviceError(Torch2JaxDeviceError, RuntimeError, ValueError):
    """Arrays that must share one device are on several.

    PyTorch raises ``RuntimeError("Expected all tensors to be on the same device ...")``
    and JAX ``ValueError("Received incompatible devices ...")``; this class is both.
    The message names every device and a leaf path on each.
    """


class EmptyTreeError(Torch2JaxDeviceError, ValueError):
    """A tree, module or batch that should hold arrays holds none."""


class DTypeError(Torch2JaxDeviceError, TypeError):
    """A dtype that JAX does not know (torch raises ``TypeError`` for bad dtypes)."""


class ConversionError(Torch2JaxDeviceError, ValueError):
    """A value cannot be turned into a JAX array as asked.

    Raised for array-like leaves JAX cannot convert, deleted or donated arrays, and
    ``strict=True`` conversions that would need a copy. Names the leaf path and the fix.
    """


class AlreadyInitializedError(Torch2JaxDeviceError, RuntimeError):
    """A start-up setting was changed after JAX's backends started, when it cannot apply.

    JAX reads ``JAX_PLATFORMS``, the ``XLA_PYTHON_CLIENT_*`` variables and the CPU
    device count once, when its backends start; later changes are ignored (silently, for
    some of them). The message names what is running and how to restart.
    """


class ConfigError(Torch2JaxDeviceError, ValueError):
    """A configuration value JAX would reject or misread (bad allocator, fraction, ...)."""


class UnsupportedOperationError(Torch2JaxDeviceError, NotImplementedError):
    """A PyTorch operation JAX has no way to perform (e.g. resetting peak memory stats)."""


class CheckpointError(Torch2JaxDeviceError, ValueError):
    """A checkpoint file cannot be read: corrupted, truncated, unsafe or unsupported.

    The message names the file, what is wrong and, where there is one, the fix.
    """


class InvalidIndexError(Torch2JaxDeviceError, IndexError, ValueError):
    """An index into a stored tensor is out of range, has a zero step, or is not basic.

    NumPy and torch raise ``IndexError`` for the first and ``ValueError`` for a zero
    step; this class is both.
    """


class DistributedError(Torch2JaxDeviceError, RuntimeError, ValueError):
    """A multi-process job is misconfigured, or a process group operation failed.

    ``torch.distributed`` raises ``ValueError`` for configuration mistakes (a missing
    ``RANK``, an uninitialized or doubly initialized process group) and
    ``RuntimeError`` (``DistError``, ``DistStoreError``) when a rendezvous or a
    collective times out; this class is both, so ported ``except`` clauses keep
    working.
    """


class SeedError(Torch2JaxDeviceError, TypeError, ValueError):
    """A random seed that is not an integer.

    ``torch.manual_seed`` and ``torch.cuda.manual_seed`` call ``int(seed)``, which raises
    ``ValueError`` for a string that is no number and ``TypeError`` for other types;
    this class is both.
    """
