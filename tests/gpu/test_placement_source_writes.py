"""Host sources moved onto a real GPU: read before ``to_device`` returns; float0 leaves.

On the CPU (``tests/multidevice/test_placement_source_writes.py``) JAX shares aligned NumPy
buffers and copies misaligned ones after returning. A GPU never shares host memory, so
here every host source must have been read when ``tj.to_device(..., non_blocking=True)``
returns, as torch's pageable ``.to("cuda", non_blocking=True)`` has: small arrays over
JAX's plain transfer, large ones over the pinned pieces, CPU tensors through DLPack.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import torch2jax_device as tj
from tests.support.checkpoints import misaligned_empty
from torch2jax_device._src.interop import aligned_empty

MIB = 2**20


def _filled(buffer: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    values = buffer.view(np.float32)
    values[:] = 1.0
    return values


SOURCES: dict[str, Any] = {
    "aligned-1MiB": lambda: _filled(aligned_empty(MIB)),
    "misaligned-1MiB": lambda: _filled(misaligned_empty(MIB)),
    "pieces-64MiB": lambda: _filled(aligned_empty(64 * MIB)),
    "strided": lambda: _filled(aligned_empty(2 * MIB))[::2],
}


@pytest.mark.parametrize("source", list(SOURCES))
def test_numpy_is_read_before_a_non_blocking_move_returns(source: str) -> None:
    host = SOURCES[source]()
    moved = tj.to_device(host, "cuda", non_blocking=True)
    assert moved.is_ready()
    host[:] = -1.0
    assert moved.devices() == {tj.resolve("cuda")}
    assert float(jnp.min(moved)) == 1.0


@pytest.mark.parametrize("count", [MIB // 4, 16 * MIB])
def test_a_cpu_tensor_is_read_before_a_non_blocking_move_returns(count: int) -> None:
    tensor = torch.ones(count)
    assert tensor.to("cuda", non_blocking=True).min().item() == 1.0  # torch: read on return
    moved = tj.to_device(tensor, "cuda", non_blocking=True)
    assert moved.is_ready()
    tensor.fill_(-1.0)
    assert float(jnp.min(moved)) == 1.0


def test_gradients_of_integer_inputs_move_to_the_gpu() -> None:
    params = tj.to_device({"w": jnp.arange(3.0), "ids": jnp.arange(3)}, "cuda")
    grads = jax.grad(lambda p: p["w"] @ p["ids"], allow_int=True)(params)
    moved = tj.to_device(grads, "cuda", non_blocking=True)
    assert moved["w"].devices() == {tj.resolve("cuda")}
    assert moved["ids"] is grads["ids"] and moved["ids"].dtype == jax.dtypes.float0
    back = tj.to_device(grads, "cpu")
    assert back["w"].devices() == {tj.resolve("cpu")} and back["ids"] is grads["ids"]
