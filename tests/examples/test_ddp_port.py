"""examples/ddp_port.py trains under torchrun and under ``torch2jax-device run`` alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.deadlines import deadline
from tests.support.distributed.launch import TORCHRUN, launch, results, run_bounded, worker_env
from tests.support.examples import EXAMPLES, example_env, example_environment
from tests.support.optional_frameworks import needs

EXAMPLE = EXAMPLES / "ddp_port.py"
EPOCHS = 4  # the script's default is 10; 4 already take the loss below a quarter


def _check_training(summaries: list[dict[str, Any]], output: str) -> None:
    assert [s["rank"] for s in summaries] == [0, 1], output[-3000:]
    assert [s["local_rank"] for s in summaries] == [0, 1]
    first = summaries[0]
    assert (first["world_size"], first["devices"]) == (2, 2)
    assert first["samples_seen"] == EPOCHS * 512  # every epoch covers the dataset, both shards
    assert first["validation_loss"] < first["first_loss"] / 4
    # Every rank ends with the same model: the replicas stayed in sync.
    assert {json.dumps({k: v for k, v in s.items() if "rank" not in k}) for s in summaries} == {
        json.dumps({k: v for k, v in first.items() if "rank" not in k})
    }
    assert output.count(f"epoch {EPOCHS - 1}: train loss") == 1  # printed by rank 0 only


def test_example_trains_under_torchrun_and_the_own_launcher_identically(tmp_path: Path) -> None:
    needs("torch")  # torchrun is torch's command
    # Both jobs compile the same programs: the second reads them from this cache.
    cache = {"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax-cache"),
             "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}  # fmt: skip
    status, out, err = run_bounded(
        [str(TORCHRUN), "--nproc_per_node=2", str(EXAMPLE), "--epochs", str(EPOCHS)],
        env=example_env(worker_env(OMP_NUM_THREADS="1", **cache)), timeout=deadline(180),
    )  # fmt: skip
    assert status == 0, err[-3000:]
    under_torchrun = results(out, "summary: ")
    _check_training(under_torchrun, out)

    with example_environment(**cache):
        status, out, err = launch(
            "--nproc-per-node", "2", "--cpu-devices", "1", str(EXAMPLE), "--epochs", str(EPOCHS)
        )
    assert status == 0, err[-3000:]
    under_own_launcher = results(out, "summary: ")
    _check_training(under_own_launcher, out)
    assert under_own_launcher == under_torchrun
