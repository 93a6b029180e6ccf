"""The migration guide's idiom tables, rendered from the catalog (documentation tooling)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

from .catalog import CATALOG, SECTIONS

__all__ = ["to_markdown"]


def _code_cell(code: str) -> str:
    lines = [html.escape(line).replace("|", "&#124;") for line in code.splitlines()]
    return "<code>" + "<br>".join(line.replace("    ", "&nbsp;" * 4) for line in lines) + "</code>"


def to_markdown(proofs: Mapping[str, Sequence[str]] | None = None) -> str:
    """The migration guide's idiom tables, one per section, as Markdown.

    Args:
        proofs: For each idiom id, the test files (paths from the repository root) that
            prove it side by side; they are linked from the guide's last column.

    Examples:
        >>> from torch2jax_device.porting.guide import to_markdown
        >>> to_markdown().splitlines()[0]
        '### Devices'
    """
    parts = []
    header = "| Idiom | PyTorch | plain JAX | torch2jax_device | Notes |"
    if proofs is not None:
        header += " Proven by |"
    for section in SECTIONS:
        parts.append(f"### {section}\n")
        parts.append(header)
        parts.append("|---" * header.count(" |") + "|")
        for idiom in CATALOG:
            if idiom.section != section:
                continue
            notes = idiom.notes.replace("|", "&#124;")
            row = (
                f'| <a id="{idiom.id}"></a>{idiom.title} | {_code_cell(idiom.torch)} | '
                f"{_code_cell(idiom.jax)} | {_code_cell(idiom.tj)} | {notes} |"
            )
            if proofs is not None:
                links = ", ".join(
                    f"[{path.rsplit('/', 1)[-1]}](../{path})" for path in proofs.get(idiom.id, ())
                )
                row += f" {links} |"
            parts.append(row)
        parts.append("")
    return "\n".join(parts)
