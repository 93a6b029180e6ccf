"""A benchmark run as a results file, in the form of ``benchmarks/results/*.json``.

Each file holds one run: ``title``, ``machine``, ``software``, ``date``, ``commit``,
``command`` and ``source`` (what the figures came from), then one section per kind of
figure (``{"what": ..., <series>}``), which ``scripts/plot_benchmarks.py`` draws. The
benchmarks write one with ``--json PATH``: on a GPU machine the file goes back with the
run's output, so its figures reach ``benchmarks/results`` as measured, never retyped.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from typing import Any

_PACKAGES = ("jax", "jaxlib", "torch", "flax", "safetensors", "numpy")


def software() -> str:
    """Python and the packages the benchmarks use, with their versions."""
    versions = [f"{name} {_version(name)}" for name in _PACKAGES]
    return ", ".join([f"python {platform.python_version()}", *versions])


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def host() -> str:
    """The CPU model, its cores and the memory of this machine, as Linux reports them."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(
                line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")
            )
    except (OSError, StopIteration):
        pass
    memory = ""
    try:
        with open("/proc/meminfo") as meminfo:
            kib = int(next(line for line in meminfo if line.startswith("MemTotal")).split()[1])
        memory = f", {kib / 2**20:.0f} GiB RAM"
    except (OSError, StopIteration, ValueError):
        pass
    return f"{model}, {os.cpu_count()} cores{memory}"


def commit() -> str:
    """The checkout's commit (``+`` when files differ from it), or ``unknown``."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+" if dirty else "")


def run(title: str, machine: str, **sections: dict[str, Any]) -> dict[str, Any]:
    """A results file's content: the run's facts, then ``sections``."""
    return {
        "title": title,
        "machine": machine,
        "software": software(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "commit": commit(),
        "command": " ".join(["python", *sys.argv]),
        "source": f"{os.path.basename(sys.argv[0])} --json, written by the run itself",
        "load_average": [round(x, 2) for x in os.getloadavg()],
        **sections,
    }


def write(path: str, content: dict[str, Any]) -> None:
    """Write ``content`` to ``path`` as indented JSON."""
    with open(path, "w") as file:
        json.dump(content, file, indent=2)
        file.write("\n")
    print(f"\nresults written to {path}")
