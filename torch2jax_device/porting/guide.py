"""The migration guide's idiom pages, rendered from the catalog (documentation tooling).

Each catalog section is one page of the reference, ``docs/reference/<slug>.md``; the
guide's first page (``docs/migration-guide.md``) lists the sections and their idioms.
One block per idiom: a heading, then the PyTorch, plain-JAX and torch2jax_device code as
titled code blocks (they scroll instead of wrapping mid-token on a narrow screen), the
notes, and the tests that prove it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from .._src.errors import ArgumentTypeError, MissingKeyError
from .catalog import CATALOG, SECTIONS, Idiom

__all__ = ["GUIDE_PAGE", "REFERENCE_DIR", "section_index", "section_page", "to_markdown"]

#: The guide's first page and the folder of its section pages, under ``docs/``.
GUIDE_PAGE = "migration-guide.md"
REFERENCE_DIR = "reference"

# The code columns of a row, in the order the guide shows them: attribute, title.
_COLUMNS: tuple[tuple[str, str], ...] = (
    ("torch", "PyTorch"),
    ("jax", "plain JAX"),
    ("tj", "torch2jax_device"),
)


def section_page(section: str) -> str:
    """The page of ``section``, relative to ``docs/``.

    Examples:
        >>> from torch2jax_device.porting.guide import section_page
        >>> section_page("Feeding the device")
        'reference/feeding-the-device.md'
    """
    if not isinstance(section, str) or section not in SECTIONS:
        raise MissingKeyError(
            f"no section {section!r} in the catalog. Fix: pass one of its sections, "
            f"{', '.join(SECTIONS)}"
        )
    slug = re.sub(r"[^a-z0-9]+", "-", section.lower()).strip("-")
    return f"{REFERENCE_DIR}/{slug}.md"


def _code_block(code: str, title: str) -> str:
    fence = "```"
    while fence in code:
        fence += "`"
    return f'{fence}python title="{title}"\n{code.rstrip()}\n{fence}'


def _proof_links(idiom: Idiom, files: Sequence[str]) -> str:
    # A section page is docs/reference/<slug>.md: the repository root is two levels up.
    links = ", ".join(
        f"[{path.removeprefix('tests/')}](../../{path}#{idiom.id})" for path in sorted(files)
    )
    return f"Proven by {links}."


# A link from an idiom's notes to another idiom: [text](#idiom-id).
_IDIOM_LINK = re.compile(r"\]\(#([a-z0-9-]+)\)")


def _link_idioms(notes: str, section: str) -> str:
    """``notes`` with each link to an idiom of another section pointed at that page."""

    def relink(match: re.Match[str]) -> str:
        target = next((i for i in CATALOG if i.id == match.group(1)), None)
        if target is None or target.section == section:
            return match.group(0)
        return f"]({section_page(target.section).removeprefix(REFERENCE_DIR + '/')}#{target.id})"

    return _IDIOM_LINK.sub(relink, notes)


def _idiom_block(idiom: Idiom, proofs: Mapping[str, Sequence[str]] | None) -> list[str]:
    parts = [f'<a id="{idiom.id}"></a>\n## {idiom.title}\n']
    parts += [_code_block(getattr(idiom, column), title) + "\n" for column, title in _COLUMNS]
    if idiom.notes:
        parts.append(_link_idioms(idiom.notes, idiom.section) + "\n")
    if proofs is not None and proofs.get(idiom.id):
        parts.append(_proof_links(idiom, proofs[idiom.id]) + "\n")
    return parts


def to_markdown(section: str, proofs: Mapping[str, Sequence[str]] | None = None) -> str:
    """The idioms of one catalog section, as the Markdown of its reference page.

    Each idiom is one block under a heading anchored by its id (``#cuda-is-available``):
    its code in PyTorch, plain JAX and torch2jax_device, its notes and, with ``proofs``,
    links to the tests that prove it, in the catalog's order.

    Args:
        section: A catalog section (``catalog.SECTIONS``).
        proofs: For each idiom id, the test files (paths from the repository root) that
            prove it side by side; each is linked as ``../../<path>#<idiom id>``, which
            the documentation site serves as a page of that file's source.

    Examples:
        >>> from torch2jax_device.porting.guide import to_markdown
        >>> lines = to_markdown("Devices").splitlines()
        >>> lines[0], lines[1].startswith("## "), lines[3]
        ('<a id="device-select"></a>', True, '```python title="PyTorch"')
    """
    section_page(section)  # refuses an unknown section
    if proofs is not None and not isinstance(proofs, Mapping):
        raise ArgumentTypeError(
            f"to_markdown(proofs={proofs!r:.60}): not a mapping. Fix: pass a dict of each "
            "idiom id to the test files that prove it, or None"
        )
    parts = []
    for idiom in CATALOG:
        if idiom.section == section:
            parts += _idiom_block(idiom, proofs)
    return "\n".join(parts)


#: Idioms linked in each row of the guide's table of pages; each page lists the rest.
SHOWN = 3


def _cell(text: str) -> str:
    """``text`` safe in a Markdown table cell."""
    return text.replace("|", "\\|")


def section_index() -> str:
    """The guide's table of pages: each page, its idiom count and its first idioms linked.

    Examples:
        >>> from torch2jax_device.porting.guide import section_index
        >>> section_index().splitlines()[2].startswith("| [Devices](reference/devices.md) | ")
        True
    """
    rows = ["| Page | Idioms | Among them |", "|---|---|---|"]
    for section in SECTIONS:
        page = section_page(section)
        idioms = [i for i in CATALOG if i.section == section]
        shown = ", ".join(f"[{_cell(i.title)}]({page}#{i.id})" for i in idioms[:SHOWN])
        more = f", and {len(idioms) - SHOWN} more" if len(idioms) > SHOWN else ""
        rows.append(f"| [{section}]({page}) | {len(idioms)} | {shown}{more} |")
    return "\n".join(rows)
