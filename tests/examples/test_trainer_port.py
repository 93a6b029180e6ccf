"""examples/trainer_port.py resumes the PyTorch original's checkpoints, and the reverse.

The torch original (examples/trainer_torch.py: a CNN with BatchNorm, SGD with momentum
and weight decay, StepLR, a checkpoint per epoch) trains 4 epochs: the oracle. The
port starts from the original's initial weights and trains 2 epochs, in one process
and under ``torch2jax-device run`` (2 processes x 2 CPU devices); the torch original
resumes each port's epoch-2 checkpoint, and each port resumes the original's. Every
run's step losses must be the oracle's (relative tolerance 2e-5; measured 1.2e-7) and
its learning rates StepLR's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.support.distributed.launch import launch, results
from tests.support.examples import EXAMPLES, ExampleRunner, example_environment

EPOCHS, RESUMED_AT, STEPS_PER_EPOCH = 4, 2, 4
TOLERANCE = {"rtol": 2e-5}


def _summary(output: str, processes: int = 1) -> list[dict[str, Any]]:
    found = results(output, "summary: ")
    assert [summary["rank"] for summary in found] == list(range(processes)), output[-3000:]
    return found


def _port_job(*args: str) -> list[dict[str, Any]]:
    with example_environment():
        status, out, err = launch(
            "--nproc-per-node", "2", "--cpu-devices", "2", str(EXAMPLES / "trainer_port.py"),
            *args, limit_s=240,
        )  # fmt: skip
    assert status == 0, err[-3000:]
    return _summary(out, 2)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, examples: ExampleRunner) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("trainer")
    torch_dir, single_dir, job_dir = root / "torch", root / "single", root / "job"
    init = str(root / "init.pt")
    original = examples.run(
        "trainer_torch.py", "--epochs", str(EPOCHS), "--out-dir", str(torch_dir),
        "--save-init", init,
    )  # fmt: skip
    first = ("--epochs", str(RESUMED_AT), "--init", init)
    single = examples.start("trainer_port.py", *first, "--out-dir", str(single_dir))
    job = _port_job(*first, "--out-dir", str(job_dir))
    single_summary = _summary(single.output(limit_s=240))
    saved = f"checkpoint-{RESUMED_AT}.pt"
    theirs = str(torch_dir / saved)
    resumed = {
        "torch_from_single": examples.start(
            "trainer_torch.py", "--resume", str(single_dir / saved), "--out-dir", str(root / "a")
        ),
        "torch_from_job": examples.start(
            "trainer_torch.py", "--resume", str(job_dir / saved), "--out-dir", str(root / "b")
        ),
        "single_from_torch": examples.start(
            "trainer_port.py", "--resume", theirs, "--out-dir", str(root / "c")
        ),
    }
    job_from_torch = _port_job("--resume", theirs, "--out-dir", str(root / "d"))
    return {
        "original": _summary(original)[0],
        "single": single_summary,
        "job": job,
        "job_from_torch": job_from_torch,
        **{name: _summary(run.output(limit_s=240)) for name, run in resumed.items()},
    }


def _check(summaries: list[dict[str, Any]], original: dict[str, Any], epochs: slice) -> None:
    steps = slice(epochs.start * STEPS_PER_EPOCH, epochs.stop * STEPS_PER_EPOCH)
    for summary in summaries:
        np.testing.assert_allclose(summary["losses"], original["losses"][steps], **TOLERANCE)
        assert summary["lrs"] == original["lrs"][epochs]


@pytest.mark.idiom("optimizer-state-dict")
def test_the_port_trains_as_the_original_on_one_and_two_processes(runs: dict[str, Any]) -> None:
    original = runs["original"]
    assert len(original["losses"]) == EPOCHS * STEPS_PER_EPOCH
    assert original["lrs"] == [0.1, 0.1, 0.05, 0.05]  # StepLR(step_size=2, gamma=0.5)
    _check(runs["single"], original, slice(0, RESUMED_AT))
    _check(runs["job"], original, slice(0, RESUMED_AT))
    assert [(s["world_size"], s["devices"]) for s in runs["job"]] == [(2, 4), (2, 4)]


@pytest.mark.idiom("optimizer-state-dict")
@pytest.mark.idiom("lr-scheduler")
@pytest.mark.parametrize("run", ["torch_from_single", "torch_from_job"])
def test_the_original_resumes_the_ports_checkpoint(runs: dict[str, Any], run: str) -> None:
    _check(runs[run], runs["original"], slice(RESUMED_AT, EPOCHS))


@pytest.mark.idiom("optimizer-state-dict")
@pytest.mark.idiom("lr-scheduler")
@pytest.mark.parametrize("run", ["single_from_torch", "job_from_torch"])
def test_the_port_resumes_the_originals_checkpoint(runs: dict[str, Any], run: str) -> None:
    _check(runs[run], runs["original"], slice(RESUMED_AT, EPOCHS))
