"""Processes that load a checkpoint together must agree on it, or all fail together.

One job of 2 processes x 2 CPU devices (``tests/support/distributed/mismatch_worker.py``,
run by ``checkpoint_worker.py`` in the job test_distributed_loading.py shares) where
each rank loads its own copy of a checkpoint onto one mesh, and the copies differ: ``w``
is (4, 6) on rank 0 and (8, 6) on rank 1. Without the check each rank built its parts
from its own shape and a jitted sum returned a number on both.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.distributed.launch import results
from tests.support.distributed.shared_jobs import checkpoint_job


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


def test_agreeing_processes_load_as_before(job: list[dict[str, Any]]) -> None:
    assert [result["agreed_sum"] for result in job] == [276.0, 276.0]


def test_a_load_one_process_makes_alone_asks_nobody(job: list[dict[str, Any]]) -> None:
    assert [result["alone"] for result in job] == [["w", "same"], ["w", "same"]]
