"""What JAX has on this machine: backends, their local devices, and the names of both.

This is the only module that asks JAX which backends exist. Everything that needs to
know goes through it, so the rules live in one place:

* torch device types (``cuda``, ``mps``, ...) and JAX platform names (``cuda``,
  ``rocm``, ``METAL``, ...) are translated by two tables below;
* a device index always means the position among *this process's* devices of one
  platform (``jax.local_devices(backend=...)``), never the global ``Device.id``;
* the first call initializes every backend JAX may use (JAX's own rule); importing
  this module does not.
"""

from __future__ import annotations

import os
from typing import Any

import jax

from ._errors import BackendInitError

__all__ = [
    "ACCELERATOR_PLATFORMS",
    "JAX_DEVICE_TYPES",
    "TORCH_DEVICE_TYPES",
    "available_platforms",
    "backends_initialized",
    "default_platform",
    "device_index",
    "device_indices",
    "jax_backends",
    "local_devices",
    "missing_platform_hint",
    "platform_of",
    "platforms_for_type",
    "torch_type_of_platform",
]

#: Every device type ``torch.device`` accepts (torch 2.13), in torch's own order.
TORCH_DEVICE_TYPES: tuple[str, ...] = (
    "cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve",
    "fpga", "maia", "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone",
)  # fmt: skip

#: JAX platform names accepted as device types on top of torch's.
JAX_DEVICE_TYPES: tuple[str, ...] = ("gpu", "tpu", "rocm")

#: Accelerator platforms in the order ``tj.accelerator`` looks for them.
ACCELERATOR_PLATFORMS: tuple[str, ...] = ("cuda", "rocm", "tpu", "METAL")

# Device type -> JAX platforms that can serve it, first match wins. "xla" means
# "whatever XLA runs on by default", so it is resolved by ``platforms_for_type``.
_PLATFORMS_FOR_TYPE: dict[str, tuple[str, ...]] = {
    "cpu": ("cpu",),
    "cuda": ("cuda",),
    "rocm": ("rocm",),
    "gpu": ("cuda", "rocm"),
    "tpu": ("tpu",),
    "mps": ("METAL",),
}

_TYPE_FOR_PLATFORM: dict[str, str] = {
    "cpu": "cpu",
    "cuda": "cuda",
    "rocm": "rocm",
    "tpu": "tpu",
    "METAL": "mps",
}

_INSTALL_HINTS: dict[str, str] = {
    "cuda": (
        "install a CUDA build of JAX (pip install 'torch2jax-device[cuda12]', or "
        "'jax[cuda12]' / 'jax[cuda13]'), check that nvidia-smi sees the GPU and that "
        "CUDA_VISIBLE_DEVICES does not hide it"
    ),
    "rocm": "install JAX's ROCm plugin (see the JAX installation guide for AMD GPUs)",
    "gpu": "install a GPU build of JAX (pip install 'torch2jax-device[cuda12]' on NVIDIA)",
    "tpu": "install JAX for TPU (pip install 'jax[tpu]') on a TPU VM",
    "mps": "install the jax-metal plugin on Apple silicon (pip install jax-metal)",
    "meta": (
        "JAX has no 'meta' device; for shape-only work use jax.eval_shape or "
        "jax.ShapeDtypeStruct (flax: nnx.eval_shape)"
    ),
}


def backends_initialized() -> bool:
    """Whether JAX has already created its backends (never creates them itself)."""
    from jax._src import xla_bridge

    check = getattr(xla_bridge, "backends_are_initialized", None)
    return bool(check()) if check is not None else False


def jax_backends() -> dict[str, Any]:
    """JAX's backends keyed by platform name; initializes them on first call.

    Raises:
        BackendInitError: JAX could not start a backend it was told to use, which
            happens when ``JAX_PLATFORMS`` lists a platform this machine lacks.
    """
    import jax.extend.backend

    try:
        return dict(jax.extend.backend.backends())
    except (RuntimeError, AssertionError) as err:
        requested = os.environ.get("JAX_PLATFORMS", "")
        fix = (
            f"JAX_PLATFORMS={requested!r} names a platform that could not start; use "
            "'cuda,cpu' (never 'gpu', which also requires ROCm) or unset it, and set it "
            "before JAX starts"
            if requested
            else "check the JAX installation (pip install -U jax jaxlib)"
        )
        message = f"JAX could not initialize its backends: {err}. Fix: {fix}."
        raise BackendInitError(message) from err


def default_platform() -> str:
    """The platform JAX places new arrays on when nothing else is said."""
    jax_backends()
    return platform_of(jax.local_devices()[0])


def available_platforms() -> list[str]:
    """Every initialized JAX platform that has at least one local device, default first."""
    names = [name for name in jax_backends() if local_devices(name)]
    default = default_platform()
    return sorted(names, key=lambda name: name != default)


def local_devices(platform: str) -> list[jax.Device]:
    """This process's devices of ``platform``, in index order; ``[]`` if it is absent."""
    if platform not in jax_backends():
        return []
    return list(jax.local_devices(backend=platform))


def device_indices(platform: str) -> dict[int, jax.Device]:
    """This process's devices of ``platform`` keyed by their torch-style index.

    A GPU's index is its CUDA/HIP ordinal on the host (``local_hardware_id``), as in
    torch: a process that owns only GPU 3 (one process per GPU, which
    ``tj.distributed.init_process_group`` sets up from ``LOCAL_RANK``) calls it
    ``cuda:3``, as the PyTorch script did. Other devices are numbered by position.
    """
    devices = local_devices(platform)
    if platform in ("cuda", "rocm"):
        return {int(device.local_hardware_id): device for device in devices}
    return dict(enumerate(devices))


def device_index(device: jax.Device) -> int | None:
    """The torch-style index of ``device``; ``None`` if another process owns it."""
    for index, candidate in device_indices(platform_of(device)).items():
        if candidate == device:
            return index
    return None


def platform_of(device: jax.Device) -> str:
    """The backend name of a ``jax.Device`` (``cuda`` or ``rocm``, never ``gpu``)."""
    if device.platform == "gpu":
        version = str(device.client.platform_version).lower()
        return "rocm" if "rocm" in version else "cuda"
    return str(device.platform)


def torch_type_of_platform(platform: str) -> str:
    """The device type a ``jax.Device`` of ``platform`` gets (``METAL`` -> ``mps``)."""
    return _TYPE_FOR_PLATFORM.get(platform, platform)


def platforms_for_type(device_type: str) -> tuple[str, ...]:
    """The JAX platforms that can serve a device type, in order of preference."""
    if device_type == "xla":
        return (default_platform(),)
    return _PLATFORMS_FOR_TYPE.get(device_type, ())


def missing_platform_hint(device_type: str) -> str:
    """How to get a device of ``device_type`` when JAX has none."""
    hint = _INSTALL_HINTS.get(device_type)
    if hint is None:
        return f"JAX has no backend for torch device type '{device_type}'"
    requested = os.environ.get("JAX_PLATFORMS", "")
    wanted = _PLATFORMS_FOR_TYPE.get(device_type, ())
    if requested and wanted and not set(wanted) & set(requested.split(",")):
        return f"JAX_PLATFORMS={requested!r} excludes it; add {wanted[0]!r} before JAX starts"
    return hint
