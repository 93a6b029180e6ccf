"""Reading a Python file as the scanner does: parsed once, with its names and positions.

``read_python`` reads a file as Python would run it, and safely whatever the path
holds: only regular files (a FIFO or ``/dev/zero`` named ``*.py`` is refused without
being opened for reading), at most ``max_bytes``, decoded as Python decodes source
(a UTF-8 BOM, a ``coding:`` cookie) with its line ends kept as they are.

``SourceFile`` parses the text (``ast``), refuses a tree nested deeper than
``MAX_DEPTH``, resolves its names (``_names``), knows what its values are
(``_values``) and where they go (``_flow``), and maps the parser's (line, column)
positions to byte offsets of the text, which is what rewrites edit.
"""

from __future__ import annotations

import ast
import bisect
import contextlib
import dataclasses
import errno
import hashlib
import io
import os
import stat
import sys
import tokenize
from collections.abc import Iterator
from typing import Protocol

from .._src.errors import UnscannableFileError
from .._src.truth import truth
from . import _arguments
from ._flow import Flow
from ._names import Names, reexported
from ._values import TJ, Values


class ProjectFacts(Protocol):
    """What a file asks of the project it was scanned with (``_project.Project``): named
    here, so that the project module imports this one and not the reverse."""

    def kinds(self, file: SourceFile, node: ast.expr, how: str) -> set[str] | None: ...

    def holds_value(self, file: SourceFile, node: ast.AST) -> bool: ...

    def is_imported(self, file: SourceFile) -> bool: ...

    def functions(
        self, file: SourceFile, call: ast.Call, methods: bool = False
    ) -> Iterator[tuple[SourceFile, ast.FunctionDef | ast.AsyncFunctionDef]]: ...


__all__ = ["MAX_BYTES", "MAX_DEPTH", "PythonFile", "SourceFile", "deep_recursion", "read_python"]

#: The largest file ``read_python`` reads by default (``scan --max-bytes``).
MAX_BYTES = 2 * 1024 * 1024
#: The deepest syntax tree the scanner follows (Python itself compiles about 2,000).
MAX_DEPTH = 1000
# Python frames the scanner's walks take per level of a tree, at most.
_FRAMES_PER_LEVEL = 6

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


@dataclasses.dataclass(frozen=True)
class PythonFile:
    """A file's bytes and its text as Python reads it.

    Attributes:
        path: The path it was read from.
        data: Its bytes, exactly.
        text: Its text, decoded as Python decodes source (no BOM, line ends kept).
        encoding: The codec that turns ``text`` back into ``data`` (``utf-8-sig``
            when the file starts with a BOM).
        stamp: Size, modification time and SHA-256 of ``data``: what
            ``changed_since`` compares.
        follow_links: Whether a symbolic link at ``path`` was (and is) followed.
    """

    path: str
    data: bytes
    text: str
    encoding: str
    stamp: tuple[int, int, str]
    follow_links: bool = True

    def encode(self, text: str) -> bytes:
        """``text`` in the file's own encoding (its BOM included)."""
        return text.encode(self.encoding)

    def changed_since(self, max_bytes: int = MAX_BYTES) -> bool:
        """The file on disk is no longer what was read (a torn or stale read)."""
        try:
            again = read_python(
                self.path, max(max_bytes, len(self.data)), follow_links=self.follow_links
            )
        except (OSError, UnscannableFileError):
            return True
        return again.stamp != self.stamp


