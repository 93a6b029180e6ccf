"""tj.distributed and ``torch2jax-device run``: settings, meshes, batches and failures.

The in-process tests never join a job: JAX is started first, so a call that passes
validation stops at the "backends already running" check. The multi-process tests
run real jobs on 127.0.0.1 with JAX timeouts of a few seconds, each under a
subprocess timeout, and pin what happens when a rank is missing, dies or hangs. Ranks
started by hand are processes forked after scenario.py's imports (``forking.py``), so
each pays for its job, not for importing JAX again.
"""

from __future__ import annotations

import datetime
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

from tests.support.deadlines import deadline
from tests.support.distributed.launch import (
    SCRIPTS,
    SHORT_TIMEOUT_S,
    free_port,
    launch,
    rank_env,
    results,
    worker_env,
)
from tests.support.distributed.shared_jobs import torch_first_job
from tests.support.forking import Forked, ForkServer
from tests.support.gpu_proxy import several_cpu_devices
from tests.support.optional_frameworks import needs
from torch2jax_device import DeviceUnavailableError, EmptyTreeError, InvalidDeviceError
from torch2jax_device import distributed as dist
from torch2jax_device._src.distributed.rendezvous import Rendezvous, local_device_ids, parse

SCENARIO = "tests/support/distributed/scenario.py"
STARTUP = "tests/support/distributed/startup_order.py"
LAUNCHER_VARIABLES = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_USE_AGENT_STORE", "JAX_COORDINATOR_PORT", "JAX_LOCAL_DEVICE_IDS",
    "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
)  # fmt: skip
# A process started by hand gets this long (JAX's timeout plus start-up) to finish.
PROCESS_LIMIT_S = deadline(60)


