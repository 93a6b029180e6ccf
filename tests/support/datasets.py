"""Datasets for the DataLoader tests, importable by spawned worker processes.

Spawned workers re-import the dataset's module by name, so the classes cannot live in
a test module; this module imports neither JAX nor torch2jax_device, so a worker that
imports it proves that batches are built without JAX.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import torch
from torch.utils.data import Dataset


class Squares(Dataset[dict[str, torch.Tensor]]):
    """Item ``i``: ``{"x": float32 [i, i*i], "index": int32 i}`` as torch tensors."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {
            "x": torch.tensor([index, index * index], dtype=torch.float32),
            "index": torch.tensor(index, dtype=torch.int32),
        }


class WorkerProbe(Dataset[dict[str, np.generic]]):
    """Item ``i``: ``i``, the pid of the process that built it, and whether JAX is loaded there."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, np.generic]:
        return {
            "index": np.int32(index),
            "pid": np.int32(os.getpid()),
            "jax_loaded": np.bool_("jax" in sys.modules),
        }
