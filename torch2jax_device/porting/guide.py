"""The migration guide's idioms, rendered from the catalog (documentation tooling).

One block per idiom: a heading, then the PyTorch, plain-JAX and torch2jax_device code as
titled code blocks (they scroll instead of wrapping mid-token on a narrow screen), the
notes, and the tests that prove it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .catalog import CATALOG, SECTIONS, Idiom

__all__ = ["to_markdown"]

# The code columns of a row, in the order the guide shows them: attribute, title.
_COLUMNS: tuple[tuple[str, str], ...] = (
    ("torch", "PyTorch"),
    ("jax", "plain JAX"),
    ("tj", "torch2jax_device"),
)


def _code_block(code: str, title: str) -> str:
    fence = "```"
    while fence in code:
        fence += "`"
    return f'{fence}python title="{title}"\n{code.rstrip()}\n{fence}'


def _proof_links(idiom: Idiom, files: Sequence[str]) -> str:
    links = ", ".join(
        f"[{path.removeprefix('tests/')}](../{path}#{idiom.id})" for path in sorted(files)
    )
    return f"Proven by {links}."


def _idiom_block(idiom: Idiom, proofs: Mapping[str, Sequence[str]] | None) -> list[str]:
    parts = [f'<a id="{idiom.id}"></a>\n#### {idiom.title}\n']
    parts += [_code_block(getattr(idiom, column), title) + "\n" for column, title in _COLUMNS]
    if idiom.notes:
        parts.append(idiom.notes + "\n")
    if proofs is not None and proofs.get(idiom.id):
        parts.append(_proof_links(idiom, proofs[idiom.id]) + "\n")
    return parts


def to_markdown(proofs: Mapping[str, Sequence[str]] | None = None) -> str:
    """The migration guide's idioms, section by section, as Markdown.

    Each idiom is one block under a heading anchored by its id (``#cuda-is-available``):
    its code in PyTorch, plain JAX and torch2jax_device, its notes and, with ``proofs``,
    links to the tests that prove it. Sections come from the catalog, in its order.

    Args:
        proofs: For each idiom id, the test files (paths from the repository root) that
            prove it side by side; each is linked as ``../<path>#<idiom id>``, which the
            documentation site serves as a page of that file's source.

    Examples:
        >>> from torch2jax_device.porting.guide import to_markdown
        >>> lines = to_markdown().splitlines()
        >>> lines[0], lines[2], lines[5]
        ('### Devices', '<a id="device-select"></a>', '```python title="PyTorch"')
    """
    parts = []
    for section in SECTIONS:
        parts.append(f"### {section}\n")
        for idiom in CATALOG:
            if idiom.section == section:
                parts += _idiom_block(idiom, proofs)
    return "\n".join(parts)