@pytest.fixture(autouse=True)
def _clean_launch_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No launcher variables leak in, and JAX is already running in this process."""
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    jax.devices()
    yield
    assert not dist.is_initialized()


def _torchrun_environment(monkeypatch: pytest.MonkeyPatch, **overrides: str) -> None:
    values = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
              "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", **overrides}  # fmt: skip
    for name, value in values.items():
        monkeypatch.setenv(name, value)


def _environment(**values: str) -> dict[str, str]:
    return {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
            **values}  # fmt: skip


# --- reading the job description -------------------------------------------------------


def test_env_rendezvous_reads_torchruns_variables() -> None:
    environ = _environment(LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
    assert parse(None, -1, -1, environ) == Rendezvous(
        host="127.0.0.1", port=29500, port_source="MASTER_PORT", rank=1, world_size=2,
        local_rank=1, local_world_size=2,
    )  # fmt: skip


def test_under_torchrun_the_coordinator_takes_the_port_after_torchruns_store() -> None:
    environ = _environment(TORCHELASTIC_USE_AGENT_STORE="True")
    rendezvous = parse("env://", -1, -1, environ)
    assert (rendezvous.port, rendezvous.coordinator_address) == (29501, "127.0.0.1:29501")
    assert "torchrun's own store" in rendezvous.port_source
    overridden = parse(None, -1, -1, {**environ, "JAX_COORDINATOR_PORT": "31000"})
    assert (overridden.port, overridden.port_source) == (31000, "JAX_COORDINATOR_PORT")


def test_tcp_rendezvous_takes_rank_and_world_size_from_arguments_or_query() -> None:
    from_arguments = parse("tcp://[::1]:29600", 2, 1, {})
    assert from_arguments.coordinator_address == "[::1]:29600"
    assert (from_arguments.rank, from_arguments.world_size) == (1, 2)
    from_query = parse("tcp://10.0.0.7:29600?rank=3&world_size=4", -1, -1, {})
    assert (from_query.host, from_query.rank, from_query.world_size) == ("10.0.0.7", 3, 4)
    assert from_query.local_rank is None


@pytest.mark.parametrize(
    ("init_method", "environ", "message"),
    [
        (None, _environment(RANK="one"), r"'one' \(RANK\) is not an integer"),
        (None, _environment(MASTER_PORT="http"), r"'http' \(MASTER_PORT\) is not an integer"),
        (None, _environment(MASTER_PORT="70000"), r"Port 70000 \(MASTER_PORT\) is not a TCP"),
        (None, _environment(WORLD_SIZE="0"), "WORLD_SIZE .* must be at least 1, got 0"),
        (None, _environment(RANK="2"), r"RANK \(rank\) must be in \[0, 1\] .* got 2"),
        (None, _environment(LOCAL_RANK="2", LOCAL_WORLD_SIZE="2"), "LOCAL_RANK=2 must be below"),
        (None, _environment(LOCAL_WORLD_SIZE="3"), "LOCAL_WORLD_SIZE=3 is larger than WORLD_SIZE"),
        (None, _environment(LOCAL_WORLD_SIZE="1"), "MASTER_ADDR=127.0.0.1 is a loopback address"),
        ("file:///tmp/rendezvous", _environment(), "'file:///tmp/rendezvous' is not supported"),
        ("tcp://10.0.0.7?rank=0&world_size=2", {}, "must name the coordinator as 'tcp://HOST:P"),
        ("tcp://10.0.0.7:port?rank=0&world_size=2", {}, "'tcp://10.0.0.7:port.*': Port could"),
    ],
)
def test_bad_job_descriptions_raise_with_the_offending_value(
    init_method: str | None, environ: dict[str, str], message: str
) -> None:
    with pytest.raises(dist.DistributedError, match=message):
        parse(init_method, -1, -1, environ)


# --- which GPUs a process owns ----------------------------------------------------------


def _job(local_rank: int | None, local_world_size: int | None) -> Rendezvous:
    return Rendezvous("127.0.0.1", 29500, "MASTER_PORT", 1, 2, local_rank, local_world_size)


@pytest.mark.parametrize(
    ("job", "device_id", "environ", "expected"),
    [
        (_job(1, 2), None, {}, [1]),  # one process per GPU: the one cuda:{LOCAL_RANK} names
        (_job(1, None), None, {}, [1]),
        (_job(0, 1), None, {}, None),  # one process per host owns all its GPUs
        (_job(None, None), None, {}, None),
        (_job(1, 2), None, {"JAX_LOCAL_DEVICE_IDS": "3"}, None),  # JAX applies its own
        (_job(1, 2), None, {"CUDA_VISIBLE_DEVICES": "5"}, None),  # the launcher split them
        (_job(1, 2), None, {"CUDA_VISIBLE_DEVICES": "4,5"}, [1]),
        (_job(1, 2), "cuda:3", {}, [3]),
        (_job(1, 2), 2, {}, [2]),
        (_job(1, 2), "cpu", {}, None),
    ],
)
def test_local_device_ids_give_each_process_its_gpu(
    job: Rendezvous, device_id: Any, environ: dict[str, str], expected: list[int] | None
) -> None:
    assert local_device_ids(job, device_id, environ) == expected


@pytest.mark.parametrize(
    ("device_id", "error", "message"),
    [
        ("cuda", dist.DistributedError, "must name one GPU with its index"),
        ("mps:0", dist.DistributedError, "must name one GPU with its index"),
        (-1, dist.DistributedError, "must not be negative"),
        (1.5, dist.DistributedError, "not float"),
        ("cuda:01", InvalidDeviceError, "Invalid device string"),
    ],
)
def test_bad_device_id_raises(device_id: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        local_device_ids(_job(0, 2), device_id, {})


# --- init_process_group's own checks ------------------------------------------------------


def test_init_after_jax_started_says_to_call_it_first(monkeypatch: pytest.MonkeyPatch) -> None:
    _torchrun_environment(monkeypatch)
    with pytest.raises(dist.DistributedError, match="must run before JAX starts its backends"):
        dist.init_process_group(backend="nccl")


@pytest.mark.parametrize("backend", ["gloo", "nccl", "cpu:gloo,cuda:nccl", None])
def test_torch_backend_names_are_accepted(
    backend: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _torchrun_environment(monkeypatch)
    with pytest.raises(dist.DistributedError, match="before JAX starts"):
        dist.init_process_group(backend=backend)


@pytest.mark.parametrize("backend", ["mpi", "ucc", "cuda:foo", ""])
def test_other_backends_are_rejected(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _torchrun_environment(monkeypatch)
    with pytest.raises(dist.DistributedError, match=f"backend {backend!r} is not supported"):
        dist.init_process_group(backend=backend)


@pytest.mark.parametrize(
    ("timeout", "message"),
    [
        ("10", "timeout must be a datetime.timedelta or a number of seconds, not str"),
        (datetime.timedelta(0), "timeout must be positive and finite, got 0.0 s"),
        (float("inf"), "timeout must be positive and finite"),
    ],
)
def test_bad_timeouts_are_rejected(
    timeout: Any, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _torchrun_environment(monkeypatch)
    with pytest.raises(dist.DistributedError, match=message):
        dist.init_process_group(timeout=timeout)


def test_local_rank_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(dist.DistributedError, match="LOCAL_RANK is not in the environment"):
        dist.get_local_rank()
    monkeypatch.setenv("LOCAL_RANK", "x")
    with pytest.raises(dist.DistributedError, match="LOCAL_RANK='x' is not an integer"):
        dist.get_local_rank()
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert dist.get_local_rank() == 3


def test_destroy_before_init_raises() -> None:
    with pytest.raises(dist.DistributedError, match=r"destroy_process_group\(\): Default process"):
        dist.destroy_process_group()


# --- meshes and global batches in one process -------------------------------------------


def test_device_mesh_holds_this_process_devices_without_a_launcher() -> None:
    mesh = dist.init_device_mesh("cpu", (len(jax.devices("cpu")),))
    assert mesh.axis_names == ("dim_0",)
    assert list(mesh.devices.flat) == jax.devices("cpu")


@pytest.mark.parametrize(
    ("device_type", "shape", "names", "message"),
    [
        ("cpu:0", (1,), None, "Device type with index is not supported but got 'cpu:0'"),
        ("cpu", (2, 3), None, r"Mesh shape \(2, 3\) holds 6 devices, but this job has"),
        ("cpu", 1, None, "mesh_shape must be a tuple of ints"),
        ("cpu", (0,), None, "non-empty tuple of positive ints"),
        ("cpu", (1,), ("a", "b"), "must be 1 distinct strings"),
    ],
)
def test_bad_meshes_raise(device_type: str, shape: Any, names: Any, message: str) -> None:
    with pytest.raises(dist.DistributedError, match=message):
        dist.init_device_mesh(device_type, shape, mesh_dim_names=names)


def test_device_mesh_on_a_missing_platform_says_how_to_get_it() -> None:
    with pytest.raises(DeviceUnavailableError, match="jax-metal"):
        dist.init_device_mesh("mps", (1,))


def test_global_batch_in_one_process_is_the_local_batch_sharded_over_the_mesh() -> None:
    if several_cpu_devices():
        pytest.skip("one CPU device: a mesh holds every device of the job")
    mesh = dist.init_device_mesh("cpu", (1,), mesh_dim_names=("data",))
    local = {"x": np.arange(6, dtype=np.int64).reshape(3, 2), "step": 4}
    batch = dist.make_global_batch(local, mesh)
    assert batch["x"].sharding == jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec("data")
    )
    assert batch["step"].sharding.is_fully_replicated
    assert (batch["x"].dtype, batch["x"].shape) == (np.dtype("int32"), (3, 2))
    np.testing.assert_array_equal(np.asarray(batch["x"]), local["x"])
    assert int(batch["step"]) == 4


def test_global_batch_errors() -> None:
    if several_cpu_devices():
        pytest.skip("one CPU device: a mesh holds every device of the job")
    mesh = dist.init_device_mesh("cpu", (1,), mesh_dim_names=("data",))
    with pytest.raises(EmptyTreeError, match="the local batch holds no arrays"):
        dist.make_global_batch({}, mesh)
    with pytest.raises(dist.DistributedError, match="axis 'model' is not an axis of the mesh"):
        dist.make_global_batch(np.ones(2), mesh, axis="model")


# --- real jobs ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mesh_job() -> tuple[int, str, str]:
    """2 processes x 2 CPU devices: the several-devices mode, then the placement mode."""
    return launch(
        "--nproc-per-node", "2", "--cpu-devices", "2", SCENARIO, "several-devices,placement", "30"
    )  # fmt: skip


def _mode(out: str, mode: str) -> list[dict[str, Any]]:
    """The results ``mode`` reported, one per rank."""
    return [result for result in results(out) if result["mode"] == mode]


def test_launcher_runs_processes_that_own_several_devices(mesh_job: tuple[int, str, str]) -> None:
    status, out, err = mesh_job
    assert status == 0, err[-3000:]
    job = _mode(out, "several-devices")
    assert [result["rank"] for result in job] == [0, 1]
    for result in job:
        assert (result["local_devices"], result["mesh_shape"]) == (2, [4])
        assert (result["batch_shape"], result["step"]) == ([8, 2], 7)
        assert (result["rank_sum"], result["rows_sum"]) == (1, [424.0, 432.0])
        assert result["odd_batch_error"].startswith("ConversionError: make_global_batch: leaf")
        assert "unknown op 'median'" in result["unknown_op_error"]
        assert result["traced_error"].startswith("DistributedError: all_reduce: leaf <root> is")
    # Each process holds its own rows of the global batch, in rank order.
    assert [result["batch_local_rows"] for result in job] == [[0, 2], [4, 6]]
    assert "[rank0]: RESULT" in out and "[rank1]: RESULT" in out


@pytest.mark.idiom("dist-ddp-replicate")
def test_placed_arrays_replicate_over_a_mesh_of_two_processes_and_come_back(
    mesh_job: tuple[int, str, str],
) -> None:
    status, out, err = mesh_job
    assert status == 0, err[-3000:]
    job = _mode(out, "placement")
    assert [result["rank"] for result in job] == [0, 1]
    whole = [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]
    for rank, result in enumerate(job):
        assert (result["ddp_spec"], result["ddp_spans_processes"]) == ("P()", True)
        assert result["ddp_local"] == [whole, whole]  # a whole replica on each device
        mine = whole[2 * rank : 2 * rank + 2]  # this process's half, one row per device
        assert result["split_local"] == result["numpy_local"] == [[row] for row in mine]
        assert (result["module_in_place"], result["module_spec"]) == (True, "P()")
        assert result["gathered"] == {"b": [1.0, 1.0, 1.0], "w": whole}
        assert result["gathered_split"] == whole
        assert result["copied"] == [2.0, 2.0, 2.0]
        assert result["uneven_error"].startswith(
            "ConversionError: leaf ['odd'] of shape (6,) cannot be placed on NamedSharding"
        )
        assert "Fix: pick a PartitionSpec whose mesh axes divide" in result["uneven_error"]
    assert job[0]["gathered_device"] == "cpu:0"


@pytest.mark.idiom("dist-gather-to-host")
def test_gathering_a_split_array_alone_raises_instead_of_hanging() -> None:
    _, out, err = launch(
        "--nproc-per-node", "2", "--cpu-devices", "2", SCENARIO, "gather-alone",
        str(SHORT_TIMEOUT_S),
    )  # fmt: skip
    (result,) = results(out)
    # call #0 is the split itself: every rank compares the value it splits.
    assert result["error"].startswith(
        "DistributedError: to_device() on rank 0 (call #1) failed waiting for the other ranks"
    ), err[-3000:]


def test_one_process_lifecycle_and_its_errors() -> None:
    status, out, err = launch("--nproc-per-node", "1", SCENARIO, "lifecycle", "30")
    assert status == 0, err[-3000:]
    (result,) = results(out)
    assert (result["rank"], result["world_size"], result["process_count"]) == (0, 1, 1)
    assert "initialize the default process group twice" in result["twice_error"]
    assert result["initialized_after_destroy"] is False
    assert (
        "get_rank(): Default process group has not been initialized"
        in (result["rank_after_destroy_error"])
    )
    assert "cannot join another job" in result["again_error"]


@pytest.mark.idiom("dist-startup-order")
def test_availability_queries_before_init_process_group_join_the_job() -> None:
    status, out, err = launch(
        "--nproc-per-node", "2", "--cpu-devices", "1", STARTUP, "query-first", "30"
    )  # fmt: skip
    assert status == 0, err[-3000:]
    job = results(out)
    for result in job:
        assert (result["available"], result["count"]) == (False, 0)  # a CPU-only host
        # Joined (2 processes), but not initialized until the script's own call, as in
        # torch: `if not is_initialized(): init_process_group(timeout=...)` still runs.
        assert (result["initialized_after_the_query"], result["initialized_after_init"]) == (
            False,
            True,
        )
        assert (result["process_count"], result["total"]) == (2, 3)
        assert result["other_job_error"].startswith(
            "DistributedError: This process already joined its job when is_available() "
            "(called at startup_order.py:"
        )
        rank = result["rank"]
        assert (
            f"asks for rank {rank} of 2 at 127.0.0.1:1, devices [{rank}]"
            in (result["other_job_error"])
        )
        assert "initialize the default process group twice" in result["twice_error"]


def test_availability_queries_leave_a_torch_distributed_job_alone() -> None:
    needs("torch")  # the ranks import torch.distributed
    status, out, err = torch_first_job()  # startup_order.py torch-first, 2 processes
    assert status == 0, err[-3000:]
    for result in results(out, count=2):
        assert result["available"] is False
        assert (result["tj_initialized"], result["jax_distributed"]) == (False, False)
        # A mixed codebase asking tj for the rank is told whose job it is.
        assert "torch.distributed runs this job" in result["tj_rank_error"]
        assert result["process_count"] == 1


@pytest.fixture(scope="module")
def forks() -> Iterator[ForkServer]:
    """Starts ranks by hand (no launcher): each a process forked after scenario.py's imports."""
    server = ForkServer(worker_env(), ("scenario",), SCRIPTS)
    yield server
    server.close()


