"""Placement benchmarks: ``tj.to_device`` / ``tj.to_jax`` against raw JAX, in one run.

Run: ``.venv/bin/python benchmarks/bench_placement.py`` (simulates 2 CPU devices; on a
GPU machine the transfer case moves between cpu and cuda:0 instead).

Targets (docs/benchmarks.md):
  * 1000-leaf tree to another device: to_device <= 1.10x batched jax.device_put(tree, d)
  * already-placed tree, copy=False: to_device <= 0.25x jax.device_put(tree, d)
  * 1 GiB torch CPU tensor -> JAX CPU: to_jax <= 1 ms and shares memory (jnp.asarray copies)
"""

from __future__ import annotations

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


def timed_pair(
    ours: Callable[[], Any], raw: Callable[[], Any], repeats: int, rounds: int = 5
) -> tuple[float, float]:
    """Median wall times (s) of two functions, in alternating blocks so drift hits both."""
    ours()
    raw()
    mine: list[float] = []
    theirs: list[float] = []
    for _ in range(rounds):
        for fn, samples in ((ours, mine), (raw, theirs)):
            for _ in range(repeats):
                start = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - start)
    return statistics.median(mine), statistics.median(theirs)


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

    print(f"jax {jax.__version__}, torch {torch.__version__}, {source} -> {target}")
    print(f"{'case':36} {'torch2jax_device':>17} {'raw JAX':>12} {'ratio':>8}  target")
    for name, mine, theirs, ratio, goal in rows:
        print(f"{name:36} {mine * 1e3:14.3f} ms {theirs * 1e3:9.3f} ms {ratio:8.3f}  {goal}")
    print(f"to_jax shares the tensor's memory: {aliases}; jnp.asarray copies")


if __name__ == "__main__":
    main()
