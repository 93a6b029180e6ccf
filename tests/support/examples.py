"""Run the scripts of ``examples/`` as a user would, in a fresh interpreter.

The children compile quickly (``tests/support/xla.py``); the examples' own defaults are
untouched.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.support.xla import quick_compile_flags

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example_env(base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``base`` (default: this environment) plus ``extra``, compiling quickly (above)."""
    env = dict(os.environ if base is None else base, **extra)
    env["XLA_FLAGS"] = quick_compile_flags(env.get("XLA_FLAGS", ""))
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