def _rank(forks: ForkServer, mode: str, env: dict[str, str]) -> Forked:
    """A rank started by hand: ``scenario.py MODE`` with JAX's short timeout."""
    return forks.start("scenario.py", mode, str(SHORT_TIMEOUT_S), env=env)


def _finish(process: Forked) -> tuple[int, str, float]:
    """Exit status, stderr and seconds taken (held against ``deadline``: a hang detector)."""
    began = time.monotonic()
    try:
        _, err = process.communicate(timeout=PROCESS_LIMIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"a worker ran past {PROCESS_LIMIT_S} s: JAX's timeout did not end it")
    assert process.returncode is not None
    return process.returncode, err, time.monotonic() - began


def test_rank_without_a_coordinator_fails_with_a_clear_error_in_time(forks: ForkServer) -> None:
    rank_1 = _rank(forks, "init-only", rank_env(1, 2, free_port()))
    status, err, elapsed = _finish(rank_1)
    assert status == 1
    assert "DistributedError: Rank 1 could not reach JAX's coordinator at 127.0.0.1:" in err
    assert f"within {SHORT_TIMEOUT_S} s" in err
    assert elapsed < deadline(SHORT_TIMEOUT_S + 20)  # JAX's short timeout, not its default


def test_busy_coordinator_port_is_a_clear_error(forks: ForkServer) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        rank_0 = _rank(forks, "init-only", rank_env(0, 2, port))
        status, err, _ = _finish(rank_0)
    assert status == 1
    assert f"DistributedError: Port {port} (MASTER_PORT) cannot be used on this host" in err


