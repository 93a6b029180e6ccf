"""Start-up settings: platforms, preallocation, memory fraction, allocator, CPU count.

JAX reads these once, when its backends start, and ignores (sometimes silently) later
changes. This module owns the rules for them, in one place for both of their users:

* ``tj.configure`` writes settings the way JAX reads them, refuses values JAX would
  reject or misread, and refuses to run once the backends are up, so a setting is never
  accepted and then not applied;
* ``check_environment`` judges an environment with the same rules, for
  ``torch2jax-device doctor``.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

from .device import Device
from .errors import AlreadyInitializedError, ConfigError
from .platforms import PLATFORMS, backends_initialized, jax_backends, platforms_for_type

__all__ = ["Problem", "allocator_problem", "check_environment", "configure"]

_ALLOCATORS = ("default", "platform", "bfc", "cuda_async", "vmm")
#: The two names of the memory fraction JAX reads; it refuses to start with both set.
FRACTION_VARIABLES = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")
# What JAX's XLA_PYTHON_CLIENT_PREALLOCATE parser reads as "off"; anything else is on.
_PREALLOCATE_OFF = ("false", "False", "0")
_PREALLOCATE_ON = ("true", "True", "1")


@dataclasses.dataclass(frozen=True)
class Problem:
    """A start-up setting that does not do what it seems to.

    Attributes:
        level: ``"error"`` (JAX fails or refuses it), ``"warning"`` (it silently does
            something else) or ``"info"``.
        code: A stable identifier (``doctor --json`` prints it).
        message: What is wrong, naming the setting and its value.
        fix: What to do instead.
    """

    level: str
    code: str
    message: str
    fix: str


# -- the rules, one function per setting, each naming the setting as the user wrote it --


def platforms_problem(names: Sequence[str], setting: str) -> str | None:
    """Why a list of platforms cannot be ``JAX_PLATFORMS``, or ``None`` if it can."""
    if not names or any(not name for name in names):
        return f"{setting} must name at least one backend, got {','.join(names)!r}"
    written = ",".join(names)
    if "gpu" in names:
        return (
            f"{setting}={written!r} makes JAX start CUDA, ROCm and oneAPI and fail unless all "
            f"of them start; say 'cuda' (NVIDIA) or 'rocm' (AMD), e.g. {setting}='cuda,cpu'"
        )
    known = [p.environment_name for p in PLATFORMS] + [p.device_type for p in PLATFORMS]
    unknown = [name for name in names if name not in known]
    if unknown:
        return (
            f"unknown platform {unknown[0]!r} in {setting}={written!r}; expected some of "
            f"{', '.join(p.device_type for p in PLATFORMS)}"
        )
    return None


def fraction_problem(text: str, setting: str) -> str | None:
    """Why ``text`` is not a memory fraction JAX accepts, or ``None``."""
    try:
        value = float(text)
    except ValueError:
        return f"{setting}={text!r} is not a number in (0, 1]"
    if not 0 < value <= 1:
        return (
            f"{setting} must be in (0, 1], got {text}: it is the share of the GPU's memory "
            "JAX may use (e.g. 0.5)"
        )
    return None


def allocator_problem(text: str, setting: str) -> str | None:
    """Why ``text`` is not an ``XLA_PYTHON_CLIENT_ALLOCATOR`` this JAX accepts, or ``None``."""
    allowed = _ALLOCATORS + (("address",) if _jaxlib_newer_than((0, 10, 2)) else ())
    if text in allowed:
        return None
    return (
        f"{setting}: unknown allocator {text!r}; JAX accepts {', '.join(allowed)} "
        "('platform' is the one that returns memory to the driver)"
    )


def _platforms_rule(env: Mapping[str, str]) -> list[Problem]:
    text = env.get("JAX_PLATFORMS")
    if not text:
        return []
    problem = platforms_problem([name.strip() for name in text.split(",")], "JAX_PLATFORMS")
    if problem is None:
        return []
    code = "jax-platforms-gpu" if "gpu" in text.split(",") else "jax-platforms-unknown"
    return [Problem("warning", code, problem, "write JAX_PLATFORMS=cuda,cpu or unset it")]


def _preallocate_rule(env: Mapping[str, str]) -> list[Problem]:
    value = env.get("XLA_PYTHON_CLIENT_PREALLOCATE")
    if not value or value in _PREALLOCATE_OFF + _PREALLOCATE_ON:
        return []
    return [
        Problem(
            "warning",
            "preallocate-not-disabled",
            f"XLA_PYTHON_CLIENT_PREALLOCATE={value!r} leaves preallocation ON: JAX only "
            "reads 'false', 'False' and '0' as off",
            "set XLA_PYTHON_CLIENT_PREALLOCATE=false (or tj.configure(preallocate=False))",
        )
    ]


def _fraction_rule(env: Mapping[str, str]) -> list[Problem]:
    new, old = (env.get(name) for name in FRACTION_VARIABLES)
    problems = []
    if new and old:
        problems.append(
            Problem(
                "error",
                "mem-fraction-both",
                "both XLA_CLIENT_MEM_FRACTION and XLA_PYTHON_CLIENT_MEM_FRACTION are set: "
                "JAX refuses to start its GPU backend",
                "unset XLA_PYTHON_CLIENT_MEM_FRACTION (deprecated)",
            )
        )
    for name, value in zip(FRACTION_VARIABLES, (new, old), strict=True):
        problem = None if not value else fraction_problem(value, name)
        if problem is not None:
            problems.append(
                Problem(
                    "error",
                    "mem-fraction-invalid",
                    problem,
                    f"set {name} to the share of GPU memory JAX may use, e.g. 0.5",
                )
            )
    if old and not new and fraction_problem(old, FRACTION_VARIABLES[1]) is None:
        problems.append(
            Problem(
                "info",
                "mem-fraction-deprecated",
                "XLA_PYTHON_CLIENT_MEM_FRACTION is the deprecated name",
                f"rename it to XLA_CLIENT_MEM_FRACTION={old}",
            )
        )
    return problems


def _allocator_rule(env: Mapping[str, str]) -> list[Problem]:
    value = env.get("XLA_PYTHON_CLIENT_ALLOCATOR")
    # JAX lower-cases the value before reading it.
    problem = None if not value else allocator_problem(value.lower(), "XLA_PYTHON_CLIENT_ALLOCATOR")
    if problem is None:
        return []
    return [Problem("error", "allocator-invalid", problem, "use default, platform or bfc")]


def _visible_devices_rule(env: Mapping[str, str]) -> list[Problem]:
    problems = []
    for platform in PLATFORMS:
        for name in platform.visible_devices_variables:
            value = env.get(name)
            if value is not None and value.strip() in ("", "-1"):
                problems.append(
                    Problem(
                        "info",
                        f"{platform.device_type}-devices-hidden",
                        f"{name}={value!r} hides every {platform.name} device from JAX and torch",
                        f"unset {name} to use them",
                    )
                )
    return problems


def _simulated_devices_rule(env: Mapping[str, str]) -> list[Problem]:
    if "xla_force_host_platform_device_count" not in env.get("XLA_FLAGS", ""):
        return []
    return [
        Problem(
            "info",
            "simulated-cpu-devices",
            "XLA_FLAGS simulates several CPU devices",
            "JAX_NUM_CPU_DEVICES=N (or tj.configure(num_cpu_devices=N)) does the same",
        )
    ]


#: Every start-up rule; ``check_environment`` runs them in this order.
RULES: tuple[Callable[[Mapping[str, str]], list[Problem]], ...] = (
    _platforms_rule,
    _preallocate_rule,
    _fraction_rule,
    _allocator_rule,
    _visible_devices_rule,
    _simulated_devices_rule,
)

#: The environment variables the rules read.
VARIABLES: tuple[str, ...] = (
    "JAX_PLATFORMS",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    *reversed(FRACTION_VARIABLES),
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    *(name for platform in PLATFORMS for name in platform.visible_devices_variables),
    "XLA_FLAGS",
    "JAX_NUM_CPU_DEVICES",
)


def check_environment(env: Mapping[str, str]) -> list[Problem]:
    """Traps in a start-up environment, judged as JAX will read it.

    Examples:
        >>> from torch2jax_device._src.startup import check_environment
        >>> [problem.code for problem in check_environment({"JAX_PLATFORMS": "gpu,cpu"})]
        ['jax-platforms-gpu']
    """
    return [problem for rule in RULES for problem in rule(env)]


# -- configure ----------------------------------------------------------------------------


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
            type (``"cpu"``, ``"cuda"``, ``"rocm"``, ``"tpu"``, or one with index 0).
            Unlike [`tj.set_default_device`][torch2jax_device.set_default_device], it
            applies to every thread.
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

    Examples:
        At the top of a script, before anything touches a device:

        >>> import torch2jax_device as tj
        >>> tj.configure(preallocate=False)  # doctest: +SKIP
        {'XLA_PYTHON_CLIENT_PREALLOCATE': 'false'}

        Values JAX would misread are refused, and nothing is written:

        >>> try:
        ...     tj.configure(platforms="gpu")
        ... except tj.ConfigError as error:
        ...     print(str(error).split(";")[0])
        platforms='gpu' makes JAX start CUDA, ROCm and oneAPI and fail unless all of them start
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
        environment["XLA_PYTHON_CLIENT_ALLOCATOR"] = _checked(
            allocator if isinstance(allocator, str) else repr(allocator),
            allocator_problem,
            "allocator",
        )
    if num_cpu_devices is not None:
        options["jax_num_cpu_devices"] = _cpu_count_value(num_cpu_devices)
    _require_not_started(environment)

    os.environ.update(environment)
    if "XLA_CLIENT_MEM_FRACTION" in environment:
        os.environ.pop("XLA_PYTHON_CLIENT_MEM_FRACTION", None)
    for name, value in options.items():
        jax.config.update(name, value)
    return {**environment, **{name: str(value) for name, value in options.items()}}


def _checked(text: str, rule: Callable[[str, str], str | None], setting: str) -> str:
    problem = rule(text, setting)
    if problem is not None:
        raise ConfigError(problem)
    return text


def _require_not_started(environment: dict[str, str]) -> None:
    if not backends_initialized():
        return
    running = ", ".join(jax_backends()) or "none"
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
    if any(not isinstance(name, str) for name in names):
        raise ConfigError(f"platforms must be strings such as 'cuda,cpu', got {platforms!r}")
    stripped = [name.strip() for name in names]
    problem = platforms_problem(stripped, "platforms")
    if problem is not None:
        raise ConfigError(problem)
    spelling = {p.device_type: p.environment_name for p in PLATFORMS}
    return ",".join(spelling.get(name, name) for name in stripped)


def _default_device_value(spec: Any) -> str:
    if isinstance(spec, int) and not isinstance(spec, bool):
        # tj.device(0) means "index 0 of the current accelerator", which only a running
        # JAX can tell: resolving it here would start the backends configure must precede.
        raise ConfigError(
            f"configure(default_device={spec}) cannot know which accelerator index {spec} "
            "names before JAX starts; name the type instead, e.g. "
            "configure(default_device='cuda')"
        )
    device = Device(spec)
    platform_names = platforms_for_type(device.type) if device.type != "xla" else ()
    names = {p.default_device_name for p in PLATFORMS if p.name in platform_names}
    accepted = sorted(p.device_type for p in PLATFORMS if p.default_device_name)
    if len(names) != 1 or None in names or (device.index or 0) != 0:
        raise ConfigError(
            f"configure(default_device={str(device)!r}) needs an unindexed "
            f"{', '.join(accepted[:-1])} or {accepted[-1]} device (JAX resolves it when it "
            f"starts); for another device use tj.set_default_device({str(device)!r}) after "
            "start-up"
        )
    name = names.pop()
    assert name is not None
    return name


def _cpu_count_value(count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, int):
        raise ConfigError(f"num_cpu_devices must be an int, not {count!r}")
    if count < 1:
        raise ConfigError(f"num_cpu_devices must be at least 1, got {count}")
    return count


def _fraction_value(fraction: float) -> str:
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise ConfigError(f"memory_fraction must be a number, not {fraction!r}")
    return _checked(repr(float(fraction)), fraction_problem, "memory_fraction")


def _jaxlib_newer_than(version: tuple[int, ...]) -> bool:
    text = importlib.metadata.version("jaxlib")
    parts = tuple(int(p) for p in text.split(".")[:3] if p.isdigit())
    return parts > version
