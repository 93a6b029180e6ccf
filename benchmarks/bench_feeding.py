"""Feeding benchmarks: what prefetching costs over a plain loop, and what it overlaps.

Run: ``.venv/bin/python benchmarks/bench_feeding.py`` (about two minutes on 2 cores).

Every figure is a ratio to an anchor measured in the same run, round by round (each
round runs the anchor and the contenders back to back; the median of the per-round
ratios is printed, so a machine that gets busier halfway changes both sides):

* overhead (instant source and step, ``block_until_ready`` in every loop):
  ``for b in tj.prefetch_to_device(batches, d)`` against
  ``for b in batches: jax.device_put(b, d)``; target <= 1.10 for small, medium and
  large batches;
* overlap (a source taking L per batch, a step taking C): the prefetched loop's time
  per step against max(L, C), L and C measured alone in the same round; target
  <= 1.15 for a slow (sleeping, I/O-like) source and for a CPU-bound NumPy source. The
  plain loop pays L + C.

The first ``WARMUP`` batches of each loop are left out: thread start, the first L, the
step's compilation, and the automatic choice of thread, which watches the first 4
batches in the loop's thread (a cost of at most 3 x min(L, C), once per epoch).

The rank check of a ``DeviceLoader`` over a mesh of several processes (each batch's
shapes compared across the ranks, ``_src/distributed/batch_agreement.py``), under
torchrun with 2 CPU processes, each rank printing its figures::

    JAX_PLATFORMS=cpu OMP_NUM_THREADS=1 .venv/bin/torchrun --nproc_per_node=2 \\
        benchmarks/bench_feeding.py ranks

per batch of a small global batch: the loop as users run it, the same loop with the
comparison taken out (for the breakdown only), and one write and one read at JAX's
coordination service, the calls each comparison makes.
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import torch2jax_device as tj
from torch2jax_device import DeviceLoader, prefetch_to_device

STEPS = 40
WARMUP = 5
ROUNDS = 5
TOKENS = 20_000_000


def sleeping_source(batch: dict[str, np.ndarray], seconds: float) -> Callable[[], Iterator[Any]]:
    """A source that takes ``seconds`` per batch without using the CPU (I/O-like)."""

    def source() -> Iterator[Any]:
        while True:
            time.sleep(seconds)
            yield {name: array.copy() for name, array in batch.items()}

    return source


def gather_windows(tokens: np.ndarray, rng: np.random.Generator, windows: int) -> dict[str, Any]:
    """nanoGPT's get_batch on the host: random 1024-token windows, inputs and targets."""
    starts = rng.integers(0, tokens.size - 1025, size=windows)
    x = np.stack([tokens[s : s + 1024] for s in starts]).astype(np.int32)
    y = np.stack([tokens[s + 1 : s + 1025] for s in starts]).astype(np.int32)
    return {"x": x, "y": y}


def window_source(tokens: np.ndarray, windows: int) -> Callable[[], Iterator[Any]]:
    """A CPU-bound NumPy source: ``gather_windows`` in the consuming process."""

    def source() -> Iterator[Any]:
        rng = np.random.default_rng(1)
        while True:
            yield gather_windows(tokens, rng, windows)

    return source


class WindowBatches:
    """The same batches from a map-style dataset, for DataLoader worker processes.

    Item ``i`` is a whole batch (``DataLoader(batch_size=None)``); the token array is
    rebuilt from its seed in each worker instead of being pickled to it. One epoch is
    one measured loop, so that every epoch ends with idle workers.
    """

    def __init__(self, windows: int) -> None:
        self.windows = windows
        self.tokens: np.ndarray | None = None

    def __len__(self) -> int:
        return WARMUP + STEPS

    def __getitem__(self, index: int) -> dict[str, Any]:
        if self.tokens is None:
            self.tokens = token_array()
        return gather_windows(self.tokens, np.random.default_rng(index), self.windows)


def token_array() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 50_000, size=TOKENS).astype(np.uint16)


def sleeping_step(seconds: float) -> Callable[[Any], Any]:
    """A step that waits for its batch, then ``seconds`` without using the host CPU.

    A GPU step as the host sees it: the device is busy, the host's cores are free (on
    this CPU-only machine, any real computation would take the cores the source needs;
    the matmul step below shows that case).
    """

    def step(batch: Any) -> Any:
        jax.block_until_ready(batch)
        time.sleep(seconds)
        return batch

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


def per_step(
    loop: Iterator[Any], step: Callable[[Any], Any] | None, cpu: dict[str, float] | None = None
) -> float:
    """Mean seconds per batch of ``loop`` after ``WARMUP`` batches (and in ``cpu["s"]``,
    the process's CPU seconds per batch: every thread's, the library's included)."""
    for batch in itertools.islice(loop, WARMUP):
        if step is not None:
            step(batch)
    start, cpu_start = time.perf_counter(), time.process_time()
    for batch in itertools.islice(loop, STEPS):
        if step is not None:
            step(batch)
    if cpu is not None:
        cpu["s"] = (time.process_time() - cpu_start) / STEPS
    return (time.perf_counter() - start) / STEPS


