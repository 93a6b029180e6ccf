"""``scan`` on scripts of the classes issue 25 found in the wild (tests/support/fixtures/wild).

Each script reproduces, small, the device code of a family of real scripts (its
docstring names them): Hugging Face Accelerate and Lightning Fabric trainers, a launcher
with its own ``get_device``/``init_process_group`` helpers and a guarded ``torch_xla``
import, and a script half ported to JAX. Each ``.truth`` file was written by hand from
reading the script, before it was scanned: every line holding a device idiom, with its
catalog rule(s). Lines of the libraries' rows (section "Libraries built on torch") are
counted apart from torch's own idioms; every other line is a look-alike that must get no
finding (``torch.version.__version__``, annotations, ``accelerator.print``...).

    python -m tests.cli.test_scan_corpus_wild   # prints the recall figures
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from tests.support import corpus
from torch2jax_device.cli import main
from torch2jax_device.porting import catalog, scanner

WILD = Path(__file__).resolve().parents[1] / "support" / "fixtures" / "wild"
SCRIPTS = sorted(path.stem for path in WILD.glob("*.py"))
LIBRARIES = {row.id for row in catalog.CATALOG if row.section == "Libraries built on torch"}


def truth(name: str) -> dict[int, set[str]]:
    return corpus.truth(WILD, name)


def findings(name: str) -> dict[int, set[str]]:
    return corpus.findings(WILD, name)


def figures() -> dict[str, tuple[int, int]]:
    """(found, labelled) lines of torch idioms and of library lines, rules found out of
    rules labelled, and findings on lines without a label ("unlabelled": false flags,
    out of 0)."""
    return corpus.recall(WILD, SCRIPTS)


def test_the_wild_corpus_is_labelled_with_catalog_rules() -> None:
    labelled = corpus.labelled_rules(WILD, SCRIPTS)
    assert labelled <= scanner.RULES, labelled - scanner.RULES
    assert len(SCRIPTS) >= 4 and labelled & LIBRARIES


def test_recall_on_torch_idioms_and_library_lines() -> None:
    found = figures()
    torch_found, torch_lines = found["torch lines"]
    library_found, library_lines = found["library lines"]
    assert torch_found / torch_lines >= 0.97, found
    assert library_found / library_lines >= 0.8, found


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_labelled_line_is_found_and_nothing_else(name: str) -> None:
    expected, got = truth(name), findings(name)
    assert sorted(set(expected) - set(got)) == [], "labelled lines without a finding"
    assert sorted(set(got) - set(expected)) == [], "findings on lines without a label"
    wrong = {
        line: (expected[line], got[line]) for line in expected if not expected[line] <= got[line]
    }
    assert wrong == {}, "lines found under another rule than labelled"


def _diff(path: Path) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["scan", "--diff", str(path)]) == 0
    return out.getvalue()


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_diff_is_deterministic_and_the_result_compiles(name: str) -> None:
    source = (WILD / f"{name}.py").read_text()
    diff = _diff(WILD / f"{name}.py")
    assert diff == _diff(WILD / f"{name}.py")
    every = scanner.scan_source(source, name)
    compile(scanner.apply_edits(source, every), name, "exec")


if __name__ == "__main__":
    for key, (a, b) in figures().items():
        ratio = f" = {a / b:.2f}" if b else ""
        print(f"{key:14} {a:4} / {b:<4}{ratio}")
