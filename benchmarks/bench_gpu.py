"""Transfers and device loads on a GPU: tj against the other routes, in one table.

Run: ``python benchmarks/bench_gpu.py [--sizes small|full] [--cpu] [--transfers-only]
[--json PATH]``

On a GPU (JAX sees one), every row is measured on it; ``--sizes full`` (the default
there) uses the sizes of ``docs/benchmarks-gpu.md``: 1 GiB transfers, a model-shaped
checkpoint (``model.safetensors.index.json`` and 3 shard files written by
``safetensors.numpy.save_file``: 255 float16 tensors, the layout of a 7-8B-parameter
LLM's shards, 8 KiB norms and 8-250 MiB weights, 11.9 GiB) and a 19.09 GiB file of one
uint16 tensor, about 4 minutes on an H100/H200 with the page cache warm. Without a GPU
(or with ``--cpu``) it runs at small sizes against cpu:1 of two simulated CPU devices,
where tj's GPU routes are forced on (cpu:1 is treated as a device that copies host
buffers and has pinned host memory, with pinned pieces from 64 KiB and of at most 256
KiB, so the small checkpoint's tensors take every route: batched, one piece, several
pieces of several sizes through the pool): a CPU simulation that keeps every code path
running in CI in well under a minute, and checks the loaded values; its figures say
nothing about a GPU, except the breakdown of where a model-shaped load's time goes,
which is a CPU figure and says so. ``--json PATH`` also writes the figures as a results
file (``benchmarks/results/*.json``'s form, see ``results_json.py``).

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
  host RSS growth over the process's size before the load; anchor safetensors.torch
  (each shard of an index with ``load_file(shard, device="cuda:0")``).
* **breakdown** (CPU simulation only): one model-shaped load by tj with its parts timed
  (reads from the file into staging, the pinned route's sends, the writes into the
  arrays on the device, page faults) and the rest: Python's per-tensor work.
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
from typing import Any, NamedTuple

import results_json
from process_memory import kib, reset_peak

GIB = 2**30
MIB = 2**20
REPEATS = 5
STEPS = 50


class Model(NamedTuple):
    """An LLM's checkpoint layout: float16 weights in ``shards`` files and an index."""

    hidden: int
    intermediate: int
    kv_hidden: int  # grouped-query attention: k and v are kv_hidden x hidden
    vocab: int
    layers: int
    shards: int

    def tensors(self) -> dict[str, tuple[int, ...]]:
        """Every tensor's shape, in the order a checkpoint lists them."""
        h, i, kv = self.hidden, self.intermediate, self.kv_hidden
        shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (self.vocab, h)}
        for layer in range(self.layers):
            at = f"model.layers.{layer}."
            shapes.update({
                at + "input_layernorm.weight": (h,),
                at + "self_attn.q_proj.weight": (h, h),
                at + "self_attn.k_proj.weight": (kv, h),
                at + "self_attn.v_proj.weight": (kv, h),
                at + "self_attn.o_proj.weight": (h, h),
                at + "post_attention_layernorm.weight": (h,),
                at + "mlp.gate_proj.weight": (i, h),
                at + "mlp.up_proj.weight": (i, h),
                at + "mlp.down_proj.weight": (h, i),
            })  # fmt: skip
        shapes["model.norm.weight"] = (h,)
        shapes["lm_head.weight"] = (self.vocab, h)
        return shapes


SIZES = {
    # name: (transfer bytes, H2D sweep, model, seed elements, batch elements)
    "small": (16 * MIB, (1 * MIB, 16 * MIB), Model(256, 1024, 64, 2048, 8, 3), 8 * MIB + 17,
              64 * 2**10),
    "full": (
        GIB,
        (1 * MIB, 8 * MIB, 16 * MIB, 64 * MIB, GIB),
        Model(4096, 14336, 1024, 32000, 28, 3),  # 255 tensors, 11.9 GiB
        10_248_871_837,
        4 * MIB,
    ),
}  # fmt: skip
#: The CPU simulation's pinned pieces (the GPU's are host_staging's own: from 16 MiB, of
#: at most 32 MiB): small enough that the small checkpoint's tensors take every route.
CPU_PIECES_FROM = 64 * 2**10
CPU_PIECE_BYTES = 256 * 2**10
SEED_FRACTION = "0.12"  # 16.7 GiB of an H200's 139.8 GiB: less than the 19.09 GiB file