def overlap_case(
    source: Callable[[], Iterator[Any]],
    step: Callable[[Any], Any],
    workers: DeviceLoader | None = None,
) -> dict[str, float]:
    """L, C (ms, medians) and the per-round ratios' medians: plain/(L+C), prefetch/max,
    and the CPU time of the prefetched loop against the plain loop's (the same work)."""
    device = tj.resolve("cpu")
    placed = tj.to_device(next(source()), device)
    rounds: list[dict[str, float]] = []
    for _ in range(ROUNDS):
        plain_cpu: dict[str, float] = {}
        prefetch_cpu: dict[str, float] = {}
        times = {
            "L": per_step(source(), None),
            "C": per_step(itertools.repeat(placed), step),
            "plain": per_step((tj.to_device(batch, device) for batch in source()), step, plain_cpu),
        }
        stream = prefetch_to_device(source(), device)
        times["prefetch"] = per_step(stream, step, prefetch_cpu)
        times["cpu"] = prefetch_cpu["s"] / plain_cpu["s"]
        stream.close()
        if workers is not None:
            times["workers"] = per_step(iter(workers), step)
        rounds.append(times)
    longest = [max(r["L"], r["C"]) for r in rounds]
    result = {
        "L": statistics.median(r["L"] for r in rounds) * 1e3,
        "C": statistics.median(r["C"] for r in rounds) * 1e3,
        "plain/(L+C)": statistics.median(r["plain"] / (r["L"] + r["C"]) for r in rounds),
        "prefetch/max": statistics.median(
            r["prefetch"] / most for r, most in zip(rounds, longest, strict=True)
        ),
        "cpu prefetch/plain": statistics.median(r["cpu"] for r in rounds),
    }
    if workers is not None:
        result["workers/max"] = statistics.median(
            r["workers"] / most for r, most in zip(rounds, longest, strict=True)
        )
    return result


def overhead_case(
    batches: list[dict[str, np.ndarray]], step: Callable[[Any], Any] = jax.block_until_ready
) -> dict[str, float]:
    """Medians of per-round ratios to the plain ``jax.device_put`` loop, and its µs/batch."""
    device = tj.resolve("cpu")

    def prefetched(background: bool | None) -> Callable[[], None]:
        def loop() -> None:
            for batch in prefetch_to_device(batches, device, background=background):
                step(batch)

        return loop

    def device_put() -> None:
        for batch in batches:
            step(jax.device_put(batch, device))

    def to_device() -> None:
        for batch in batches:
            step(tj.to_device(batch, device, non_blocking=True))

    loops = {
        "device_put": device_put,
        "prefetch": prefetched(None),
        "thread": prefetched(True),
        "to_device": to_device,
    }
    for loop in loops.values():
        loop()  # warm-up
    rounds: list[dict[str, float]] = []
    for _ in range(ROUNDS * 2):
        times = {}
        for name, loop in loops.items():
            start = time.perf_counter()
            loop()
            times[name] = (time.perf_counter() - start) / len(batches)
        rounds.append(times)
    result = {"device_put us": statistics.median(r["device_put"] for r in rounds) * 1e6}
    for name in ("prefetch", "thread", "to_device"):
        result[name] = statistics.median(r[name] / r["device_put"] for r in rounds)
    return result


