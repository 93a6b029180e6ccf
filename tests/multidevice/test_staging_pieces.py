"""Pinned pieces move their own bytes, nothing more (issue 38: one owner for staging).

Before, a checkpoint piece sent the whole staging buffer it was read into (85 MiB for a
16 MiB piece, 5.3x its bytes over the bus and in device memory), and a host array sent
in pieces a whole ``PIECE_BYTES`` buffer for a smaller last or only piece. Here cpu:1
routes through pinned buffers, as a GPU; every pinned array handed to
``jax.device_put`` is recorded, and each must be exactly the bytes of the piece it
carries (``host_staging.pieces`` says which), while the result keeps its placement,
dtype and values. Hypothesis draws the shapes, dtypes and piece sizes: the next
rounding of a piece to a buffer would show up as a recorded size that is no piece's.
"""

from __future__ import annotations

import json
import logging
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
from tests.support.arrays import patterned
from tests.support.checkpoints import misaligned_empty
from torch2jax_device._src import device_pieces, host_staging, pinned_memory
from torch2jax_device._src.checkpoints import transfer

HOST, GPU_LIKE = jax.devices("cpu")[:2]
DTYPES = [np.uint8, np.int16, np.float32, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn]
SHAPES = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=40)


class Sends:
    """The byte counts of the pinned arrays handed to ``jax.device_put``."""

    def __init__(self, patch: pytest.MonkeyPatch) -> None:
        self.sizes: list[int] = []
        put = jax.device_put

        def recording(x: Any, *args: Any, **kwargs: Any) -> Any:
            for leaf in jax.tree.leaves(x):
                if isinstance(leaf, jax.Array) and leaf.sharding.memory_kind == "pinned_host":
                    self.sizes.append(leaf.nbytes)
            return put(x, *args, **kwargs)

        patch.setattr(jax, "device_put", recording)


def _pinned_route(patch: pytest.MonkeyPatch, piece_bytes: int) -> Sends:
    """cpu:1 copies host data through pinned pieces of at most ``piece_bytes``."""
    patch.setattr(host_staging, "routes_through_pinned", lambda device: device == GPU_LIKE)
    patch.setattr(host_staging, "PINNED_PIECES_FROM", 1)
    patch.setattr(host_staging, "PIECE_BYTES", piece_bytes)
    patch.setattr(transfer, "aligned_empty", misaligned_empty)  # cpu:1 copies, as a GPU
    transfer.uses_host_memory.cache_clear()
    return Sends(patch)


@pytest.fixture(autouse=True)
def _fresh_pool() -> Iterator[None]:
    host_staging.POOL.clear()  # buffers of another example's piece size are not reused
    yield
    host_staging.POOL.clear()
    transfer.uses_host_memory.cache_clear()


