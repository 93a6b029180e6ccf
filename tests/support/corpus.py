"""Labelled scripts for the scanner: each ``NAME.py`` beside a hand-written ``NAME.truth``."""

from __future__ import annotations

import collections
from pathlib import Path

from tests.support.deadlines import deadline
from tests.support.forking import ForkServer
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


class ScriptRunner:
    """Runs ``python SCRIPT ARGS`` in a fork of one process that has imported torch.

    A corpus script spends most of its seconds in ``import torch`` (and in the import
    torch's optimizers do at their first use); a fork of a process that did it once
    (``tests/support/forking.py``) runs each script with its own process, exit status,
    output, working directory and environment, as ``python SCRIPT ARGS`` would, and ends
    it the same way (the interpreter finalizes). What the interpreter reads when it
    starts (``PYTHONPATH``, ``OMP_NUM_THREADS`` for torch) is the server's, ``env``
    given here.
    """

    def __init__(self, env: dict[str, str], scratch: Path) -> None:
        self.env = env
        self.scratch = scratch
        self.runs = 0
        self.server = ForkServer(env, ("torch", "torch._dynamo"), scratch)

    def run(self, *argv: str, cwd: Path, limit_s: float = 300) -> tuple[int, str, str]:
        """``python ARGV...`` in ``cwd``: (exit status, stdout, stderr)."""
        self.runs += 1
        out, err = self.scratch / f"{self.runs}.out", self.scratch / f"{self.runs}.err"
        script, *arguments = argv
        process = self.server.start(
            script, *arguments, env=self.env, cwd=cwd, stdout=out, stderr=err
        )
        status = process.wait(limit := deadline(limit_s))
        if status is None:
            process.kill()
            process.wait(deadline(60))
            raise TimeoutError(f"{script} ran past {limit:g} s")
        return status, out.read_text(), err.read_text()

    def close(self) -> None:
        """End the server (it ends when its input does)."""
        self.server.close()
