"""Start-up configuration: platforms, preallocation, memory fraction, allocator, CPU count.

JAX reads these once, when its backends start, and ignores (sometimes silently) later
changes. :func:`configure` writes them the way JAX reads them and refuses to run once
the backends are up, so a setting is never accepted and then not applied.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Sequence
from typing import Any

import jax

from . import _platforms
from ._device import Device
from ._errors import AlreadyInitializedError, ConfigError

__all__ = ["configure"]

# torch device type (or JAX platform name) -> the JAX_PLATFORMS spelling.
_PLATFORM_NAMES = {"cpu": "cpu", "cuda": "cuda", "rocm": "rocm", "tpu": "tpu", "mps": "METAL"}
# Unindexed default devices JAX's jax_default_device option accepts as strings.
_DEFAULT_DEVICE_NAMES = {"cpu": "cpu", "cuda": "gpu", "rocm": "gpu", "gpu": "gpu", "tpu": "tpu"}
_ALLOCATORS = ("default", "platform", "bfc", "cuda_async", "vmm")
_FRACTION_VARIABLES = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")


def configure(
    platforms: str | Sequence[str] | None = None,
    default_device: Any = None,
    preallocate: bool | None = None,
    memory_fraction: float | None = None,
    allocator: str | None = None,
    num_cpu_devices: int | None = None,
) -> dict[str, str]:
    """Set JAX's start-up options, checked, before its backends start.

    Call it at the top of a script, before anything touches a device. PyTorch's lazy
    GPU memory is one call away: ``tj.configure(preallocate=False)``.

    Args:
        platforms: Backends JAX may start, in priority order: ``"cuda,cpu"`` or
            ``["cuda", "cpu"]``. torch names are accepted (``"mps"`` is written as
            ``METAL``); ``"gpu"`` is refused because JAX expands it to CUDA, ROCm and
            oneAPI and fails unless all of them start — say ``"cuda"`` or ``"rocm"``.
        default_device: Process-wide default device for new arrays, an unindexed
            type (``"cpu"``, ``"cuda"``, ``"tpu"``, or index 0). Unlike
            :func:`~torch2jax_device.set_default_device`, it applies to every thread.
        preallocate: ``False`` makes JAX allocate GPU memory as needed, like PyTorch,
            instead of taking 75 % of the card at the first operation.
        memory_fraction: Fraction of GPU memory JAX may use, in (0, 1]. Written to
            ``XLA_CLIENT_MEM_FRACTION`` only; the deprecated
            ``XLA_PYTHON_CLIENT_MEM_FRACTION`` is removed (JAX rejects both at once).
        allocator: ``"default"``, ``"platform"`` (allocates and frees on demand: the
            only one that returns memory to the driver, and slow), ``"bfc"``,
            ``"cuda_async"`` or ``"vmm"``.
        num_cpu_devices: How many CPU devices JAX creates (simulates several devices).

    Returns:
        What was written: environment variables (upper case) and JAX options
        (``jax_*``) with their values.

    Raises:
        AlreadyInitializedError: JAX's backends are already running; nothing is changed.
        ConfigError: a value JAX would reject or misread; nothing is changed.

    Example:
        >>> import torch2jax_device as tj
        >>> tj.configure(preallocate=False)  # doctest: +SKIP
        {'XLA_PYTHON_CLIENT_PREALLOCATE': 'false'}
    """
    environment: dict[str, str] = {}
    options: dict[str, Any] = {}
    if platforms is not None:
        options["jax_platforms"] = environment["JAX_PLATFORMS"] = _platforms_value(platforms)
    if default_device is not None:
        options["jax_default_device"] = _default_device_value(default_device)
    if preallocate is not None:
        if not isinstance(preallocate, bool):
            raise ConfigError(f"preallocate must be True or False, not {preallocate!r}")
        environment["XLA_PYTHON_CLIENT_PREALLOCATE"] = "true" if preallocate else "false"
    if memory_fraction is not None:
        environment["XLA_CLIENT_MEM_FRACTION"] = _fraction_value(memory_fraction)
    if allocator is not None:
        environment["XLA_PYTHON_CLIENT_ALLOCATOR"] = allocator_value(allocator)
    if num_cpu_devices is not None:
        options["jax_num_cpu_devices"] = _cpu_count_value(num_cpu_devices)
    _require_not_started(environment)

    os.environ.update(environment)
    if "XLA_CLIENT_MEM_FRACTION" in environment:
        os.environ.pop("XLA_PYTHON_CLIENT_MEM_FRACTION", None)
    for name, value in options.items():
        jax.config.update(name, value)
    return {**environment, **{name: str(value) for name, value in options.items()}}


def _require_not_started(environment: dict[str, str]) -> None:
    if not _platforms.backends_initialized():
        return
    running = ", ".join(_platforms.jax_backends()) or "none"
    wanted = " ".join(f"{name}={value}" for name, value in environment.items())
    raise AlreadyInitializedError(
        f"JAX's backends are already running (started: {running}), so start-up settings "
        "can no longer change and nothing was applied. Fix: call tj.configure(...) before "
        "anything that touches a device (jax.devices(), creating an array, "
        "tj.cuda.is_available()); in a notebook, restart the kernel and call it first"
        + (f"; or start Python with: {wanted}" if wanted else "")
        + "."
    )


def _platforms_value(platforms: str | Sequence[str]) -> str:
    names = platforms.split(",") if isinstance(platforms, str) else list(platforms)
    if not names or any(not isinstance(n, str) or not n.strip() for n in names):
        raise ConfigError(f"platforms must name at least one backend, got {platforms!r}")
    written = []
    for name in (n.strip() for n in names):
        if name == "gpu":
            raise ConfigError(
                "platforms='gpu' makes JAX start CUDA, ROCm and oneAPI and fail unless all of "
                "them start; say 'cuda' (NVIDIA) or 'rocm' (AMD), e.g. platforms='cuda,cpu'"
            )
        if name not in _PLATFORM_NAMES and name not in _PLATFORM_NAMES.values():
            raise ConfigError(
                f"unknown platform {name!r}; expected some of {', '.join(_PLATFORM_NAMES)}"
            )
        written.append(_PLATFORM_NAMES.get(name, name))
    return ",".join(written)


def _default_device_value(spec: Any) -> str:
    device = Device(spec)
    if device.type not in _DEFAULT_DEVICE_NAMES or (device.index or 0) != 0:
        raise ConfigError(
            f"configure(default_device={str(device)!r}) needs an unindexed cpu, cuda, rocm "
            "or tpu device (JAX resolves it when it starts); for another device use "
            f"tj.set_default_device({str(device)!r}) after start-up"
        )
    return _DEFAULT_DEVICE_NAMES[device.type]


def _cpu_count_value(count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, int):
        raise ConfigError(f"num_cpu_devices must be an int, not {count!r}")
    if count < 1:
        raise ConfigError(f"num_cpu_devices must be at least 1, got {count}")
    return count


def _fraction_value(fraction: float) -> str:
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise ConfigError(f"memory_fraction must be a number, not {fraction!r}")
    if not 0 < fraction <= 1:
        raise ConfigError(
            f"memory_fraction must be in (0, 1], got {fraction}: it is the share of the "
            "GPU's memory JAX may use (e.g. 0.5)"
        )
    return repr(float(fraction))


def allocator_value(allocator: str) -> str:
    """``allocator`` if this JAX accepts it as ``XLA_PYTHON_CLIENT_ALLOCATOR``.

    Raises:
        ConfigError: JAX would refuse it; the message lists what it accepts.
    """
    allowed = _ALLOCATORS + (("address",) if _jaxlib_newer_than((0, 10, 2)) else ())
    if allocator not in allowed:
        raise ConfigError(
            f"unknown allocator {allocator!r}; JAX accepts {', '.join(allowed)} "
            "('platform' is the one that returns memory to the driver)"
        )
    return allocator


def _jaxlib_newer_than(version: tuple[int, ...]) -> bool:
    text = importlib.metadata.version("jaxlib")
    parts = tuple(int(p) for p in text.split(".")[:3] if p.isdigit())
    return parts > version