def test_ranks_that_disagree_on_the_world_size_get_a_clear_error(forks: ForkServer) -> None:
    port = free_port()
    rank_0 = _rank(forks, "init-only", rank_env(0, 2, port))
    rank_1 = _rank(forks, "init-only", rank_env(1, 3, port))
    (status_0, err_0, _), (status_1, err_1, _) = _finish(rank_0), _finish(rank_1)
    assert (status_0, status_1) == (1, 1)
    assert (
        "DistributedError: Rank 1: WORLD_SIZE=3 on rank 1, but rank 0 started the job with "
        "WORLD_SIZE=2" in err_1
    )
    # Rank 0 waited for a rank 1 of its own job, and says who came instead.
    assert "DistributedError: Rank 1 of WORLD_SIZE=2 never arrived" in err_0
    assert "A process claiming rank 1 came from" in err_0 and "with WORLD_SIZE=3" in err_0


def test_two_processes_with_one_rank_get_a_clear_error(forks: ForkServer) -> None:
    # A job of 3 where two processes claim rank 1 and none rank 2.
    port = free_port()
    rank_0 = _rank(forks, "init-only", rank_env(0, 3, port))
    claims = [_rank(forks, "init-only", rank_env(1, 3, port)) for _ in range(2)]
    (status_0, err_0, _), *outcomes = map(_finish, [rank_0, *claims])
    refused = [err for _, err, _ in outcomes if "already checked in from" in err]
    accepted = [err for _, err, _ in outcomes if "already checked in from" not in err]
    assert len(refused) == len(accepted) == 1  # whichever came second is refused at once
    assert "DistributedError: Rank 1: Rank 1 (" in refused[0]
    assert "Fix: give every process a different RANK" in refused[0]
    assert status_0 == 1 and all(status == 1 for status, _, _ in outcomes)
    for err in (err_0, accepted[0]):
        assert "Rank 2 of WORLD_SIZE=3 never arrived" in err and "ranks 0, 1 came" in err


