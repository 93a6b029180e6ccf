"""Asking where a tensor is (``tensor-device-type``): torch's flags against ``tj.device_of``."""

from __future__ import annotations

import pytest
import torch

import torch2jax_device as tj


def _ported(tensor: torch.Tensor) -> object:
    return tj.to_device(tj.to_jax(tensor.cpu()), tj.device(tensor.device))


@pytest.mark.idiom("tensor-device-type")
@pytest.mark.parametrize("where", ["cpu", "cuda"])
def test_is_it_on_the_gpu(where: str) -> None:
    if where == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA GPU for torch here")
    tensor = torch.ones(2, device=where)
    array = _ported(tensor)
    assert (tj.device_of(array).type == "cuda") == tensor.is_cuda
    assert tj.device_of(array).type == tensor.device.type
    assert tj.device_of(tensor).type == tensor.device.type  # torch tensors answer too
    # torch's index of where the tensor is: -1 on the CPU (tj's cpu:0 among simulated CPU
    # devices included), the ordinal on a GPU.
    ours = tj.device_of(array)
    assert tensor.get_device() == (-1 if ours.type == "cpu" else ours.index)
    assert tj.get_device(array) == tensor.get_device()  # -1 on the CPU, never None
    assert tj.get_device(tensor) == tensor.get_device()


def test_get_device_has_no_answer_under_jit() -> None:
    import jax

    @jax.jit
    def step(x: jax.Array) -> jax.Array:
        tj.get_device(x)
        return x

    with pytest.raises(tj.UnsupportedOperationError, match=r"under jax\.jit.*outside the jitted"):
        step(tj.to_jax(torch.ones(2)))