# --------------------------------------------------------------------- in the children


def setup(cpu: bool, small_pieces: bool = False) -> tuple[Any, Any]:
    """(the device, the host CPU device); in CPU mode, tj's GPU routes are forced on cpu:1
    (with ``small_pieces``, the checkpoint loads' pinned pieces of ``CPU_PIECE_BYTES``)."""
    import jax
    import numpy as np

    import torch2jax_device as tj

    if not cpu:
        return jax.devices()[0], jax.devices("cpu")[0]
    from torch2jax_device._src import host_staging
    from torch2jax_device._src.checkpoints import transfer

    host, device = jax.devices("cpu")[:2]
    host_staging.routes_through_pinned = lambda d: d != host
    if small_pieces:
        host_staging.PINNED_PIECES_FROM = CPU_PIECES_FROM
        host_staging.PIECE_BYTES = CPU_PIECE_BYTES

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


def shard_files(path: str) -> list[str]:
    """The files of a checkpoint: an index's shards, in order, or the file itself."""
    if not path.endswith(".index.json"):
        return [path]
    with open(path) as file:
        weight_map = json.load(file)["weight_map"]
    folder = os.path.dirname(path)
    return [os.path.join(folder, name) for name in dict.fromkeys(weight_map.values())]


def load_child(cpu: bool, loader: str, path: str, warm: str) -> dict[str, Any]:
    import jax

    import torch2jax_device as tj

    device, _ = setup(cpu, small_pieces=True)
    if loader == "tj":

        def load(file: str) -> Any:
            return jax.block_until_ready(tj.load_file(file, device=device))
    elif loader == "safetensors.torch":
        import safetensors.torch

        def load(file: str) -> Any:
            tensors = {}
            for shard in shard_files(file):
                tensors.update(safetensors.torch.load_file(shard, device="cuda:0"))
            sync(torch_cuda(), None)
            return tensors
    else:
        import safetensors.flax

        def load(file: str) -> Any:
            arrays = {}
            with jax.default_device(device):
                for shard in shard_files(file):
                    arrays.update(safetensors.flax.load_file(shard))
            return jax.block_until_ready(arrays)

    load(warm)
    gc.collect()
    before = kib("VmRSS")
    reset_peak()
    started = time.perf_counter()
    loaded = load(path)
    seconds = time.perf_counter() - started
    figures = {"seconds": seconds, "rss_gib": (kib("VmHWM") - before) / 2**20}
    if cpu and loader == "tj":  # the simulation checks what it loaded, value by value
        check_loaded(loaded, path, device)
        from torch2jax_device._src import host_staging

        figures["pool_kept"] = host_staging.POOL.kept(device)
    return figures


def check_loaded(loaded: dict[str, Any], path: str, device: Any) -> None:
    """Every tensor of the checkpoint at ``path`` is in ``loaded``, on ``device``, with
    safetensors.numpy's dtype, shape and bytes (the CPU simulation's correctness check)."""
    import numpy as np
    import safetensors.numpy

    expected: dict[str, Any] = {}
    for shard in shard_files(path):
        expected.update(safetensors.numpy.load_file(shard))
    assert set(loaded) == set(expected), sorted(set(loaded) ^ set(expected))[:5]
    for name, values in expected.items():
        array = loaded[name]
        assert array.devices() == {device}, (name, array.devices())
        assert array.dtype == values.dtype and array.shape == values.shape, name
        assert np.asarray(array).tobytes() == values.tobytes(), name


