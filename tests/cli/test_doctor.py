"""``torch2jax-device doctor``: environment traps, the report, exit statuses."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jax
import pytest
from jax._src import config as jax_config

from tests.support.cli import clean_environment, one_probe_per_environment, run_cli_in
from tests.support.deadlines import deadline
from torch2jax_device._src.startup import VARIABLES, check_environment, xla_failure_problems
from torch2jax_device.cli import doctor as _doctor

# A number option JAX parses strictly, from JAX's registry: jax 0.11 dropped jax 0.10's
# jax_exec_time_optimization_effort (unknown, its variable is ignored, as doctor says).
FLOAT_VARIABLE = next(
    option.upper()
    for option, (kind, _, _) in jax_config.config.meta.items()
    if kind is float and isinstance(jax_config.config._value_holders.get(option), jax_config.State)
)


def _codes(env: dict[str, str]) -> list[str]:
    return [check.code for check in check_environment(env)]


@pytest.mark.parametrize(
    ("env", "codes"),
    [
        ({}, []),
        ({"JAX_PLATFORMS": "cuda,cpu"}, []),
        ({"JAX_PLATFORMS": "gpu"}, ["jax-platforms-gpu"]),
        ({"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, []),
        ({"XLA_PYTHON_CLIENT_PREALLOCATE": "FALSE"}, ["preallocate-not-disabled"]),
        ({"XLA_PYTHON_CLIENT_PREALLOCATE": "no"}, ["preallocate-not-disabled"]),
        (
            {"XLA_CLIENT_MEM_FRACTION": ".5", "XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"},
            ["mem-fraction-both"],
        ),
        ({"XLA_CLIENT_MEM_FRACTION": "1.5"}, ["mem-fraction-invalid"]),
        ({"XLA_PYTHON_CLIENT_MEM_FRACTION": "half"}, ["mem-fraction-invalid"]),
        ({"XLA_PYTHON_CLIENT_MEM_FRACTION": ".7"}, ["mem-fraction-deprecated"]),
        ({"XLA_PYTHON_CLIENT_ALLOCATOR": "Platform"}, []),  # JAX lower-cases it
        ({"XLA_PYTHON_CLIENT_ALLOCATOR": "cuda-async"}, ["allocator-invalid"]),
        ({"CUDA_VISIBLE_DEVICES": ""}, ["cuda-devices-hidden"]),
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, []),
        (
            {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"},
            ["simulated-cpu-devices"],
        ),
        ({"JAX_ENABLE_X64": "maybe"}, ["jax-variable-invalid"]),
        ({"JAX_ENABLE_X64": "Yes"}, []),  # JAX reads truth values in any case
        ({"JAX_ENABLE_X64": " 1"}, ["jax-variable-invalid"]),  # but not with spaces
        ({"JAX_NUM_CPU_DEVICES": "abc"}, ["jax-variable-invalid"]),
        ({"JAX_NUM_CPU_DEVICES": " 2 "}, []),  # int() takes it, so does JAX
        ({"JAX_NUM_CPU_DEVICES": "9" * 5000}, ["jax-variable-invalid"]),
        ({"JAX_NUM_CPU_DEVICES": "0"}, ["cpu-devices-invalid"]),
        ({"JAX_NUM_CPU_DEVICES": "-3"}, ["cpu-devices-ignored"]),
        ({"JAX_NUM_CPU_DEVICES": "8192"}, []),
        ({"JAX_NUM_CPU_DEVICES": "8193"}, ["cpu-devices-too-many"]),
        ({FLOAT_VARIABLE: "high"}, ["jax-variable-invalid"]),  # float
        ({"JAX_DEFAULT_MATMUL_PRECISION": "fast"}, ["jax-variable-invalid"]),  # enum
        ({"JAX_DEFAULT_MATMUL_PRECISION": "highest"}, []),
        ({"JAX_NUMPY_DTYPE_PROMOTION": "loose"}, ["jax-variable-invalid"]),  # enum class
        ({"JAX_NUMPY_DTYPE_PROMOTION": "strict"}, []),
        ({"JAX_PALLAS_VERBOSE_ERRORS": "maybe"}, ["jax-variable-invalid"]),  # a strict flag
        ({"JAX_CHECK_PROXY_ENVS": "maybe"}, []),  # a flag JAX reads leniently
        ({"JAX_COMPILATION_CACHE_DIR": "anything"}, []),  # strings: any value
        ({"XLA_FLAGS": "/no/such/file"}, ["xla-flags-file-missing"]),
        ({"XLA_FLAGS": "--xla_dump_to=/tmp/x stray --xla_dump_hlo_as_text"}, ["xla-flags-ignored"]),
        ({"XLA_FLAGS": "-xla_dump_to=/tmp/x"}, ["xla-flags-unknown"]),
        ({"XLA_FLAGS": '--xla_dump_to="/tmp/a b" --xla_dump_hlo_as_text'}, []),
        (
            {"XLA_FLAGS": "--xla_force_host_platform_device_count=abc"},
            ["cpu-devices-invalid", "simulated-cpu-devices"],
        ),
        (
            {"XLA_FLAGS": "--xla_force_host_platform_device_count='100000'"},
            ["cpu-devices-too-many", "simulated-cpu-devices"],
        ),
        (  # a negative flag is no "unset": the CPU backend fails to start
            {"XLA_FLAGS": "--xla_force_host_platform_device_count=-2"},
            ["cpu-devices-invalid", "simulated-cpu-devices"],
        ),
        (  # JAX_NUM_CPU_DEVICES wins over the flag
            {"JAX_NUM_CPU_DEVICES": "2", "XLA_FLAGS": "--xla_force_host_platform_device_count=0"},
            ["simulated-cpu-devices"],
        ),
    ],
    ids=lambda value: repr(value)[:60],
)
def test_environment_traps(env: dict[str, str], codes: list[str]) -> None:
    assert _codes(env) == codes


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("JAX_ENABLE_X64", "maybe"),
        ("JAX_NUM_CPU_DEVICES", "abc"),
        (FLOAT_VARIABLE, "high"),
        ("JAX_DEFAULT_MATMUL_PRECISION", "fast"),
        ("JAX_NUMPY_DTYPE_PROMOTION", "loose"),
        ("JAX_ENABLE_X64", "Yes"),
        ("JAX_NUM_CPU_DEVICES", " 2 "),
    ],
)
def test_the_jax_variables_rule_agrees_with_jax(name: str, value: str) -> None:
    """Side by side with JAX itself: refused by the rule exactly when ``import jax`` fails."""
    result = subprocess.run(
        [sys.executable, "-c", "import jax"],
        capture_output=True, text=True, timeout=deadline(120), check=False,
        env={**clean_environment(), name: value},
    )  # fmt: skip
    assert (result.returncode != 0) == (_codes({name: value}) == ["jax-variable-invalid"])
    if result.returncode:
        assert "ValueError" in result.stderr


@pytest.mark.parametrize(
    ("flags", "codes"),
    [
        ("--nonsense_flag --xla_also_unknown", ["xla-flags-unknown"]),
        ("--xla_cpu_enable_fast_math=maybe", ["xla-flags-invalid-value"]),
        ("/no/such/file", ["xla-flags-file-missing"]),
    ],
)
def test_xla_output_is_read_as_problems(flags: str, codes: list[str]) -> None:
    """XLA's own words when it ends the process, turned into problems with a fix."""
    result = subprocess.run(
        [sys.executable, "-c", "import jax; jax.devices()"],
        capture_output=True, text=True, timeout=deadline(120), check=False,
        env={**clean_environment(), "XLA_FLAGS": flags},
    )  # fmt: skip
    assert result.returncode == 1  # XLA ends the process: no Python exception to catch
    problems = xla_failure_problems(result.stderr)
    assert [problem.code for problem in problems] == codes
    assert all(problem.fix for problem in problems)
    assert flags.split()[0].split("=")[0].lstrip("-/") in problems[0].message


