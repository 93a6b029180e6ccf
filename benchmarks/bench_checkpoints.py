"""Loading safetensors files: tj against safetensors' own loaders, on the CPU and a device.

Run: ``.venv/bin/python benchmarks/bench_checkpoints.py [--gib 1 8] [--cold] [--no-bomb]
[--json PATH]`` (``--json`` also writes the figures as a results file, in the form of
``benchmarks/results/*.json``: see ``results_json.py``)

For each size, two files of uint16 tokens (one tensor) are written to a temporary
directory: one by ``tj.save_file`` (64-byte aligned) and one by
``safetensors.numpy.save_file`` (its data made to start unaligned if it happens not to,
as for 7 files in 8). Every loader x workload runs in a fresh process:

* loaders: ``tj.load_file`` on each file, ``safetensors.torch.load_file``,
  ``safetensors.numpy.load_file`` and ``safetensors.flax.load_file`` (safetensors' file);
* workloads: the load alone; the load, then reading every byte (a checksum over a NumPy
  view of each array); the load, then 1000 random 1 MiB windows of the tokens, each
  copied out as a contiguous host array (``.clone()`` for torch, ``.copy()`` of a NumPy
  view for NumPy and for JAX arrays, which are host memory on the CPU).

Before each process the file is read through once, so that it is in the page cache as
after a recent download (``--cold`` evicts it instead, ``posix_fadvise(DONTNEED)``).
Each process imports and warms its loader up on a small file first (one-time costs,
such as JAX's start, are not the load's), then resets its peak RSS
(``/proc/self/clear_refs``, Linux only) and measures the peak growth over its resident
size before the load: after the load ("load RSS") and after the workload ("peak RSS").
Runs that take under a second are repeated (up to 20 times, results freed in between;
not with ``--cold``) and the median is reported. Loaders whose footprint would exceed
the memory available or ``--max-gib`` (10 GiB by default: the machine is shared) are
skipped, with the reason.

Then: loads onto a second simulated CPU device (``JAX_NUM_CPU_DEVICES=2``), time and
peak RSS against file size and file + staging budget; and a hostile file of 1.4 M
one-byte tensors (98 MB), plus the largest file of one-byte tensors tj reads by default,
against ``safetensors.numpy``. Files are deleted at the end. Targets: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import results_json
from process_memory import kib, reset_peak

GIB = 2**30
MIB = 2**20
BATCHES = 1000
STAGING = 256 * MIB
BOMB_TENSORS = 1_400_000

# loader label -> (framework, file kind); tj is timed on both files.
LOADERS = {
    "tj (aligned file)": ("tj", "aligned"),
    "tj (file written by safetensors)": ("tj", "safetensors"),
    "safetensors.torch": ("torch", "safetensors"),
    "safetensors.numpy": ("numpy", "safetensors"),
    "safetensors.flax": ("flax", "safetensors"),
}
WORKLOADS = {
    "load": "load only",
    "read": "load + read every byte",
    "batches": f"load + {BATCHES} random 1 MiB batches",
}
# Peak RSS / file size each loader needs at worst (what decides whether it can run).
FOOTPRINT = {"tj": 1.1, "torch": 1.1, "numpy": 2.1, "flax": 3.1}
ANCHOR = "safetensors.torch"
FILE_KINDS = ("aligned", "safetensors")


# --------------------------------------------------------------------- in the children


def loader(framework: str) -> Callable[[str], dict[str, Any]]:
    """Import ``framework``'s loader (before the measurement) and return it."""
    if framework in ("tj", "flax"):
        import jax

        jax.numpy.zeros(1).block_until_ready()  # start JAX's CPU backend
    if framework == "tj":
        import jax

        import torch2jax_device as tj

        tj.resolve("cpu")

        def tj_load(path: str) -> dict[str, Any]:
            return jax.block_until_ready(tj.load_file(path))

        return tj_load
    if framework == "flax":
        import jax
        import safetensors.flax

        return lambda path: jax.block_until_ready(safetensors.flax.load_file(path))
    if framework == "numpy":
        import safetensors.numpy

        return safetensors.numpy.load_file
    if framework == "torch":
        import safetensors.torch

        return lambda path: safetensors.torch.load_file(path, device="cpu")
    raise ValueError(framework)


def host_view(array: Any) -> Any:
    """Array's bytes as a NumPy view (no copy on the CPU for every framework here)."""
    import numpy as np

    if hasattr(array, "untyped_storage"):  # torch
        import torch

        return array.reshape(-1).view(torch.uint8).numpy()
    return np.asarray(array).reshape(-1).view(np.uint8)