def breakdown_child(path: str, warm: str) -> dict[str, Any]:
    """Two model-shaped loads by tj in one process of the CPU simulation, parts timed.

    Timed in the loading thread: the reads from the file into staging buffers
    (``Reader.read_into``: a copy out of the page cache, the kernel's), the pinned
    route's ``jax.device_put`` of each piece (on the CPU backend a copy from pinned_host
    into device memory), the writes of pieces into their arrays on the device (the
    jitted ``dynamic_update_slice``, waited for), the batched puts of small tensors, and
    the wait for the last transfers. What is left is Python's own work per tensor and
    per piece. Compiling (JAX's tracing, lowering and XLA's compile, from
    ``jax.monitoring``) happens inside those parts: each new tensor or piece shape
    compiles its update, which the second load reuses. Page faults from ``getrusage``.
    CPU figures only.
    """
    import resource

    import jax

    import torch2jax_device as tj
    from torch2jax_device._src import host_staging
    from torch2jax_device._src.checkpoints.reader import Reader

    device, _ = setup(True, small_pieces=True)
    spent: dict[str, float] = {}
    counts: dict[str, int] = {}

    def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - started
                counts[name] = counts.get(name, 0) + 1

        return wrapper

    def write_waited(*args: Any) -> Any:
        return jax.block_until_ready(write_bytes(*args))

    tj.load_file(warm, device=device)
    read_into, write_bytes = Reader.read_into, host_staging.write_bytes
    Reader.read_into = timed("reads into staging (page cache -> buffer)", read_into)
    host_staging.write_bytes = timed("pieces written into their arrays", write_waited)
    put = jax.device_put

    def device_put(x: Any, *args: Any, **kwargs: Any) -> Any:
        leaves = jax.tree.leaves(x)
        pinned = any(
            getattr(leaf, "sharding", None) is not None
            and leaf.sharding.memory_kind == "pinned_host"
            for leaf in leaves
        )
        name = "pinned pieces sent (device_put)" if pinned else "small tensors sent (device_put)"
        return timed(name, put)(x, *args, **kwargs)

    jax.device_put = device_put  # every caller's: host_staging's and the checkpoint code's
    compiling = [0.0]
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, secs, **_: compiling.__setitem__(0, compiling[0] + secs)
        if event.startswith("/jax/core/compile/") else None
    )  # fmt: skip
    loads = []
    for _ in range(2):  # the first load compiles its shapes' updates; the second reuses them
        spent.clear()
        counts.clear()
        compiling[0] = 0.0
        gc.collect()
        faults = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        loaded = jax.block_until_ready(tj.load_file(path, device=device))
        seconds = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
        loads.append({
            "seconds": seconds,
            "bytes": sum(array.nbytes for array in loaded.values()),
            "tensors": len(loaded),
            "parts": {name: {"seconds": t, "calls": counts[name]} for name, t in spent.items()},
            "compiling_seconds": compiling[0],
            "minor_faults": after.ru_minflt - faults.ru_minflt,
            "major_faults": after.ru_majflt - faults.ru_majflt,
        })  # fmt: skip
        del loaded
    jax.device_put = put
    return {"first_load": loads[0], "second_load": loads[1]}


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


def write_files(folder: str, model: Model, seed_count: int, patterned: bool) -> dict[str, str]:
    """The checkpoints, read once into the page cache: ``model`` (its index),
    ``seed`` and ``warm``. ``patterned`` values differ element by element (a misplaced
    piece shows); otherwise each tensor is one value (quick to write at full size)."""
    import safetensors.numpy

    paths = {
        "model": write_model(folder, model, patterned),
        "seed": os.path.join(folder, "seed.safetensors"),
        "warm": os.path.join(folder, "warm.safetensors"),
    }
    import numpy as np

    safetensors.numpy.save_file({"t": np.arange(1000, dtype=np.uint16)}, paths["warm"])
    write_seed(paths["seed"], seed_count)
    for path in [*shard_files(paths["model"]), paths["seed"], paths["warm"]]:
        with open(path, "rb") as file:  # into the page cache, as after a recent download
            while file.read(64 * MIB):
                pass
    return paths


