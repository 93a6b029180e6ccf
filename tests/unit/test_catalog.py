"""The idiom catalog is complete, consistent, tested, and the guide is generated from it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support.idiom_marks import marked_tests, proofs
from tests.support.scripts import load_script
from torch2jax_device.porting import catalog, scanner

ROOT = Path(__file__).resolve().parents[2]
update_guide = load_script("update_guide")


def test_ids_are_unique_and_well_formed() -> None:
    ids = [idiom.id for idiom in catalog.CATALOG]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", idiom_id) for idiom_id in ids)
    assert {idiom.section for idiom in catalog.CATALOG} <= set(catalog.SECTIONS)


@pytest.mark.parametrize("idiom", catalog.CATALOG, ids=[i.id for i in catalog.CATALOG])
@pytest.mark.parametrize("column", ["torch", "jax", "tj"])
def test_every_snippet_is_valid_python(idiom: catalog.Idiom, column: str) -> None:
    compile(getattr(idiom, column), f"<{idiom.id}:{column}>", "exec")


def test_result_variable_is_assigned_by_both_snippets() -> None:
    for idiom in catalog.CATALOG:
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
    unknown = set(marked_tests()) - {i.id for i in catalog.CATALOG}
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
    """Every section page's idioms and the guide's section list are fresh."""
    stale = [
        path.relative_to(ROOT).as_posix()
        for path, (markers, block) in update_guide.generated_pages().items()
        if not path.exists() or update_guide.between(path.read_text(), markers) != block.strip()
    ]
    assert stale == [], f"{stale} are stale: run `.venv/bin/python scripts/update_guide.py`"
    pages = "".join(path.read_text() for path in update_guide.generated_pages())
    for idiom in catalog.CATALOG:
        assert pages.count(f'<a id="{idiom.id}"></a>') == 1, idiom.id


def test_get_unknown_id_raises() -> None:
    with pytest.raises(KeyError, match="no idiom 'nope'"):
        catalog.get("nope")


# The names the catalog's torch snippets use, bound as a ported script would bind them.
_TORCH_PRELUDE = """\
import os
import safetensors
import safetensors.torch
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors import safe_open
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler
"""


@pytest.mark.parametrize(
    "row", [row for row in catalog.CATALOG if row.rewrite], ids=lambda row: row.id
)
def test_the_scanner_suggests_what_the_row_says(row: catalog.Idiom) -> None:
    """Scanning a row's torch column finds the row and gives its tj column.

    A rewrite (``scan --diff``) turns the torch column into code holding every line of
    the tj column that uses ``tj`` (comments aside); a finding without one suggests code
    from the tj column: the row's whole column, or advice written from the line itself
    (the load of a state dict, not the row's save and load; the one query the line
    asks), which names only ``tj`` functions the column names.
    """
    source = _TORCH_PRELUDE + row.torch + "\n"
    every = scanner.scan_source(source)
    findings = [f for f in every if f.rule == row.id]
    assert findings, f"scanning {row.torch!r} does not report {row.id}"
    rewritten = [line.split("  #")[0] for line in scanner.apply_edits(source, every).splitlines()]
    ported = [line.split("  #")[0] for line in row.tj.splitlines() if "tj." in line]
    for finding in findings:
        if row.rewrite == "advice":
            assert not finding.fixable
            suggested = set(re.findall(r"\btj\.[\w.]+", finding.replacement))
            assert finding.replacement == row.tj or suggested <= set(
                re.findall(r"\btj\.[\w.]+", row.tj)
            ), f"{row.id}: the scanner advises {finding.replacement!r}, the row says {row.tj!r}"
        elif finding.fixable:
            for line in ported:
                assert line in rewritten, f"{row.id}: --diff gives {rewritten}, not {line!r}"
        else:
            suggested = set(re.findall(r"\btj\.[\w.]+", finding.replacement))
            assert suggested <= set(re.findall(r"\btj\.[\w.]+", row.tj)), (
                f"{row.id}: the scanner suggests {finding.replacement!r}, the row says {row.tj!r}"
            )


@pytest.mark.parametrize(
    "row", [row for row in catalog.CATALOG if row.rewrite == "rename"], ids=lambda row: row.id
)
def test_renames_name_real_functions(row: catalog.Idiom) -> None:
    import torch2jax_device as tj

    for name in row.tj_api:
        target: object = tj
        for part in name.split(".")[1:]:
            target = getattr(target, part)
        assert callable(target), name
        assert name in row.tj or row.tj_api.index(name) > 0, f"{row.id}: {name} not in {row.tj!r}"
