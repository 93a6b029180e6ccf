"""The examples run end to end and say where things were placed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_quickstart_runs_and_reports_placement() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py")],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    out = result.stdout
    for label in ("compute device:", "dataset:", "model:", "batch:", "logits:", "bf16 model:"):
        assert label in out
    assert "dataset:           (1000000,) int32 on cpu" in out
    assert "bf16 model:        bfloat16" in out
    assert "missing device:    DeviceUnavailableError" in out


def _run_example(name: str) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return result.stdout


def test_mnist_port_learns_on_the_compute_device() -> None:
    out = _run_example("mnist_port.py")
    assert "model on " in out
    accuracy = float(out.rsplit("test accuracy ", 1)[1].split()[0])
    assert accuracy > 0.9  # the synthetic digits are separable


def test_mixed_codebase_moves_torch_batches_and_warns_once() -> None:
    out = _run_example("mixed_codebase.py")
    assert out.count("warned once: int64 data becomes int32") == 1
    assert "labels int32" in out
    assert float(out.rsplit("accuracy ", 1)[1].split(";")[0]) > 0.9
