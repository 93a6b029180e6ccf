"""Every dtype through every multi-process entry point: the values arrive, or the library says no.

One job of 2 processes (``tests/support/distributed/dtype_sweep_worker.py``) takes every
kind JAX holds (bool, every int and float width NumPy and ml_dtypes give JAX, complex,
PRNG keys of each implementation) through replication over the job (``DDP(model)``: an
``nnx.Dropout`` keeps a key), a split of a whole value, ``make_global_batch``, a
``DeviceLoader`` over the mesh, gathering a global array to the host, and
``all_reduce``. The oracle is the values each rank brought: every answer holds exactly
their bits (keys by their key data), or every rank raised the library's own error.
A kind or an entry point added to the worker is checked by every test here.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from tests.support.deadlines import deadline
from tests.support.distributed.dtype_sweep_worker import FORMS, KEYS, NUMBERS, TOTALS
from tests.support.distributed.launch import SCRIPTS, launch, results

ENTRY_POINTS = ["replicate", "split", "make_global_batch", "DeviceLoader", "gather"]
# What all_reduce refuses, as torch does or because there is nothing to reduce.
REFUSED = {("complex64", "all_reduce-max"), *((key, "all_reduce-max") for key in KEYS)}


@functools.cache
def _found() -> list[dict[str, Any]]:
    status, out, err = launch(
        "--nproc-per-node", "2", "--cpu-devices", "1", str(SCRIPTS / "dtype_sweep_worker.py"),
        str(deadline(30)), limit_s=180,
    )  # fmt: skip
    assert status == 0, out[-3000:] + err[-3000:]
    return results(out, "DTYPES ", count=2)


@pytest.mark.parametrize("entry", [*ENTRY_POINTS, "all_reduce-max"])
@pytest.mark.parametrize("kind", NUMBERS + KEYS)
def test_every_kind_arrives_whole_or_is_refused_by_the_library(kind: str, entry: str) -> None:
    outcomes = [rank["found"][kind][entry] for rank in _found()]
    if (kind, entry) in REFUSED:
        assert all(
            outcome.startswith("raised torch2jax_device._src.errors.DistributedError")
            for outcome in outcomes
        ), outcomes
    else:
        assert outcomes == ["ok", "ok"]


@pytest.mark.parametrize("entry", ["make_global_batch", "DeviceLoader", "to_device"])
@pytest.mark.parametrize("form", list(FORMS))
def test_every_rank_holds_one_global_value_or_every_rank_raises(form: str, entry: str) -> None:
    """A global array is one value for the whole job, whatever built it. A global batch's
    rows are every rank's rows (make_global_batch, DeviceLoader); its 0-d leaves (a
    count, a flag) are replicated, so ranks bringing different ones have no one value.
    ``tj.to_device`` over the job splits one value each rank passes whole, so ranks
    passing their own rows have none either. Where there is none, every rank must raise
    the library's error, where each rank used to keep its own (a different loss on each
    rank) or the rows of other ranks were dropped."""
    views = [rank["views"][f"{form}/{entry}"] for rank in _found()]
    rows_of_each_rank = form.startswith(("rows", "vector")) and entry != "to_device"
    if entry == "to_device" and views[0].startswith("kept the number"):
        assert views[1].startswith("kept the number")  # torch's .to() leaves numbers too
    elif form.endswith("per-rank") and not rows_of_each_rank:
        assert views == ["raised torch2jax_device._src.errors.DistributedError"] * 2
    elif views[0].startswith("holds"):
        assert views[0] == views[1], views
    else:
        assert all(view.startswith("raised torch2jax_device.") for view in views), views


@pytest.mark.parametrize("op", ["sum", "product", "max"])
@pytest.mark.parametrize("metric", list(TOTALS))
def test_metrics_reduce_to_torchs_total_or_are_refused(metric: str, op: str) -> None:
    """torch's in-place all_reduce of an int64 count is exact in 64 bits; JAX holds int64
    as int32 (without x64), so a total past 32 bits must raise on every rank, where it
    wrapped (1.5e9 tokens on each of 2 ranks summed to -1294967296). float64 likewise (a
    value or total past float32's largest was inf). Narrower dtypes wrap in torch too,
    and must wrap alike."""
    outcomes = [rank["totals"][f"{metric}/{op}"] for rank in _found()]
    assert outcomes[0] == outcomes[1], outcomes
    assert outcomes[0] in ("torch's", "raised torch2jax_device._src.errors.DistributedError")
    narrowed = "64" in metric or "python" in metric
    if not (narrowed and metric.endswith(("large", "huge"))):
        assert outcomes[0] == "torch's"  # fits, or wraps as torch's does
