"""Placement benchmarks: ``tj.to_device`` / ``tj.to_jax`` against raw JAX, in one run.

Run: ``.venv/bin/python benchmarks/bench_placement.py`` (simulates 2 CPU devices; on a
GPU machine the transfer case moves between cpu and cuda:0 instead).

Targets (docs/benchmarks.md):
  * 1000-leaf tree to another device: to_device <= 1.10x batched jax.device_put(tree, d)
  * already-placed tree, copy=False: to_device <= 0.25x jax.device_put(tree, d)
  * 1 GiB torch CPU tensor -> JAX CPU: to_jax <= 1 ms and shares memory (jnp.asarray copies)
  * the first to_jax of a fresh 1 GiB tensor <= 1 ms; the anchor is JAX's own first
    jax.dlpack.from_dlpack of a fresh tensor (both pay XLA's first view of new memory)

The two sides alternate call by call (ours, raw, ours, raw...) and each side's median is
taken, so a neighbour that takes the shared cores for a while slows both alike; the
load average is printed with the figures.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax

jax.config.update("jax_num_cpu_devices", 2)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import torch2jax_device as tj  # noqa: E402

GIB_FLOATS = 256 * 1024 * 1024  # float32 elements in 1 GiB


def timed_pair(
    ours: Callable[[], Any],
    raw: Callable[[], Any],
    repeats: int,
    rounds: int = 5,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[float, float]:
    """Median times (s, by ``clock``: wall by default) of two functions called
    alternately, ``repeats * rounds`` calls each, after one call each to warm up."""
    ours()
    raw()
    mine: list[float] = []
    theirs: list[float] = []
    for _ in range(repeats * rounds):
        for fn, samples in ((ours, mine), (raw, theirs)):
            start = clock()
            fn()
            samples.append(clock() - start)
    return statistics.median(mine), statistics.median(theirs)


def first_conversions(convert: Callable[[Any], Any], tensors: int) -> tuple[float, float]:
    """Medians (s) of the first and the second ``convert`` of fresh 1 GiB tensors."""
    firsts, seconds = [], []
    for _ in range(tensors):
        tensor = torch.ones(GIB_FLOATS, dtype=torch.float32)
        start = time.perf_counter()
        first = convert(tensor)
        middle = time.perf_counter()
        second = convert(tensor)
        end = time.perf_counter()
        firsts.append(middle - start)
        seconds.append(end - middle)
        del first, second, tensor
    return statistics.median(firsts), statistics.median(seconds)


def devices() -> tuple[jax.Device, jax.Device]:
    if tj.cuda.is_available():
        return tj.resolve("cpu"), tj.resolve("cuda:0")
    return tj.resolve("cpu:0"), tj.resolve("cpu:1")


def main() -> None:
    source, target = devices()
    rows = []
    tree = {f"layer{i}": jax.device_put(np.full(16, i, np.float32), source) for i in range(1000)}

    ours, raw = timed_pair(
        lambda: tj.to_device(tree, target),
        lambda: jax.block_until_ready(jax.device_put(tree, target)),
        10,
    )
    rows.append(("1000-leaf tree to another device", ours, raw, ours / raw, "<= 1.10"))
    ours, raw = timed_pair(  # the process's CPU time, JAX's threads included: load-proof
        lambda: tj.to_device(tree, target),
        lambda: jax.block_until_ready(jax.device_put(tree, target)),
        10,
        clock=time.process_time,
    )
    rows.append(("  the same, CPU time", ours, raw, ours / raw, "<= 1.10"))

    placed = tj.to_device(tree, target)
    ours, raw = timed_pair(
        lambda: tj.to_device(placed, target),
        lambda: jax.block_until_ready(jax.device_put(placed, target)),
        10,
    )
    rows.append(("1000-leaf tree already placed", ours, raw, ours / raw, "<= 0.25"))

    tensor = torch.ones(256 * 1024 * 1024, dtype=torch.float32)  # 1 GiB
    shared = tj.to_jax(tensor)
    aliases = shared.unsafe_buffer_pointer() == tensor.data_ptr()
    ours, raw = timed_pair(
        lambda: tj.to_jax(tensor), lambda: jnp.asarray(tensor).block_until_ready(), 2, rounds=2
    )
    rows.append(("1 GiB torch CPU tensor -> JAX CPU", ours, raw, ours / raw, "<= 1 ms"))
    shared = tensor = None  # 1 GiB back before the fresh tensors below

    tj.to_jax(torch.ones(4))  # the first call of the process (its imports) is not the case
    jax.dlpack.from_dlpack(torch.ones(4))
    ours_first, ours_second = first_conversions(tj.to_jax, 9)
    raw_first, _ = first_conversions(jax.dlpack.from_dlpack, 9)
    rows.append(
        (
            "first to_jax, fresh 1 GiB tensor",
            ours_first,
            raw_first,
            ours_first / raw_first,
            "<= 1 ms",
        )
    )
    rows.append(
        ("  the second to_jax of it", ours_second, ours_first, ours_second / ours_first, "")
    )

    print(f"jax {jax.__version__}, torch {torch.__version__}, {source} -> {target}")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    print(f"{'case':36} {'torch2jax_device':>17} {'raw JAX':>12} {'ratio':>8}  target")
    for name, mine, theirs, ratio, goal in rows:
        print(f"{name:36} {mine * 1e3:14.3f} ms {theirs * 1e3:9.3f} ms {ratio:8.3f}  {goal}")
    print(f"to_jax shares the tensor's memory: {aliases}; jnp.asarray copies")


if __name__ == "__main__":
    main()
