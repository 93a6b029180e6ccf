"""Staged loads onto a device that copies host buffers (as a GPU does), within a budget.

This machine has no GPU, so the device here is a CPU device fed *misaligned* staging
buffers: JAX's CPU backend copies those instead of using them in place, exactly the
behaviour of a GPU transfer that the staging code must handle (buffers reused only once
their transfer is complete, tensors larger than a buffer sent in pieces and assembled
on the device). The real placement routes are tested in ``test_checkpoints.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import torch2jax_device as tj
from tests.support.checkpoints import misaligned_empty
from torch2jax_device import CheckpointError, load_file, safe_open
from torch2jax_device._src import capacity
from torch2jax_device._src import dtypes as _dtypes
from torch2jax_device._src.checkpoints import transfer
from torch2jax_device._src.checkpoints.reader import Reader
from torch2jax_device._src.run_ahead import THREAD_NAME

CPU = tj.resolve("cpu")


class CopyingDevice:
    """Makes every staging buffer misaligned, so that JAX copies it; counts them."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def allocate(self, nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
        self.sizes.append(nbytes)
        return misaligned_empty(nbytes)


@pytest.fixture
def copying(monkeypatch: pytest.MonkeyPatch) -> Iterator[CopyingDevice]:
    device = CopyingDevice()
    monkeypatch.setattr(transfer, "aligned_empty", device.allocate)
    transfer.uses_host_memory.cache_clear()
    assert not transfer.uses_host_memory(CPU)  # the simulation holds
    device.sizes.clear()
    yield device
    transfer.uses_host_memory.cache_clear()


@pytest.fixture(autouse=True)
def _fresh_narrowing_warnings() -> None:
    _dtypes._warned.clear()


# (dtype hypothesis draws, dtype stored): bfloat16 values are drawn as their bits.
DTYPES = [
    (np.float32, np.float32),
    (np.uint8, np.uint8),
    (np.bool_, np.bool_),
    (np.int16, np.int16),
    (np.uint16, ml_dtypes.bfloat16),
    (np.complex64, np.complex64),
]
SHAPES = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=9)


