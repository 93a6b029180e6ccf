"""``torch2jax-device devices``: the table, the JSON document and the failure path."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

import torch2jax_device as tj
from torch2jax_device.cli import main


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    sys_stdout, sys.stdout = sys.stdout, out
    try:
        status = main(list(argv))
    finally:
        sys.stdout = sys_stdout
    return status, out.getvalue()


def test_json_lists_every_backend_and_device() -> None:
    status, text = _run("devices", "--json")
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


def test_table_shows_torch_names_and_jax_identity() -> None:
    status, text = _run("devices")
    assert status == 0
    assert text.startswith(f"JAX {jax.__version__}")
    assert f"\n{tj.device(jax.devices('cpu')[0])}  " in text
    assert "CpuDevice(id=0)" in text and "device*" in text


def test_console_script_reports_backend_failure_with_the_fix() -> None:
    env = {**os.environ, "JAX_PLATFORMS": "tpu"}
    result = subprocess.run(
        [sys.executable, "-m", "torch2jax_device", "devices"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert "torch2jax-device: JAX could not initialize its backends" in result.stderr
    assert "Fix:" in result.stderr


def test_four_simulated_devices_are_listed() -> None:
    env = {**os.environ, "JAX_NUM_CPU_DEVICES": "4"}
    result = subprocess.run(
        [sys.executable, "-m", "torch2jax_device", "devices", "--json"],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    )  # fmt: skip
    cpu = json.loads(result.stdout)["backends"][-1]
    assert [d["device"] for d in cpu["devices"]] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]


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
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    result = subprocess.run(
        [str(Path(sys.executable).with_name("torch2jax-device")), "devices"],
        capture_output=True, text=True, env={**clean, **env}, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 1 and result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert all(line.startswith("torch2jax-device: ") and ". Fix: " in line for line in lines)
    for text in said:
        assert text in result.stderr
