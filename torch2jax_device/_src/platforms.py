"""The platform table, and what JAX has on this machine: backends, local devices, names.

``PLATFORMS`` is the one place that knows a platform: its JAX name, the device type
``tj.device`` gives it, the torch device type, its ``JAX_PLATFORMS`` spelling, whether it
is an accelerator, how its devices are numbered and how to install it. Every module that
needs one of these facts reads it from here, so adding a platform is one new row (and
``tests/unit/test_platforms.py`` checks that every consumer handles every row).

This is also the only module that asks JAX which backends exist:

* a device index is the position among *this process's* devices of one platform
  (``jax.local_devices(backend=...)``), or for GPUs the CUDA/HIP ordinal, never JAX's
  global ``Device.id``;
* the first call that needs backends initializes every backend JAX may use (JAX's
  own rule); importing this module does not.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import os
from collections.abc import Callable
from typing import Any

import jax

from .errors import BackendInitError

__all__ = [
    "ACCELERATORS",
    "PLATFORMS",
    "TORCH_DEVICE_TYPES",
    "TORCH_DEVICE_TYPE_NUMBERS",
    "Platform",
    "available_platforms",
    "backends_initialized",
    "by_name",
    "call_before_backends_start",
    "default_platform",
    "device_index",
    "device_indices",
    "device_type_of",
    "device_types",
    "jax_backends",
    "jax_default_device",
    "local_devices",
    "missing_platform_hint",
    "platform_of",
    "platforms_for_type",
    "torch_type_of",
]

#: Every device type ``torch.device`` accepts (torch 2.13), in torch's own order.
TORCH_DEVICE_TYPES: tuple[str, ...] = (
    "cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve",
    "fpga", "maia", "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone",
)  # fmt: skip

#: c10's ``DeviceType`` number of each, which ``hash(torch.device(...))`` is made of
#: (``number << 16 | index & 0xFF``, index -1 when none): fixed in torch's C++ ABI.
TORCH_DEVICE_TYPE_NUMBERS: dict[str, int] = {
    "cpu": 0, "cuda": 1, "mkldnn": 2, "opengl": 3, "opencl": 4, "ideep": 5, "hip": 6,
    "fpga": 7, "maia": 8, "xla": 9, "vulkan": 10, "xpu": 12, "mps": 13, "meta": 14,
    "hpu": 15, "ve": 16, "lazy": 17, "ipu": 18, "mtia": 19, "privateuseone": 20,
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Platform:
    """One JAX platform and every name and rule the library attaches to it.

    Attributes:
        name: JAX's platform name (``jax.Device.platform`` after ``gpu`` is told apart,
            the key of ``jax.extend.backend.backends()``): ``"cuda"``, ``"METAL"``...
        device_type: The type of its devices in ``tj.device`` (``"cuda"``, ``"mps"``).
        aliases: Other device types it serves, e.g. ``"gpu"``; when several platforms
            serve a type, the first row with devices wins.
        torch_type: The ``torch.device`` type of the same hardware (ROCm GPUs are
            ``cuda`` in torch), or ``None`` where torch has none.
        environment_name: Its spelling in ``JAX_PLATFORMS``.
        default_device_name: The string ``jax_default_device`` accepts for it, if any.
        accelerator: Whether ``tj.accelerator`` considers it (rows in preference order).
        hardware_ordinals: Its device index is the CUDA/HIP ordinal
            (``local_hardware_id``), as in torch, rather than the position.
        visible_devices_variables: Environment variables that hide its devices.
        plugins: Distributions that add it to JAX (``torch.backends.*.is_built``).
        install_hint: How to get it, when JAX has none.
    """

    name: str
    device_type: str
    aliases: tuple[str, ...]
    torch_type: str | None
    environment_name: str
    default_device_name: str | None
    accelerator: bool
    hardware_ordinals: bool
    visible_devices_variables: tuple[str, ...]
    plugins: tuple[str, ...]
    install_hint: str


#: Every platform the library knows, accelerators in ``tj.accelerator``'s preference order.
PLATFORMS: tuple[Platform, ...] = (
    Platform(
        name="cuda",
        device_type="cuda",
        aliases=("gpu",),
        torch_type="cuda",
        environment_name="cuda",
        default_device_name="gpu",
        accelerator=True,
        hardware_ordinals=True,
        visible_devices_variables=("CUDA_VISIBLE_DEVICES",),
        plugins=(
            "jax-cuda13-plugin",
            "jax-cuda13-pjrt",
            "jax-cuda12-plugin",
            "jax-cuda12-pjrt",
            "jax-cuda11-plugin",
        ),
        install_hint=(
            "install a CUDA build of JAX (pip install 'jax[cuda12]', or 'jax[cuda13]' for a "
            "driver whose nvidia-smi says CUDA Version 13; in a torch2jax_device checkout, "
            "pip install '.[cuda12]'), check that nvidia-smi sees the GPU and that "
            "CUDA_VISIBLE_DEVICES does not hide it"
        ),
    ),
    Platform(
        name="rocm",
        device_type="rocm",
        aliases=("gpu", "hip"),
        torch_type="cuda",
        environment_name="rocm",
        default_device_name="gpu",
        accelerator=True,
        hardware_ordinals=True,
        visible_devices_variables=("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"),
        plugins=("jax-rocm7-plugin", "jax-rocm7-pjrt", "jax-rocm60-plugin", "jax-rocm60-pjrt"),
        install_hint="install JAX's ROCm plugin (see the JAX installation guide for AMD GPUs)",
    ),
    Platform(
        name="tpu",
        device_type="tpu",
        aliases=(),
        torch_type=None,
        environment_name="tpu",
        default_device_name="tpu",
        accelerator=True,
        hardware_ordinals=False,
        visible_devices_variables=(),
        plugins=("libtpu",),
        install_hint="install JAX for TPU (pip install 'jax[tpu]') on a TPU VM",
    ),
    Platform(
        name="METAL",
        device_type="mps",
        aliases=(),
        torch_type="mps",
        environment_name="METAL",
        default_device_name=None,
        accelerator=True,
        hardware_ordinals=False,
        visible_devices_variables=(),
        plugins=("jax-metal",),
        install_hint="install the jax-metal plugin on Apple silicon (pip install jax-metal)",
    ),
    Platform(
        name="cpu",
        device_type="cpu",
        aliases=(),
        torch_type="cpu",
        environment_name="cpu",
        default_device_name="cpu",
        accelerator=False,
        hardware_ordinals=False,
        visible_devices_variables=(),
        plugins=(),
        install_hint="JAX always has a CPU backend unless JAX_PLATFORMS leaves it out",
    ),
)

#: Accelerator platforms in the order ``tj.accelerator`` looks for them.
ACCELERATORS: tuple[str, ...] = tuple(p.name for p in PLATFORMS if p.accelerator)

_BY_NAME = {platform.name: platform for platform in PLATFORMS}
# What the layers above need done before tj starts JAX's backends (call_before_backends_start).
_BEFORE_BACKENDS_START: list[Callable[[], None]] = []
# Device types that name no platform but get a specific answer.
_NO_PLATFORM_HINTS = {
    "meta": (
        "JAX has no 'meta' device; for shape-only work use jax.eval_shape or "
        "jax.ShapeDtypeStruct (flax: nnx.eval_shape)"
    ),
}


def by_name(name: str) -> Platform:
    """The row of JAX platform ``name``.

    Raises:
        KeyError: the library does not know the platform.
    """
    return _BY_NAME[name]


def device_types() -> tuple[str, ...]:
    """Every device type ``tj.device`` accepts: torch's, then the JAX-only ones."""
    extra = [p.device_type for p in PLATFORMS] + [a for p in PLATFORMS for a in p.aliases]
    return TORCH_DEVICE_TYPES + tuple(
        dict.fromkeys(t for t in extra if t not in TORCH_DEVICE_TYPES)
    )


