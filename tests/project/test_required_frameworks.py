"""The frameworks named in TORCH2JAX_DEVICE_TEST_REQUIRE must be importable (einops-style)."""

from __future__ import annotations

import importlib

import pytest

from tests.support.optional_frameworks import required_frameworks


@pytest.mark.parametrize("name", required_frameworks() or ["(none required)"])
def test_required_framework_is_importable(name: str) -> None:
    if name == "(none required)":
        pytest.skip("TORCH2JAX_DEVICE_TEST_REQUIRE is not set")
    if name == "cuda":
        import torch

        import torch2jax_device as tj

        assert torch.cuda.is_available(), "torch sees no CUDA GPU"
        assert tj.cuda.is_available(), "JAX sees no CUDA GPU"
        return
    importlib.import_module(name)