def test_every_check_says_how_to_fix_it() -> None:
    env = {"JAX_PLATFORMS": "gpu", "XLA_PYTHON_CLIENT_PREALLOCATE": "FALSE"}
    for check in check_environment(env):
        assert check.fix and check.level in {"error", "warning", "info"}


def test_report_on_this_machine() -> None:
    document = _doctor.report()
    assert document["versions"]["jax"] == jax.__version__
    names = [backend["name"] for backend in document["backends"]]
    assert "cpu" in names and document["default_backend"] == names[0]
    cpu = document["backends"][names.index("cpu")]
    assert cpu["devices"][0]["memory_stats"] == {}  # JAX reports none on CPU
    assert document["default_device"] is not None
    assert set(document) == {
        "versions", "environment", "backends", "default_backend", "default_device", "torch",
        "memory_pool", "checks",
    }  # fmt: skip
    assert document["memory_pool"]["fraction"] > 0
    assert set(VARIABLES) <= set(document["environment"])


@dataclasses.dataclass
class _Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture(scope="module", autouse=True)
def _one_probe_per_environment() -> Iterator[None]:
    """Tests that run the doctor in the same environment assert on the same probe."""
    with one_probe_per_environment():
        yield


def _doctor_cli(*args: str, **env: str) -> _Result:
    """``torch2jax-device doctor ARGS`` in this process, in this environment without its
    JAX and XLA variables, plus ``env``. The doctor reads the environment from
    ``os.environ`` and starts JAX in a probe process with it; the command's own process
    is tested end to end in ``test_the_console_script_survives_too``."""
    return _Result(*run_cli_in(env, "doctor", *args))


