"""A planned load's host-memory peak, measured in a fresh process.

`measured_load` runs the load ``call`` (an expression of ``source``, a path, and
``budget``, the ``max_memory`` mapping) on ``small`` first, to warm up imports and JAX's
start, then on ``path``, and returns ``{"peak_mib": ..., "placed": {"device id/memory
kind": bytes}}`` with the peak read from ``/proc`` (``VmHWM`` after ``clear_refs``), so
only the load itself is counted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.deadlines import deadline

_TEMPLATE = """
import gc, json, sys
import jax, numpy as np
import torch2jax_device as tj

def kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])

def load(source, budget):
    return {call}

path, small, budget = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
load(small, budget)  # warm-up: imports, JAX's start
gc.collect()
before = kib("VmRSS")
with open("/proc/self/clear_refs", "w") as file:
    file.write("5")
loaded = load(path, budget)
peak = kib("VmHWM") - before
kinds = {{}}
for array in loaded.values():
    key = f"{{next(iter(array.devices())).id}}/{{array.sharding.memory_kind}}"
    kinds[key] = kinds.get(key, 0) + array.nbytes
print(json.dumps({{"peak_mib": peak / 1024, "placed": kinds}}))
"""


def measured_load(call: str, path: Path, small: Path, budget: dict[str, int]) -> Any:
    """The figures of ``call`` (``tj.load_file(source, device="auto", max_memory=budget)``)
    loading ``path``, in a process of its own with 4 CPU devices."""
    mib = 2**20
    run = subprocess.run(
        [sys.executable, "-c", _TEMPLATE.format(call=call), str(path), str(small),
         json.dumps(budget)],
        cwd=Path(__file__).resolve().parents[2],  # where torch2jax_device imports from
        capture_output=True,
        text=True,
        timeout=deadline(300),
        # Blocks of 1 MiB and more from mmap, given back when freed (as
        # tests/unit/test_checkpoints_memory.py does: glibc's arenas otherwise keep freed
        # buffers and add reuse misses to the peak).
        env={**os.environ, "JAX_NUM_CPU_DEVICES": "4", "MALLOC_MMAP_THRESHOLD_": str(mib)},
        check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])
