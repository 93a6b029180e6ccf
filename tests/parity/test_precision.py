"""Mixed precision: torch.autocast against casting parameters and inputs explicitly."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import torch2jax_device as tj
from tests.support.gpu_proxy import torch_named_here


@pytest.mark.idiom("autocast")
def test_autocast_and_explicit_casts_compute_in_bfloat16() -> None:
    weights = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    inputs = np.random.default_rng(1).normal(size=(2, 4)).astype(np.float32)

    linear = torch.nn.Linear(4, 3, bias=False)
    linear.weight.data = torch.from_numpy(weights.T.copy())
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        theirs = linear(torch.from_numpy(inputs))

    # On the CPU, as torch's model is (JAX's default device may be a GPU).
    model = tj.to_device(nnx.Linear(4, 3, use_bias=False, rngs=nnx.Rngs(0)), "cpu")
    model.kernel[...] = tj.to_device(weights, "cpu")
    model = tj.to_device(model, jnp.bfloat16)
    ours = model(tj.to_device(inputs, jnp.bfloat16))

    assert str(theirs.dtype) == f"torch.{ours.dtype}" == "torch.bfloat16"
    assert tj.device_of(model) == tj.device_of(ours) == torch_named_here(theirs.device)
    np.testing.assert_allclose(
        np.asarray(ours, np.float32), theirs.float().detach().numpy(), rtol=2e-2, atol=2e-2
    )
