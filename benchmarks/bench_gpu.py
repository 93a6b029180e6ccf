"""Transfers and device loads on a GPU: tj against the other routes, in one table.

Run: ``python benchmarks/bench_gpu.py [--sizes small|full] [--cpu] [--transfers-only]``

On a GPU (JAX sees one), every row is measured on it; ``--sizes full`` (the default
there) uses the sizes of ``docs/benchmarks-gpu.md``: 1 GiB transfers, a 12 GiB
file of 48 float16 tensors written by ``safetensors.numpy.save_file`` and a 19.09 GiB file
of one uint16 tensor, about 4 minutes on an H100/H200 with the page cache warm. Without
a GPU (or with ``--cpu``) it runs at small sizes against cpu:1 of two simulated CPU
devices, where tj's GPU routes are forced on (cpu:1 is treated as a device that copies
host buffers and has pinned host memory): a CPU simulation that keeps every code path
running in CI in well under a minute; its figures say nothing about a GPU.

Sections, each in fresh processes:

* **transfers**: host->device from pageable NumPy (``jax.device_put`` is the anchor;
  tj, with ``non_blocking=True`` too, torch pageable and pinned where torch sees the
  GPU; below tj's pieces threshold also a memcpy into a reused pinned buffer and its
  copy, the route tj does not take there) at several sizes, from pinned
  memory, ``pin_memory`` itself, device->host (anchor ``jax.device_put`` to the CPU
  device), a save of one device array to a safetensors file (anchor ``np.asarray`` then
  ``safetensors.numpy.save_file``; ``tj.save_file`` copies through pinned memory and
  also fsyncs the file). GB/s = 10^9 bytes/s, median of 5 after a warm-up, a distinct
  source each time.
* **loads**: each loader in its own process (page cache warm), seconds, GB/s and peak
  host RSS growth over the process's size before the load; anchor safetensors.torch.
* **seed story**: the one-tensor file under a capped pool
  (``XLA_PYTHON_CLIENT_MEM_FRACTION``, GPU only): ``tj.load_file(device="cuda")`` is
  refused before reading; ``tj.load_file`` to the CPU, then 50 batches sent with
  ``tj.to_device`` and used in a jitted step.

Nothing is printed that was not measured in this run.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from process_memory import kib, reset_peak

GIB = 2**30
MIB = 2**20
REPEATS = 5
STEPS = 50
SIZES = {
    # name: (transfer bytes, H2D sweep, model tensors x bytes, seed elements, batch elements)
    "small": (16 * MIB, (1 * MIB, 16 * MIB), (48, MIB), 8 * MIB + 17, 64 * 2**10),
    "full": (
        GIB,
        (1 * MIB, 8 * MIB, 16 * MIB, 64 * MIB, GIB),
        (48, 256 * MIB),
        10_248_871_837,
        4 * MIB,
    ),
}
SEED_FRACTION = "0.12"  # 16.7 GiB of an H200's 139.8 GiB: less than the 19.09 GiB file


# --------------------------------------------------------------------- in the children


def setup(cpu: bool) -> tuple[Any, Any]:
    """(the device, the host CPU device); in CPU mode, tj's GPU routes are forced on cpu:1."""
    import jax
    import numpy as np

    import torch2jax_device as tj

    if not cpu:
        return jax.devices()[0], jax.devices("cpu")[0]
    from torch2jax_device._src import host_staging
    from torch2jax_device._src.checkpoints import transfer

    host, device = jax.devices("cpu")[:2]
    host_staging.routes_through_pinned = lambda d: d != host

    def misaligned(nbytes: int) -> Any:  # JAX's CPU backend copies these, as a GPU does
        raw = np.empty(nbytes + 128, np.uint8)
        start = -raw.ctypes.data % 64 + 8
        return raw[start : start + nbytes]

    transfer.aligned_empty = misaligned
    tj.resolve("cpu")
    return device, host


def rate(nbytes: int, run: Callable[[int], Any]) -> float:
    """GB/s of ``run(i)`` (i-th distinct source), median of REPEATS after a warm-up."""
    run(0)
    seconds = []
    for i in range(1, REPEATS + 1):
        gc.collect()
        started = time.perf_counter()
        run(i)
        seconds.append(time.perf_counter() - started)
    return nbytes / statistics.median(seconds) / 1e9


