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

How fast each launcher stops its workers (2, each sleeping), ``torch2jax-device run``
against torchrun, from the signal until both workers are gone (``os.kill(pid, 0)``
fails or the worker is a zombie), median and slowest of ``--repeats`` runs::

    .venv/bin/python benchmarks/bench_distributed.py stop [--repeats 5]

``SIGTERM`` to the launcher (forwarded to the workers), and ``SIGKILL`` to the launcher
(it cannot forward anything: the workers end only if the OS was told to end them with
their parent; a worker still running 5 s later counts as orphaned and is killed).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
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
TORCHRUN = Path(sys.executable).with_name("torchrun")


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


STOP_WORKER = """
import os, time
print(f"PID {os.environ['RANK']} {os.getpid()}", flush=True)
time.sleep(60)
"""
ORPHAN_LIMIT_S = 5.0


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped yet has ended)."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop_once(command: list[str], signum: int) -> float | None:
    """Seconds from ``signum`` to the launcher until both workers are gone; None: orphaned."""
    launcher = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert launcher.stdout is not None
    pids: list[int] = []
    while len(pids) < 2:
        line = launcher.stdout.readline()
        if not line:
            assert launcher.stderr is not None
            problem = launcher.stderr.read()
            raise SystemExit(f"{command} ended before its workers started: {problem}")
        if "PID " in line:
            pids.append(int(line.split()[-1]))
    start = time.perf_counter()
    launcher.send_signal(signum)
    while any(alive(pid) for pid in pids):
        if time.perf_counter() - start > ORPHAN_LIMIT_S:
            for pid in pids:
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
            launcher.communicate(timeout=60)
            return None
        time.sleep(0.005)
    elapsed = time.perf_counter() - start
    launcher.communicate(timeout=60)
    return elapsed


def stop(repeats: int) -> None:
    """Time for each launcher to stop its workers, on SIGTERM and when SIGKILLed."""
    with tempfile.TemporaryDirectory() as folder:
        worker = Path(folder) / "worker.py"
        worker.write_text(STOP_WORKER)
        launchers = {
            "torch2jax-device run": [str(LAUNCHER), "run", "--nproc-per-node", "2", str(worker)],
            "torchrun": [str(TORCHRUN), "--nproc_per_node=2", str(worker)],
        }
        with socket.socket() as probe:  # torchrun's default port may be taken
            probe.bind(("127.0.0.1", 0))
            launchers["torchrun"].insert(1, f"--master_port={probe.getsockname()[1]}")
        for signum in (signal.SIGTERM, signal.SIGKILL):
            medians = {}
            for name, command in launchers.items():
                times = [stop_once(command, signum) for _ in range(repeats)]
                stopped = sorted(t for t in times if t is not None)
                orphaned = len(times) - len(stopped)
                if stopped:
                    medians[name] = statistics.median(stopped)
                    figures = f"median {medians[name]:.2f} s, slowest {stopped[-1]:.2f} s"
                else:
                    figures = "never"
                print(
                    f"{signal.Signals(signum).name:8} {name:21} workers gone: {figures}; "
                    f"orphaned (alive {ORPHAN_LIMIT_S:g} s later) in {orphaned}/{repeats} runs"
                )
            if len(medians) == 2:
                ratio = medians["torch2jax-device run"] / medians["torchrun"]
                print(f"{signal.Signals(signum).name:8} ratio tj/torchrun: {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("mode", choices=("torch", "tj", "load", "load-worker", "stop"))
    parser.add_argument("way", nargs="?", choices=("whole", "sharded"))
    parser.add_argument("path", nargs="?")
    parser.add_argument("--gib", type=float, default=1.5, help="file size for `load`")
    parser.add_argument("--repeats", type=int, default=5, help="runs per launcher for `stop`")
    args = parser.parse_args()
    if args.mode in ("torch", "tj"):
        latency(args.mode)
    elif args.mode == "load":
        load(args.gib)
    elif args.mode == "stop":
        stop(args.repeats)
    else:
        load_worker(args.way, args.path)


if __name__ == "__main__":
    main()
