"""Shared by the checkpoint tests (not a test module): a nanoGPT-shaped checkpoint, and
host buffers that make JAX's CPU backend copy instead of aliasing.

torch is imported by the functions that use it: ``misaligned_empty`` serves tests and
measuring subprocesses that never import torch (2.4 s of CPU each time).
"""

from __future__ import annotations

import contextlib
import io
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest


def nanogpt_checkpoint() -> dict[str, Any]:
    """What nanoGPT saves: model and optimizer state dicts, plus plain Python entries."""
    import torch

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


# ----------------------------------------------------- torch.load's inputs (torchckpt)


def saved_bytes(obj: Any, location: str | None = None) -> bytes:
    """``torch.save(obj)`` as bytes; ``location`` tags every storage as a save there does.

    A checkpoint "saved on cuda:0" is made on a CPU machine by letting ``torch.save`` tag
    its storages ``cuda:0``, which is all a GPU save changes.
    """
    import torch

    buffer = io.BytesIO()
    with contextlib.ExitStack() as stack:
        if location is not None:
            patch = stack.enter_context(pytest.MonkeyPatch.context())
            patch.setattr(torch.serialization, "location_tag", lambda storage: location)
        torch.save(obj, buffer)
    return buffer.getvalue()


def nested_lists(depth: int, leaf: Any) -> list[Any]:
    """``[[[...[leaf]...]]]``, ``depth`` lists deep, built without recursion."""
    outer: list[Any] = []
    inner = outer
    for _ in range(depth - 1):
        inner.append([])
        inner = inner[0]
    inner.append(leaf)
    return outer


def save_deep(obj: Any, path: Path) -> None:
    """``torch.save`` of deeply nested data: pickling recurses, so allow it to, briefly."""
    import torch

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        torch.save(obj, path)
    finally:
        sys.setrecursionlimit(limit)


def odd_tensors() -> dict[str, Any]:
    """Tensors of every kind ``torch.load(weights_only=True)`` returns beyond dense ones."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # beta/prototype/deprecation notices
        dense = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])
        return {
            "sparse_coo": dense.to_sparse(),
            "sparse_csr": dense.to_sparse_csr(),
            "sparse_csc": dense.to_sparse_csc(),
            "sparse_bsr": torch.eye(4).to_sparse_bsr((2, 2)),
            "sparse_bsc": torch.eye(4).to_sparse_bsc((2, 2)),
            "qint8": torch.quantize_per_tensor(dense, 0.5, 1, torch.qint8),
            "quint8": torch.quantize_per_tensor(dense, 0.25, 3, torch.quint8),
            "qint32": torch.quantize_per_tensor(dense, 0.5, 0, torch.qint32),
            "per_channel": torch.quantize_per_channel(
                dense, torch.tensor([0.5, 0.25]), torch.tensor([0, 1]), 0, torch.qint8
            ),
            "conj": torch.tensor([1 + 2j, 3 - 1j]).conj(),
            "neg": torch.tensor([1 + 2j, 3 - 1j]).conj().imag,
            "expanded": torch.tensor([1.5]).expand(4),
            "transposed": torch.arange(6.0).reshape(2, 3).t(),
            "offset_view": torch.arange(20.0)[3:7],
            "bf16": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
            "f8": torch.tensor([0.5, 2.0]).to(torch.float8_e4m3fn),
            "u16": torch.tensor([1, 65535], dtype=torch.uint16),
            "parameter": torch.nn.Parameter(torch.ones(2)),
        }


def refused_tensors() -> dict[str, Any]:
    """Tensors JAX cannot hold: ``tj.load`` refuses them, naming where they are."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return {
            "meta": torch.empty(2, 3, device="meta"),
            "nested": torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
            "complex32": torch.ones(2, dtype=torch.complex32),
            "bits8": torch.zeros(2, dtype=torch.bits8),
        }


def misaligned_empty(nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """An uninitialized byte buffer starting 8 bytes past a 64-byte boundary.

    JAX's CPU backend copies such a buffer on ``device_put`` instead of using it in
    place: given as staging buffers, these make a CPU device behave as a GPU does.
    """
    raw = np.empty(nbytes + 128, np.uint8)
    start = -raw.ctypes.data % 64 + 8
    return raw[start : start + nbytes]


def check_like(
    ours: Any, theirs: Any, same_tensor: Callable[[Any, Any, str], None], path: str = ""
) -> None:
    """``ours`` has ``theirs``'s containers (type, keys in order, length) and non-tensor
    values; ``same_tensor(our_leaf, their_tensor, path)`` checks each tensor's place."""
    import torch

    if isinstance(theirs, torch.Tensor):
        same_tensor(ours, theirs, path)
        return
    assert type(ours) is type(theirs), path
    if isinstance(theirs, dict):
        assert list(ours) == list(theirs), path
        for key in theirs:
            check_like(ours[key], theirs[key], same_tensor, f"{path}[{key!r}]")
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs), path
        for index, (mine, other) in enumerate(zip(ours, theirs, strict=True)):
            check_like(mine, other, same_tensor, f"{path}[{index}]")
    else:
        assert ours == theirs, path