def transfers_child(cpu: bool, nbytes: int, sweep: list[int]) -> list[dict[str, Any]]:
    import jax
    import numpy as np

    import torch2jax_device as tj
    from torch2jax_device._src import host_staging

    device, host = setup(cpu)
    pinned_kind = jax.sharding.SingleDeviceSharding(device, memory_kind="pinned_host")
    torch = torch_cuda(cpu)
    # What the imports made stays: the collection before each repeat then walks only what
    # the rows make (with torch imported, a full collection takes ~0.4 s of CPU, and the
    # rows make 70 of them).
    gc.freeze()
    rows: list[dict[str, Any]] = []

    def row(group: str, route: str, size: int, run: Callable[[int], Any], anchor: bool) -> None:
        value = rate(size, run)
        rows.append(
            {"group": group, "route": route, "bytes": size, "gbps": value, "anchor": anchor}
        )

    def sources(size: int) -> list[Any]:
        return [np.full(size // 4, i, np.float32) for i in range(REPEATS + 1)]

    def ready(array: Any) -> Any:
        return array.block_until_ready()

    default_memory = jax.sharding.SingleDeviceSharding(device)

    def through(buffer: Any, x: Any) -> Any:
        np.copyto(buffer.view, x.reshape(-1).view(np.uint8))
        return buffer.array

    for size in sweep:
        group = f"H2D pageable, {size // MIB} MiB"
        xs = sources(size)
        row(
            group,
            "jax.device_put",
            size,
            lambda i, xs=xs: ready(jax.device_put(xs[i], device)),
            True,
        )
        row(group, "tj.to_device", size, lambda i, xs=xs: ready(tj.to_device(xs[i], device)), False)
        # non_blocking=True from NumPy returns once the source has been read (torch's
        # pageable copy does the same), which on a GPU may cost a wait of its own.
        row(
            group,
            "tj.to_device(non_blocking=True)",
            size,
            lambda i, xs=xs: ready(tj.to_device(xs[i], device, non_blocking=True)),
            False,
        )
        if size < host_staging.PINNED_PIECES_FROM:
            # The route tj does not take below the threshold, timed so the threshold
            # stays a measurement: a memcpy into a reused pinned buffer, then its DMA.
            buffer = host_staging.POOL.take(device, size)
            row(
                group,
                "memcpy into pinned, then jax.device_put",
                size,
                lambda i, xs=xs, buffer=buffer: ready(
                    jax.device_put(through(buffer, xs[i]), default_memory)
                ),
                False,
            )
        if torch is not None:
            ts = [torch.from_numpy(x) for x in xs]
            row(
                group,
                "torch .to('cuda')",
                size,
                lambda i, ts=ts: sync(torch, ts[i].to("cuda")),
                False,
            )
    xs = sources(nbytes)
    group = f"H2D pinned, {nbytes // MIB} MiB"
    pins = [tj.pin_memory(x, device) for x in xs]
    row(
        group,
        "jax.device_put(pageable)",
        nbytes,
        lambda i: ready(jax.device_put(xs[i], device)),
        True,
    )
    row(
        group,
        "tj.pin_memory, then tj.to_device",
        nbytes,
        lambda i: ready(tj.to_device(pins[i], device, non_blocking=True)),
        False,
    )
    pins.clear()
    if torch is not None:
        tps = [torch.from_numpy(x).pin_memory() for x in xs]
        row(
            group,
            "torch pinned .to(non_blocking)",
            nbytes,
            lambda i: sync(torch, tps[i].to("cuda", non_blocking=True)),
            False,
        )
        tps.clear()
    group = f"pin_memory, {nbytes // MIB} MiB"
    row(
        group,
        "jax.device_put(x, pinned_host)",
        nbytes,
        lambda i: ready(jax.device_put(xs[i], pinned_kind)),
        True,
    )
    row(group, "tj.pin_memory", nbytes, lambda i: ready(tj.pin_memory(xs[i], device)), False)
    if torch is not None:
        ts = [torch.from_numpy(x) for x in xs]
        row(group, "torch .pin_memory()", nbytes, lambda i: ts[i].pin_memory(), False)
    group = f"D2H, {nbytes // MIB} MiB"
    xs.clear()

    def on_device() -> list[Any]:
        # Fresh arrays for each row: a JAX array keeps its host value once fetched (the
        # anchor's device_put to the CPU fetches it), and a later row would read that.
        return [
            jax.numpy.full(nbytes // 4, float(i), np.float32, device=device)
            for i in range(REPEATS + 1)
        ]

    ds = on_device()
    row(group, "jax.device_put(x, cpu)", nbytes, lambda i: ready(jax.device_put(ds[i], host)), True)
    ds = on_device()
    row(group, "np.asarray", nbytes, lambda i: np.asarray(ds[i]), False)
    ds = on_device()
    row(group, "tj.to_device(x, 'cpu')", nbytes, lambda i: ready(tj.to_device(ds[i], "cpu")), False)
    ds = on_device()
    row(
        group,
        "jax.device_put(x, pinned_host)",
        nbytes,
        lambda i: ready(jax.device_put(ds[i], pinned_kind)),
        False,
    )
    save_from_device(row, on_device, nbytes)
    ds.clear()
    if torch is not None:
        cs = [torch.full((nbytes // 4,), float(i), device="cuda") for i in range(REPEATS + 1)]
        row(group, "torch .cpu()", nbytes, lambda i: cs[i].cpu(), False)
        out = torch.empty(nbytes // 4).pin_memory()
        row(
            group,
            "torch copy_ into pinned",
            nbytes,
            lambda i: sync(torch, out.copy_(cs[i], non_blocking=True)),
            False,
        )
    return rows


def save_from_device(
    row: Callable[..., None], on_device: Callable[[], list[Any]], nbytes: int
) -> None:
    """A checkpoint of one device array written to a file: anchor ``np.asarray`` then
    ``safetensors.numpy.save_file``; ``tj.save_file`` also flushes the file to disk."""
    import numpy as np
    import safetensors.numpy

    import torch2jax_device as tj

    group = f"save from the device, {nbytes // MIB} MiB"
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as folder:
        path = os.path.join(folder, "saved.safetensors")
        arrays = on_device()
        row(
            group,
            "np.asarray, safetensors.numpy.save_file",
            nbytes,
            lambda i: safetensors.numpy.save_file({"w": np.asarray(arrays[i])}, path),
            True,
        )
        arrays = on_device()
        row(group, "tj.save_file", nbytes, lambda i: tj.save_file({"w": arrays[i]}, path), False)
        arrays.clear()


def torch_cuda(cpu: bool = False) -> Any:
    """torch where it sees a GPU that the rows run on; ``None`` in the CPU simulation,
    which has no torch rows (and skips the 3.5 s of CPU that importing torch costs)."""
    if cpu:
        return None
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def sync(torch: Any, result: Any) -> Any:
    torch.cuda.synchronize()
    return result


def load_child(cpu: bool, loader: str, path: str, warm: str) -> dict[str, Any]:
    import jax

    import torch2jax_device as tj

    device, _ = setup(cpu)
    if loader == "tj":

        def load(file: str) -> Any:
            return jax.block_until_ready(tj.load_file(file, device=device))
    elif loader == "safetensors.torch":
        import safetensors.torch

        def load(file: str) -> Any:
            tensors = safetensors.torch.load_file(file, device="cuda:0")
            sync(torch_cuda(), None)
            return tensors
    else:
        import safetensors.flax

        def load(file: str) -> Any:
            with jax.default_device(device):
                return jax.block_until_ready(safetensors.flax.load_file(file))

    load(warm)
    gc.collect()
    before = kib("VmRSS")
    reset_peak()
    started = time.perf_counter()
    load(path)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "rss_gib": (kib("VmHWM") - before) / 2**20}


def seed_child(cpu: bool, path: str, batch_size: int) -> dict[str, Any]:
    """The capped-pool story: refused on the device, loaded on the CPU, fed in batches."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import torch2jax_device as tj

    device, _ = setup(cpu)
    started = time.perf_counter()
    try:
        tj.load_file(path, device=device)
        refused = "loaded (the pool was large enough)"
    except tj.OutOfMemoryError as error:
        refused = f"OutOfMemoryError after {time.perf_counter() - started:.2f} s: {str(error)[:80]}"
    started = time.perf_counter()
    tokens = tj.load_file(path)["t"]
    cpu_seconds = time.perf_counter() - started
    step = jax.jit(lambda batch: jnp.sum(batch.astype(jnp.float32) ** 2))
    host = np.asarray(tokens)  # the CPU array's memory, no copy
    started = time.perf_counter()
    for i in range(STEPS):
        start = (i * batch_size * 7) % (host.shape[0] - batch_size)
        window = tj.to_device(host[start : start + batch_size], device)
        step(window).block_until_ready()
    return {
        "refused": refused,
        "cpu_seconds": cpu_seconds,
        "steps_seconds": time.perf_counter() - started,
    }


# --------------------------------------------------------------------- the parent


def run_child(cpu: bool, *args: str, environment: dict[str, str] | None = None) -> Any:
    env = {**os.environ, **(environment or {})}
    if cpu:
        env.update(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES="2")
    command = [sys.executable, __file__, "--child", *args] + (["--cpu"] if cpu else [])
    result = subprocess.run(
        command, capture_output=True, text=True, env=env, check=False, timeout=900
    )
    if result.returncode:
        raise RuntimeError(f"{args[0]} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.splitlines()[-1])


def has_gpu() -> bool:
    probe = "import jax; print(jax.devices()[0].platform)"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    return result.returncode == 0 and result.stdout.strip() == "gpu"


def write_files(folder: str, model: tuple[int, int], seed_count: int) -> dict[str, str]:
    import numpy as np
    import safetensors.numpy

    paths = {
        name: os.path.join(folder, f"{name}.safetensors") for name in ("model", "seed", "warm")
    }
    count, nbytes = model
    safetensors.numpy.save_file(
        {f"layer{i}.weight": np.full(nbytes // 2, i, np.float16) for i in range(count)},
        paths["model"],
    )
    safetensors.numpy.save_file({"t": np.arange(1000, dtype=np.uint16)}, paths["warm"])
    write_seed(paths["seed"], seed_count)
    for path in paths.values():  # into the page cache, as after a recent download
        with open(path, "rb") as file:
            while file.read(64 * MIB):
                pass
    return paths


def write_seed(path: str, count: int) -> None:
    """One uint16 tensor of ``count`` tokens, as safetensors writes it (a repeated block)."""
    import numpy as np

    header = json.dumps({"t": {"dtype": "U16", "shape": [count], "data_offsets": [0, 2 * count]}})
    encoded = header.encode() + b" " * (-len(header) % 8)
    block = (np.arange(min(count, 64 * MIB)) % 50257).astype(np.uint16).tobytes()
    with open(path, "wb") as file:
        file.write(len(encoded).to_bytes(8, "little") + encoded)
        for start in range(0, count, len(block) // 2):
            file.write(block[: 2 * min(len(block) // 2, count - start)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", choices=sorted(SIZES), default=None)
    parser.add_argument("--cpu", action="store_true", help="CPU simulation even with a GPU")
    parser.add_argument(
        "--transfers-only", action="store_true", help="only the transfers section (no files)"
    )
    parser.add_argument("--child", nargs="+")
    args = parser.parse_args()
    if args.child:
        name, *rest = args.child
        if name == "transfers":
            result: Any = transfers_child(args.cpu, int(rest[0]), [int(s) for s in rest[1:]])
        elif name == "load":
            result = load_child(args.cpu, *rest)
        else:
            result = seed_child(args.cpu, rest[0], int(rest[1]))
        print(json.dumps(result))
        return
    cpu = args.cpu or not has_gpu()
    sizes = args.sizes or ("small" if cpu else "full")
    nbytes, sweep, model, seed_count, batch = SIZES[sizes]
    machine = "CPU simulation (cpu:1 of 2 CPU devices), not a GPU figure" if cpu else "GPU"
    started = time.perf_counter()
    rows = run_child(cpu, "transfers", str(nbytes), *map(str, sweep))
    print(f"## bench_gpu: {machine}, sizes {sizes}\n")
    print("| section | route | size | result | vs anchor | peak RSS growth |")
    print("|---|---|---|---|---|---|")
    anchors: dict[str, float] = {}
    for row in rows:
        if row["anchor"]:
            anchors[row["group"]] = row["gbps"]
        ratio = row["gbps"] / anchors[row["group"]]
        label = " (anchor)" if row["anchor"] else ""
        print(
            f"| {row['group']} | {row['route']}{label} | {row['bytes'] / MIB:.0f} MiB | "
            f"{row['gbps']:.2f} GB/s | {ratio:.2f}x | |"
        )
    if args.transfers_only:
        print(f"\n{time.perf_counter() - started:.0f} s in all")
        return
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as folder:
        paths = write_files(folder, model, seed_count)
        loaders = ["tj", "safetensors.flax"] + (
            ["safetensors.torch"] if not cpu and torch_available() else []
        )
        for file in ("model", "seed"):
            size = os.path.getsize(paths[file])
            figures = {
                name: run_child(cpu, "load", name, paths[file], paths["warm"]) for name in loaders
            }
            anchor = figures.get("safetensors.torch", figures["safetensors.flax"])["seconds"]
            for name, figure in figures.items():
                print(
                    f"| load {file} ({size / GIB:.2f} GiB) | {name} | {size / MIB:.0f} MiB | "
                    f"{figure['seconds']:.2f} s, {size / figure['seconds'] / 1e9:.2f} GB/s | "
                    f"{anchor / figure['seconds']:.2f}x | {figure['rss_gib']:.2f} GiB |"
                )
        capped = {} if cpu else {"XLA_PYTHON_CLIENT_MEM_FRACTION": SEED_FRACTION}
        seed = run_child(cpu, "seed", paths["seed"], str(batch), environment=capped)
        pool = "no pool on the CPU" if cpu else f"pool capped at {SEED_FRACTION}"
        print(f"| seed story ({pool}) | tj.load_file(device=...) | | {seed['refused']} | | |")
        print(
            f"| seed story | tj.load_file (CPU), then {STEPS} batches to the device | | "
            f"{seed['cpu_seconds']:.2f} s load, {seed['steps_seconds']:.2f} s steps | | |"
        )
    print(f"\n{time.perf_counter() - started:.0f} s in all")


def torch_available() -> bool:
    probe = "import torch, safetensors.torch; print(torch.cuda.is_available())"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() == "True"


if __name__ == "__main__":
    main()