@pytest.mark.idiom("dist-missing-rank")
def test_rank_that_never_arrives_makes_rank_0_fail_in_time(forks: ForkServer) -> None:
    # WORLD_SIZE says 2 and only rank 0 starts: it raises, naming rank 1, after the timeout.
    rank_0 = _rank(forks, "init-only", rank_env(0, 2, free_port()))
    status, err, elapsed = _finish(rank_0)
    assert status == 1, err[-3000:]
    assert "DistributedError: Rank 1 of WORLD_SIZE=2 never arrived: init_process_group " in err
    assert f"waited {SHORT_TIMEOUT_S} s at 127.0.0.1:" in err and "; rank 0 came." in err
    assert "SIGABRT" not in err and "another task" not in err
    assert elapsed < deadline(SHORT_TIMEOUT_S + 15)


@pytest.mark.idiom("dist-missing-rank")
def test_every_rank_that_came_learns_which_rank_never_arrived(forks: ForkServer) -> None:
    port = free_port()
    ranks = [_rank(forks, "init-only", rank_env(rank, 3, port)) for rank in (1, 0)]
    for status, err, elapsed in map(_finish, ranks):
        assert status == 1, err[-3000:]
        assert "Rank 2 of WORLD_SIZE=3 never arrived" in err and "ranks 0, 1 came" in err
        assert elapsed < deadline(SHORT_TIMEOUT_S + 15)


