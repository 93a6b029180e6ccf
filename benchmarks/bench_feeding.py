"""Prefetch benchmarks: overlap of a slow source with the step, and the cost of prefetching.

Run: ``.venv/bin/python benchmarks/bench_feeding.py`` (about a minute on 2 cores).

Targets (docs/benchmarks.md):
  * a source taking L ms per batch and a step taking C ms: the prefetched loop's time
    per step <= 1.15 x max(L, C), where the naive loop pays L + C;
  * instant source and step: ``for b in prefetch_to_device(batches, d)`` <= 1.10 x
    ``for b in batches: jax.device_put(b, d)`` per batch (block_until_ready in both).

L and C are measured alone in the same run, not taken from the settings. Each loop's
first batch is left out of its time (thread start and the first L are paid once).
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import torch2jax_device as tj
from torch2jax_device import prefetch_to_device

STEPS = 40
ROUNDS = 3


def sleeping_source(batch: dict[str, np.ndarray], seconds: float) -> Callable[[], Iterator[Any]]:
    """A source that takes ``seconds`` per batch without using the CPU (I/O-like)."""

    def source() -> Iterator[Any]:
        while True:
            time.sleep(seconds)
            yield {name: array.copy() for name, array in batch.items()}

    return source


def window_source(windows: int) -> Callable[[], Iterator[Any]]:
    """nanoGPT's get_batch on the CPU: random windows gathered from a host token array."""
    tokens = np.random.default_rng(0).integers(0, 50_000, size=20_000_000).astype(np.uint16)

    def source() -> Iterator[Any]:
        rng = np.random.default_rng(1)
        while True:
            starts = rng.integers(0, tokens.size - 1025, size=windows)
            x = np.stack([tokens[s : s + 1024] for s in starts]).astype(np.int32)
            y = np.stack([tokens[s + 1 : s + 1025] for s in starts]).astype(np.int32)
            yield {"x": x, "y": y}

    return source


def sleeping_step(seconds: float) -> Callable[[Any], Any]:
    """A step that keeps the device busy for ``seconds`` without using the host CPU."""
    reduce = jax.jit(lambda batch: sum(jnp.sum(leaf) for leaf in jax.tree.leaves(batch)))

    def step(batch: Any) -> Any:
        time.sleep(seconds)
        return jax.block_until_ready(reduce(batch))

    return step


def matmul_step(size: int, repeats: int) -> Callable[[Any], Any]:
    """A step that computes: ``repeats`` chained ``size`` x ``size`` matmuls (XLA threads)."""
    weights = jax.device_put(jnp.eye(size, dtype=jnp.float32) * 0.5, tj.resolve("cpu"))

    @jax.jit
    def compute(batch: Any) -> jax.Array:
        start = jnp.ones((size, size), jnp.float32) * jnp.mean(jax.tree.leaves(batch)[0])

        def body(_: int, acc: jax.Array) -> jax.Array:
            return jnp.tanh(acc @ weights)

        return jax.lax.fori_loop(0, repeats, body, start).sum()

    def step(batch: Any) -> Any:
        return jax.block_until_ready(compute(batch))

    return step


def per_step(loop: Iterator[Any], step: Callable[[Any], Any] | None) -> float:
    """Mean seconds per batch of ``loop``, first batch excluded."""
    first = next(loop)
    if step is not None:
        step(first)
    start = time.perf_counter()
    for batch in itertools.islice(loop, STEPS):
        if step is not None:
            step(batch)
    return (time.perf_counter() - start) / STEPS


def overlap_case(
    source: Callable[[], Iterator[Any]], step: Callable[[Any], Any]
) -> tuple[float, float, float, float]:
    """(L, C, naive per step, prefetched per step), medians over alternating rounds."""
    device = tj.resolve("cpu")
    placed = tj.to_device(next(source()), device)
    samples: dict[str, list[float]] = {"L": [], "C": [], "naive": [], "prefetched": []}
    for _ in range(ROUNDS):
        samples["L"].append(per_step(source(), None))
        samples["C"].append(per_step(itertools.repeat(placed), step))
        naive = (tj.to_device(batch, device) for batch in source())
        samples["naive"].append(per_step(naive, step))
        stream = prefetch_to_device(source(), device, size=2)
        samples["prefetched"].append(per_step(stream, step))
        stream.close()
    medians = {name: statistics.median(values) for name, values in samples.items()}
    return medians["L"], medians["C"], medians["naive"], medians["prefetched"]


