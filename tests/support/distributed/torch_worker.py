"""The PyTorch side: a small data-parallel job with torch.distributed (gloo, CPU).

``job()`` runs it in one rank of a 2-process job under torchrun (``torchrun_worker.py``)
and returns the rank's facts. The torch2jax_device port is ``tj_worker.py``; the parity
tests compare the two.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from ddp_problem import BARRIER_DELAY_S, dataset, initial_weights, per_rank_values
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler


def reduced(values: np.ndarray, op: dist.ReduceOp) -> list[float]:
    tensor = torch.from_numpy(values.copy())
    dist.all_reduce(tensor, op=op)
    return tensor.tolist()


def job() -> dict[str, Any]:
    """The job, from ``init_process_group`` to ``destroy_process_group``: this rank's facts."""
    dist.init_process_group(backend="gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    local_rank = dist.get_node_local_rank()
    mesh = init_device_mesh("cpu", (world_size,), mesh_dim_names=("data",))

    values = per_rank_values(rank)
    reductions = {
        name: {kind: reduced(array, op) for kind, array in values.items()}
        for name, op in (
            ("sum", dist.ReduceOp.SUM),
            ("max", dist.ReduceOp.MAX),
            ("min", dist.ReduceOp.MIN),
            ("product", dist.ReduceOp.PRODUCT),
        )
    }
    # gloo has no ReduceOp.AVG: the DDP idiom sums and divides by the world size.
    reductions["mean"] = {
        kind: (torch.tensor(total) / world_size).tolist()
        for kind, total in reductions["sum"].items()
    }

    # DistributedSampler + DDP: each rank trains on its shard; DDP averages gradients.
    inputs, targets = dataset()
    indices = list(DistributedSampler(range(len(inputs)), shuffle=False))
    local_x, local_y = torch.from_numpy(inputs[indices]), torch.from_numpy(targets[indices])
    gathered = [torch.empty_like(local_x) for _ in range(world_size)]
    dist.all_gather(gathered, local_x)
    weight, bias = initial_weights()
    model = torch.nn.Linear(weight.shape[1], weight.shape[0])
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(weight))
        model.bias.copy_(torch.from_numpy(bias))
    ddp = DistributedDataParallel(model)
    loss = torch.nn.functional.mse_loss(ddp(local_x), local_y)
    loss.backward()

    if rank == 1:
        time.sleep(BARRIER_DELAY_S)
    start = time.monotonic()
    dist.barrier()
    waited = time.monotonic() - start

    dist.destroy_process_group()
    return {
        "rank": rank,
        "world_size": world_size,
        "local_rank": local_rank,
        "mesh_shape": list(mesh.shape),
        "mesh_dim_names": list(mesh.mesh_dim_names or ()),
        "reductions": reductions,
        "global_inputs": torch.cat(gathered).tolist(),
        "grad_weight": model.weight.grad.tolist(),
        "grad_bias": model.bias.grad.tolist(),
        "waited_at_barrier": waited > BARRIER_DELAY_S / 2,
        "initialized_after_destroy": dist.is_initialized(),
    }
