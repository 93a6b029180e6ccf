"""Every platform of the one platform table is handled by every module that reads it.

A platform is one row of ``PLATFORMS``; these tests run each consumer on each row, so a
row added to the table without the code that must handle it fails here.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from typing import Any

import pytest
import torch

import torch2jax_device as tj
from tests.support.deadlines import deadline
from torch2jax_device._src import platforms as _platforms
from torch2jax_device._src import startup
from torch2jax_device._src.distributed import rendezvous

ROWS = pytest.mark.parametrize("row", _platforms.PLATFORMS, ids=lambda row: row.name)


@ROWS
def test_device_types_parse_and_serve_their_platform(row: _platforms.Platform) -> None:
    for device_type in (row.device_type, *row.aliases):
        assert tj.device(device_type).type == device_type
        assert row.name in _platforms.platforms_for_type(device_type)
    assert _platforms.platforms_for_type(row.device_type)[0] == row.name
    assert _platforms.device_type_of(row.name) == row.device_type
    assert _platforms.by_name(row.name) is row


@ROWS
def test_missing_platforms_say_how_to_get_them(row: _platforms.Platform) -> None:
    if _platforms.local_devices(row.name):
        assert tj.resolve(row.device_type).platform in (row.name, "gpu")
        return
    with pytest.raises(tj.DeviceUnavailableError, match="Fix: ") as caught:
        tj.resolve(row.device_type)
    assert row.install_hint in str(caught.value)


@ROWS
def test_configure_spells_it_as_jax_platforms(row: _platforms.Platform) -> None:
    for name in (row.device_type, row.environment_name):
        assert startup._platforms_value(name) == row.environment_name
    assert startup.platforms_problem([row.environment_name], "JAX_PLATFORMS") is None


@ROWS
def test_configure_default_device(row: _platforms.Platform) -> None:
    if row.default_device_name is None:
        with pytest.raises(tj.ConfigError, match="set_default_device"):
            startup._default_device_value(row.device_type)
    else:
        assert startup._default_device_value(row.device_type) == row.default_device_name


@ROWS
def test_torch_gets_the_same_hardware(row: _platforms.Platform) -> None:
    device = tj.device(row.device_type, 1)
    if row.torch_type is None:
        with pytest.raises(tj.DeviceUnavailableError, match="torch has no device type"):
            device.torch_device  # noqa: B018 (the property raises)
    else:
        assert device.torch_device == torch.device(row.torch_type, 1)


@ROWS
def test_distributed_restricts_only_ordinal_platforms(row: _platforms.Platform) -> None:
    ids: Any
    if row.hardware_ordinals:
        ids = rendezvous.local_device_ids(_job(), f"{row.device_type}:1", {})
        assert ids == [1]
    elif row.device_type == "cpu":
        assert rendezvous.local_device_ids(_job(), "cpu", {}) is None
    else:
        with pytest.raises(tj.DistributedError, match="must name one GPU"):
            rendezvous.local_device_ids(_job(), f"{row.device_type}:1", {})


@ROWS
def test_visible_devices_variables_are_read(row: _platforms.Platform) -> None:
    for name in row.visible_devices_variables:
        codes = [problem.code for problem in startup.check_environment({name: ""})]
        assert codes == [f"{row.device_type}-devices-hidden"]
        assert name in startup.VARIABLES


@ROWS
def test_accelerators_are_considered_in_table_order(row: _platforms.Platform) -> None:
    assert (row.name in _platforms.ACCELERATORS) == row.accelerator


@pytest.mark.parametrize(
    ("name", "is_built"), [("cuda", tj.backends.cuda.is_built), ("METAL", tj.backends.mps.is_built)]
)
def test_plugins_tell_whether_support_is_built(name: str, is_built: Any) -> None:
    installed = {dist.metadata["Name"].lower() for dist in importlib.metadata.distributions()}
    assert is_built() == any(plugin in installed for plugin in _platforms.by_name(name).plugins)


def _job() -> rendezvous.Rendezvous:
    return rendezvous.Rendezvous("127.0.0.1", 29500, "MASTER_PORT", 0, 2, 0, 2)


_START = """
import json
from torch2jax_device._src import platforms
try:
    print(json.dumps({"started": sorted(platforms.jax_backends())}))
except platforms.BackendInitError as error:
    print(json.dumps({"error": str(error)}))
"""


@ROWS
def test_a_platform_that_cannot_start_says_why_and_what_was_attempted(
    row: _platforms.Platform,
) -> None:
    """JAX_PLATFORMS naming only this platform, in a fresh process: it starts, or the
    error carries JAX's reason (or says it gave none), what was attempted and the fix."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    result = subprocess.run(
        [sys.executable, "-c", _START],
        capture_output=True, text=True, timeout=deadline(300), check=True,
        env={**env, "JAX_PLATFORMS": row.environment_name},
    )  # fmt: skip
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    if "started" in outcome:
        assert row.name in outcome["started"]
        return
    message = outcome["error"]
    reason = message.removeprefix("JAX could not initialize its backends: ").split(". Attempted")[0]
    assert reason and not reason.startswith(".")  # never an empty reason
    assert f"Attempted: {row.name}" in message
    if row.plugins and not any(_platforms._installed_plugins(row)):
        assert "no plugin installed" in message and row.install_hint in message
    assert f"JAX_PLATFORMS='{row.environment_name},cpu'" in message


_REPEATED = """
import json, sys
import jax, numpy as np
if sys.argv[1] == "jax-first":
    jax.devices()
import torch2jax_device as tj
print(json.dumps({
    "default": str(tj.get_default_device()),
    "placed": str(tj.device_of(tj.to_device(np.ones(2), "cpu"))),
    "same_device": tj.device("cpu").jax_device == jax.numpy.zeros(1).devices().pop(),
    "platforms": jax.config.jax_platforms,
}))
"""


@pytest.mark.parametrize("started_by", ["tj", "jax-first"])
def test_a_platform_named_twice_is_accepted_as_jax_accepts_it(started_by: str) -> None:
    """JAX_PLATFORMS=cpu,cpu: JAX starts it (twice); tj's devices are the ones JAX uses."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    result = subprocess.run(
        [sys.executable, "-c", _REPEATED, started_by],
        capture_output=True, text=True, timeout=deadline(300),
        env={**env, "JAX_PLATFORMS": "cpu,cpu"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert (outcome["default"], outcome["placed"], outcome["same_device"]) == ("cpu", "cpu", True)
    # Started by tj, the CPU starts once; started by JAX first, the setting stays as it was.
    assert outcome["platforms"] == ("cpu" if started_by == "tj" else "cpu,cpu")


def test_a_platform_named_twice_starts_in_the_devices_command() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    result = subprocess.run(
        [sys.executable, "-m", "torch2jax_device", "devices"],
        capture_output=True, text=True, timeout=deadline(300),
        env={**env, "JAX_PLATFORMS": "cpu,cpu"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "default backend: cpu" in result.stdout


def test_distributed_start_up_is_registered_from_above() -> None:
    """The platform table runs what the distributed layer registered (it never imports it);
    tests/unit/test_distributed.py runs a launched job that joins through it."""
    from torch2jax_device._src import distributed

    assert distributed._join_launched_job in _platforms._BEFORE_BACKENDS_START
    _platforms.call_before_backends_start(distributed._join_launched_job)  # once is enough
    assert _platforms._BEFORE_BACKENDS_START.count(distributed._join_launched_job) == 1
