"""The nanoGPT get_batch example runs end to end, learns, and says where batches went."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.examples import EXAMPLES, example_env

EXAMPLE = EXAMPLES / "nanogpt_batches.py"


def test_nanogpt_batches_runs_and_reports_placement() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        capture_output=True, text=True, timeout=300, check=True, env=example_env(),
    )  # fmt: skip
    out = result.stdout
    assert "device:       cpu" in out
    assert "tokens:       200000 uint16 tokens, np.memmap on the host" in out
    assert "train batch:  x (32, 64) int32 on cpu, committed=True" in out
    losses = [float(loss) for loss in re.findall(r"loss (\d+\.\d+)", out)]
    assert len(losses) == 5 and losses[0] > 4.0 and losses[3] < 1.0  # step 0 .. step 299
    assert re.search(r"eval: +10 batches \(len\(loader\) = 10\) from 2 spawned", out)
    assert "x (24, 64) int32 on cpu" in out  # the last, short batch