def test_rank_that_dies_makes_the_others_fail_in_time(forks: ForkServer) -> None:
    port = free_port()
    ranks = [_rank(forks, "die-after-start", rank_env(r, 2, port)) for r in (0, 1)]
    (status_0, err_0, elapsed), (status_1, _, _) = _finish(ranks[0]), _finish(ranks[1])
    assert status_1 == 3
    assert status_0 != 0
    assert "all_reduce() on rank 0 (call #1) failed waiting for the other ranks" in err_0
    assert "Task 1 heartbeat timeout" in err_0
    assert elapsed < deadline(SHORT_TIMEOUT_S * 2 + 20)


def test_barrier_timeout_names_the_missing_rank_and_the_launcher_stops_the_job() -> None:
    status, _, err = launch(
        "--nproc-per-node", "2", "--cpu-devices", "1", SCENARIO, "skip-barrier",
        str(SHORT_TIMEOUT_S),
    )  # fmt: skip
    assert status != 0
    assert "barrier() on rank 0 (call #0) failed waiting for the other ranks" in err
    assert "# of tasks that reached the barrier: 1/2" in err
    # rank 1 sleeps on: only the launcher stopping it ends the job before launch()'s
    # watchdog, which would have returned 130 and said so
    assert "torch2jax-device run: rank" in err and "stopped the others" in err


