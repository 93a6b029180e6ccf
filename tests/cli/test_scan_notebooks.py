"""``torch2jax-device scan`` on Jupyter notebooks, with the script as the oracle.

Before notebooks were read, ``scan train.ipynb`` parsed the JSON as a Python dict
literal and said "0 idiom(s) found", and a folder's notebooks were never looked at. The
generator here cuts every script of the labelled corpus (``fixtures/corpus``) into code
cells at random statement boundaries, with markdown cells, IPython's own lines (``%``
magics, ``!`` shell escapes) and a ``%%bash`` cell between them, and checks that the
notebook's findings are the script's, each at the cell and line holding the same code.
"""

from __future__ import annotations

import ast
import json
import random
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli

CORPUS = Path(__file__).resolve().parents[1] / "support" / "fixtures" / "corpus"
SCRIPTS = sorted(CORPUS.glob("*.py"))
SEEDS = range(3)


def _statement_starts(source: str) -> list[int]:
    """The 0-based lines where the script's top-level statements start (decorators
    included): where a cell may begin."""
    tree = ast.parse(source)
    return [
        min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) - 1
        for node in tree.body
    ]


def _notebook(source: str, seed: int) -> tuple[dict[str, Any], dict[tuple[int, int], int]]:
    """The script cut into code cells, IPython lines and other cells between them, and
    where each script line went: (cell, line in the cell) -> script line, 1-based."""
    lines = source.splitlines(keepends=True)
    draw = random.Random(seed)
    starts = _statement_starts(source)
    cuts = sorted({0, *draw.sample(starts, k=min(len(starts), draw.randint(1, 6)))})
    cells: list[dict[str, Any]] = []
    where: dict[tuple[int, int], int] = {}
    for first, end in zip(cuts, [*cuts[1:], len(lines)], strict=True):
        if draw.random() < 0.5:
            cells.append({"cell_type": "markdown", "source": ["# Notes\n", "torch.cuda()\n"]})
        if draw.random() < 0.3:
            cells.append({"cell_type": "code", "source": ["%%bash\n", "nvidia-smi\n"]})
        magic = ["%matplotlib inline\n", "!nvidia-smi\n"] if draw.random() < 0.5 else []
        body = magic + lines[first:end]
        cells.append({"cell_type": "code", "source": body, "outputs": []})
        number = sum(cell["cell_type"] == "code" for cell in cells)  # code cells alone count
        for offset in range(end - first):
            where[(number, len(magic) + offset + 1)] = first + offset + 1
    return {"cells": cells, "nbformat": 4, "nbformat_minor": 5, "metadata": {}}, where


def _findings(path: Path) -> list[dict[str, Any]]:
    status, out, err = run_cli("scan", "--format", "json", str(path))
    assert status in (0, 1, 2), err
    return json.loads(out)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.stem)
def test_a_notebook_cut_from_a_script_has_the_scripts_findings_in_its_cells(
    script: Path, seed: int, tmp_path: Path
) -> None:
    source = script.read_text()
    book, where = _notebook(source, seed)
    notebook = tmp_path / f"{script.stem}.ipynb"
    notebook.write_text(json.dumps(book))
    as_script = [(f["line"], f["column"], f["rule"], f["original"]) for f in _findings(script)]
    found = _findings(notebook)
    assert all(f["path"] == str(notebook) and not f["fixable"] for f in found)
    in_cells = [
        (where[(f["cell"], f["line"])], f["column"], f["rule"], f["original"]) for f in found
    ]
    assert sorted(in_cells) == sorted(as_script)


def _write(path: Path, *cells: dict[str, Any]) -> Path:
    path.write_text(json.dumps({"cells": list(cells), "nbformat": 4, "metadata": {}}))
    return path


def _code(*lines: str) -> dict[str, Any]:
    return {"cell_type": "code", "source": [f"{line}\n" for line in lines]}


def test_a_device_chosen_in_one_cell_and_used_in_another_is_followed(tmp_path: Path) -> None:
    notebook = _write(
        tmp_path / "train.ipynb",
        {"cell_type": "markdown", "source": "# Training"},
        _code(
            "import torch", 'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")'
        ),
        _code("%time x = 1", "model = torch.nn.Linear(2, 2)", "model.to(device)"),
    )
    status, out, err = run_cli("scan", str(notebook))
    assert status == 1, err
    # Code cells alone are counted: the markdown cell is not one.
    assert f"{notebook}:cell 1:2:10: device-select" in out
    assert f"{notebook}:cell 2:3:7: module-to model.to(device)" in out
    assert "0 rewritable with --diff" in out
    assert err == ""


