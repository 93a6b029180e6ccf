"""``torch2jax-device scan``: report every PyTorch device idiom, line by line, like a linter.

Exit status: 0 when nothing was found, 1 when idioms were found, 2 when a file could
not be read or parsed (the others are still scanned).
"""

from __future__ import annotations

import argparse
import difflib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from ..porting.scanner import Finding, apply_edits, scan_source

__all__ = ["add_parser", "run"]

GUIDE = "docs/migration-guide.md"


def _python_files(paths: list[str]) -> Iterator[Path]:
    for name in paths:
        path = Path(name)
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*.py") if ".venv" not in p.parts)
        else:
            yield path


def _as_json(finding: Finding) -> dict[str, Any]:
    idiom = finding.idiom
    return {
        "path": finding.path,
        "line": finding.line,
        "column": finding.column,
        "rule": finding.rule,
        "title": idiom.title,
        "original": finding.original,
        "replacement": finding.replacement,
        "jax": idiom.jax,
        "fixable": finding.fixable,
        "guide": f"{GUIDE}#{finding.rule}",
    }


def _as_text(finding: Finding) -> str:
    idiom = finding.idiom
    first_line = idiom.jax.splitlines()[0] if idiom.jax else ""
    return (
        f"{finding.path}:{finding.line}:{finding.column}: {finding.rule} {finding.original}\n"
        f"    torch2jax_device: {finding.replacement}"
        f"{'' if finding.fixable else '   (not rewritten by --diff)'}\n"
        f"    plain JAX:        {first_line}\n"
        f"    guide:            {GUIDE}#{finding.rule}\n"
    )


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Scan, print findings (or a diff), return the linter-style exit status."""
    failed = False
    findings: list[Finding] = []
    for path in _python_files(args.paths):
        try:
            source = path.read_text(encoding="utf-8")
            found = scan_source(source, str(path))
        except (OSError, UnicodeDecodeError, SyntaxError) as error:
            err.write(f"torch2jax-device scan: cannot scan {path}: {error}\n")
            failed = True
            continue
        findings += found
        if args.diff:
            rewritten = apply_edits(source, found)
            out.writelines(
                difflib.unified_diff(
                    source.splitlines(keepends=True),
                    rewritten.splitlines(keepends=True),
                    fromfile=f"a/{path}",
                    tofile=f"b/{path}",
                )
            )
    if args.diff:
        return 2 if failed else 0
    if args.format == "json":
        out.write(json.dumps([_as_json(f) for f in findings], indent=2) + "\n")
    else:
        out.writelines(_as_text(f) for f in findings)
        fixable = sum(f.fixable for f in findings)
        out.write(f"{len(findings)} idiom(s) found, {fixable} rewritable with --diff\n")
    if failed:
        return 2
    return 1 if findings else 0


def add_parser(commands: Any) -> None:
    """Register ``scan`` on the command line's subcommands."""
    parser = commands.add_parser(
        "scan",
        help="report the PyTorch device idioms in Python files and what each becomes",
        description=(
            "Parse Python files (directories recursively) and report every PyTorch device "
            "idiom with file:line:col, its catalog rule id, the torch2jax_device and plain "
            "JAX replacement and the migration-guide section. Exit status 1 if any was "
            "found, 2 if a file could not be parsed."
        ),
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or directories")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--diff",
        action="store_true",
        help="print a unified diff of the mechanical, safe rewrites instead of the findings",
    )
    parser.set_defaults(run=run)
