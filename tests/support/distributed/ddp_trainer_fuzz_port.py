"""``ddp_trainer_fuzz_torch.py`` ported as docs/how-to/ddp.md teaches (run under the launcher).

Usage: ``ddp_trainer_fuzz_port.py FOLDER``. Each draw of ``FOLDER/draws.json`` trains
twice: on the job's mesh (``variant`` ``"port"``, every rank), and on this process's
first device alone, fed the global batch (every rank's ``DistributedSampler`` rows, in
rank order; ``variant`` ``"one-device"``, on one rank per draw, the ranks taking turns).
DDP is as solid as one device when the two agree. Each result is a line of
``FOLDER/port-RANK.jsonl``, with what ``ddp_trainer_fuzz_torch.py`` writes; a draw that
raises writes its error instead (``"error"``), and the job goes on.
"""

from __future__ import annotations

import functools
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
import optax
import torch
from ddp_trainer_cases import SEED, data, initial_weights, report, steps
from ddp_trainer_fuzz import OPTIMIZERS, SCHEDULERS, TrainerDraw, plain, read, taken
from ddp_trainer_port import Net
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import torch2jax_device as tj
from torch2jax_device import distributed as dist
from torch2jax_device import optim


@functools.partial(nnx.jit, static_argnums=(3, 4))
def train_step(
    model: Net, optimizer: nnx.Optimizer, group: list[Any], summed_over: int, max_norm: float | None
) -> tuple[jax.Array, jax.Array]:
    """One optimizer step over the group's micro-batches (gradient accumulation is one
    step over all of them). ``summed_over``: the world size when the original sums its
    loss per rank (reduction="sum"), else 0 (a mean)."""

    def loss_fn(model: Net) -> jax.Array:
        def one(x: jax.Array, y: jax.Array) -> jax.Array:
            rows = optax.softmax_cross_entropy_with_integer_labels(model(x), y)
            # DDP averages each rank's summed gradient: the global sum / world size.
            return rows.sum() / summed_over if summed_over else rows.mean()

        return sum(one(x, y) for x, y in group) / len(group)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    norm = optax.global_norm(grads)
    if max_norm is not None:  # clip_grad_norm_(model.parameters(), max_norm)
        grads = optax.clip_by_global_norm(max_norm).update(grads, optax.EmptyState())[0]
    optimizer.update(model, grads)
    return loss, norm


class AllRanks:
    """Every rank's DataLoader over its DistributedSampler, as one loader of global
    batches (each rank's rows of a batch, in rank order): one device's feed."""

    def __init__(self, loaders: list[DataLoader[Any]]) -> None:
        self.loaders = loaders

    def __len__(self) -> int:
        return len(self.loaders[0])  # every rank's loader has as many batches

    def set_epoch(self, epoch: int) -> None:
        for loader in self.loaders:
            loader.sampler.set_epoch(epoch)  # type: ignore[attr-defined]

    def __iter__(self) -> Iterator[list[torch.Tensor]]:
        for parts in zip(*self.loaders, strict=True):
            yield [torch.cat(leaves) for leaves in zip(*parts, strict=True)]


