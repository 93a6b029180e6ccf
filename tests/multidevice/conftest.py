"""Four simulated CPU devices for this directory, in its own pytest process.

JAX reads the CPU device count once, when its backends start; ``scripts/test.sh``
runs ``pytest tests/multidevice`` separately. Collected together with tests that
already started JAX with another count, these tests skip with that reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import jax
import pytest

from tests.support.clocks import ManualClock
from tests.support.xla import optimized_loop_flags
from torch2jax_device._src import host_staging
from torch2jax_device._src import platforms as _platforms

DEVICE_COUNT = 4

if not _platforms.backends_initialized():
    jax.config.update("jax_num_cpu_devices", DEVICE_COUNT)
    # Gigabyte staging tests here: vectorized loops (tests/support/xla.py says why).
    os.environ["XLA_FLAGS"] = optimized_loop_flags(os.environ.get("XLA_FLAGS", ""))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if len(jax.local_devices(backend="cpu")) == DEVICE_COUNT:
        return
    reason = f"needs {DEVICE_COUNT} CPU devices: run `pytest tests/multidevice` in its own process"
    for item in items:
        if "multidevice" in item.nodeid:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def pool_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[ManualClock]:
    """The pinned pool on a clock that moves only when a test moves it: its idle timer
    never fires between a load and the assert that counts the buffers it gave back."""
    clock = ManualClock()
    host_staging.POOL.clear()  # a real timer of an earlier start goes with the buffers
    monkeypatch.setattr(host_staging.POOL, "_clock", clock)
    monkeypatch.setattr(host_staging.POOL, "_schedule", clock.schedule)
    yield clock
    host_staging.POOL.clear()
