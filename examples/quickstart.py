"""Quickstart: the PyTorch device idioms of a training script, ported line by line.

Run with ``./scripts/demo.sh``. It prints what JAX sees on this machine and where each
array was placed. On a machine without a GPU everything lands on the CPU; with one,
the model goes to ``cuda:0`` while the dataset stays in host memory.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import torch2jax_device as tj


def main() -> None:
    # PyTorch: torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = tj.device("cuda" if tj.cuda.is_available() else "cpu")
    print(f"JAX backends here: {tj.available_backends()} (jax.devices() shows {jax.devices()})")
    print(f"every device:      {[str(d) for d in tj.list_devices()]}")
    print(f"compute device:    {device!r} -> {device.jax_device!r}")

    if tj.cuda.is_available():
        props = tj.cuda.get_device_properties()
        print(f"GPU:               {props.name}, compute capability {props.major}.{props.minor}")

    # PyTorch: with torch.device("cpu"): dataset = torch.randint(...)
    # The dataset is created in host memory even when the GPU is JAX's default.
    with tj.device("cpu"):
        tokens = jax.random.randint(jax.random.key(0), (1_000_000,), 0, 50_000)
    print(f"dataset:           {tokens.shape} {tokens.dtype} on {tokens.device}")

    # PyTorch: torch.set_default_device(device); weights = torch.randn(...)
    tj.set_default_device(device)
    weights = jax.random.normal(jax.random.key(1), (512, 512))
    print(f"weights:           created on {weights.device} (default {tj.get_default_device()})")
    tj.set_default_device(None)

    # PyTorch: batch = tokens[i:i+n].to(device); loss = model(batch)
    batch = jax.device_put(tokens[:4096].reshape(8, 512), device.jax_device)
    activations = jnp.tanh(batch.astype(weights.dtype) @ weights)
    activations.block_until_ready()
    print(f"activations:       {activations.shape} on {activations.device}")

    # PyTorch: torch.device("cuda:7") fails on use; here it fails with the fix.
    try:
        tj.resolve("cuda:7")
    except tj.DeviceUnavailableError as error:
        print(f"missing device:    {type(error).__name__}: {error}")


if __name__ == "__main__":
    main()
