"""A trainer's moves on a mesh that spans 2 processes x 2 CPU devices.

One job (``tests/support/distributed/trainer_worker.py``) feeds batches through
``tj.DeviceLoader`` onto the mesh, saves the torch layout of a replicated and of a
split model, and loads a torch twin's checkpoint onto a replicated model. Oracles:
``make_global_batch`` of the same rows; the model's state before it was placed; the
file torch wrote.
"""

from __future__ import annotations

import functools
import tempfile
from typing import Any

import numpy as np
import pytest

from tests.support.deadlines import deadline
from tests.support.distributed.launch import SCRIPTS, launch, results
from tests.support.optional_frameworks import needs

LIMIT_S = deadline(60)  # JAX timeout inside the job, grown with the load


@functools.cache
def _job() -> tuple[int, str, str]:
    with tempfile.TemporaryDirectory(prefix="trainer-job-") as folder:
        return launch(
            "--nproc-per-node", "2", "--cpu-devices", "2", str(SCRIPTS / "trainer_worker.py"),
            folder, str(LIMIT_S),
        )  # fmt: skip


@pytest.fixture(scope="module")
def job() -> list[dict[str, Any]]:
    needs("torch")  # the ranks save and load torch's checkpoints
    status, out, err = _job()
    assert status == 0, out[-3000:] + err[-4000:]
    return results(out, "TRAINER ", count=2)


def test_a_device_loader_builds_the_global_batch_from_each_process_rows(
    job: list[dict[str, Any]],
) -> None:
    rows = np.arange(24, dtype=np.float32).reshape(-1, 3)
    expected = np.concatenate([rows[0::2], rows[1::2]]).tolist()  # rank 0's rows, then 1's
    for result in job:
        feeding = result["feeding"]
        assert feeding["oracle"]["values"] == expected
        for way in ("loader", "pinned"):
            assert feeding[way] == feeding["oracle"], (way, feeding[way])
            assert feeding[way]["shape"] == [8, 3]
            assert feeding[way]["name"] == "first"  # not an array: as it was
        assert feeding["prefetch"] == expected


def test_the_torch_layout_of_a_model_over_processes(job: list[dict[str, Any]]) -> None:
    for result in job:
        saving = result["saving"]
        for placed in ("replicated", "split"):
            assert "error" not in saving[placed], saving[placed]
            assert saving[placed]["names"] == saving["reference_names"]
            assert all(saving[placed]["equal"].values()), saving[placed]


def test_a_torch_checkpoint_loads_onto_a_replicated_model(job: list[dict[str, Any]]) -> None:
    for result in job:
        ddp = result["loading"]["ddp"]
        assert "error" not in ddp, ddp
        assert ddp["equal"] and all(ddp["equal"].values()), ddp
        assert ddp["specs"] == ["P()"]
        assert ddp["addressable"] is False  # still over both processes' devices
