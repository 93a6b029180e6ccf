"""Labelled scripts for the scanner: each ``NAME.py`` beside a hand-written ``NAME.truth``."""

from __future__ import annotations

import collections
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

from torch2jax_device.porting import scanner


def truth(folder: Path, name: str) -> dict[int, set[str]]:
    """``LINE: rule, rule`` lines of ``folder/name.truth``; ``#`` starts a comment."""
    found: dict[int, set[str]] = {}
    for line in (folder / f"{name}.truth").read_text().splitlines():
        entry = line.split("#", 1)[0].strip()
        if entry:
            number, rules = entry.split(":")
            found[int(number)] = {rule.strip() for rule in rules.split(",")}
    return found


def findings(folder: Path, name: str) -> dict[int, set[str]]:
    """The rules ``scan`` reports on each line of ``folder/name.py``."""
    path = folder / f"{name}.py"
    found: dict[int, set[str]] = collections.defaultdict(set)
    for finding in scanner.scan_source(path.read_text(), str(path)):
        found[finding.line].add(finding.rule)
    return found


# The fork server's loop: preload, then for each request (a JSON line on stdin) fork a
# child that runs the script, wait for it, and answer its pid, then its exit status.
_SERVER = r"""
import json, os, runpy, sys, traceback
import torch
import torch._dynamo  # what a torch script imports when it builds its first optimizer


def run(request):
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for descriptor, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, descriptor)
        os.close(target)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    script, *arguments = request["argv"]
    sys.argv = [script, *arguments]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        raise
    except BaseException:  # reported as the interpreter would
        traceback.print_exc()
        raise SystemExit(1)


for line in sys.stdin:
    request = json.loads(line)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        run(request)
        raise SystemExit(0)  # the interpreter finalizes as after `python SCRIPT`
    print(pid, flush=True)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


class ScriptRunner:
    """Runs ``python SCRIPT ARGS`` in a fork of one process that has imported torch.

    A corpus script spends most of its seconds in ``import torch`` (and in the import
    torch's optimizers do at their first use); a fork of a process that did it once runs
    each script with its own process, exit status, output, working directory and
    environment, as ``python SCRIPT ARGS`` would, and ends it the same way (the
    interpreter finalizes). What the interpreter reads when it starts (``PYTHONPATH``,
    ``OMP_NUM_THREADS`` for torch) is the server's, ``env`` given here.
    """

    def __init__(self, env: dict[str, str], scratch: Path) -> None:
        self.env = env
        self.scratch = scratch
        self.runs = 0
        self.pending = b""
        self.server = subprocess.Popen(
            [sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )

    def run(self, *argv: str, cwd: Path, timeout: float = 300) -> tuple[int, str, str]:
        """``python ARGV...`` in ``cwd``: (exit status, stdout, stderr)."""
        assert self.server.stdin is not None
        self.runs += 1
        out, err = self.scratch / f"{self.runs}.out", self.scratch / f"{self.runs}.err"
        request = {"argv": list(argv), "cwd": str(cwd), "env": self.env}
        request.update(stdout=str(out), stderr=str(err))
        self.server.stdin.write(json.dumps(request).encode() + b"\n")
        self.server.stdin.flush()
        pid = int(self._answer(timeout))
        try:
            status = int(self._answer(timeout))
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            self._answer(60)  # the killed script's status: the next run's answers follow
            raise
        return status, out.read_text(), err.read_text()

    def _answer(self, timeout: float) -> bytes:
        """The server's next line (a hang fails after ``timeout`` seconds)."""
        assert self.server.stdout is not None
        descriptor = self.server.stdout.fileno()
        while b"\n" not in self.pending:
            ready, _, _ = select.select([descriptor], [], [], timeout)
            if not ready:
                raise TimeoutError(f"no answer from the script server within {timeout:g} s")
            chunk = os.read(descriptor, 4096)
            assert chunk, f"the script server ended (status {self.server.poll()})"
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line

    def close(self) -> None:
        """End the server (it ends when its input does)."""
        assert self.server.stdin is not None and self.server.stdout is not None
        self.server.stdin.close()
        self.server.wait(timeout=60)
        self.server.stdout.close()
