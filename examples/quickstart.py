"""Quickstart: the PyTorch device idioms of a training script, ported line by line.

Run with ``./scripts/demo.sh``. It prints what JAX sees on this machine and where each
array was placed. On a machine without a GPU everything lands on the CPU; with one,
the model and batches go to ``cuda:0`` while the dataset stays in host memory.
"""

from __future__ import annotations

import textwrap

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import torch2jax_device as tj


class Model(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Embed(50_000, 64, rngs=rngs)
        self.head = nnx.Linear(64, 50_000, rngs=rngs)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        return self.head(self.embed(tokens).mean(axis=1))


def main() -> None:
    # PyTorch: device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = tj.device("cuda" if tj.cuda.is_available() else "cpu")
    print(f"JAX backends here: {tj.available_backends()} (jax.devices() shows {jax.devices()})")
    print(f"every device:      {[str(d) for d in tj.list_devices()]}")
    print(f"compute device:    {device!r} -> {device.jax_device!r}")
    if tj.cuda.is_available():
        props = tj.cuda.get_device_properties()
        print(f"GPU:               {props.name}, compute capability {props.major}.{props.minor}")

    # PyTorch: with torch.device("cpu"): tokens = torch.randint(...)
    # The dataset is created in host memory even when the GPU is JAX's default device.
    with tj.device("cpu"):
        tokens = jax.random.randint(jax.random.key(0), (1_000_000,), 0, 50_000)
    print(f"dataset:           {tokens.shape} {tokens.dtype} on {tj.device_of(tokens)}")

    # PyTorch: model = Model().to(device); device = next(model.parameters()).device
    # A JAX array's .device is JAX's device object; tj.device_of names it torch's way.
    model = tj.to_device(Model(nnx.Rngs(0)), device)
    device = next(tj.parameters(model)).device
    print(f"model:             parameters on {device} (JAX's object: {device.jax_device!r})")

    # PyTorch: batch = {"tokens": tokens[i:i + n], "step": step}; batch = batch.to(device)
    rows = np.random.default_rng(0).integers(0, tokens.shape[0] - 128, size=8)
    batch = {"tokens": np.stack([np.asarray(tokens[r : r + 128]) for r in rows]), "step": 0}
    batch = tj.to_device(batch, device)
    logits = jax.jit(lambda m, t: m(t))(model, batch["tokens"])
    print(
        f"batch:             {batch['tokens'].shape} on {tj.device_of(batch)}, step={batch['step']}"
    )
    print(f"logits:            {logits.shape} {logits.dtype} on {tj.device_of(logits)}")

    # PyTorch: model.to(torch.bfloat16)
    tj.to_device(model, jnp.bfloat16)
    print(f"bf16 model:        {next(tj.parameters(model)).dtype} on {tj.device_of(model)}")

    # PyTorch: a GPU index this machine lacks fails on first use. Here it fails when
    # resolved, and the error names what exists and how to get the rest.
    missing = f"cuda:{tj.cuda.device_count()}"  # one past the last GPU, on any machine
    try:
        tj.resolve(missing)
    except tj.DeviceUnavailableError as error:
        print(f"missing device:    {missing} is not here, as expected: tj.resolve raises")
        print(f"                   {type(error).__name__} (torch raises too), with the fix:")
        print(_indent(str(error)))


def _indent(text: str) -> str:
    lines = textwrap.wrap(text, 80, break_long_words=False, break_on_hyphens=False)
    return textwrap.indent("\n".join(lines), " " * 19)


if __name__ == "__main__":
    main()