def _piece_sizes(shape: tuple[int, ...], itemsize: int, piece_bytes: int) -> list[int]:
    return [p.nbytes for p in host_staging.pieces(shape, itemsize, piece_bytes // itemsize)]


def _check(array: jax.Array, expected: np.ndarray[Any, Any]) -> None:
    assert array.devices() == {GPU_LIKE} and array.committed
    assert array.sharding.memory_kind == "device"
    assert array.dtype == expected.dtype and array.shape == expected.shape
    assert np.asarray(array).tobytes() == expected.tobytes()


@settings(max_examples=30, deadline=None)
@given(shape=SHAPES, dtype=st.sampled_from(DTYPES), piece_bytes=st.integers(16, 600))
def test_a_host_array_in_pieces_sends_each_piece_s_own_bytes(
    shape: tuple[int, ...], dtype: Any, piece_bytes: int
) -> None:
    values = patterned(shape, dtype)
    with pytest.MonkeyPatch.context() as patch:
        sends = _pinned_route(patch, piece_bytes)
        moved = tj.to_device(values, "cpu:1")
    _check(moved, values)
    assert sends.sizes == _piece_sizes(shape, values.itemsize, piece_bytes)
    assert sum(sends.sizes) == values.nbytes  # no byte sent twice (the last piece overlapped)


@settings(max_examples=20, deadline=None)
@given(
    shapes=st.lists(SHAPES, min_size=1, max_size=4),
    dtype=st.sampled_from(DTYPES),
    staging=st.integers(3 * 16, 3 * 600),
)
def test_a_checkpoint_piece_sends_its_own_bytes_not_its_staging_buffer(
    tmp_path_factory: pytest.TempPathFactory,
    shapes: list[tuple[int, ...]],
    dtype: Any,
    staging: int,
) -> None:
    tensors = {f"t{i}": patterned(shape, dtype) for i, shape in enumerate(shapes)}
    path = tmp_path_factory.mktemp("pieces") / "model.safetensors"
    safetensors.numpy.save_file(tensors, str(path))
    chunk = max(64, -(-(staging // 3) // 64) * 64)  # transfer's buffer: a third, aligned
    with pytest.MonkeyPatch.context() as patch:
        sends = _pinned_route(patch, 2**20)
        loaded = tj.load_file(path, device="cpu:1", staging_bytes=staging)
    for name, values in tensors.items():
        _check(loaded[name], values)
    # Every tensor goes in pieces (PINNED_PIECES_FROM is 1 here), of at most a buffer.
    expected = [
        size
        for values in tensors.values()
        for size in _piece_sizes(values.shape, values.itemsize, min(chunk, 2**20))
    ]
    assert sorted(sends.sizes) == sorted(expected)
    assert sum(sends.sizes) == sum(values.nbytes for values in tensors.values())


def test_the_pool_keeps_a_few_buffers_of_each_size_within_its_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = host_staging.POOL
    monkeypatch.setattr(pinned_memory, "POOL_BYTES", 10_000)
    buffers = [pool.take(GPU_LIKE, size) for size in (1000,) * 4 + (3000, 3000, 4000)]
    for buffer in buffers[:4]:  # four of 1,000 bytes: three are kept
        pool.give(GPU_LIKE, buffer)
    assert pool.kept(GPU_LIKE) == [1000, 1000, 1000]
    for buffer in buffers[4:]:  # 13,000 bytes in all: the oldest go first
        pool.give(GPU_LIKE, buffer)
    assert pool.kept(GPU_LIKE) == [3000, 3000, 4000]
    again = pool.take(GPU_LIKE, 3000)
    assert again is buffers[5]  # a kept buffer of the size asked, the newest first
    assert pool.kept(GPU_LIKE) == [3000, 4000]
    assert pool.take(GPU_LIKE, 2000).view.nbytes == 2000  # no buffer of that size: a new one


def test_the_capacity_check_counts_the_pieces_in_flight_not_whole_buffers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch2jax_device._src import capacity

    _pinned_route(monkeypatch, 2**20)
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file({"w": patterned((100, 30), np.float32)}, str(path))
    monkeypatch.setattr(
        capacity, "memory_stats", lambda device: {"bytes_limit": 1000, "bytes_in_use": 0}
    )
    # Buffers of 3 * 1024 // 3 = 1,024 bytes; pieces of 8 rows of 120 bytes = 960 bytes,
    # three in flight: 12,000 + 2,880 bytes (with whole buffers it was 12,000 + 3,072).
    with pytest.raises(tj.OutOfMemoryError, match=r"\(14,880 bytes\)"):
        tj.load_file(path, device="cpu:1", staging_bytes=3 * 1024)


@pytest.mark.parametrize("route", ["host array", "checkpoint"])
def test_the_pieces_of_one_shape_compile_one_update_per_piece_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    # Each new tensor shape compiles the update its pieces are written with (the full
    # blocks' and the shorter last one's); the array they start from was uncommitted, so
    # the first write and the rest compiled twice.
    sends = _pinned_route(monkeypatch, 1024)
    write = device_pieces._write_bytes_at
    write.clear_cache()
    values = patterned((37, 101), np.float32)  # 14,948 bytes: 18 pieces of 2 rows (808 bytes)
    if route == "host array":
        moved = tj.to_device(values, "cpu:1")
    else:
        path = tmp_path / "model.safetensors"
        safetensors.numpy.save_file({"w": values}, str(path))
        moved = tj.load_file(path, device="cpu:1")["w"]
    _check(moved, values)
    assert sends.sizes == [808] * 18 + [404]  # and the last row
    assert write._cache_size() == 2


def test_a_checkpoint_s_shapes_compile_ahead_of_the_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A process's first load compiled every new shape's allocation, unpack or update
    # in the loading thread, one after the other (on the CPU, most of the load's time).
    # The header gives every shape before a byte is read: they compile in threads of
    # their own, and the loading thread finds them compiled.
    _pinned_route(monkeypatch, 1024)
    tensors = {  # shapes no other test here sends: nothing of them compiled yet
        "rows": patterned((71, 23), np.float32),  # pieces of 11 rows
        "half": patterned((23, 71), ml_dtypes.bfloat16),  # pieces, a bit cast at the end
        "one": patterned((7, 67), np.int16),  # one piece
    }
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file(tensors, str(path))
    jax.config.update("jax_log_compiles", True)
    try:
        with caplog.at_level(logging.WARNING, logger="jax"):
            loaded = tj.load_file(path, device="cpu:1", staging_bytes=3 * 4096)
    finally:
        jax.config.update("jax_log_compiles", False)
    for name, values in tensors.items():
        _check(loaded[name], values)
    compiled_in = [r.threadName for r in caplog.records if r.getMessage().startswith("Compiling")]
    assert compiled_in, "nothing compiled: another test sent these shapes first"
    assert all(thread.startswith("torch2jax_device-compile") for thread in compiled_in)


def test_an_index_loads_shapes_compile_ahead_of_the_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The same through an index of shards (sharded.py's path, as real LLM checkpoints
    # load): every shape compiles in the compile threads, none in the loading thread.
    _pinned_route(monkeypatch, 1024)
    shards = {
        "model-1.safetensors": {"up": patterned((73, 29), np.float32)},
        "model-2.safetensors": {"down": patterned((29, 73), ml_dtypes.bfloat16)},
    }
    weight_map = {}
    for file, tensors in shards.items():
        safetensors.numpy.save_file(tensors, str(tmp_path / file))
        weight_map.update(dict.fromkeys(tensors, file))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    jax.config.update("jax_log_compiles", True)
    try:
        with caplog.at_level(logging.WARNING, logger="jax"):
            loaded = tj.load_file(index, device="cpu:1", staging_bytes=3 * 4096)
    finally:
        jax.config.update("jax_log_compiles", False)
    for tensors in shards.values():
        for name, values in tensors.items():
            _check(loaded[name], values)
    compiled_in = [r.threadName for r in caplog.records if r.getMessage().startswith("Compiling")]
    assert compiled_in, "nothing compiled: another test sent these shapes first"
    assert all(thread.startswith("torch2jax_device-compile") for thread in compiled_in)


def test_the_parts_of_a_sharded_array_compile_ahead(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # What a sharded load calls before reading (compile_ahead_on): each distinct part
    # compiles in the compile threads; placing the parts then compiles nothing more.
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from torch2jax_device._src.distributed.transfer import assemble

    monkeypatch.setattr(host_staging, "routes_through_pinned", lambda device: True)
    monkeypatch.setattr(host_staging, "PINNED_PIECES_FROM", 1)
    monkeypatch.setattr(host_staging, "PIECE_BYTES", 512)
    values = patterned((4 * 29, 53), ml_dtypes.bfloat16)  # parts of 29 rows, in pieces
    mesh = Mesh(np.array(jax.devices("cpu")[:4]).reshape(2, 2), ("rows", "copies"))
    sharding = NamedSharding(mesh, P(("rows", "copies")))
    jax.config.update("jax_log_compiles", True)
    try:
        with caplog.at_level(logging.WARNING, logger="jax"):
            host_staging.compile_ahead_on(values.shape, values.dtype, sharding)
            placed = assemble(
                values.shape,
                sharding,
                lambda index: host_staging._streamed(values[index]),
                where="values",
            )
    finally:
        jax.config.update("jax_log_compiles", False)
    assert np.asarray(placed).tobytes() == values.tobytes()
    assert placed.sharding == sharding
    compiled_in = [r.threadName for r in caplog.records if r.getMessage().startswith("Compiling")]
    assert compiled_in, "nothing compiled: another test sent these shapes first"
    assert all(thread.startswith("torch2jax_device-compile") for thread in compiled_in)
