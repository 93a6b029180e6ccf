"""Jupyter notebooks as the scanner reads them: their code cells, one after another.

A notebook (``*.ipynb``, nbformat 4) is JSON; Jupyter runs each code cell as a piece of
Python. ``read_notebook`` reads the file as ``read_python`` reads a script (a regular
file, at most ``max_bytes``) and gives the scanner the code cells' text joined in order,
so a device chosen in one cell and used in a later one is followed as in a script. What
IPython runs that Python does not, it leaves out, line for line, so positions still map:
a line magic or shell escape (``%matplotlib inline``, ``!pip install torch``) becomes
``pass``; a cell run by a cell magic other than the Python ones (``%%bash``,
``%%writefile``) is left out whole; a cell that is still not Python is left out, and
said (``Notebook.skipped``): the scan of the rest goes on, and never claims it read it.

``Notebook.where(line)`` turns a line of the joined text into (cell, line in the cell),
both 1-based, code cells counted alone (markdown and raw cells are not), as nbQA and
ruff count them and a notebook run from the top numbers them ``In [N]``; and
``Notebook.relabel`` turns the "line N" a finding's reason cites into "cell C, line L".
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import sys
from typing import Any

from .._src.errors import UnscannableFileError
from ._source import MAX_BYTES, PythonFile, read_python

__all__ = ["Notebook", "read_notebook"]

#: How many times ``max_bytes`` a notebook's file may hold: its outputs (plots, tables,
#: base64 images) are not read, so a notebook of a few kilobytes of code may weigh
#: megabytes; ``max_bytes`` bounds the code cells' text.
OUTPUTS_ALLOWANCE = 32
#: Cell magics whose body is Python that IPython runs (timed, captured, profiled).
_PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun"})
_LINE = re.compile(r"\bline (\d+)\b")


@dataclasses.dataclass(frozen=True)
class Notebook:
    """A notebook's file and the Python of its code cells.

    Attributes:
        file: The file as read (its bytes are the JSON).
        text: The code cells' Python, joined in order.
        lines: For each line of ``text``, its (cell, line in the cell), 1-based.
        skipped: The code cells left out and why, as (cell, why).

    Examples:
        >>> import json, pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "train.ipynb"
        >>> cells = [{"cell_type": "markdown", "source": "# Train"},
        ...          {"cell_type": "code", "source": ["%matplotlib inline\\n", "import torch"]},
        ...          {"cell_type": "code", "source": ["x = torch.ones(2).cuda()"]}]
        >>> _ = path.write_text(json.dumps({"cells": cells, "nbformat": 4}))
        >>> book = read_notebook(str(path))
        >>> print(book.text, end="")
        pass
        import torch
        x = torch.ones(2).cuda()
        >>> book.where(3), book.relabel("line 3: moved here")
        ((2, 1), 'cell 2, line 1: moved here')
    """

    file: PythonFile
    text: str
    lines: tuple[tuple[int, int], ...]
    skipped: tuple[tuple[int, str], ...]

    def where(self, line: int) -> tuple[int, int]:
        """(cell, line in the cell) of ``line`` of ``text``."""
        return self.lines[line - 1]

    def cited(self, match: re.Match[str]) -> str:
        """``PATH:LINE`` (the match, ``LINE`` its group 1) as ``PATH:cell C:L``."""
        number = int(match.group(1))
        if not 1 <= number <= len(self.lines):
            return match.group(0)
        cell, line = self.where(number)
        return f"{match.group(0)[: -len(match.group(1))]}cell {cell}:{line}"

    def relabel(self, reason: str) -> str:
        """``reason`` with each "line N" it cites named by cell and line."""

        def cell_line(match: re.Match[str]) -> str:
            number = int(match.group(1))
            if not 1 <= number <= len(self.lines):
                return match.group(0)
            cell, line = self.where(number)
            return f"cell {cell}, line {line}"

        return _LINE.sub(cell_line, reason)


def read_notebook(path: str, max_bytes: int = MAX_BYTES, *, follow_links: bool = True) -> Notebook:
    """Read a Jupyter notebook's code cells as the scanner reads a script.

    ``max_bytes`` bounds the code cells' text, as it bounds a script; the file, outputs
    included, may hold ``OUTPUTS_ALLOWANCE`` times as much.

    Raises:
        OSError: the file cannot be opened or read.
        UnscannableFileError: what ``read_python`` refuses, the file is not a
            notebook (not JSON, no list of ``cells``), or its code is larger than
            ``max_bytes``.

    Examples:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "bad.ipynb"
        >>> _ = path.write_text("import torch\\n")
        >>> try:
        ...     read_notebook(str(path))
        ... except UnscannableFileError as error:
        ...     print(str(error).split(": ", 1)[1].split(" (")[0])
        not a Jupyter notebook
    """
    file = read_python(path, max_bytes * OUTPUTS_ALLOWANCE, follow_links=follow_links)
    cells = _cells(path, file.text)
    text: list[str] = []
    lines: list[tuple[int, int]] = []
    skipped: list[tuple[int, str]] = []
    code_cells = [
        cell for cell in cells if isinstance(cell, dict) and cell.get("cell_type") == "code"
    ]
    for number, cell in enumerate(code_cells, 1):
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(str(piece) for piece in source)
        if not isinstance(source, str):
            skipped.append((number, "its source is neither text nor a list of lines"))
            continue
        python, why = _python_of(source)
        if why:
            skipped.append((number, why))
            continue
        for line_number, line in enumerate(python.splitlines(), 1):
            text.append(line + "\n")
            lines.append((number, line_number))
    code = "".join(text)
    if len(code.encode()) > max_bytes:
        raise UnscannableFileError(
            f"{path}: its code cells hold {len(code.encode())} bytes, larger than the "
            f"{max_bytes}-byte limit (Fix: raise it, max_bytes= or --max-bytes)"
        )
    return Notebook(file, code, tuple(lines), tuple(skipped))


def _cells(path: str, text: str) -> list[Any]:
    """The notebook's cells, or the error saying it is no notebook."""
    fix = (
        "Fix: scan notebooks saved by Jupyter (nbformat 4), or the script "
        "`jupyter nbconvert --to script` makes"
    )
    try:
        document = json.loads(text)
    except ValueError as error:
        raise UnscannableFileError(
            f"{path}: not a Jupyter notebook (not JSON: {error}). {fix}"
        ) from None
    cells = document.get("cells") if isinstance(document, dict) else None
    if not isinstance(cells, list):
        raise UnscannableFileError(
            f"{path}: not a Jupyter notebook (no list of cells; nbformat 3's worksheets are "
            f"not read). {fix}"
        )
    return cells


def _python_of(source: str) -> tuple[str, str]:
    """The cell's Python, line for line (IPython's own lines made ``pass``), or why it
    has none."""
    lines = source.splitlines()
    first = lines[0].strip() if lines else ""
    if first.startswith("%%"):
        magic = first[2:].split(maxsplit=1)[0] if first[2:].strip() else ""
        if magic not in _PYTHON_CELL_MAGICS:
            return "", f"run by the cell magic %%{magic}, not as Python"
        lines = ["pass", *lines[1:]]
    python = [
        line[: len(line) - len(line.lstrip())] + "pass" if line.lstrip()[:1] in ("%", "!") else line
        for line in lines
    ]
    text = "\n".join(python) + "\n"
    try:
        ast.parse(text)
    except SyntaxError as error:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        return "", f"not valid Python {version} ({error.msg}, line {error.lineno})"
    return text, ""
