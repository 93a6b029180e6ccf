"""The DDP trainer fuzzer: drawn whole trainers, torch's DDP beside the port, and one device.

``tests/support/distributed/ddp_trainer_fuzz.py`` draws a trainer (the data set's size
against the world size and batch size, both ``drop_last``, shuffling with or without
``set_epoch``, accumulation under ``no_sync``, ``clip_grad_norm_``, a summed or mean
loss, SGD, momentum, Adam or AdamW with a scheduler, a BatchNorm, the epochs, a rank-0
checkpoint resumed mid-run); ``ddp_trainer_fuzz_oracle.py`` runs every draw of the run
in one job per side (torch's DDP under torchrun, the oracle; the port under
``torch2jax-device run``, which also trains each draw on one device with the global
batch) and compares every micro-batch's global batch, every step's loss and norm, the
final parameters, buffers and optimizer state, and rank 0's checkpoint. DDP must be
torch's DDP, and as solid as one device: the same global batch gives the same training.

The default run is a few draws from the fixed seed and the named ones (``FOUND``, the
draws earlier runs found a difference in, each fixed since).
``TORCH2JAX_DEVICE_DDP_TRAINER_FUZZ_EXAMPLES=N`` and ``..._SEED=S`` make a longer or
another run (each draw costs about 10 s of the shared 2-core machine, most of it
compiling its steps).
"""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

# Imported as modules: drawing and judging start no process (conftest's rule marks every
# name imported from tests.support.distributed slow); the one test that runs the jobs is
# marked by hand.
import tests.support.distributed.ddp_trainer_cases as cases
import tests.support.distributed.ddp_trainer_fuzz as fuzz
import tests.support.distributed.ddp_trainer_fuzz_oracle as oracle
from tests.support import fuzz_runs
from tests.support.deadlines import deadline

EXAMPLES, SEED = fuzz_runs.settings("DDP_TRAINER_FUZZ", 2)


@pytest.mark.slow  # two multi-process jobs
def test_drawn_trainers_train_as_torchs_ddp_and_as_one_device() -> None:
    draws = {f"{SEED}:{n}": fuzz.draw(random.Random(f"{SEED}:{n}")) for n in range(EXAMPLES)}
    draws.update(fuzz.FOUND)
    results = oracle.run(draws, limit_s=deadline(60 + 40 * len(draws)))
    findings = oracle.judge(draws, results)
    if findings:
        pytest.fail(oracle.report(findings, EXAMPLES, SEED), pytrace=False)


def test_the_draws_reach_every_setting() -> None:
    """Every optimizer, scheduler and reduction, resumes, BatchNorm, accumulation, both
    ``drop_last``, trainers with no step at all and with a short last batch."""
    drawn = [fuzz.draw(random.Random(f"{SEED}:{n}")) for n in range(300)]
    assert {one.optimizer for one in drawn} == set(fuzz.OPTIMIZERS)
    assert {one.scheduler for one in drawn} == {None, *fuzz.SCHEDULERS}
    assert {one.reduction for one in drawn} == {"mean", "sum"}
    assert {one.resume_after for one in drawn} >= {None, 1, 2}
    for field in ("batch_norm", "sampler_drop_last", "loader_drop_last", "set_epoch", "shuffle"):
        assert {getattr(one, field) for one in drawn} == {False, True}, field
    assert {one.micro_batches for one in drawn} == {1, 2, 3}
    assert {one.feed for one in drawn} == set(fuzz.FEEDS)
    assert {one.break_after for one in drawn} == {None, 1, 2, 3}
    assert {one.resume_from for one in drawn if one.resume_after} == {"port", "torch"}
    assert {one.prefetch for one in drawn} == {0, 1, 2, 3}
    assert {(one.prefetch > 0, one.background) for one in drawn} == {
        (False, None), (False, False), (True, None), (True, False), (True, True)
    }  # fmt: skip
    assert any(not one.rows_per_batch() for one in drawn)
    assert any(len(set(one.rows_per_batch())) > 1 for one in drawn)  # a short last batch
    rows = fuzz.BATCH_NORM_ROWS
    assert all(min(one.rows_per_batch(), default=rows) >= rows for one in drawn if one.batch_norm)


