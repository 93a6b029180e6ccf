"""One exception hierarchy for the whole library.

Every error raised on purpose by torch2jax_device derives from
:class:`Torch2JaxDeviceError`, so ``except tj.Torch2JaxDeviceError`` catches all of
them. Each one also derives from the builtin exception that PyTorch raises in the
same situation, so ``except RuntimeError`` (or ``AssertionError``, ``TypeError``)
clauses ported from PyTorch code keep working unchanged.
"""

from __future__ import annotations

__all__ = [
    "BackendInitError",
    "DeviceTypeError",
    "DeviceUnavailableError",
    "InvalidDeviceError",
    "Torch2JaxDeviceError",
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
