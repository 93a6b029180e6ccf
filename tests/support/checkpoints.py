"""Shared by the checkpoint tests (not a test module): a nanoGPT-shaped checkpoint, and
host buffers that make JAX's CPU backend copy instead of aliasing."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def nanogpt_checkpoint() -> dict[str, Any]:
    """What nanoGPT saves: model and optimizer state dicts, plus plain Python entries."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.arange(4)).sum().backward()
    optimizer.step()
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "model_args": {"n_layer": 2, "block_size": 8, "bias": False, "dropout": 0.0},
        "iter_num": 250,
        "best_val_loss": torch.tensor(2.75),
        "config": {"dataset": "shakespeare_char", "eval_only": False, "betas": (0.9, 0.95)},
    }


def misaligned_empty(nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """An uninitialized byte buffer starting 8 bytes past a 64-byte boundary.

    JAX's CPU backend copies such a buffer on ``device_put`` instead of using it in
    place: given as staging buffers, these make a CPU device behave as a GPU does.
    """
    raw = np.empty(nbytes + 128, np.uint8)
    start = -raw.ctypes.data % 64 + 8
    return raw[start : start + nbytes]
