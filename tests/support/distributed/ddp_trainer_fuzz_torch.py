"""torch's DDP over every draw of ``FOLDER/draws.json`` (run under torchrun): the oracle.

Usage: ``ddp_trainer_fuzz_torch.py FOLDER``. Each draw (``ddp_trainer_fuzz.TrainerDraw``)
trains ``ddp_trainer_torch.Net`` under ``DistributedDataParallel`` on gloo and writes a
line of ``FOLDER/torch-RANK.jsonl``: each micro-batch's global batch (every rank's rows,
in rank order), each step's loss (the ranks' mean, as a DDP script all-reduces it to log)
and gradient norm before clipping, the model's and optimizer's state dicts at the end,
and whether rank 0's final checkpoint loads as the model it saved.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from ddp_trainer_cases import SEED, data, initial_weights, report, steps
from ddp_trainer_fuzz import (
    OPTIMIZERS,
    RANK_OWN,
    SCHEDULERS,
    TrainerDraw,
    plain,
    read,
    taken,
)
from ddp_trainer_torch import Net, gathered
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Trainer:
    """A fresh model, optimizer and scheduler, as a script builds them before its loop."""

    def __init__(self, drawn: TrainerDraw) -> None:
        self.net = Net(drawn.batch_norm, fc1_bias=not drawn.batch_norm)
        state = self.net.state_dict()
        state.update(
            {
                key: torch.from_numpy(value)
                for key, value in initial_weights().items()
                if key in state
            }
        )
        self.net.load_state_dict(state)
        self.model = DistributedDataParallel(self.net)
        name = drawn.optimizer
        kind = {"sgd": "SGD", "momentum": "SGD", "adam": "Adam", "adamw": "AdamW"}[name]
        self.optimizer = getattr(torch.optim, kind)(self.model.parameters(), **OPTIMIZERS[name])
        self.scheduler: Any = None
        if drawn.scheduler is not None:
            scheduler, arguments = SCHEDULERS[drawn.scheduler]
            if scheduler == "CosineAnnealingLR":
                arguments = {"T_max": drawn.epochs}
            self.scheduler = getattr(torch.optim.lr_scheduler, scheduler)(
                self.optimizer, **arguments
            )

    def checkpoint(self, epoch: int) -> dict[str, Any]:
        return {
            "model": self.net.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
            "epoch": epoch,
        }

    def resume(self, checkpoint: dict[str, Any]) -> int:
        self.net.load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(checkpoint["scheduler"])
        return int(checkpoint["epoch"])


def train(
    name: str, drawn: TrainerDraw, rank: int, world_size: int, folder: Path
) -> dict[str, Any]:
    x, y = data(drawn.samples)
    dataset = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=drawn.shuffle, seed=SEED,
        drop_last=drawn.sampler_drop_last,
    )  # fmt: skip
    loader = DataLoader(
        dataset, batch_size=drawn.batch_size, sampler=sampler, drop_last=drawn.loader_drop_last
    )
    trainer = Trainer(drawn)
    losses: list[float] = []
    norms: list[float] = []
    batches: list[Any] = []
    lengths: list[int] = []
    epoch = 0
    while epoch < drawn.epochs:
        if drawn.set_epoch:
            sampler.set_epoch(epoch)
        lengths.append(len(iter(loader)))
        for group in steps(taken(loader, drawn.break_after), drawn.micro_batches):
            step(trainer, drawn, group, world_size, losses, norms, batches)
        if trainer.scheduler is not None:
            trainer.scheduler.step()
        epoch += 1
        if epoch == drawn.resume_after:  # rank 0 saves; every rank resumes a fresh trainer
            path = folder / f"{name}-torch-resume.pt"  # the port may resume from it too
            if rank == 0:
                torch.save(trainer.checkpoint(epoch), path)
            dist.barrier()
            trainer = Trainer(drawn)
            epoch = trainer.resume(torch.load(path))
    final = trainer.net.state_dict()
    if rank == 0:
        torch.save(final, folder / f"{name}.pt")
    dist.barrier()
    loaded = torch.load(folder / f"{name}.pt")
    return {
        "draw": name, "rank": rank, "losses": losses, "norms": norms, "batches": batches,
        "lengths": lengths,
        "state": plain(final), "optimizer": plain(trainer.optimizer.state_dict()),
        "loaded_is_final": all(
            torch.equal(loaded[key], final[key])
            for key in final
            if rank == 0 or key not in RANK_OWN  # DDP leaves rank 1 its own statistics
        ),
    }  # fmt: skip


def step(
    trainer: Trainer,
    drawn: TrainerDraw,
    group: list[Any],
    world_size: int,
    losses: list[float],
    norms: list[float],
    batches: list[Any],
) -> None:
    """One optimizer step over the group's micro-batches, all but the last under no_sync."""
    trainer.optimizer.zero_grad()
    total = torch.zeros(1)
    for index, (inputs, targets) in enumerate(group):
        batches.append(gathered(inputs, world_size).tolist())
        last = index == len(group) - 1
        with contextlib.nullcontext() if last else trainer.model.no_sync():
            logits = trainer.model(inputs)
            loss = F.cross_entropy(logits, targets, reduction=drawn.reduction) / len(group)
            loss.backward()
        total += loss.detach()
    parameters = list(trainer.model.parameters())
    if drawn.max_norm is None:
        norm = torch.nn.utils.get_total_norm([p.grad for p in parameters if p.grad is not None])
    else:
        norm = torch.nn.utils.clip_grad_norm_(parameters, drawn.max_norm)
    norms.append(float(norm))
    trainer.optimizer.step()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)  # the loss every rank logs
    losses.append((total / world_size).item())


def main() -> None:
    folder = Path(sys.argv[1])
    dist.init_process_group(backend="gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for name, drawn in read(folder).items():
        report(train(name, drawn, rank, world_size, folder), folder, "torch")
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # gloo's threads may abort the interpreter's teardown (docs/distributed.md)


if __name__ == "__main__":
    np.seterr(all="raise")
    main()
