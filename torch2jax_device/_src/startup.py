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
import numbers
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
from jax._src import config as jax_config

from .allocators import allocator_problem
from .device import Device, is_index
from .errors import AlreadyInitializedError, ConfigError, Torch2JaxDeviceError
from .platforms import PLATFORMS, backends_initialized, jax_backends, platforms_for_type
from .precision import jax_precision

__all__ = [
    "CRASHES_AT_START",
    "MAX_CPU_DEVICES",
    "Problem",
    "check_environment",
    "configure",
    "cpu_count_problem",
    "glog_messages",
    "xla_failure_problems",
]

#: The two names of the memory fraction JAX reads; it refuses to start with both set.
FRACTION_VARIABLES = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")
#: What JAX's XLA_PYTHON_CLIENT_PREALLOCATE parser reads as "off"; anything else is on.
PREALLOCATE_OFF = ("false", "False", "0")
_PREALLOCATE_ON = ("true", "True", "1")
#: The most CPU devices JAX is asked to simulate. Each costs JAX a thread and about 130 KB,
#: and its start-up time grows with the square of the count (4096 devices: 5 s, 8192: 40 s
#: on the project's machine); 10**6 exhausts the process's threads or memory and crashes it.
MAX_CPU_DEVICES = 8192
# What JAX's bool_env reads as true and as false (any case); anything else is refused.
_TRUTH_VALUES = ("y", "yes", "t", "true", "on", "1", "n", "no", "f", "false", "off", "0")
# JAX options defined as flags whose default reads a variable of the same name strictly
# (options defined as states all do; the other flags read none, or leniently).
_STRICT_FLAG_VARIABLES = (
    "JAX_COMPILER_DETAILED_LOGGING_MIN_OPS",
    "JAX_DISABLE_MOST_OPTIMIZATIONS",
    "JAX_INCLUDE_DEBUG_INFO_IN_DUMPS",
    "JAX_PALLAS_VERBOSE_ERRORS",
    "JAX_TRACER_ERROR_NUM_TRACEBACK_FRAMES",
)
_XLA_SPACE = " \t\r\n"
# One flag as xla/parse_flags_from_env.cc reads it: a dash, name characters, then a
# quoted value after '=', or anything up to the next space.
_XLA_FLAG = re.compile(r"""-[-_A-Za-z0-9]*(?:="(?:\\.|[^"\\])*"?|='[^']*'?|[^ \t\r\n]*)""")
_XLA_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
# A glog line of XLA: "F1123 13:01:00.210967   24980 file.cc:234] message".
_GLOG_LINE = re.compile(r"^([FEW])\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\] (.*)$", re.MULTILINE)
#: Problems whose setting makes JAX's start crash the process or exhaust the machine:
#: ``doctor`` does not start JAX while one is present.
CRASHES_AT_START = frozenset({"cpu-devices-too-many"})


@dataclasses.dataclass(frozen=True)
class Problem:
    """A start-up setting that does not do what it seems to.

    Attributes:
        level: ``"error"`` (JAX fails or refuses it), ``"warning"`` (it silently does
            something else) or ``"info"``.
        code: A stable identifier (``doctor --json`` prints it).
        message: What is wrong, naming the setting and its value.
        fix: What to do instead.
        setting: The environment variable at fault, as written (``"JAX_ENABLE_X64"``,
            ``"XLA_FLAGS"``), or ``None`` when the problem is not one variable's.
    """

    level: str
    code: str
    message: str
    fix: str
    setting: str | None = None


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


def _platforms_rule(env: Mapping[str, str]) -> list[Problem]:
    text = env.get("JAX_PLATFORMS")
    if not text:
        return []
    problem = platforms_problem([name.strip() for name in text.split(",")], "JAX_PLATFORMS")
    if problem is None:
        return []
    code = "jax-platforms-gpu" if "gpu" in text.split(",") else "jax-platforms-unknown"
    return [
        Problem(
            "warning",
            code,
            problem,
            "write JAX_PLATFORMS=cuda,cpu or unset it",
            setting="JAX_PLATFORMS",
        )
    ]


