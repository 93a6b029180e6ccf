"""Regenerate the migration guide's idiom pages from the catalog.

Each catalog section has a page, ``docs/reference/<slug>.md``; the block between its
``<!-- idioms:start -->`` and ``<!-- idioms:end -->`` markers comes from
``torch2jax_device.porting.guide.to_markdown(section)``, each idiom linked to the tests
that prove it (the documentation site serves those files as pages, see
``scripts/docs_hooks.py``). The text around the markers is written by hand; a section
without a page gets one with its title only. The table of pages in
``docs/migration-guide.md`` (between ``<!-- sections:start -->`` and
``<!-- sections:end -->``) comes from ``guide.section_index()``: one row per page,
with its first idioms linked. tests/unit/test_catalog.py
fails when any of them is stale. Run: ``.venv/bin/python scripts/update_guide.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.idiom_marks import proofs  # noqa: E402
from torch2jax_device.porting.catalog import SECTIONS  # noqa: E402
from torch2jax_device.porting.guide import (  # noqa: E402
    GUIDE_PAGE,
    section_index,
    section_page,
    to_markdown,
)

DOCS = ROOT / "docs"
IDIOMS = ("<!-- idioms:start -->", "<!-- idioms:end -->")
INDEX = ("<!-- sections:start -->", "<!-- sections:end -->")


def generated_pages() -> dict[Path, tuple[tuple[str, str], str]]:
    """Each generated page: its markers and what belongs between them."""
    anchors = proofs()
    pages = {DOCS / GUIDE_PAGE: (INDEX, section_index())}
    for section in SECTIONS:
        pages[DOCS / section_page(section)] = (IDIOMS, to_markdown(section, anchors))
    return pages


def between(text: str, markers: tuple[str, str]) -> str:
    """The block between ``markers`` in ``text``, stripped."""
    return text.split(markers[0], 1)[1].split(markers[1], 1)[0].strip()


def main() -> None:
    for path, ((start, end), block) in generated_pages().items():
        if not path.exists():
            title = next(s for s in SECTIONS if DOCS / section_page(s) == path)
            path.write_text(f"# {title}\n\n{start}\n{end}\n")
        text = path.read_text()
        before, rest = text.split(start, 1)
        after = rest.split(end, 1)[1]
        path.write_text(f"{before}{start}\n{block.strip()}\n{end}{after}")


if __name__ == "__main__":
    main()
