"""A small PyTorch training script: the starting point of docs/tutorial.md.

It does what most training scripts do: the dataset lives in host memory and a
``DataLoader`` cuts it into shuffled batches; the model goes to the GPU when there is
one and starts from a checkpoint; each batch moves to the model's device; every epoch
ends with an evaluation; the weights are saved at the end. The data is synthetic (no
download): points in 16 dimensions whose class is the nearest of four centres.

    python examples/tutorial_torch.py --epochs 0 --save start.pt      # a first checkpoint
    python examples/tutorial_torch.py --resume start.pt --save torch_model.pt

``examples/tutorial_port.py`` is the same script on JAX, ported with torch2jax_device.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

FEATURES, CLASSES, HIDDEN = 16, 4, 64


def make_dataset(count: int, seed: int) -> TensorDataset:
    """``count`` points near one of four fixed centres, labelled by that centre."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(0).normal(size=(CLASSES, FEATURES))
    labels = rng.integers(0, CLASSES, size=count)
    points = centres[labels] + rng.normal(scale=1.2, size=(count, FEATURES))
    return TensorDataset(torch.tensor(points, dtype=torch.float32), torch.tensor(labels))


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(FEATURES, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN)
        self.out = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.relu(self.norm(self.hidden(x))))


def evaluate(model: nn.Module, loader: DataLoader, device: torch.device) -> tuple[float, float]:
    model.eval()
    total_loss, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            logits = model(x)
            total_loss += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(-1) == y).sum().item()
            count += len(y)
    model.train()
    return total_loss / count, correct / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--resume", help="a state dict to start from")
    parser.add_argument("--save", help="where to save the state dict at the end")
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = Classifier().to(device)
    if args.resume:
        model.load_state_dict(torch.load(args.resume, map_location=device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    shuffle = torch.Generator().manual_seed(0)  # the same batches on every run
    train = DataLoader(make_dataset(2048, seed=1), batch_size=64, shuffle=True,
                       generator=shuffle, pin_memory=torch.cuda.is_available())  # fmt: skip
    test = DataLoader(make_dataset(512, seed=2), batch_size=256)

    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(train):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(f"epoch {epoch} step {step} loss {loss.item():.6f}")
        eval_loss, accuracy = evaluate(model, test, device)
        print(f"epoch {epoch} eval loss {eval_loss:.6f} accuracy {accuracy:.4f}")
    if args.save:
        torch.save(model.state_dict(), args.save)
        print(f"saved {args.save}")


if __name__ == "__main__":
    main()
