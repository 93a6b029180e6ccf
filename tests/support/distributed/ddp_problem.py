"""The small data-parallel problem both worker scripts solve, in NumPy only.

Each rank contributes values that depend on its rank, and trains one step of a
linear model on its ``DistributedSampler`` shard of a fixed dataset. The torch
worker and the torch2jax_device worker read everything from here, so the only
difference between their results is the framework.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

DATASET_ROWS = 16
IN_FEATURES, OUT_FEATURES = 3, 2
# How long rank 1 dawdles before the barrier; rank 0 must wait about that long.
BARRIER_DELAY_S = 1.0


def per_rank_values(rank: int) -> dict[str, np.ndarray]:
    """What each rank reduces: floats and ints that differ from rank to rank."""
    return {
        "float": np.array([rank + 1.5, -2.0 * rank, 10.0 * (rank + 1)], dtype=np.float32),
        "int": np.array([rank + 1, 7 * rank - 3], dtype=np.int32),
    }


def initial_weights() -> tuple[np.ndarray, np.ndarray]:
    """The linear model's starting weight (out, in) and bias, the same on every rank."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((OUT_FEATURES, IN_FEATURES)).astype(np.float32)
    bias = rng.standard_normal(OUT_FEATURES).astype(np.float32)
    return weight, bias


def dataset() -> tuple[np.ndarray, np.ndarray]:
    """Inputs and regression targets, the same on every rank."""
    rng = np.random.default_rng(1)
    inputs = rng.standard_normal((DATASET_ROWS, IN_FEATURES)).astype(np.float32)
    targets = rng.standard_normal((DATASET_ROWS, OUT_FEATURES)).astype(np.float32)
    return inputs, targets


def report(result: dict[str, Any], marker: str = "RESULT ") -> None:
    """Print one worker's result as the single line the tests look for, after ``marker``."""
    print(marker + json.dumps(result, sort_keys=True), flush=True)
