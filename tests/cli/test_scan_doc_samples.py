"""Every ``scan`` sample the docs print is what the command prints (audit A8, item 6: a
sample said "13 idiom(s) found" where the command printed 15).

A sample is a fenced block of a page of ``docs/`` (or the README) whose first line is
``$ torch2jax-device scan ...``: the command is run from the repository's root, as the
pages run it, and every line the block shows (``...`` stands for lines left out) must be
a line of its output. A new sample is a new case.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from torch2jax_device.cli import main

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"])
_SAMPLE = re.compile(r"^```[a-z]*\n(\$ torch2jax-device scan [^\n]*)\n(.*?)^```", re.S | re.M)


def _samples() -> list[tuple[str, str, list[str]]]:
    found = []
    for page in PAGES:
        for match in _SAMPLE.finditer(page.read_text()):
            shown = [line for line in match.group(2).splitlines() if line != "..."]
            found.append((str(page.relative_to(ROOT)), match.group(1)[2:], shown))
    return found


SAMPLES = _samples()


def test_the_docs_hold_scan_samples() -> None:
    assert len(SAMPLES) >= 3


@pytest.mark.parametrize(
    ("page", "command", "shown"), SAMPLES, ids=[f"{p}:{c}" for p, c, _ in SAMPLES]
)
def test_a_scan_sample_is_what_the_command_prints(
    page: str, command: str, shown: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(shlex.split(command)[1:])
    printed = out.getvalue().splitlines()
    assert shown
    assert [line for line in shown if line not in printed] == [], f"{page}: {command}"
