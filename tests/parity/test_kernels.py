"""Kernel choices and compilation: what torch switches on, JAX (XLA) does by itself.

On the CPU the kernels are the same whatever the switch; what must agree are the
values the ported line computes.
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

RNG = np.random.default_rng(0)


@pytest.fixture
def cudnn_benchmark() -> Iterator[None]:
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    yield
    torch.backends.cudnn.benchmark = before


@pytest.mark.idiom("cudnn-benchmark")
@pytest.mark.usefixtures("cudnn_benchmark")
def test_a_convolution_needs_no_benchmark_switch() -> None:
    images = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)  # NCHW
    kernel = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)  # OIHW
    theirs = F.conv2d(torch.from_numpy(images), torch.from_numpy(kernel), padding=1)
    ours = jax.lax.conv_general_dilated(
        jnp.asarray(images), jnp.asarray(kernel), (1, 1), "SAME",
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
    )  # fmt: skip
    np.testing.assert_allclose(np.asarray(ours), theirs.numpy(), rtol=1e-5, atol=1e-5)


def _step(w: object, x: object) -> object:
    return ((x @ w) ** 2).sum() + (w * w).mean()  # type: ignore[operator]


@pytest.mark.idiom("torch-compile")
def test_a_compiled_step_computes_what_torch_compile_does() -> None:
    w = RNG.standard_normal((4, 3)).astype(np.float32)
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    theirs = torch.compile(_step, backend="eager")(torch.from_numpy(w), torch.from_numpy(x))
    ours = jax.jit(_step)(jnp.asarray(w), jnp.asarray(x))
    np.testing.assert_allclose(float(ours), float(theirs), rtol=1e-5)


@pytest.mark.idiom("sdp-kernel")
def test_attention_with_a_chosen_kernel_and_jaxs_layout() -> None:
    q, k, v = (RNG.standard_normal((2, 4, 6, 8)).astype(np.float32) for _ in range(3))  # BHTD
    with sdpa_kernel(SDPBackend.MATH):
        theirs = F.scaled_dot_product_attention(*(torch.from_numpy(t) for t in (q, k, v)))
    q_, k_, v_ = (jnp.asarray(t).swapaxes(1, 2) for t in (q, k, v))  # BTHD
    ours = jax.nn.dot_product_attention(q_, k_, v_, implementation="xla").swapaxes(1, 2)
    np.testing.assert_allclose(np.asarray(ours), theirs.numpy(), rtol=1e-5, atol=1e-5)