def test_human_output_shows_the_trap_and_the_fix() -> None:
    result = _doctor_cli(XLA_PYTHON_CLIENT_PREALLOCATE="FALSE")
    assert result.returncode == 0, result.stderr
    assert "Versions" in result.stdout and "Checks" in result.stdout
    assert "WARNING [preallocate-not-disabled]" in result.stdout
    assert "fix: set XLA_PYTHON_CLIENT_PREALLOCATE=false" in result.stdout


def test_errors_set_the_exit_status() -> None:
    result = _doctor_cli(
        "--json", XLA_CLIENT_MEM_FRACTION=".5", XLA_PYTHON_CLIENT_MEM_FRACTION=".5"
    )
    assert result.returncode == 1
    codes = [check["code"] for check in json.loads(result.stdout)["checks"]]
    assert "mem-fraction-both" in codes


def test_backend_failure_is_reported_not_raised() -> None:
    result = _doctor_cli("--json", JAX_PLATFORMS="tpu")
    assert result.returncode == 1
    document = json.loads(result.stdout)
    assert document["backends"] == [] and document["versions"]["jax"]
    assert [c["code"] for c in document["checks"]] == ["backend-init-failed"]


NVIDIA_GPU = any(os.path.exists(node) for node in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg"))

# Environments that broke doctor (tracebacks, an aborted process, an empty reason), and
# the class they stand for: every variable JAX or XLA reads when it starts.
GARBAGE = [
    (
        {
            "JAX_ENABLE_X64": "maybe",
            "JAX_NUM_CPU_DEVICES": "abc",
            "JAX_DEFAULT_MATMUL_PRECISION": "fast",
            "JAX_TRACEBACK_FILTERING": "bogus",
        },
        ["jax-variable-invalid"] * 4 + ["jax-started-without"],
    ),
    ({"XLA_FLAGS": "/no/such/xla_flags_file"}, ["xla-flags-file-missing"]),
    (
        {"XLA_FLAGS": "--xla_force_host_platform_device_count=abc"},
        ["cpu-devices-invalid", "simulated-cpu-devices", "xla-flags-invalid-value"],
    ),
    ({"JAX_PLATFORMS": "bogus"}, ["jax-platforms-unknown", "backend-init-failed"]),
    ({"JAX_NUM_CPU_DEVICES": "1000000"}, ["cpu-devices-too-many", "jax-not-started"]),
    (
        {
            "JAX_NUM_CPU_DEVICES": "0",
            "XLA_PYTHON_CLIENT_ALLOCATOR": "bogus",
            "XLA_CLIENT_MEM_FRACTION": "2",
            "XLA_PYTHON_CLIENT_PREALLOCATE": "no",
        },
        [
            "preallocate-not-disabled",
            "mem-fraction-invalid",
            "allocator-invalid",
            "cpu-devices-invalid",
            "backend-init-failed",
        ],
    ),
    (
        {"JAX_PALLAS_VERBOSE_ERRORS": "maybe", "XLA_FLAGS": "--nonsense_flag --xla_also_unknown"},
        ["jax-variable-invalid", "jax-started-without", "xla-flags-unknown"],
    ),
    (
        {
            "PJRT_NAMES_AND_LIBRARY_PATHS": "broken:/no/such/plugin.so",
            "CUDA_VISIBLE_DEVICES": "garbage",
            "TF_CPP_MIN_LOG_LEVEL": "abc",
        },
        ["backend-init-failed"],
    ),
]
if not NVIDIA_GPU:
    GARBAGE.append(({"JAX_PLATFORMS": "cuda"}, ["backend-init-failed"]))


@pytest.mark.parametrize(("env", "codes"), GARBAGE, ids=lambda value: repr(value)[:50])
def test_garbage_environments_are_reported_never_raised(
    env: dict[str, str], codes: list[str]
) -> None:
    """The doctor in each (JAX in its probe process): no traceback, no abort, every bad
    variable with its fix, and JAX's own reason (never an empty one) when its start fails."""
    result = _doctor_cli("--json", **env)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    checks = document["checks"]
    assert [check["code"] for check in checks] == codes
    started = not {*codes} & {"jax-not-started", "backend-init-failed", "xla-flags-unknown",
                              "xla-flags-file-missing", "xla-flags-invalid-value"}  # fmt: skip
    assert document["versions"]["jax"] and bool(document["backends"]) == started
    for check in checks:
        assert check["message"] and check["fix"]
        if check["code"] == "jax-variable-invalid":
            assert check["message"].split("=")[0] in env
        if check["code"] == "backend-init-failed":
            reason = check["message"].split("JAX could not initialize its backends: ")[1]
            assert reason.split(". Attempted: ")[0] and "Attempted: " in reason


def test_a_broken_environment_in_human_form() -> None:
    result = _doctor_cli(JAX_ENABLE_X64="maybe", XLA_FLAGS="--nonsense_flag")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "JAX did not start here (see the checks)" in result.stdout
    assert "ERROR   [jax-variable-invalid] JAX_ENABLE_X64='maybe' is not a truth value" in (
        result.stdout
    )
    assert "fix: set JAX_ENABLE_X64 to true or false" in result.stdout
    assert "ERROR   [xla-flags-unknown] XLA does not know '--nonsense_flag'" in result.stdout
    assert "  JAX_ENABLE_X64                  'maybe'" in result.stdout


def test_the_console_script_survives_too() -> None:
    script = Path(sys.executable).with_name("torch2jax-device")
    result = subprocess.run(
        [str(script), "doctor", "--json"],
        capture_output=True, text=True, timeout=deadline(300), check=False,
        env={**clean_environment(), "JAX_ENABLE_X64": "maybe"},
    )  # fmt: skip
    assert "Traceback" not in result.stderr and result.returncode == 1
    document = json.loads(result.stdout)
    assert "jax-variable-invalid" in [c["code"] for c in document["checks"]]
    # The doctor run in this process (as the tests above run it) reports the same.
    assert document == json.loads(_doctor_cli("--json", JAX_ENABLE_X64="maybe").stdout)


def test_a_hung_start_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAX_NUM_CPU_DEVICES", "4096")  # seconds to start
    # wall-clock: the limit under test, which must fire: a start of 4,096 devices takes
    # seconds, and load only lengthens it
    document = _doctor.report(timeout=0.5)
    assert [c["code"] for c in document["checks"]] == ["jax-start-timeout"]
    assert "JAX did not start within 0.5 s" in document["checks"][0]["message"]


@pytest.mark.idiom("collect-env")
def test_doctor_agrees_with_torchs_collect_env() -> None:
    """Side by side with ``python -m torch.utils.collect_env``: the same torch and Python,
    the same CUDA answer."""
    from torch.utils import collect_env

    theirs = collect_env.get_env_info()
    result = _doctor_cli("--json")
    assert result.returncode == 0, result.stderr
    ours = json.loads(result.stdout)
    assert ours["versions"]["torch"] == theirs.torch_version
    assert theirs.python_version.startswith(ours["versions"]["python"] + " ")
    cuda = theirs.is_cuda_available == "True"  # collect_env reports it as text
    assert ours["torch"]["cuda_available"] == cuda


def test_torchs_answer_is_torchs_and_a_build_for_no_gpu_is_not_imported() -> None:
    """Side by side with torch: the doctor's torch section is what torch answers; a build
    for no GPU (torch.version.cuda and .hip None) gives it from its version file, so the
    doctor does not import torch there (3.5 s of CPU of its 8.4 s on the 2-core machine)."""
    import torch

    assert _doctor._torch_cuda() == {
        "cuda_available": torch.cuda.is_available(),
        "cuda_version": torch.version.cuda,
        "device_count": torch.cuda.device_count(),
    }
    imported = subprocess.run(
        [sys.executable, "-c", "import sys; from torch2jax_device.cli import doctor; "
         "doctor._torch_cuda(); print('torch' in sys.modules)"],
        capture_output=True, text=True, timeout=deadline(120), check=True,
    )  # fmt: skip
    built_for_gpu = torch.version.cuda is not None or torch.version.hip is not None
    assert imported.stdout.strip() == str(built_for_gpu)


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("cuda: Optional[str] = None\nhip: Optional[str] = None\n", False),
        ("cuda = '12.8'\nhip = None\n", True),
        ("cuda = None\nhip = '6.2'\n", True),
        ("cuda = None\n", None),  # hip not said: ask torch
        ("cuda = detect()\nhip = None\n", None),  # not a literal: ask torch
        ("cuda = (\n", None),  # unreadable: ask torch
    ],
)
def test_torchs_version_file_is_read_only_where_it_is_plain(
    tmp_path: Path, text: str, answer: bool | None
) -> None:
    (tmp_path / "version.py").write_text(text)
    assert _doctor._built_for_gpu(tmp_path / "version.py") is answer
    assert _doctor._built_for_gpu(tmp_path / "missing.py") is None


