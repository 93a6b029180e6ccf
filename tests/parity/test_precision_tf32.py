"""TF32 switches side by side: torch's and the port's read and write the same way."""

from __future__ import annotations

from collections.abc import Iterator

import jax
import pytest
import torch

import torch2jax_device as tj
from torch2jax_device._src import precision as _precision


@pytest.fixture(autouse=True)
def restored() -> Iterator[None]:
    jax_before = jax.config.jax_default_matmul_precision
    torch_before = torch.get_float32_matmul_precision()
    yield
    jax.config.update("jax_default_matmul_precision", jax_before)
    torch.set_float32_matmul_precision(torch_before)


@pytest.mark.idiom("tf32-matmul")
@pytest.mark.parametrize("allowed", [True, False])
def test_allow_tf32_means_the_same_precision(allowed: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = allowed
    tj.backends.cuda.matmul.allow_tf32 = allowed
    assert tj.backends.cuda.matmul.allow_tf32 == torch.backends.cuda.matmul.allow_tf32
    assert _precision.matmul_precision() == torch.get_float32_matmul_precision()


@pytest.mark.idiom("tf32-matmul")
@pytest.mark.parametrize("name", ["highest", "high", "medium"])
def test_set_float32_matmul_precision_is_configure(name: str) -> None:
    torch.set_float32_matmul_precision(name)
    tj.configure(matmul_precision=name)
    assert _precision.matmul_precision() == torch.get_float32_matmul_precision()
    assert tj.backends.cuda.matmul.allow_tf32 == torch.backends.cuda.matmul.allow_tf32


def test_torchs_default_is_highest_and_configure_gives_it() -> None:
    # A fresh torch says "highest"; the port reaches it with one call.
    tj.configure(matmul_precision=torch.get_float32_matmul_precision())
    assert jax.config.jax_default_matmul_precision == "highest"
