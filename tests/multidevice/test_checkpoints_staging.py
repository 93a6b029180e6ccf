"""A tensor of more than 2**31 elements staged onto a second device (issue 22, item 1).

The first GPU run loaded a 19.09 GiB file of one uint16 tensor with
``tj.load_file(path, device="cuda")``. Here cpu:1 plays the GPU: staging buffers are made
misaligned so that JAX copies them (as a GPU transfer does), and the tensor goes in
pieces, written into the device array at offsets past 2**31. The file is sparse (a few
non-zero bytes), so the test costs 2 GiB of device (host) memory and little disk.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

import torch2jax_device as tj
from tests.support.checkpoints import misaligned_empty
from torch2jax_device._src import host_staging, pinned_memory
from torch2jax_device._src.checkpoints import transfer

COUNT = 2**31 + 64
# Non-zero bytes: the first, either side of 2**31, and the last.
MARKS = {0: 1, 2**31 - 1: 2, 2**31: 3, COUNT - 1: 4}


@pytest.fixture
def copying(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(transfer, "aligned_empty", misaligned_empty)
    transfer.uses_host_memory.cache_clear()
    yield
    transfer.uses_host_memory.cache_clear()


def _sparse_file(path: Path) -> None:
    header = json.dumps({"t": {"dtype": "U8", "shape": [COUNT], "data_offsets": [0, COUNT]}})
    encoded = header.encode() + b" " * (-len(header) % 8)
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(encoded)) + encoded)
        start = file.tell()
        file.truncate(start + COUNT)
        for offset, value in MARKS.items():
            file.seek(start + offset)
            file.write(bytes([value]))


@pytest.mark.parametrize("pinned", [False, True], ids=["pageable", "pinned"])
def test_a_tensor_past_2_31_elements_is_staged_onto_a_device(
    tmp_path: Path, copying: None, monkeypatch: pytest.MonkeyPatch, pinned: bool
) -> None:
    path = tmp_path / "tokens.safetensors"
    _sparse_file(path)
    target = jax.devices("cpu")[1]
    assert not transfer.uses_host_memory(target)  # the staging route, as on a GPU
    if pinned:  # through pinned buffers, as on a GPU
        monkeypatch.setattr(host_staging, "routes_through_pinned", lambda d: d == target)
    array = tj.load_file(path, device="cpu:1")["t"]
    assert array.shape == (COUNT,) and array.dtype == np.uint8
    assert array.devices() == {target} and array.committed
    host = np.asarray(array)  # JAX's own a[-1] needs jax_enable_x64 at this size
    for offset, value in MARKS.items():
        assert host[offset] == value, offset
    assert np.count_nonzero(host) == len(MARKS)
    host_staging.POOL.clear()


@pytest.fixture
def pinned_device(copying: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """cpu:1 also has pinned staging buffers, as a GPU; yields the sizes allocated."""
    host = jax.devices("cpu")[0]
    monkeypatch.setattr(host_staging, "routes_through_pinned", lambda device: device != host)
    monkeypatch.setattr(host_staging, "PINNED_PIECES_FROM", 4096)
    sizes: list[int] = []
    allocate = pinned_memory._pinned_empty

    def counting(device: jax.Device, nbytes: int) -> Any:
        sizes.append(nbytes)
        return allocate(device, nbytes)

    monkeypatch.setattr(pinned_memory, "_pinned_empty", counting)
    host_staging.POOL.clear()
    yield sizes
    host_staging.POOL.clear()


def test_device_loads_stage_through_pooled_pinned_buffers(
    tmp_path: Path, pinned_device: list[int]
) -> None:
    rng = np.random.default_rng(0)
    tensors = {
        "embed": rng.standard_normal((301, 77)).astype(ml_dtypes.bfloat16),  # pieces
        "fp8": rng.standard_normal((129, 65)).astype(ml_dtypes.float8_e4m3fn),  # one piece
        "ids": np.arange(7001, dtype=np.int32),  # pieces, the last one shorter
        "mask": np.arange(5000) % 3 == 0,  # bool: no bit carrier, batched
        **{f"bias{i}": np.full(7, i, np.float16) for i in range(20)},  # batched
        "scalar": np.array(2.5, np.float32),
        "empty": np.zeros((0, 3), np.float32),
    }
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file(tensors, str(path))
    budget = 3 * 8192
    loaded = tj.load_file(path, device="cpu:1", staging_bytes=budget)
    for name, expected in tensors.items():
        array = loaded[name]
        assert array.devices() == {jax.devices("cpu")[1]}, name
        assert array.dtype == expected.dtype and array.shape == expected.shape, name
        assert np.asarray(array).tobytes() == expected.tobytes(), name
    # Batches of small tensors in buffers of a third of the budget; tensors in pieces in
    # buffers of exactly one piece (a tensor's pieces have one size, and the last the rest).
    piece_sizes = {
        piece.nbytes
        for name, values in tensors.items()
        if name in ("embed", "fp8", "ids")
        for piece in host_staging.pieces(values.shape, values.itemsize, 8192 // values.itemsize)
    }
    # 53 rows of 77 bfloat16 and the last 36, 126 rows of 65 and the last 3, 2,048 int32
    # and the last 857
    assert piece_sizes == {8162, 5544, 8190, 195, 8192, 3428}
    assert pinned_device and set(pinned_device) <= {budget // 3, *piece_sizes}


@pytest.mark.parametrize(
    "values",
    [np.arange(20000) % 3 == 0, (np.arange(3000) + 0.5j).astype(np.complex64)],
    ids=["bool", "complex64"],
)
def test_tensors_without_a_bit_carrier_larger_than_a_staging_buffer(
    tmp_path: Path, pinned_device: list[int], values: np.ndarray[Any, Any]
) -> None:
    # In pieces through pinned buffers, but not as raw bytes: JAX cannot bitcast bytes
    # into bool or complex (a raw TypeError before the fix).
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file({"t": values}, str(path))
    budget = 3 * 8192  # buffers of 8 KiB: the tensor goes in 3 or 4 pieces
    array = tj.load_file(path, device="cpu:1", staging_bytes=budget)["t"]
    assert array.devices() == {jax.devices("cpu")[1]}
    assert array.dtype == values.dtype and array.shape == values.shape
    assert np.asarray(array).tobytes() == values.tobytes()
    assert pinned_device  # the pieces went through pinned buffers


def test_pinned_staging_buffers_are_reused_across_tensors_and_loads(
    tmp_path: Path, pinned_device: list[int]
) -> None:
    # Only tensors sent in pieces: on the CPU a batch's buffer becomes its arrays' memory
    # (JAX's CPU backend aliases aligned host buffers) and is replaced; a GPU copies.
    tensors = {f"w{i}": np.full((97, 31), i, np.float32) for i in range(6)}  # 12 kB each
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file(tensors, str(path))
    budget = 3 * 8192
    for _ in range(2):
        loaded = tj.load_file(path, device="cpu:1", staging_bytes=budget)
        for name, expected in tensors.items():
            np.testing.assert_array_equal(np.asarray(loaded[name]), expected, err_msg=name)
    assert len(pinned_device) <= 3  # 12 pieces in two loads through three buffers
    assert host_staging.POOL.held() == len(pinned_device)  # back in the pool


def test_torch_checkpoints_reach_the_device_through_pinned_pieces(
    tmp_path: Path, pinned_device: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    sent = []
    in_pieces = host_staging._to_device_in_pieces
    monkeypatch.setattr(
        host_staging, "_to_device_in_pieces", lambda *args: sent.append(1) or in_pieces(*args)
    )
    state = {
        "w": torch.arange(5000, dtype=torch.float32).reshape(50, 100),
        "b": torch.ones(3, dtype=torch.bfloat16),
    }
    path = tmp_path / "model.pt"
    torch.save(state, path)
    loaded = tj.load(path, map_location="cpu:1")
    assert sent == [1]  # w (20 kB) in pieces; b (6 bytes) in the batched transfer
    for name, tensor in state.items():
        assert loaded[name].devices() == {jax.devices("cpu")[1]}, name
        assert np.asarray(loaded[name]).tobytes() == tensor.view(torch.uint8).numpy().tobytes()


def test_a_torch_checkpoint_that_cannot_fit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from torch2jax_device._src import capacity

    path = tmp_path / "model.pt"
    torch.save({"w": torch.zeros(1000)}, path)
    monkeypatch.setattr(
        capacity, "memory_stats", lambda device: {"bytes_limit": 3000, "bytes_in_use": 0}
    )
    with pytest.raises(tj.OutOfMemoryError, match=r"needs 0.00 GiB \(4,000 bytes\)"):
        tj.load(path, map_location="cpu:1")
