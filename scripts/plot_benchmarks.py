"""Draw the benchmark pages' figures from the measured data in ``benchmarks/results/``.

Each results file (JSON) holds one run's figures with the machine, the software, the
date and the command that measured them. This script draws each figure as an SVG under
``docs/assets/benchmarks/``, with that machine and date under it, and writes into the SVG
the SHA-256 of the results file it was drawn from. The SVGs are committed, so the
documentation build needs no matplotlib; ``tests/project/test_docs_site.py`` fails when a
results file changed and its figures were not redrawn.

Run after changing a results file (matplotlib needed: ``pip install -e ".[plots]"``)::

    .venv/bin/python scripts/plot_benchmarks.py          # redraw every figure
    .venv/bin/python scripts/plot_benchmarks.py --check  # list stale figures, exit 1 if any
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
FIGURES_DIR = ROOT / "docs" / "assets" / "benchmarks"
_DIGEST = re.compile(r"<!-- drawn from (\S+) sha256=([0-9a-f]{64}) -->")
_MIB = 2**20


def digest(results: Path) -> str:
    """The SHA-256 of a results file, as recorded in the figures drawn from it."""
    return hashlib.sha256(results.read_bytes()).hexdigest()


def _caption(run: dict[str, Any]) -> str:
    return f"{run['machine']}; {run['software']}; {run['date']}"


def _transfer_time(run: dict[str, Any], axes: Any) -> None:
    data = run["host_to_device_pageable"]
    sizes = data["size_mib"]
    for (route, rates), marker in zip(
        data["routes"].items(), itertools.cycle("osD^v"), strict=False
    ):
        milliseconds = [
            size * _MIB / (rate * 1e9) * 1e3 for size, rate in zip(sizes, rates, strict=True)
        ]
        axes.loglog(sizes, milliseconds, marker=marker, label=route)
    axes.set_xticks(sizes, [f"{s} MiB" if s < 1024 else "1 GiB" for s in sizes])
    axes.minorticks_off()
    axes.yaxis.set_major_formatter(lambda value, _: f"{value:g}")
    axes.set_xlabel("transfer size")
    axes.set_ylabel("time per transfer (ms, lower is better)")
    axes.set_title("Host to GPU, pageable NumPy data")
    axes.grid(True, which="major", alpha=0.3)
    axes.legend()


def _bars(axes: Any, labels: list[str], series: dict[str, list[float]], unit: str) -> None:
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
        positions = [x + (i - (len(series) - 1) / 2) * width for x in range(len(labels))]
        bars = axes.bar(positions, values, width, label=name)
        axes.bar_label(bars, [f"{v:g}" for v in values], fontsize=8)
    axes.set_xticks(range(len(labels)), [label.replace(", ", "\n") for label in labels])
    axes.set_ylabel(unit)
    axes.margins(y=0.15)


def _load_onto_gpu(run: dict[str, Any], figure: Any) -> None:
    data = run["load_onto_gpu"]
    left, right = figure.subplots(1, 2)
    _bars(left, data["files"], data["seconds"], "seconds (lower is better)")
    left.set_title("Time to load onto the GPU")
    left.legend(fontsize=8, loc="upper left")
    _bars(right, data["files"], data["peak_host_rss_growth_gib"], "GiB (lower is better)")
    right.set_title("Peak host memory growth")


def _load_on_cpu(run: dict[str, Any], figure: Any) -> None:
    data = run["load_1gib"]
    left, right = figure.subplots(1, 2, sharey=True)
    labels = [name.replace(", ", "\n") for name in data["loaders"]]
    bars = left.barh(labels, data["load_and_read_seconds"])
    left.bar_label(bars, [f"{v:g} s" for v in data["load_and_read_seconds"]], fontsize=8)
    left.set_xlabel("seconds to load and read every byte\n(lower is better)")
    left.invert_yaxis()
    left.margins(x=0.2)
    bars = right.barh(labels, data["rss_after_load_per_file"], color="tab:orange")
    right.bar_label(bars, [f"{v:.2f}x" for v in data["rss_after_load_per_file"]], fontsize=8)
    right.set_xlabel("resident memory after the load / file size\n(lower is better)")
    right.margins(x=0.2)
    figure.suptitle("Loading a 1 GiB safetensors file on the CPU")


# Figure name -> (results file, what draws it, whether it draws on one axes or the figure).
FIGURES: dict[str, tuple[str, Callable[[dict[str, Any], Any], None], bool]] = {
    "gpu-transfer-time": ("gpu-h200-2026-11-26.json", _transfer_time, True),
    "gpu-load": ("gpu-h200-2026-11-26.json", _load_onto_gpu, False),
    "cpu-load": ("cpu-checkpoints-2026-11-23.json", _load_on_cpu, False),
}


def figure_path(name: str) -> Path:
    return FIGURES_DIR / f"{name}.svg"


def stale() -> list[str]:
    """The figures missing, or drawn from another version of their results file."""
    found = []
    for name, (results, _, _) in FIGURES.items():
        path = figure_path(name)
        recorded = _DIGEST.search(path.read_text()) if path.is_file() else None
        if recorded is None or recorded.groups() != (results, digest(RESULTS / results)):
            found.append(name)
    return found


def draw(name: str) -> Path:
    """Draw one figure from its results file; the SVG is the same for the same data."""
    import matplotlib

    matplotlib.use("svg")
    import matplotlib.pyplot as plt

    results, painter, on_axes = FIGURES[name]
    run = json.loads((RESULTS / results).read_text())
    plt.rcParams.update({"svg.hashsalt": "torch2jax_device", "svg.fonttype": "none"})
    figure = plt.figure(figsize=(9, 4.8), layout="constrained")
    painter(run, figure.subplots() if on_axes else figure)
    figure.get_layout_engine().set(h_pad=0.15)
    figure.supxlabel(_caption(run), fontsize=8, color="dimgray", wrap=True)
    path = figure_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(figure)
    svg = path.read_text()
    stamp = f"<!-- drawn from {results} sha256={digest(RESULTS / results)} -->\n"
    head, rest = svg.split("\n", 1)  # after the XML declaration
    path.write_text(f"{head}\n{stamp}{rest}")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="list stale figures, draw none")
    args = parser.parse_args(argv)
    if args.check:
        names = stale()
        for name in names:
            print(f"{os.path.relpath(figure_path(name))} is stale: run scripts/plot_benchmarks.py")
        return 1 if names else 0
    for name in FIGURES:
        print(os.path.relpath(draw(name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
