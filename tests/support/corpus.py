"""Labelled scripts for the scanner: each ``NAME.py`` beside a hand-written ``NAME.truth``."""

from __future__ import annotations

import collections
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