def platforms_for_type(device_type: str) -> tuple[str, ...]:
    """The JAX platforms that can serve a device type, in order of preference.

    ``"xla"`` means whatever XLA runs on by default (this starts JAX's backends).
    """
    if device_type == "xla":
        return (default_platform(),)
    return tuple(
        p.name for p in PLATFORMS if device_type == p.device_type or device_type in p.aliases
    )


def backends_initialized() -> bool:
    """Whether JAX has already created its backends (never creates them itself)."""
    from jax._src import xla_bridge

    check = getattr(xla_bridge, "backends_are_initialized", None)
    return bool(check()) if check is not None else False


def _extend_backend() -> Any:
    """``jax.extend.backend``, imported on first use (it loads Pallas: ~20 ms).

    Through ``importlib``, never ``import jax.extend.backend``: that statement then reads
    ``jax.extend`` as an attribute, which another thread still importing ``jax.extend``
    has not set yet, so threads starting together failed with ``AttributeError``.
    """
    return importlib.import_module("jax.extend.backend")


def jax_backends() -> dict[str, Any]:
    """JAX's backends keyed by platform name; initializes them on first call.

    Raises:
        BackendInitError: JAX could not start a backend it was told to use, which
            happens when ``JAX_PLATFORMS`` lists a platform this machine lacks. The
            message has JAX's reason and what was attempted (the platforms asked for,
            their plugins, the hardware JAX looked for, the variables that hide it).
    """
    _before_backends_start()
    try:
        return dict(_extend_backend().backends())
    except Exception as err:  # JAX's own reason, whatever its class, goes into the message
        raise BackendInitError(_start_failure(err)) from err