def read_python(path: str, max_bytes: int = MAX_BYTES, *, follow_links: bool = True) -> PythonFile:
    """Read a Python source file safely, as Python would decode it.

    ``follow_links=False`` refuses a symbolic link at ``path`` (in the one call that
    opens it, so it cannot be swapped in after a check): a file met while walking a
    folder is read only if it is in that folder.

    Raises:
        OSError: the file cannot be opened or read.
        UnscannableFileError: it is not a regular file, is larger than ``max_bytes``,
            cannot be decoded (an unknown ``coding:`` cookie, bytes its encoding
            refuses), or is a symbolic link not to be followed.

    Examples:
        >>> import pathlib, tempfile
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> source = b"# -*- coding: latin-1 -*-\\r\\nname = '\\xe9'\\r\\n"
        >>> _ = (folder / "a.py").write_bytes(source)
        >>> read = read_python(str(folder / "a.py"))
        >>> read.encoding, read.text.splitlines(keepends=True)[1]
        ('iso-8859-1', "name = 'é'\\r\\n")
    """
    path = _arguments.path("read_python()", "path", path)  # type: ignore[assignment]
    max_bytes = _arguments.size("read_python()", "max_bytes", max_bytes)
    follow_links = truth("read_python()", "follow_links", follow_links)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        descriptor = os.open(path, flags)  # non-blocking: opening a FIFO does not wait
    except OSError as error:
        if not follow_links and error.errno in (errno.ELOOP, errno.EMLINK):
            raise UnscannableFileError(
                f"{path}: a symbolic link to {os.readlink(path)!r}; scan does not leave the folder "
                "it was given through a link (name the link or its target to scan it)"
            ) from None
        raise
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode):  # checked before open() makes a file of it
        os.close(descriptor)
        kind = next((name for test, name in _KINDS if test(status.st_mode)), "no file")
        raise UnscannableFileError(
            f"{path}: not a regular file ({kind}); only files are scanned. Fix: name the "
            "Python files (or the folder holding them) to scan"
        )
    with open(descriptor, "rb", closefd=True) as file:
        if status.st_size > max_bytes:
            raise UnscannableFileError(
                f"{path}: {status.st_size} bytes, larger than the {max_bytes}-byte limit "
                "(Fix: raise it, max_bytes= or --max-bytes)"
            )
        data = _read_at_most(file, max_bytes + 1)
    if len(data) > max_bytes:  # it grew while it was read
        raise UnscannableFileError(
            f"{path}: larger than the {max_bytes}-byte limit (Fix: raise it, max_bytes= "
            "or --max-bytes)"
        )
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as error:
        raise UnscannableFileError(
            f"{path}: cannot be decoded as Python source: {error}. Fix: scan Python source files "
            "(UTF-8, or the encoding a coding: line names)"
        ) from None
    if text.encode(encoding) != data:  # e.g. a lone BOM it would not write back
        raise UnscannableFileError(
            f"{path}: its {encoding} text does not encode back to the same bytes, so no diff "
            "could be made against it"
        )
    stamp = (len(data), status.st_mtime_ns, hashlib.sha256(data).hexdigest())
    return PythonFile(path, data, text, encoding, stamp, follow_links)


def _read_at_most(file: io.BufferedReader, limit: int) -> bytes:
    """Up to ``limit`` bytes of ``file``, a mebibyte at a time: a read of ``limit`` at
    once would allocate all of it first, however small the file."""
    chunks, total = [], 0
    while total < limit and (chunk := file.read(min(1 << 20, limit - total))):
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