def _preallocate_rule(env: Mapping[str, str]) -> list[Problem]:
    value = env.get("XLA_PYTHON_CLIENT_PREALLOCATE")
    if not value or value in PREALLOCATE_OFF + _PREALLOCATE_ON:
        return []
    return [
        Problem(
            "warning",
            "preallocate-not-disabled",
            f"XLA_PYTHON_CLIENT_PREALLOCATE={value!r} leaves preallocation ON: JAX only "
            "reads 'false', 'False' and '0' as off",
            "set XLA_PYTHON_CLIENT_PREALLOCATE=false (or tj.configure(preallocate=False))",
            setting="XLA_PYTHON_CLIENT_PREALLOCATE",
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
                setting="XLA_PYTHON_CLIENT_MEM_FRACTION",
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
                    setting=name,
                )
            )
    if old and not new and fraction_problem(old, FRACTION_VARIABLES[1]) is None:
        problems.append(
            Problem(
                "info",
                "mem-fraction-deprecated",
                "XLA_PYTHON_CLIENT_MEM_FRACTION is the deprecated name",
                f"rename it to XLA_CLIENT_MEM_FRACTION={old}",
                setting="XLA_PYTHON_CLIENT_MEM_FRACTION",
            )
        )
    return problems


def _allocator_rule(env: Mapping[str, str]) -> list[Problem]:
    value = env.get("XLA_PYTHON_CLIENT_ALLOCATOR")
    # JAX lower-cases the value before reading it.
    problem = None if not value else allocator_problem(value.lower(), "XLA_PYTHON_CLIENT_ALLOCATOR")
    if problem is None:
        return []
    return [
        Problem(
            "error",
            "allocator-invalid",
            problem,
            "use default, platform or bfc",
            setting="XLA_PYTHON_CLIENT_ALLOCATOR",
        )
    ]


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
                        setting=name,
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
            setting="XLA_FLAGS",
        )
    ]


def cpu_count_problem(count: int, setting: str) -> str | None:
    """Why ``count`` simulated CPU devices cannot be asked of JAX, or ``None``."""
    if count < 1:
        return f"{setting} must be at least 1, got {count}: JAX's CPU backend refuses to start"
    if count > MAX_CPU_DEVICES:
        return (
            f"{setting}={count} is more CPU devices than torch2jax_device lets JAX simulate "
            f"(at most {MAX_CPU_DEVICES}): each costs JAX a thread and memory, start-up time "
            "grows with the square of the count, and 10**6 exhausts the process's threads or "
            "memory and crashes it"
        )
    return None


def _jax_variables_rule(env: Mapping[str, str]) -> list[Problem]:
    """Every variable JAX parses strictly when it is imported or starts, judged as JAX does.

    The options are read from JAX's own registry (``import jax`` defines them all), so
    a JAX release that adds one is covered.
    """
    strict = _strict_jax_variables()
    problems = []
    for name, value in sorted(env.items()):
        refusal = _jax_refusal(value, *strict[name]) if name in strict else None
        if refusal is not None:
            problems.append(
                Problem(
                    "error",
                    "jax-variable-invalid",
                    f"{name}={_shown(value)} {refusal[0]}: JAX refuses it and does not start",
                    f"set {name} to {refusal[1]}, or unset it",
                    setting=name,
                )
            )
    return problems


def _strict_jax_variables() -> dict[str, tuple[Any, dict[str, Any]]]:
    """Variable name -> (kind, details) of every JAX option whose variable JAX parses strictly."""
    options = jax_config.config
    return {
        option.upper(): (kind, details)
        for option, (kind, _, details) in options.meta.items()
        if isinstance(options._value_holders.get(option), jax_config.State)
        or option.upper() in _STRICT_FLAG_VARIABLES
    }


def _jax_refusal(value: str, kind: Any, details: dict[str, Any]) -> tuple[str, str] | None:
    """(why JAX refuses ``value`` for an option of ``kind``, what it accepts), or ``None``."""
    if kind is bool:
        if value.lower() in _TRUTH_VALUES:
            return None
        return "is not a truth value", "true or false (JAX also reads 1/0, yes/no, on/off)"
    if kind is int or kind is float:
        noun = "a whole number" if kind is int else "a number"
        return None if _converts(kind, value) else (f"is not {noun}", noun)
    if kind == "enum":
        names = list(details["enum_values"])
        accepted = value in names
    elif kind == "enum_class":
        names = [member.name.lower() for member in details["enum_class"]]
        accepted = _converts(details["enum_class"], value)
    else:
        return None  # strings: JAX takes any value
    return None if accepted else ("is not a value it accepts", f"one of {', '.join(names)}")


def _converts(parse: Callable[[str], Any], value: str) -> bool:
    try:
        parse(value)
    except ValueError:
        return False
    return True


