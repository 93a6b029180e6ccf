"""One rank of a 2-process job that asks where a model's parameters are.

Usage: ``placement_worker.py torch`` under torchrun (gloo), ``placement_worker.py tj``
under ``torch2jax-device run``. Each rank prints one ``RESULT`` JSON line: what
``next(model.parameters()).device`` says for a model kept by this process and for a
data-parallel (DDP-style, replicated) model, as type, index, ``str`` and comparisons.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def describe(device: Any, torch_cpu: Any) -> dict[str, Any]:
    return {
        "type": device.type,
        "index": device.index,
        "str": str(device),
        "eq_torch_cpu": device == torch_cpu,
        "eq_string_cpu": device == "cpu",
    }


def torch_rank() -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group(backend="gloo")
    model = torch.nn.Linear(2, 2)
    ddp = DistributedDataParallel(model)
    cpu = torch.device("cpu")
    result = {
        "rank": dist.get_rank(),
        "local": describe(next(model.parameters()).device, cpu),
        "replicated": describe(next(ddp.parameters()).device, cpu),
    }
    dist.destroy_process_group()
    return result


def tj_rank() -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    import torch
    from jax.sharding import NamedSharding, PartitionSpec

    import torch2jax_device as tj
    from torch2jax_device import distributed as dist

    dist.init_process_group(backend="gloo")
    mesh = dist.init_device_mesh("cpu", (jax.device_count(),), mesh_dim_names=("data",))
    params = {"weight": jnp.ones((2, 2)), "bias": jnp.zeros(2)}
    local = tj.to_device(params, "cpu")
    replicated = jax.device_put(params, NamedSharding(mesh, PartitionSpec()))
    cpu = torch.device("cpu")
    local_device = next(tj.parameters(local)).device
    replicated_device = next(tj.parameters(replicated)).device
    result = {
        "rank": dist.get_rank(),
        "local": describe(local_device, cpu),
        "replicated": describe(replicated_device, cpu),
        "equal_tj_cpu": [local_device == tj.device("cpu"), replicated_device == tj.device("cpu")],
        "device_of_replicated": str(tj.device_of(replicated)),
        "jax_device_id": local["weight"].device.id,
    }
    dist.destroy_process_group()
    return result


if __name__ == "__main__":
    outcome = torch_rank() if sys.argv[1] == "torch" else tj_rank()
    print("RESULT " + json.dumps(outcome, sort_keys=True), flush=True)
