"""A script that measures a planned load's host-memory peak in a fresh process.

``python -c planned_load_script(call) PATH SMALL BUDGET_JSON``: ``call`` loads ``path``
(or ``small`` first, to warm up imports and JAX's start) with ``budget`` (the
``max_memory`` mapping); the script prints ``{"peak_mib": ..., "placed": {"device
id/memory kind": bytes}}`` with the peak read from ``/proc`` (``VmHWM`` after
``clear_refs``), so only the load itself is counted.
"""

from __future__ import annotations

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


def planned_load_script(call: str) -> str:
    """The measuring script for ``call``, an expression of ``source`` (a path) and
    ``budget`` (``max_memory``): ``tj.load_file(source, device="auto", max_memory=budget)``."""
    return _TEMPLATE.format(call=call)