def _cpu_devices_rule(env: Mapping[str, str]) -> list[Problem]:
    """The CPU device count JAX will use: ``JAX_NUM_CPU_DEVICES``, else XLA's flag."""
    text = env.get("JAX_NUM_CPU_DEVICES")
    try:
        count = None if text is None else int(text)
    except ValueError:
        return []  # not a number: the JAX variables rule reports it
    setting = "JAX_NUM_CPU_DEVICES"
    if count is None:
        flag = _xla_flag_value(_xla_flag_words(env.get("XLA_FLAGS", ""))[0], _XLA_DEVICE_COUNT_FLAG)
        if flag is None:
            return []
        setting = f"XLA_FLAGS {_XLA_DEVICE_COUNT_FLAG}"
        if not re.fullmatch(r"[+-]?\d+", flag.strip()):
            return [
                Problem(
                    "error",
                    "cpu-devices-invalid",
                    f"{setting}={_shown(flag)} is not a whole number: XLA ends the process "
                    "when JAX starts",
                    "set JAX_NUM_CPU_DEVICES=N instead (or a number in the flag)",
                    setting="XLA_FLAGS",
                )
            ]
        count = int(flag)
    elif count < 0:
        return [
            Problem(
                "warning",
                "cpu-devices-ignored",
                f"JAX_NUM_CPU_DEVICES={text} is negative, which JAX reads as unset: it "
                "creates its default CPU device count",
                "set JAX_NUM_CPU_DEVICES to the number of CPU devices wanted, or unset it",
                setting="JAX_NUM_CPU_DEVICES",
            )
        ]
    problem = cpu_count_problem(count, setting)
    if problem is None:
        return []
    code = "cpu-devices-too-many" if count > MAX_CPU_DEVICES else "cpu-devices-invalid"
    variable = "JAX_NUM_CPU_DEVICES" if text is not None else "XLA_FLAGS"
    return [
        Problem(
            "error", code, problem, f"ask for 1 to {MAX_CPU_DEVICES} CPU devices", setting=variable
        )
    ]


def _xla_flags_rule(env: Mapping[str, str]) -> list[Problem]:
    """``XLA_FLAGS`` read as XLA reads it when JAX starts: flags, or the name of a file."""
    value = env.get("XLA_FLAGS", "")
    if not value or value.lstrip(_XLA_SPACE).startswith("-"):
        text = value
    else:
        try:
            text = Path(value).read_text(errors="replace")
        except OSError as error:
            return [
                Problem(
                    "error",
                    "xla-flags-file-missing",
                    f"XLA_FLAGS={_shown(value)} does not start with '--', so XLA reads it as "
                    f"the name of a file of flags, and cannot open it ({error.strerror}): XLA "
                    "ends the process when JAX starts",
                    "write the flags themselves (XLA_FLAGS='--xla_...') or the path of a file",
                    setting="XLA_FLAGS",
                )
            ]
    flags, ignored = _xla_flag_words(text)
    problems = [
        Problem(
            "error",
            "xla-flags-unknown",
            f"XLA does not know {_shown(flag)} in XLA_FLAGS (its flags start with '--'): XLA "
            "ends the process when JAX starts",
            f"write --{flag.lstrip('-')}",
            setting="XLA_FLAGS",
        )
        for flag in flags
        if not flag.startswith("--")
    ]
    if ignored:
        problems.append(
            Problem(
                "warning",
                "xla-flags-ignored",
                f"XLA stops reading XLA_FLAGS at {_shown(ignored.split()[0])}, which is not a "
                f"flag: it ignores {_shown(ignored)}",
                "start every flag with '--' and separate the flags with spaces",
                setting="XLA_FLAGS",
            )
        )
    return problems


def _xla_flag_words(text: str) -> tuple[list[str], str]:
    """The flags in ``text`` as XLA splits them, and the rest, which XLA ignores.

    XLA (``xla/parse_flags_from_env.cc``) reads flags until a word that does not start
    with ``-`` and gives up there without a word.
    """
    flags = []
    position = len(text) - len(text.lstrip(_XLA_SPACE))
    while position < len(text) and text[position] == "-":
        match = _XLA_FLAG.match(text, position)
        assert match is not None  # a dash alone matches
        flags.append(match.group())
        rest = text[match.end() :]
        position = len(text) - len(rest.lstrip(_XLA_SPACE))
    return flags, text[position:].strip(_XLA_SPACE)


def _xla_flag_value(flags: list[str], name: str) -> str | None:
    """The value XLA takes for flag ``name`` (the last one given), unquoted; ``None`` if absent."""
    values = [flag.partition("=")[2] for flag in flags if flag.partition("=")[0] == name]
    if not values:
        return None
    last = values[-1]
    return last[1:-1] if len(last) > 1 and last[0] == last[-1] and last[0] in "'\"" else last


