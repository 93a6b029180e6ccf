"""``ddp_trainer_torch.py`` ported as docs/how-to/ddp.md teaches (run under the launcher)."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from ddp_trainer_cases import (
    CASES,
    CLASSES,
    EPOCHS,
    FEATURES,
    HIDDEN,
    LR,
    MAX_NORM,
    MOMENTUM,
    SEED,
    data,
    initial_weights,
    report,
    steps,
)
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import torch2jax_device as tj
from torch2jax_device import distributed as dist
from torch2jax_device import optim


class PerRankBatchNorm(nnx.BatchNorm):
    """torch's BatchNorm1d under DDP: each rank's rows normalized by their own statistics
    (the global batch is every rank's rows in rank order), the running statistics
    updated from rank 0's rows with torch's unbiased variance (DDP broadcasts rank 0's
    buffers before every forward). docs/how-to/ddp.md gives it."""

    def __init__(self, features: int, ranks: int, rngs: nnx.Rngs) -> None:
        super().__init__(features, momentum=0.9, epsilon=1e-5, rngs=rngs)
        self.ranks = ranks

    def __call__(
        self, x: jax.Array, use_running_average: bool | None = None, **kwargs: Any
    ) -> jax.Array:
        running = self.use_running_average if use_running_average is None else use_running_average
        if running:
            return super().__call__(x, use_running_average=True, **kwargs)  # evaluation
        groups = x.reshape(self.ranks, -1, x.shape[-1])
        mean, var = groups.mean(axis=1, keepdims=True), groups.var(axis=1, keepdims=True)
        normed = (groups - mean) / jnp.sqrt(var + self.epsilon)
        rows = groups.shape[1]
        self.mean[...] = self.momentum * self.mean[...] + (1 - self.momentum) * mean[0, 0]
        unbiased = var[0, 0] * rows / max(rows - 1, 1)
        self.var[...] = self.momentum * self.var[...] + (1 - self.momentum) * unbiased
        return normed.reshape(x.shape) * self.scale[...] + self.bias[...]


class Net(nnx.Module):
    def __init__(self, batch_norm: bool, per_rank: int = 0, fc1_bias: bool = True) -> None:
        rngs = nnx.Rngs(0)
        self.fc1 = nnx.Linear(FEATURES, HIDDEN, use_bias=fc1_bias, rngs=rngs)
        # torch's BatchNorm1d: momentum 0.1 there is 0.9 here.
        self.bn = (
            None
            if not batch_norm
            else PerRankBatchNorm(HIDDEN, per_rank, rngs)
            if per_rank
            else nnx.BatchNorm(HIDDEN, momentum=0.9, epsilon=1e-5, rngs=rngs)
        )
        self.fc2 = nnx.Linear(HIDDEN, CLASSES, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        hidden = self.fc1(x)
        if self.bn is not None:
            hidden = self.bn(hidden)
        return self.fc2(jax.nn.relu(hidden))


@functools.partial(nnx.jit, static_argnums=3)
def train_step(
    model: Net, optimizer: nnx.Optimizer, group: list[Any], summed_over: int
) -> tuple[jax.Array, jax.Array]:
    """One optimizer step over the group's micro-batches. ``summed_over``: the world size
    when the original sums its loss per rank (reduction="sum"), else 0 (a mean)."""

    def loss_fn(model: Net) -> jax.Array:
        def one(x: jax.Array, y: jax.Array) -> jax.Array:
            rows = optax.softmax_cross_entropy_with_integer_labels(model(x), y)
            # DDP averages each rank's summed gradient: the global sum / world size.
            return rows.sum() / summed_over if summed_over else rows.mean()

        return sum(one(x, y) for x, y in group) / len(group)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss, optax.global_norm(grads)


def host(array: jax.Array) -> np.ndarray:
    return np.asarray(tj.to_device(array, "cpu"))  # every rank calls it: a global array


def train(
    name: str, rank: int, world_size: int, mesh: Any, folder: Path, per_rank: bool = False
) -> dict[str, Any]:
    """One case as the docs port it; ``per_rank``: batch norm per rank, as torch's DDP."""
    case = CASES[name]
    model = Net(case.batch_norm, world_size if per_rank else 0)
    state = dict(tj.state_dict(model, layout="torch"))
    state.update({key: torch.from_numpy(value) for key, value in initial_weights().items()})
    tj.load_state(model, state)
    tj.to_device(model, NamedSharding(mesh, PartitionSpec()))  # DDP(model)
    # clip_grad_norm_(model.parameters(), MAX_NORM) before optimizer.step():
    tx = optax.chain(optax.clip_by_global_norm(MAX_NORM), optim.SGD(lr=LR, momentum=MOMENTUM))
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    x, y = data(case.samples)
    dataset = TensorDataset(torch.from_numpy(x), torch.from_numpy(y.astype(np.int32)))
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=case.shuffle, seed=SEED,
        drop_last=case.sampler_drop_last,
    )  # fmt: skip
    loader = DataLoader(
        dataset, batch_size=case.batch_size, sampler=sampler, drop_last=case.loader_drop_last
    )
    batches = tj.DeviceLoader(loader, NamedSharding(mesh, PartitionSpec("data")))
    losses, norms, seen = [], [], []
    for epoch in range(EPOCHS):
        batches.sampler.set_epoch(epoch)
        for group in steps(list(batches), case.micro_batches):
            seen.extend(host(inputs).tolist() for inputs, _ in group)
            loss, norm = train_step(model, optimizer, group, world_size if case.summed else 0)
            losses.append(float(loss.addressable_data(0)))
            norms.append(float(norm.addressable_data(0)))
    final = {
        key: np.asarray(tj.to_torch(value))
        for key, value in tj.state_dict(model, layout="torch").items()
    }
    if rank == 0:
        torch.save(
            {key: torch.from_numpy(value) for key, value in final.items()}, folder / f"{name}.pt"
        )
    dist.barrier()
    loaded = tj.load(folder / f"{name}.pt", map_location="cpu")
    loaded_is_final = all(np.array_equal(np.asarray(loaded[key]), final[key]) for key in final)
    return {
        "case": name,
        "per_rank": per_rank,
        "rank": rank,
        "losses": losses,
        "norms": norms,
        "batches": seen,
        "state": {key: value.tolist() for key, value in final.items()},
        "loaded_is_final": loaded_is_final,
    }


def main() -> None:
    folder = Path(sys.argv[1])
    dist.init_process_group(backend="gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    mesh = dist.init_device_mesh("cpu", (jax.device_count(),), mesh_dim_names=("data",))
    for name, case in CASES.items():
        report(train(name, rank, world_size, mesh, folder), folder, "port")
        if case.batch_norm:
            report(train(name, rank, world_size, mesh, folder, per_rank=True), folder, "port")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
