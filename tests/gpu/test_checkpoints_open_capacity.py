"""``tj.safe_open`` onto a real GPU: slices checked against its free memory, sent pinned.

The CPU suite simulates a device that copies and reports a small pool
(``tests/unit/test_checkpoints_open_capacity.py``); here the GPU reports its real pool,
made to look small by the same patch, and a large slice travels in pinned pieces.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy

import torch2jax_device as tj
from torch2jax_device._src import capacity, host_staging

MIB = 2**20


def _tokens(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.safetensors"
    safetensors.numpy.save_file({"tokens": np.arange(24 * MIB, dtype=np.int32)}, str(path))
    return path  # 96 MiB


def test_the_gpu_reports_a_pool_the_check_reads() -> None:
    stats = capacity.memory_stats(tj.resolve("cuda"))
    assert isinstance(stats.get("bytes_limit"), int) and stats["bytes_limit"] > 0


def test_a_slice_bigger_than_the_free_pool_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _tokens(tmp_path)
    real = capacity.memory_stats

    def small(device: Any) -> dict[str, Any]:
        stats = real(device)
        stats["bytes_limit"] = stats.get("bytes_in_use", 0) + 8 * MIB  # 8 MiB free
        return stats

    monkeypatch.setattr(capacity, "memory_stats", small)
    with tj.safe_open(path, "flax", device="cuda") as f:
        # 16 MiB, and the 32 MiB pinned piece it arrives in: 50,331,648 bytes.
        with pytest.raises(tj.OutOfMemoryError, match=r"tensor 'tokens'.*50,331,648 bytes"):
            f.get_slice("tokens")[: 4 * MIB]
        with pytest.raises(tj.OutOfMemoryError, match=r"tokens\.safetensors"):
            f.get_tensor("tokens")


def test_a_large_slice_travels_in_pinned_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _tokens(tmp_path)
    sent: list[int] = []
    in_pieces = host_staging._to_device_in_pieces
    monkeypatch.setattr(
        host_staging, "_to_device_in_pieces", lambda *a: sent.append(1) or in_pieces(*a)
    )
    with tj.safe_open(path, "flax", device="cuda") as f:
        window = f.get_slice("tokens")[MIB : 9 * MIB]  # 32 MiB
    assert sent == [1]
    assert window.devices() == {tj.resolve("cuda")}
    np.testing.assert_array_equal(np.asarray(window), np.arange(MIB, 9 * MIB, dtype=np.int32))
