"""The frameworks named in TORCH2JAX_DEVICE_TEST_REQUIRE must be importable (einops-style)."""

from __future__ import annotations

import importlib
import importlib.util

import pytest

from tests.support.optional_frameworks import missing_module, required_frameworks
from torch2jax_device import MissingFrameworkError


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


def test_a_missing_framework_is_named_through_the_library_error() -> None:
    """A test that reaches a call needing an uninstalled framework skips as one that
    imports it does: the library's error names no module, the import it came from does."""
    from torch2jax_device._src.detect import import_torch

    try:
        importlib.import_module("torch_is_not_installed_here")
    except ModuleNotFoundError as bare:
        assert missing_module(bare) == "torch_is_not_installed_here"
    assert missing_module(ValueError("No module named 'torch'")) is None
    if importlib.util.find_spec("torch") is None:
        with pytest.raises(MissingFrameworkError) as caught:
            import_torch("tj.optim.state_dict")
        assert missing_module(caught.value) == "torch"
    chained = MissingFrameworkError("x needs PyTorch")
    chained.__cause__ = ModuleNotFoundError("No module named 'torch'", name="torch")
    assert missing_module(chained) == "torch"
    assert missing_module(MissingFrameworkError("x needs PyTorch")) is None