class Trainer:
    """A fresh model, optimizer and scheduler, as the port builds them before its loop."""

    def __init__(self, drawn: TrainerDraw, replicated: jax.sharding.Sharding, ranks: int) -> None:
        per_rank = ranks if drawn.batch_norm else 0
        self.model = Net(drawn.batch_norm, per_rank, fc1_bias=not drawn.batch_norm)
        state = dict(tj.state_dict(self.model, layout="torch"))
        state.update(
            {
                key: torch.from_numpy(value)
                for key, value in initial_weights().items()
                if key in state
            }
        )
        tj.load_state(self.model, state)
        tj.to_device(self.model, replicated)  # DDP(model), or model.to(device)
        arguments = dict(OPTIMIZERS[drawn.optimizer])
        kind = {"sgd": "SGD", "momentum": "SGD", "adam": "Adam", "adamw": "AdamW"}
        tx = getattr(optim, kind[drawn.optimizer])(**arguments)
        self.optimizer = nnx.Optimizer(self.model, tx, wrt=nnx.Param)
        self.scheduler: Any = None
        if drawn.scheduler is not None:
            scheduler, options = SCHEDULERS[drawn.scheduler]
            if scheduler == "CosineAnnealingLR":
                options = {"T_max": drawn.epochs}
            self.scheduler = getattr(optim.lr_scheduler, scheduler)(self.optimizer, **options)

    def checkpoint(self, epoch: int) -> dict[str, Any]:
        return {
            "model": tj.state_dict(self.model, layout="torch"),  # every rank calls it
            "optimizer": optim.state_dict(self.optimizer, self.model),
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
            "epoch": epoch,
        }

    def resume(self, path: Path) -> int:
        checkpoint = tj.load(path, map_location="cpu")
        tj.load_state(self.model, checkpoint["model"])
        optim.load_state_dict(self.optimizer, self.model, checkpoint["optimizer"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(checkpoint["scheduler"])
        return int(checkpoint["epoch"])


def host(array: jax.Array) -> np.ndarray:
    return np.asarray(tj.to_device(array, "cpu"))  # every rank calls it: a global array


def train(
    name: str, drawn: TrainerDraw, rank: int, world_size: int, mesh: Any, folder: Path
) -> dict[str, Any]:
    """The draw on the mesh (``mesh`` given: this rank's rows) or on this process's first
    device with every rank's rows (``mesh`` None)."""
    x, y = data(drawn.samples)
    dataset = TensorDataset(torch.from_numpy(x), torch.from_numpy(y.astype(np.int32)))

    def loader(of_rank: int) -> DataLoader[Any]:
        sampler = DistributedSampler(
            dataset, num_replicas=world_size, rank=of_rank, shuffle=drawn.shuffle, seed=SEED,
            drop_last=drawn.sampler_drop_last,
        )  # fmt: skip
        return DataLoader(
            dataset, batch_size=drawn.batch_size, sampler=sampler,
            drop_last=drawn.loader_drop_last,
        )  # fmt: skip

    source: Any
    if mesh is not None:
        replicated: jax.sharding.Sharding = NamedSharding(mesh, PartitionSpec())
        target: jax.sharding.Sharding = NamedSharding(mesh, PartitionSpec("data"))
        source = loader(rank)
        set_epoch = source.sampler.set_epoch
        saves, path = rank == 0, folder / f"{name}-resume.pt"
    else:
        replicated = target = SingleDeviceSharding(jax.local_devices()[0])
        source = AllRanks([loader(of_rank) for of_rank in range(world_size)])
        set_epoch = source.set_epoch
        saves, path = True, folder / f"{name}-resume-one-device-{rank}.pt"
    feed = tj.DeviceLoader(
        source, target, drawn.prefetch, drawn.pin_memory, background=drawn.background
    )

    def epoch_batches() -> Any:
        """One epoch's batches, fed as the draw says."""
        if drawn.feed == "DeviceLoader":
            return iter(feed)
        return tj.prefetch_to_device(source, target, drawn.prefetch, background=drawn.background)

    summed_over = world_size if drawn.reduction == "sum" else 0
    trainer = Trainer(drawn, replicated, world_size)
    losses: list[float] = []
    norms: list[float] = []
    seen: list[Any] = []
    lengths: list[int] = []
    epoch = 0
    while epoch < drawn.epochs:
        if drawn.set_epoch:
            set_epoch(epoch)
        batches = epoch_batches()
        lengths.append(len(batches))  # len(iter(loader)): the epoch's micro-batches
        for group in steps(taken(batches, drawn.break_after), drawn.micro_batches):
            seen.extend(host(inputs).tolist() for inputs, _ in group)
            loss, norm = train_step(
                trainer.model, trainer.optimizer, group, summed_over, drawn.max_norm
            )
            losses.append(float(loss.addressable_data(0)))
            norms.append(float(norm.addressable_data(0)))
        if trainer.scheduler is not None:
            trainer.scheduler.step()
        epoch += 1
        if epoch == drawn.resume_after:
            checkpoint = trainer.checkpoint(epoch)
            if saves:
                torch.save(checkpoint, path)
            if mesh is not None:
                dist.barrier()
            trainer = Trainer(drawn, replicated, world_size)
            if drawn.resume_from == "torch":  # the checkpoint torch's DDP job saved
                path = folder / f"{name}-torch-resume.pt"
            epoch = trainer.resume(path)
    final = {
        key: np.asarray(tj.to_torch(value))
        for key, value in tj.state_dict(trainer.model, layout="torch").items()
    }
    final_path = folder / (f"{name}.pt" if mesh is not None else f"{name}-one-device-{rank}.pt")
    if saves:
        torch.save({key: torch.from_numpy(value) for key, value in final.items()}, final_path)
    if mesh is not None:
        dist.barrier()
    loaded = tj.load(final_path, map_location="cpu")
    return {
        "draw": name, "rank": rank, "variant": "port" if mesh is not None else "one-device",
        "losses": losses, "norms": norms, "batches": seen, "lengths": lengths,
        "state": plain(final),
        "optimizer": plain(optim.state_dict(trainer.optimizer, trainer.model)),
        "loaded_is_final": all(
            np.array_equal(np.asarray(loaded[key]), final[key]) for key in final
        ),
    }  # fmt: skip


def attempt(name: str, rank: int, variant: str, run: Any) -> dict[str, Any]:
    """``run()``'s result, or the error it raised (the job goes on to the next draw)."""
    try:
        result: dict[str, Any] = run()
        return result
    except Exception as error:  # reported, for the test to judge
        traceback.print_exc()
        message = f"{type(error).__name__}: {error}"
        return {"draw": name, "rank": rank, "variant": variant, "error": message}


def main() -> None:
    folder = Path(sys.argv[1])
    dist.init_process_group(backend="gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    mesh = dist.init_device_mesh("cpu", (jax.device_count(),), mesh_dim_names=("data",))
    for number, (name, drawn) in enumerate(read(folder).items()):
        on_mesh = functools.partial(train, name, drawn, rank, world_size, mesh, folder)
        report(attempt(name, rank, "port", on_mesh), folder, "port")
        if number % world_size == rank:
            alone = functools.partial(train, name, drawn, rank, world_size, None, folder)
            report(attempt(name, rank, "one-device", alone), folder, "port")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
