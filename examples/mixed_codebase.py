"""A mixed codebase: the PyTorch data pipeline stays, the model is JAX.

A ``torch.utils.data.DataLoader`` keeps producing torch tensors (the project's
existing Dataset, transforms and collate function); ``tj.to_device`` moves each batch
to the JAX model's device, zero-copy from torch's CPU memory where it can. torch's
int64 labels become int32 (JAX without x64), which torch2jax_device warns about once.
Runs on CPU in seconds: ``.venv/bin/python examples/mixed_codebase.py``.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import optax
import torch
from flax import nnx
from torch.utils.data import DataLoader, Dataset

import torch2jax_device as tj


class Points(Dataset[dict[str, torch.Tensor]]):
    """The existing PyTorch dataset: 2-D points labelled by the side of a line."""

    def __init__(self, count: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(count, 2, generator=generator)
        self.y = (self.x[:, 0] + 0.5 * self.x[:, 1] > 0).long()  # int64, torch's default

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[index], "y": self.y[index]}


class Classifier(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.hidden = nnx.Linear(2, 16, rngs=rngs)
        self.out = nnx.Linear(16, 2, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(nnx.relu(self.hidden(x)))


@nnx.jit
def train_step(
    model: Classifier, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array
) -> jax.Array:
    def loss_fn(model: Classifier) -> jax.Array:
        return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def main() -> None:
    device = tj.device("cuda" if tj.cuda.is_available() else "cpu")
    model = tj.to_device(Classifier(nnx.Rngs(0)), device)
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    loader = DataLoader(Points(2048), batch_size=64, shuffle=True)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", tj.DtypeNarrowingWarning)
        for epoch in range(3):
            for batch in loader:  # {"x": torch.float32, "y": torch.int64}
                batch = tj.to_device(batch, device)  # was: {k: v.to(device) ...}
                loss = train_step(model, optimizer, batch["x"], batch["y"])
            print(f"epoch {epoch}: loss {float(loss):.3f}, batch on {tj.device_of(batch)}, "
                  f"labels {batch['y'].dtype}")  # fmt: skip
    for warning in caught:
        print(f"warned once: {warning.message}")

    points = tj.to_device(Points(512).x, device)
    labels = Points(512).y.numpy()
    accuracy = (model(points).argmax(-1) == jnp.asarray(labels)).mean()
    print(f"accuracy {float(accuracy):.3f}; torch tensor -> JAX on {tj.device_of(points)}")


if __name__ == "__main__":
    main()
