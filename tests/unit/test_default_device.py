"""First use of every entry point from many threads at once, in a fresh process.

Only the first use can race: it imports JAX's extension modules, the library's lazily
loaded parts (checkpoints, feeding, distributed, porting) and starts JAX's backends.
Each of 16 threads calls every entry point, starting at a different one, so every
entry point is some thread's first call while the others are inside another.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.support.deadlines import deadline

_RACE = textwrap.dedent(
    """
    import importlib, os, tempfile, threading, traceback
    import numpy as np
    import safetensors.numpy
    import torch2jax_device as tj

    folder = tempfile.mkdtemp()
    weights = os.path.join(folder, "weights.safetensors")
    safetensors.numpy.save_file({"x": np.arange(4, dtype=np.float32)}, weights)

    def track():
        with tj.track_arrays("cpu"):
            pass

    def enter():
        with tj.device("cpu"):
            pass

    def read_slice():
        with tj.safe_open(weights, device="cpu") as f:
            return f.get_slice("x")[1:3]

    def loader():
        return list(tj.DeviceLoader([{"x": np.ones(2)}], "cpu"))

    calls = [
        lambda: tj.set_default_device("cpu"),
        lambda: tj.resolve("cpu"),
        lambda: tj.get_default_device(),
        lambda: tj.cuda.is_available(),
        lambda: tj.cuda.device_count(),
        lambda: tj.available_backends(),
        lambda: tj.list_devices(),
        lambda: tj.device("cpu").jax_device,
        lambda: tj.device("cpu") == tj.resolve("cpu"),
        enter,
        lambda: tj.accelerator.current_accelerator(),
        lambda: tj.accelerator.device_count(),
        lambda: tj.backends.mps.is_available(),
        lambda: tj.backends.cuda.is_built(),
        lambda: tj.to_device({"a": np.zeros(2)}, "cpu"),
        lambda: tj.to_jax(np.zeros(3), "cpu"),
        lambda: tj.device_of(tj.to_jax(np.zeros(1))),
        lambda: tj.check_same_device(tj.to_jax(np.zeros(1)), tj.to_jax(np.ones(1))),
        lambda: list(tj.parameters({"w": tj.to_jax(np.zeros(1))})),
        lambda: tj.live_arrays("cpu"),
        track,
        lambda: tj.load_file(weights, device="cpu"),
        lambda: tj.load(weights, map_location="cpu"),
        read_slice,
        lambda: tj.save_file(
            {"y": np.ones(2)}, os.path.join(folder, f"{threading.get_ident()}.safetensors")
        ),
        lambda: tj.pin_memory(np.zeros(2)),
        lambda: list(tj.prefetch_to_device([np.zeros(2)], "cpu")),
        loader,
        lambda: tj.distributed.is_initialized(),
        lambda: tj.porting,
        lambda: importlib.import_module("torch2jax_device.porting.scanner").scan_source,
    ]
    threads_count = 16
    barrier = threading.Barrier(threads_count)
    failures = []

    def worker(start):
        barrier.wait()
        for step in range(len(calls)):
            index = (start * 2 + step) % len(calls)
            try:
                calls[index]()
            except BaseException:
                failures.append(f"call {index}: " + traceback.format_exc())

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("".join(failures) or "ok")
    """
)


@pytest.mark.parametrize("attempt", range(5))
def test_sixteen_threads_make_their_first_calls_at_once(attempt: int) -> None:
    """A fresh process each time: only the first use can race."""
    result = subprocess.run(
        [sys.executable, "-c", _RACE],
        capture_output=True,
        text=True,
        timeout=deadline(300),
        check=True,
    )
    assert result.stdout.strip() == "ok", result.stdout
