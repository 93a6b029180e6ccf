"""all_reduce and global batches over 2 CPU processes, side by side with torch (gloo).

One torchrun job (``tests/support/distributed/collectives_worker.py``): each rank reduces
every dtype torch's gloo backend takes with every ``ReduceOp``, first in torch (the
oracle), then in torch2jax_device, whose result must have torch's dtype (64-bit types
held in 32 bits, as everywhere without ``jax_enable_x64``) and values. Then each rank
makes the mistakes a data-parallel script makes with values that differ across ranks
(another shape, dtype, tree, op or call; a short last batch; a loader with one batch
more): every rank must raise the library's ``DistributedError`` naming the leaf and each
rank's shape, and the ranks must stay in step (later calls work, the job ends).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.support.deadlines import deadline
from tests.support.distributed.launch import results, torchrun

DTYPES = (
    "bool", "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64",
    "complex64", "complex128",
)  # fmt: skip
OPS = ("sum", "product", "max", "min", "avg", "band", "bor", "bxor")
# Without jax_enable_x64, JAX holds 64-bit values in 32 bits (docs/distributed.md).
HELD_AS = {"int64": "int32", "float64": "float32", "complex128": "complex64"}


@pytest.fixture(scope="module")
def job() -> str:
    return torchrun("collectives_worker.py", str(deadline(60)), nproc=2, limit_s=240)


@pytest.fixture(scope="module")
def torch_side(job: str) -> list[dict[str, Any]]:
    return results(job, "TORCH ", count=2)


@pytest.fixture(scope="module")
def tj_side(job: str) -> list[dict[str, Any]]:
    return results(job, "TJ ", count=2)


@pytest.mark.idiom("dist-all-reduce")
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_all_reduce_gives_torchs_dtype_and_values(
    dtype: str, op: str, torch_side: list[dict[str, Any]], tj_side: list[dict[str, Any]]
) -> None:
    key = f"{dtype}/{op}"
    for theirs, ours in zip(torch_side, tj_side, strict=True):
        expected, got = theirs["reductions"][key], ours["reductions"][key]
        if expected[0] != "error":
            assert got == [HELD_AS.get(expected[0], expected[0]), expected[1]], key
        elif op == "avg" and dtype in ("bool", "uint8", "int8", "int32", "int64"):
            # torch refuses AVG of integers; tj's "mean" is the floating-point mean: torch's
            # AVG of the same values as float32 (of two bools: (OR + AND) / 2)
            reductions = theirs["reductions"]
            if dtype == "bool":
                either, both = reductions["bool/sum"][1], reductions["bool/product"][1]
                mean = [(a + b) / 2 for a, b in zip(either, both, strict=True)]
            else:
                mean = reductions["float32/avg"][1]
            assert got == ["float32", mean], key
        else:
            assert got[:2] == ["error", "DistributedError"], key
            assert "leaf <root>" in got[2] and "Fix:" in got[2], got[2]


def test_bool_and_int8_sums_keep_their_dtype_as_torchs_in_place_reduction(
    tj_side: list[dict[str, Any]],
) -> None:
    # the audit's A5 cases by name: a bool SUM is an OR, an int8 SUM wraps
    reductions = tj_side[0]["reductions"]
    assert reductions["bool/sum"] == ["bool", [1.0, 1.0, 1.0, 0.0]]
    assert reductions["bool/product"] == ["bool", [1.0, 0.0, 0.0, 0.0]]
    assert reductions["int8/sum"] == ["int8", [-56.0, 3.0, 8.0, 7.0]]
    assert reductions["uint8/product"] == ["uint8", [16.0, 2.0, 15.0, 0.0]]
    assert not any(math.isnan(v) for v in reductions["float16/sum"][1])


ALL_REDUCE_MISTAKES = {
    "shape": "at leaf ['n'], rank 0 has float32[3]; rank 1 has float32[2]",
    "dtype": "at leaf ['n'], rank 0 has int32[2]; rank 1 has float32[2]",
    "tree": "the ranks pass different trees: rank 0 has the leaves ['a']; rank 1 has the "
    "leaves ['a'], ['b']",
    "op": "rank 0 at all_reduce(op='sum'); rank 1 at all_reduce(op='max')",
    "call": "rank 0 at all_reduce(op='sum'); rank 1 at barrier()",
}


@pytest.mark.idiom("dist-all-reduce")
@pytest.mark.parametrize("mistake", sorted(ALL_REDUCE_MISTAKES))
def test_all_reduce_of_different_values_raises_on_every_rank(
    mistake: str, tj_side: list[dict[str, Any]]
) -> None:
    for result in tj_side:
        message = result["outcomes"][mistake]
        assert message.startswith("DistributedError: "), message
        assert ALL_REDUCE_MISTAKES[mistake] in message, message
        assert "Fix: pad each rank's values to one shape" in message


def test_a_rank_that_fails_before_all_reduce_tells_the_others(
    tj_side: list[dict[str, Any]],
) -> None:
    waiting, failing = (result["outcomes"]["failed_here"] for result in tj_side)
    assert failing.startswith("ConversionError: the int64 value 1099511627776 does not fit")
    assert waiting.startswith("DistributedError: all_reduce() on rank 0 ")
    assert "rank 1 failed before it could take part: ConversionError: the int64 value" in waiting


def test_the_ranks_stay_in_step_after_every_mistake(tj_side: list[dict[str, Any]]) -> None:
    for result in tj_side:
        assert result["outcomes"]["after_mistakes"] == "ok"
        assert result["outcomes"]["after_loaders"] == "ok"
        assert result["outcomes"]["after_gathers"] == "ok"


def test_replicas_from_different_copies_raise_on_every_rank(
    tj_side: list[dict[str, Any]],
) -> None:
    """``tj.to_device(model, NamedSharding(mesh, P()))`` is ``DDP(model)``, which torch
    builds from rank 0's parameters: copies that differ (a model seeded per rank) would be
    replicas XLA takes for one value, and the ranks' models would never converge."""
    for result in tj_side:
        message = result["outcomes"]["replicas_differ"]
        assert message.startswith("DistributedError: to_device() on rank "), message
        assert "at leaf ['w'], rank 0 has float32[2, 3] with values #" in message, message
        assert "broadcast_one_to_all" in message and "not seed + rank" in message
        assert result["outcomes"]["replicas_agree"] == "ok"
        assert result["outcomes"]["after_replicas"] == "ok"


