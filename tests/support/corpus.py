"""Labelled scripts for the scanner: each ``NAME.py`` beside a hand-written ``NAME.truth``."""

from __future__ import annotations

import ast
import collections
import re
from pathlib import Path

from tests.support.deadlines import deadline
from tests.support.forking import ForkServer
from torch2jax_device.porting import catalog, scanner


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


def recall(folder: Path, names: list[str]) -> dict[str, tuple[int, int]]:
    """(found, labelled) torch lines and library lines (a line all of whose rules are the
    catalog's "Libraries built on torch"), labelled rules found, and findings on lines
    without a label (out of 0: told, not asserted), over the files ``names``."""
    libraries = {row.id for row in catalog.CATALOG if row.section == "Libraries built on torch"}
    counts = {key: [0, 0] for key in ("torch lines", "library lines", "rules", "unlabelled")}
    for name in names:
        expected, got = truth(folder, name), findings(folder, name)
        for line, rules in expected.items():
            key = "library lines" if rules <= libraries else "torch lines"
            counts[key][0] += bool(got.get(line))
            counts[key][1] += 1
            counts["rules"][0] += len(rules & got.get(line, set()))
            counts["rules"][1] += len(rules)
        counts["unlabelled"][0] += len(set(got) - set(expected))
    return {key: (a, b) for key, (a, b) in counts.items()}


_CITED = re.compile(r"\bline (\d+): (.*?)(?=: |;|$)")  # up to the explanation
#: A name called, indexed or read from; a name cut short by the reason's "..." is not one.
_CODE_WORD = re.compile(r"([A-Za-z_]\w*)(?=[(\[]|\.(?!\.))")


def miscited(source: str, name: str) -> list[tuple[int, str]]:
    """Findings of ``source`` scanned alone whose reason quotes, as code of "line N"
    ("line 8: passed to model.to(device)"), a name that is not in the statement that
    starts on (or continues through) line N of this file, nor in the finding's own:
    (finding's line, reason)."""
    found = [(finding.line, finding.reason) for finding in scanner.scan_source(source, name)]
    return off_their_lines(source, found)


def off_their_lines(source: str, reasons: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The ``(line, reason)`` of ``reasons`` that quote code ``source`` does not hold
    where they say (``miscited``'s check, on reasons given)."""
    lines = source.splitlines()
    spans = _statement_spans(source)

    def statement(number: int) -> str:
        # From line N to the end of the innermost statement holding it (a statement
        # starting there, or one it continues).
        holding = [end for start, end in spans if start <= number <= end]
        return "\n".join(lines[number - 1 : min(holding, default=number + 3)])

    return [
        (line, reason)
        for line, reason in reasons
        for number, cited in _CITED.findall(reason)
        if any(
            word not in statement(int(number)) + "\n" + statement(line)
            for word in _CODE_WORD.findall(cited)
        )
    ]


def _statement_spans(source: str) -> list[tuple[int, int]]:
    """(first line, last line) of every statement of ``source``, compound ones included."""
    return [
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.stmt)
    ]


def labelled_rules(folder: Path, names: list[str]) -> set[str]:
    """Every rule the ``.truth`` files of ``names`` label."""
    return {rule for name in names for rules in truth(folder, name).values() for rule in rules}


def uncited_sources(folder: Path, names: list[str]) -> list[str]:
    """The files of ``names`` whose first three lines do not name ``owner/repo path.py``,
    the 40-hex commit and the licence they are cut from."""
    uncited = []
    for name in names:
        header = " ".join((folder / f"{name}.py").read_text().split("\n", 3)[:3])
        if not (
            re.search(r"[\w-]+/[\w.-]+ \S+\.py", header)
            and re.search(r"\b[0-9a-f]{40}\b", header)
            and re.search(r"[Ll]icen[cs]e", header)
        ):
            uncited.append(name)
    return uncited


def below_floors(
    found: dict[str, dict[str, tuple[int, int]]], floors: dict[str, tuple[float, float]]
) -> list[tuple[str, dict[str, tuple[int, int]]]]:
    """The sets whose torch-line or library-line recall is under its floor."""
    below = []
    for group, (torch_floor, library_floor) in floors.items():
        for key, floor in (("torch lines", torch_floor), ("library lines", library_floor)):
            hits, lines = found[group][key]
            if lines and hits / lines < floor:
                below.append((group, found[group]))
    return below


def cited_elsewhere(folder: Path, names: list[str]) -> list[tuple[str, int, str]]:
    """Findings of the files scanned as one folder whose reason names another file:
    (path, line, reason). Files of unrelated projects cite only their own lines."""
    sources = {str(folder / f"{n}.py"): (folder / f"{n}.py").read_text() for n in names}
    return [
        (path, finding.line, finding.reason)
        for path, found in scanner.scan_sources(sources).items()
        for finding in found
        for other in re.findall(r"\(([^()\s]+\.py):\d+\)", finding.reason)
        if other != path
    ]


def print_figures(found: dict[str, dict[str, tuple[int, int]]]) -> None:
    """The figures of each set, as ``python -m tests.cli.test_scan_unseen_roundN`` prints them."""
    for group, count in found.items():
        print(group)
        for key, (a, b) in count.items():
            ratio = f" = {a / b:.3f}" if b else ""
            print(f"  {key:14} {a:4} / {b:<4}{ratio}")
