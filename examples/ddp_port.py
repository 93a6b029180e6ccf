"""A PyTorch DistributedDataParallel training script, ported to JAX with torch2jax_device.

Launch it as the original was launched (2 CPU processes take a few seconds)::

    torchrun --nproc_per_node=2 examples/ddp_port.py
    torch2jax-device run --nproc-per-node 2 examples/ddp_port.py   # without torch

Every line that came from the PyTorch script is kept above its port as a comment.
The shape of the script stays; the engine underneath is JAX's own:

* ``init_process_group`` joins the processes through ``jax.distributed``;
* the parameters are replicated over a mesh of every process's devices, which is
  what ``DDP(model)`` keeps in sync;
* each process loads its ``DistributedSampler`` shard and ``make_global_batch``
  assembles one global batch from them;
* ``jax.jit`` compiles the step for the whole mesh, so the gradient all-reduce DDP
  runs in its backward hooks is part of the compiled program;
* per-process metrics are combined with ``all_reduce``, as in PyTorch.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

import torch2jax_device as tj
from torch2jax_device import distributed as dist

Params = dict[str, dict[str, jax.Array]]
FEATURES, HIDDEN = 8, 32


def make_dataset(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A regression problem every process generates identically (a stand-in for files)."""
    direction = np.random.default_rng(1234).standard_normal((FEATURES, 1)) / np.sqrt(FEATURES)
    inputs = np.random.default_rng(seed).standard_normal((rows, FEATURES)).astype(np.float32)
    return inputs, np.sin(inputs @ direction).astype(np.float32)


def init_params(key: jax.Array) -> Params:
    """A two-layer perceptron, like ``nn.Sequential(Linear, Tanh, Linear)``."""
    hidden_key, out_key = jax.random.split(key)
    return {
        "hidden": {
            "weight": jax.random.normal(hidden_key, (FEATURES, HIDDEN)) / np.sqrt(FEATURES),
            "bias": jnp.zeros(HIDDEN),
        },
        "out": {
            "weight": jax.random.normal(out_key, (HIDDEN, 1)) / np.sqrt(HIDDEN),
            "bias": jnp.zeros(1),
        },
    }


def mse_loss(params: Params, batch: dict[str, jax.Array]) -> jax.Array:
    hidden = jnp.tanh(batch["x"] @ params["hidden"]["weight"] + params["hidden"]["bias"])
    prediction = hidden @ params["out"]["weight"] + params["out"]["bias"]
    return jnp.mean((prediction - batch["y"]) ** 2)


@jax.jit
def train_step(params: Params, batch: dict[str, jax.Array], lr: float) -> tuple[Params, jax.Array]:
    # PyTorch: loss = criterion(model(x), y); loss.backward(); optimizer.step()
    # The batch spans every process, so this loss and its gradient are DDP's averages.
    loss, grads = jax.value_and_grad(mse_loss)(params, batch)
    return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32, help="per process, as in torch")
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    # PyTorch: device_type = "cuda" if torch.cuda.is_available() else "cpu"
    device_type = "cuda" if tj.cuda.is_available() else "cpu"  # before init: allowed
    # PyTorch: dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
    dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
    # PyTorch: rank, world_size = dist.get_rank(), dist.get_world_size()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    # PyTorch: local_rank = int(os.environ["LOCAL_RANK"]); torch.cuda.set_device(local_rank)
    local_rank = dist.get_local_rank()  # init_process_group gave this process that GPU
    device = tj.device(f"cuda:{local_rank}") if device_type == "cuda" else tj.device("cpu")
    # PyTorch: one model replica per rank; here one mesh over every process's devices.
    mesh = dist.init_device_mesh(device_type, (jax.device_count(),), mesh_dim_names=("data",))

    # PyTorch: model = DDP(Model().to(device), device_ids=[local_rank])
    # DDP broadcasts rank 0's parameters; the same seed on every process does the same.
    params = tj.to_device(init_params(jax.random.key(0)), device)
    params = tj.to_device(params, NamedSharding(mesh, PartitionSpec()))  # DDP: replicated

    inputs, targets = make_dataset(rows=512, seed=0)
    val_inputs, val_targets = make_dataset(rows=128, seed=1)
    losses: list[float] = []
    seen = 0
    for epoch in range(args.epochs):
        # PyTorch: sampler = DistributedSampler(dataset, seed=0); sampler.set_epoch(epoch)
        order = np.random.default_rng(epoch).permutation(len(inputs))  # same on every rank
        shard = order[rank::world_size]
        for start in range(0, len(shard) - args.batch_size + 1, args.batch_size):
            rows = shard[start : start + args.batch_size]
            # PyTorch: x, y = x.to(device), y.to(device); ddp_model(x)
            batch = dist.make_global_batch({"x": inputs[rows], "y": targets[rows]}, mesh)
            params, loss = train_step(params, batch, args.lr)
            losses.append(float(loss))  # the global batch's loss, the same on every rank
            seen += len(rows)

        # PyTorch: each rank evaluates its shard, then dist.all_reduce(val_loss); / world_size
        local_params = jax.tree.map(lambda p: p.addressable_data(0), params)  # this replica
        val_rows = np.arange(len(val_inputs))[rank::world_size]
        local_val = mse_loss(local_params, {"x": val_inputs[val_rows], "y": val_targets[val_rows]})
        val_loss = dist.all_reduce(local_val, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"epoch {epoch}: train loss {losses[-1]:.5f}, validation loss {val_loss:.5f}")

    # PyTorch: dist.all_reduce(torch.tensor(seen), op=dist.ReduceOp.SUM)
    total_seen = int(dist.all_reduce(seen, op=dist.ReduceOp.SUM))
    summary: dict[str, Any] = {
        "rank": rank,
        "local_rank": local_rank,
        "world_size": world_size,
        "devices": jax.device_count(),
        "first_loss": losses[0],
        "final_loss": losses[-1],
        "validation_loss": float(val_loss),
        "samples_seen": total_seen,
    }
    print("summary: " + json.dumps(summary, sort_keys=True), flush=True)
    # PyTorch: dist.destroy_process_group()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
