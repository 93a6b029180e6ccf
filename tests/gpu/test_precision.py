"""float32 matmuls on a GPU: the port's "highest" gives torch's default numbers (issue 22.5)."""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import torch2jax_device as tj


@pytest.fixture(autouse=True)
def restored() -> Iterator[None]:
    before = jax.config.jax_default_matmul_precision
    yield
    jax.config.update("jax_default_matmul_precision", before)


def _relative_error(result: np.ndarray, exact: np.ndarray) -> float:
    return float(np.linalg.norm(result - exact) / np.linalg.norm(exact))


def test_highest_matches_torchs_default_error() -> None:
    a = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    exact = a.astype(np.float64) @ a.astype(np.float64)
    theirs = torch.from_numpy(a).cuda()
    torch_error = _relative_error((theirs @ theirs).cpu().numpy(), exact)  # torch's default

    tj.configure(matmul_precision="highest")
    gpu = tj.resolve("cuda")
    ours = jax.device_put(a, gpu)
    ours_error = _relative_error(np.asarray(jax.jit(lambda x: x @ x)(ours)), exact)
    assert ours_error < 10 * torch_error + 1e-6, (ours_error, torch_error)

    major, _ = tj.cuda.get_device_capability()
    if major >= 8:  # JAX's default uses TF32 there: the error the setting removes
        tj.configure(matmul_precision="high")
        fast_error = _relative_error(np.asarray(jax.jit(lambda x: x @ x)(jnp.array(ours))), exact)
        assert fast_error > 10 * ours_error, (fast_error, ours_error)
