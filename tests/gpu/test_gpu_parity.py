"""Side-by-side checks that need a CUDA GPU visible to torch and JAX.

Skipped elsewhere; ``scripts/gpu-parity.sh`` runs them (with the whole parity suite)
on a GPU machine, where ``TORCH2JAX_DEVICE_TEST_REQUIRE=torch,cuda`` makes a missing
GPU a failure instead of a skip.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
import torch

import torch2jax_device as tj

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not (torch.cuda.is_available() and tj.cuda.is_available()),
        reason="needs a CUDA GPU visible to both torch and JAX",
    ),
]


def test_same_gpus_in_the_same_order() -> None:
    assert tj.cuda.device_count() == torch.cuda.device_count()
    for index in range(torch.cuda.device_count()):
        assert tj.cuda.get_device_name(index) == torch.cuda.get_device_name(index)
        assert tj.cuda.get_device_capability(index) == torch.cuda.get_device_capability(index)


def test_cuda_resolves_to_a_cuda_jax_device() -> None:
    gpu = tj.resolve("cuda:0")
    assert gpu.platform == "gpu" and tj.device(gpu) == tj.device("cuda:0")
    assert tj.list_devices("cuda") == [tj.device("cuda", i) for i in range(tj.cuda.device_count())]


def test_default_context_places_new_arrays_like_torch() -> None:
    with torch.device("cuda"):
        theirs = torch.zeros(3)
    with tj.device("cuda"):
        ours = jnp.zeros(3)
    assert tj.device(ours.device) == tj.device(theirs.device)
    with tj.device("cpu"):
        assert jnp.zeros(3).device == tj.device("cpu")


def test_jax_default_is_the_gpu_and_torch_default_is_the_cpu() -> None:
    assert tj.get_default_device() == tj.device("cuda:0")
    assert torch.get_default_device() == torch.device("cpu")


def test_properties_match_torch() -> None:
    ours, theirs = tj.cuda.get_device_properties(0), torch.cuda.get_device_properties(0)
    assert (ours.name, ours.major, ours.minor) == (theirs.name, theirs.major, theirs.minor)
    assert ours.multi_processor_count == theirs.multi_processor_count
    assert ours.total_memory is None or 0 < ours.total_memory <= theirs.total_memory


def test_synchronize_and_set_device() -> None:
    result = jax.jit(lambda x: x @ x)(jnp.ones((2048, 2048)))
    tj.cuda.synchronize()
    assert result.is_ready()
    tj.cuda.set_device(tj.cuda.device_count() - 1)
    try:
        assert tj.resolve("cuda").id == jax.local_devices(backend="cuda")[-1].id
    finally:
        tj.cuda.set_device(0)
