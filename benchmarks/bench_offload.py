"""A model bigger than the accelerator: load by a ``tj.DeviceMap``, compute over offloaded weights.

Run: ``.venv/bin/python benchmarks/bench_offload.py [--layers 16 --width 1024]``. On a
machine without a GPU, cpu:1 stands in for the accelerator (two simulated CPU devices):
every tier is host RAM there, so the figures show the library's overhead, not the bus.
On a GPU machine the accelerator is cuda:0 and the model is 1.5 times its budget.

The anchor, measured in the same run, is the all-on-device model: ``tj.load_file(path,
device)`` and a jitted forward pass over it. Against it:

* ``device="auto"`` with the accelerator's budget at 1/1.5 of the model (the rest in its
  ``pinned_host`` memory), the forward pass bringing offloaded layers in with
  ``DeviceMap.to_execution_device`` inside ``jit``;
* everything in ``pinned_host`` memory (an accelerator budget of 0).

Accelerate's ``cpu_offload`` is not installed here; its comparison is left to a GPU run
with ``accelerate`` present.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import jax

if os.environ.get("JAX_PLATFORMS", "") in ("", "cpu"):
    jax.config.update("jax_num_cpu_devices", 2)

import numpy as np

import torch2jax_device as tj


def median_times(cases: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median wall time (s) of each case, run in alternating rounds so drift hits all."""
    for fn in cases.values():
        jax.block_until_ready(fn())  # compile, first touch
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            start = time.perf_counter()
            jax.block_until_ready(fn())
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


def forward(params: dict[str, jax.Array], x: jax.Array, layers: int) -> jax.Array:
    for i in range(layers):
        x = jax.nn.gelu(x @ params[f"layers.{i}.kernel"] + params[f"layers.{i}.bias"])
    return x


def offloaded_forward(plan: tj.DeviceMap, layers: int) -> Callable[..., jax.Array]:
    """The forward pass over parameters the plan placed, offloaded ones brought in by jit."""

    @jax.jit
    def run(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
        return forward(plan.to_execution_device(params), x, layers)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    accelerator = "cuda:0" if tj.cuda.is_available() else "cpu:1"
    rng = np.random.default_rng(0)
    tensors: dict[str, np.ndarray[Any, Any]] = {}
    for i in range(args.layers):
        kernel = rng.standard_normal((args.width, args.width)) / np.sqrt(args.width)
        tensors[f"layers.{i}.kernel"] = kernel.astype(np.float32)
        tensors[f"layers.{i}.bias"] = np.zeros(args.width, np.float32)
    total = sum(t.nbytes for t in tensors.values())
    path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
    tj.save_file(tensors, path)
    x = tj.to_device(rng.standard_normal((args.batch, args.width)).astype(np.float32), accelerator)
    layers = args.layers
    print(f"model: {layers} layers of {args.width}x{args.width} float32, {total / 2**20:.0f} MiB")
    print(f"accelerator: {accelerator}, jax {jax.__version__}")

    budgets = {
        "all on the device (anchor)": None,
        "device='auto', model 1.5x the budget": int(total / 1.5),
        "all in pinned_host memory": 0,
    }
    loads: dict[str, Callable[[], Any]] = {}
    runs: dict[str, Callable[[], Any]] = {}
    for label, budget in budgets.items():
        if budget is None:  # every byte read, as the planned loads read them
            loads[label] = functools.partial(tj.load_file, path, accelerator, backend="pread")
            params = loads[label]()
            run = jax.jit(functools.partial(forward, layers=layers))
        else:
            max_memory = {accelerator: budget, "cpu": 4 * total}
            plan = tj.DeviceMap.plan(path, max_memory=max_memory)
            if budget:
                print(plan)
            loads[label] = functools.partial(
                tj.load_file, path, device="auto", max_memory=max_memory
            )
            params = loads[label]()
            run = offloaded_forward(plan, layers)
        runs[label] = functools.partial(run, params, x)
    load_times = median_times(loads, args.repeats)
    forward_times = median_times(runs, args.repeats)
    anchor = next(iter(budgets))
    expected = np.asarray(runs[anchor]())

    print()
    print(f"{'case':<38} {'load (s)':>9} {'x anchor':>9} {'forward (ms)':>13} {'x anchor':>9}")
    worst = 0.0
    for label in budgets:
        worst = max(worst, float(np.abs(np.asarray(runs[label]()) - expected).max()))
        load, took = load_times[label], forward_times[label]
        print(
            f"{label:<38} {load:>9.3f} {load / load_times[anchor]:>9.2f} {took * 1e3:>13.2f} "
            f"{took / forward_times[anchor]:>9.2f}"
        )
    print(f"largest difference from the all-on-device forward pass: {worst:.3g}")
    if worst > 1e-5:
        sys.exit("an offloaded forward pass differs from the all-on-device one")


if __name__ == "__main__":
    main()
