"""Processes that load a checkpoint together must agree on it, or all fail together.

One job of 2 processes x 2 CPU devices (``tests/support/distributed/mismatch_worker.py``,
run by ``checkpoint_worker.py`` in the job test_distributed_loading.py shares) where
each rank loads its own copy of a checkpoint onto one mesh, and the copies differ: ``w``
is (4, 6) on rank 0 and (8, 6) on rank 1. Without the check each rank built its parts
from its own shape and a jitted sum returned a number on both. The copies also differ in
values only (``v``: same names, shapes and dtypes): each rank compares a sample of the
values (``agreement.sample_windows``), which before this check loaded silently.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.distributed.launch import results
from tests.support.distributed.shared_jobs import checkpoint_job
from torch2jax_device._src.checkpoints.agreement import SAMPLE_ELEMENTS, sample_windows


@pytest.fixture(scope="module")
def job() -> list[dict[str, Any]]:
    status, out, err = checkpoint_job()
    assert status == 0, err[-4000:]
    found = results(out, "MISMATCH ")
    assert [result["rank"] for result in found] == [0, 1], out[-3000:] + err[-3000:]
    return found


@pytest.mark.parametrize("form", ["load_file", "torch", "safe_open"])
def test_every_process_fails_naming_the_tensor_and_both_shapes(
    job: list[dict[str, Any]], form: str
) -> None:
    messages = [result[form] for result in job]
    assert None not in messages, messages
    # The same verdict on both, each naming its own copy of the file.
    assert messages[0] == messages[1].replace("rank1", "rank0"), messages
    assert f"disagree on tensor '{'model.w' if form == 'torch' else 'w'}'" in messages[0]
    assert (
        "process 0 reads shape (4, 6) of float32, process 1 shape (8, 6) of float32"
        in (messages[0])
    )
    assert "give every process the same checkpoint" in messages[0]


def test_a_dtype_disagreement_fails_too(job: list[dict[str, Any]]) -> None:
    for result in job:
        assert (
            "process 0 reads shape (8,) of float32, process 1 shape (8,) of float16"
            in (result["dtype"])
        )


@pytest.mark.parametrize("form", ["load_file", "index", "torch", "safe_open", "get_slice"])
def test_every_process_fails_when_the_copies_hold_other_values(
    job: list[dict[str, Any]], form: str
) -> None:
    # Same names, shapes and dtypes, other values (a copy of another step): before the
    # sampled values were compared, both ranks loaded silently (issue 36, item 10).
    messages = [result["values"][form] for result in job]
    assert None not in messages, messages
    # The same verdict on both, naming both files (and the load, each its own copy).
    assert messages[0] == messages[1].replace("rank1/values", "rank0/values", 1), messages
    name = {"torch": "'model.v'", "get_slice": "\"'v'[slice(0, 4, None)]\""}.get(form, "'v'")
    assert f"read different values for tensor {name}" in messages[0]
    assert "shape (4, 6) of float32 on both" in messages[0]
    suffix = ".pt" if form == "torch" else ".safetensors"
    assert f"rank0/values{suffix}" in messages[0] and f"rank1/values{suffix}" in messages[0]
    assert "give every process the same checkpoint" in messages[0]


def test_a_difference_in_the_middle_row_or_the_last_element_is_seen(
    job: list[dict[str, Any]],
) -> None:
    for result in job:
        for name in ("row", "end"):
            assert f"read different values for tensor '{name}'" in result["values"][name]


def test_agreeing_processes_load_as_before(job: list[dict[str, Any]]) -> None:
    assert [result["agreed_sum"] for result in job] == [276.0, 276.0]


def test_a_load_one_process_makes_alone_asks_nobody(job: list[dict[str, Any]]) -> None:
    assert [result["alone"] for result in job] == [["w", "same"], ["w", "same"]]


@given(
    shape=st.lists(st.integers(0, 40), min_size=0, max_size=4).map(tuple),
)
def test_a_sample_is_three_short_runs_holding_the_first_middle_and_last_elements(
    shape: tuple[int, ...],
) -> None:
    # Oracle: the flat positions NumPy gives each window, on a tensor of its own positions.
    positions = np.arange(math.prod(shape)).reshape(shape)
    windows = sample_windows(shape)
    if positions.size == 0:
        assert windows == []
        return
    taken = [positions[window].reshape(-1) for window in windows]
    for run in taken:
        assert 1 <= run.size <= SAMPLE_ELEMENTS
        assert np.all(np.diff(run) == 1)  # contiguous: one small read each
    flat = np.concatenate(taken)
    middle_row = positions[shape[0] // 2].reshape(-1)[0] if shape else 0
    assert {0, positions.size - 1, int(middle_row)} <= set(flat.tolist())


@pytest.mark.parametrize(
    ("form", "cause"),
    [
        ("load_file", "absent.safetensors"),
        ("index", "nowhere.safetensors"),
        ("torch", "first.pt"),
    ],
)
def test_a_process_failing_before_the_comparison_fails_the_others_at_once(
    job: list[dict[str, Any]], form: str, cause: str
) -> None:
    # Rank 1's copy is missing, names a missing shard, or is truncated; rank 0's is fine.
    # Rank 0 used to wait the agreement's 600 s for rank 1's description, then blame a
    # "different call"; now rank 1 tells it, and rank 0 fails naming rank 1's error.
    mine, theirs = job[1]["failing_first"][form], job[0]["failing_first"][form]
    assert mine is not None and cause in mine, mine
    assert theirs is not None and theirs.startswith("CheckpointError: "), theirs
    assert "process 1 failed before the processes could compare this load" in theirs
    assert cause in theirs and "Fix what that process reports" in theirs