def _start_failure(err: Exception) -> str:
    """Why JAX did not start, what it attempted and the fix; never an empty reason."""
    from jax._src import config, xla_bridge

    requested = str(config.jax_platforms.value or "")  # JAX_PLATFORMS, or configure's
    asked = [name.strip() for name in requested.split(",") if name.strip()]
    attempted = [name for item in asked for name in xla_bridge.expand_platform_alias(item)]
    if str(err):
        reason = f"{type(err).__name__}: {err}"
    elif asked:
        reason = f"it started none of JAX_PLATFORMS={requested!r} and gave no reason"
    else:
        reason = f"{type(err).__name__} without a message"
    described = "; ".join(_attempt(name) for name in attempted)
    if not asked:
        fix = "check the JAX installation (pip install -U jax jaxlib)"
    else:
        first = _BY_NAME[attempted[0]].environment_name if attempted[0] in _BY_NAME else asked[0]
        fix = (
            f"JAX_PLATFORMS={requested!r} names a platform that cannot start here; add the "
            f"CPU as a fallback (JAX_PLATFORMS='{first},cpu') or unset it, before JAX starts "
            "(for NVIDIA GPUs write 'cuda,cpu', never 'gpu', which also requires ROCm and "
            "oneAPI)"
        )
    missing = [
        _BY_NAME[name]
        for name in attempted
        if name in _BY_NAME and _BY_NAME[name].plugins and not _installed_plugins(_BY_NAME[name])
    ]
    if missing:
        fix += f"; to use {missing[0].device_type}: {missing[0].install_hint}"
    return (
        f"JAX could not initialize its backends: {reason}. "
        f"Attempted: {described or 'every backend JAX has (JAX_PLATFORMS is unset)'}. "
        f"Fix: {fix}."
    )


def _attempt(name: str) -> str:
    """What starting platform ``name`` involves here: plugins, hardware, variables."""
    row = _BY_NAME.get(name)
    if row is None:
        return f"{name} (a platform torch2jax_device does not know)"
    facts = []
    if row.plugins:
        facts.append(", ".join(_installed_plugins(row)) or "no plugin installed")
    if name == "cuda":
        from jax._src import hardware_utils

        if not hardware_utils.has_visible_nvidia_gpu():
            facts.append(
                "no NVIDIA device node (/dev/nvidia0, /dev/nvidiactl, /dev/dxg), so JAX "
                "skips it without trying"
            )
    facts += [
        f"{variable}={os.environ[variable]!r}"
        for variable in row.visible_devices_variables
        if variable in os.environ
    ]
    return f"{name} ({'; '.join(facts)})" if facts else name


