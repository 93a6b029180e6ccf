"""Run the scripts of ``examples/`` as a user would, in a fresh interpreter.

The children compile with XLA's CPU backend at optimization level 0 and with its
classic fusion emitters instead of the MLIR ones (``QUICK_COMPILE``): their programs are
small and run a few steps, so LLVM's optimization passes and the MLIR pipeline cost most
of their time and buy nothing (the one-process GPT port run: 22 s of CPU at the default
settings, 13 s at level 0, 10 s with the classic emitters too; the MNIST port, whose
convolutions run longest, 14.5 s, 10.7 s and 10.1 s; the GPT losses agree to float32
rounding, and are the same bits at level 0 with either emitters).
An XLA that no longer knows a flag stops the child at once ("Unknown flag in
XLA_FLAGS"), so a JAX upgrade that drops one shows here. The examples' defaults are
untouched: only the tests' children get the flags.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QUICK_COMPILE = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"


def example_env(base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``base`` (default: this environment) plus ``extra``, compiling quickly (above)."""
    env = dict(os.environ if base is None else base, **extra)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {QUICK_COMPILE}".strip()
    return env


@contextlib.contextmanager
def example_environment(**extra: str) -> Iterator[None]:
    """This process's environment as :func:`example_env` gives it, for the children an
    in-process launcher starts; restored on exit."""
    changed = {name: value for name, value in example_env(**extra).items()
               if os.environ.get(name) != value}  # fmt: skip
    saved = {name: os.environ.get(name) for name in changed}
    os.environ.update(changed)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def run_example(name: str, *args: str) -> str:
    """Run ``examples/<name>`` and return what it printed; fail if it fails."""
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True, text=True, timeout=300, check=True, env=example_env(),
    )  # fmt: skip
    return result.stdout