def glog_messages(output: str, levels: str = "FEW") -> list[str]:
    """The messages of XLA's glog lines in ``output`` whose level is one of ``levels``.

    Examples:
        >>> from torch2jax_device._src.startup import glog_messages
        >>> glog_messages("F1123 13:01:00.210967   24980 flags.cc:234] Unknown flag", "F")
        ['Unknown flag']
    """
    return [match.group(2) for match in _GLOG_LINE.finditer(output) if match.group(1) in levels]


def xla_failure_problems(output: str) -> list[Problem]:
    """What XLA said when it ended the process at start-up, as problems with their fix.

    ``output`` is the process's standard error: XLA logs each flag it cannot read and the
    fatal reason (unknown flags, a file of flags it cannot open) as glog lines.
    """
    problems = []
    for line in glog_messages(output):
        unknown = re.match(r"Unknown flags? in XLA_FLAGS: (.*)", line)
        bad_value = re.match(r"Couldn't interpret value (.*) for flag (\S+?)\.?$", line)
        if unknown:
            problems.append(
                Problem(
                    "error",
                    "xla-flags-unknown",
                    f"XLA does not know {_shown(unknown.group(1))} in XLA_FLAGS, and ended "
                    "the process when JAX started",
                    "remove the unknown flags; XLA_FLAGS=--help python -c 'import jax; "
                    "jax.devices()' lists the flags this jaxlib knows",
                )
            )
        elif bad_value:
            problems.append(
                Problem(
                    "error",
                    "xla-flags-invalid-value",
                    f"XLA cannot read {_shown(bad_value.group(1))} as the value of "
                    f"--{bad_value.group(2)} in XLA_FLAGS, and ended the process when JAX "
                    "started",
                    f"give --{bad_value.group(2)} a value of its type (XLA_FLAGS=--help lists "
                    "each flag with its type)",
                )
            )
        elif line.startswith("Could not open file"):
            problems.append(
                Problem(
                    "error",
                    "xla-flags-file-missing",
                    f"XLA: {line}",
                    "write the flags themselves (XLA_FLAGS='--xla_...') or the path of a file",
                )
            )
    return problems