@settings(max_examples=60, deadline=None)
@given(
    arrays=st.dictionaries(
        st.sampled_from("abcdefg"),
        st.sampled_from(DTYPES).flatmap(
            lambda kinds: hnp.arrays(kinds[0], SHAPES).map(lambda a: a.view(kinds[1]))
        ),
        min_size=1,
    ),
    staging=st.sampled_from([3 * 64, 3 * 256, 3 * 4096]),
)
def test_pieces_assembled_on_a_copying_device_give_the_tensors(
    tmp_path_factory: pytest.TempPathFactory, arrays: dict[str, Any], staging: int
) -> None:
    path = tmp_path_factory.mktemp("staged") / "tensors.safetensors"
    safetensors.numpy.save_file(arrays, str(path))
    with pytest.MonkeyPatch.context() as patch:
        device = CopyingDevice()
        patch.setattr(transfer, "aligned_empty", device.allocate)
        transfer.uses_host_memory.cache_clear()
        loaded = load_file(path, staging_bytes=staging)
    transfer.uses_host_memory.cache_clear()
    for name, expected in arrays.items():
        array = loaded[name]
        assert array.dtype == expected.dtype and array.shape == expected.shape, name
        assert np.asarray(array).tobytes() == expected.tobytes(), name
        assert array.committed and array.devices() == {CPU}, name
    assert all(size <= staging // 3 for size in device.sizes[1:])  # [0] is the probe


def test_staging_buffers_are_reused_within_the_budget(
    tmp_path: Path, copying: CopyingDevice
) -> None:
    path = tmp_path / "big.safetensors"
    tensors = {
        "big": np.arange(60_000, dtype=np.float32).reshape(300, 200),  # 240 kB: 30 pieces
        "wide": np.arange(5 * 9000, dtype=np.uint8).reshape(5, 9000),  # rows of 9 kB
        **{f"small{i}": np.full(100, i, np.int16) for i in range(50)},
    }
    safetensors.numpy.save_file(tensors, str(path))
    budget = 3 * 8192
    loaded = load_file(path, staging_bytes=budget)
    for name, expected in tensors.items():
        np.testing.assert_array_equal(np.asarray(loaded[name]), expected, err_msg=name)
    assert len(copying.sizes) <= 3  # three buffers, reused for ~50 reads
    assert all(size <= budget // 3 for size in copying.sizes)


def test_64_bit_tensors_narrow_piece_by_piece(tmp_path: Path, copying: CopyingDevice) -> None:
    path = tmp_path / "wide.safetensors"
    values = np.arange(10_000, dtype=np.int64).reshape(100, 100) - 5000
    safetensors.numpy.save_file({"ids": values}, str(path))
    with pytest.warns(tj.DtypeNarrowingWarning, match="int64 data becomes int32"):
        loaded = load_file(path, staging_bytes=3 * 1024)
    assert loaded["ids"].dtype == np.int32
    np.testing.assert_array_equal(np.asarray(loaded["ids"]), values)


def test_get_tensor_is_staged_too(tmp_path: Path, copying: CopyingDevice) -> None:
    path = tmp_path / "one.safetensors"
    values = np.arange(300_000, dtype=np.float32)
    safetensors.numpy.save_file({"w": values}, str(path))
    with safe_open(path) as f:
        tensor = f.get_tensor("w")
    np.testing.assert_array_equal(np.asarray(tensor), values)
    assert copying.sizes == [values.nbytes]  # read into a staging buffer
    assert tensor.devices() == {CPU}


def _reader_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == THREAD_NAME]


def test_a_failed_transfer_ends_the_load_without_hanging(
    tmp_path: Path, copying: CopyingDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reading thread may wait for a buffer the failed transfer held; it must end."""
    path = tmp_path / "many.safetensors"
    safetensors.numpy.save_file({f"t{i}": np.full(512, i, np.uint8) for i in range(40)}, str(path))
    sent = transfer._Staging._send
    calls = []

    def fail_on_the_third(self: Any, *args: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("the device went away")
        return sent(self, *args)

    monkeypatch.setattr(transfer._Staging, "_send", fail_on_the_third)
    with pytest.raises(RuntimeError, match="the device went away"):
        load_file(path, staging_bytes=3 * 512)
    assert _reader_threads() == []


def test_a_file_truncated_during_a_staged_load(tmp_path: Path, copying: CopyingDevice) -> None:
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file({"w": np.ones(100_000, np.float32)}, str(path))
    with safe_open(path) as f:
        path.write_bytes(path.read_bytes()[:200_000])  # rewritten shorter in place
        with pytest.raises(CheckpointError, match="truncated after it was opened"):
            f.get_tensor("w")
    assert _reader_threads() == []


# ------------------------------------------------ a load that cannot fit (issue 22.2)


def _pool(monkeypatch: pytest.MonkeyPatch, limit: int, in_use: int) -> None:
    """The device reports a JAX memory pool of ``limit`` bytes, ``in_use`` of them taken."""
    stats = {"bytes_limit": limit, "bytes_in_use": in_use}
    monkeypatch.setattr(capacity, "memory_stats", lambda device: dict(stats))


def test_a_load_bigger_than_the_free_pool_is_refused_before_reading(
    tmp_path: Path, copying: CopyingDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tokens.safetensors"
    safetensors.numpy.save_file({"tokens": np.zeros(3 * 2**20, np.uint16)}, str(path))
    _pool(monkeypatch, limit=5 * 2**20, in_use=2**20)  # 4 MiB free, 6 MiB needed
    monkeypatch.setenv("XLA_CLIENT_MEM_FRACTION", "0.12")
    reads = []
    monkeypatch.setattr(Reader, "read_into", lambda *args, **kwargs: reads.append(args))
    with pytest.raises(tj.OutOfMemoryError) as info:
        load_file(path, device="cpu")
    message = str(info.value)
    assert reads == []  # refused before reading a byte
    assert "tokens.safetensors" in message
    assert "needs 0.01 GiB (6,291,456 bytes)" in message
    assert "4,194,304" in message and "5,242,880" in message  # free, the pool
    assert "XLA_CLIENT_MEM_FRACTION=0.12" in message
    assert "device='cpu'" in message and "tj.to_device" in message and "sharding" in message
    assert isinstance(info.value, RuntimeError)  # torch.OutOfMemoryError is one


def test_a_load_that_fits_the_free_pool_goes_ahead(
    tmp_path: Path, copying: CopyingDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "small.safetensors"
    values = np.arange(1000, dtype=np.float32)
    safetensors.numpy.save_file({"w": values}, str(path))
    _pool(monkeypatch, limit=2**20, in_use=0)
    np.testing.assert_array_equal(np.asarray(load_file(path)["w"]), values)


@pytest.mark.parametrize(
    ("environment", "source"),
    [
        ({}, "JAX's default fraction, 75 % of the card, preallocated"),
        ({"XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"}, "XLA_PYTHON_CLIENT_MEM_FRACTION=.5"),
        ({"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, "XLA_PYTHON_CLIENT_PREALLOCATE=false"),
        ({"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}, "XLA_PYTHON_CLIENT_ALLOCATOR=platform"),
    ],
)
def test_the_message_names_where_the_pool_size_comes_from(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], source: str
) -> None:
    for name in (
        "XLA_CLIENT_MEM_FRACTION",
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
        "XLA_PYTHON_CLIENT_PREALLOCATE",
        "XLA_PYTHON_CLIENT_ALLOCATOR",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    _pool(monkeypatch, limit=100, in_use=100)
    with pytest.raises(tj.OutOfMemoryError, match=r"needs 0\.00 GiB \(1 bytes\)") as info:
        capacity.check_fits(CPU, 1, "a test")
    assert source in str(info.value)


def test_a_device_allocation_failure_midway_becomes_the_library_error(
    tmp_path: Path, copying: CopyingDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file({"w": np.ones(300_000, np.float32)}, str(path))
    _pool(monkeypatch, limit=2**30, in_use=0)  # the check passes; the device then fails

    def exhausted(*args: Any) -> Any:
        raise jax.errors.JaxRuntimeError(
            "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.2MiB"
        )

    monkeypatch.setattr(transfer, "write_piece", exhausted)
    with pytest.raises(tj.OutOfMemoryError, match=r"model\.safetensors") as info:
        load_file(path, staging_bytes=3 * 65536)
    assert isinstance(info.value.__cause__, jax.errors.JaxRuntimeError)
    # What the check before reading counted: the tensor and one 65,536-byte piece.
    assert "(1,265,536 bytes)" in str(info.value) and "device='cpu'" in str(info.value)
    assert _reader_threads() == []


def test_other_device_errors_pass_through_unchanged(
    tmp_path: Path, copying: CopyingDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file({"w": np.ones(300_000, np.float32)}, str(path))

    def broken(*args: Any) -> Any:
        raise jax.errors.JaxRuntimeError("INTERNAL: something else")

    monkeypatch.setattr(transfer, "write_piece", broken)
    with pytest.raises(jax.errors.JaxRuntimeError, match="INTERNAL"):
        load_file(path, staging_bytes=3 * 65536)