def write_model(folder: str, model: Model, patterned: bool) -> str:
    """``model``'s tensors in ``model.shards`` files of about equal size, and the index
    that maps each name to its file (as Hugging Face writes them); the index's path."""
    import numpy as np
    import safetensors.numpy

    shapes = model.tensors()
    total = sum(2 * int(np.prod(shape)) for shape in shapes.values())
    weight_map: dict[str, str] = {}
    shard: dict[str, Any] = {}
    size, number = 0, 1

    def flush() -> None:
        name = f"model-{number:05d}-of-{model.shards:05d}.safetensors"
        safetensors.numpy.save_file(shard, os.path.join(folder, name))
        weight_map.update(dict.fromkeys(shard, name))
        shard.clear()

    for index, (name, shape) in enumerate(shapes.items()):
        count = int(np.prod(shape))
        if patterned:  # exact in float16: integers below 2048
            values = ((np.arange(count) + index) % 2039).astype(np.float16).reshape(shape)
        else:
            values = np.full(shape, index % 2039, np.float16)
        shard[name] = values
        size += values.nbytes
        if size >= total * number / model.shards and number < model.shards:
            flush()
            number += 1
    flush()
    index_path = os.path.join(folder, "model.safetensors.index.json")
    with open(index_path, "w") as file:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, file)
    return index_path


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
    parser.add_argument("--json", metavar="PATH", help="also write the figures as a results file")
    parser.add_argument("--child", nargs="+")
    args = parser.parse_args()
    if args.child:
        name, *rest = args.child
        if name == "transfers":
            result: Any = transfers_child(args.cpu, int(rest[0]), [int(s) for s in rest[1:]])
        elif name == "load":
            result = load_child(args.cpu, *rest)
        elif name == "breakdown":
            result = breakdown_child(*rest)
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
    sections: dict[str, Any] = {"transfers": transfer_sections(rows, sweep)}
    if not args.transfers_only:
        sections.update(bench_loads(cpu, model, seed_count, batch))
    print(f"\n{time.perf_counter() - started:.0f} s in all")
    if args.json:
        results_json.write(args.json, results_json.run(
            f"benchmarks/bench_gpu.py --sizes {sizes}" + (" (CPU simulation)" if cpu else ""),
            machine_name(cpu), **sections,
        ))  # fmt: skip


def bench_loads(cpu: bool, model: Model, seed_count: int, batch: int) -> dict[str, Any]:
    """The loads, the seed story and (CPU) the breakdown: printed, and as sections."""
    sections: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as folder:
        paths = write_files(folder, model, seed_count, patterned=cpu)
        loaders = ["tj", "safetensors.flax"] + (
            ["safetensors.torch"] if not cpu and torch_available() else []
        )
        files = {
            "model": f"model-shaped, {len(model.tensors())} float16 tensors in {model.shards} "
            "shards and an index",
            "seed": "one uint16 tensor",
        }
        loads: dict[str, Any] = {
            "what": "a safetensors checkpoint loaded onto the device, page cache warm, each "
            "loader in its own process; anchor safetensors.torch (safetensors.flax without "
            "a GPU)",
            "files": [],
            "seconds": {name: [] for name in loaders},
            "peak_host_rss_growth_gib": {name: [] for name in loaders},
        }
        for file, what in files.items():
            size = sum(os.path.getsize(path) for path in shard_files(paths[file]))
            figures = {
                name: run_child(cpu, "load", name, paths[file], paths["warm"]) for name in loaders
            }
            anchor = figures.get("safetensors.torch", figures["safetensors.flax"])["seconds"]
            loads["files"].append(f"{size / GIB:.2f} GiB, {what}")
            for name, figure in figures.items():
                loads["seconds"][name].append(round(figure["seconds"], 4))
                loads["peak_host_rss_growth_gib"][name].append(round(figure["rss_gib"], 3))
                print(
                    f"| load {file} ({size / GIB:.2f} GiB) | {name} | {size / MIB:.0f} MiB | "
                    f"{figure['seconds']:.2f} s, {size / figure['seconds'] / 1e9:.2f} GB/s | "
                    f"{anchor / figure['seconds']:.2f}x | {figure['rss_gib']:.2f} GiB |"
                )
            if "pool_kept" in figures["tj"]:
                kept = sorted(set(figures["tj"]["pool_kept"]))
                print(
                    f"| load {file} | tj: values checked; pinned pool after it | | "
                    f"{len(figures['tj']['pool_kept'])} buffers of {kept} bytes | | |"
                )
        sections["load_onto_gpu" if not cpu else "load_onto_device_simulated"] = loads
        capped = {} if cpu else {"XLA_PYTHON_CLIENT_MEM_FRACTION": SEED_FRACTION}
        seed = run_child(cpu, "seed", paths["seed"], str(batch), environment=capped)
        pool = "no pool on the CPU" if cpu else f"pool capped at {SEED_FRACTION}"
        print(f"| seed story ({pool}) | tj.load_file(device=...) | | {seed['refused']} | | |")
        print(
            f"| seed story | tj.load_file (CPU), then {STEPS} batches to the device | | "
            f"{seed['cpu_seconds']:.2f} s load, {seed['steps_seconds']:.2f} s steps | | |"
        )
        sections["seed_story"] = {"what": f"{pool}; {STEPS} batches", **seed}
        if cpu:
            breakdown = run_child(True, "breakdown", paths["model"], paths["warm"])
            print_breakdown(breakdown)
            sections["model_load_breakdown_cpu"] = {
                "what": "where one model-shaped tj.load_file onto cpu:1 (the pinned route "
                "forced on) spends its time, in the loading thread; CPU figures only",
                **breakdown,
            }
    return sections