def _shown(text: str, limit: int = 60) -> str:
    """``repr(text)``, cut in the middle when long."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[: limit // 2]!r}...{text[-limit // 2 :]!r} ({len(text)} characters)"


#: Every start-up rule; ``check_environment`` runs them in this order.
RULES: tuple[Callable[[Mapping[str, str]], list[Problem]], ...] = (
    _jax_variables_rule,
    _platforms_rule,
    _preallocate_rule,
    _fraction_rule,
    _allocator_rule,
    _visible_devices_rule,
    _cpu_devices_rule,
    _xla_flags_rule,
    _simulated_devices_rule,
)

#: The environment variables the rules read by name (``JAX_*`` options are read from
#: JAX's registry: ``JAX_ENABLE_X64``, ``JAX_NUM_CPU_DEVICES``...).
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
    matmul_precision: str | None = None,
) -> dict[str, str]:
    """Set JAX's start-up options, checked, before its backends start.

    Call it at the top of a script, before anything touches a device. PyTorch's lazy
    GPU memory is one call away: ``tj.configure(preallocate=False)``, and PyTorch's
    float32 matmuls another: ``tj.configure(matmul_precision="highest")``.

    Args:
        platforms: Backends JAX may start, in priority order: ``"cuda,cpu"`` or
            ``["cuda", "cpu"]``. torch names are accepted (``"mps"`` is written as
            ``METAL``); ``"gpu"`` is refused because JAX expands it to CUDA, ROCm and
            oneAPI and fails unless all of them start — say ``"cuda"`` or ``"rocm"``.
        default_device: Process-wide default device for new arrays, an unindexed
            type (``"cpu"``, ``"cuda"``, ``"gpu"``, ``"rocm"``, ``"tpu"``, or one with
            index 0), as a string, ``bytes``, a ``tj.device`` or a ``torch.device``.
            An int (an accelerator index) and a ``jax.Device`` are refused: only a
            running JAX can resolve them. Unlike
            [`tj.set_default_device`][torch2jax_device.set_default_device], it applies
            to every thread.
        preallocate: ``False`` makes JAX allocate GPU memory as needed, like PyTorch,
            instead of taking 75 % of the card at the first operation.
        memory_fraction: Fraction of GPU memory JAX may use, in (0, 1]. Written to
            ``XLA_CLIENT_MEM_FRACTION`` only; the deprecated
            ``XLA_PYTHON_CLIENT_MEM_FRACTION`` is removed (JAX rejects both at once).
        allocator: ``"default"``, ``"platform"`` (allocates and frees on demand: the
            only one that returns memory to the driver, and slow), ``"bfc"``,
            ``"cuda_async"`` or ``"vmm"``.
        num_cpu_devices: How many CPU devices JAX creates (simulates several devices),
            from 1 to ``MAX_CPU_DEVICES`` (8192): each costs JAX a thread and memory and
            its start-up time grows with the square of the count.
        matmul_precision: torch's float32 matmul precision (``"highest"``, ``"high"``,
            ``"medium"``, as ``torch.set_float32_matmul_precision`` takes them), written
            to ``jax_default_matmul_precision``: ``"highest"`` gives torch's default
            numbers, where JAX's default lets GPUs of compute capability 8.0 or newer use
            TensorFloat-32 (see [GPU memory](memory.md#tensorfloat-32)).
            The only argument that also applies once JAX has started.

    Returns:
        What was written: environment variables (upper case) and JAX options
        (``jax_*``) with their values.

    Raises:
        AlreadyInitializedError: JAX's backends are already running and a start-up
            setting (any argument but ``matmul_precision``) was given; nothing is changed.
        ConfigError: a value JAX would reject or misread, or of a form ``configure``
            does not take; nothing is changed. Validation never starts JAX.

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
            raise ConfigError(f"preallocate must be True or False, not {_described(preallocate)}")
        environment["XLA_PYTHON_CLIENT_PREALLOCATE"] = "true" if preallocate else "false"
    if memory_fraction is not None:
        environment["XLA_CLIENT_MEM_FRACTION"] = _fraction_value(memory_fraction)
    if allocator is not None:
        if not isinstance(allocator, str):
            raise ConfigError(
                f"allocator must be a name such as 'platform', not {_described(allocator)}"
            )
        environment["XLA_PYTHON_CLIENT_ALLOCATOR"] = _checked(
            allocator, allocator_problem, "allocator"
        )
    if num_cpu_devices is not None:
        options["jax_num_cpu_devices"] = _cpu_count_value(num_cpu_devices)
    if environment or options:
        _require_not_started(environment)
    if matmul_precision is not None:
        options["jax_default_matmul_precision"] = jax_precision(matmul_precision)

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


def _platforms_value(platforms: object) -> str:
    if isinstance(platforms, str):
        names: list[object] = list(platforms.split(","))
    elif isinstance(platforms, (list, tuple)):
        names = list(platforms)
    else:
        names = [platforms]
    if any(not isinstance(name, str) for name in names):
        raise ConfigError(
            f"platforms must be a string such as 'cuda,cpu' or a list of names, got "
            f"{_described(platforms)}"
        )
    stripped = [str(name).strip() for name in names]
    problem = platforms_problem(stripped, "platforms")
    if problem is not None:
        raise ConfigError(f"{problem} (platforms={platforms!r:.60}). Fix: name one, e.g. 'cpu'")
    spelling = {p.device_type: p.environment_name for p in PLATFORMS}
    return ",".join(spelling.get(name, name) for name in stripped)


def _default_device_value(spec: object) -> str:
    # Neither form below can be resolved before JAX starts; resolving it here would start
    # the backends configure must precede.
    if is_index(spec):
        raise ConfigError(
            f"configure(default_device={_described(spec)}) cannot know which accelerator an "
            "index names before JAX starts; name the type instead, e.g. "
            "configure(default_device='cuda')"
        )
    if isinstance(spec, jax.Device):
        raise ConfigError(
            f"configure(default_device={spec!r}): a jax.Device exists only once JAX has "
            "started, and configure must come before; name its type instead, e.g. "
            f"configure(default_device={spec.platform!r})"
        )
    try:
        device = Device(spec)
    except Torch2JaxDeviceError as error:
        raise ConfigError(f"configure(default_device={_described(spec)}): {error}") from error
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


def _cpu_count_value(count: object) -> int:
    if isinstance(count, bool) or not isinstance(count, numbers.Integral):
        raise ConfigError(f"num_cpu_devices must be an int, not {_described(count)}")
    problem = cpu_count_problem(int(count), "num_cpu_devices")
    if problem is not None:
        raise ConfigError(problem)
    return int(count)


def _fraction_value(fraction: object) -> str:
    if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real):
        raise ConfigError(f"memory_fraction must be a number, not {_described(fraction)}")
    try:
        value = repr(float(fraction))
    except OverflowError:
        value = "inf"  # an int beyond any float
    problem = fraction_problem(value, "memory_fraction")
    if problem is not None:
        raise ConfigError(problem.replace(value, _described(fraction), 1))
    return value


def _described(value: object) -> str:
    """``repr(value)``, short, even for an int too long to print."""
    if isinstance(value, int) and value.bit_length() > 256:
        return f"<an integer of {value.bit_length()} bits>"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:40]}...{text[-40:]}"
