"""First use of the default-device and resolution entry points from many threads at once."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_RACE = textwrap.dedent(
    """
    import threading, traceback
    import torch2jax_device as tj

    calls = [
        lambda: tj.set_default_device("cpu"),
        lambda: tj.resolve("cpu"),
        lambda: tj.get_default_device(),
        lambda: tj.cuda.is_available(),
        lambda: tj.available_backends(),
        lambda: tj.device("cpu").jax_device,
        lambda: tj.accelerator.current_accelerator(),
        lambda: tj.list_devices(),
    ]
    barrier = threading.Barrier(16)
    failures = []

    def worker(index):
        barrier.wait()
        try:
            tj.set_default_device("cpu")  # the first use most ported scripts make
            calls[index % len(calls)]()
        except BaseException:
            failures.append(traceback.format_exc())

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("".join(failures) or "ok")
    """
)


@pytest.mark.parametrize("attempt", range(5))
def test_sixteen_threads_start_jax_through_the_library_at_once(attempt: int) -> None:
    """A fresh process each time: only the first use can race (it imports and starts JAX)."""
    result = subprocess.run(
        [sys.executable, "-c", _RACE], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "ok", result.stdout
