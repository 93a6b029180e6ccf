"""Import cost: what ``import torch2jax_device`` adds on top of ``import jax``, in one run.

Run: ``.venv/bin/python benchmarks/bench_import.py [runs]`` (default 15 runs), or
``benchmarks/bench_import.py --check [runs]``, which ``scripts/test.sh`` runs in CI.

Each run is a fresh interpreter with ``-X importtime``, which imports jax and then the
package; the figure is the package's cumulative import time there, i.e. what it adds
to a script that imports jax anyway. The anchor, measured in the same run, is ``import
jax`` itself. Target (docs/benchmarks.md): median added time <= 50 ms, with neither
torch nor flax imported and JAX's backends not started.

Bytecode is cached, as after ``pip install`` (which compiles every module): the runs
write and read ``.pyc`` files under a temporary ``PYTHONPYCACHEPREFIX``, whatever
``PYTHONDONTWRITEBYTECODE`` says, and the warm-up run fills that cache. Without it the
figure would be the time to compile the package's sources, paid on every start.

``--check`` measures what a busy machine blurs least: the CPU time (user + system) the
package's import takes in a fresh process that imported jax first (``time.process_time``
around ``import torch2jax_device``), the median of several processes, and fails (exit 1)
above ``BUDGET_MS``. Wall time under load grows with the neighbours; CPU time hardly
does, and timing the import alone leaves out the far larger, noisier ``import jax``.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile

#: What ``import torch2jax_device`` may add to ``import jax``, in CPU milliseconds.
BUDGET_MS = 50.0

PROBE = (
    "import jax, torch2jax_device, sys\n"
    "from jax._src import xla_bridge\n"
    "assert 'torch' not in sys.modules and 'flax' not in sys.modules\n"
    "assert not xla_bridge.backends_are_initialized()\n"
)
_ROW = re.compile(r"import time:\s+\d+ \|\s+(\d+) \| (\s*)(\S+)")


def cumulative_ms(module: str, env: dict[str, str]) -> tuple[float, float]:
    """Cumulative import time of ``jax`` and of ``module`` (top level only) in one run."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", PROBE],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    times = {}
    for line in result.stderr.splitlines():
        match = _ROW.match(line)
        if match and not match.group(2):  # top-level imports only
            times[match.group(3)] = int(match.group(1)) / 1000
    return times["jax"], times[module]


#: Prints the CPU milliseconds ``import torch2jax_device`` takes after ``import jax``.
CPU_PROBE = (
    "import jax, sys, time\n"
    "started = time.process_time()\n"
    "import torch2jax_device\n"
    "print((time.process_time() - started) * 1000)\n"
    "from jax._src import xla_bridge\n"
    "assert 'torch' not in sys.modules and 'flax' not in sys.modules\n"
    "assert not xla_bridge.backends_are_initialized()\n"
)


def cpu_ms(env: dict[str, str]) -> float:
    """The CPU time ``import torch2jax_device`` takes in a fresh process, after jax's."""
    result = subprocess.run(
        [sys.executable, "-c", CPU_PROBE], capture_output=True, text=True, check=True, env=env
    )
    return float(result.stdout.split()[0])


def check(runs: int) -> int:
    """Exit status 1 when the median CPU ``import torch2jax_device`` adds is over budget."""
    with tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = cache
        cpu_ms(env)  # bytecode written, files cached
        added = [cpu_ms(env) for _ in range(runs)]
    median = statistics.median(added)
    verdict = "within" if median <= BUDGET_MS else "OVER"
    print(
        f"import torch2jax_device adds {median:.0f} ms of CPU to import jax (median of {runs};"
        f" min {min(added):.0f}, max {max(added):.0f}): {verdict} the budget of"
        f" {BUDGET_MS:.0f} ms"
    )
    return 0 if median <= BUDGET_MS else 1


def main() -> None:
    if sys.argv[1:2] == ["--check"]:
        sys.exit(check(int(sys.argv[2]) if len(sys.argv) > 2 else 7))
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    with tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = cache
        cumulative_ms("torch2jax_device", env)  # warm the file cache, write the bytecode
        pairs = [cumulative_ms("torch2jax_device", env) for _ in range(runs)]
    jax_ms = statistics.median(jax for jax, _ in pairs)
    ours = [package for _, package in pairs]
    print(f"runs: {runs}")
    print(f"import jax:                       median {jax_ms:7.1f} ms")
    print(
        f"import torch2jax_device (after):  median {statistics.median(ours):7.1f} ms "
        f"(min {min(ours):.1f}, max {max(ours):.1f}), "
        f"{statistics.median(ours) / jax_ms:.2f}x of import jax"
    )


if __name__ == "__main__":
    main()
