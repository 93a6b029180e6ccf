"""The known-differences table and the docs say the same: every row of
``torch2jax_device.porting.known_differences`` is a heading of ``docs/known-differences*.md``,
and every heading of the placement page is a row or says why no drawn call shows it."""

from __future__ import annotations

from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

from torch2jax_device.porting.known_differences import DIFFERENCES, NOT_DRAWN, Call, Leaf, instead

DOCS = Path(__file__).resolve().parents[2] / "docs"
PLACEMENT = "known-differences-placement.md"


def anchors(page: str, under: str = "") -> list[str]:
    """``page#slug`` of each ``###`` heading (only those under the ``## under...`` section)."""
    found, inside = [], not under
    for line in (DOCS / page).read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            inside = not under or line[3:].startswith(under)
        elif line.startswith("### ") and inside:
            found.append(f"{page}#{slugify(line[4:], '-')}")
    return found


def every_anchor() -> set[str]:
    return {anchor for page in DOCS.glob("known-differences*.md") for anchor in anchors(page.name)}


@pytest.mark.parametrize("row", DIFFERENCES, ids=lambda row: row.id)
def test_every_row_is_documented(row: object) -> None:
    assert row.docs in every_anchor(), f"{row.id}: no heading {row.docs}"  # type: ignore[attr-defined]


def test_every_placement_heading_is_a_row_or_says_why_it_is_not_drawn() -> None:
    headings = set(anchors(PLACEMENT, under="Placement"))
    rows = {row.docs for row in DIFFERENCES}
    assert headings - rows - set(NOT_DRAWN) == set(), "document these in the table"
    assert set(NOT_DRAWN) - headings == set(), "no longer headings of the placement page"
    assert set(NOT_DRAWN) & rows == set(), "a row covers these: drop them from NOT_DRAWN"


def test_row_ids_are_unique() -> None:
    ids = [row.id for row in DIFFERENCES]
    assert len(ids) == len(set(ids))


def test_rows_apply_in_order_a_containers_int64_leaf_keeps_its_dtype_then_narrows() -> None:
    leaf = Leaf(source="torch", layout="dense", dtype="int64", values=(1,), shape=(1,))
    call, as_asked, rows = instead(
        Call(leaf=leaf, device='"cpu"', dtype="float16", in_container=True)
    )
    assert call.dtype == "int32"
    assert as_asked.dtype is None  # tj copies or keeps the int64 leaf as its .to("cpu") does
    assert [row.id for row in rows] == ["container-casts-floats-only", "x64-narrowing"]
