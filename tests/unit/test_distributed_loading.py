"""Checkpoints loaded straight onto a mesh that spans 2 processes x 2 CPU devices.

One job (``tests/support/distributed/sharded_worker.py``) loads the same tensors from
a safetensors file, a PyTorch checkpoint and a two-file index, onto a
``tj.ShardingRule``; safetensors' own NumPy loader is the oracle for the values, and
each process measures the bytes it reads for a sharded load against a whole one.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch

import torch2jax_device as tj
from tests.support.distributed.launch import launch, results

WORKER = "tests/support/distributed/sharded_worker.py"
LIMIT_S = 60  # JAX timeout inside the job: generous, the machine may be busy
ROWS, COLUMNS = 2048, 2048  # big.weight: 16 MiB of float32, split by rows over 4 devices


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "big.weight": rng.standard_normal((ROWS, COLUMNS), np.float32),
        "big.bias": rng.standard_normal(COLUMNS, np.float32),
        "columns": rng.standard_normal((64, 32), np.float32),
        "step": np.array(3, np.int32),
    }


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("sharded")
    tensors = _tensors()
    tj.save_file(tensors, folder / "model.safetensors")
    tj.save_file({"warm.weight": np.ones((8, 4), np.float32)}, folder / "warm-up.safetensors")
    torch.save(
        {"model": {name: torch.from_numpy(array) for name, array in tensors.items()}, "step": 7},
        folder / "model.pt",
    )
    split = folder / "split"
    split.mkdir()
    tj.save_file({"big.weight": tensors["big.weight"]}, split / "part-1.safetensors")
    rest = {name: array for name, array in tensors.items() if name != "big.weight"}
    tj.save_file(rest, split / "part-2.safetensors")
    weight_map = {"big.weight": "part-1.safetensors", **dict.fromkeys(rest, "part-2.safetensors")}
    (split / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    status, out, err = launch(
        "--nproc-per-node", "2", "--cpu-devices", "2", WORKER, str(folder), str(LIMIT_S)
    )  # fmt: skip
    assert status == 0, err[-4000:]
    found = results(out)
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
    total = sum(array.nbytes for array in _tensors().values())
    share = (_tensors()["big.weight"].nbytes / 2 + total - _tensors()["big.weight"].nbytes) / total
    for result in job:
        # A whole load reads every byte: the measure (rchar) sees the reader's reads.
        assert total <= result["whole_bytes"] < 1.1 * total, result
        ratio = result["sharded_bytes"] / result["whole_bytes"]
        assert ratio == pytest.approx(share, abs=0.05), (result["rank"], ratio, share)
