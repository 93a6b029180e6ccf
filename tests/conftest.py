"""Shared test configuration.

``TORCH2JAX_DEVICE_TEST_REQUIRE`` (comma-separated) names frameworks that must be
importable; ``scripts/test.sh`` sets it so a broken torch install fails the run
instead of skipping every side-by-side test. ``cuda`` in the list requires a CUDA GPU
visible to both torch and JAX (``scripts/gpu-parity.sh``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

REQUIRE_ENV = "TORCH2JAX_DEVICE_TEST_REQUIRE"

# PyTorch scripts the scanner reads as text; running them is not the point.
collect_ignore = ["fixtures"]


def required_frameworks() -> list[str]:
    return [name.strip() for name in os.environ.get(REQUIRE_ENV, "").split(",") if name.strip()]


@pytest.fixture(autouse=True)
def _restore_default_devices() -> Iterator[None]:
    """Every test starts and ends with no default device set, in torch and in tj."""
    import torch2jax_device as tj

    yield
    tj.set_default_device(None)
    try:
        import torch
    except ImportError:
        return
    torch.set_default_device(None)
