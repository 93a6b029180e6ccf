"""Loads onto a mesh of the real GPU: refused before reading when they cannot fit.

The CPU suite simulates devices with pools and pinned routes
(``tests/multidevice/test_checkpoints_sharded_capacity.py``); here the GPU reports its
real pool, made to look small by the same patch, and its parts really travel in pinned
pieces of ``host_staging.PIECE_BYTES``, up to ``POOL_BUFFERS`` of them on the device at
once: the check counts them, and a load that sets a new peak stays within what it counted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import safetensors.numpy
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import torch2jax_device as tj
from torch2jax_device._src import capacity, host_staging, pinned_memory
from torch2jax_device._src.checkpoints.reader import Reader

MIB = 2**20
GPUS = [device for device in jax.devices() if device.platform == "gpu"]
# int32 rows: 48 MiB on each GPU, two pinned pieces of 32 MiB each.
TOKENS = 12 * MIB * max(len(GPUS), 1)


def _mesh_rows() -> NamedSharding:
    return NamedSharding(Mesh(np.array(GPUS), ("x",)), P("x"))


def _tokens(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.safetensors"
    safetensors.numpy.save_file({"tokens": np.arange(TOKENS, dtype=np.int32)}, str(path))
    return path


def _free(monkeypatch: pytest.MonkeyPatch, nbytes: int) -> None:
    """Every GPU reports ``nbytes`` free in its pool."""
    real = capacity.memory_stats

    def small(device: Any) -> dict[str, Any]:
        stats = real(device)
        stats["bytes_limit"] = stats.get("bytes_in_use", 0) + nbytes
        return stats

    monkeypatch.setattr(capacity, "memory_stats", small)


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    for method in ("read_tensor", "read_selection", "read_selection_into", "read_into"):
        original = getattr(Reader, method)
        monkeypatch.setattr(
            Reader, method, lambda *a, _o=original, _m=method, **k: seen.append(_m) or _o(*a, **k)
        )
    return seen


def _share(rows: NamedSharding) -> int:
    return TOKENS * 4 // len(rows.device_set)


def test_a_sharded_load_bigger_than_the_pool_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, rows = _tokens(tmp_path), _mesh_rows()
    reads = _reads(monkeypatch)
    _free(monkeypatch, 8 * MIB)
    with pytest.raises(
        tj.OutOfMemoryError, match=r"loading 1 tensor\(s\) of 'tokens\.safetensors'"
    ):
        tj.load_file(path, device=rows)
    with tj.safe_open(path, "flax", device=rows) as f:
        with pytest.raises(tj.OutOfMemoryError, match=r"tensor 'tokens'"):
            f.get_slice("tokens")[: TOKENS // 2]
    assert reads == []


def test_a_sharded_load_whose_shards_fit_but_not_their_pieces_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, rows = _tokens(tmp_path), _mesh_rows()
    reads = _reads(monkeypatch)
    _free(monkeypatch, _share(rows) + MIB)  # the shards fit, with 1 MiB to spare
    with pytest.raises(tj.OutOfMemoryError, match=r"'tokens\.safetensors' needs"):
        tj.load_file(path, device=rows)
    assert reads == []


def test_a_sharded_load_stays_within_what_the_check_counted(tmp_path: Path) -> None:
    path, rows = _tokens(tmp_path), _mesh_rows()
    in_flight = pinned_memory.POOL_BUFFERS * host_staging.PIECE_BYTES
    device = next(iter(rows.device_set))
    before = capacity.memory_stats(device)
    loaded = tj.load_file(path, device=rows)
    after = capacity.memory_stats(device)
    np.testing.assert_array_equal(np.asarray(loaded["tokens"]), np.arange(TOKENS, dtype=np.int32))
    # Only a load that set the process's peak says what it took (1 MiB: XLA's own scratch).
    if after.get("peak_bytes_in_use", 0) <= before.get("peak_bytes_in_use", 0):
        pytest.skip("an earlier test set a higher peak in this process: this load's is unread")
    taken = after["peak_bytes_in_use"] - before["bytes_in_use"]
    assert taken <= _share(rows) + in_flight + MIB
