"""Run the scripts of ``examples/`` as a user would: ``python examples/NAME ARGS``.

``ExampleRunner.run`` (the session's ``examples`` fixture) forks each script from a
server that imported the examples' frameworks once (``forking.py``): the script is its
own process, with its own ``sys.argv``, environment, output and exit status, and skips
only the ~6 s of CPU that importing torch, JAX and flax costs on the 2-core machine.
``fresh=True`` starts a new interpreter instead, for the script whose test is that a
user's first run works (the README's demo, ``quickstart.py``). The children compile
quickly (``tests/support/xla.py``); the examples' own defaults are untouched.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.support.deadlines import deadline
from tests.support.forking import Forked, ForkServer
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


# What every example imports before its first line of its own runs.
_WARM_IMPORTS = ("numpy", "torch", "jax", "flax.nnx", "optax")


class RunningExample:
    """An example started by ``ExampleRunner.start``; ``output`` waits for it."""

    def __init__(self, name: str, process: Forked, folder: Path) -> None:
        self.name, self._process, self._folder = name, process, folder

    def output(self, limit_s: float = 300) -> str:
        """What the script printed; fails, with its stderr, if it failed or ran past
        ``deadline(limit_s)`` seconds."""
        code = self._process.wait(deadline(limit_s))
        if code is None:
            self._process.kill()
            self._process.wait(deadline(30))
        err = (self._folder / "err").read_text()
        assert code == 0, f"{self.name} exited {code}:\n{err[-3000:]}"
        return (self._folder / "out").read_text()


class ExampleRunner:
    """Runs the examples in this environment (``example_env``), each forked from a
    server that made their imports once (the module's docstring)."""

    def __init__(self, scratch: Path) -> None:
        self._scratch = scratch
        self._server: ForkServer | None = None  # started by the first run
        self._runs = 0

    def start(self, name: str, *args: str) -> RunningExample:
        """Start ``python examples/<name> ARGS``."""
        if self._server is None:
            self._server = ForkServer(example_env(), _WARM_IMPORTS, EXAMPLES)
        self._runs += 1
        folder = self._scratch / f"{self._runs}-{name}"
        folder.mkdir()
        process = self._server.start(
            name, *args, env=example_env(), stdout=folder / "out", stderr=folder / "err"
        )
        return RunningExample(name, process, folder)

    def run(self, name: str, *args: str, fresh: bool = False) -> str:
        """Run ``examples/<name>`` and return what it printed; fail if it fails.

        ``fresh``: in a new interpreter (as a user's first run is), not forked."""
        if not fresh:
            return self.start(name, *args).output()
        result = subprocess.run(
            [sys.executable, str(EXAMPLES / name), *args],
            capture_output=True, text=True, timeout=deadline(300), env=example_env(),
        )  # fmt: skip
        status, err = result.returncode, result.stderr[-3000:]
        assert status == 0, f"{name} exited {status}:\n{err}"
        return result.stdout

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
