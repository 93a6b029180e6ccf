"""A finding being planned: what recognition proposes and planning may disable."""

from __future__ import annotations

import ast
import dataclasses

from ._rewrites import Rewrite
from ._source import SourceFile

__all__ = ["Candidate"]


@dataclasses.dataclass(eq=False)
class Candidate:
    """A finding being planned: its rewrite, and what the rewrite's safety depends on.

    Attributes:
        file: The file it is in.
        node: The code it covers.
        rule: The catalog row's id.
        replacement: What it becomes with torch2jax_device (or the row's advice).
        jax: The same with JAX alone, when built from the line (the script's own
            optimizer as an optax rule); ``""``: the row's ``jax`` column.
        position: (line, column) of the idiom's own token.
        rewrite: The rewrite proposed, ``None`` for advice.
        reason: Why the rewrite is not made (``""`` while it still may be).
        effect: What the rewrite changes: ``none``, ``value`` (what ``subject`` holds),
            ``runtime`` (torch's runtime state), ``default`` (the default device),
            ``dist`` (the process group) or ``module`` (an NNX module moved in place).
        subject: The expression whose value changes.
        policy: What it becomes: ``"array"`` or ``"device"``.
        call: The call that becomes a torch2jax_device call.
        tj_name: The torch2jax_device name it becomes.
        block: For ``with torch.device(...)``: the block.
    """

    file: SourceFile
    node: ast.AST
    rule: str
    replacement: str
    position: tuple[int, int]
    rewrite: Rewrite | None = None
    reason: str = ""
    effect: str = "none"
    subject: ast.AST | None = None
    policy: str = "array"
    call: ast.AST | None = None
    tj_name: str | None = None
    block: list[ast.stmt] | None = None
    jax: str = ""

    @property
    def enabled(self) -> bool:
        return self.rewrite is not None and not self.reason

    def disable(self, reason: str) -> None:
        """Keep the first reason given: it is the one the finding reports."""
        if not self.reason:
            self.reason = reason