def print_breakdown(breakdown: dict[str, Any]) -> None:
    first, second = breakdown["first_load"], breakdown["second_load"]
    print(
        f"\nWhere a model-shaped load's time goes (CPU simulation, {first['tensors']} tensors, "
        f"{first['bytes'] / MIB:.1f} MiB; two loads in one process):\n"
    )
    print("| part | first load, ms | share | second load, ms | share | calls |")
    print("|---|---|---|---|---|---|")
    for name, part in first["parts"].items():
        again = second["parts"].get(name, {"seconds": 0.0})
        print(
            f"| {name} | {part['seconds'] * 1e3:.1f} | {part['seconds'] / first['seconds']:.0%} "
            f"| {again['seconds'] * 1e3:.1f} | {again['seconds'] / second['seconds']:.0%} "
            f"| {part['calls']} |"
        )
    rests = [
        load["seconds"] - sum(part["seconds"] for part in load["parts"].values())
        for load in (first, second)
    ]
    print(
        f"| the rest: Python's work per tensor and piece | {rests[0] * 1e3:.1f} "
        f"| {rests[0] / first['seconds']:.0%} | {rests[1] * 1e3:.1f} "
        f"| {rests[1] / second['seconds']:.0%} | |"
    )
    print(
        f"| of all these, compiling (trace, lower, XLA) | {first['compiling_seconds'] * 1e3:.1f} "
        f"| {first['compiling_seconds'] / first['seconds']:.0%} "
        f"| {second['compiling_seconds'] * 1e3:.1f} "
        f"| {second['compiling_seconds'] / second['seconds']:.0%} | |"
    )
    print(
        f"| the load, in all | {first['seconds'] * 1e3:.1f} | | {second['seconds'] * 1e3:.1f} | | |"
    )
    print(
        f"| page faults (minor, major) | {first['minor_faults']:,}, {first['major_faults']:,} "
        f"| | {second['minor_faults']:,}, {second['major_faults']:,} | | |"
    )


def transfer_sections(rows: list[dict[str, Any]], sweep: tuple[int, ...]) -> dict[str, Any]:
    """The transfers as a results section: every row, and the pageable H2D sweep by route
    (``host_to_device_pageable``'s form in ``benchmarks/results``)."""
    sweep_routes: dict[str, list[float]] = {}
    for size in sweep:
        for row in rows:
            if row["group"] == f"H2D pageable, {size // MIB} MiB":
                sweep_routes.setdefault(row["route"], []).append(round(row["gbps"], 3))
    return {
        "what": "bench_gpu.py's transfer rows: GB/s (10^9 bytes/s), median of 5 after a "
        "warm-up, a distinct source each time",
        "rows": rows,
        "host_to_device_pageable": {
            "unit": "GB/s",
            "size_mib": [size // MIB for size in sweep],
            "routes": {k: v for k, v in sweep_routes.items() if len(v) == len(sweep)},
        },
    }


def machine_name(cpu: bool) -> str:
    """The machine the figures come from: the GPU as JAX names it, or the simulation."""
    if cpu:
        return f"CPU simulation (cpu:1 of 2 CPU devices) on {results_json.host()}"
    probe = "import jax; d = jax.devices()[0]; print(f'{len(jax.devices())} x {d.device_kind}')"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    return f"{result.stdout.strip() or 'a GPU'}; host {results_json.host()}"


def torch_available() -> bool:
    probe = "import torch, safetensors.torch; print(torch.cuda.is_available())"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() == "True"


if __name__ == "__main__":
    main()
