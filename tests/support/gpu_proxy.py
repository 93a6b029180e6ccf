"""The GPU machine's placement on a CPU: a test mode (``TORCH2JAX_DEVICE_TEST_PROXY=1``).

On a machine with a GPU, JAX's default device is the GPU (``cuda:0``): ``jnp`` arrays,
``jax.device_put`` without a device and every tj call without one land there. torch's
default stays the CPU: ``torch.tensor(...)`` is a CPU tensor, and ``tj.device("cpu")``
is the host's one CPU device. Tests written on a CPU machine, where the two defaults are
the same device, can assume they are without saying so, and those tests fail only on the
GPU, in sessions that come by chance and last minutes.

The proxy mode moves JAX's default device off the host's first CPU device before any
test runs: ``tests/conftest.py`` asks for ``PROXY_CPU_DEVICES`` CPU devices and makes the
last one JAX's default (:func:`start`). Then, as on the GPU machine,

* ``jnp`` arrays, NumPy arrays placed without a device and tj's "no device given" land
  on the stand-in accelerator, not on the CPU torch uses;
* ``tj.device("cpu")`` (unindexed: the current CPU, the lowest) is the host's first
  CPU device, where torch's CPU tensors alias (``tj.to_jax`` shares their memory there);
* a move between the two is a real copy: a result on the stand-in does not share a
  pointer with its host source.

What the proxy cannot make faithful, and the tests must not lean on: torch's answers
are those of a CPU-only machine (``torch.cuda.is_available()`` is False, as is
``tj.cuda.is_available()``, since the stand-in is a CPU device), and with several CPU
devices tj names them ``cpu:0`` and ``cpu:1`` where a GPU machine's one CPU device is
``cpu``. A test that compares placements therefore asks where JAX's default device is
(:func:`jax_default_is_torch_cpu`), never whether the proxy is on: the same question
has the GPU machine's answer on the GPU machine.
"""

from __future__ import annotations

import os
from typing import Any

import jax

PROXY_ENV = "TORCH2JAX_DEVICE_TEST_PROXY"
# The host's CPU device and the stand-in accelerator.
PROXY_CPU_DEVICES = 2


def requested() -> bool:
    """Whether this test process runs in the proxy mode."""
    return os.environ.get(PROXY_ENV, "") not in ("", "0")


def start() -> None:
    """Start JAX with ``PROXY_CPU_DEVICES`` CPU devices and the last one as its default.

    Called by ``tests/conftest.py`` before any test module is imported, so nothing is
    placed before the default moves (as on a GPU machine, where it never was the CPU).
    """
    from torch2jax_device._src import platforms

    if platforms.backends_initialized():
        raise RuntimeError(
            f"{PROXY_ENV}=1 needs to start JAX itself, but its backends are already "
            "running: something imported before tests/conftest.py touched a device"
        )
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", PROXY_CPU_DEVICES)
    jax.config.update("jax_default_device", jax.local_devices(backend="cpu")[-1])


def jax_default_is_torch_cpu() -> bool:
    """Whether new JAX arrays land on the device torch's CPU tensors live on.

    True on a CPU machine; False on a GPU machine (JAX's default is the GPU) and in the
    proxy mode. Asks JAX, not the mode, so the answer is the machine's.
    """
    from torch2jax_device._src import platforms

    return platforms.jax_default_device() == jax.local_devices(backend="cpu")[0]


def several_cpu_devices() -> bool:
    """Whether JAX has several CPU devices here (the proxy mode, ``JAX_NUM_CPU_DEVICES``):
    asked of JAX, so the names below do not follow tj's naming of them."""
    return len(jax.local_devices(backend="cpu")) > 1


def host_cpu() -> Any:
    """The name tj documents for the host's CPU in this process: ``cpu`` where it is
    JAX's only CPU device (CPU and GPU machines), ``cpu:0`` among simulated ones (the
    proxy mode). Built from that rule, not read from tj, so a test comparing with it still
    catches tj naming the CPU otherwise."""
    import torch2jax_device as tj

    return tj.device("cpu", 0) if several_cpu_devices() else tj.device("cpu")


def torch_named_here(device: Any) -> Any:
    """torch's ``device``, its CPU named as tj names the host CPU in this process.

    torch has one CPU and calls every CPU tensor's device ``cpu``; tj does too where JAX
    has one CPU device, and calls simulated CPU devices ``cpu:N`` (documented). A test of
    how a device reads (``str``, ``==``, its index) compares tj's answers with torch's for
    the device of the same name: ``torch.device("cpu", 0)`` in the proxy mode, the
    device itself elsewhere.
    """
    import torch

    if device.type != "cpu" or device.index is not None or not several_cpu_devices():
        return device
    return torch.device("cpu", 0)


def xfail_off_torch_cpu(request: Any, reason: str) -> None:
    """Expect the running test to fail (strictly) where JAX's default device is not the
    CPU torch uses: a library gap that only shows there, written down in ``reason`` with
    the fix asked for. Where the defaults agree the test must pass as usual.
    """
    import pytest

    if not jax_default_is_torch_cpu():
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