def checksum(tensors: dict[str, Any]) -> int:
    import numpy as np

    total = 0
    for array in tensors.values():
        data = host_view(array)
        words = len(data) // 8 * 8
        total += int(data[:words].view(np.uint64).sum(dtype=np.uint64))
        total += int(data[words:].sum())
    return total


def batches(tensors: dict[str, Any], framework: str) -> int:
    """Copy 1000 random 1 MiB windows of the tokens out as contiguous host arrays.

    JAX arrays on the CPU are host memory: their windows are taken from ``np.asarray``
    (a view), as the seed story does; ``x[a:b]`` would cost a dispatch per window and
    fails past 2**31 elements without ``jax_enable_x64``.
    """
    import numpy as np

    tokens = tensors["tokens"]
    if framework in ("tj", "flax"):
        tokens = np.asarray(tokens)
    window = MIB // 2  # uint16 tokens
    rng = random.Random(0)
    seen = 0
    for _ in range(BATCHES):
        start = rng.randrange(tokens.shape[0] - window)
        part = tokens[start : start + window]
        seen += (part.clone() if framework == "torch" else part.copy()).shape[0]
    return seen


def child(framework: str, workload: str, path: str, warm_path: str, repeat: str) -> dict[str, Any]:
    load = loader(framework)
    load(warm_path)
    gc.collect()
    before = kib("VmRSS")
    reset_peak()
    runs = []
    while not runs or (repeat == "repeat" and sum(runs) < 1.0 and len(runs) < 20):
        started = time.perf_counter()
        tensors = load(path)
        if not runs:
            load_growth = kib("VmHWM") - before
        if workload == "read":
            checksum(tensors)
        elif workload == "batches":
            batches(tensors, framework)
        runs.append(time.perf_counter() - started)
        del tensors
        gc.collect()
    return {
        "seconds": statistics.median(runs),
        "runs": len(runs),
        "load_growth_mib": load_growth / 1024,
        "peak_growth_mib": (kib("VmHWM") - before) / 1024,
    }


def device_child(mode: str, path: str, warm_path: str) -> dict[str, Any]:
    """Loads onto cpu:1 of two simulated CPU devices."""
    import jax
    import numpy as np

    import torch2jax_device as tj

    jax.numpy.zeros(1).block_until_ready()
    target = tj.resolve("cpu:1")
    if mode == "copying":  # misaligned staging buffers make JAX copy them, as a GPU does
        from torch2jax_device._src.checkpoints import transfer

        def misaligned(nbytes: int) -> Any:
            raw = np.empty(nbytes + 128, np.uint8)
            start = -raw.ctypes.data % 64 + 8
            return raw[start : start + nbytes]

        transfer.aligned_empty = misaligned
    if mode == "flax":
        import safetensors.flax

        def load(file: str) -> Any:
            with jax.default_device(target):
                return jax.block_until_ready(safetensors.flax.load_file(file))

    else:
        backend = "pread" if mode == "pread" else "mmap"

        def load(file: str) -> Any:
            return tj.load_file(file, target, backend=backend, staging_bytes=STAGING)

    load(warm_path)
    gc.collect()
    before = kib("VmRSS")
    reset_peak()
    started = time.perf_counter()
    tensors = load(path)
    seconds = time.perf_counter() - started
    load_growth = (kib("VmHWM") - before) / 1024
    assert all(array.devices() == {target} for array in tensors.values())
    started = time.perf_counter()
    checksum(tensors)
    return {
        "seconds": seconds,
        "load_growth_mib": load_growth,
        "read_seconds": time.perf_counter() - started,
        "peak_growth_mib": (kib("VmHWM") - before) / 1024,
    }


def bomb_child(framework: str, path: str) -> dict[str, Any]:
    if framework == "tj":
        import jax

        import torch2jax_device as tj

        jax.numpy.zeros(1).block_until_ready()
        tj.resolve("cpu")

        def load() -> str:
            try:
                return f"{len(tj.load_file(path)):,} arrays"
            except tj.CheckpointError:
                return "refused (CheckpointError)"

    else:
        import safetensors.numpy

        def load() -> str:
            return f"{len(safetensors.numpy.load_file(path)):,} arrays"

    gc.collect()
    before = kib("VmRSS")
    reset_peak()
    started = time.perf_counter()
    outcome = load()
    return {
        "seconds": time.perf_counter() - started,
        "peak_growth_mib": (kib("VmHWM") - before) / 1024,
        "outcome": outcome,
    }


