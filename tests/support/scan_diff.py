"""``scan --diff`` as a user runs it on a folder, and the checks on what it wrote.

The execution oracles (``tests/cli/test_scan_oracle.py`` on the project's own mixed
scripts, ``tests/cli/test_scan_realrun.py`` on vendored real projects) make a diff in a
copy of the code, apply it the documented way (``scan --diff ... | patch -p1``), run the
result, and then scan it again: the rewrite reached its fixed point and nothing it wrote
is reported.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
from pathlib import Path

import pytest

from torch2jax_device.cli import main
from torch2jax_device.porting import scanner


def scan_diff(folder: Path, *paths: str) -> str:
    """``torch2jax-device scan --diff PATHS...`` run in ``folder``: the diff it prints."""
    out = io.StringIO()
    with contextlib.chdir(folder), contextlib.redirect_stdout(out):
        status = main(["scan", "--diff", *paths])
    assert status == 0
    return out.getvalue()


def apply_diff(folder: Path, diff: str) -> None:
    """The documented workflow: ``scan --diff ... | patch -p1`` in ``folder``."""
    patch = shutil.which("patch") or pytest.fail("patch is needed to apply the diff")
    done = subprocess.run(
        [patch, "-p1", "--forward", "--batch"], cwd=folder, input=diff, text=True,
        capture_output=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def written_lines(diff: str) -> set[str]:
    """The lines a diff adds, stripped."""
    return {
        line[1:].strip()
        for line in diff.splitlines()
        if line.startswith("+") and not line.startswith("+++")
    }


def reported_written(sources: dict[str, str], diff: str) -> list[tuple[str, int, str, str]]:
    """(path, line, rule, original) of each finding that ``scan``, given ``sources`` (by
    path) together, reports on a line ``diff`` wrote: ``scan`` must not flag its own
    output."""
    written = written_lines(diff)
    found = scanner.scan_sources(sources)
    return [
        (f.path, f.line, f.rule, f.original)
        for path, source in sources.items()
        for f in found[path]
        if source.splitlines()[f.line - 1].strip() in written
    ]


def brought(
    source: str, ported: str, before: list[scanner.Finding], again: list[scanner.Finding]
) -> list[scanner.Finding]:
    """Findings on lines ``--diff`` wrote, on its ``tj`` code, that the original's scan did
    not make on the same code: a finding the rewrite brought. (A device string's advice
    stays on a line whose query the diff rewrote: it was there before the diff, and it is
    not about what the diff wrote.)"""
    written = set(ported.splitlines()) - set(source.splitlines())
    lines = ported.splitlines()
    known = {(f.rule, f.original) for f in before}
    return [
        f
        for f in again
        if lines[f.line - 1] in written
        and "tj." in f.original
        and (f.rule, f.original.replace("tj.", "torch.")) not in known
    ]


def reaches_its_fixed_point(source: str, name: str) -> None:
    """One ``--diff`` of ``source`` compiles, leaves nothing to rewrite, and its result's
    scan reports nothing the diff brought (``brought``)."""
    before = scanner.scan_source(source, name)
    ported = scanner.apply_edits(source, before)
    compile(ported, name, "exec")
    again = scanner.scan_source(ported, name)
    assert [f for f in again if f.fixable] == []  # one --diff reaches the fixed point
    assert [(f.line, f.rule, f.original) for f in brought(source, ported, before, again)] == []
