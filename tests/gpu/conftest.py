"""Checks that need a CUDA GPU visible to torch and JAX, one file per catalog section.

Skipped elsewhere; ``scripts/gpu-parity.sh`` runs them (with the whole parity suite)
on a GPU machine, where ``TORCH2JAX_DEVICE_TEST_REQUIRE=torch,cuda`` makes a missing
GPU a failure instead of a skip.
"""

from __future__ import annotations

import pytest

import torch2jax_device as tj


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    import torch

    here = tj.cuda.is_available() and torch.cuda.is_available()
    for item in items:
        if "/gpu/" in item.nodeid.replace("\\", "/") or item.nodeid.startswith("tests/gpu"):
            item.add_marker(pytest.mark.gpu)
            if not here:
                item.add_marker(
                    pytest.mark.skip(reason="needs a CUDA GPU visible to both torch and JAX")
                )
