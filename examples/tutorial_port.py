"""examples/tutorial_torch.py ported to JAX: Flax NNX for the model, torch2jax_device for
the devices. docs/tutorial.md walks through the port line by line.

What changed: the ``nn.Module`` became an ``nnx.Module`` and the step a function under
``nnx.jit`` (the compute); ``torch.device``, ``.to(device)``, ``torch.load`` and
``torch.cuda.is_available()`` became their ``tj`` counterparts (the devices). What did
not: the dataset and the ``DataLoader`` stay torch's, on the CPU, and the checkpoints
stay torch's files, so this script starts from the same ``start.pt`` as the original,
sees the same batches and prints the same losses:

    python examples/tutorial_port.py --resume start.pt --save jax_model.pt
"""

from __future__ import annotations

import argparse
import warnings

import jax
import optax
import torch
from flax import nnx
from torch.utils.data import DataLoader
from tutorial_torch import CLASSES, FEATURES, HIDDEN, make_dataset

import torch2jax_device as tj

# The labels are int64 class indices (torch's habit); JAX without x64 keeps them as
# int32, which holds any class index. tj warns once about the narrowing: we know.
warnings.filterwarnings("ignore", category=tj.DtypeNarrowingWarning)


class Classifier(nnx.Module):  # class Classifier(nn.Module)
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.hidden = nnx.Linear(FEATURES, HIDDEN, rngs=rngs)  # nn.Linear(FEATURES, HIDDEN)
        self.norm = nnx.LayerNorm(HIDDEN, epsilon=1e-5, rngs=rngs)  # torch's eps, not Flax's 1e-6
        self.out = nnx.Linear(HIDDEN, CLASSES, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:  # def forward(self, x)
        return self.out(nnx.relu(self.norm(self.hidden(x))))


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:  # F.cross_entropy
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


@nnx.jit
def train_step(model: Classifier, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array):
    loss, grads = nnx.value_and_grad(lambda model: cross_entropy(model(x), y))(model)
    optimizer.update(model, grads)  # optimizer.zero_grad(); loss.backward(); optimizer.step()
    return loss


@nnx.jit
def eval_step(model: Classifier, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    logits = model(x)
    return cross_entropy(logits, y) * len(y), (logits.argmax(-1) == y).sum()


def evaluate(model: Classifier, loader: DataLoader, device: tj.Device) -> tuple[float, float]:
    total_loss, correct, count = 0.0, 0, 0
    for x, y in tj.DeviceLoader(loader, device):  # x, y = x.to(device), y.to(device)
        batch_loss, batch_correct = eval_step(model, x, y)
        total_loss += float(batch_loss)
        correct += int(batch_correct)
        count += len(y)
    return total_loss / count, correct / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--resume", help="a torch state dict to start from")
    parser.add_argument("--save", help="where to save the state dict, torch's layout")
    args = parser.parse_args()

    device = tj.device("cuda" if tj.cuda.is_available() else "cpu")
    model = tj.to_device(Classifier(nnx.Rngs(0)), device)  # Classifier().to(device)
    if args.resume:  # model.load_state_dict(torch.load(args.resume, map_location=device))
        model = tj.load_state(model, args.resume)
    # Placed with the model (its step counter too), the training step compiles once.
    optimizer = tj.to_device(
        nnx.Optimizer(model, optax.sgd(0.05, momentum=0.9), wrt=nnx.Param), device
    )

    shuffle = torch.Generator().manual_seed(0)  # the same batches as the original
    train = DataLoader(make_dataset(2048, seed=1), batch_size=64, shuffle=True,
                       generator=shuffle)  # fmt: skip
    test = DataLoader(make_dataset(512, seed=2), batch_size=256)

    for epoch in range(args.epochs):
        # for x, y in train: x, y = x.to(device, non_blocking=True), ...
        for step, (x, y) in enumerate(tj.DeviceLoader(train, device, pin_memory=True)):
            loss = train_step(model, optimizer, x, y)
            print(f"epoch {epoch} step {step} loss {float(loss):.6f}")
        eval_loss, accuracy = evaluate(model, test, device)
        print(f"epoch {epoch} eval loss {eval_loss:.6f} accuracy {accuracy:.4f}")
    if args.save:  # torch.save(model.state_dict(), args.save)
        torch.save(tj.state_dict(model, layout="torch"), args.save)
        print(f"saved {args.save}")
    print(f"trained on {tj.device_of(model)}")


if __name__ == "__main__":
    main()
