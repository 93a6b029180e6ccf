"""``torch2jax-device doctor``: environment traps, the report, exit statuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import pytest

from torch2jax_device._src.startup import VARIABLES, check_environment
from torch2jax_device.cli import doctor as _doctor


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
    ],
)
def test_environment_traps(env: dict[str, str], codes: list[str]) -> None:
    assert _codes(env) == codes


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
        "checks",
    }  # fmt: skip
    assert set(document["environment"]) == set(VARIABLES)


def _doctor_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    return subprocess.run(
        [sys.executable, "-m", "torch2jax_device", "doctor", *args],
        capture_output=True, text=True, timeout=120, check=False, env={**environment, **env},
    )  # fmt: skip


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
