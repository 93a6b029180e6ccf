"""Rewrites as templates over the original text, composed inside out.

A rewrite replaces one node's bytes with a template: literal text and *holes*, spans of
the original that keep their own (nested) rewrites. ``x.pin_memory().to(d)`` is the
``.to`` rewrite ``tj.to_device(<x.pin_memory()>, <d)>`` whose first hole holds the
``pin_memory`` rewrite, so the result is ``tj.to_device(tj.pin_memory(x), d)`` whatever
order the rewrites were found in. A rewrite that overlaps another other than by sitting
in one of its holes cannot be composed: ``compose`` returns it instead of guessing.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence

__all__ = ["Rewrite", "compose", "with_tj_import"]

Piece = str | tuple[int, int]


@dataclasses.dataclass(frozen=True)
class Rewrite:
    """Replace bytes ``[start, end)`` of a file with ``pieces``.

    Attributes:
        start: First byte replaced.
        end: One past the last byte replaced.
        pieces: Literal text, or ``(start, end)`` byte spans of the original inside
            ``[start, end)``, copied with the rewrites nested in them applied.
    """

    start: int
    end: int
    pieces: tuple[Piece, ...]

    def holes(self) -> list[tuple[int, int]]:
        return [piece for piece in self.pieces if isinstance(piece, tuple)]


@dataclasses.dataclass
class _Node:
    rewrite: Rewrite
    children: list[_Node] = dataclasses.field(default_factory=list)


def compose(data: bytes, rewrites: Sequence[Rewrite]) -> tuple[bytes, list[Rewrite]]:
    """Apply every rewrite that composes; return the new bytes and those that did not.

    Rewrites are ordered by position (outer before inner at the same start), so the
    result never depends on the order they are given in.
    """
    ordered = sorted(set(rewrites), key=lambda r: (r.start, -r.end, repr(r.pieces)))
    roots: list[_Node] = []
    rejected: list[Rewrite] = []
    stack: list[_Node] = []
    for rewrite in ordered:
        while stack and rewrite.start >= stack[-1].rewrite.end:
            stack.pop()
        parent = stack[-1] if stack else None
        if parent is not None:
            outer = parent.rewrite
            inside_hole = any(
                start <= rewrite.start and rewrite.end <= end for start, end in outer.holes()
            )
            if not inside_hole or (rewrite.start, rewrite.end) == (outer.start, outer.end):
                rejected.append(rewrite)
                continue
        node = _Node(rewrite)
        (parent.children if parent is not None else roots).append(node)
        stack.append(node)
    return _render_span(data, 0, len(data), roots), rejected


def _render_span(data: bytes, start: int, end: int, nodes: list[_Node]) -> bytes:
    pieces: list[bytes] = []
    position = start
    for node in nodes:
        rewrite = node.rewrite
        if rewrite.start < start or rewrite.end > end:
            continue
        pieces += [data[position : rewrite.start], _render(data, node)]
        position = rewrite.end
    pieces.append(data[position:end])
    return b"".join(pieces)


def _render(data: bytes, node: _Node) -> bytes:
    out: list[bytes] = []
    for piece in node.rewrite.pieces:
        if isinstance(piece, str):
            out.append(piece.encode())
        else:
            inside = [c for c in node.children if piece[0] <= c.rewrite.start < piece[1]]
            out.append(_render_span(data, piece[0], piece[1], inside))
    return b"".join(out)


IMPORT = "import torch2jax_device as tj"


def with_tj_import(source: str) -> str:
    """``source`` with ``import torch2jax_device as tj`` among its leading imports.

    The import goes after the docstring, the ``__future__`` imports and the imports
    that open the file, before any other statement, so every later use of ``tj``
    sees it; a file whose opening imports already have it is returned as it is.
    """
    tree = ast.parse(source)
    body = list(tree.body)
    after = 0
    position = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        after = body[0].end_lineno or 0
        position = 1
    while position < len(body) and isinstance(body[position], (ast.Import, ast.ImportFrom)):
        statement = body[position]
        if isinstance(statement, ast.Import) and any(
            alias.name == "torch2jax_device" and alias.asname == "tj" for alias in statement.names
        ):
            return source
        after = statement.end_lineno or after
        position += 1
    lines = source.splitlines(keepends=True)
    if after == 0:  # keep a shebang, an encoding line and leading comments first
        while after < len(lines) and lines[after].lstrip().startswith("#"):
            after += 1
    first = lines[0] if lines else ""
    newline = "\r\n" if first.endswith("\r\n") else "\r" if first.endswith("\r") else "\n"
    if after and not lines[after - 1].endswith(("\n", "\r")):
        lines[after - 1] += newline
    return "".join(lines[:after]) + IMPORT + newline + "".join(lines[after:])
