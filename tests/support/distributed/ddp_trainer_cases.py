"""The DDP trainers both sides run: one model, one data set, a grid of loops.

Each case is one way a PyTorch DDP loop feeds and steps (``DistributedSampler``'s
``drop_last`` and padding, the DataLoader's short last batch, a data set smaller than
the job, gradient accumulation with ``no_sync``, ``SyncBatchNorm``), trained 2 epochs
with ``set_epoch``, clipped with ``clip_grad_norm_``. ``ddp_trainer_torch.py`` runs them
with torch's DDP (the oracle), ``ddp_trainer_port.py`` as ``docs/how-to/ddp.md``
teaches; the test compares what each rank saw and computed, step by step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

FEATURES, HIDDEN, CLASSES = 4, 8, 3
EPOCHS = 2
LR, MOMENTUM, MAX_NORM, SEED = 0.1, 0.9, 1.0, 3


class Case(NamedTuple):
    samples: int
    sampler_drop_last: bool
    batch_size: int
    loader_drop_last: bool
    shuffle: bool
    micro_batches: int  # per optimizer step: gradient accumulation under no_sync()
    batch_norm: bool = False
    summed: bool = False  # the loss is cross_entropy(reduction="sum")


CASES: dict[str, Case] = {
    "padded-short-last-accumulated": Case(13, False, 2, False, True, 2),
    "sampler-drops": Case(13, True, 2, False, True, 1),
    "loader-drops": Case(13, False, 3, True, False, 1),
    "odd-accumulation": Case(11, False, 2, False, True, 3),
    "fewer-samples-than-ranks": Case(1, False, 2, False, True, 1),
    "nothing-left-after-drop": Case(1, True, 2, False, True, 1),
    "summed-loss": Case(13, False, 2, True, True, 2, summed=True),
    "batch-norm": Case(13, False, 3, True, True, 2, batch_norm=True),
}


def data(samples: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(samples)
    x = rng.standard_normal((samples, FEATURES)).astype(np.float32)
    return x, rng.integers(0, CLASSES, samples).astype(np.int64)


def initial_weights() -> dict[str, np.ndarray]:
    """torch's names and layouts."""
    rng = np.random.default_rng(1)
    return {
        "fc1.weight": rng.standard_normal((HIDDEN, FEATURES)).astype(np.float32) * 0.5,
        "fc1.bias": rng.standard_normal(HIDDEN).astype(np.float32) * 0.1,
        "fc2.weight": rng.standard_normal((CLASSES, HIDDEN)).astype(np.float32) * 0.5,
        "fc2.bias": rng.standard_normal(CLASSES).astype(np.float32) * 0.1,
    }


def steps(micro: list[Any], per_step: int) -> list[list[Any]]:
    """The loop's micro-batches grouped into optimizer steps (the last group may be short)."""
    return [micro[start : start + per_step] for start in range(0, len(micro), per_step)]


def report(result: dict[str, Any], folder: Path, side: str) -> None:
    """One case's result, a line of ``folder/SIDE-RANK.jsonl``: ranks' long lines would
    interleave on a shared stdout."""
    with open(folder / f"{side}-{result['rank']}.jsonl", "a") as out:
        out.write(json.dumps(result) + "\n")
