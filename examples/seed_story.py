"""The seed story: a token file that fits in RAM but not on the accelerator.

``safetensors.flax.load_file`` puts every tensor on JAX's default device, the GPU, and a
19 GiB token file dies there with ``RESOURCE_EXHAUSTED``. The PyTorch habit is to load
onto the CPU and move each batch to the GPU; this script does that with
torch2jax_device, on a small generated file:

1. write a token file (``tj.save_file``);
2. make the compute device the default device, as a GPU training script would;
3. load the tokens onto the CPU anyway (``tj.load_file(path)``: CPU unless told
   otherwise and memory-mapped, like ``safetensors.torch.load_file``, so the load is
   instant and RAM fills only as batches read it), or read windows lazily
   (``tj.safe_open(path).get_slice(...)``);
4. move random ``(batch, block)`` windows to the compute device (``tj.to_device``)
   and run a jitted training step there.

Without an accelerator the compute device is a second simulated CPU device, so the
separation between data and compute still shows. Run:
``.venv/bin/python examples/seed_story.py``.
"""

from __future__ import annotations

import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

import torch2jax_device as tj
from torch2jax_device import load_file, safe_open, save_file

VOCAB, BATCH, BLOCK, STEPS, LEARNING_RATE = 512, 16, 64, 30, 500.0


def loss_fn(table: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    """A bigram model: a row of next-token logits per token."""
    logp = jax.nn.log_softmax(table[x])
    return -jnp.take_along_axis(logp, y[..., None], axis=-1).mean()


@jax.jit
def train_step(table: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    loss, grad = jax.value_and_grad(loss_fn)(table, x, y)
    return table - LEARNING_RATE * grad, loss


def main() -> None:
    if not tj.backends.cuda.is_built():  # never starts JAX, so this still applies:
        jax.config.update("jax_num_cpu_devices", 2)  # a second device to compute on
    compute = tj.device("cuda") if tj.cuda.is_available() else tj.device("cpu:1")
    tj.set_default_device(compute)  # what makes safetensors.flax load onto the GPU
    print(f"compute device:    {compute} (the default device: {tj.get_default_device()})")

    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "tokens.safetensors")
        rng = np.random.default_rng(0)
        # 4 Mi uint16 tokens = 8 MiB; a bigram pattern the model can learn.
        tokens = (np.arange(4 * 2**20) * 7 + rng.integers(0, 2, 4 * 2**20)) % VOCAB
        save_file({"tokens": tokens.astype(np.uint16)}, path, {"tokenizer": "toy"})

        data = load_file(path)["tokens"]  # onto the CPU, whatever the default device
        print(f"tokens:            {data.shape} {data.dtype} on {tj.device_of(data)}")
        host = np.asarray(data)  # a CPU array is host memory: this view copies nothing

        table = jnp.zeros((VOCAB, VOCAB))  # created on the default device: compute
        for step in range(STEPS):
            starts = rng.integers(0, len(host) - BLOCK - 1, BATCH)
            chunks = np.stack([host[s : s + BLOCK + 1] for s in starts])
            batch = tj.to_device({"x": chunks[:, :-1], "y": chunks[:, 1:]}, compute)
            table, loss = train_step(table, batch["x"].astype(jnp.int32), batch["y"])
            if step in (0, STEPS - 1):
                print(
                    f"step {step:2d}:           loss {float(loss):.3f}, batch "
                    f"{batch['x'].shape} on {tj.device_of(batch)}, model on {tj.device_of(table)}"
                )

        # Files larger than RAM: read just the windows, lazily.
        with safe_open(path) as f:
            lazy = f.get_slice("tokens")
            window = lazy[int(starts[0]) : int(starts[0]) + BLOCK + 1]
            print(f"lazy window:       {window.shape} on {tj.device_of(window)} of "
                  f"{lazy.get_shape()} {lazy.get_dtype()}, same tokens: "
                  f"{bool((np.asarray(window) == chunks[0]).all())}")  # fmt: skip
    tj.set_default_device(None)


if __name__ == "__main__":
    main()
