"""Loss scaling and TF32: the torch switches against what the JAX port does instead."""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

RNG = np.random.default_rng(0)
WEIGHT = RNG.standard_normal((3, 2)).astype(np.float32)
INPUTS = RNG.standard_normal((8, 3)).astype(np.float32)
TARGETS = RNG.standard_normal((8, 2)).astype(np.float32)
LR = 0.1


def _loss(weight: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((x @ weight - y) ** 2)


@pytest.mark.idiom("grad-scaler")
def test_a_step_without_a_scaler_is_the_scaled_step() -> None:
    weight = torch.nn.Parameter(torch.from_numpy(WEIGHT.copy()))
    optimizer = torch.optim.SGD([weight], lr=LR)
    scaler = torch.amp.GradScaler("cpu")
    loss = torch.mean((torch.from_numpy(INPUTS) @ weight - torch.from_numpy(TARGETS)) ** 2)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() > 1  # it did scale

    grads = jax.grad(_loss)(jnp.asarray(WEIGHT), jnp.asarray(INPUTS), jnp.asarray(TARGETS))
    ours = jnp.asarray(WEIGHT) - LR * grads
    np.testing.assert_allclose(np.asarray(ours), weight.detach().numpy(), rtol=1e-6, atol=1e-6)


@pytest.fixture
def tf32() -> Iterator[None]:
    torch_before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    jax_before = jax.config.jax_default_matmul_precision
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    jax.config.update("jax_default_matmul_precision", "tensorfloat32")
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = torch_before
    jax.config.update("jax_default_matmul_precision", jax_before)


@pytest.mark.idiom("tf32-matmul")
@pytest.mark.usefixtures("tf32")
def test_tf32_matmuls_in_both() -> None:
    assert torch.get_float32_matmul_precision() == "high"  # what allow_tf32 means in torch
    a = RNG.standard_normal((64, 32)).astype(np.float32)
    b = RNG.standard_normal((32, 16)).astype(np.float32)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    theirs = (torch.from_numpy(a).to(device) @ torch.from_numpy(b).to(device)).cpu().numpy()
    ours = np.asarray(jnp.asarray(a) @ jnp.asarray(b))
    # TF32 keeps 10 mantissa bits: agreement to about 1e-3 relative on a GPU, exact on a CPU.
    np.testing.assert_allclose(ours, theirs, rtol=5e-3, atol=5e-3)
