"""The classic PyTorch MNIST script, ported line by line to torch2jax_device + Flax NNX.

The data is synthesized (no downloads): 28x28 "digits" whose label is decided by which
of ten fixed stroke patterns they are closest to, so the model has something to learn.
Each ported line keeps its PyTorch original in a comment. Runs on CPU in seconds:
``.venv/bin/python examples/mnist_port.py`` (``--epochs``, ``--train-size`` and
``--batch-size`` make the run shorter or longer).
"""

from __future__ import annotations

import argparse

import jax
import numpy as np
import optax
from flax import nnx

import torch2jax_device as tj


class Net(nnx.Module):  # class Net(nn.Module)
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.conv1 = nnx.Conv(1, 16, (3, 3), rngs=rngs)  # nn.Conv2d(1, 16, 3)
        self.conv2 = nnx.Conv(16, 32, (3, 3), rngs=rngs)  # nn.Conv2d(16, 32, 3)
        self.fc = nnx.Linear(7 * 7 * 32, 10, rngs=rngs)  # nn.Linear(7 * 7 * 32, 10)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = nnx.max_pool(nnx.relu(self.conv1(x)), (2, 2), (2, 2))
        x = nnx.max_pool(nnx.relu(self.conv2(x)), (2, 2), (2, 2))
        return self.fc(x.reshape(x.shape[0], -1))


def synthetic_mnist(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 28, 28, 1) float32 and labels (N,) int32, on the host (NumPy)."""
    rng = np.random.default_rng(seed)
    patterns = np.random.default_rng(0).normal(size=(10, 28, 28)).astype(np.float32)
    labels = rng.integers(0, 10, size=count).astype(np.int32)
    images = patterns[labels] + rng.normal(scale=1.5, size=(count, 28, 28)).astype(np.float32)
    return images[..., None], labels


def batches(images: np.ndarray, labels: np.ndarray, size: int, seed: int):  # DataLoader
    order = np.random.default_rng(seed).permutation(len(labels))
    for start in range(0, len(order) - size + 1, size):
        index = order[start : start + size]
        yield {"image": images[index], "label": labels[index]}


@nnx.jit
def train_step(model: Net, optimizer: nnx.Optimizer, batch: dict[str, jax.Array]) -> jax.Array:
    def loss_fn(model: Net) -> jax.Array:  # F.cross_entropy(model(data), target)
        logits = model(batch["image"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)  # loss.backward()
    optimizer.update(model, grads)  # optimizer.step()
    return loss


@nnx.jit
def accuracy(model: Net, batch: dict[str, jax.Array]) -> jax.Array:
    return (model(batch["image"]).argmax(-1) == batch["label"]).mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--train-size", type=int, default=4096, help="training images")
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()
    # device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = tj.device("cuda" if tj.cuda.is_available() else "cpu")
    # model = Net().to(device)
    model = tj.to_device(Net(nnx.Rngs(0)), device)
    # optimizer = optim.Adam(model.parameters(), lr=1e-3)
    # Placed with the model (its step counter too), the training step compiles once.
    optimizer = tj.to_device(nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param), device)
    print(f"model on {tj.device_of(model)}; parameters: "
          f"{sum(p.size for p in tj.parameters(model))}")  # fmt: skip

    # The dataset stays in host memory, as torchvision's does.
    train_images, train_labels = synthetic_mnist(args.train_size, seed=1)
    test_images, test_labels = synthetic_mnist(512, seed=2)
    for epoch in range(args.epochs):
        for step, batch in enumerate(
            batches(train_images, train_labels, args.batch_size, seed=epoch)
        ):
            # data, target = data.to(device), target.to(device)
            batch = tj.to_device(batch, device)
            loss = train_step(model, optimizer, batch)
            if step % 16 == 0:
                print(f"epoch {epoch} step {step:2d} loss {float(loss):.3f}")
    test = tj.to_device({"image": test_images, "label": test_labels}, device)
    print(f"test accuracy {float(accuracy(model, test)):.3f} on {tj.device_of(test)}")


if __name__ == "__main__":
    main()
