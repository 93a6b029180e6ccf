"""``torch2jax-device devices``: the table, the JSON document and the failure path.

The command runs in this process (JAX starts in its probe process, in ``os.environ``);
its own process is tested end to end where that is the point: it must survive a
variable JAX refuses at import.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jax
import pytest

import torch2jax_device as tj
from tests.support.cli import clean_environment, one_probe_per_environment, run_cli, run_cli_in
from tests.support.deadlines import deadline


@pytest.fixture(scope="module", autouse=True)
def _one_probe_per_environment() -> Iterator[None]:
    """Tests that run the command in the same environment assert on the same probe."""
    with one_probe_per_environment():
        yield


@pytest.fixture(scope="module")
def listed() -> dict[str, tuple[int, str, str]]:
    """``devices --json`` and ``devices`` (the table), from one probe of this machine."""
    return {"json": run_cli("devices", "--json"), "table": run_cli("devices")}


def _devices_cli(*args: str, **env: str) -> tuple[int, str, str]:
    """``torch2jax-device devices ARGS`` in this process, in this environment without its
    JAX and XLA variables, plus ``env`` (the probe process inherits it)."""
    return run_cli_in(env, "devices", *args)


def test_json_lists_every_backend_and_device(listed: dict[str, tuple[int, str, str]]) -> None:
    status, text, _ = listed["json"]
    data = json.loads(text)
    assert status == 0
    assert data["jax"] == jax.__version__
    names = [backend["name"] for backend in data["backends"]]
    assert data["default_backend"] == names[0] and "cpu" in names
    cpu = next(backend for backend in data["backends"] if backend["name"] == "cpu")
    assert [d["device"] for d in cpu["devices"]] == [
        str(tj.device(d)) for d in jax.local_devices(backend="cpu")
    ]
    first = cpu["devices"][0]
    assert first["jax"] == repr(jax.local_devices(backend="cpu")[0])
    assert first["default_memory_kind"] in first["memory_kinds"]


def test_table_shows_torch_names_and_jax_identity(
    listed: dict[str, tuple[int, str, str]],
) -> None:
    status, text, _ = listed["table"]
    assert status == 0
    assert text.startswith(f"JAX {jax.__version__}")
    assert f"\n{tj.device(jax.devices('cpu')[0])}  " in text
    assert "CpuDevice(id=0)" in text and "device*" in text


def test_backend_failure_is_reported_with_the_fix() -> None:
    status, out, err = _devices_cli(JAX_PLATFORMS="tpu")
    assert status == 1 and out == ""
    assert "torch2jax-device: JAX could not initialize its backends" in err
    assert "Fix:" in err


def test_four_simulated_devices_are_listed() -> None:
    status, out, err = _devices_cli("--json", JAX_NUM_CPU_DEVICES="4")
    assert status == 0, err
    cpu = json.loads(out)["backends"][-1]
    assert [d["device"] for d in cpu["devices"]] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]


def _assert_reported_with_the_fix(status: int, out: str, err: str, said: list[str]) -> None:
    assert status == 1 and out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert all(line.startswith("torch2jax-device: ") and ". Fix: " in line for line in lines)
    for text in said:
        assert text in err


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"JAX_ENABLE_X64": "maybe"}, ["JAX_ENABLE_X64='maybe' is not a truth value"]),
        ({"XLA_FLAGS": "--nonsense_flag"}, ["XLA does not know '--nonsense_flag'"]),
        ({"JAX_PLATFORMS": "bogus"}, ["Unable to initialize backend 'bogus'", "Attempted: bogus"]),
        ({"JAX_NUM_CPU_DEVICES": "1000000"}, ["at most 8192"]),
    ],
    ids=lambda value: repr(value)[:40],
)
def test_a_broken_environment_is_reported_with_the_fix(
    env: dict[str, str], said: list[str]
) -> None:
    """JAX starts in a probe process: the command reports what ends it, never a traceback."""
    _assert_reported_with_the_fix(*_devices_cli(**env), said)


@pytest.mark.parametrize(
    "command",
    [
        [str(Path(sys.executable).with_name("torch2jax-device"))],
        [sys.executable, "-m", "torch2jax_device"],
    ],
    ids=["console script", "python -m"],
)
def test_the_command_survives_a_variable_jax_refuses_at_import(command: list[str]) -> None:
    """The command's own process imports JAX: it must survive the variable to report it
    (and every other one), as the command run in this process does."""
    env = {"JAX_ENABLE_X64": "maybe", "XLA_FLAGS": "--nonsense_flag"}
    result = subprocess.run(
        [*command, "devices"], env={**clean_environment(), **env},
        capture_output=True, text=True, timeout=deadline(300), check=False,
    )  # fmt: skip
    said = ["JAX_ENABLE_X64='maybe' is not a truth value"]
    _assert_reported_with_the_fix(result.returncode, result.stdout, result.stderr, said)
    assert (result.returncode, result.stdout, result.stderr) == _devices_cli(**env)
