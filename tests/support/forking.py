"""Start scripts without paying their imports each time: fork them from a server.

Tests that start many short-lived processes (ranks started by hand, launchers, ported
scripts) spend most of each one's CPU importing JAX, torch2jax_device or torch.
``ForkServer`` starts this file as a process that imports those modules once (JAX's
backends stay unstarted; nothing may start threads), then forks one child per
``start``. Each child is the process ``python SCRIPT ARGS`` (or ``python -m MODULE
ARGS``) would be: its own pid, working directory, environment, ``sys.argv``, stdout and
stderr (files or FIFOs the test reads), signals and exit status; an uncaught exception
prints its traceback and exits 1, and the interpreter then finalizes as after any
script (``atexit`` handlers, JAX's included, run). What a module reads when it is
imported (``JAX_PLATFORMS``, ``OMP_NUM_THREADS`` for torch) comes from the server's
environment.

The protocol, one line each way: the test writes ``{"script" or "module", "args",
"env", "cwd", "stdout", "stderr"}`` as JSON; the server answers ``STARTED <pid>``, and
``EXITED <pid> <code>`` when the child ends (``code`` as ``subprocess`` gives it: ``-N``
for signal N). When its stdin closes, the server kills the children still running and
exits. A server that cannot import a module answers ``MISSING <name>`` and ends, and
``start`` raises ``ModuleNotFoundError`` (a test of a framework that is not installed
then skips: ``tests/support/optional_frameworks.py``).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import runpy
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from tests.support.deadlines import deadline

# How often the server looks for children that ended.
_POLL_S = 0.02


class ForkServer:
    """The server process, started with ``env``; it imports ``modules`` (found in
    ``folder`` as well as on its path), and scripts named relative to ``folder`` run."""

    def __init__(self, env: dict[str, str], modules: tuple[str, ...], folder: Path) -> None:
        self.folder = folder
        self.process = subprocess.Popen(
            [sys.executable, __file__, str(folder), *modules], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self._stderr_files = tempfile.TemporaryDirectory(prefix="fork-server-")
        self._exited: dict[int, int] = {}
        self._started = 0  # names each child's stderr file
        self._missing: str | None = None  # the module the server could not import
        self._buffer = ""
        assert self.process.stdout is not None
        os.set_blocking(self.process.stdout.fileno(), False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.process.stdout, selectors.EVENT_READ)

    def start(
        self,
        script: str,
        *args: str,
        env: dict[str, str],
        cwd: Path | None = None,
        stdout: Path | None = None,
        stderr: Path | None = None,
    ) -> Forked:
        """Fork ``python SCRIPT ARGS`` with exactly ``env``, in ``cwd`` (``SCRIPT``
        relative to it, else to ``folder``), writing to ``stdout`` (dropped if ``None``)
        and ``stderr`` (kept for ``Forked.communicate`` if ``None``)."""
        path = script if cwd is not None else str(self.folder / script)
        err = stderr
        if err is None:
            self._started += 1
            err = Path(self._stderr_files.name) / f"{self._started}.err"
        request = {
            "script": path, "cwd": str(cwd) if cwd is not None else None,
            "stdout": str(stdout) if stdout is not None else os.devnull, "stderr": str(err),
        }  # fmt: skip
        return self._fork(request, args, env, err if stderr is None else None)

    def start_module(
        self, module: str, *args: str, env: dict[str, str], stdout: Path, stderr: Path
    ) -> Forked:
        """Fork ``python -m module ARGS`` with exactly ``env``, writing to ``stdout`` and
        ``stderr`` (FIFOs the caller opened for reading, or files)."""
        request = {"module": module, "cwd": None, "stdout": str(stdout), "stderr": str(stderr)}
        return self._fork(request, args, env, None)

    def _fork(
        self, request: dict[str, Any], args: tuple[str, ...], env: dict[str, str], err: Path | None
    ) -> Forked:
        assert self.process.stdin is not None
        if self._missing is None:
            with contextlib.suppress(BrokenPipeError):  # a server that ended said why (below)
                line = json.dumps({**request, "args": list(args), "env": env})
                self.process.stdin.write(line + "\n")
                self.process.stdin.flush()
            until = time.monotonic() + deadline(120)  # the server's own imports, under load
            while (line := self._line(until)).startswith("EXITED "):
                self._record(line)  # an earlier child ended before this one started
            if line.startswith("MISSING "):  # a framework the test needs is not installed
                self._missing = line.split()[1]
        if self._missing is not None:
            name = self._missing
            raise ModuleNotFoundError(f"the fork server could not import {name}", name=name)
        assert line.startswith("STARTED "), line
        return Forked(self, int(line.split()[1]), err)

    def exit_code(self, pid: int, timeout: float) -> int | None:
        """Child ``pid``'s exit code, once it ended within ``timeout``; else ``None``."""
        until = time.monotonic() + timeout
        while pid not in self._exited:
            line = self._line(until)
            if not line:
                return None
            self._record(line)
        return self._exited[pid]

    def _record(self, line: str) -> None:
        """Keep the exit code of an ``EXITED <pid> <code>`` line."""
        _, child, code = line.split()
        self._exited[int(child)] = int(code)

    def close(self) -> None:
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # the server ended early (MISSING)
            self.process.stdin.close()
        try:
            self.process.wait(timeout=deadline(30))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._selector.close()
        assert self.process.stdout is not None
        self.process.stdout.close()
        self._stderr_files.cleanup()

    def _line(self, until: float) -> str:
        """The server's next line; ``""`` past ``until`` (a ``time.monotonic()``)."""
        while "\n" not in self._buffer:
            left = until - time.monotonic()
            if not self._selector.select(max(left, 0)):
                if left <= 0:
                    return ""
                continue
            assert self.process.stdout is not None
            chunk = self.process.stdout.read()
            if chunk == "":
                raise AssertionError(f"the fork server exited ({self.process.poll()})")
            self._buffer += chunk or ""
        line, self._buffer = self._buffer.split("\n", 1)
        return line


