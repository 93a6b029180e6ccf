"""Real code the scanner's tests read, rebuilt from its own repository, never kept in this one.

The files of ``fixtures/unseen_round5`` to ``unseen_round8`` (cut from
public repositories, labelled by hand in the ``.truth`` files beside them) and the
projects of ``fixtures/realrun`` are other people's code, so this project commits none
of it. Each folder's ``SOURCES.json`` says, for each file, the repository, commit and
path it comes from and the pieces it is made of: ``[first, last]`` line ranges of the
original (1-based, inclusive) and, as strings, the few lines of this project's own (the
header naming the source, a blank line, a constant cut down to run in seconds), with the
SHA-256 of the result, which the labels' line numbers refer to.

``materialize(folder)`` writes the files from local clones of those repositories and
checks each against its SHA-256. The clones are looked for in the folder named by
``TORCH2JAX_DEVICE_MIRRORS``, as ``owner+name/repo`` (the git directories the project's
tooling fetches) or ``owner/name`` (a plain ``git clone``). Where a clone is missing, it
says which, and the tests that read the folder skip: CI measures the classes these
files taught through the generated tests (``test_scan_*classes*.py``), a machine with
the clones measures recall on the real files::

    TORCH2JAX_DEVICE_MIRRORS=/work/.mirror .venv/bin/python -m tests.cli.test_scan_unseen_round7

The rebuilt files are ignored by git (``.gitignore``).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

MIRRORS = "TORCH2JAX_DEVICE_MIRRORS"
MANIFEST = "SOURCES.json"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: Every folder holding other people's code, each with its ``SOURCES.json``.
FOLDERS = tuple(sorted(path.parent for path in FIXTURES.glob(f"*/{MANIFEST}")))


class ExcerptError(Exception):
    """A rebuilt file differs from the one the labels were written against."""


def materialize(folder: Path) -> str | None:
    """Write ``folder``'s files from their repositories; ``None`` when all are there, else
    why not (the clones missing), for ``pytest.skip``."""
    manifest: dict[str, dict[str, Any]] = json.loads((folder / MANIFEST).read_text())
    missing: set[str] = set()
    for name, source in manifest.items():
        target = folder / name
        if target.is_file() and _digest(target.read_bytes()) == source["sha256"]:
            continue
        original = _original(source)
        if original is None:
            missing.add(source["repo"])
            continue
        text = _assembled(original, source)
        if _digest(text.encode()) != source["sha256"]:
            raise ExcerptError(
                f"{folder.name}/{name} rebuilt from {source['repo']} {source['path']} at "
                f"{source['commit'][:12]} differs from the file its labels were written "
                "against: is the clone that repository?"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    if not missing:
        return None
    where = os.environ.get(MIRRORS)
    return (
        f"{folder.name}: real code rebuilt from clones of {len(missing)} repositories "
        f"({', '.join(sorted(missing)[:3])}{', ...' if len(missing) > 3 else ''}), "
        + (f"not all in {where}" if where else f"and {MIRRORS} names no folder of clones")
    )


def _original(source: dict[str, Any]) -> str | None:
    """The original file at its commit, from a clone; ``None`` without one."""
    where = os.environ.get(MIRRORS)
    if not where:
        return None
    owner, name = source["repo"].split("/")
    for git_dir in (Path(where, f"{owner}+{name}", "repo"), Path(where, owner, name, ".git")):
        if git_dir.is_dir():
            shown = subprocess.run(
                ["git", "--git-dir", str(git_dir), "show", f"{source['commit']}:{source['path']}"],
                capture_output=True,
                check=False,
            )
            if shown.returncode == 0:
                return shown.stdout.decode()
    return None


def _assembled(original: str, source: dict[str, Any]) -> str:
    lines = original.replace("\r\n", "\n").split("\n")
    kept: list[str] = []
    for piece in source["pieces"]:
        if isinstance(piece, str):
            kept.append(piece)
        else:
            first, last = piece
            kept.extend(lines[first - 1 : last])
    return "\n".join(kept)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