# What the probe reports from a GPU machine: an H200 with JAX's default pool.
GPU_PROBE = {
    "stage": "started",
    "inventory": {
        "backends": [
            {
                "name": "cuda",
                "devices": [
                    {"device": "cuda:0", "jax": "CudaDevice(id=0)", "kind": "NVIDIA H200",
                     "compute_capability": "9.0", "memory_kinds": ["device"]},
                ],
            }
        ]
    },
    "memory_stats": {"cuda:0": {"bytes_in_use": 512, "bytes_limit": 112_583_507_968}},
    "card_memory": {"cuda:0": [149_546_876_928, 150_105_079_808]},
    "matmul_precision": "medium",
}  # fmt: skip


def test_a_gpu_that_uses_tf32_is_reported() -> None:
    (check,) = _doctor._tf32_check(GPU_PROBE)
    assert check.code == "tf32-matmul" and check.setting == "JAX_DEFAULT_MATMUL_PRECISION"
    assert "cuda:0 (compute capability 9.0)" in check.message
    assert "matmul_precision='highest'" in check.fix
    assert _doctor._tf32_check({**GPU_PROBE, "matmul_precision": "highest"}) == []
    volta = json.loads(json.dumps(GPU_PROBE).replace('"9.0"', '"7.0"'))
    assert _doctor._tf32_check(volta) == []


