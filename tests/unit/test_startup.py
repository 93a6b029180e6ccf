"""``tj.configure``: validated start-up settings, applied before JAX starts, refused after.

Effects are checked in fresh interpreters (JAX reads these once, when it starts); the
validation paths run here, where JAX has started, because values are checked first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import jax
import pytest

import torch2jax_device as tj

_FRACTIONS = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")


def run_fresh(code: str, **env: str) -> Any:
    """Run ``code`` in a new interpreter; it prints one JSON document as its last line."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**environment, **env},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.idiom("lazy-gpu-memory")
@pytest.mark.idiom("memory-fraction")
def test_settings_reach_jax_when_made_before_start() -> None:
    out = run_fresh(
        """
        import json, os, jax
        import torch2jax_device as tj
        written = tj.configure(platforms="cpu", default_device="cpu", preallocate=False,
                               memory_fraction=0.5, allocator="platform", num_cpu_devices=3)
        print(json.dumps({
            "written": written,
            "env": {k: os.environ.get(k) for k in ("JAX_PLATFORMS", "XLA_PYTHON_CLIENT_PREALLOCATE",
                    "XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION",
                    "XLA_PYTHON_CLIENT_ALLOCATOR")},
            "devices": [str(d) for d in tj.list_devices()],
            "backends": tj.available_backends(),
        }))
        """,
        XLA_PYTHON_CLIENT_MEM_FRACTION=".9",
    )
    assert out["devices"] == ["cpu:0", "cpu:1", "cpu:2"]
    assert out["backends"] == ["cpu"]
    assert out["env"] == {
        "JAX_PLATFORMS": "cpu",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "XLA_CLIENT_MEM_FRACTION": "0.5",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": None,  # JAX rejects both at once
        "XLA_PYTHON_CLIENT_ALLOCATOR": "platform",
    }
    assert out["written"]["jax_default_device"] == "cpu"
    assert out["written"]["jax_num_cpu_devices"] == "3"


def test_torch_names_are_written_in_jax_spelling() -> None:
    out = run_fresh(
        """
        import json, torch2jax_device as tj
        print(json.dumps(tj.configure(platforms=["cuda", "cpu"])))
        """
    )
    assert out == {"JAX_PLATFORMS": "cuda,cpu", "jax_platforms": "cuda,cpu"}


def test_after_start_it_raises_and_changes_nothing() -> None:
    out = run_fresh(
        """
        import json, os, jax, torch2jax_device as tj
        jax.numpy.zeros(1)
        try:
            tj.configure(preallocate=False, num_cpu_devices=2)
        except tj.AlreadyInitializedError as error:
            message = str(error)
        # Plain JAX accepts this silently and ignores it: the trap configure closes.
        jax.config.update("jax_platforms", "cuda")
        print(json.dumps({"message": message,
                          "env": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
                          "devices": len(jax.devices())}))
        """
    )
    assert out["env"] is None and out["devices"] == 1
    assert "already running (started: cpu)" in out["message"]
    assert "XLA_PYTHON_CLIENT_PREALLOCATE=false" in out["message"]
    assert "restart the kernel" in out["message"]


def test_in_this_started_process_valid_settings_raise() -> None:
    assert jax.local_devices()  # JAX is running here
    with pytest.raises(tj.AlreadyInitializedError, match="already running"):
        tj.configure(preallocate=False)
    assert (
        "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ
        or os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] != "false"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"allocator": "cuda-async"},
            r"unknown allocator 'cuda-async'; JAX accepts default, platform",
        ),
        ({"allocator": "BFC"}, r"unknown allocator 'BFC'"),
        ({"memory_fraction": 0}, r"memory_fraction must be in \(0, 1\], got 0"),
        ({"memory_fraction": 1.5}, r"must be in \(0, 1\], got 1.5"),
        ({"memory_fraction": -0.1}, r"got -0.1"),
        ({"memory_fraction": True}, r"memory_fraction must be a number"),
        ({"memory_fraction": "0.5"}, r"memory_fraction must be a number"),
        ({"platforms": "gpu"}, r"platforms='gpu' makes JAX start CUDA, ROCm and oneAPI"),
        ({"platforms": "cuda,gpu"}, r"say 'cuda' \(NVIDIA\) or 'rocm'"),
        ({"platforms": "cuda,vulkan"}, r"unknown platform 'vulkan'"),
        ({"platforms": ""}, r"must name at least one backend"),
        ({"platforms": []}, r"must name at least one backend"),
        ({"default_device": "cuda:1"}, r"needs an unindexed cpu, cuda, rocm or tpu device"),
        ({"default_device": "mps"}, r"tj.set_default_device\('mps'\)"),
        ({"num_cpu_devices": 0}, r"num_cpu_devices must be at least 1, got 0"),
        ({"num_cpu_devices": 2.0}, r"num_cpu_devices must be an int"),
        ({"preallocate": "false"}, r"preallocate must be True or False, not 'false'"),
    ],
)
def test_bad_values_are_named_and_nothing_is_written(kwargs: dict[str, Any], message: str) -> None:
    before = {
        k: os.environ.get(k) for k in ("JAX_PLATFORMS", "XLA_PYTHON_CLIENT_ALLOCATOR", *_FRACTIONS)
    }
    with pytest.raises(tj.ConfigError, match=message):
        tj.configure(**kwargs)
    after = {k: os.environ.get(k) for k in before}
    assert after == before


def test_bad_device_spec_is_a_device_error() -> None:
    with pytest.raises(tj.InvalidDeviceError):
        tj.configure(default_device="cuda:01")


@pytest.mark.idiom("memory-fraction")
def test_set_per_process_memory_fraction_is_configure() -> None:
    with pytest.raises(tj.ConfigError, match="cannot set it for cuda:1 alone"):
        tj.cuda.set_per_process_memory_fraction(0.5, "cuda:1")
    with pytest.raises(tj.ConfigError, match=r"must be in \(0, 1\]"):
        tj.cuda.set_per_process_memory_fraction(2.0)
    with pytest.raises(tj.AlreadyInitializedError):
        tj.cuda.set_per_process_memory_fraction(0.5, 0)
    out = run_fresh(
        """
        import json, os, torch2jax_device as tj
        tj.cuda.set_per_process_memory_fraction(0.25)
        print(json.dumps(os.environ.get("XLA_CLIENT_MEM_FRACTION")))
        """
    )
    assert out == "0.25"