def main() -> None:
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind} x {jax.device_count()}")
    print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    print(f"{STEPS} steps per loop after {WARMUP}, median of {ROUNDS} rounds, prefetch size 2\n")

    rng = np.random.default_rng(0)
    shapes = {
        "small: tokens 12x1024 int32 x2 (96 KB)": lambda: {
            "x": rng.integers(0, 50_000, (12, 1024), dtype=np.int32),
            "y": rng.integers(0, 50_000, (12, 1024), dtype=np.int32),
        },
        "medium: images 64x3x32x32 f32 (786 KB)": lambda: {
            "x": rng.random((64, 3, 32, 32), dtype=np.float32),
            "y": np.arange(64, dtype=np.int32),
        },
        "large: images 64x3x128x128 f32 (12.6 MB)": lambda: {
            "x": rng.random((64, 3, 128, 128), dtype=np.float32),
            "y": np.arange(64, dtype=np.int32),
        },
    }
    print(
        f"{'instant source and step':42} {'device_put':>10} {'prefetch':>9} "
        f"{'thread':>7} {'to_device':>10}  target (prefetch)"
    )
    for name, make in shapes.items():
        count = 60 if name.startswith("large") else 600
        result = overhead_case([make() for _ in range(count)])
        print(
            f"{name:42} {result['device_put us']:8.1f}us {result['prefetch']:8.3f}x "
            f"{result['thread']:6.3f}x {result['to_device']:9.3f}x  <= 1.10"
        )
    print("(ratios to the plain device_put loop; thread: background=True, every batch handed")
    print(" over by the producer thread; to_device: tj.to_device in the loop, no prefetch)\n")

    tokens = token_array()
    image_batch = shapes["medium: images 64x3x32x32 f32 (786 KB)"]()

    from torch.utils.data import DataLoader

    workers = DeviceLoader(
        DataLoader(
            WindowBatches(2048), batch_size=None, num_workers=2,
            multiprocessing_context="spawn", persistent_workers=True,
        ),
        "cpu",
    )  # fmt: skip

    overlap = [
        ("slow source 20 ms, sleep step 20 ms", sleeping_source(image_batch, 0.020),
         sleeping_step(0.020), None),
        ("slow source 10 ms, matmul step", sleeping_source(image_batch, 0.010),
         matmul_step(256, 60), None),
        ("CPU-bound NumPy source, sleep step 10 ms", window_source(tokens, 2048),
         sleeping_step(0.010), workers),
        # Informative: on a CPU-only machine the "device" is the 2 cores the source needs.
        ("CPU-bound source, matmul step (both CPU)", window_source(tokens, 2048),
         matmul_step(256, 60), None),
    ]  # fmt: skip
    print(
        f"{'source and step':42} {'L':>8} {'C':>8} {'plain/(L+C)':>12} "
        f"{'prefetch/max(L,C)':>18}  target   {'CPU prefetch/plain':>18} {'2 workers/max':>13}"
    )
    for name, source, step, spawned in overlap:
        result = overlap_case(source, step, spawned)
        workers_ratio = f"{result['workers/max']:13.3f}" if "workers/max" in result else ""
        print(
            f"{name:42} {result['L']:6.2f}ms {result['C']:6.2f}ms "
            f"{result['plain/(L+C)']:12.3f} {result['prefetch/max']:18.3f}  <= 1.15   "
            f"{result['cpu prefetch/plain']:18.3f} {workers_ratio}"
        )
    print("(2 workers: the CPU-bound source as a Dataset in 2 spawned DataLoader workers,")
    print(" wrapped in DeviceLoader; the workers start once, in the first warm-up)")

    # Informative: with a step that takes any time, a fast source stays in the loop's
    # thread and its transfers are under way during the step.
    print(f"\n{'same batches, 1 ms step (sleep)':42} {'device_put':>10} {'prefetch':>9} "
          f"{'thread':>7}")  # fmt: skip
    for name, make in list(shapes.items())[:2]:
        result = overhead_case([make() for _ in range(200)], sleeping_step(0.001))
        print(
            f"{name:42} {result['device_put us']:8.1f}us {result['prefetch']:8.3f}x "
            f"{result['thread']:6.3f}x"
        )
    print(f"\nload average at end: {os.getloadavg()[0]:.1f}")


def ranks() -> None:
    """The rank check's cost per batch, on each of the processes torchrun started."""
    from jax.sharding import NamedSharding, PartitionSpec

    from torch2jax_device import distributed as dist
    from torch2jax_device._src import feeding
    from torch2jax_device._src.distributed import process_group

    dist.init_process_group(backend="gloo", timeout=60)
    rank = dist.get_rank()
    mesh = dist.init_device_mesh("cpu", (jax.device_count(),), mesh_dim_names=("data",))
    rows = NamedSharding(mesh, PartitionSpec("data"))
    batches = [{"x": np.full((8, 16), i, np.float32), "y": np.arange(8, dtype=np.int32)}
               for i in range(200)]  # fmt: skip
    checked = getattr(feeding, "agreed_batches")  # noqa: B009

    def unchecked(placed: Any, target: Any, caller: str) -> Any:
        return placed

    loops: dict[str, list[float]] = {"with the check": [], "without (breakdown only)": []}
    for _ in range(3):
        for name, agreed in zip(loops, (checked, unchecked), strict=True):
            setattr(feeding, "agreed_batches", agreed)  # noqa: B010 (the breakdown)
            dist.barrier()
            start = time.perf_counter()
            for batch in DeviceLoader(batches, rows, background=False):
                jax.block_until_ready(batch)
            loops[name].append((time.perf_counter() - start) / len(batches) * 1e3)
    setattr(feeding, "agreed_batches", checked)  # noqa: B010
    client, _ = process_group.coordination("bench_feeding")
    calls = 200
    dist.barrier()
    start = time.perf_counter()
    for index in range(calls):
        client.key_value_set(f"bench_feeding/{rank}/{index}", "x" * 100)
    write = (time.perf_counter() - start) / calls * 1e3
    dist.barrier()
    start = time.perf_counter()
    for index in range(calls):
        client.blocking_key_value_get(f"bench_feeding/{1 - rank}/{index}", 10_000)
    read = (time.perf_counter() - start) / calls * 1e3
    shown = "; ".join(
        f"{name} {min(times):.2f}-{max(times):.2f} ms" for name, times in loops.items()
    )
    print(
        f"rank {rank}, load average {os.getloadavg()[0]:.1f}: a DeviceLoader batch (3 runs of "
        f"{len(batches)}): {shown}; a write {write:.2f} ms, a read {read:.2f} ms",
        flush=True,
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    ranks() if sys.argv[1:] == ["ranks"] else main()