def test_the_draws_reach_every_named_case_of_the_trainer_oracle() -> None:
    """The generator subsumes ``ddp_trainer_cases.CASES`` (the named loops of
    ``test_distributed_trainer_oracle.py``): each one's sampling and batching, and each
    one's stepping (accumulation, BatchNorm, the loss's reduction), are drawn within the
    first few thousand draws."""
    wanted = set()
    for case in cases.CASES.values():
        wanted.add(
            (
                case.samples,
                case.sampler_drop_last,
                case.batch_size,
                case.loader_drop_last,
                case.shuffle,
            )
        )
        wanted.add((case.micro_batches, case.batch_norm, "sum" if case.summed else "mean"))
    for number in range(20_000):
        one = fuzz.draw(random.Random(f"{SEED}:{number}"))
        wanted.discard(
            (one.samples, one.sampler_drop_last, one.batch_size, one.loader_drop_last, one.shuffle)
        )
        wanted.discard((one.micro_batches, one.batch_norm, one.reduction))
        if not wanted:
            break
    assert not wanted, f"never drawn: {wanted}"


def _agreeing() -> tuple[dict[str, Any], oracle.Results]:
    """One draw's results as the jobs write them, every side agreeing."""
    name = "by-hand"
    result = {
        "losses": [1.5, 1.25], "norms": [0.5, 0.25], "batches": [[[1.0, 2.0]], [[3.0, 4.0]]],
        "lengths": [2],
        "state": {"fc1.weight": [[0.5]]},
        "optimizer": {
            "state": {"0": {"step": 2.0, "exp_avg": [[0.1]]}},
            "param_groups": [{"lr": 0.01, "params": [0]}],
        },
        "loaded_is_final": True,
    }  # fmt: skip
    results: oracle.Results = {}
    for rank in range(2):
        for variant in ("torch", "port", "one-device"):
            results[variant, name, rank] = copy.deepcopy(result)
        results["torch", name, rank]["state"]["bn.num_batches_tracked"] = 2  # torch's only
    draws = {name: fuzz.TrainerDraw(samples=6, batch_size=3, batch_norm=True)}
    return draws, results


@pytest.mark.parametrize(
    ("variant", "change", "aspect"),
    [
        ("port", lambda r: r["batches"].reverse(), "global batch"),
        ("port", lambda r: r["losses"].__setitem__(1, 1.2501), "losses"),
        ("one-device", lambda r: r["norms"].__setitem__(0, 0.6), "norms"),
        ("port", lambda r: r.update(lengths=[3]), "len(batches)"),
        ("port", lambda r: r["state"].__setitem__("fc1.weight", [[0.6]]), "state"),
        ("one-device", lambda r: r["optimizer"]["param_groups"][0].update(lr=1), "optimizer state"),
        ("one-device", lambda r: r["optimizer"]["state"]["0"].pop("exp_avg"), "optimizer state"),
        ("port", lambda r: r.update(loaded_is_final=False), "checkpoint"),
        ("port", lambda r: r.update(error="DistributedError: ..."), "error"),
    ],
)  # fmt: skip
def test_the_judge_finds_a_difference(variant: str, change: Any, aspect: str) -> None:
    """The oracle can fail: each aspect, changed on one side, is a finding that names it
    (rank 0 runs the draw on one device, so a port change shows against both sides)."""
    draws, results = _agreeing()
    assert oracle.judge(draws, results) == []
    change(results[variant, "by-hand", 0])
    findings = oracle.judge(draws, results)
    assert findings and {finding.aspect for finding in findings} == {aspect}
    assert findings[0].reproduction().startswith("TrainerDraw(samples=")


def test_each_ranks_own_batch_statistics_are_not_a_difference() -> None:
    """DDP leaves rank 1 its own running statistics; the port keeps rank 0's (what it
    saves): with BatchNorm, rank 1's are not compared, its parameters are."""
    draws, results = _agreeing()
    results["torch", "by-hand", 1]["state"]["bn.running_mean"] = [1.0]
    results["port", "by-hand", 1]["state"]["bn.running_mean"] = [2.0]
    assert oracle.judge(draws, results) == []
    results["port", "by-hand", 1]["state"]["fc1.weight"] = [[2.0]]
    assert [finding.aspect for finding in oracle.judge(draws, results)] == ["state"]
