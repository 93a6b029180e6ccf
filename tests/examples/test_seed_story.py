"""The seed-story example runs end to end: data on the CPU, batches and model on compute."""

from __future__ import annotations

import re

from tests.support.examples import ExampleRunner


def test_seed_story_keeps_data_on_the_cpu_and_trains_on_the_compute_device(
    examples: ExampleRunner,
) -> None:
    out = examples.run("seed_story.py")
    compute = re.search(r"compute device:    (\S+) \(the default device: (\S+)\)", out)
    assert compute is not None, out
    device, default = compute.groups()
    assert default == device != "cpu:0"  # the data must not follow the default device
    assert "tokens:            (4194304,) uint16 on cpu:0" in out
    losses = [
        float(loss) for loss in re.findall(r"loss (\d+\.\d+), batch \(16, 64\) on (?:\S+)", out)
    ]
    assert len(losses) == 2 and losses[1] < losses[0] / 2, out
    assert out.count(f"batch (16, 64) on {device}, model on {device}") == 2, out
    assert "lazy window:       (65,) on cpu:0 of [4194304] U16, same tokens: True" in out
