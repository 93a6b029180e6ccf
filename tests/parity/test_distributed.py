"""torch.distributed and tj.distributed side by side, 2 processes each, on the CPU.

The same job (``tests/support/distributed``) runs with torch (gloo) and then with
torch2jax_device in the same two workers under torchrun (``torchrun_worker.py``), and
with torch2jax_device under ``torch2jax-device run``; the torch run is the oracle. The
in-process tests compare what each raises before a process group exists.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed

from tests.support.distributed.launch import launch, results, torchrun
from tests.support.distributed.shared_jobs import torch_first_job
from torch2jax_device import distributed as dist

from .harness import assert_same_outcome, run

NPROC = 2


@pytest.fixture(scope="module")
def torchrun_output() -> str:
    """torch's job, then the port, then torch's store outliving rank 0, under one torchrun."""
    return torchrun("torchrun_worker.py", nproc=NPROC)


@pytest.fixture(scope="module")
def torch_job(torchrun_output: str) -> list[dict[str, Any]]:
    return results(torchrun_output, "TORCH ", count=NPROC)


@pytest.fixture(scope="module")
def tj_job(torchrun_output: str) -> list[dict[str, Any]]:
    return results(torchrun_output, "TJ ", count=NPROC)


@pytest.fixture(scope="module")
def tj_job_own_launcher() -> list[dict[str, Any]]:
    status, out, err = launch(
        "--nproc-per-node", str(NPROC), "--cpu-devices", "1",
        "tests/support/distributed/tj_worker.py",
    )  # fmt: skip
    assert status == 0, err[-4000:]
    found = results(out)
    assert len(found) == NPROC, out[-4000:] + err[-4000:]
    return found


def _field(job: list[dict[str, Any]], name: str) -> list[Any]:
    return [result[name] for result in job]


@pytest.mark.idiom("dist-init-process-group")
def test_every_rank_joins_with_the_same_rank_and_world_size(
    torch_job: list[dict[str, Any]], tj_job: list[dict[str, Any]]
) -> None:
    for name in ("rank", "world_size"):
        assert _field(tj_job, name) == _field(torch_job, name)
    assert [r["jax"]["process_index"] for r in tj_job] == _field(torch_job, "rank")
    assert [r["jax"]["process_count"] for r in tj_job] == _field(torch_job, "world_size")


@pytest.mark.idiom("dist-local-rank")
def test_local_rank_matches(torch_job: list[dict[str, Any]], tj_job: list[dict[str, Any]]) -> None:
    assert _field(tj_job, "local_rank") == _field(torch_job, "local_rank")
    # One process per GPU: each owns the GPU its LOCAL_RANK names (cuda:{LOCAL_RANK}).
    assert [r["jax"]["cuda_visible_devices"] for r in tj_job] == [
        str(local_rank) for local_rank in _field(torch_job, "local_rank")
    ]


@pytest.mark.idiom("dist-all-reduce")
@pytest.mark.parametrize("op", ["sum", "max", "min", "product"])
def test_all_reduce_gives_every_rank_torchs_result(
    torch_job: list[dict[str, Any]], tj_job: list[dict[str, Any]], op: str
) -> None:
    for torch_result, tj_result in zip(torch_job, tj_job, strict=True):
        expected, got = torch_result["reductions"][op], tj_result["reductions"][op]
        assert got["int"] == expected["int"]
        np.testing.assert_allclose(got["float"], expected["float"], rtol=1e-6)


@pytest.mark.idiom("dist-all-reduce-mean")
def test_metric_mean_matches_sum_then_divide(
    torch_job: list[dict[str, Any]], tj_job: list[dict[str, Any]]
) -> None:
    for torch_result, tj_result in zip(torch_job, tj_job, strict=True):
        for kind in ("float", "int"):
            np.testing.assert_allclose(
                tj_result["reductions"]["mean"][kind],
                torch_result["reductions"]["mean"][kind],
                rtol=1e-6,
            )
    assert [r["jax"]["reduced_device"] for r in tj_job] == [
        r["jax"]["first_local_device"] for r in tj_job
    ]


@pytest.mark.idiom("dist-sampler-global-batch")
def test_global_batch_is_every_ranks_shard_in_rank_order(
    torch_job: list[dict[str, Any]], tj_job: list[dict[str, Any]]
) -> None:
    for torch_result, tj_result in zip(torch_job, tj_job, strict=True):
        assert tj_result["global_inputs"] == torch_result["global_inputs"]
        assert tj_result["jax"]["batch_spec"] == "P('data',)"


@pytest.mark.idiom("dist-ddp-gradient")
def test_ddp_averaged_gradient_matches(
    torch_job: list[dict[str, Any]], tj_job: list[dict[str, Any]]
) -> None:
    for torch_result, tj_result in zip(torch_job, tj_job, strict=True):
        for name in ("grad_weight", "grad_bias"):
            np.testing.assert_allclose(tj_result[name], torch_result[name], rtol=1e-5, atol=1e-6)
        assert tj_result["jax"]["grad_sharding_replicated"]


@pytest.mark.idiom("dist-device-mesh")
def test_device_mesh_shape_and_names_match(
    torch_job: list[dict[str, Any]], tj_job: list[dict[str, Any]]
) -> None:
    for name in ("mesh_shape", "mesh_dim_names"):
        assert _field(tj_job, name) == _field(torch_job, name)


@pytest.mark.idiom("dist-barrier")
def test_barrier_holds_the_early_rank_back(
    torch_job: list[dict[str, Any]], tj_job: list[dict[str, Any]]
) -> None:
    assert _field(tj_job, "waited_at_barrier") == _field(torch_job, "waited_at_barrier")
    assert _field(torch_job, "waited_at_barrier") == [True, False]


@pytest.mark.idiom("dist-destroy")
def test_destroy_leaves_the_group(
    torch_job: list[dict[str, Any]], tj_job: list[dict[str, Any]]
) -> None:
    assert _field(tj_job, "initialized_after_destroy") == _field(
        torch_job, "initialized_after_destroy"
    )


@pytest.mark.idiom("dist-launch")
def test_own_launcher_runs_the_job_like_torchrun(
    torch_job: list[dict[str, Any]], tj_job_own_launcher: list[dict[str, Any]]
) -> None:
    for name in ("rank", "world_size", "local_rank", "global_inputs"):
        assert _field(tj_job_own_launcher, name) == _field(torch_job, name)
    for torch_result, tj_result in zip(torch_job, tj_job_own_launcher, strict=True):
        assert tj_result["reductions"]["sum"]["int"] == torch_result["reductions"]["sum"]["int"]
        np.testing.assert_allclose(tj_result["grad_weight"], torch_result["grad_weight"], rtol=1e-5)


@pytest.mark.idiom("dist-launch")
def test_own_launcher_hosts_torchs_store_as_torchrun_does(torchrun_output: str) -> None:
    """Workers' torch store is the launcher's, so no rank depends on rank 0 outliving it
    (a store hosted by rank 0 makes gloo jobs abort now and then at exit)."""
    status, out, err = torch_first_job()  # its workers check the store after their job
    assert status == 0, err[-4000:]
    ours = results(out, "STORE ", count=NPROC)
    theirs = results(torchrun_output, "STORE ", count=NPROC)
    assert ours == theirs
    assert theirs[1] == {
        "rank": 1, "agent_store": "True", "rank0_gone": True, "read_after_rank0": "still here"
    }  # fmt: skip


@pytest.mark.idiom("dist-not-initialized")
@pytest.mark.parametrize("call", ["get_rank", "get_world_size", "barrier", "all_reduce"])
def test_process_group_calls_before_init_fail_alike(call: str) -> None:
    torch_calls = {
        "get_rank": torch.distributed.get_rank,
        "get_world_size": torch.distributed.get_world_size,
        "barrier": torch.distributed.barrier,
        "all_reduce": lambda: torch.distributed.all_reduce(torch.ones(2)),
    }
    tj_calls = {
        "get_rank": dist.get_rank,
        "get_world_size": dist.get_world_size,
        "barrier": dist.barrier,
        "all_reduce": lambda: dist.all_reduce(np.ones(2)),
    }
    torch_outcome, tj_outcome = run(torch_calls[call]), run(tj_calls[call])
    assert_same_outcome(torch_outcome, tj_outcome)
    assert "has not been initialized" in str(tj_outcome.error)


@pytest.mark.idiom("dist-init-process-group")
@pytest.mark.parametrize(
    ("kwargs", "environment", "message"),
    [
        ({"backend": "gloo"}, {}, "environment variable RANK expected"),
        ({"backend": "gloo", "rank": 0, "world_size": 2}, {}, "MASTER_ADDR expected"),
        ({"init_method": "tcp://127.0.0.1:29511"}, {}, "rank parameter missing"),
        ({"init_method": "tcp://127.0.0.1:29511", "rank": 0}, {}, "world size parameter missing"),
        ({}, {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}, "MASTER_PORT expected"),
    ],
)
def test_init_process_group_rejects_incomplete_settings_alike(
    kwargs: dict[str, Any],
    environment: dict[str, str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    torch_outcome = run(lambda: torch.distributed.init_process_group(**kwargs))
    tj_outcome = run(lambda: dist.init_process_group(**kwargs))
    assert_same_outcome(torch_outcome, tj_outcome)
    assert message in str(tj_outcome.error)
    assert not dist.is_initialized()