# --------------------------------------------------------------------- file generation


def generate(kind: str, gib: float, path: str) -> None:
    """Write a token file without holding it in memory: a memory-mapped scratch source."""
    import numpy as np

    count = int(gib * GIB) // 2
    scratch = path + ".scratch"
    step = 64 * MIB
    with open(scratch, "wb") as file:
        for begin in range(0, count, step):
            end = min(begin + step, count)
            file.write((np.arange(begin, end, dtype=np.uint32) % 50257).astype(np.uint16))
    tokens = np.memmap(scratch, np.uint16, mode="r", shape=(count,))
    if kind == "aligned":
        import torch2jax_device as tj

        tj.save_file({"tokens": tokens}, path)
    else:
        import safetensors.numpy

        metadata: dict[str, str] = {}
        while True:  # safetensors pads the header to 8 bytes: make the data unaligned
            safetensors.numpy.save_file({"tokens": tokens}, path, metadata=metadata or None)
            with open(path, "rb") as file:
                if (8 + int.from_bytes(file.read(8), "little")) % 64:
                    break
            metadata = {"pad": "x" * (len(metadata.get("pad", "")) + 1)}
    del tokens
    os.unlink(scratch)


def generate_bomb(count: int, path: str) -> None:
    entries = ",".join(
        f'"t{i:07d}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{i + 1}]}}'
        for i in range(count)
    )
    header = ("{" + entries + "}").encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as file:
        file.write(len(header).to_bytes(8, "little") + header + b"\1" * count)


# --------------------------------------------------------------------- the parent


