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

import jax
import numpy as np
import pytest

import torch2jax_device as tj
from tests.support.checkpoints import misaligned_empty
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


def test_a_tensor_past_2_31_elements_is_staged_onto_a_device(
    tmp_path: Path, copying: None
) -> None:
    path = tmp_path / "tokens.safetensors"
    _sparse_file(path)
    target = jax.devices("cpu")[1]
    assert not transfer.uses_host_memory(target)  # the staging route, as on a GPU
    array = tj.load_file(path, device="cpu:1")["t"]
    assert array.shape == (COUNT,) and array.dtype == np.uint8
    assert array.devices() == {target} and array.committed
    host = np.asarray(array)  # JAX's own a[-1] needs jax_enable_x64 at this size
    for offset, value in MARKS.items():
        assert host[offset] == value, offset
    assert np.count_nonzero(host) == len(MARKS)