class Forked:
    """One forked process, signalled and waited for as a ``subprocess.Popen`` is."""

    def __init__(self, server: ForkServer, pid: int, err: Path | None) -> None:
        self.server, self.pid, self._err = server, pid, err
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.wait(0) if self.returncode is None else self.returncode

    def wait(self, timeout: float) -> int | None:
        """The exit code once the process ended within ``timeout``, else ``None``."""
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid, timeout)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """``("", stderr)`` once the process ended; ``TimeoutExpired`` past ``timeout``
        (``deadline(30)`` by default)."""
        timeout = deadline(30) if timeout is None else timeout
        if self.wait(timeout) is None:
            raise subprocess.TimeoutExpired(f"forked pid {self.pid}", timeout)
        return "", self._err.read_text() if self._err is not None else ""

    def send_signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _serve(folder: str, modules: list[str]) -> None:
    """Import ``modules`` (from ``folder`` too), then fork a child per request until
    stdin closes."""
    sys.path[0] = folder
    try:
        for module in modules:
            importlib.import_module(module)
    except ModuleNotFoundError as error:  # ForkServer raises it in the test
        print(f"MISSING {error.name}", flush=True)
        return
    # What the imports made lives as long as each child: out of every child's collector
    # passes (a full pass over torch's objects alone costs ~0.4 s of CPU).
    gc.freeze()
    children: set[int] = set()
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ)
    pending = b""
    while True:
        if selector.select(_POLL_S):
            chunk = os.read(0, 65536)
            if not chunk:
                break
            pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            pid = os.fork()
            if pid == 0:
                selector.close()
                _child(json.loads(line))  # raises SystemExit: the child ends as a script does
            children.add(pid)
            print(f"STARTED {pid}", flush=True)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            children.discard(pid)
            print(f"EXITED {pid} {os.waitstatus_to_exitcode(status)}", flush=True)
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _child(request: dict[str, Any]) -> None:
    """Become ``python SCRIPT ARGS`` with the request's environment and output files."""
    for fd, path, flags in (
        (0, os.devnull, os.O_RDONLY),
        (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    ):
        opened = os.open(path, flags, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    if request["cwd"] is not None:
        os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    try:
        if "module" in request:  # python -m MODULE: argv[0] is set by run_module
            sys.argv = ["-m", *request["args"]]
            sys.path[0] = os.getcwd()
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        else:
            sys.argv = [request["script"], *request["args"]]
            sys.path[0] = os.path.dirname(os.path.abspath(request["script"]))
            runpy.run_path(request["script"], run_name="__main__")
    except SystemExit:
        raise
    except BaseException:  # reported as the interpreter reports an uncaught exception
        traceback.print_exc()
        raise SystemExit(1) from None
    raise SystemExit(0)


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2:])
