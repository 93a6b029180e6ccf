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
import numpy as np
import pytest
import torch

import torch2jax_device as tj
from tests.support.deadlines import deadline
from torch2jax_device._src import preflight

_FRACTIONS = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")


def run_fresh(code: str, **env: str) -> Any:
    """Run ``code`` in a new interpreter; it prints one JSON document as its last line."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=deadline(120), check=False,
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


@pytest.fixture(scope="module")
def written_before_start() -> Any:
    """Two settings made before JAX starts, in one fresh interpreter: what
    ``configure(platforms=["cuda", "cpu"])`` returns, then the variable
    ``cuda.set_per_process_memory_fraction(0.25)`` writes."""
    return run_fresh(
        """
        import json, os, torch2jax_device as tj
        written = tj.configure(platforms=["cuda", "cpu"])
        tj.cuda.set_per_process_memory_fraction(0.25)
        print(json.dumps([written, os.environ.get("XLA_CLIENT_MEM_FRACTION")]))
        """
    )


def test_torch_names_are_written_in_jax_spelling(written_before_start: Any) -> None:
    written, _ = written_before_start
    assert written == {"JAX_PLATFORMS": "cuda,cpu", "jax_platforms": "cuda,cpu"}


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


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"default_device": "cuda:01"}, r"default_device='cuda:01'\): Invalid device string"),
        ({"default_device": True}, r"argument 'type' must be str.*not bool"),
        ({"default_device": 1.5}, r"not float"),
        ({"default_device": b"\xff"}, r"is not UTF-8"),
        ({"default_device": np.int64(0)}, r"cannot know which accelerator an index names"),
        ({"default_device": "xla"}, r"needs an unindexed"),
        ({"default_device": "meta"}, r"needs an unindexed"),
        ({"default_device": torch.device("cuda", 1)}, r"default_device='cuda:1'\) needs"),
        ({"platforms": 123}, r"platforms must be a string such as 'cuda,cpu'.*got 123"),
        ({"platforms": b"cpu"}, r"got b'cpu'"),
        ({"platforms": {"cpu"}}, r"got \{'cpu'\}"),
        ({"platforms": ("cuda", 1)}, r"got \('cuda', 1\)"),
        ({"memory_fraction": 10**400}, r"memory_fraction must be in \(0, 1\], got <an integer"),
        ({"memory_fraction": float("nan")}, r"got nan"),
        ({"memory_fraction": np.bool_(True)}, r"memory_fraction must be a number"),
        ({"allocator": 3}, r"allocator must be a name such as 'platform', not 3"),
        ({"preallocate": np.bool_(False)}, r"preallocate must be True or False"),
        ({"num_cpu_devices": 10**6}, r"num_cpu_devices=1000000 is more CPU devices.*at most 8192"),
        ({"num_cpu_devices": 8193}, r"at most 8192"),
        ({"num_cpu_devices": -1}, r"must be at least 1, got -1"),
        ({"num_cpu_devices": "4"}, r"num_cpu_devices must be an int, not '4'"),
    ],
)
def test_every_form_is_accepted_or_a_config_error(kwargs: dict[str, Any], message: str) -> None:
    """Refused before anything is checked against the running JAX: a ConfigError."""
    with pytest.raises(tj.ConfigError, match=message):
        tj.configure(**kwargs)


def test_a_jax_device_is_refused_without_resolving_it() -> None:
    with pytest.raises(tj.ConfigError, match=r"a jax.Device exists only once JAX has started"):
        tj.configure(default_device=jax.devices("cpu")[0])


_EVERY_FORM = """
import json, fractions
import numpy as np, torch
from jax._src import xla_bridge
import torch2jax_device as tj

cases = [
    ("platforms", "cpu"), ("platforms", "cuda, cpu"), ("platforms", ["cuda", "cpu"]),
    ("platforms", ("mps", "cpu")), ("platforms", 7), ("platforms", "gpu"),
    ("default_device", 0), ("default_device", np.int64(0)), ("default_device", "cuda"),
    ("default_device", "gpu"), ("default_device", "rocm"), ("default_device", "tpu"),
    ("default_device", "cuda:0"), ("default_device", tj.device("cuda")),
    ("default_device", torch.device("cuda")), ("default_device", torch.device("cpu", 0)),
    ("default_device", b"cpu"), ("default_device", "xla"), ("default_device", "mps"),
    ("default_device", "cuda:1"), ("default_device", True),
    ("preallocate", False), ("preallocate", "no"),
    ("memory_fraction", 0.5), ("memory_fraction", 1), ("memory_fraction", np.float32(0.25)),
    ("memory_fraction", fractions.Fraction(1, 2)), ("memory_fraction", 10**400),
    ("allocator", "platform"), ("allocator", "cuda-async"),
    ("num_cpu_devices", np.int64(3)), ("num_cpu_devices", 8192), ("num_cpu_devices", 10**6),
    ("default_device", "cpu"), ("platforms", "cpu"), ("num_cpu_devices", 2),
]
outcomes = []
for name, value in cases:
    try:
        tj.configure(**{name: value})
        outcome = "ok"
    except Exception as error:
        outcome = type(error).__name__
    outcomes.append([name, repr(value)[:30], outcome, xla_bridge.backends_are_initialized()])