def test_gathering_different_arrays_to_the_host_raises_on_every_rank(
    tj_side: list[dict[str, Any]],
) -> None:
    """``tj.to_device(global_array, "cpu")`` gathers with a collective: ranks that gather
    different arrays would run mismatched collectives (garbage or a hang)."""
    for result in tj_side:
        message = result["outcomes"]["gather_different"]
        assert message.startswith("DistributedError: to_device() on rank "), message
        assert "float32[4, 3]" in message and "float32[2, 3]" in message, message


@pytest.mark.idiom("dist-sampler-global-batch")
@pytest.mark.parametrize(
    ("mistake", "expected"),
    [
        ("global_uneven", "at leaf ['x'], rank 0 has float32[3, 3]; rank 1 has float32[2, 3]"),
        ("global_dtype", "at leaf ['x'], rank 0 has float16[2, 3]; rank 1 has float32[2, 3]"),
    ],
)
def test_make_global_batch_of_different_local_batches_raises_on_every_rank(
    mistake: str, expected: str, tj_side: list[dict[str, Any]]
) -> None:
    for result in tj_side:
        message = result["outcomes"][mistake]
        assert message.startswith("DistributedError: make_global_batch (call #"), message
        assert f"the ranks' local batches differ: {expected}" in message
        assert "Fix: drop_last=True on the DataLoader" in message


@pytest.mark.parametrize(
    ("mistake", "expected"),
    [
        ("loader_short_last", "DeviceLoader: batch #1 differs between the ranks: at leaf ['x'], "
         "rank 0 has float32[4, 3]; rank 1 has float32[2, 3]"),
        ("loader_background", "DeviceLoader: batch #1 differs between the ranks: at leaf "
         "['x'], rank 0 has float32[3, 3]; rank 1 has float32[2, 3]"),
        ("prefetch_uneven", "prefetch_to_device: batch #2 differs between the ranks: at leaf "
         "['x'], rank 0 has float32[3, 3]; rank 1 has float32[2, 3]"),
    ],
)  # fmt: skip
def test_loader_batches_of_different_shapes_raise_on_every_rank(
    mistake: str, expected: str, tj_side: list[dict[str, Any]]
) -> None:
    for result in tj_side:
        message = result["outcomes"][mistake]
        assert message.startswith(f"DistributedError: {expected}"), message
        assert "Fix: drop_last=True on the DataLoader" in message


def test_a_loader_with_one_batch_more_raises_on_every_rank(tj_side: list[dict[str, Any]]) -> None:
    for result in tj_side:
        message = result["outcomes"]["loader_more_batches"]
        assert message.startswith(
            "DistributedError: DeviceLoader: the ranks have different numbers of batches: "
        ), message
        assert "rank 0 at batch #2; rank 1 at the end of its batches (after 2)" in message
        assert "Fix: give every rank the same number of batches" in message


def test_loaders_that_agree_run_whole_or_left_early(tj_side: list[dict[str, Any]]) -> None:
    for result in tj_side:
        outcomes = result["outcomes"]
        assert outcomes["global_even"] == outcomes["loader_even"] == "ok"
        # both ranks leave after 2 batches; rank 1's loader has no third: nobody waits
        assert outcomes["loader_break"] == outcomes["loader_break_at_end"] == "ok"
        assert result["shapes"] == {"global_even": [4, 3], "loader_even": [[4, 3]] * 3}


def test_a_rank_going_on_after_another_left_its_loop_raises(
    tj_side: list[dict[str, Any]],
) -> None:
    left, going_on = (result["outcomes"]["loader_left_early"] for result in tj_side)
    assert left == "ok"  # it has left: it cannot hear of it, but it computes nothing alone
    assert going_on.startswith(
        "DistributedError: DeviceLoader: the ranks have different numbers of batches: "
        "the ranks are at different calls: rank 0 at leaving the loop (after 1 batches); "
        "rank 1 at batch #1"
    ), going_on
