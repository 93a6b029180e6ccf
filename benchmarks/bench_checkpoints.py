"""Loading a big safetensors file: ``tj.load_file`` against safetensors' loaders and a raw read.

Run: ``.venv/bin/python benchmarks/bench_checkpoints.py [--gib 2] [--cold]``

Writes a file of uint16 tokens (2 GiB by default) to a temporary directory, then runs
each loader once, each in a fresh process, and reports wall time and peak RSS
(``ru_maxrss``) as measured in that process, both absolute and above the baseline the
process had after its imports (and, for JAX, after starting the CPU backend). JAX
results are waited for (``block_until_ready``). ``--cold`` evicts the file from the page
cache (``posix_fadvise(DONTNEED)``) before each loader; by default it is cached, as after
a recent download. The file is deleted at the end.

Targets (docs/benchmarks.md):
  * ``tj.load_file(device="cpu")``: time <= 1.0x ``safetensors.numpy.load_file`` and
    >= 5x faster than ``safetensors.flax.load_file``; RSS growth <= 1.15x the file size;
  * ``tj.safe_open(...).get_slice(name)[a:b]`` of a 1 MiB window: RSS growth far below
    the file size.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

GIB = 2**30
WINDOW_TOKENS = 2**19  # 1 MiB of uint16


def rss_gib() -> float:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB


def touch_every_page(buffers: list[Any]) -> None:
    import numpy as np

    for buffer in buffers:
        np.frombuffer(buffer, np.uint8)[::4096].sum()


def setup(loader: str, path: str) -> Callable[[], dict[str, float]]:
    """Import what ``loader`` needs, warm it up; return the timed part (runs in the child).

    The timed part returns extra figures; ``touch_s`` is time spent after the load proper.
    """
    if loader in ("tj.load_file", "safetensors.flax", "tj.get_slice 1 MiB"):
        import jax

        jax.numpy.zeros(1).block_until_ready()  # start JAX's CPU backend before the baseline
    if loader == "tj.load_file":
        from torch2jax_device import load_file

        def tj_load() -> dict[str, float]:
            jax.block_until_ready(load_file(path, device="cpu"))
            return {}

        return tj_load
    if loader == "safetensors.flax":
        import safetensors.flax

        def flax_load() -> dict[str, float]:
            jax.block_until_ready(safetensors.flax.load_file(path))
            return {}

        return flax_load
    if loader == "safetensors.numpy":
        import safetensors.numpy

        def numpy_load() -> dict[str, float]:
            safetensors.numpy.load_file(path)
            return {}

        return numpy_load
    if loader == "safetensors.torch":
        import safetensors.torch

        def torch_load() -> dict[str, float]:
            tensors = safetensors.torch.load_file(path, device="cpu")
            loaded = time.perf_counter()
            touch_every_page([t.view(-1).numpy() for t in tensors.values()])  # mmap: lazy
            return {"touch_s": time.perf_counter() - loaded}

        return torch_load
    if loader == "raw readinto":
        import numpy as np

        def raw_read() -> dict[str, float]:
            buffer = np.empty(os.path.getsize(path), np.uint8)
            with open(path, "rb", buffering=0) as file:
                view = memoryview(buffer)
                while view:
                    view = view[file.readinto(view) :]
            return {}

        return raw_read
    if loader == "tj.get_slice 1 MiB":
        import random

        from torch2jax_device import safe_open

        opened = safe_open(path)
        tokens = opened.get_slice("tokens")
        jax.block_until_ready(tokens[:8])  # warm up the read and transfer path

        def windows() -> dict[str, float]:
            total = tokens.get_shape()[0]
            for _ in range(100):
                start = random.randrange(total - WINDOW_TOKENS)
                jax.block_until_ready(tokens[start : start + WINDOW_TOKENS])
            opened.close()
            return {}

        return windows
    raise ValueError(loader)


def child(loader: str, path: str) -> None:
    timed = setup(loader, path)
    baseline = rss_gib()
    started = time.perf_counter()
    extra = timed()
    seconds = time.perf_counter() - started - extra.get("touch_s", 0.0)
    print(json.dumps({"seconds": seconds, "baseline": baseline, "peak": rss_gib(), **extra}))


LOADERS = [
    "tj.load_file",
    "safetensors.numpy",
    "safetensors.torch",
    "safetensors.flax",
    "raw readinto",
    "tj.get_slice 1 MiB",
]
LABELS = {
    "tj.load_file": 'tj.load_file(path, device="cpu")',
    "safetensors.numpy": "safetensors.numpy.load_file(path)",
    "safetensors.torch": 'safetensors.torch.load_file(path, device="cpu")',
    "safetensors.flax": "safetensors.flax.load_file(path)",
    "raw readinto": "raw readinto into one NumPy buffer",
    "tj.get_slice 1 MiB": "tj.safe_open(path).get_slice(...)[a:b], 100 x 1 MiB",
}


def run_child(*args: str) -> str:
    return subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, timeout=600, check=True
    ).stdout


def generate(gib: float, path: str) -> None:
    import numpy as np

    from torch2jax_device import save_file

    tokens = (np.arange(int(gib * GIB) // 2, dtype=np.uint32) % 50257).astype(np.uint16)
    save_file({"tokens": tokens}, path)


def evict(path: str) -> None:
    with open(path, "rb") as file:
        os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0, help="file size (default 2 GiB)")
    parser.add_argument("--cold", action="store_true", help="evict the file before each run")
    args = parser.parse_args()

    directory = tempfile.mkdtemp(prefix="bench_checkpoints_")
    try:
        path = os.path.join(directory, "tokens.safetensors")
        # Everything big happens in children: ru_maxrss survives fork and exec, so this
        # process must stay small for the children's figures to mean anything.
        run_child("--generate", str(args.gib), path)
        size = os.path.getsize(path) / GIB
        results = {}
        for loader in LOADERS:
            if args.cold:
                evict(path)
            results[loader] = json.loads(run_child("--child", loader, path).splitlines()[-1])
        report(results, size, args.cold)
    finally:
        shutil.rmtree(directory)


def report(results: dict[str, dict[str, float]], size: float, cold: bool) -> None:
    import jax
    import safetensors
    import torch

    ours = results["tj.load_file"]
    print(
        f"file: {size:.2f} GiB of uint16 tokens, page cache {'cold' if cold else 'warm'}; "
        f"jax {jax.__version__}, safetensors {safetensors.__version__}, torch {torch.__version__}"
    )
    print()
    print("| loader | wall time | vs tj.load_file | peak RSS | RSS growth | growth / file |")
    print("|---|---|---|---|---|---|")
    for loader in LOADERS[:-1]:
        r = results[loader]
        growth = r["peak"] - r["baseline"]
        print(
            f"| `{LABELS[loader]}` | {r['seconds']:.2f} s | {r['seconds'] / ours['seconds']:.2f}x "
            f"| {r['peak']:.2f} GiB | {growth:.2f} GiB | {growth / size:.2f}x |"
        )
        if "touch_s" in r:
            print(
                f"| ... then reading every page (it returns lazy mmap views) | "
                f"+{r['touch_s']:.2f} s | {(r['seconds'] + r['touch_s']) / ours['seconds']:.2f}x "
                "| | | |"
            )
    window = results["tj.get_slice 1 MiB"]
    growth_mib = (window["peak"] - window["baseline"]) * 1024
    print(
        f"| `{LABELS['tj.get_slice 1 MiB']}` | {window['seconds'] * 10:.2f} ms per window "
        f"| | {window['peak']:.2f} GiB | {growth_mib:.1f} MiB | {growth_mib / 1024 / size:.4f}x |"
    )
    print()
    numpy_ratio = ours["seconds"] / results["safetensors.numpy"]["seconds"]
    flax_speedup = results["safetensors.flax"]["seconds"] / ours["seconds"]
    rss_ratio = (ours["peak"] - ours["baseline"]) / size
    print(f"tj.load_file time / safetensors.numpy time: {numpy_ratio:.2f} (target <= 1.0)")
    print(f"safetensors.flax time / tj.load_file time:  {flax_speedup:.1f} (target >= 5)")
    print(f"tj.load_file RSS growth / file size:        {rss_ratio:.2f} (target <= 1.15)")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "--generate":
        generate(float(sys.argv[2]), sys.argv[3])
    else:
        main()