def overhead_case(
    batches: list[dict[str, np.ndarray]], step: Callable[[Any], Any] = jax.block_until_ready
) -> tuple[float, float, float]:
    """Per-batch seconds: prefetch_to_device, raw jax.device_put, tj.to_device in-thread."""
    device = tj.resolve("cpu")

    def prefetched() -> None:
        for batch in prefetch_to_device(batches, device):
            step(batch)

    def raw() -> None:
        for batch in batches:
            step(jax.device_put(batch, device))

    def in_thread() -> None:
        for batch in batches:
            step(tj.to_device(batch, device, non_blocking=True))

    loops = {"prefetched": prefetched, "raw": raw, "in_thread": in_thread}
    samples: dict[str, list[float]] = {name: [] for name in loops}
    for loop in loops.values():
        loop()  # warm-up
    for _ in range(ROUNDS * 2):
        for name, loop in loops.items():
            start = time.perf_counter()
            loop()
            samples[name].append((time.perf_counter() - start) / len(batches))
    return tuple(statistics.median(samples[name]) for name in loops)  # type: ignore[return-value]


def main() -> None:
    image_batch = {
        "x": np.random.default_rng(0).random((64, 3, 32, 32), dtype=np.float32),
        "y": np.arange(64, dtype=np.int32),
    }
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind} x {jax.device_count()}")
    print(f"{STEPS} steps per loop, median of {ROUNDS} alternating rounds, prefetch size 2\n")

    overlap = [
        ("sleep source 20 ms, sleep step 20 ms", sleeping_source(image_batch, 0.020),
         sleeping_step(0.020)),
        ("sleep source 10 ms, matmul step", sleeping_source(image_batch, 0.010),
         matmul_step(256, 60)),
        ("window source, sleep step 10 ms", window_source(2048), sleeping_step(0.010)),
        # Informative: on a CPU-only machine the "device" is the 2 cores the source needs.
        ("window source, matmul step (CPU-bound both)", window_source(2048),
         matmul_step(256, 60)),
    ]  # fmt: skip
    print(
        f"{'overlap case':43} {'L':>8} {'C':>8} {'naive':>8} {'prefetch':>9} "
        f"{'naive/(L+C)':>12} {'prefetch/max':>13}  target"
    )
    for name, source, step in overlap:
        latency, compute, naive, prefetched = overlap_case(source, step)
        print(
            f"{name:43} {latency * 1e3:6.2f}ms {compute * 1e3:6.2f}ms {naive * 1e3:6.2f}ms "
            f"{prefetched * 1e3:7.2f}ms {naive / (latency + compute):12.3f} "
            f"{prefetched / max(latency, compute):13.3f}  <= 1.15"
        )

    rng = np.random.default_rng(0)
    shapes = {
        "tokens 12x1024 int32 (x, y)": lambda: {
            "x": rng.integers(0, 50_000, (12, 1024), dtype=np.int32),
            "y": rng.integers(0, 50_000, (12, 1024), dtype=np.int32),
        },
        "images 64x3x32x32 f32 + labels": lambda: {
            "x": rng.random((64, 3, 32, 32), dtype=np.float32),
            "y": np.arange(64, dtype=np.int32),
        },
        "images 64x3x128x128 f32 + labels": lambda: {
            "x": rng.random((64, 3, 128, 128), dtype=np.float32),
            "y": np.arange(64, dtype=np.int32),
        },
    }
    print(
        f"\n{'overhead case (instant source and step)':43} {'prefetch':>9} {'device_put':>11} "
        f"{'to_device':>10} {'prefetch/device_put':>20} {'prefetch/to_device':>19}  target"
    )
    for name, make in shapes.items():
        count = 100 if "128x128" in name else 1000
        ours, raw, in_thread = overhead_case([make() for _ in range(count)])
        print(
            f"{name:43} {ours * 1e6:7.1f}us {raw * 1e6:9.1f}us {in_thread * 1e6:8.1f}us "
            f"{ours / raw:20.3f} {ours / in_thread:19.3f}  <= 1.10 (first ratio)"
        )

    # Informative: with a step that takes any time, the thread runs ahead during it and
    # the loop only pays for taking a ready batch.
    print(f"\n{'same, with a 1 ms step (sleep)':43} {'prefetch':>9} {'device_put':>11} "
          f"{'to_device':>10} {'prefetch/device_put':>20}")  # fmt: skip
    for name, make in list(shapes.items())[:2]:
        batches = [make() for _ in range(300)]
        ours, raw, in_thread = overhead_case(batches, sleeping_step(0.001))
        print(
            f"{name:43} {ours * 1e6:7.1f}us {raw * 1e6:9.1f}us {in_thread * 1e6:8.1f}us "
            f"{ours / raw:20.3f}"
        )


if __name__ == "__main__":
    main()
