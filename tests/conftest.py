"""Shared test configuration, and where a new test goes.

Tests live in ``tests/<how it runs>/test_<catalog section>.py``:

* how it runs: ``unit`` (in this process, one CPU device), ``parity`` (side by side with
  PyTorch as the oracle, through ``parity/harness.py``), ``multidevice`` (4 simulated CPU
  devices, in its own pytest process), ``gpu`` (a real CUDA GPU; skipped elsewhere),
  ``cli`` (through the ``torch2jax-device`` command), ``examples`` (a script of
  ``examples/`` as a user runs it) and ``project`` (packaging, imports, test setup);
* the file is named after the catalog section the behaviour belongs to, the same word
  the package, the guide and the benchmarks use: ``devices``, ``availability``,
  ``default_device``, ``creation``, ``placement``, ``startup``, ``memory``,
  ``precision``, ``randomness``, ``kernels``, ``timing``, ``checkpoints``, ``feeding``,
  ``distributed`` (``platforms`` and ``catalog`` for the tables behind them);
  ``test_<section>_<aspect>.py`` when one file would be too long.
  ``cli`` and ``examples`` name the command or script instead; ``project`` names what
  it checks.

Helpers shared by several tests are in ``tests/support/`` (which holds no tests).

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

# PyTorch scripts the scanner reads as text; importing them is not the point.
collect_ignore = ["support/fixtures"]


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
