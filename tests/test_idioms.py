"""The idiom catalog is complete, consistent, tested, and the guide is generated from it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.idiom_marks import marked_tests, proofs
from torch2jax_device import idioms

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "migration-guide.md"
START, END = "<!-- idioms:start -->", "<!-- idioms:end -->"


def test_ids_are_unique_and_well_formed() -> None:
    ids = [idiom.id for idiom in idioms.CATALOG]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", idiom_id) for idiom_id in ids)
    assert {idiom.section for idiom in idioms.CATALOG} <= set(idioms.SECTIONS)


@pytest.mark.parametrize("idiom", idioms.CATALOG, ids=[i.id for i in idioms.CATALOG])
@pytest.mark.parametrize("column", ["torch", "jax", "tj"])
def test_every_snippet_is_valid_python(idiom: idioms.Idiom, column: str) -> None:
    compile(getattr(idiom, column), f"<{idiom.id}:{column}>", "exec")


def test_result_variable_is_assigned_by_both_snippets() -> None:
    for idiom in idioms.CATALOG:
        if idiom.result is None:
            continue
        for code in (idiom.torch, idiom.tj):
            assigned = {
                name.id
                for node in ast.walk(ast.parse(code))
                if isinstance(node, ast.Assign)
                for target in node.targets
                for name in ast.walk(target)
                if isinstance(name, ast.Name)
            }
            assert idiom.result in assigned, (idiom.id, code)


def test_every_row_has_a_side_by_side_test() -> None:
    untested = [idiom_id for idiom_id, files in proofs().items() if not files]
    assert untested == [], "catalog rows without a side-by-side test"
    unknown = set(marked_tests()) - {i.id for i in idioms.CATALOG}
    assert unknown == set(), "tests name idioms that are not in the catalog"


def test_the_coverage_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "import pytest\n@pytest.mark.idiom('cuda-set-device')\ndef test_x(): pass\n"
    )
    found = proofs(tmp_path)
    assert found["cuda-set-device"] == ["tests/test_x.py"]
    assert found["cuda-device-properties"] == []  # runs=False and no mark: would fail above


def test_migration_guide_is_generated_from_the_catalog() -> None:
    text = GUIDE.read_text()
    generated = text.split(START, 1)[1].split(END, 1)[0].strip()
    assert generated == idioms.to_markdown(proofs()).strip(), (
        "docs/migration-guide.md is stale: run `.venv/bin/python scripts/update_guide.py`"
    )
    for idiom in idioms.CATALOG:
        assert f'<a id="{idiom.id}"></a>' in text


def test_get_unknown_id_raises() -> None:
    with pytest.raises(KeyError, match="no idiom 'nope'"):
        idioms.get("nope")