def test_the_card_and_the_pool_are_shown_apart() -> None:
    device = {
        **GPU_PROBE["inventory"]["backends"][0]["devices"][0],  # type: ignore[index]
        "memory_stats": GPU_PROBE["memory_stats"]["cuda:0"],  # type: ignore[index]
        "card_memory": GPU_PROBE["card_memory"]["cuda:0"],  # type: ignore[index]
    }
    pool = _doctor._memory_pool({"XLA_CLIENT_MEM_FRACTION": "0.12"})
    card, jax_pool = _doctor._memory_lines(device, pool)
    assert card.split() == "card: 142619 of 143151 MiB free (CUDA driver)".split()
    assert (
        jax_pool.split()
        == (
            "JAX pool: 0 of 107368 MiB in use; 0.12 of the card (XLA_CLIENT_MEM_FRACTION), "
            "preallocated (JAX's default)"
        ).split()
    )
    default = _doctor._memory_pool({"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    assert default == {
        "fraction": 0.75, "fraction_from": "JAX's default",
        "preallocate": False, "preallocate_from": "XLA_PYTHON_CLIENT_PREALLOCATE",
    }  # fmt: skip


def test_refused_variables_are_named_by_their_setting() -> None:
    (problem,) = check_environment({"JAX_ENABLE_X64": "maybe"})
    assert problem.setting == "JAX_ENABLE_X64"
    assert all(
        check.setting in (None, *VARIABLES) or check.setting.startswith("JAX_")
        for check in check_environment({"JAX_PLATFORMS": "gpu", "XLA_FLAGS": "x --y"})
    )
