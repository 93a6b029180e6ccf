"""``tj.safe_open`` onto a device too small for what it reads: refused before reading.

``tj.load_file`` checks a load onto a device that copies (a GPU) against the device's
free memory before reading and raises ``tj.OutOfMemoryError`` with the fix; the tensors
and slices of an open file go through the same check (``transfer.room_for``). As in
``test_checkpoints_staging.py``, the device is a CPU device that reports a small JAX
memory pool (``capacity.memory_stats``) and copies its staging buffers (misaligned), as a
GPU does; safetensors' own reader is the oracle for the values.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import safetensors.numpy

import torch2jax_device as tj
from tests.support.checkpoints import misaligned_empty
from torch2jax_device import safe_open
from torch2jax_device._src import capacity, host_staging
from torch2jax_device._src import dtypes as _dtypes
from torch2jax_device._src.checkpoints import transfer
from torch2jax_device._src.checkpoints.reader import Reader

MIB = 2**20


@pytest.fixture(autouse=True)
def copying(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A CPU device that copies staging buffers instead of keeping them, as a GPU does."""
    monkeypatch.setattr(transfer, "aligned_empty", misaligned_empty)
    transfer.uses_host_memory.cache_clear()
    assert not transfer.uses_host_memory(tj.resolve("cpu"))
    yield
    transfer.uses_host_memory.cache_clear()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every read of tensor bytes from the file (whole tensors, pieces and selections)."""
    seen: list[Any] = []
    read_into, gather = Reader.read_into, Reader._gather
    monkeypatch.setattr(Reader, "read_into", lambda *a, **k: seen.append(a) or read_into(*a, **k))
    monkeypatch.setattr(Reader, "_gather", lambda *a, **k: seen.append(a) or gather(*a, **k))
    return seen


def _pool(monkeypatch: pytest.MonkeyPatch, limit: int, in_use: int) -> None:
    """The device reports a JAX memory pool of ``limit`` bytes, ``in_use`` of them taken."""
    stats = {"bytes_limit": limit, "bytes_in_use": in_use}
    monkeypatch.setattr(capacity, "memory_stats", lambda device: dict(stats))


def _tokens(tmp_path: Path, count: int = 3 * MIB, dtype: Any = np.uint16) -> Path:
    path = tmp_path / "tokens.safetensors"
    safetensors.numpy.save_file({"tokens": np.arange(count).astype(dtype)}, str(path))
    return path


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_a_slice_bigger_than_the_free_pool_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads: list[Any], backend: str
) -> None:
    path = _tokens(tmp_path)  # 6 MiB of uint16
    _pool(monkeypatch, limit=5 * MIB, in_use=MIB)  # 4 MiB free
    monkeypatch.setenv("XLA_CLIENT_MEM_FRACTION", "0.12")
    with safe_open(path, "flax", device="cpu", backend=backend) as f:
        tokens = f.get_slice("tokens")
        with pytest.raises(tj.OutOfMemoryError) as info:
            tokens[: 5 * MIB // 2]  # 5 MiB
        assert tokens[: MIB // 2].shape == (MIB // 2,)  # 1 MiB fits
    message = str(info.value)
    assert len(reads) == 1  # the slice that fits; none for the one refused
    assert "a slice of shape [2621440] of tensor 'tokens' of 'tokens.safetensors'" in message
    assert "needs 0.00 GiB (5,242,880 bytes)" in message
    assert "4,194,304" in message and "5,242,880 bytes) pool" in message  # free, the pool
    assert "XLA_CLIENT_MEM_FRACTION=0.12" in message
    assert "device='cpu'" in message and "tj.to_device" in message  # the fix
    assert isinstance(info.value, RuntimeError)  # torch.OutOfMemoryError is one


def test_the_slice_is_measured_in_the_dtype_it_lands_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _dtypes._warned.clear()
    path = _tokens(tmp_path, MIB, np.int64)  # 8 MiB in the file, 4 MiB as int32 without x64
    _pool(monkeypatch, limit=5 * MIB, in_use=0)
    with safe_open(path, "flax", device="cpu") as f:
        with pytest.warns(tj.DtypeNarrowingWarning):
            everything = f.get_slice("tokens")[...]  # 4 MiB: fits
        _pool(monkeypatch, limit=3 * MIB, in_use=0)
        with pytest.raises(tj.OutOfMemoryError, match=r"needs .*\(4,194,304 bytes\)"):
            f.get_slice("tokens")[...]
    expected = safetensors.numpy.load_file(str(path))["tokens"]
    assert everything.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(everything), expected)


def test_a_slice_that_fits_goes_ahead_with_the_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _tokens(tmp_path, 1000)
    _pool(monkeypatch, limit=MIB, in_use=0)
    with safe_open(path, "flax", device="cpu") as f:
        window = f.get_slice("tokens")[10:990:7]
    with safetensors.safe_open(str(path), "numpy") as theirs:
        expected = theirs.get_slice("tokens")[10:990:7]
    assert window.devices() == {tj.resolve("cpu")} and window.committed
    np.testing.assert_array_equal(np.asarray(window), expected)


def test_get_tensor_bigger_than_the_free_pool_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads: list[Any]
) -> None:
    path = _tokens(tmp_path)
    _pool(monkeypatch, limit=5 * MIB, in_use=MIB)
    with safe_open(path, "flax", device="cpu") as f:
        with pytest.raises(tj.OutOfMemoryError, match=r"tokens\.safetensors.*6,291,456"):
            f.get_tensor("tokens")
    assert reads == []


def test_a_device_allocation_failure_in_a_slice_becomes_the_library_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _tokens(tmp_path, 1000)
    _pool(monkeypatch, limit=2**30, in_use=0)  # the check passes; the device then fails

    def exhausted(*args: Any, **kwargs: Any) -> Any:
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 2KiB")

    monkeypatch.setattr(host_staging, "device_put", exhausted)
    with safe_open(path, "flax", device="cpu") as f:
        with pytest.raises(tj.OutOfMemoryError, match=r"tensor 'tokens'.*2,000 bytes") as info:
            f.get_slice("tokens")[:]
    assert isinstance(info.value.__cause__, jax.errors.JaxRuntimeError)
