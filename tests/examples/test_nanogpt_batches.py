"""The nanoGPT get_batch example runs end to end, learns, and says where batches went."""

from __future__ import annotations

import re

from tests.support.examples import ExampleRunner


def test_nanogpt_batches_runs_and_reports_placement(examples: ExampleRunner) -> None:
    out = examples.run("nanogpt_batches.py", "--steps", "100")  # 300 by default
    assert "device:       cpu" in out
    assert "tokens:       200000 uint16 tokens, np.memmap on the host" in out
    assert "train batch:  x (32, 64) int32 on cpu, committed=True" in out
    assert "train:        100 steps in " in out
    losses = [float(loss) for loss in re.findall(r"loss (\d+\.\d+)", out)]
    # Step 0, step 99 and the evaluation: 100 steps take the bigram model from chance
    # (ln 65 = 4.17) to below 1, on the training batches and the held-out windows alike.
    assert len(losses) == 3 and losses[0] > 4.0 and losses[1] < 1.0 and losses[2] < 1.0
    assert re.search(r"eval: +10 batches \(len\(loader\) = 10\) from 2 spawned", out)
    assert "x (24, 64) int32 on cpu" in out  # the last, short batch
