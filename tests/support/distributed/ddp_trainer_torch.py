"""torch's DDP trainer over every case of ``ddp_trainer_cases`` (run under torchrun)."""

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
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Net(torch.nn.Module):
    def __init__(self, batch_norm: bool, fc1_bias: bool = True) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(FEATURES, HIDDEN, bias=fc1_bias)
        self.bn = torch.nn.BatchNorm1d(HIDDEN) if batch_norm else None
        self.fc2 = torch.nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.fc1(x)
        if self.bn is not None:
            hidden = self.bn(hidden)
        return self.fc2(torch.relu(hidden))


def gathered(local: torch.Tensor, world_size: int) -> torch.Tensor:
    """Every rank's rows, in rank order: what the port's global batch holds."""
    rows = [torch.empty(0)] * world_size
    dist.all_gather_object(rows, local)
    return torch.cat(rows)


def train(name: str, rank: int, world_size: int, folder: Path, synced: bool) -> dict[str, Any]:
    """One case under DDP; ``synced``: batch norm over every rank's rows (SyncBatchNorm,
    which torch runs on GPUs only), as one process training on the gathered rows."""
    case = CASES[name]
    net = Net(case.batch_norm)
    state = net.state_dict()
    state.update({key: torch.from_numpy(value) for key, value in initial_weights().items()})
    net.load_state_dict(state)
    model = net if synced else DistributedDataParallel(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    x, y = data(case.samples)
    dataset = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    sampler = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=case.shuffle, seed=SEED,
        drop_last=case.sampler_drop_last,
    )  # fmt: skip
    loader = DataLoader(
        dataset, batch_size=case.batch_size, sampler=sampler, drop_last=case.loader_drop_last
    )
    reduction = "sum" if case.summed else "mean"
    losses, norms, batches = [], [], []
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for group in steps(list(loader), case.micro_batches):
            optimizer.zero_grad()
            total = torch.zeros(1)
            for index, (inputs, targets) in enumerate(group):
                batches.append(gathered(inputs, world_size).tolist())
                if synced:
                    inputs, targets = gathered(inputs, world_size), gathered(targets, world_size)
                last = index == len(group) - 1 or synced
                with contextlib.nullcontext() if last else model.no_sync():
                    logits = model(inputs)
                    loss = F.cross_entropy(logits, targets, reduction=reduction) / len(group)
                    loss.backward()
                total += loss.detach()
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)))
            optimizer.step()
            if not synced:
                dist.all_reduce(total, op=dist.ReduceOp.SUM)  # the loss every rank logs
                total /= world_size
            losses.append(total.item())
    if rank == 0:
        torch.save(net.state_dict(), folder / f"{name}.pt")
    dist.barrier()
    loaded = torch.load(folder / f"{name}.pt")
    final = net.state_dict()
    return {
        "case": name, "synced": synced, "rank": rank, "losses": losses, "norms": norms,
        "batches": batches,
        "state": {key: value.tolist() for key, value in final.items()},
        "loaded_is_final": all(torch.equal(loaded[key], final[key]) for key in final),
    }  # fmt: skip


def main() -> None:
    folder = Path(sys.argv[1])
    dist.init_process_group(backend="gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for name, case in CASES.items():
        report(train(name, rank, world_size, folder, synced=False), folder, "torch")
        if case.batch_norm:  # also SyncBatchNorm's answer
            report(train(name, rank, world_size, folder, synced=True), folder, "torch")
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # gloo's threads may abort the interpreter's teardown (docs/distributed.md)


if __name__ == "__main__":
    np.seterr(all="raise")
    main()