def test_launcher_returns_the_exit_code_of_the_first_failure(tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text(
        "import os, sys, time\n"
        "if os.environ['RANK'] == '1':\n"
        "    print('rank 1 gives up', file=sys.stderr)\n"
        "    sys.exit(7)\n"
        "time.sleep(3600)\n"
    )
    status, _, err = launch("--nproc-per-node", "2", str(script))
    assert status == 7  # not 130: rank 0 was stopped, not left to launch()'s watchdog
    assert "[rank1]: rank 1 gives up" in err
    assert "rank 1 (pid" in err and "failed with exit code 7; stopped the others." in err


def test_interrupted_launcher_stops_every_process(tmp_path: Path) -> None:
    script = tmp_path / "sleep.py"
    script.write_text("import time\ntime.sleep(3600)\n")
    status, _, err = launch("--nproc-per-node", "2", str(script), limit_s=1)
    assert status == 130  # the workers would sleep an hour: launch() returned, so they ended
    assert "interrupted by SIGINT; stopped every process" in err


def test_launcher_rejects_bad_requests(tmp_path: Path) -> None:
    status, _, err = launch("missing.py")
    assert status == 2 and "script 'missing.py' not found" in err
    script = tmp_path / "ok.py"
    script.write_text("")
    status, _, err = launch("--nnodes", "2", "--node-rank", "2", str(script))
    assert status == 2 and "--node-rank 2 must be below --nnodes 2" in err
    with pytest.raises(SystemExit):
        launch("--nproc-per-node", "0", str(script))


def test_launcher_sets_torchruns_environment(tmp_path: Path) -> None:
    script = tmp_path / "env.py"
    names = ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
             "MASTER_ADDR", "MASTER_PORT", "JAX_PLATFORMS", "JAX_NUM_CPU_DEVICES")  # fmt: skip
    script.write_text(
        "import json, os\n"
        f"print('RESULT ' + json.dumps({{n: os.environ.get(n) for n in {names!r}}}"
        " | {'rank': int(os.environ['RANK'])}))\n"
    )
    status, out, _ = launch(
        "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "1", "--master-port", "29555",
        "--cpu-devices", "3", str(script),
    )  # fmt: skip
    assert status == 0
    job = results(out)
    assert [(r["RANK"], r["LOCAL_RANK"]) for r in job] == [("2", "0"), ("3", "1")]
    for result in job:
        assert (result["WORLD_SIZE"], result["LOCAL_WORLD_SIZE"], result["GROUP_RANK"]) == (
            "4", "2", "1",
        )  # fmt: skip
        assert (result["MASTER_ADDR"], result["MASTER_PORT"]) == ("127.0.0.1", "29555")
        assert (result["JAX_PLATFORMS"], result["JAX_NUM_CPU_DEVICES"]) == ("cpu", "3")
