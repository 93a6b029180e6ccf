"""``torch2jax-device scan``: report every PyTorch device idiom, line by line, like a linter.

Exit status: 0 when nothing was found, 1 when idioms were found in files that were all
scanned, 2 when a file was left out (not a regular file, over ``--max-bytes``, not
Python, nested too deep, changed while it was scanned, or the scanner failed on it; the
others are still scanned and printed) or the command was misused. With ``--diff``: 0,
or 2. A file left out never makes the status 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import io
import json
import os
import re
import sys
import textwrap
from pathlib import Path
from typing import Any, TextIO

from .._src.errors import UnscannableFileError
from ..porting import catalog
from ..porting._notebooks import Notebook, read_notebook
from ..porting.scanner import (
    MAX_BYTES,
    Finding,
    PythonFile,
    SourceFile,
    apply_edits,
    read_python,
    scan_files,
    scan_sources,
)

__all__ = ["add_parser", "run"]

_LABEL = 22  # width of the labels of the text report
_Read = tuple[PythonFile, SourceFile]  # a file's bytes and text, and its parse


def _python_files(paths: list[str], err: TextIO) -> tuple[list[tuple[Path, bool]], bool]:
    """The files to read, each once (``_each_once``), with whether it was named
    (``True``: read as named, a link followed) or met in a folder (``False``: a link
    is not followed), and whether a folder could not be listed."""
    files: list[tuple[Path, bool]] = []
    failed = False
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found, unlisted = _walk(path, err)
            files.extend((file, False) for file in found)
            failed = failed or unlisted
        else:
            files.append((path, True))
    return _each_once(files), failed


def _each_once(files: list[tuple[Path, bool]]) -> list[tuple[Path, bool]]:
    """``files`` with each file once: one named twice, or named and met in a folder
    given too, would print its findings twice and apply its diff twice. A file is
    known by its place in its folder, and one named (a link is followed) also by the
    file it points to; a named file is read as named wherever it comes in the list."""

    def names(path: Path, named: bool) -> set[str]:
        place = os.path.join(os.path.realpath(path.parent), path.name)
        return {place, os.path.realpath(path)} if named else {place}

    named_ones = set().union(*(names(path, True) for path, named in files if named))
    seen: set[str] = set()
    once = []
    for path, named in files:
        known = names(path, named)
        if known & seen or (not named and known & named_ones):
            continue
        once.append((path, named))
        seen |= known
    return once


#: Folders a walk does not enter: installed packages (a virtual environment is also
#: known by its ``pyvenv.cfg``, whatever its name), version control's and tools' own
#: (caches, copies of notebooks Jupyter saves on its own), none of them a project's code.
_NOT_ENTERED = frozenset(
    {
        ".venv", "venv", "site-packages", "dist-packages", "__pypackages__", "node_modules",
        ".git", ".hg", ".svn", ".tox", ".nox", ".eggs", "__pycache__", ".mypy_cache",
        ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints",
    }
)  # fmt: skip


def _walk(root: Path, err: TextIO) -> tuple[list[Path], bool]:
    """The ``*.py`` and ``*.ipynb`` files under ``root`` (sorted, the folders of
    ``_NOT_ENTERED`` and virtual environments left out), and whether
    a folder could not be listed. Links to folders are not entered (``scan`` does not
    leave the tree it was given; a ``*.py`` link is refused when it is opened) and the
    walk keeps its own stack, so no depth of folders exhausts Python's."""
    found: list[Path] = []
    failed = False
    folders = [root]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError as error:
            _cannot(folder, f"the folder cannot be listed: {error.strerror or error}", err)
            failed = True
            continue
        for entry in entries:
            path = folder / entry.name
            try:
                is_folder = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_folder = False
            if is_folder:
                if entry.name not in _NOT_ENTERED and not (path / "pyvenv.cfg").is_file():
                    folders.append(path)
            elif entry.name.endswith((".py", ".ipynb")):
                found.append(path)
            elif entry.is_symlink() and _links_to_folder(path):
                _cannot(path, "a symbolic link to a folder; scan does not follow it", err)
                failed = True
    return sorted(found), failed


