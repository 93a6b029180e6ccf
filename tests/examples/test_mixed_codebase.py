"""``examples/mixed_codebase.py``: a torch DataLoader feeding a JAX model."""

from __future__ import annotations

from tests.support.examples import ExampleRunner


def test_mixed_codebase_moves_torch_batches_and_warns_once(examples: ExampleRunner) -> None:
    out = examples.run("mixed_codebase.py")
    assert out.count("warned once: int64 data becomes int32") == 1
    assert "labels int32" in out
    assert float(out.rsplit("accuracy ", 1)[1].split(";")[0]) > 0.9
    assert "model on cpu\n" in out  # next(tj.parameters(model)).device reads as torch's
    assert "strict placement: host data meets a model on cpu: one device" in out
