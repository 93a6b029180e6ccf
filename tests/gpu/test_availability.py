"""tj.cuda against torch.cuda on a real GPU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

import torch2jax_device as tj


def test_same_gpus_in_the_same_order() -> None:
    assert tj.cuda.device_count() == torch.cuda.device_count()
    for index in range(torch.cuda.device_count()):
        assert tj.cuda.get_device_name(index) == torch.cuda.get_device_name(index)
        assert tj.cuda.get_device_capability(index) == torch.cuda.get_device_capability(index)


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
