"""Find PyTorch device idioms in source code and say what each becomes (``scan``).

A real parser (``ast``), never regular expressions over text. Names are resolved with
Python's scoping rules (``_names``): ``import torch as T`` makes ``T.device(...)`` an
idiom, and a function parameter called ``data`` is not the module ``data`` imported at
the top. Every rule is named by the id of its row in the idiom catalog; the tables of
plain renames and advice-only names come from the rows (``_tables``). The ``custom``
rows (``torch.device``, ``.to``, ``.cuda()``, ``torch.load``, factories with
``device=``, the launcher's environment variables...) have recognisers in
``_recognise``, one module per catalog section, each citing its row.

The work is in four rooms, in the order it runs:

* reading (``_source.SourceFile``): the file parsed once, its names, values, positions;
  the files scanned together read as one project (``_project``), their imports
  followed for what names hold, where values go and who joins the job;
* recognising (``_recognise``): a candidate finding per idiom, with its rewrite;
* planning (``_plan``, ``_startup``): which rewrites are correct on their own;
* this module: the findings, and the rewritten text (``apply_edits``).

``--diff`` rewrites a finding only when the rewritten line is correct on its own, for
the unchanged rest of its program (the files scanned with it that it imports or that
import it, directly or not; files that do not are planned apart):

* a value that becomes a JAX array or a ``tj.device`` (``.to``, ``.cuda()``,
  ``torch.load``, ``torch.device``...) must reach only code that takes it
  (``_flow.Flow.escape``), and a module is moved only when it is a Flax NNX module;
* calls on torch's runtime state (``torch.cuda.*`` queries, ``set_device``, seeds,
  memory figures) are rewritten only when no torch code of the scanned files still
  places data on a device, and the default device only when torch creates no tensors;
* ``torch.distributed`` is rewritten all at once or not at all (one process group);
* nothing that starts JAX is moved before ``init_process_group`` or ``tj.configure``
  (``startup-order`` findings say where the script already does it);
* rewrites compose inside out (``_rewrites``); one that cannot becomes a finding.

Every other finding carries the reason it was not rewritten.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from . import _arguments, catalog
from ._candidate import Candidate
from ._plan import plan
from ._project import Project
from ._recognise import detect
from ._rewrites import Rewrite, compose, with_tj_import
from ._source import MAX_BYTES, PythonFile, SourceFile, deep_recursion, read_python
from ._tables import RULES
from .idiom import Idiom

__all__ = [
    "MAX_BYTES",
    "RULES",
    "Finding",
    "PythonFile",
    "Rewrite",
    "SourceFile",
    "apply_edits",
    "read_python",
    "scan_files",
    "scan_source",
    "scan_sources",
]


@dataclasses.dataclass(frozen=True)
class Finding:
    """One idiom found: where, which catalog row, the code, and what it becomes.

    Attributes:
        path: The file.
        line: Line of the idiom's own token (the method name of ``x.to(...)``, the
            keyword of ``pin_memory=True``), 1-based.
        column: Its column, 1-based.
        end_line: Last line of the code the finding covers.
        rule: The catalog row's id.
        original: The code as written.
        replacement: What it becomes with torch2jax_device (or the row's advice).
        jax: The same with JAX alone, built from the line (the script's own optimizer
            as an optax rule); ``""``: the row's plain-JAX column (``idiom.jax``).
        rewrite: The rewrite ``--diff`` applies, ``None`` when it applies none.
        reason: Why there is no rewrite (``""`` when there is one).
    """

    path: str
    line: int
    column: int
    end_line: int
    rule: str
    original: str
    replacement: str
    jax: str = ""
    rewrite: Rewrite | None = None
    reason: str = ""

    @property
    def fixable(self) -> bool:
        """Whether ``--diff`` rewrites it."""
        return self.rewrite is not None

    @property
    def idiom(self) -> Idiom:
        """The catalog row the finding cites."""
        return catalog.get(self.rule)


def scan_source(source: str, path: str = "<string>") -> list[Finding]:
    """Every device idiom in ``source``, in file order.

    Raises:
        SyntaxError: ``source`` is not valid Python.

    Examples:
        >>> from torch2jax_device.porting.scanner import scan_source
        >>> [f.rule for f in scan_source("import torch\\nx = x.to('cuda')\\n")]
        ['tensor-to-device']
    """
    source = _arguments.text("scan_source()", "source", source)
    path = _arguments.text("scan_source()", "path", path)
    return scan_sources({path: source})[path]


def scan_sources(sources: Mapping[str, str]) -> dict[str, list[Finding]]:
    """The findings of the files of one project, each planned with its program.

    The files are read as Python imports them (``_project``): rewrites that depend on
    the whole program (torch's runtime state, the process group, a value another module
    imports) are decided over the files that import one another, so pass the whole
    project; files that do not are planned apart, each as if scanned alone.

    Raises:
        SyntaxError: a source is not valid Python (nothing is scanned then).
    """
    sources = _arguments.mapping(
        "scan_sources()", "sources", sources, "a dict of each file's path to its source"
    )
    return scan_files([SourceFile(path, source) for path, source in sources.items()])


def scan_files(files: Sequence[SourceFile]) -> dict[str, list[Finding]]:
    """``scan_sources`` for files already parsed (``SourceFile``), each parsed once.

    Examples:
        >>> from torch2jax_device.porting.scanner import SourceFile, scan_files
        >>> found = scan_files([SourceFile("a.py", "import torch\\nd = torch.device(0)\\n")])
        >>> [(f.line, f.rule) for f in found["a.py"]]
        [(2, 'device-accelerator-index')]
    """
    files = _arguments.iterable("scan_files()", "files", files, "a list of SourceFile")
    for file in files:
        if not isinstance(file, SourceFile):
            raise _arguments.refused("scan_files()", "files", file, "a list of SourceFile")
    with deep_recursion():
        project = Project(files)
        project.attach()
        candidates = [c for file in files for c in detect(file)]
        planned: list[Candidate] = []
        for program in project.programs():
            members = {id(file) for file in program}
            own = [c for c in candidates if id(c.file) in members]
            plan(program, own)
            planned.extend(own)
        return {file.path: _findings(file, planned) for file in files}


def apply_edits(source: str, findings: Iterable[Finding]) -> str:
    """``source`` with the rewrites of ``findings``, importing ``tj`` if needed."""
    source = _arguments.text("apply_edits()", "source", source)
    wanted = "the findings scan_source returned"
    given = _arguments.iterable("apply_edits()", "findings", findings, wanted)
    for finding in given:
        if not isinstance(finding, Finding):
            raise _arguments.refused("apply_edits()", "findings", finding, wanted)
    rewrites = [f.rewrite for f in given if f.rewrite is not None]
    if not rewrites:
        return source
    data, _ = compose(source.encode(), rewrites)
    return with_tj_import(data.decode())


def _findings(file: SourceFile, candidates: list[Candidate]) -> list[Finding]:
    found = []
    for c in candidates:
        if c.file is not file:
            continue
        start, end = file.span(c.node)
        found.append(
            Finding(
                path=file.path,
                line=c.position[0],
                column=c.position[1],
                end_line=file.position(max(start, end - 1))[0],
                rule=c.rule,
                original=file.text(c.node),
                replacement=c.replacement,
                jax=c.jax,
                rewrite=c.rewrite if c.enabled else None,
                reason="" if c.enabled else c.reason,
            )
        )
    return sorted(found, key=lambda f: (f.line, f.column, f.rule, f.end_line))
