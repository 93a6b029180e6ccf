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
