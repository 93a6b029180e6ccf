"""A mixed codebase: the PyTorch data pipeline and encoder stay, the model is JAX.

A ``torch.utils.data.DataLoader`` keeps producing torch tensors (the project's
existing Dataset, transforms and collate function) and a frozen torch encoder keeps
running in torch. One ``device = tj.device(...)`` serves both frameworks: torch code
takes ``device.torch_device``, ``tj.to_device`` takes the device itself and moves each
batch to the JAX model's device, zero-copy from torch's memory where it can. The JAX
step is ``tj.strict_placement``: a batch left on the host would raise torch's "same
device" error instead of being moved silently. torch's int64 labels become int32 (JAX
without x64), which torch2jax_device warns about once. Runs on CPU in seconds:
``.venv/bin/python examples/mixed_codebase.py``.
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


@tj.strict_placement  # every argument on the model's device, as torch demands
@nnx.jit
def train_step(
    model: Classifier, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array
) -> jax.Array:
    def loss_fn(model: Classifier) -> jax.Array:
        return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def frozen_encoder(device: tj.Device) -> torch.nn.Module:
    """The project's pretrained torch feature extractor (here: a fixed rotation)."""
    encoder = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        encoder.weight.copy_(torch.tensor([[0.6, -0.8], [0.8, 0.6]]))
    return encoder.to(device.torch_device).eval()  # a torch module moves within torch


def main() -> None:
    device = tj.device("cuda" if tj.cuda.is_available() else "cpu")
    model = tj.to_device(Classifier(nnx.Rngs(0)), device)
    print(f"model on {next(tj.parameters(model)).device}")  # next(model.parameters()).device
    # Placed with the model (its step counter too), the training step compiles once.
    optimizer = tj.to_device(nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param), device)
    loader = DataLoader(Points(2048), batch_size=64, shuffle=True)
    encoder = frozen_encoder(device)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", tj.DtypeNarrowingWarning)
        for epoch in range(3):
            for batch in loader:  # {"x": torch.float32, "y": torch.int64}
                with torch.no_grad():
                    features = encoder(batch["x"].to(device.torch_device))
                batch = tj.to_device({"x": features, "y": batch["y"]}, device)  # was: .to(device)
                loss = train_step(model, optimizer, batch["x"], batch["y"])
            print(f"epoch {epoch}: loss {float(loss):.3f}, batch on {tj.device_of(batch)}, "
                  f"labels {batch['y'].dtype}")  # fmt: skip
    for warning in caught:
        print(f"warned once: {warning.message}")

    with torch.no_grad():
        points = tj.to_device(encoder(Points(512).x.to(device.torch_device)), device)
    labels = Points(512).y.numpy()
    accuracy = (model(points).argmax(-1) == jnp.asarray(labels)).mean()
    print(f"accuracy {float(accuracy):.3f}; torch tensor -> JAX on {tj.device_of(points)}")
    try:  # a host batch is never moved to an accelerator behind your back
        train_step(model, optimizer, Points(4).x.numpy(), jnp.zeros(4, jnp.int32))
        print(f"strict placement: host data meets a model on {device}: one device, as in torch")
    except tj.MixedDeviceError as error:
        print(f"strict placement: {str(error).split('!')[0]}!")


if __name__ == "__main__":
    main()