def run_child(*args: str, devices: int = 1) -> dict[str, Any]:
    environment = {**os.environ, "JAX_NUM_CPU_DEVICES": str(devices)}
    result = subprocess.run(
        [sys.executable, __file__, *args],
        capture_output=True,
        text=True,
        timeout=1800,
        env=environment,
        check=False,
    )
    if result.returncode:
        raise RuntimeError(f"{args} failed:\n{result.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return figures


def available_gib() -> float:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return 0.0


def cache(path: str) -> None:
    """Read ``path`` through once, so that a warm run finds it in the page cache."""
    buffer = bytearray(64 * MIB)
    with open(path, "rb", buffering=0) as file:
        while file.readinto(buffer):
            pass


def evict(path: str) -> None:
    with open(path, "rb") as file:
        os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def data_start(path: str) -> int:
    with open(path, "rb") as file:
        return 8 + int.from_bytes(file.read(8), "little")


def fits(needed_gib: float, max_gib: float) -> bool:
    return needed_gib <= min(max_gib, available_gib())


def too_big(needed_gib: float, max_gib: float) -> str:
    return (
        f"needs ~{needed_gib:.0f} GiB; the cap is {max_gib:.0f} GiB, "
        f"{available_gib():.0f} GiB available"
    )


def bench_size(
    gib: float, directory: str, cold: bool, warm: dict[str, str], max_gib: float
) -> dict[str, Any]:
    """One file size's tables, printed; returned as results sections."""
    paths = {kind: os.path.join(directory, f"{kind}.safetensors") for kind in warm}
    for kind, path in paths.items():
        run_generate(kind, gib, path)
    size = os.path.getsize(paths["aligned"]) / GIB
    print(f"\n### {size:.2f} GiB of uint16 tokens, page cache {'cold' if cold else 'warm'}\n")
    print(
        f"tj.save_file's data starts at byte {data_start(paths['aligned'])}; "
        f"safetensors.numpy.save_file's at byte {data_start(paths['safetensors'])} "
        f"(mod 64: {data_start(paths['safetensors']) % 64})\n"
    )
    results: dict[tuple[str, str], dict[str, Any]] = {}
    repeat = "once" if cold else "repeat"  # a repeated run would find the file cached
    for label, (framework, kind) in LOADERS.items():
        needed = FOOTPRINT[framework] * size + 1
        for workload in WORKLOADS:
            if not fits(needed, max_gib):
                results[label, workload] = {"skipped": too_big(needed, max_gib)}
                continue
            (evict if cold else cache)(paths[kind])
            results[label, workload] = run_child(
                "--child", framework, workload, paths[kind], warm[kind], repeat
            )
    report(results, size)
    device = report_device(paths, warm, size, cold, max_gib)
    for path in paths.values():
        os.unlink(path)
    name = f"{gib:g}".replace(".", "_") + "gib"
    return {
        f"load_{name}": load_section(results, size, cold),
        f"load_onto_cpu1_{name}": {
            "what": f"tj.load_file onto cpu:1 of 2 simulated CPU devices, {size:.2f} GiB, "
            f"staging budget {STAGING // MIB} MiB; RSS growth over the file's size",
            **device,
        },
    }


def load_section(results: dict[tuple[str, str], dict[str, Any]], size: float, cold: bool) -> Any:
    """``report``'s table as a results section (``None`` where a loader was skipped)."""

    def column(workload: str, value: Callable[[dict[str, Any]], float]) -> list[Any]:
        figures = [results[label, workload] for label in LOADERS]
        return [None if "skipped" in r else round(value(r), 4) for r in figures]

    return {
        "what": f"load a {size:.2f} GiB file of uint16 tokens (page cache "
        f"{'cold' if cold else 'warm'}), each loader x workload in a fresh process; seconds "
        "(median of up to 20 runs under a second); RSS growth over the file's size",
        "loaders": list(LOADERS),
        "load_seconds": column("load", lambda r: r["seconds"]),
        "load_and_read_seconds": column("read", lambda r: r["seconds"]),
        "batches_seconds": column("batches", lambda r: r["seconds"]),
        "rss_after_load_per_file": column("load", lambda r: r["load_growth_mib"] / 1024 / size),
        "peak_rss_after_read_per_file": column(
            "read", lambda r: r["peak_growth_mib"] / 1024 / size
        ),
    }


def run_generate(kind: str, gib: float, path: str) -> None:
    subprocess.run(
        [sys.executable, __file__, "--generate", kind, str(gib), path], check=True, timeout=3600
    )


def report(results: dict[tuple[str, str], dict[str, Any]], size: float) -> None:
    print("| loader | workload | time | vs safetensors.torch | load RSS / file | peak RSS / file |")
    print("|---|---|---|---|---|---|")
    for (label, workload), r in results.items():
        if "skipped" in r:
            print(f"| {label} | {WORKLOADS[workload]} | skipped: {r['skipped']} | | | |")
            continue
        anchor = results.get((ANCHOR, workload), {})
        ratio = f"{r['seconds'] / anchor['seconds']:.2f}x" if "seconds" in anchor else ""
        runs = f" (median of {r['runs']})" if r.get("runs", 1) > 1 else ""
        print(
            f"| {label} | {WORKLOADS[workload]} | {seconds(r['seconds'])}{runs} | {ratio} "
            f"| {r['load_growth_mib'] / 1024 / size:.3f} "
            f"| {r['peak_growth_mib'] / 1024 / size:.2f} |"
        )
    ours = "tj (aligned file)"
    print()
    for workload, target, what in [("load", 2.0, "time"), ("read", 1.2, "time")]:
        mine, theirs = results[ours, workload], results.get((ANCHOR, workload), {})
        if "seconds" in mine and "seconds" in theirs:
            print(
                f"- {ours}, {WORKLOADS[workload]}: {mine['seconds'] / theirs['seconds']:.2f}x "
                f"safetensors.torch's {what} (target <= {target})"
            )
    if "load_growth_mib" in results[ours, "load"]:
        growth = results[ours, "load"]["load_growth_mib"] / 1024 / size
        print(f"- {ours}, RSS growth of the load / file size: {growth:.3f} (target <= 0.05)")


DEVICE_MODES = {
    "mapped": ("aligned", 'tj.load_file(aligned, "cpu:1")'),
    "pread": ("aligned", 'tj.load_file(aligned, "cpu:1", backend="pread")'),
    "unaligned": ("safetensors", 'tj.load_file(safetensors_file, "cpu:1")'),
    "copying": ("aligned", 'tj.load_file(aligned, "cpu:1") onto a device that copies (sim.)'),
    "flax": ("safetensors", "safetensors.flax under jax.default_device(cpu:1)"),
}


def report_device(
    paths: dict[str, str], warm: dict[str, str], size: float, cold: bool, max_gib: float
) -> dict[str, Any]:
    print(
        f"\nOnto cpu:1 of 2 simulated CPU devices (staging budget {STAGING // MIB} MiB; "
        "bound: file + staging + 10%):\n"
    )
    print("| load | time | load RSS / file | peak RSS after reading all / file | within bound |")
    print("|---|---|---|---|---|")
    bound = size * 1024 * 1.1 + STAGING / MIB
    section: dict[str, list[Any]] = {
        "loads": [], "seconds": [], "rss_after_load_per_file": [], "peak_rss_per_file": []
    }  # fmt: skip
    for mode, (kind, label) in DEVICE_MODES.items():
        needed = (3.1 if mode == "flax" else 1.1) * size + 1
        section["loads"].append(label)
        if not fits(needed, max_gib):
            print(f"| `{label}` | skipped: {too_big(needed, max_gib)} | | | |")
            for key in ("seconds", "rss_after_load_per_file", "peak_rss_per_file"):
                section[key].append(None)
            continue
        (evict if cold else cache)(paths[kind])
        r = run_child("--device-child", mode, paths[kind], warm[kind], devices=2)
        section["seconds"].append(round(r["seconds"], 4))
        section["rss_after_load_per_file"].append(round(r["load_growth_mib"] / 1024 / size, 4))
        section["peak_rss_per_file"].append(round(r["peak_growth_mib"] / 1024 / size, 4))
        print(
            f"| `{label}` | {seconds(r['seconds'])} | {r['load_growth_mib'] / 1024 / size:.3f} "
            f"| {r['peak_growth_mib'] / 1024 / size:.2f} "
            f"| {'yes' if r['peak_growth_mib'] <= bound else 'no'} |"
        )
    return section


def bench_bomb(directory: str) -> dict[str, Any]:
    from torch2jax_device._src.checkpoints.format import MIN_TENSOR_LIMIT

    print("\n### Files of one-byte tensors\n")
    print("| file | loader | outcome | time | peak RSS growth | / file |")
    print("|---|---|---|---|---|---|")
    rows: list[dict[str, Any]] = []
    for count in (BOMB_TENSORS, MIN_TENSOR_LIMIT):
        path = os.path.join(directory, f"tiny-{count}.safetensors")
        generate_bomb(count, path)
        size_mib = os.path.getsize(path) / MIB
        for framework, label in [("tj", "tj.load_file"), ("numpy", "safetensors.numpy")]:
            r = run_child("--bomb-child", framework, path)
            rows.append({"tensors": count, "mib": round(size_mib, 1), "loader": label, **r})
            print(
                f"| {count:,} tensors, {size_mib:.1f} MiB | {label} | {r['outcome']} "
                f"| {seconds(r['seconds'])} | {r['peak_growth_mib']:.0f} MiB "
                f"| {r['peak_growth_mib'] / size_mib:.1f}x |"
            )
        os.unlink(path)
    return {"what": "files of one-byte tensors, each loader in a fresh process", "rows": rows}


def seconds(value: float) -> str:
    return f"{value * 1000:.2f} ms" if value < 0.1 else f"{value:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, nargs="+", default=[1.0, 8.0], help="file sizes")
    parser.add_argument("--cold", action="store_true", help="evict the file before each run")
    parser.add_argument("--no-bomb", action="store_true", help="skip the one-byte tensor files")
    parser.add_argument(
        "--max-gib", type=float, default=10.0, help="skip loaders needing more RSS (GiB)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the figures as a results file")
    args = parser.parse_args()

    import jax
    import safetensors
    import torch

    print(
        f"jax {jax.__version__}, safetensors {safetensors.__version__}, torch "
        f"{torch.__version__}; {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f}, {available_gib():.1f} GiB available"
    )
    directory = tempfile.mkdtemp(prefix="bench_checkpoints_")
    try:
        warm = {kind: os.path.join(directory, f"warm-{kind}.safetensors") for kind in FILE_KINDS}
        for kind, path in warm.items():
            run_generate(kind, 1 / 1024, path)
        sections: dict[str, Any] = {}
        for gib in args.gib:
            sections.update(bench_size(gib, directory, args.cold, warm, args.max_gib))
        if not args.no_bomb:
            sections["one_byte_tensor_files"] = bench_bomb(directory)
    finally:
        shutil.rmtree(directory)
    if args.json:
        sizes = ", ".join(f"{gib:g} GiB" for gib in args.gib)
        results_json.write(args.json, results_json.run(
            f"benchmarks/bench_checkpoints.py, {sizes}, {'cold' if args.cold else 'warm'}",
            f"the CPU machine: {results_json.host()}", **sections,
        ))  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "--child":
        print(json.dumps(child(*sys.argv[2:])))
    elif len(sys.argv) == 5 and sys.argv[1] == "--device-child":
        print(json.dumps(device_child(*sys.argv[2:])))
    elif len(sys.argv) == 4 and sys.argv[1] == "--bomb-child":
        print(json.dumps(bomb_child(*sys.argv[2:])))
    elif len(sys.argv) == 5 and sys.argv[1] == "--generate":
        generate(sys.argv[2], float(sys.argv[3]), sys.argv[4])
    else:
        main()
