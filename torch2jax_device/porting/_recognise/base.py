"""What every recogniser shares: the file, the candidates found, and how to add one."""

from __future__ import annotations

import ast

from .. import catalog
from .._candidate import Candidate
from .._rewrites import Rewrite
from .._source import SourceFile

__all__ = ["Recogniser"]


class Recogniser(ast.NodeVisitor):
    """A walk over one file that proposes a candidate per idiom.

    The section modules (``devices``, ``placement``...) are functions over it; the
    walk itself, which decides which of them a node goes to, is ``visitor.Detector``.
    """

    def __init__(self, file: SourceFile) -> None:
        self.file = file
        self.found: list[Candidate] = []
        self.reported: set[int] = set()  # nodes already reported (no second finding)
        self.string_tests: list[tuple[int, str]] = []  # (line, code) tested as a device name
        self.device_names: list[Candidate] = []  # devices kept as names (device-string)
        self.device_literals: list[ast.Constant] = []  # strings the walk met (device_literals)

    def add(
        self,
        node: ast.AST,
        rule: str,
        replacement: str | None = None,
        *,
        position: tuple[int, int] | None = None,
        **fields: object,
    ) -> Candidate:
        """Propose a finding of ``rule`` for ``node`` (the row's advice if no replacement)."""
        if position is None:
            position = (node.lineno, self.file.position(self.file.span(node)[0])[1])  # type: ignore[attr-defined]
        candidate = Candidate(
            self.file,
            node,
            rule,
            catalog.get(rule).tj if replacement is None else replacement,
            position,
            **fields,  # type: ignore[arg-type]
        )
        self.found.append(candidate)
        self.reported.add(id(node))
        return candidate

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.file.names.parents.get(node)

    def text(self, node: ast.AST) -> str:
        return self.file.text(node)

    def qualname(self, node: ast.AST) -> str | None:
        return self.file.qualname(node)

    def rename(self, func: ast.AST, new_name: str) -> Rewrite:
        """The rewrite that replaces the called name ``func`` with ``new_name``."""
        start, end = self.file.span(func)
        return Rewrite(start, end, (new_name,))

    def loaded_into(
        self, receiver: ast.expr, value: str, otherwise: str = "updates a Flax NNX module in place"
    ) -> str:
        """``receiver = value`` when ``receiver`` can be assigned to (a name, an attribute,
        a subscript); ``value  # otherwise`` when it cannot (``super()``, a call): advice
        never assigns to a call."""
        if isinstance(receiver, (ast.Name, ast.Attribute, ast.Subscript)):
            return f"{self.text(receiver)} = {value}"
        return f"{value}  # {otherwise}"

    def arguments(self, call: ast.Call) -> str:
        return ", ".join(self.text(a) for a in [*call.args, *call.keywords])

    def arguments_span(self, call: ast.Call) -> tuple[int, int]:
        """From the first argument to the end of the call, closing parenthesis included."""
        first = min(self.file.span(a)[0] for a in [*call.args, *call.keywords])
        return first, self.file.span(call)[1]
