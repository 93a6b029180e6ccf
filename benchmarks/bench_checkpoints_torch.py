"""Loading PyTorch checkpoints: ``tj.load`` against ``torch.load`` measured in the same run.

Run: ``.venv/bin/python benchmarks/bench_checkpoints_torch.py [--tensors 100000] [--mib 512]``

Three checkpoints are written to a temporary directory (deleted at the end):

* many small tensors: a state dict of ``--tensors`` float32 tensors of 4 elements, the
  case where per-tensor costs dominate (issue 18: it took 2.6x ``torch.load``'s time);
* a big one: ``--mib`` MiB of float32 in 64 tensors, where the bytes dominate;
* the big one again with ``mmap=True``, whose arrays use the mapped file in place.

Times are medians over alternating rounds in this process (drift hits both loaders
alike): wall time, and CPU time of this process, steadier on a shared machine.
``torch.load`` always runs with ``weights_only=True``, as ``tj.load`` does. Memory is
measured for the big checkpoint in a fresh process per loader: resident memory held
after the load (the result alive) above the resident memory after imports and JAX's
start.

Targets (docs/benchmarks.md):
  * many small tensors: tj.load time <= 2.0x torch.load (issue 18 measured 2.6x; what
    remains is mostly JAX creating each array, about 60 us apiece through DLPack);
  * big checkpoint: tj.load time <= 1.2x torch.load; RAM held <= 1.15x the file
    (arrays share torch's memory), and far less with mmap=True.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, NamedTuple

MIB = 2**20
# The many-small-tensors file holds more tensors than tj.load reads by default (one per
# 4 KiB of file): it is trusted, so the limit is lifted, as a user would lift it.
TRUSTED = 2**31


class Timing(NamedTuple):
    wall: float
    cpu: float


def timed_pair(
    ours: Callable[[], Any], theirs: Callable[[], Any], rounds: int
) -> tuple[Timing, Timing]:
    """Median wall and CPU times (s) of two loaders, run alternately."""
    samples: dict[str, list[tuple[float, float]]] = {"ours": [], "theirs": []}
    for _ in range(rounds):
        for key, fn in (("theirs", theirs), ("ours", ours)):
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            samples[key].append((time.perf_counter() - wall, time.process_time() - cpu))
    mine, torch_times = (
        Timing(
            statistics.median(wall for wall, _ in samples[key]),
            statistics.median(cpu for _, cpu in samples[key]),
        )
        for key in ("ours", "theirs")
    )
    return mine, torch_times


def load_with_tj(path: str, mmap: bool) -> None:
    import jax

    import torch2jax_device as tj

    jax.block_until_ready(tj.load(path, mmap=mmap, max_tensors=TRUSTED))


def generate(directory: str, tensors: int, mib: int) -> tuple[str, str]:
    import torch

    small = os.path.join(directory, "small.pt")
    torch.save({f"layer{i}.weight": torch.full((4,), float(i)) for i in range(tensors)}, small)
    big = os.path.join(directory, "big.pt")
    per_tensor = mib * MIB // 4 // 64
    torch.save({f"w{i}": torch.full((per_tensor,), float(i)) for i in range(64)}, big)
    return small, big


def child(loader: str, path: str) -> None:
    """Load ``path`` once in this fresh process; print time and memory figures as JSON.

    ``held_mib``: resident memory after the load, with its result alive, above the
    memory before it (the peak, ``ru_maxrss``, is dominated by the imports' own).
    """
    import jax
    import torch

    import torch2jax_device as tj

    jax.numpy.zeros(1).block_until_ready()
    baseline = resident_mib()
    started = time.perf_counter()
    if loader == "torch.load":
        result = torch.load(path, weights_only=True)
    else:
        mmap = loader.endswith("mmap=True")
        result = jax.block_until_ready(tj.load(path, mmap=mmap, max_tensors=TRUSTED))
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "held_mib": resident_mib() - baseline}))
    del result


def resident_mib() -> float:
    """This process's resident memory now (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MIB


def run_child(loader: str, path: str) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, __file__, "--child", loader, path],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    figures: dict[str, float] = json.loads(result.stdout.splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=100_000, help="small tensors")
    parser.add_argument("--mib", type=int, default=512, help="size of the big checkpoint")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per loader")
    args = parser.parse_args()

    import jax
    import torch

    jax.numpy.zeros(1).block_until_ready()
    directory = tempfile.mkdtemp(prefix="bench_checkpoints_torch_")
    try:
        small, big = generate(directory, args.tensors, args.mib)
        rows = []
        for label, path, mmap in (
            (f"{args.tensors:,} tensors of 4 float32", small, False),
            (f"{args.mib} MiB in 64 tensors", big, False),
            (f"{args.mib} MiB in 64 tensors, mmap=True", big, True),
        ):
            ours, theirs = timed_pair(
                functools.partial(load_with_tj, path, mmap),
                functools.partial(torch.load, path, weights_only=True, mmap=mmap),
                args.rounds,
            )
            rows.append((label, ours, theirs))
        memory = {
            loader: run_child(loader, big)
            for loader in ("torch.load", "tj.load", "tj.load mmap=True")
        }
    finally:
        shutil.rmtree(directory)

    print(f"jax {jax.__version__}, torch {torch.__version__}, {os.cpu_count()} CPUs")
    print()
    print("| checkpoint | torch.load | tj.load | ratio (wall) | ratio (CPU time) |")
    print("|---|---|---|---|---|")
    for label, ours, theirs in rows:
        print(
            f"| {label} | {theirs.wall:.3f} s | {ours.wall:.3f} s | "
            f"{ours.wall / theirs.wall:.2f}x | {ours.cpu / theirs.cpu:.2f}x |"
        )
    print()
    print(f"| loader, {args.mib} MiB checkpoint, fresh process | time | RAM held |")
    print("|---|---|---|")
    for loader, figures in memory.items():
        print(
            f"| `{loader}` | {figures['seconds']:.2f} s | {figures['held_mib']:.0f} MiB "
            f"({figures['held_mib'] / args.mib:.2f}x) |"
        )
    print()
    small_ratio, big_ratio = (ours.wall / theirs.wall for _, ours, theirs in rows[:2])
    print(f"many small tensors: tj.load / torch.load = {small_ratio:.2f} (target <= 2.0)")
    print(f"big checkpoint:     tj.load / torch.load = {big_ratio:.2f} (target <= 1.2)")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    else:
        main()
