"""The torch2jax_device side of ``torch_worker.py``: the same job, ported line by line.

Run under ``torch2jax-device run``, each rank prints one ``RESULT`` line; under torchrun
``torchrun_worker.py`` calls ``job()`` after torch's job. Extra facts about the JAX side
go under ``"jax"``.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from ddp_problem import BARRIER_DELAY_S, dataset, initial_weights, per_rank_values, report
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec

from torch2jax_device import distributed as dist


def mse_loss(params: dict[str, jax.Array], batch: dict[str, jax.Array]) -> jax.Array:
    prediction = batch["x"] @ params["weight"].T + params["bias"]
    return jnp.mean((prediction - batch["y"]) ** 2)


def job() -> dict[str, Any]:
    """The job, from ``init_process_group`` to ``destroy_process_group``: this rank's facts."""
    dist.init_process_group(backend="gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    local_rank = dist.get_local_rank()
    mesh = dist.init_device_mesh("cpu", (jax.device_count(),), mesh_dim_names=("data",))

    values = per_rank_values(rank)
    reductions = {
        name: {
            kind: np.asarray(array).tolist() for kind, array in dist.all_reduce(values, op).items()
        }
        for name, op in (
            ("sum", dist.ReduceOp.SUM),
            ("max", dist.ReduceOp.MAX),
            ("min", dist.ReduceOp.MIN),
            ("product", dist.ReduceOp.PRODUCT),
            ("mean", dist.ReduceOp.AVG),
        )
    }

    # DistributedSampler(shuffle=False) gives rank r the rows r, r + world_size, ...
    inputs, targets = dataset()
    indices = np.arange(len(inputs))[rank::world_size]
    batch = dist.make_global_batch({"x": inputs[indices], "y": targets[indices]}, mesh)
    weight, bias = initial_weights()
    params = jax.device_put({"weight": weight, "bias": bias}, NamedSharding(mesh, PartitionSpec()))
    grads = jax.jit(jax.grad(mse_loss))(params, batch)  # XLA averages across processes

    if rank == 1:
        time.sleep(BARRIER_DELAY_S)
    start = time.monotonic()
    dist.barrier()
    waited = time.monotonic() - start

    global_inputs = multihost_utils.process_allgather(batch["x"], tiled=True)
    facts = {
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "local_devices": len(jax.local_devices()),
        "cuda_visible_devices": jax.config.values["jax_cuda_visible_devices"],
        "grad_sharding_replicated": bool(grads["weight"].sharding.is_fully_replicated),
        "batch_spec": str(batch["x"].sharding.spec),
        "reduced_device": str(dist.all_reduce({"one": 1})["one"].device),
        "first_local_device": str(jax.local_devices()[0]),
    }
    dist.destroy_process_group()
    return {
        "rank": rank,
        "world_size": world_size,
        "local_rank": local_rank,
        "mesh_shape": list(mesh.devices.shape),
        "mesh_dim_names": list(mesh.axis_names),
        "reductions": reductions,
        "global_inputs": np.asarray(global_inputs).tolist(),
        "grad_weight": np.asarray(grads["weight"]).tolist(),
        "grad_bias": np.asarray(grads["bias"]).tolist(),
        "waited_at_barrier": waited > BARRIER_DELAY_S / 2,
        "initialized_after_destroy": dist.is_initialized(),
        "jax": facts,
    }


if __name__ == "__main__":
    report(job())