def test_a_cell_python_cannot_read_is_left_out_and_said(tmp_path: Path) -> None:
    notebook = _write(
        tmp_path / "explore.ipynb",
        _code("import torch", "torch.cuda.is_available()"),
        _code("torch.cuda?"),
        _code("%%writefile helper.py", "import torch", "torch.cuda.synchronize()"),
        _code("torch.cuda.empty_cache()"),
    )
    status, out, err = run_cli("scan", str(notebook))
    assert status == 2
    assert f"{notebook}:cell 1:2:" in out and f"{notebook}:cell 4:1:" in out
    assert "synchronize" not in out
    assert f"cannot scan cell 2 of {notebook}: not valid Python" in err
    assert f"cannot scan cell 3 of {notebook}: run by the cell magic %%writefile" in err
    assert "the notebook's other cells are scanned" in err


def test_diff_rewrites_the_scripts_and_names_the_notebooks_it_leaves(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import torch\nd = torch.device('cpu')\nprint(d)\n")
    _write(tmp_path / "explore.ipynb", _code("import torch", "d = torch.device('cpu')", "print(d)"))
    status, out, err = run_cli("scan", "--diff", str(tmp_path))
    assert status == 2
    assert "+++ b/" in out and "train.py" in out and "explore.ipynb" not in out
    assert (
        f"cannot scan {tmp_path / 'explore.ipynb'}: --diff rewrites scripts, not notebooks" in err
    )
    assert "1 finding(s) by cell" in err


def test_a_folder_scan_reads_notebooks_but_not_jupyters_checkpoint_copies(tmp_path: Path) -> None:
    _write(tmp_path / "a.ipynb", _code("import torch", "torch.cuda.synchronize()"))
    (tmp_path / ".ipynb_checkpoints").mkdir()
    copy = tmp_path / ".ipynb_checkpoints" / "a-checkpoint.ipynb"
    _write(copy, _code("import torch", "torch.cuda.synchronize()"))
    status, out, err = run_cli("scan", str(tmp_path))
    assert status == 1, err
    assert f"{tmp_path / 'a.ipynb'}:cell 1:2:1: cuda-synchronize" in out
    assert "1 idiom(s) found" in out and "checkpoint.ipynb" not in out


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("import torch\nx = torch.zeros(1).cuda()\n", "not a Jupyter notebook (not JSON"),
        ('{"nbformat": 3, "worksheets": []}', "not a Jupyter notebook (no list of cells"),
        ("[1, 2]", "not a Jupyter notebook (no list of cells"),
    ],
)
def test_a_file_named_ipynb_that_is_no_notebook_is_refused(
    content: str, why: str, tmp_path: Path
) -> None:
    path = tmp_path / "x.ipynb"
    path.write_text(content)
    status, out, err = run_cli("scan", str(path))
    assert status == 2
    assert f"cannot scan {path}: {why}" in err and "jupyter nbconvert --to script" in err
    assert "0 idiom(s) found" in out


def test_a_notebooks_json_report_names_the_cell(tmp_path: Path) -> None:
    notebook = _write(
        tmp_path / "n.ipynb", _code("import torch"), _code("torch.cuda.synchronize()")
    )
    (found,) = _findings(notebook)
    assert (found["path"], found["cell"], found["line"], found["rule"]) == (
        str(notebook),
        2,
        1,
        "cuda-synchronize",
    )
    assert "--diff rewrites scripts only" in found["reason"]


def test_max_bytes_bounds_a_notebooks_code_not_its_outputs(tmp_path: Path) -> None:
    image = {"output_type": "display_data", "data": {"image/png": "A" * 20_000}}
    cell = {**_code("import torch", "torch.cuda.synchronize()"), "outputs": [image]}
    notebook = _write(tmp_path / "plots.ipynb", cell)
    status, out, err = run_cli("scan", "--max-bytes", "1000", str(notebook))
    assert (status, err) == (1, "")
    assert "cuda-synchronize" in out
    long_code = _code("import torch", *["torch.cuda.synchronize()"] * 100)
    _write(notebook, long_code)
    status, out, err = run_cli("scan", "--max-bytes", "1000", str(notebook))
    assert status == 2
    assert (
        f"cannot scan {notebook}: its code cells hold 2513 bytes, larger than the 1000-byte" in err
    )


def test_a_scripts_reason_names_the_notebook_cell_that_reads_its_value(tmp_path: Path) -> None:
    (tmp_path / "utils.py").write_text(
        'import torch\ndevice = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'
    )
    notebook = _write(
        tmp_path / "explore.ipynb",
        _code("import torch", "from utils import device"),
        _code("model = torch.nn.Linear(2, 2)", "model.to(device)"),
    )
    status, out, err = run_cli("scan", str(tmp_path))
    assert status == 1, err
    assert f"read in {notebook}, which imports it: {notebook}:cell 2:2: passed to model.to" in out
    assert f"{notebook}:4" not in out  # the joined text's line, which no editor shows
