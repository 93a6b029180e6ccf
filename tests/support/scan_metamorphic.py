"""A metamorphic oracle for ``scan``: rewrite a labelled file without changing what any of
its lines means on a device, and ask ``scan`` the same questions of both.

The hand-labelled files (``tests/support/fixtures/*/NAME.py`` beside ``NAME.truth``) are
seeds: each transformation of ``tests/support/scan_transformations.py`` and
``scan_relocations.py`` (``import torch as th``, a long-hand ``torch.distributed``, a
local renamed, the script moved into ``def main():`` or a class, a call split across
lines, a value routed through a config attribute, another spelling of ``"cuda:" +
str(rank)``...) gives a new file and carries every position of the old one to the new
(``Transformed``). The relation
(``compare``):

- every labelled line ``scan`` finds on the original is found, with the same rule, on
  the line its finding's token moved to (a lost finding is recall the spelling costs);
- no finding appears on a line of the original that was neither labelled nor found (a
  false positive the spelling brings); lines the transformation wrote itself (``def
  main():``, ``cfg.device = device``: a line whose first character it wrote) are not
  judged;
- ``scan --diff`` of the new file compiles and reaches its fixed point
  (``tests/support/scan_diff.py``).

    python -m tests.cli.test_scan_metamorphic        # recall lost per transformation
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import io
import tokenize
from collections.abc import Callable, Iterator
from functools import cached_property
from pathlib import Path

from tests.support.corpus import truth
from torch2jax_device.porting import scanner

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "support" / "fixtures"
#: The labelled sets the oracle draws from (not round 7's: it is being labelled blind).
SEED_SETS = ("corpus", "wild", "unseen_round5", "unseen_round6")


@dataclasses.dataclass(frozen=True, order=True)
class Edit:
    """Replace ``source[start:end]`` (character offsets of the original) by ``text``.

    ``copy`` (offset in ``text``, offset in the original, length) says that part of
    ``text`` is the original's code moved there (``value = accelerator.device`` written
    before the statement that read ``accelerator.device``): its positions map to the
    copy, whichever edit replaced them where they were.
    """

    start: int
    end: int
    text: str
    copy: tuple[int, int, int] | None = None


class Source:
    """A file as the transformations read it: text, tree, tokens, and offsets."""

    def __init__(self, text: str, labels: dict[int, set[str]] | None = None) -> None:
        self.text = text
        #: The file's labels (``LINE: rules``), for transformations that route their values.
        self.labels = labels or {}
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.tree: ast.Module = ast.parse(text)

    def offset(self, line: int, column: int) -> int:
        """Character offset of an ``ast`` position (``column`` in UTF-8 bytes)."""
        text = self.lines[line - 1] if line <= len(self.lines) else ""
        return self.starts[line - 1] + len(text.encode()[:column].decode(errors="ignore"))

    def start(self, node: ast.AST) -> int:
        return self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]

    def end(self, node: ast.AST) -> int:
        return self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]

    def segment(self, node: ast.AST) -> str:
        return self.text[self.start(node) : self.end(node)]

    def line_start(self, line: int) -> int:
        return self.starts[line - 1]

    def indent(self, line: int) -> str:
        text = self.lines[line - 1]
        return text[: len(text) - len(text.lstrip(" \t"))]

    def begins_line(self, node: ast.AST) -> bool:
        """``node`` is the first thing on its line (no ``;`` or ``:`` before it)."""
        line = self.lines[node.lineno - 1]  # type: ignore[attr-defined]
        return not line[: self.start(node) - self.line_start(node.lineno)].strip()  # type: ignore[attr-defined]

    @cached_property
    def tokens(self) -> list[tokenize.TokenInfo]:
        return list(tokenize.generate_tokens(io.StringIO(self.text).readline))

    def token_offset(self, position: tuple[int, int]) -> int:
        """Character offset of a ``tokenize`` (line, column in characters) position."""
        return self.starts[position[0] - 1] + position[1]

    @cached_property
    def string_interiors(self) -> set[int]:
        """Lines that start inside a string token (a triple-quoted string's later lines):
        indenting them would change the string."""
        return {
            line
            for token in self.tokens
            if token.type == tokenize.STRING
            for line in range(token.start[0] + 1, token.end[0] + 1)
        }

    @cached_property
    def parents(self) -> dict[int, ast.AST]:
        return {
            id(child): node for node in ast.walk(self.tree) for child in ast.iter_child_nodes(node)
        }

    def in_fstring(self, node: ast.AST) -> bool:
        parent = self.parents.get(id(node))
        while parent is not None:
            if isinstance(parent, ast.JoinedStr):
                return True
            parent = self.parents.get(id(parent))
        return False

    @cached_property
    def identifiers(self) -> set[str]:
        """Every name the file spells (to choose new ones that clash with none)."""
        return {t.string for t in self.tokens if t.type == tokenize.NAME}

    def fresh(self, base: str) -> str:
        """``base``, or ``base2``, ``base3``...: a name the file does not use."""
        name, number = base, 1
        while name in self.identifiers:
            number += 1
            name = f"{base}{number}"
        self.identifiers.add(name)
        return name


class Transformed:
    """The result of edits on ``original``: its text and a map of positions both ways.

    A character the edits kept maps to itself moved; one inside a replaced span maps to
    the replacement (and back to the replaced span's start); a character an edit wrote
    where nothing was (an insertion) maps back to nothing.
    """

    def __init__(self, original: str, edits: list[Edit]) -> None:
        ordered = sorted(enumerate(edits), key=lambda p: (p[1].start, p[1].end > p[1].start, p[0]))
        self.edits = [edit for _, edit in ordered]
        pieces, position, self._new_starts = [], 0, []
        for edit in self.edits:
            if edit.start < position:
                raise ValueError(f"overlapping edits at {edit.start}: {self.edits}")
            pieces.append(original[position : edit.start])
            self._new_starts.append(sum(map(len, pieces)))
            pieces.append(edit.text)
            position = edit.end
        pieces.append(original[position:])
        #: (original start, length, new start) of each moved piece of code.
        self._copies = [
            (edit.copy[1], edit.copy[2], new + edit.copy[0])
            for edit, new in zip(self.edits, self._new_starts, strict=True)
            if edit.copy
        ]
        self.original = original
        self.source = "".join(pieces)
        self._old_starts = _line_starts(original)
        self._starts = _line_starts(self.source)

    def forward(self, offset: int, *, moved: bool = True) -> int:
        """The new offset of the original's character at ``offset`` (where it was
        copied to, unless ``moved`` is false: then where it was, in what replaced it)."""
        for start, length, new in self._copies if moved else ():
            if start <= offset < start + length:
                return new + offset - start
        index = bisect.bisect_right([e.start for e in self.edits], offset) - 1
        if index < 0:  # before every edit
            return offset
        edit, new = self.edits[index], self._new_starts[index]
        if offset < edit.end:  # inside a replaced span
            return new + min(offset - edit.start, max(len(edit.text) - 1, 0))
        return new + len(edit.text) + offset - edit.end

    def backward(self, offset: int) -> int | None:
        """The original offset of the new text's character at ``offset`` (``None`` for a
        character an insertion wrote)."""
        for start, length, new in self._copies:
            if new <= offset < new + length:
                return start + offset - new
        index = bisect.bisect_right(self._new_starts, offset) - 1
        if index < 0:
            return offset
        edit, new = self.edits[index], self._new_starts[index]
        if offset < new + len(edit.text):
            if edit.start == edit.end:
                return None
            return edit.start + min(offset - new, edit.end - edit.start - 1)
        return edit.end + offset - new - len(edit.text)

    def new_line(self, line: int, column: int) -> int:
        """The new line of the original's (line, 1-based character column)."""
        new = self.forward(self._old_starts[line - 1] + column - 1)
        return bisect.bisect_right(self._starts, new)

    def new_lines(self, line: int, column: int) -> set[int]:
        """``new_line``, and for code moved to a line written before its statement, the
        line of what replaced it where it was read (``f(value)`` after ``value = x``): a
        finding reported at an argument's position may be at either."""
        offset = self._old_starts[line - 1] + column - 1
        return {
            bisect.bisect_right(self._starts, self.forward(offset, moved=moved))
            for moved in (True, False)
        }

    def old_line(self, line: int, column: int) -> int | None:
        """The original line of the new text's (line, 1-based column); ``None`` for text
        the transformation wrote."""
        old = self.backward(self._starts[line - 1] + column - 1)
        return None if old is None else bisect.bisect_right(self._old_starts, old)


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


