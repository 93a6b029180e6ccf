"""One Python file as the scanner reads it: parsed once, with its names and positions.

``SourceFile`` parses the text (``ast``), resolves its names (``_names``), knows what
its values are (``_values``) and where they go (``_flow``), and maps the parser's
(line, column) positions to byte offsets of the file, which is what rewrites edit.
"""

from __future__ import annotations

import ast
import bisect

from ._flow import Flow
from ._names import Names
from ._values import TJ, Values

__all__ = ["SourceFile"]


class SourceFile:
    """A parsed file: its text as bytes, tree, names, values, and byte positions.

    Raises:
        SyntaxError: ``source`` is not valid Python.

    Examples:
        >>> from torch2jax_device.porting._source import SourceFile
        >>> file = SourceFile("x.py", "import torch as T\\nT.cuda.is_available()\\n")
        >>> file.qualname(file.tree.body[1].value.func)
        'torch.cuda.is_available'
    """

    def __init__(self, path: str, source: str) -> None:
        self.path = path
        self.data = source.encode()
        self.tree = ast.parse(source, filename=path)
        self.names = Names(self.tree)
        self.values = Values(self.names, self.qualname)
        self.flow = Flow(self.values)
        starts = [0]
        for line in self.data.splitlines(keepends=True):
            starts.append(starts[-1] + len(line))
        self.line_starts = starts
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
        """(line, 1-based column in characters) of a byte offset."""
        line = min(bisect.bisect_right(self.line_starts, offset), len(self.line_starts) - 1) or 1
        prefix = self.data[self.line_starts[line - 1] : offset].decode(errors="replace")
        return line, len(prefix) + 1

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
        """``torch.cuda.is_available`` for ``T.cuda.is_available`` after ``import torch as T``."""
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
        return ".".join([origin, *reversed(parts)])
