"""Latency of process-group calls: torch.distributed (gloo) against tj.distributed, on CPU.

Run each under torchrun, 2 processes (rank 0 prints):

    JAX_PLATFORMS=cpu OMP_NUM_THREADS=1 .venv/bin/torchrun --nproc_per_node=2 \\
        benchmarks/bench_distributed.py torch
    JAX_PLATFORMS=cpu OMP_NUM_THREADS=1 .venv/bin/torchrun --nproc_per_node=2 \\
        benchmarks/bench_distributed.py tj
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

REPEATS = 200


def timed(call: Callable[[], Any], repeats: int = REPEATS) -> float:
    """Median milliseconds of ``call`` after one warm-up (compilation for tj)."""
    call()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return 1000 * statistics.median(samples)


def main() -> None:
    framework = sys.argv[1]
    big = np.ones(262_144, np.float32)  # 1 MiB
    began = time.perf_counter()
    if framework == "torch":
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        init_ms = 1000 * (time.perf_counter() - began)
        scalar, tensor = torch.ones(()), torch.from_numpy(big)
        rows = {
            "all_reduce scalar": timed(lambda: dist.all_reduce(scalar)),
            "all_reduce 1 MiB": timed(lambda: dist.all_reduce(tensor), 50),
            "barrier": timed(dist.barrier),
        }
        rank = dist.get_rank()
    else:
        import jax

        from torch2jax_device import distributed as tjd

        tjd.init_process_group("gloo")
        jax.devices()
        init_ms = 1000 * (time.perf_counter() - began)
        rows = {
            "all_reduce scalar": timed(lambda: jax.block_until_ready(tjd.all_reduce(1.0))),
            "all_reduce 1 MiB": timed(lambda: jax.block_until_ready(tjd.all_reduce(big)), 50),
            "barrier": timed(tjd.barrier),
        }
        rank = tjd.get_rank()
    if rank == 0:
        print(f"{framework}: init_process_group {init_ms:.0f} ms")
        for name, ms in rows.items():
            print(f"{framework}: {name} {ms:.3f} ms")
    if framework == "torch":
        dist.destroy_process_group()
    else:
        tjd.destroy_process_group()


if __name__ == "__main__":
    main()