@contextlib.contextmanager
def deep_recursion() -> Iterator[None]:
    """Room on Python's stack for trees ``MAX_DEPTH`` deep (the walks recurse)."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, _FRAMES_PER_LEVEL * MAX_DEPTH + 1000))
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


def _depth(tree: ast.AST) -> int:
    """How deeply ``tree`` nests (without recursing; contexts such as ``Load`` not counted)."""
    deepest = 0
    stack: list[tuple[ast.AST, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                stack.extend((item, depth + 1) for item in value if isinstance(item, ast.AST))
            elif isinstance(value, ast.AST) and not isinstance(value, ast.expr_context):
                stack.append((value, depth + 1))
    return deepest


class SourceFile:
    """A parsed file: its text as bytes, tree, names, values, and byte positions.

    Raises:
        SyntaxError: ``source`` is not valid Python.
        UnscannableFileError: it nests deeper than ``MAX_DEPTH``.

    Examples:
        >>> from torch2jax_device.porting._source import SourceFile
        >>> file = SourceFile("x.py", "import torch as T\\nT.cuda.is_available()\\n")
        >>> file.qualname(file.tree.body[1].value.func)
        'torch.cuda.is_available'
    """

    def __init__(self, path: str, source: str) -> None:
        self.path = _arguments.text("SourceFile()", "path", path)
        self.data = _arguments.text("SourceFile()", "source", source).encode()
        with deep_recursion():
            try:
                self.tree = ast.parse(source, filename=path)
            except (RecursionError, MemoryError):
                raise UnscannableFileError(
                    f"{path}: nested deeper than Python's parser follows; the scanner follows "
                    f"{MAX_DEPTH} levels"
                ) from None
            depth = _depth(self.tree)
            if depth > MAX_DEPTH:
                raise UnscannableFileError(
                    f"{path}: nested {depth} levels deep; the scanner follows {MAX_DEPTH}"
                )
            self.names = Names(self.tree)
        self.values = Values(self.names, self.qualname)
        self.flow = Flow(self.values)
        #: A Jupyter notebook's code cells (``_notebooks``): run for their effects, and
        #: imported by no module.
        self.notebook = path.endswith(".ipynb")
        if self.notebook:
            self.flow.imported_by_none()
        starts = [0]
        for line in self.data.splitlines(keepends=True):
            starts.append(starts[-1] + len(line))
        self.line_starts = starts
        self._line_continuations: dict[int, list[int]] = {}
        #: The project it was scanned with (``_project.Project.attach``), if any.
        self.project: ProjectFacts | None = None
        taken = [b for s in self.names.scopes for b in s.bindings.get("tj", ())]
        #: Why ``tj`` cannot be imported here (``""`` when it can).
        self.tj_taken = next(
            (
                f"the name tj is already used at line {getattr(b.node, 'lineno', 0)}"
                for b in taken
                if not (b.kind == "import" and b.origin == TJ)
            ),
            "",
        )

    # -- positions ------------------------------------------------------------------
    def offset(self, line: int, column: int) -> int:
        return self.line_starts[line - 1] + column

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def text(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.data[start:end].decode()

    def position(self, offset: int) -> tuple[int, int]:
        """(line, 1-based column in characters) of a byte offset.

        The column is the bytes before it on its line less the UTF-8 continuation bytes
        among them, found by bisection in ``_continuations``: one call costs the log of
        the line's length, so 90,000 idioms on one 2 MB line cost no more than on
        90,000 lines (decoding the line's prefix at each call made it quadratic).
        """
        line = min(bisect.bisect_right(self.line_starts, offset), len(self.line_starts) - 1) or 1
        start = self.line_starts[line - 1]
        continuations = self._continuations(line)
        return line, offset - start - bisect.bisect_left(continuations, offset) + 1

    def _continuations(self, line: int) -> list[int]:
        """The offsets of the UTF-8 continuation bytes of ``line`` (none on an ASCII
        line), worked out once per line."""
        found = self._line_continuations.get(line)
        if found is None:
            start, end = self.line_starts[line - 1], self.line_starts[line]
            text = self.data[start:end]
            found = (
                []
                if text.isascii()
                else [start + i for i, byte in enumerate(text) if 0x80 <= byte < 0xC0]
            )
            self._line_continuations[line] = found
        return found

    def receiver_span(self, method: ast.Attribute) -> tuple[int, int]:
        """Bytes of ``x`` in ``x.attr``, with the parentheses around it but no comment."""
        start, _ = self.span(method)
        end = position = self.span(method.value)[1]
        while position < len(self.data) and self.data[position : position + 1] != b".":
            character = self.data[position : position + 1]
            if character == b"#":
                position = self.data.index(b"\n", position)
                continue
            position += 1
            if character == b")":
                end = position
        return start, end

    def method_position(self, method: ast.Attribute) -> tuple[int, int]:
        """(line, column) of the method name in ``x.method``."""
        _, end = self.span(method)
        return self.position(end - len(method.attr.encode()))

    # -- names ------------------------------------------------------------------------
    def qualname(self, node: ast.AST) -> str | None:
        """``torch.cuda.is_available`` for ``T.cuda.is_available`` after ``import torch as T``;
        ``None`` for what is no imported name (a value of another module of the project
        included: ``net.to`` after ``from model import net``)."""
        whole = node
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        if self.names.is_builtin(node) and node.id == "open":
            return None
        origin = self.names.origin(node)
        if origin is None:
            return None
        if self.project is not None and self.project.holds_value(self, whole):
            return None  # a value of another module of the project, as a variable's
        name = ".".join([origin, *reversed(parts)])
        return reexported(name) if parts else name
