"""``examples/quickstart.py`` runs end to end and says where things were placed."""

from __future__ import annotations

from tests.support.examples import run_example


def test_quickstart_runs_and_reports_placement() -> None:
    out = run_example("quickstart.py")
    for label in ("compute device:", "dataset:", "model:", "batch:", "logits:", "bf16 model:"):
        assert label in out
    assert "dataset:           (1000000,) int32 on cpu" in out
    assert "bf16 model:        bfloat16" in out
    assert "missing device:    DeviceUnavailableError" in out
