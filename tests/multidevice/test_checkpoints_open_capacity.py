"""``tj.safe_open`` onto ``cpu:1`` made to act as a GPU: slices checked, sent in pinned pieces.

As in ``test_checkpoints_staging.py``, ``cpu:1`` gets pinned staging routes (a small
``PINNED_PIECES_FROM``) and copies its staging buffers; ``capacity.memory_stats`` gives it
a small pool where a test needs one. safetensors' own ``safe_open`` is the oracle.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import safetensors
import safetensors.numpy

import torch2jax_device as tj
from tests.support.checkpoints import misaligned_empty
from torch2jax_device._src import capacity, host_staging
from torch2jax_device._src.checkpoints import transfer

HOST, GPU_LIKE = jax.devices("cpu")[:2]


@pytest.fixture
def pieces(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """cpu:1 copies host buffers and has pinned routes, as a GPU; yields each array sent
    in pinned pieces (its size)."""
    monkeypatch.setattr(transfer, "aligned_empty", misaligned_empty)
    monkeypatch.setattr(host_staging, "routes_through_pinned", lambda device: device != HOST)
    monkeypatch.setattr(host_staging, "PINNED_PIECES_FROM", 4096)
    sent: list[int] = []
    in_pieces = host_staging._to_device_in_pieces

    def counting(host: np.ndarray[Any, Any], device: jax.Device) -> jax.Array:
        sent.append(host.nbytes)
        return in_pieces(host, device)

    monkeypatch.setattr(host_staging, "_to_device_in_pieces", counting)
    transfer.uses_host_memory.cache_clear()
    host_staging.POOL.clear()
    yield sent
    host_staging.POOL.clear()
    transfer.uses_host_memory.cache_clear()


def _weights(tmp_path: Path) -> Path:
    path = tmp_path / "model.safetensors"
    rng = np.random.default_rng(0)
    safetensors.numpy.save_file({"w": rng.standard_normal((300, 40)).astype(np.float32)}, str(path))
    return path


def test_a_large_slice_travels_in_pinned_pieces_as_whole_tensors_do(
    tmp_path: Path, pieces: list[int]
) -> None:
    path = _weights(tmp_path)
    with tj.safe_open(path, "flax", device="cpu:1") as f:
        rows = f.get_slice("w")[10:250:2]  # 120 rows of 160 bytes: 19,200 bytes
        small = f.get_slice("w")[3]  # 160 bytes: the plain transfer
    with safetensors.safe_open(str(path), "numpy") as theirs:
        expected_rows, expected_small = theirs.get_slice("w")[10:250:2], theirs.get_slice("w")[3]
    assert pieces == [19_200]
    for ours, expected in ((rows, expected_rows), (small, expected_small)):
        assert ours.devices() == {GPU_LIKE} and ours.committed
        np.testing.assert_array_equal(np.asarray(ours), expected)


def test_a_slice_that_cannot_fit_the_device_is_refused_before_reading(
    tmp_path: Path, pieces: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _weights(tmp_path)
    # Pieces of at most 1,024 bytes: 6 rows (960 bytes) of w, 3 in flight: 2,880 bytes.
    monkeypatch.setattr(host_staging, "PIECE_BYTES", 1024)
    monkeypatch.setattr(
        capacity, "memory_stats", lambda device: {"bytes_limit": 12_000, "bytes_in_use": 0}
    )
    with tj.safe_open(path, "flax", device="cpu:1") as f:
        # 19,200 bytes, and three pinned pieces of 960 bytes on their way (each piece
        # counts its own bytes, not the 1,024 of a whole buffer).
        with pytest.raises(tj.OutOfMemoryError, match=r"shape \[120, 40\].*\(22,080 bytes\)"):
            f.get_slice("w")[10:250:2]
        # 48,000 bytes, and three pinned pieces of 960 bytes (before, the one staging
        # buffer of 48,000 bytes that the whole tensor was sent in: 96,000 bytes).
        with pytest.raises(tj.OutOfMemoryError, match=r"model\.safetensors.*50,880 bytes"):
            f.get_tensor("w")
        assert f.get_slice("w")[:50].shape == (50, 40)  # 8,000 + 2,880 bytes fit
    assert pieces == [8_000]
