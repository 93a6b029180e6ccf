"""A whole PyTorch trainer: the original that examples/trainer_port.py ports.

A small CNN with BatchNorm, SGD with momentum and weight decay, StepLR, a checkpoint
``{"model", "optimizer", "scheduler", "epoch"}`` after every epoch and ``--resume``,
as pytorch/examples' ImageNet trainer has them, on a synthetic dataset so that it runs
anywhere in seconds. One ``summary: {...}`` line at the end: the loss of every step.

    python examples/trainer_torch.py --epochs 4 --out-dir runs/torch
    python examples/trainer_torch.py --epochs 4 --resume runs/port/checkpoint-2.pt
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

SAMPLES, BATCH, CLASSES = 64, 16, 10


def dataset() -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 1, 8, 8) and labels, the same on every run and in the port."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, CLASSES, SAMPLES)
    images = rng.standard_normal((SAMPLES, 1, 8, 8)).astype(np.float32)
    images += labels[:, None, None, None].astype(np.float32) / CLASSES  # learnable
    return images, labels


def epoch_order(epoch: int) -> np.ndarray:
    """The sample order of an epoch (a seeded shuffle), the same in the port."""
    return np.random.default_rng(1000 + epoch).permutation(SAMPLES)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(x.mean(dim=(2, 3)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--resume", default="")
    parser.add_argument("--out-dir", default="runs/torch")
    parser.add_argument("--save-init", default="", help="write the initial weights here")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = Net()
    if args.save_init:
        torch.save(model.state_dict(), args.save_init)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    start_epoch = 0
    if args.resume:
        checkpoint = torch.load(args.resume)
        start_epoch = checkpoint["epoch"]
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])

    images, labels = dataset()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    losses, rates = [], []
    for epoch in range(start_epoch, args.epochs):
        model.train()
        rates.append(scheduler.get_last_lr()[0])
        order = epoch_order(epoch)
        for start in range(0, SAMPLES, BATCH):
            rows = order[start : start + BATCH]
            x, y = torch.from_numpy(images[rows]), torch.from_numpy(labels[rows])
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
        torch.save(
            {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "scheduler": scheduler.state_dict(), "epoch": epoch + 1},
            out / f"checkpoint-{epoch + 1}.pt",
        )  # fmt: skip
    print("summary: " + json.dumps({"rank": 0, "losses": losses, "lrs": rates}), flush=True)


if __name__ == "__main__":
    main()