Transformation = Callable[[Source], "list[Edit] | None"]


class Skip(Exception):
    """The file has a form the transformation does not handle: it is not applied."""


def guarded(transformation: Transformation) -> Transformation:
    def run(source: Source) -> list[Edit] | None:
        try:
            return transformation(source)
        except Skip:
            return None

    run.__name__ = transformation.__name__
    run.__doc__ = transformation.__doc__
    return run


def replace_name(source: Source, node: ast.AST, old: str, new: str) -> Edit:
    start = source.start(node)
    if source.text[start : start + len(old)] != old:
        raise Skip(f"{old} is not at {node.lineno}:{node.col_offset}")  # type: ignore[attr-defined]
    return Edit(start, start + len(old), new)


@dataclasses.dataclass(frozen=True)
class Seed:
    """A labelled file."""

    folder: Path
    name: str

    @property
    def id(self) -> str:
        return f"{self.folder.name}/{self.name}"

    @cached_property
    def source(self) -> str:
        return (self.folder / f"{self.name}.py").read_text()

    @cached_property
    def labels(self) -> dict[int, set[str]]:
        return truth(self.folder, self.name)


def seeds() -> list[Seed]:
    """Every labelled file of ``SEED_SETS``, in a fixed order."""
    return [
        Seed(FIXTURES / folder, path.stem)
        for folder in SEED_SETS
        for path in sorted((FIXTURES / folder).glob("*.py"))
        if path.with_suffix(".truth").exists()
    ]