def _installed_plugins(row: Platform) -> list[str]:
    """The distributions of ``row.plugins`` installed here, with their versions."""
    versions = {name: _version(name) for name in row.plugins}
    return [f"{name} {version}" for name, version in versions.items() if version]


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def call_before_backends_start(hook: Callable[[], None]) -> None:
    """Have ``hook`` run before the first tj call that starts JAX's backends.

    The layers above register what must happen first: ``distributed`` joins the job a
    launcher started (``jax.distributed`` must start before the backends). Each hook
    runs at every such call until the backends are up, so it must be idempotent; it is
    registered once (registering it again changes nothing).
    """
    if hook not in _BEFORE_BACKENDS_START:
        _BEFORE_BACKENDS_START.append(hook)


def _before_backends_start() -> None:
    if not backends_initialized():
        _start_each_platform_once()
        for hook in _BEFORE_BACKENDS_START:
            hook()


def _start_each_platform_once() -> None:
    """Drop repeated names from the platform list (``JAX_PLATFORMS``) before JAX reads it.

    JAX accepts ``cpu,cpu`` but starts one client per name: new arrays go to the first,
    ``jax.local_devices(backend="cpu")`` lists the second's devices (which never equal the
    first's), and a GPU named twice is started, its memory preallocated, twice.
    """
    from jax._src import config

    names = str(config.jax_platforms.value or "").split(",")
    once = list(dict.fromkeys(names))
    if len(once) < len(names):
        jax.config.update("jax_platforms", ",".join(once))


def jax_default_device() -> jax.Device:
    """The device JAX itself puts new arrays on (``jax_default_device``, else its first)."""
    _before_backends_start()
    device: jax.Device = _extend_backend().get_default_device()
    return device


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
    """This process's devices of ``platform``, in index order; ``[]`` if it is absent.

    Those of JAX's default backend when it serves ``platform``: when JAX started it twice
    (``JAX_PLATFORMS=cpu,cpu`` before tj could drop the repeat), arrays go to the first.
    """
    if platform not in jax_backends():
        return []
    defaults = jax.local_devices()
    if platform_of(defaults[0]) == platform:
        return list(defaults)
    return list(jax.local_devices(backend=platform))


def device_indices(platform: str) -> dict[int, jax.Device]:
    """This process's devices of ``platform`` keyed by their torch-style index.

    A GPU's index is its CUDA/HIP ordinal on the host (``local_hardware_id``), as in
    torch: a process that owns only GPU 3 (one process per GPU, which
    ``tj.distributed.init_process_group`` sets up from ``LOCAL_RANK``) calls it
    ``cuda:3``, as the PyTorch script did. Other devices are numbered by position.
    """
    devices = local_devices(platform)
    row = _BY_NAME.get(platform)
    if row is not None and row.hardware_ordinals:
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


def device_type_of(platform: str) -> str:
    """The ``tj.device`` type of a platform's devices (``METAL`` -> ``mps``)."""
    row = _BY_NAME.get(platform)
    return platform if row is None else row.device_type


def torch_type_of(device_type: str) -> str | None:
    """The ``torch.device`` type for a ``tj.device`` type; ``None`` where torch has none.

    Types no platform serves (``xpu``, ``xla``...) are torch's own and stay as they are.
    """
    for platform in PLATFORMS:
        if device_type == platform.device_type or device_type in platform.aliases:
            return platform.torch_type
    return device_type


def missing_platform_hint(device_type: str) -> str:
    """How to get a device of ``device_type`` when JAX has none."""
    if device_type in _NO_PLATFORM_HINTS:
        return _NO_PLATFORM_HINTS[device_type]
    wanted = platforms_for_type(device_type) if device_type != "xla" else ()
    if not wanted:
        return f"JAX has no backend for torch device type '{device_type}'"
    requested = os.environ.get("JAX_PLATFORMS", "")
    if requested:
        spellings = [_BY_NAME[name].environment_name for name in wanted]
        if not set(spellings) & set(requested.split(",")):
            return (
                f"JAX_PLATFORMS={requested!r} excludes it; add {spellings[0]!r} before JAX starts"
            )
    return _BY_NAME[wanted[0]].install_hint


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or ``None`` (``doctor`` lists them)."""
    return _version(distribution)


def installed_plugins() -> dict[str, str]:
    """Every JAX plugin of the platform table installed here, with its version."""
    return {
        name: version
        for row in PLATFORMS
        for name in row.plugins
        if (version := _version(name)) is not None
    }
