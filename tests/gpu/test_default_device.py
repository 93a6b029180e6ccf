"""Default devices on a GPU machine, against torch."""

from __future__ import annotations

import jax.numpy as jnp
import torch

import torch2jax_device as tj


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
