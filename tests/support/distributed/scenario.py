"""Small torch2jax_device jobs the distributed tests run, one per mode.

Usage: ``scenario.py MODE[,MODE...] TIMEOUT_S``. The launcher (or the test) sets the
torchrun environment. The modes run one after the other in one job; each prints one
``RESULT`` line per rank that reports (with its ``"mode"``); errors the mode does not
catch end the process with a traceback, as in a user's script.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from ddp_problem import report
from jax.sharding import NamedSharding, PartitionSpec

import torch2jax_device as tj
from torch2jax_device import distributed as dist


def error_of(call: Callable[[], object]) -> str:
    """``"ClassName: message"`` of what ``call`` raises (it must raise)."""
    try:
        call()
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    raise AssertionError("expected an error")


def several_devices() -> dict[str, Any]:
    """Each process owns several (simulated) devices: the mesh spans all of them."""
    rank = dist.get_rank()
    mesh = dist.init_device_mesh("cpu", (jax.device_count(),), mesh_dim_names=("data",))
    local = np.arange(4 * 2, dtype=np.float32).reshape(4, 2) + 100 * rank
    batch = dist.make_global_batch({"x": local, "step": 7}, mesh)
    sums = dist.all_reduce({"rank": rank, "rows": local.sum(axis=0)})
    return {
        "rank": rank,
        "local_devices": len(jax.local_devices()),
        "mesh_shape": list(mesh.devices.shape),
        "batch_shape": list(batch["x"].shape),
        "batch_local_rows": sorted(
            int(shard.index[0].start) for shard in batch["x"].addressable_shards
        ),
        "step": int(batch["step"]),
        "rank_sum": int(sums["rank"]),
        "rows_sum": np.asarray(sums["rows"]).tolist(),
        "odd_batch_error": error_of(
            lambda: dist.make_global_batch(np.ones((3, 2), np.float32), mesh)
        ),
        "unknown_op_error": error_of(lambda: dist.all_reduce(1.0, op="median")),
        "traced_error": error_of(lambda: jax.jit(dist.all_reduce)(np.ones(2))),
    }


def placement() -> dict[str, Any]:
    """``tj.to_device`` onto a mesh that spans both processes, and back to one device."""
    from flax import nnx  # here: the other modes' processes skip flax's import (~0.7 s CPU)

    rank = dist.get_rank()
    mesh = dist.init_device_mesh("cpu", (jax.device_count(),), mesh_dim_names=("data",))
    replicated, rows = (
        NamedSharding(mesh, PartitionSpec()),
        NamedSharding(mesh, PartitionSpec("data")),
    )
    host = {"w": np.arange(8, dtype=np.float32).reshape(4, 2), "b": np.ones(3, np.float32)}
    placed = tj.to_device(host, "cpu")  # model.to(device)
    ddp = tj.to_device(placed, replicated)  # DDP(model)
    split = tj.to_device(placed["w"], rows)
    from_numpy = tj.to_device(host["w"], rows)
    source = tj.to_device(np.full(3, 2.0, np.float32), "cpu")
    copied = tj.to_device(source, replicated, copy=True)
    source.delete()  # copy=True: the replicas own their memory
    module = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    tj.to_device(module, "cpu")
    returned = tj.to_device(module, replicated)
    gathered = tj.to_device(ddp, "cpu")  # rank 0 saves a checkpoint: a local read
    gathered_split = tj.to_device(split, "cpu")  # a collective: every rank calls it
    return {
        "rank": rank,
        "ddp_spec": str(ddp["w"].sharding.spec),
        "ddp_spans_processes": not ddp["w"].is_fully_addressable,
        "ddp_local": [np.asarray(s.data).tolist() for s in ddp["w"].addressable_shards],
        "split_local": [np.asarray(s.data).tolist() for s in split.addressable_shards],
        "numpy_local": [np.asarray(s.data).tolist() for s in from_numpy.addressable_shards],
        "module_in_place": returned is module,
        "module_spec": str(module.kernel.get_value().sharding.spec),
        "gathered": {k: np.asarray(v).tolist() for k, v in gathered.items()},
        "copied": np.asarray(tj.to_device(copied, "cpu")).tolist(),
        "gathered_device": str(gathered["w"].device),
        "gathered_split": np.asarray(gathered_split).tolist(),
        "uneven_error": error_of(lambda: tj.to_device({"odd": np.ones(6)}, rows)),
    }


def gather_alone() -> dict[str, Any] | None:
    """Only rank 0 gathers a split array; rank 1 is busy elsewhere past the timeout.

    Rank 1 must not reach JAX's shutdown barrier first: its timeout would abort rank 0
    before rank 0's own wait timed out and reported.
    """
    mesh = dist.init_device_mesh("cpu", (jax.device_count(),), mesh_dim_names=("data",))
    split = tj.to_device(
        np.arange(8.0, dtype=np.float32), NamedSharding(mesh, PartitionSpec("data"))
    )
    if dist.get_rank() == 0:
        return {"rank": 0, "error": error_of(lambda: tj.to_device(split, "cpu"))}
    time.sleep(3 * float(sys.argv[2]))
    return None


def die_after_start() -> dict[str, Any]:
    """Rank 1 dies without a word after the first reduction; rank 0 keeps going."""
    dist.all_reduce(1.0)
    if dist.get_rank() == 1:
        os._exit(3)
    dist.all_reduce(1.0)
    return {"rank": 0, "survived": True}


def skip_barrier() -> None:
    """Rank 1 never comes to the barrier rank 0 waits at."""
    if dist.get_rank() == 1:
        time.sleep(60)
    dist.barrier()


def lifecycle() -> dict[str, Any]:
    """One process: initialize twice, shut down, initialize again."""
    twice = error_of(dist.init_process_group)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    dist.destroy_process_group()
    return {
        "rank": rank,
        "world_size": world_size,
        "process_count": jax.process_count(),
        "twice_error": twice,
        "initialized_after_destroy": dist.is_initialized(),
        "rank_after_destroy_error": error_of(dist.get_rank),
        "again_error": error_of(dist.init_process_group),
    }


MODES: dict[str, Callable[[], dict[str, Any] | None]] = {
    "several-devices": several_devices,
    "die-after-start": die_after_start,
    "skip-barrier": skip_barrier,
    "lifecycle": lifecycle,
    "placement": placement,
    "gather-alone": gather_alone,
    "init-only": lambda: None,
}


def main() -> None:
    modes, timeout_s = sys.argv[1].split(","), float(sys.argv[2])
    dist.init_process_group(backend="gloo", timeout=timeout_s)
    for mode in modes:
        result = MODES[mode]()
        if result is not None:
            report({"mode": mode, **result})


if __name__ == "__main__":
    main()
