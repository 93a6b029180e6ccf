"""Checkpoints loaded straight onto a mesh that spans 2 processes x 2 CPU devices.

One job (``tests/support/distributed/sharded_worker.py``, run by ``checkpoint_worker.py``
in the job test_checkpoints_agreement.py shares) loads the same tensors from a
safetensors file, a PyTorch checkpoint and a two-file index, onto a
``tj.ShardingRule``; safetensors' own NumPy loader is the oracle for the values, and
each process measures the bytes it reads for a sharded load against a whole one.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.distributed.launch import results
from tests.support.distributed.shared_jobs import BIG_COLUMNS as COLUMNS
from tests.support.distributed.shared_jobs import BIG_ROWS as ROWS
from tests.support.distributed.shared_jobs import checkpoint_job, sharded_tensors


@pytest.fixture(scope="module")
def job() -> list[dict[str, Any]]:
    status, out, err = checkpoint_job()
    assert status == 0, err[-4000:]
    found = results(out, "SHARDED ")
    assert [result["rank"] for result in found] == [0, 1], out[-3000:] + err[-3000:]
    return found


@pytest.mark.idiom("load-onto-mesh")
def test_every_value_equals_the_unsharded_load(job: list[dict[str, Any]]) -> None:
    for result in job:
        for form in ("sharded", "replicated", "safe_open", "window", "torch", "index"):
            assert result[f"{form}_equal"], form
        assert result["torch_step"] == 7


@pytest.mark.idiom("load-onto-mesh")
def test_no_device_holds_a_whole_tensor_meant_to_be_sharded(job: list[dict[str, Any]]) -> None:
    quarter = [[ROWS // 4, COLUMNS]] * 2  # this process's two devices, a quarter each
    for result in job:
        assert result["specs"] == {
            "big.bias": "P()", "big.weight": "P('data', None)", "columns": "P(None, 'data')",
            "step": "P()",
        }  # fmt: skip
        assert result["big_weight_shards"] == quarter
        assert result["torch_shards"] == quarter
        assert result["index_shards"] == quarter
        assert result["columns_shards"] == [[64, 8], [64, 8]]
        assert result["bias_shards"] == [[COLUMNS], [COLUMNS]]  # replicated: whole, by rule
        assert result["window_shards"] == [[2, COLUMNS], [2, COLUMNS]]


@pytest.mark.idiom("load-onto-mesh")
def test_each_process_reads_about_its_share(job: list[dict[str, Any]]) -> None:
    tensors = sharded_tensors()
    total = sum(array.nbytes for array in tensors.values())
    share = (tensors["big.weight"].nbytes / 2 + total - tensors["big.weight"].nbytes) / total
    for result in job:
        # A whole load reads every byte: the measure (rchar) sees the reader's reads.
        assert total <= result["whole_bytes"] < 1.1 * total, result
        ratio = result["sharded_bytes"] / result["whole_bytes"]
        assert ratio == pytest.approx(share, abs=0.05), (result["rank"], ratio, share)
