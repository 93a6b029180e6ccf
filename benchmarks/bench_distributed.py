"""tj.distributed on CPU: process-group call latency, and loading a checkpoint onto a mesh.

Latency of process-group calls, torch.distributed (gloo) against tj.distributed, each
under torchrun with 2 processes (rank 0 prints)::

    JAX_PLATFORMS=cpu OMP_NUM_THREADS=1 .venv/bin/torchrun --nproc_per_node=2 \\
        benchmarks/bench_distributed.py torch
    JAX_PLATFORMS=cpu OMP_NUM_THREADS=1 .venv/bin/torchrun --nproc_per_node=2 \\
        benchmarks/bench_distributed.py tj

Loading a multi-GB safetensors file onto 4 simulated CPU devices in 2 processes (2
each), split by rows over the mesh::

    .venv/bin/python benchmarks/bench_distributed.py load [--gib 1.5]

writes the file (8 float32 tensors) to a temporary directory, reads it once so that
both ways start from the page cache, then runs two jobs with ``torch2jax-device run``:
``tj.load_file(path, device=rule)``, where each process reads only its rows, against
every process loading the whole file (``safetensors.numpy.load_file``) and then
``jax.device_put`` onto the same sharding. Each process reports its wall time, the
bytes it read through ``read()`` (``rchar``; safetensors maps the file instead, so its
reads do not show there) and its peak RSS (``ru_maxrss``), also above its RSS before
the load (JAX started, mesh made); the driver prints them and the ratios. The file is
deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPEATS = 200
GIB = 2**30
TENSORS = 8
COLUMNS = 4096
LAUNCHER = Path(sys.executable).with_name("torch2jax-device")


def timed(call: Callable[[], Any], repeats: int = REPEATS) -> float:
    """Median milliseconds of ``call`` after one warm-up (compilation for tj)."""
    call()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return 1000 * statistics.median(samples)


def latency(framework: str) -> None:
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


def write_file(path: Path, gib: float) -> int:
    """A safetensors file of ``TENSORS`` float32 matrices, written tensor by tensor."""
    rows = int(gib * GIB / TENSORS / COLUMNS / 4) // 4 * 4  # splits over 4 devices
    nbytes = rows * COLUMNS * 4
    header = {
        f"layer{i}.weight": {
            "dtype": "F32", "shape": [rows, COLUMNS], "data_offsets": [i * nbytes, (i + 1) * nbytes]
        }
        for i in range(TENSORS)
    }  # fmt: skip
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as file:
        file.write(len(encoded).to_bytes(8, "little") + encoded)
        for i in range(TENSORS):
            rng = np.random.default_rng(i)
            file.write(rng.random((rows, COLUMNS), dtype=np.float32).tobytes())
    return TENSORS * nbytes


def bytes_read() -> int:
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))


def rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB


def load_worker(way: str, path: str) -> None:
    """One process of a job: load ``path`` onto the mesh the ``way`` says, report."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import torch2jax_device as tj
    from torch2jax_device import distributed as dist

    dist.init_process_group(backend="gloo", timeout=600)
    mesh = dist.init_device_mesh("cpu", (jax.device_count(),), mesh_dim_names=("data",))
    rows = NamedSharding(mesh, P("data", None))
    jax.block_until_ready(tj.to_device(np.ones((4, 4), np.float32), rows))  # warm up
    dist.barrier()
    rss_before, read_before, began = rss_gib(), bytes_read(), time.perf_counter()
    if way == "sharded":
        arrays = tj.load_file(path, device=tj.ShardingRule(mesh, {"*": P("data", None)}))
    else:
        from safetensors.numpy import load_file

        host = load_file(path)
        arrays = jax.device_put(host, dict.fromkeys(host, rows))
        jax.block_until_ready(arrays)
    seconds = time.perf_counter() - began
    result = {
        "rank": dist.get_rank(),
        "way": way,
        "seconds": seconds,
        "read_gib": (bytes_read() - read_before) / GIB,
        "rss_gib": rss_gib(),
        "rss_growth_gib": rss_gib() - rss_before,
        "local_gib": sum(
            shard.data.nbytes for array in arrays.values() for shard in array.addressable_shards
        ) / GIB,
    }  # fmt: skip
    print("RESULT " + json.dumps(result), flush=True)
    dist.destroy_process_group()


def load(gib: float) -> None:
    folder = Path(tempfile.mkdtemp(prefix="bench-distributed-"))
    try:
        path = folder / "model.safetensors"
        size = write_file(path, gib)
        with open(path, "rb") as file:  # into the page cache, for both ways alike
            while file.read(64 * 2**20):
                pass
        print(f"file: {size / GIB:.2f} GiB, {TENSORS} float32 tensors split by rows over "
              "2 processes x 2 CPU devices")  # fmt: skip
        jobs = {}
        for way in ("whole", "sharded"):
            env = {**os.environ, "JAX_PLATFORMS": "cpu", "OMP_NUM_THREADS": "1"}
            run = subprocess.run(
                [str(LAUNCHER), "run", "--nproc-per-node", "2", "--cpu-devices", "2",
                 __file__, "load-worker", way, str(path)],
                env=env, capture_output=True, text=True, timeout=1200, check=False,
            )  # fmt: skip
            results = [
                json.loads(line.split("RESULT ", 1)[1])
                for line in run.stdout.splitlines()
                if "RESULT " in line
            ]
            if run.returncode or len(results) != 2:
                sys.exit(
                    f"{way} failed ({run.returncode}):\n{run.stdout[-3000:]}{run.stderr[-3000:]}"
                )
            jobs[way] = sorted(results, key=lambda result: result["rank"])
        print("way      rank  seconds  read() GiB  on devices GiB  peak RSS GiB (growth)")
        for way, results in jobs.items():
            for r in results:
                print(
                    f"{way:8} {r['rank']:4}  {r['seconds']:7.2f}  {r['read_gib']:10.2f}  "
                    f"{r['local_gib']:14.2f}  {r['rss_gib']:6.2f} ({r['rss_growth_gib']:.2f})"
                )
        for name, key in (
            ("time", "seconds"),
            ("peak RSS", "rss_gib"),
            ("RSS growth", "rss_growth_gib"),
        ):
            ratios = [w[key] / s[key] for w, s in zip(jobs["whole"], jobs["sharded"], strict=True)]
            shown = ", ".join(f"rank {rank} {ratio:.2f}x" for rank, ratio in enumerate(ratios))
            print(f"whole-then-device_put / sharded, {name}: {shown}")
    finally:
        shutil.rmtree(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("mode", choices=("torch", "tj", "load", "load-worker"))
    parser.add_argument("way", nargs="?", choices=("whole", "sharded"))
    parser.add_argument("path", nargs="?")
    parser.add_argument("--gib", type=float, default=1.5, help="file size for `load`")
    args = parser.parse_args()
    if args.mode in ("torch", "tj"):
        latency(args.mode)
    elif args.mode == "load":
        load(args.gib)
    else:
        load_worker(args.way, args.path)


if __name__ == "__main__":
    main()
