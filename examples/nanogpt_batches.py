"""nanoGPT's ``get_batch``, ported: random windows of a host token file, fed ahead of the step.

nanoGPT (``train.py``) samples ``batch_size`` random windows of a ``np.memmap`` of
tokens and moves them to the GPU every step::

    data = np.memmap(os.path.join(data_dir, "train.bin"), dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy((data[i:i+block_size]).astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy((data[i+1:i+1+block_size]).astype(np.int64)) for i in ix])
    if device_type == "cuda":
        x = x.pin_memory().to(device, non_blocking=True)
        y = y.pin_memory().to(device, non_blocking=True)
    else:
        x, y = x.to(device), y.to(device)

Here the sampling stays plain NumPy on the host and ``tj.prefetch_to_device`` moves
the batches two steps ahead of a jitted training step; it runs the sampling in a
background thread when that pays (when the sampling and the step both take a quarter
of a millisecond or more), and in the loop's own thread, with no hand-off, when not. The
evaluation pass shows the DataLoader form: ``DeviceLoader`` over a torch DataLoader
with spawned worker processes and pinned staging. Runs on a CPU in a few seconds.

Run: ``.venv/bin/python examples/nanogpt_batches.py`` (``--steps N``: N training steps, 300
unless given).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from torch.utils.data import DataLoader, Dataset

import torch2jax_device as tj
from torch2jax_device import DeviceLoader, prefetch_to_device

VOCAB = 65  # nanoGPT's shakespeare_char vocabulary size
BLOCK_SIZE = 64
BATCH_SIZE = 32
LEARNING_RATE = 20.0


def write_tokens(path: Path, count: int, seed: int) -> None:
    """A token file like nanoGPT's ``train.bin``: uint16 tokens a bigram model can learn."""
    jumps = np.random.default_rng(seed).choice([1, 2, 3], size=count, p=[0.8, 0.15, 0.05])
    (np.cumsum(jumps) % VOCAB).astype(np.uint16).tofile(path)


def host_batches(path: Path, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """nanoGPT's ``get_batch`` without the device move: random windows, on the host."""
    rng = np.random.default_rng(seed)
    while True:
        data = np.memmap(path, dtype=np.uint16, mode="r")  # reopened per batch, as nanoGPT
        ix = rng.integers(len(data) - BLOCK_SIZE, size=BATCH_SIZE)
        x = np.stack([data[i : i + BLOCK_SIZE] for i in ix]).astype(np.int32)
        y = np.stack([data[i + 1 : i + 1 + BLOCK_SIZE] for i in ix]).astype(np.int32)
        yield x, y


class Windows(Dataset[tuple[np.ndarray, np.ndarray]]):
    """Consecutive windows of a token file, for evaluation with a torch DataLoader."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.length = (path.stat().st_size // 2 - 1) // BLOCK_SIZE

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        data = np.memmap(self.path, dtype=np.uint16, mode="r")
        start = index * BLOCK_SIZE
        window = data[start : start + BLOCK_SIZE + 1].astype(np.int32)
        return window[:-1], window[1:]


def loss_fn(table: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    """A bigram language model: logits of the next token are a row of ``table``."""
    logits = table[x]
    log_probs = jax.nn.log_softmax(logits)
    return -jnp.take_along_axis(log_probs, y[..., None], axis=-1).mean()


@jax.jit
def train_step(table: jax.Array, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    loss, grad = jax.value_and_grad(loss_fn)(table, x, y)
    return table - LEARNING_RATE * grad, loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps")
    steps = parser.parse_args().steps
    device = tj.device("cuda" if tj.cuda.is_available() else "cpu")
    with tempfile.TemporaryDirectory() as data_dir:
        train_bin, val_bin = Path(data_dir, "train.bin"), Path(data_dir, "val.bin")
        write_tokens(train_bin, 200_000, seed=0)
        write_tokens(val_bin, 20_000, seed=1)
        print(f"device:       {device}")
        print(f"tokens:       {train_bin.stat().st_size // 2} uint16 tokens, np.memmap on the host")

        table = tj.to_device(jnp.zeros((VOCAB, VOCAB), jnp.float32), device)
        # PyTorch: X, Y = get_batch("train"), before the loop and again after each step.
        batches = prefetch_to_device(host_batches(train_bin, seed=0), device, size=2)
        with contextlib.closing(batches):
            start = time.perf_counter()
            for step, (x, y) in enumerate(itertools.islice(batches, steps)):
                if step == 0:
                    placed = f"on {tj.device_of(x)}, committed={x.committed}"
                    print(f"train batch:  x {x.shape} {x.dtype} {placed}")
                table, loss = train_step(table, x, y)
                if step % 100 == 0 or step == steps - 1:
                    print(f"step {step:3d}:     loss {float(loss):.4f}")
            elapsed = time.perf_counter() - start
        print(f"train:        {steps} steps in {elapsed:.2f} s, batches prefetched 2 ahead")

        # PyTorch: for x, y in DataLoader(val, batch_size, num_workers=2, pin_memory=True):
        #              x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        workers = DataLoader(
            Windows(val_bin),
            batch_size=BATCH_SIZE,
            num_workers=2,
            multiprocessing_context="spawn",  # JAX is running: never fork it
        )
        val_loader = DeviceLoader(workers, device, pin_memory=True)
        losses = []
        for x, y in val_loader:
            losses.append(float(loss_fn(table, x, y)))
        print(
            f"eval:         {len(losses)} batches (len(loader) = {len(val_loader)}) from 2 "
            f"spawned DataLoader workers, pinned staging; x {x.shape} {x.dtype} on "
            f"{tj.device_of(x)}, loss {np.mean(losses):.4f}"
        )


if __name__ == "__main__":
    main()
