"""The default device for new JAX arrays, with torch semantics.

``with tj.device(d):`` and ``tj.set_default_device(d)`` set JAX's own thread-local
default device (the one ``with jax.default_device(...)`` sets), so every JAX array
created without an explicit placement lands on ``d``: ``jnp.zeros``, ``jnp.asarray``,
``jax.device_put(x)``, jitted functions with uncommitted inputs.

Semantics, matching PyTorch 2.13:

* The device is checked when the context is entered or the setter called, not at
  the first array (torch defers the error to the first array; failing early is the
  point of this library).
* Contexts nest; leaving one restores exactly what was there, also on exceptions.
* Everything is per thread: a new thread starts with JAX's process default, as a new
  torch thread starts on ``cpu`` whatever ``torch.set_default_device`` said.
* ``set_default_device`` inside a ``with`` block changes the default that applies
  once the block ends (torch 2.13 raises an internal ``AssertionError`` there).

As with ``jax.default_device``, arrays committed to a device (``jax.device_put(x, d)``,
``tj.to_device``) stay where they are: the default only places uncommitted data.
"""

from __future__ import annotations

import threading
from typing import Any

import jax

from ._device import Device, DeviceLike

__all__ = ["get_default_device", "pop", "push", "set_default_device"]


class _Frame:
    """One default device in effect, with the JAX context that applies it."""

    __slots__ = ("jax_context", "target")

    def __init__(self, target: jax.Device) -> None:
        self.target = target
        self.jax_context: Any = jax.default_device(target)
        self.jax_context.__enter__()

    def close(self) -> None:
        self.jax_context.__exit__(None, None, None)


_NOTHING_PENDING: Any = object()


class _ThreadDefaults(threading.local):
    def __init__(self) -> None:
        self.base: _Frame | None = None
        self.stack: list[_Frame] = []
        # What set_default_device asked for while a context was open (a device, or
        # None for "unset"): applied when the last context exits.
        self.pending: jax.Device | None = _NOTHING_PENDING


_state = _ThreadDefaults()


def push(device: Device) -> None:
    """Make ``device`` the default until :func:`pop` (the ``with`` statement's half)."""
    _state.stack.append(_Frame(device._resolve()))


def pop() -> None:
    """Undo the latest :func:`push` in this thread."""
    _state.stack.pop().close()
    if not _state.stack and _state.pending is not _NOTHING_PENDING:
        pending, _state.pending = _state.pending, _NOTHING_PENDING
        _replace_base(pending)


def _replace_base(target: jax.Device | None) -> None:
    if _state.base is not None:
        _state.base.close()
    _state.base = None if target is None else _Frame(target)


def set_default_device(device: DeviceLike | None) -> None:
    """Set the default device for new JAX arrays in this thread (``torch.set_default_device``).

    ``None`` goes back to JAX's own default (the first device of its default
    backend, usually the accelerator). The device is resolved now: an unavailable
    device raises here, not at the first array.

    Args:
        device: Anything :class:`~torch2jax_device.device` accepts, or ``None``.

    Raises:
        DeviceUnavailableError: the device does not exist on this machine.

    Example:
        >>> import jax.numpy as jnp
        >>> import torch2jax_device as tj
        >>> tj.set_default_device("cpu")
        >>> jnp.ones(2).device == tj.device("cpu")
        True
        >>> tj.set_default_device(None)
    """
    target = None if device is None else Device(device)._resolve()
    if _state.stack:
        _state.pending = target
    else:
        _replace_base(target)


def get_default_device() -> Device:
    """The device new JAX arrays land on in this thread (``torch.get_default_device``).

    Like torch, it names the device arrays actually land on: an unindexed ``"cuda"``
    default reports ``cuda:<current>``, the CPU reports ``cpu`` (``cpu:N`` when several
    CPU devices are simulated). With no default set it is JAX's own default device,
    which is the accelerator when there is one, where torch would say ``cpu``. Starts
    JAX's backends.

    Example:
        >>> import torch2jax_device as tj
        >>> with tj.device("cpu"):
        ...     tj.get_default_device()
        device(type='cpu')
    """
    frame = _state.stack[-1] if _state.stack else _state.base
    if frame is not None:
        return Device(frame.target)
    import jax.extend.backend

    return Device(jax.extend.backend.get_default_device())
