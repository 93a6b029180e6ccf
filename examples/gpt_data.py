"""The data side of the GPT trainer, shared by the PyTorch original and its port (NumPy only).

nanoGPT keeps its data apart from ``train.py``: ``data/<name>/prepare.py`` writes
``train.bin`` and ``val.bin`` (uint16 tokens) and ``get_batch`` samples windows from
them. Both trainers (``gpt_ddp_torch.py`` and ``gpt_ddp_port.py``) read their batches
from here, so the only difference between them is the framework.

One change from nanoGPT: every rank draws the *global* batch's window positions from
a generator seeded by the step and keeps its own rows (``DistributedSampler``'s rule),
where nanoGPT seeds each rank differently. The training is the same, and a run on one
process sees exactly the batch two processes see together, which the tests compare.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

VOCAB_SIZE = 64


def prepare(data_dir: Path, tokens: int = 50_000) -> None:
    """``prepare.py``: ``train.bin`` and ``val.bin`` of uint16 tokens a small GPT can learn."""
    data_dir.mkdir(parents=True, exist_ok=True)
    for split, seed in (("train", 0), ("val", 1)):
        steps = np.random.default_rng(seed).choice([1, 2, 3], size=tokens, p=[0.8, 0.15, 0.05])
        (np.cumsum(steps) % VOCAB_SIZE).astype(np.uint16).tofile(data_dir / f"{split}.bin")


def get_batch(
    data_dir: Path,
    split: str,
    step: int,
    micro_step: int,
    rank: int,
    world_size: int,
    batch_size: int,
    block_size: int,
) -> tuple[np.ndarray, np.ndarray]:
    """This rank's ``batch_size`` windows of ``split``: inputs and next-token targets (uint16)."""
    data = np.memmap(data_dir / f"{split}.bin", dtype=np.uint16, mode="r")
    rng = np.random.default_rng([step, micro_step, split == "val"])
    starts = rng.integers(len(data) - block_size, size=batch_size * world_size)
    mine = starts[rank * batch_size : (rank + 1) * batch_size]
    x = np.stack([data[i : i + block_size] for i in mine])
    y = np.stack([data[i + 1 : i + 1 + block_size] for i in mine])
    return x, y