@dataclasses.dataclass
class Verdict:
    """What one transformation of one file did to ``scan``.

    Attributes:
        kept: Labelled findings of the original (line, rule) found again where they moved.
        lost: (original line, new line, rule) of those not found there.
        false: (new line, rule, code) of findings on lines the original neither labelled
            nor found.
        diff: Why ``--diff`` of the new file failed (``""`` when it compiled and reached
            its fixed point).
    """

    kept: int = 0
    lost: list[tuple[int, int, str]] = dataclasses.field(default_factory=list)
    false: list[tuple[int, str, str]] = dataclasses.field(default_factory=list)
    diff: str = ""


_ORIGINALS: dict[str, list[scanner.Finding]] = {}


def original_findings(seed: Seed) -> list[scanner.Finding]:
    if seed.id not in _ORIGINALS:
        _ORIGINALS[seed.id] = scanner.scan_source(seed.source, f"{seed.name}.py")
    return _ORIGINALS[seed.id]


def transform(
    seed: Seed, transformation: Transformation, source: str | None = None
) -> Transformed | None:
    """``seed`` (or ``source``, unlabelled) transformed, or ``None`` where the
    transformation has nothing to change."""
    text = seed.source if source is None else source
    edits = transformation(Source(text, seed.labels if source is None else {}))
    if not edits:
        return None
    done = Transformed(text, edits)
    compile(done.source, f"{seed.name}.py", "exec")  # a transformation's own bug shows here
    return done


def compare(seed: Seed, done: Transformed, *, diff: bool = True) -> Verdict:
    """The metamorphic relation between ``seed`` and its transformation ``done``."""
    before = original_findings(seed)
    after = scanner.scan_source(done.source, f"{seed.name}.py")
    verdict = Verdict()
    found_after = {(f.line, f.rule) for f in after}
    judged = set(seed.labels) | {f.line for f in before}
    for f in before:
        if f.rule in seed.labels.get(f.line, ()):
            moved = done.new_lines(f.line, f.column)
            if any((line, f.rule) in found_after for line in moved):
                verdict.kept += 1
            else:
                verdict.lost.append((f.line, done.new_line(f.line, f.column), f.rule))
    lines = done.source.splitlines()
    for f in after:
        text = lines[f.line - 1]
        written = done.old_line(f.line, len(text) - len(text.lstrip()) + 1) is None
        old = done.old_line(f.line, f.column)
        if not written and old is not None and old not in judged:
            verdict.false.append((f.line, f.rule, f.original.splitlines()[0][:80]))
    if diff:
        verdict.diff = _diff_problem(done.source, f"{seed.name}.py", after)
    return verdict


def _diff_problem(source: str, name: str, found: list[scanner.Finding]) -> str:
    from tests.support.scan_diff import brought

    ported = scanner.apply_edits(source, found)
    try:
        compile(ported, name, "exec")
    except SyntaxError as error:
        return f"--diff wrote code that does not compile: {error}"
    again = scanner.scan_source(ported, name)
    left = [(f.line, f.rule) for f in again if f.fixable]
    if left:
        return f"a second --diff still rewrites {left}"
    aliases = _torch_aliases(source)
    known = {(f.rule, f.original) for f in found}
    new = [
        (f.line, f.rule, f.original)
        for f in brought(source, ported, found, again)
        if not any((f.rule, f.original.replace("tj.", f"{a}.")) in known for a in aliases)
    ]  # brought() reads torch as "torch."; a file that imports it as th is read so too
    return f"--diff brought findings {new}" if new else ""


def _torch_aliases(source: str) -> set[str]:
    return {
        alias.asname or alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name == "torch"
    }


def cases(transformations: dict[str, Transformation], every: int = 1) -> Iterator[tuple[str, Seed]]:
    """(transformation, seed) pairs: all of them, or each ``every``-th of each
    transformation's seeds (a fixed sample, different seeds for each transformation)."""
    files = seeds()
    for index, name in enumerate(transformations):
        for position, seed in enumerate(files):
            if (position + index) % every == 0:
                yield name, seed