def _links_to_folder(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def _explain_command(rule: str) -> str:
    return f"torch2jax-device scan --explain {rule}"


def _guide(rule: str) -> str:
    idiom = catalog.get(rule)
    return f'migration guide, section "{idiom.section}", #{rule} ({_explain_command(rule)})'


def _as_json(finding: Finding, cell: int | None) -> dict[str, Any]:
    idiom = finding.idiom
    return {
        "path": finding.path,
        **({} if cell is None else {"cell": cell}),
        "line": finding.line,
        "column": finding.column,
        "end_line": finding.end_line,
        "rule": finding.rule,
        "title": idiom.title,
        "section": idiom.section,
        "original": finding.original,
        "replacement": finding.replacement,
        "jax": finding.jax or idiom.jax,
        "fixable": finding.fixable,
        "reason": finding.reason or None,
        "explain": _explain_command(finding.rule),
    }


def _block(label: str, text: str) -> str:
    """``label`` then ``text``, its later lines indented under the first."""
    lines = text.splitlines() or [""]
    indent = " " * (4 + _LABEL)
    return f"    {label.ljust(_LABEL)}{lines[0]}\n" + "".join(
        f"{indent}{line}\n" for line in lines[1:]
    )


def _as_text(finding: Finding, cell: int | None) -> str:
    idiom = finding.idiom
    original = finding.original.splitlines()
    shown = original[0] + (" ..." if len(original) > 1 else "")
    where = finding.path if cell is None else f"{finding.path}:cell {cell}"
    parts = [f"{where}:{finding.line}:{finding.column}: {finding.rule} {shown}\n"]
    parts.append(_block("torch2jax_device:", finding.replacement))
    parts.append(_block("plain JAX:", finding.jax or idiom.jax))
    if not finding.fixable:
        parts.append(_block("not rewritten:", finding.reason or "advice: port it by hand"))
    parts.append(_block("guide:", _guide(finding.rule)))
    return "".join(parts)


def explain(rule: str, out: TextIO) -> None:
    """Print one catalog row in full: the guide entry a finding cites."""
    idiom = catalog.get(rule)
    wrap = textwrap.TextWrapper(width=92, initial_indent="    ", subsequent_indent="    ")
    indent = "\n".join
    out.write(f"{idiom.id}: {idiom.title}\n")
    out.write(f'Migration guide, section "{idiom.section}", row #{idiom.id}\n\n')
    for label, code in (
        ("PyTorch", idiom.torch),
        ("plain JAX", idiom.jax),
        ("torch2jax_device", idiom.tj),
    ):
        out.write(f"{label}:\n{indent('    ' + line for line in code.splitlines())}\n\n")
    if idiom.notes:
        out.write("Notes:\n" + wrap.fill(idiom.notes) + "\n\n")
    behaviour = {
        "rename": "rewritten by --diff when the new call is correct on its own, else reported",
        "custom": "rewritten by --diff when the new code is correct on its own, else reported",
        "advice": "reported with the advice above; --diff never rewrites it",
        "": "not scanned for",
    }[idiom.rewrite]
    out.write(f"scan: {behaviour}.\n")


def _rules(out: TextIO) -> None:
    for section in catalog.SECTIONS:
        out.write(f"{section}\n")
        for idiom in catalog.CATALOG:
            if idiom.section == section and idiom.rewrite:
                out.write(f"  {idiom.id.ljust(34)}{idiom.title}\n")


def _cannot(path: object, why: object, err: TextIO) -> None:
    err.write(f"torch2jax-device scan: cannot scan {path}: {why}\n")


def _limit(error: BaseException) -> str:
    if isinstance(error, RecursionError):
        return "it is chained or nested deeper than the scanner's stack allows; it is skipped"
    return "the scanner ran out of memory on it; it is skipped"


def _not_python(error: SyntaxError) -> str:
    """Where the file stops being Python, and the line: ``x.cuda(async=True)`` (a
    keyword since Python 3.7, still in old scripts) names the call, not just a line."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    where = f"line {error.lineno}" + (f", column {error.offset}" if error.offset else "")
    line = (error.text or "").strip()
    shown = f": {line[:120]}" if line else ""
    return f"it is not valid Python {version} ({error.msg}, {where}{shown})"


def _read_one(
    path: Path, named: bool, max_bytes: int, notebooks: dict[str, Notebook], err: TextIO
) -> _Read | None:
    """The file read and parsed, or ``None`` (with one line on stderr) if it cannot be;
    one met in a folder (not ``named``) only if it is no symbolic link. A notebook's
    code cells are what is parsed (``notebooks`` gets it, by path)."""
    try:
        if path.suffix == ".ipynb":
            book = read_notebook(str(path), max_bytes, follow_links=named)
            notebooks[str(path)] = book
            return book.file, SourceFile(str(path), book.text)
        read = read_python(str(path), max_bytes, follow_links=named)
        return read, SourceFile(str(path), read.text)
    except SyntaxError as error:
        _cannot(path, _not_python(error), err)
    except UnscannableFileError as error:  # its message starts with the path
        err.write(f"torch2jax-device scan: cannot scan {error}\n")
    except (OSError, ValueError) as error:
        _cannot(path, error, err)
    except (RecursionError, MemoryError) as error:
        _cannot(path, _limit(error), err)
    return None


def _read(
    paths: list[str], max_bytes: int, notebooks: dict[str, Notebook], err: TextIO
) -> tuple[list[_Read], bool]:
    """The files read and parsed (each once), and whether one, or a notebook's cell,
    could not be."""
    listed, unlisted = _python_files(paths, err)
    read = [_read_one(path, named, max_bytes, notebooks, err) for path, named in listed]
    files = [file for file in read if file is not None]
    for path, book in notebooks.items():
        for cell, why in book.skipped:
            _cannot(f"cell {cell} of {path}", f"{why}; the notebook's other cells are scanned", err)
    skipped = any(book.skipped for book in notebooks.values())
    return files, unlisted or skipped or len(files) < len(read)


def _scan_one(path: str, text: str, err: TextIO) -> dict[str, list[Finding]]:
    try:
        return scan_sources({path: text})  # parsed afresh: no state left by the failure
    except (RecursionError, MemoryError) as error:
        _cannot(path, _limit(error), err)
    except Exception as error:  # the scanner's own bug: report it, scan the rest
        err.write(
            f"torch2jax-device scan: internal error on {path}: "
            f"{type(error).__name__}: {error} (please report it)\n"
        )
    return {}


def _scan(files: list[_Read], err: TextIO) -> tuple[dict[str, list[Finding]], bool]:
    """Scan the files together; a file the scanner fails on is reported and left out."""
    try:
        return scan_files([parsed for _, parsed in files]), False
    except (Exception, RecursionError, MemoryError):
        # One file's failure must not stop the others: scan them one by one.
        found: dict[str, list[Finding]] = {}
        for _, parsed in files:
            found.update(_scan_one(parsed.path, parsed.data.decode(), err))
        return found, len(found) < len(files)


# Bytes of a file name that a patch header cannot carry as they are, and their escapes
# in git's C-style quoting (any other one is written in octal, ``\303``).
_ESCAPES = {
    0x07: b"\\a",
    0x08: b"\\b",
    0x09: b"\\t",
    0x0A: b"\\n",
    0x0B: b"\\v",
    0x0C: b"\\f",
    0x0D: b"\\r",
    0x22: b'\\"',
    0x5C: b"\\\\",
}


def _header_name(prefix: bytes, name: bytes) -> bytes:
    """``prefix`` + ``name`` as ``git diff`` writes it in ``---``/``+++`` lines, which
    ``git apply`` and GNU ``patch -p1`` both read back as that name: quoted in C style
    when it holds a control character, a quote or a backslash (a newline in a folder's
    name must never start a header of its own), and followed by a tab when it holds a
    space (where the name ends)."""
    path = prefix + name
    if any(byte < 0x20 or byte == 0x7F or byte in (0x22, 0x5C) for byte in path):
        quoted = b"".join(
            _ESCAPES.get(byte)
            or (b"\\%03o" % byte if byte < 0x20 or byte == 0x7F else bytes((byte,)))
            for byte in path
        )
        return b'"' + quoted + b'"'
    return path + b"\t" if b" " in path else path


def _unified_diff(path: str, old: bytes, new: bytes) -> bytes:
    """A unified diff of two versions of a file's bytes, line ends kept as they are
    (``\r\n`` stays ``\r\n``) and a last line without one marked as ``diff`` marks it;
    the file's name quoted as git quotes it (``_header_name``)."""
    name = os.fsencode(path)
    lines = difflib.diff_bytes(
        difflib.unified_diff,
        _patch_lines(old),
        _patch_lines(new),
        fromfile=_header_name(b"a/", name),
        tofile=_header_name(b"b/", name),
    )
    out = []
    for line in lines:
        out.append(line)
        if not line.endswith(b"\n"):
            out.append(b"\n\\ No newline at end of file\n")
    return b"".join(out)


def _patch_lines(data: bytes) -> list[bytes]:
    """``data`` cut after each ``\n``, as ``patch`` and ``git apply`` cut it: a ``\r``
    alone (old Mac line ends) is part of its line, so a file of them is one line."""
    lines = data.split(b"\n")
    return [line + b"\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def _write_bytes(out: TextIO, data: bytes) -> None:
    """Bytes as they are to a real stream; decoded (unchanged) into a text-only one."""
    buffer = getattr(out, "buffer", None)
    if buffer is None:
        out.write(data.decode("utf-8", "surrogateescape"))
        return
    out.flush()
    buffer.write(data)


# How many times --diff scans its own result for rewrites it made possible (a value
# whose last torch use another rewrite removed) before it says "run again".
_ROUNDS = 3


def _settle(
    files: list[_Read], found: dict[str, list[Finding]]
) -> tuple[dict[str, str], dict[str, list[Finding]], int]:
    """Each file's text with every rewrite applied, scanning the result again until no
    rewrite is left (at most ``_ROUNDS`` times); the last round's findings, and how many
    rewrites a further ``--diff`` would still make (0 once settled)."""
    texts = {read.path: read.text for read, _ in files if read.path in found}
    for _ in range(_ROUNDS):
        rewritten = {path: apply_edits(texts[path], found[path]) for path in texts}
        if rewritten == texts:
            return texts, found, 0
        try:
            again = scan_sources(rewritten)
        except (Exception, RecursionError, MemoryError):
            return rewritten, found, 0  # the first round's rewrites were checked alone
        texts, found = rewritten, again
    pending = sum(f.fixable for findings in found.values() for f in findings)
    return texts, found, pending


def _diff(
    files: list[_Read], found: dict[str, list[Finding]], max_bytes: int, out: TextIO, err: TextIO
) -> bool:
    """Print the diff of every file; ``True`` if one had to be left out. The diff is the
    fixed point: applying it and running ``--diff`` again prints nothing."""
    failed = False
    total = sum(len(findings) for findings in found.values())
    texts, left, pending = _settle(files, found)
    for read, _ in files:
        rewritten = texts.get(read.path, read.text)
        if rewritten == read.text:
            continue
        if read.changed_since(max_bytes):
            _cannot(read.path, "it changed while it was scanned; scan it again", err)
            failed = True
            continue
        _write_bytes(out, _unified_diff(read.path, read.data, read.encode(rewritten)))
    held = [f for path in left for f in left[path] if not f.fixable]
    if held:
        err.write(
            f"torch2jax-device scan: {len(held)} of {total} finding(s) not rewritten: "
            "each needs the code around it ported first. `torch2jax-device scan PATH` "
            "lists them with the reason; `torch2jax-device scan --explain RULE` explains "
            "a rule.\n"
        )
    if pending:
        err.write(
            f"torch2jax-device scan: run again: {pending} more rewrite(s) become possible "
            "once this diff is applied.\n"
        )
    return failed


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Scan, print findings (or a diff), return the linter-style exit status."""
    if args.explain:
        try:
            explain(args.explain, out)
        except KeyError:
            close = difflib.get_close_matches(args.explain, [i.id for i in catalog.CATALOG])
            hint = (
                f"; did you mean {', '.join(close)}?"
                if close
                else "; `torch2jax-device scan --list-rules` lists every rule"
            )
            err.write(f"torch2jax-device scan: no rule {args.explain!r}{hint}\n")
            return 2
        return 0
    if args.list_rules:
        _rules(out)
        return 0
    if not args.paths:
        err.write("torch2jax-device scan: give files or directories to scan (or --explain RULE)\n")
        return 2
    for stream in (out, err):
        _tolerate_any_name(stream)
    notebooks: dict[str, Notebook] = {}
    files, failed = _read(args.paths, args.max_bytes, notebooks, err)
    found, internal = _scan(files, err)
    failed = failed or internal
    if args.diff:
        scripts = [file for file in files if file[1].path not in notebooks]
        failed = _diff(scripts, found, args.max_bytes, out, err) or failed
        return 2 if _notebooks_left(notebooks, found, err) or failed else 0
    findings = [
        _in_cells(_cells_cited(f, notebooks), notebooks.get(read.path))
        for read, _ in files
        if read.path in found
        for f in found[read.path]
    ]
    if args.format == "json":
        out.write(json.dumps([_as_json(*f) for f in findings], indent=2) + "\n")
    else:
        out.writelines(_as_text(*f) for f in findings)
        fixable = sum(f.fixable for f, _ in findings)
        out.write(f"{len(findings)} idiom(s) found, {fixable} rewritable with --diff\n")
    if failed:
        return 2
    return 1 if findings else 0


#: Why a finding in a notebook is not rewritten, whatever a script's would be.
_IN_A_NOTEBOOK = (
    "a notebook's cell: --diff rewrites scripts only; make the change in the cell (or "
    "rewrite the script `jupyter nbconvert --to script NOTEBOOK` makes)"
)


def _in_cells(finding: Finding, book: Notebook | None) -> tuple[Finding, int | None]:
    """A notebook's finding with its lines counted in its cell (and its cell), its
    reason's lines named by cell, and no rewrite; a script's as it is."""
    if book is None:
        return finding, None
    cell, line = book.where(finding.line)
    why = book.relabel(finding.reason) if finding.reason else ""
    return dataclasses.replace(
        finding,
        line=line,
        end_line=line + finding.end_line - finding.line,
        rewrite=None,
        reason=f"{why}; {_IN_A_NOTEBOOK}" if why else _IN_A_NOTEBOOK,
    ), cell


def _cells_cited(finding: Finding, notebooks: dict[str, Notebook]) -> Finding:
    """The finding with each line of a notebook its reason cites as ``PATH:LINE``
    (a finding of another file, whose value the notebook reads) named by cell."""
    reason = finding.reason
    for path, book in notebooks.items():
        if f"{path}:" in reason:
            reason = re.sub(rf"{re.escape(path)}:(\d+)\b", book.cited, reason)
    return finding if reason == finding.reason else dataclasses.replace(finding, reason=reason)


def _notebooks_left(
    notebooks: dict[str, Notebook], found: dict[str, list[Finding]], err: TextIO
) -> bool:
    """Say which notebooks ``--diff`` left as they are although they hold idioms."""
    left = [path for path in notebooks if found.get(path)]
    for path in left:
        _cannot(
            path,
            f"--diff rewrites scripts, not notebooks; `torch2jax-device scan {path}` lists its "
            f"{len(found[path])} finding(s) by cell, or rewrite the script `jupyter nbconvert "
            "--to script` makes of it",
            err,
        )
    return bool(left)


def _tolerate_any_name(stream: TextIO) -> None:
    """File names are bytes: one that is not UTF-8 (``caf\\xe9.py``) reaches Python as
    lone surrogates, which a strict UTF-8 stream refuses (``PYTHONIOENCODING=utf-8:strict``,
    a UTF-8 locale's stderr): such a stream writes them backslash-escaped instead."""
    if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
        stream.reconfigure(errors="backslashreplace")


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of bytes, got {text}")
    return value


def add_parser(commands: Any) -> None:
    """Register ``scan`` on the command line's subcommands."""
    parser = commands.add_parser(
        "scan",
        help="report the PyTorch device idioms in Python files and what each becomes",
        description=(
            "Parse Python files (directories recursively) and report every PyTorch device "
            "idiom with file:line:col, its rule (the id of its row in the migration guide), "
            "the torch2jax_device and plain JAX replacement, and why --diff leaves it alone "
            "when it does. Only regular files are read. Exit status 1 if any idiom was "
            "found, 2 if a file was left out (unreadable, not a regular file, over "
            "--max-bytes, not Python, nested too deep, changed while scanned; the other "
            "files are still scanned) or the command was misused, else 0."
        ),
        epilog=(
            "The paths given are read as one project: the imports between their files are "
            "followed (a device chosen in utils.py and used in train.py, a model class of "
            "model.py, a process group joined in a helper module); installed packages and "
            "files outside the paths are not. --diff rewrites a line only when the "
            "rewritten line is correct on its own for the rest of its program (a value "
            "torch code still uses stays torch's, in the file that makes it too; nothing "
            "that starts JAX moves before init_process_group); the output applies with "
            "`git apply` or `patch -p1`. Scan a whole project at once: "
            "`torch2jax-device scan --diff src/ | git apply`."
        ),
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", help="Python files or directories")
    parser.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help=(
            "text: one block per finding, linter-style (the default); json: a list of "
            "objects with path, line, column, end_line, rule, title, section, original, "
            "replacement, jax, fixable, reason and explain"
        ),
    )
    parser.add_argument(
        "--diff",
        action="store_true",
        help=(
            "print a unified diff of the rewrites that are correct on their own instead of "
            "the findings, importing torch2jax_device as tj where needed"
        ),
    )
    parser.add_argument(
        "--max-bytes",
        type=_positive,
        default=MAX_BYTES,
        metavar="N",
        help=f"skip (with a message) files larger than N bytes (default {MAX_BYTES})",
    )
    parser.add_argument(
        "--explain",
        metavar="RULE",
        help="print the guide entry of RULE (PyTorch, plain JAX, torch2jax_device, notes)",
    )
    parser.add_argument(
        "--list-rules",
        action="store_true",
        help="list every rule scan reports, by guide section",
    )
    parser.set_defaults(run=run)
