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
  once the block ends. torch 2.13 raises an internal ``AssertionError`` there when a
  default was set before the block; with none set, it applies a device at once and drops
  it when the block ends (and ``None`` leaves the block's device in effect after it).
* ``None`` means JAX's own default, the accelerator when there is one, where torch's is
  the CPU: a decision (the fastest device by default); ``set_default_device("cpu")`` gives
  torch's habit.

As with ``jax.default_device``, arrays committed to a device (``jax.device_put(x, d)``,
``tj.to_device``) stay where they are: the default only places uncommitted data.
"""

from __future__ import annotations

from . import context, platforms
from .device import Device, DeviceLike

__all__ = ["get_default_device", "set_default_device"]


def set_default_device(device: DeviceLike | None) -> None:
    """Equivalent to `torch.set_default_device`.

    Set the default device for new JAX arrays in this thread: `jnp.zeros`, `jnp.asarray`,
    `jax.device_put(x)` and jitted functions with uncommitted inputs place their results
    there. `None` goes back to JAX's own default.

    Note:
        JAX's own default is the first device of its default backend, usually the
        accelerator, where torch's is the CPU. The device is resolved now: an unavailable
        device raises here, where torch raises at the first tensor. Arrays already committed
        to a device (`jax.device_put(x, d)`, `tj.to_device`) stay where they are.

    Args:
        device: Anything [`tj.device`][torch2jax_device.Device] accepts, or `None`.

    Raises:
        DeviceUnavailableError: the device does not exist on this machine.

    Examples:
        >>> import jax.numpy as jnp
        >>> import torch2jax_device as tj
        >>> tj.set_default_device("cpu")
        >>> jnp.ones(2).device == tj.device("cpu")
        True
        >>> tj.set_default_device(None)
    """
    if device is None:
        context.set_base_default(None)
        return
    named = Device(device)
    context.set_base_default(named.jax_device, named)


def get_default_device() -> Device:
    """Equivalent to `torch.get_default_device`.

    The device new JAX arrays land on in this thread. Starts JAX's backends.

    Note:
        Like torch, it names the device arrays actually land on: an unindexed `"cuda"`
        default reports `cuda:<current>`, the CPU reports `cpu` (`cpu:N` when several
        CPU devices are simulated), and an indexed CPU default reads back as it was
        written (`"cpu:0"` gives `cpu:0`, as `torch.get_default_device()` does, though
        CPU arrays report `cpu`). With no default set it is JAX's own default device,
        which is the accelerator when there is one, where torch would say `cpu`.

    Examples:
        >>> import torch2jax_device as tj
        >>> with tj.device("cpu"):
        ...     tj.get_default_device()
        device(type='cpu')
        >>> with tj.device("cpu:0"):
        ...     tj.get_default_device()
        device(type='cpu', index=0)
    """
    target = context.default_target()
    if target is None:
        return Device(platforms.jax_default_device())
    landed = Device(target)
    named = context.default_name()
    if landed.index is None and isinstance(named, Device) and named.index is not None:
        # One CPU device reports as `cpu`; torch keeps an indexed CPU default as written.
        return Device(landed.type, named.index)
    return landed