print(json.dumps({"outcomes": outcomes, "devices": [str(d) for d in tj.list_devices()]}))
"""


def test_no_form_starts_jax_and_later_calls_still_apply() -> None:
    """``configure(default_device=0)`` used to start JAX, so every later call failed."""
    out = run_fresh(_EVERY_FORM)
    refused = {
        ("platforms", "7"), ("platforms", "'gpu'"), ("default_device", "0"),
        ("default_device", "np.int64(0)"), ("default_device", "'xla'"),
        ("default_device", "'mps'"), ("default_device", "'cuda:1'"),
        ("default_device", "True"), ("preallocate", "'no'"),
        ("memory_fraction", repr(10**400)[:30]), ("allocator", "'cuda-async'"),
        ("num_cpu_devices", "1000000"),
    }  # fmt: skip
    for name, value, outcome, started in out["outcomes"]:
        assert not started, (name, value)
        assert outcome == ("ConfigError" if (name, value) in refused else "ok"), (name, value)
    assert out["devices"] == ["cpu:0", "cpu:1"]  # the last settings reached JAX


@pytest.mark.idiom("memory-fraction")
def test_set_per_process_memory_fraction_is_configure(written_before_start: Any) -> None:
    with pytest.raises(tj.ConfigError, match="cannot set it for cuda:1 alone"):
        tj.cuda.set_per_process_memory_fraction(0.5, "cuda:1")
    # torch (with CUDA) raises ValueError "Expected a cuda device, but got: cpu"; before,
    # the GPU's fraction was set although the call named the CPU.
    for not_a_gpu in ("cpu", tj.device("cpu"), "meta"):
        with pytest.raises(tj.InvalidDeviceError, match="Expected a CUDA device") as refused:
            tj.cuda.set_per_process_memory_fraction(0.5, not_a_gpu)
        assert isinstance(refused.value, ValueError)
    with pytest.raises(tj.ConfigError, match=r"must be in \(0, 1\]"):
        tj.cuda.set_per_process_memory_fraction(2.0)
    jax.devices()  # JAX has started in this process (earlier tests need not have started it)
    with pytest.raises(tj.AlreadyInitializedError):
        tj.cuda.set_per_process_memory_fraction(0.5, 0)
    _, fraction = written_before_start
    assert fraction == "0.25"


@pytest.mark.parametrize(
    ("name", "value"),
    [("JAX_ENABLE_X64", "maybe"), ("JAX_NUM_CPU_DEVICES", "abc"), ("JAX_DEFAULT_PRNG_IMPL", "x")],
)
def test_a_variable_jax_refuses_is_a_config_error_at_import(name: str, value: str) -> None:
    """``import jax`` raises a bare ValueError; ``import torch2jax_device`` says which
    variable, the fix, and where to see every variable JAX refuses."""
    out = run_fresh(
        """
        import json
        try:
            import torch2jax_device
        except ValueError as error:
            print(json.dumps([type(error).__name__, str(error), type(error.__cause__).__name__]))
        """,
        **{name: value},
    )
    assert out[0] == "ConfigError" and out[2] == "ValueError"
    assert f"Fix: set {name} to a value JAX accepts, or unset it" in out[1]
    assert "`torch2jax-device doctor` lists every variable JAX refuses" in out[1]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["python", "-m", "torch2jax_device", "doctor"], True),
        (["python", "-mtorch2jax_device", "devices"], True),
        (["python", "-X", "dev", "-W", "error", "-u", "-m", "torch2jax_device"], True),
        (["/venv/bin/python", "/venv/bin/torch2jax-device", "doctor"], True),
        (["python.exe", "C:\\venv\\Scripts\\torch2jax-device.exe", "doctor"], True),
        (["python", "-m", "pytest", "-m", "torch2jax_device"], False),
        (["python", "-c", "import torch2jax_device"], False),
        (["python", "train.py", "-m", "torch2jax_device"], False),
        (["python", "-"], False),
        (["python"], False),
    ],
)
def test_the_command_line_is_told_apart_from_a_program(argv: list[str], expected: bool) -> None:
    assert preflight.started_as_command_line(argv) is expected
