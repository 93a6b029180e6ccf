"""Find PyTorch device idioms in source code and say what each becomes (``scan``).

A real parser (``ast``), never regular expressions over text. Names are resolved with
Python's scoping rules (``_names``): ``import torch as T`` makes ``T.device(...)`` an
idiom, and a function parameter called ``data`` is not the module ``data`` imported at
the top. Every rule is named by the id of its row in the idiom catalog; the tables of
plain renames and advice-only names come from the rows' ``torch_api`` / ``tj_api`` /
``rewrite`` fields (a ``torch_api`` entry ending in ``.*`` covers every name under it
that no other row names, so no ``torch.cuda`` call goes unreported). The ``custom`` rows
(``torch.device``, ``.to``, ``.cuda()``, ``torch.load``, factories with ``device=``, the
launcher's environment variables...) have handlers below, each citing its row.

``--diff`` rewrites a finding only when the rewritten line is correct on its own, for
the unchanged rest of the files scanned together:

* a value that becomes a JAX array or a ``tj.device`` (``.to``, ``.cuda()``,
  ``torch.load``, ``torch.device``...) must reach only code that takes it
  (``_values.Values.escape``), and a module is moved only when it is a Flax NNX module;
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

import ast
import bisect
import dataclasses
from collections.abc import Callable, Iterable, Mapping

from . import catalog
from ._names import Names
from ._rewrites import Rewrite, compose, with_tj_import
from ._values import (
    JAX_ARRAY,
    NNX_MODULE,
    NUMBER,
    PATH,
    TORCH_TENSOR,
    WRAPPED,
    Values,
)
from .idiom import Idiom

__all__ = ["RULES", "Finding", "Rewrite", "apply_edits", "scan_source", "scan_sources"]

TJ = "torch2jax_device"


def _table(kind: str) -> dict[str, Idiom]:
    return {
        name: row
        for row in catalog.CATALOG
        if row.rewrite == kind
        for name in row.torch_api
        if not name.endswith(".*")
    }


# torch name -> (row, the torch2jax_device name that replaces it one for one).
_RENAMES = {
    torch_name: (row, tj_name)
    for row in catalog.CATALOG
    if row.rewrite == "rename"
    for torch_name, tj_name in zip(row.torch_api, row.tj_api, strict=True)
}
# torch name -> row, for names reported with their row's advice and never rewritten.
_ADVICE = _table("advice")
# "torch.cuda" -> row, for "torch.cuda.*": every name under it no other row names.
_WILDCARDS = {
    name[: -len(".*")]: row
    for row in catalog.CATALOG
    if row.rewrite in ("advice", "custom")
    for name in row.torch_api
    if name.endswith(".*")
}
_FACTORIES = frozenset(catalog.get("factory-device").torch_api)
_TENSOR_FACTORIES = frozenset(catalog.get("factory-tensor-device").torch_api)
_NEW_FACTORIES = frozenset(
    name.split(".")[-1] for name in catalog.get("tensor-new-factory").torch_api
)

#: Every rule id the scanner can report; each is a row of the idiom catalog.
RULES: frozenset[str] = frozenset(row.id for row in catalog.CATALOG if row.rewrite)

# -- what the scanner knows about torch2jax_device's own functions --------------------
# torch2jax_device names whose result is JAX arrays where torch's was tensors.
_ARRAY_RESULTS = frozenset(
    {"tj.load_file", "tj.load", "tj.to_jax", "tj.to_device", "tj.pin_memory"}
)
# torch2jax_device names that do not start JAX's backends.
_QUIET = frozenset(
    {
        "tj.device",
        "tj.backends.cuda.is_built",
        "tj.backends.mps.is_built",
        "tj.cuda.is_initialized",
        "tj.cuda.manual_seed",
        "tj.cuda.manual_seed_all",
        "tj.save_file",
        "tj.distributed.get_rank",
        "tj.distributed.get_world_size",
        "tj.distributed.get_local_rank",
        "tj.distributed.is_initialized",
        "tj.distributed.destroy_process_group",
    }
)
# Calls that must come before anything starts JAX.
_FIRST = {
    "torch.distributed.init_process_group": "init_process_group",
    f"{TJ}.distributed.init_process_group": "init_process_group",
    "jax.distributed.initialize": "jax.distributed.initialize",
    "torch.cuda.set_per_process_memory_fraction": "set_per_process_memory_fraction",
    f"{TJ}.cuda.set_per_process_memory_fraction": "set_per_process_memory_fraction",
    f"{TJ}.configure": "tj.configure",
}
# Advice rows whose port creates arrays (and so starts JAX).
_ADVICE_STARTS = frozenset(
    {
        "factory-device",
        "factory-tensor-device",
        "tensor-new-factory",
        "module-device-kwarg",
        "cuda-tensor-type",
        "manual-seed",
        "generator-device",
        "dist-data-parallel",
        "dist-ddp-gradient",
        "dist-device-mesh",
    }
)
# JAX calls that start its backends.
_JAX_STARTERS = frozenset(
    "jax.devices jax.local_devices jax.device_count jax.local_device_count "
    "jax.default_backend jax.device_put jax.make_mesh jax.process_index "
    "jax.process_count".split()
)
# Rows whose findings, left in torch, mean torch still places data on a device.
_PLACES_DATA = frozenset(
    {
        "tensor-to-device",
        "tensor-to-device-dtype",
        "tensor-to-other",
        "tensor-to-copy",
        "tensor-non-blocking",
        "tensor-cuda",
        "tensor-cpu",
        "tensor-pin-memory",
        "module-to",
        "factory-device",
        "factory-tensor-device",
        "tensor-new-factory",
        "module-device-kwarg",
        "cuda-tensor-type",
        "default-device-context",
        "default-device-set",
        "torch-load-map-location",
        "torch-load-map-location-dict",
        "torch-load-map-location-callable",
        "load-safetensors",
        "dataloader-pin-memory",
        "autocast",
        "grad-scaler",
        "dist-ddp-gradient",
        "dist-data-parallel",
        "generator-device",
        "cuda-stream",
        "cuda-event-timing",
    }
)
# torch calls that create tensors without being told where (the default device decides).
_TORCH_CREATES = frozenset({"torch.load", "torch.from_numpy", *_FACTORIES, *_TENSOR_FACTORIES})

# The launcher's and runtime's environment variables: rule and what to write instead.
_ENVIRONMENT = {
    "LOCAL_RANK": ("dist-local-rank", "tj.distributed.get_local_rank()"),
    "RANK": ("dist-env", "tj.distributed.get_rank()"),
    "WORLD_SIZE": ("dist-env", "tj.distributed.get_world_size()"),
    "LOCAL_WORLD_SIZE": ("dist-env", "unchanged: init_process_group reads it"),
    "GROUP_RANK": ("dist-env", "unchanged: init_process_group reads it"),
    "MASTER_ADDR": ("dist-env", "unchanged: init_process_group reads it"),
    "MASTER_PORT": ("dist-env", "unchanged: init_process_group reads it"),
    "CUDA_VISIBLE_DEVICES": ("cuda-visible-devices", None),
    "PYTORCH_CUDA_ALLOC_CONF": ("cuda-alloc-conf", None),
    "CUBLAS_WORKSPACE_CONFIG": ("deterministic", None),
}
# Launchers' variables by prefix: SLURM's and Open MPI's (jax.distributed reads them).
_LAUNCHER_PREFIXES = ("SLURM_", "OMPI_COMM_WORLD_")
_DEVICE_PREFIXES = ("cuda:", "cpu:", "gpu:", "mps:", "xpu:", "tpu:")
_TO_KEYWORDS = frozenset({"device", "dtype", "non_blocking", "copy"})
_LOAD_REFUSED = {
    "weights_only": "tj.load never runs code from the file (always weights_only=True)",
    "mmap": "tj.load has no mmap=: it reads the file once into aligned memory",
    "pickle_module": "tj.load has no pickle_module=",
    "encoding": "tj.load has no encoding=",
}
_DTYPES = frozenset(
    "float16 half bfloat16 float32 float float64 double int8 int16 int32 int int64 long "
    "uint8 bool complex64 complex128 float8_e4m3fn float8_e5m2 cfloat cdouble".split()
)
_MEMORY_FORMAT_ONLY = frozenset({"memory_format"})
# x.to(other): argument names that say "a tensor" rather than "a device".
_TENSOR_NAMES = frozenset({"other", "ref", "reference", "like", "template", "tensor"})
# x.device is a setting, not an array's device, on objects with these names.
_SETTINGS = frozenset(
    "args cfg config conf opt opts options hparams hp settings flags FLAGS self accelerator "
    "trainer fabric state training_args parser namespace".split()
)


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


@dataclasses.dataclass(eq=False)
class _Candidate:
    """A finding being planned: its rewrite, and what the rewrite's safety depends on."""

    file: _File
    node: ast.AST
    rule: str
    replacement: str
    position: tuple[int, int]
    rewrite: Rewrite | None = None
    reason: str = ""
    effect: str = "none"  # none | value | runtime | default | dist | module
    subject: ast.AST | None = None  # the expression whose value changes
    policy: str = "array"  # what it becomes: "array" or "device"
    call: ast.AST | None = None  # the call that becomes a torch2jax_device call
    tj_name: str | None = None  # the torch2jax_device name it becomes
    block: list[ast.stmt] | None = None  # for with torch.device(...): the block

    @property
    def enabled(self) -> bool:
        return self.rewrite is not None and not self.reason

    def disable(self, reason: str) -> None:
        if not self.reason:
            self.reason = reason


def scan_source(source: str, path: str = "<string>") -> list[Finding]:
    """Every device idiom in ``source``, in file order.

    Raises:
        SyntaxError: ``source`` is not valid Python.

    Examples:
        >>> from torch2jax_device.porting.scanner import scan_source
        >>> [f.rule for f in scan_source("import torch\\nx = x.to('cuda')\\n")]
        ['tensor-to-device']
    """
    return scan_sources({path: source})[path]


def scan_sources(sources: Mapping[str, str]) -> dict[str, list[Finding]]:
    """The findings of files that belong together (one program), planned together.

    Rewrites that depend on the whole program (torch's runtime state, the process
    group) are decided over every file given, so pass the whole project.

    Raises:
        SyntaxError: a source is not valid Python (nothing is scanned then).
    """
    files = [_File(path, source) for path, source in sources.items()]
    candidates = [c for file in files for c in file.detect()]
    _plan(files, candidates)
    return {file.path: file.findings(candidates) for file in files}


def apply_edits(source: str, findings: Iterable[Finding]) -> str:
    """``source`` with the rewrites of ``findings``, importing ``tj`` if needed."""
    rewrites = [f.rewrite for f in findings if f.rewrite is not None]
    if not rewrites:
        return source
    data, _ = compose(source.encode(), rewrites)
    return with_tj_import(data.decode())


# -- one file -------------------------------------------------------------------------
class _File:
    def __init__(self, path: str, source: str) -> None:
        self.path = path
        self.data = source.encode()
        self.tree = ast.parse(source, filename=path)
        self.names = Names(self.tree)
        self.values = Values(self.names, self.qualname)
        starts = [0]
        for line in self.data.splitlines(keepends=True):
            starts.append(starts[-1] + len(line))
        self.line_starts = starts
        taken = [b for s in self.names.scopes for b in s.bindings.get("tj", ())]
        self.tj_taken = next(
            (
                f"the name tj is already used at line {getattr(b.node, 'lineno', 0)}"
                for b in taken
                if not (b.kind == "import" and b.origin == TJ)
            ),
            "",
        )

    # -- positions ------------------------------------------------------------------
    def offset(self, line: int, column: int) -> int:
        return self.line_starts[line - 1] + column

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def text(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.data[start:end].decode()

    def position(self, offset: int) -> tuple[int, int]:
        """(line, 1-based column in characters) of a byte offset."""
        line = min(bisect.bisect_right(self.line_starts, offset), len(self.line_starts) - 1) or 1
        prefix = self.data[self.line_starts[line - 1] : offset].decode(errors="replace")
        return line, len(prefix) + 1

    def receiver_span(self, method: ast.Attribute) -> tuple[int, int]:
        """Bytes of ``x`` in ``x.attr``, with the parentheses around it but no comment."""
        start, _ = self.span(method)
        end = position = self.span(method.value)[1]
        while position < len(self.data) and self.data[position : position + 1] != b".":
            character = self.data[position : position + 1]
            if character == b"#":
                position = self.data.index(b"\n", position)
                continue
            position += 1
            if character == b")":
                end = position
        return start, end

    def method_position(self, method: ast.Attribute) -> tuple[int, int]:
        """(line, column) of the method name in ``x.method``."""
        _, end = self.span(method)
        return self.position(end - len(method.attr.encode()))

    # -- names ------------------------------------------------------------------------
    def qualname(self, node: ast.AST) -> str | None:
        """``torch.cuda.is_available`` for ``T.cuda.is_available`` after ``import torch as T``."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        if self.names.is_builtin(node) and node.id == "open":
            return None
        origin = self.names.origin(node)
        if origin is None:
            return None
        return ".".join([origin, *reversed(parts)])

    # -- detection -------------------------------------------------------------------
    def detect(self) -> list[_Candidate]:
        detector = _Detector(self)
        detector.visit(self.tree)
        return detector.found

    def findings(self, candidates: list[_Candidate]) -> list[Finding]:
        found = []
        for c in candidates:
            if c.file is not self:
                continue
            start, end = self.span(c.node)
            found.append(
                Finding(
                    path=self.path,
                    line=c.position[0],
                    column=c.position[1],
                    end_line=self.position(max(start, end - 1))[0],
                    rule=c.rule,
                    original=self.text(c.node),
                    replacement=c.replacement,
                    rewrite=c.rewrite if c.enabled else None,
                    reason="" if c.enabled else c.reason,
                )
            )
        return sorted(found, key=lambda f: (f.line, f.column, f.rule, f.end_line))


class _Detector(ast.NodeVisitor):
    """Walks one file and proposes a candidate per idiom."""

    def __init__(self, file: _File) -> None:
        self.file = file
        self.found: list[_Candidate] = []
        self.reported: set[int] = set()  # nodes already reported (no second finding)

    # -- helpers -------------------------------------------------------------------------
    def add(
        self,
        node: ast.AST,
        rule: str,
        replacement: str | None = None,
        *,
        position: tuple[int, int] | None = None,
        **fields: object,
    ) -> _Candidate:
        if position is None:
            position = (node.lineno, self.file.position(self.file.span(node)[0])[1])  # type: ignore[attr-defined]
        candidate = _Candidate(
            self.file,
            node,
            rule,
            catalog.get(rule).tj if replacement is None else replacement,
            position,
            **fields,  # type: ignore[arg-type]
        )
        self.found.append(candidate)
        self.reported.add(id(node))
        return candidate

    def text(self, node: ast.AST) -> str:
        return self.file.text(node)

    def qualname(self, node: ast.AST) -> str | None:
        return self.file.qualname(node)

    def rename(self, func: ast.AST, new_name: str) -> Rewrite:
        start, end = self.file.span(func)
        return Rewrite(start, end, (new_name,))

    def arguments(self, call: ast.Call) -> str:
        return ", ".join(self.text(a) for a in [*call.args, *call.keywords])

    def arguments_span(self, call: ast.Call) -> tuple[int, int]:
        """From the first argument to the end of the call, closing parenthesis included."""
        first = min(self.file.span(a)[0] for a in [*call.args, *call.keywords])
        return first, self.file.span(call)[1]

    # -- generic traversal ----------------------------------------------------------------
    def generic_visit(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            self.visit(child)

    def visit_Name(self, node: ast.Name) -> None:
        parent = self.file.names.parents.get(node)
        if not (isinstance(parent, ast.Attribute) and parent.value is node):
            self.qualified(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        parent = self.file.names.parents.get(node)
        maximal = not (isinstance(parent, ast.Attribute) and parent.value is node)
        if maximal and self.qualified(node):
            return
        if self.attribute_idiom(node):
            return
        self.generic_visit(node)

    # -- names from the catalog's tables ----------------------------------------------------
    def qualified(self, node: ast.expr) -> bool:
        """Report a torch name the catalog's tables know; ``True`` if one was reported."""
        name = self.qualname(node)
        if name is None or id(node) in self.reported:
            return False
        parent = self.file.names.parents.get(node)
        call = parent if isinstance(parent, ast.Call) and parent.func is node else None
        if call is not None and self.custom_call(call, name):
            return True
        if name in _RENAMES:
            renamed, new_name = _RENAMES[name]
            if call is None:
                self.add(
                    node, renamed.id, new_name, reason="a reference, not a call: rename it by hand"
                )
            else:
                self.add(
                    call,
                    renamed.id,
                    f"{new_name}({self.arguments(call)})",
                    rewrite=self.rename(node, new_name),
                    call=call,
                    tj_name=new_name,
                    effect=_effect_of(new_name),
                    subject=call,
                    policy="device" if new_name == "tj.get_default_device" else "array",
                )
            return True
        if name in _ADVICE:
            self.add(call or node, _ADVICE[name].id)
            return True
        if call is not None and any(k.arg == "device" for k in call.keywords):
            if name.startswith("torch.") and not name.startswith(
                ("torch.cuda.", "torch.distributed.")
            ):
                self.factory(call, name)
                return True
        covering = _wildcard(name)
        if covering is not None and not self.inside_reported_call(node):
            self.add(call or node, covering.id)
            return True
        return False

    def inside_reported_call(self, node: ast.AST) -> bool:
        parent = self.file.names.parents.get(node)
        while parent is not None and not isinstance(parent, ast.stmt):
            if isinstance(parent, ast.Call) and id(parent) in self.reported:
                return True
            parent = self.file.names.parents.get(parent)
        return False

    def custom_call(self, call: ast.Call, name: str) -> bool:
        """The handlers of ``custom`` rows for calls of qualified names."""
        if name == "torch.device":
            self.device_call(call)
        elif name == "torch.load":
            self.load_call(call)
        elif name in ("os.environ.get", "os.getenv", "os.environ.setdefault", "os.environ.pop"):
            return self.environment(call, call.args[:1])
        else:
            return False
        return True

    def factory(self, call: ast.Call, name: str) -> None:
        """``factory-device`` and friends: a torch call told ``device=``."""
        keyword = next(k for k in call.keywords if k.arg == "device")
        last = name.rsplit(".", 1)[-1]
        if name in _TENSOR_FACTORIES:
            rule = "factory-tensor-device"
        elif name == "torch.Generator":
            rule = "generator-device"
        elif name.startswith("torch.nn.") and last[:1].isupper():
            rule = "module-device-kwarg"
        else:
            rule = "factory-device"
        self.add(call, rule, position=self.file.position(self.file.span(keyword)[0]))

    # -- torch.device -------------------------------------------------------------------------
    def device_call(self, call: ast.Call) -> None:
        """``device-*`` rows: ``torch.device(...)`` becomes ``tj.device(...)`` (same grammar)."""
        first = call.args[0] if call.args else None
        if isinstance(first, ast.JoinedStr) or (first is not None and _formats_a_device(first)):
            self.reported.add(id(first))  # this finding covers the string: not again on its own
        strings = [first.body, first.orelse] if isinstance(first, ast.IfExp) else []
        if first is None and any(k.arg == "type" for k in call.keywords):
            first = next(k.value for k in call.keywords if k.arg == "type")
        if strings and all(isinstance(s, ast.Constant) for s in strings):
            rule = "device-select"
        elif len(call.args) == 2 or any(k.arg == "index" for k in call.keywords):
            rule = "device-type-index"
        elif isinstance(first, ast.Constant) and isinstance(first.value, int):
            rule = "device-accelerator-index"
        elif isinstance(first, ast.Constant) and isinstance(first.value, str):
            rule = "device-indexed" if ":" in first.value else "device-type"
        elif isinstance(first, ast.JoinedStr) or (first is not None and _formats_a_device(first)):
            rule = "device-indexed"
        else:
            rule = "device-from-spec"
        self.add(
            call,
            rule,
            f"tj.device({self.arguments(call)})",
            rewrite=self.rename(call.func, "tj.device"),
            call=call,
            tj_name="tj.device",
            effect="value",
            subject=call,
            policy="device",
        )

    # -- torch.load -------------------------------------------------------------------------
    def load_call(self, call: ast.Call) -> None:
        """``torch-load*`` rows: ``torch.load`` becomes ``tj.load`` when that is the same load."""
        location = next((k.value for k in call.keywords if k.arg == "map_location"), None)
        if location is None and len(call.args) > 1:
            location = call.args[1]
        if location is None:
            rule = "torch-load"
        elif isinstance(location, ast.Dict):
            rule = "torch-load-map-location-dict"
        elif isinstance(location, ast.Lambda):
            rule = "torch-load-map-location-callable"
        else:
            rule = "torch-load-map-location"
        kept = [k for k in call.keywords if k.arg != "weights_only"]
        replacement = "tj.load(" + ", ".join(self.text(a) for a in [*call.args, *kept]) + ")"
        candidate = self.add(call, rule, replacement, call=call, tj_name="tj.load")
        reason = self.load_problem(call)
        if reason:
            candidate.reason = reason
            return
        pieces: list[str | tuple[int, int]] = ["tj.load("]
        for position, argument in enumerate([*call.args, *kept]):
            pieces += [", "] if position else []
            pieces.append(self.file.span(argument))
        pieces.append(")")
        start, end = self.file.span(call)
        candidate.rewrite = Rewrite(start, end, tuple(pieces))
        candidate.effect, candidate.subject = "value", call

    def load_problem(self, call: ast.Call) -> str:
        if len(call.args) > 2 or any(isinstance(a, ast.Starred) for a in call.args):
            return "tj.load takes the path and map_location only"
        for keyword in call.keywords:
            if keyword.arg is None:
                return "**kwargs: the scanner cannot see which arguments tj.load would get"
            if keyword.arg == "weights_only":
                if not (isinstance(keyword.value, ast.Constant) and keyword.value.value is True):
                    return _LOAD_REFUSED["weights_only"]
            elif keyword.arg in _LOAD_REFUSED:
                return _LOAD_REFUSED[keyword.arg]
            elif keyword.arg not in ("f", "map_location"):
                return f"tj.load has no {keyword.arg}="
        source = (
            call.args[0]
            if call.args
            else next((k.value for k in call.keywords if k.arg == "f"), None)
        )
        if source is None:
            return "no file given"
        kinds = self.file.values.kinds(source)
        if "file" in kinds:
            return f"tj.load takes a path, and {self.text(source)} is a file object"
        if not kinds <= {PATH, "args-value"}:
            return f"tj.load takes a path; the scanner cannot tell what {self.text(source)} is"
        return ""

    # -- calls ----------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        for keyword in node.keywords:
            if keyword.arg in ("pin_memory", "pin_memory_device") and not self._is_tj(node.func):
                self.add(
                    keyword,
                    "dataloader-pin-memory",
                    position=self.file.position(self.file.span(keyword)[0]),
                )
        func = node.func
        if isinstance(func, ast.Attribute) and self.qualname(func) is None:
            self.method_call(node, func)
        if (
            id(node) not in self.reported
            and isinstance(func, ast.Attribute)
            and func.attr == "format"
            and isinstance(func.value, ast.Constant)
            and isinstance(func.value.value, str)
            and func.value.value.startswith(_DEVICE_PREFIXES)
            and func.value.value.endswith("{}")
            and func.value.value.count("{") == 1
        ):
            self.add(node, "device-indexed", f"tj.device({self.text(node)})")
        self.generic_visit(node)

    def _is_tj(self, func: ast.AST) -> bool:
        name = self.qualname(func)
        return name is not None and name.startswith(TJ)

    def method_call(self, call: ast.Call, method: ast.Attribute) -> None:
        receiver = method.value
        name = method.attr
        kinds = self.file.values.kinds(receiver)
        where = self.file.method_position(method)
        if name == "to" and (call.args or call.keywords):
            self.to_call(call, method, where)
        elif name == "cuda":
            self.cuda_call(call, method, where)
        elif name == "cpu" and not call.args and not call.keywords:
            self.move(call, method, where, "tensor-cpu", '"cpu"', ())
        elif name == "pin_memory" and not call.args and not call.keywords:
            if self.file.values.module_framework(receiver) is None:
                start, end = self.file.span(call)
                self.add(
                    call,
                    "tensor-pin-memory",
                    f"tj.pin_memory({self.text(receiver)})",
                    position=where,
                    rewrite=Rewrite(
                        start, end, ("tj.pin_memory(", self.file.receiver_span(method), ")")
                    ),
                    call=call,
                    tj_name="tj.pin_memory",
                    effect="value",
                    subject=call,
                )
        elif name in _NEW_FACTORIES:
            self.add(call, "tensor-new-factory", position=where)
        elif name == "is_pinned" and not call.args:
            self.add(
                call,
                "tensor-pin-memory",
                f'{self.text(receiver)}.sharding.memory_kind == "pinned_host"',
                position=where,
            )
        elif name == "get_device" and not call.args:
            self.add(
                call,
                "tensor-device-type",
                f'-1 if tj.device_of({self.text(receiver)}).type == "cpu" '
                f"else tj.device_of({self.text(receiver)}).index",
                position=where,
            )
        elif name == "record_stream":
            self.add(call, "cuda-stream", position=where)
        elif name == "no_sync" and not call.args:
            self.add(call, "ddp-no-sync", position=where)
        elif "grad-scaler" in kinds:
            self.add(call, "grad-scaler", position=where)
        elif "cuda-event" in kinds:
            self.add(call, "cuda-event-timing", position=where)
        elif "cuda-stream" in kinds:
            self.add(call, "cuda-stream", position=where)
        elif "dist-sampler" in kinds:
            self.add(call, "dist-sampler-global-batch", position=where)

    def to_call(self, call: ast.Call, method: ast.Attribute, where: tuple[int, int]) -> None:
        """``tensor-to-*``, ``module-to*``: ``x.to(...)`` becomes ``tj.to_device(x, ...)``."""
        keywords = {k.arg for k in call.keywords}
        if keywords and keywords <= _MEMORY_FORMAT_ONLY and not call.args:
            return  # a layout change, not a device or dtype
        receiver = method.value
        framework = self.file.values.module_framework(receiver)
        dtype_only = (not call.args and keywords == {"dtype"}) or (
            len(call.args) == 1
            and not keywords - {"non_blocking", "copy"}
            and self.is_dtype(call.args[0])
        )
        if framework is not None:
            rule = "module-to-dtype" if dtype_only else "module-to"
        elif "non_blocking" in keywords:
            rule = "tensor-non-blocking"
        elif "copy" in keywords:
            rule = "tensor-to-copy"
        elif (
            len(call.args) == 2
            or {"device", "dtype"} <= keywords
            or (len(call.args) == 1 and "dtype" in keywords)
        ):
            rule = "tensor-to-device-dtype"
        elif dtype_only:
            rule = "tensor-to-dtype"
        elif call.args and self.is_tensor_like(call.args[0]):
            rule = "tensor-to-other"
        else:
            rule = "tensor-to-device"
        problem = ""
        if any(isinstance(a, ast.Starred) for a in call.args) or None in keywords:
            problem = "*args/**kwargs: the scanner cannot see what tj.to_device would get"
        elif len(call.args) > 2 or keywords - _TO_KEYWORDS:
            extra = sorted(str(k) for k in keywords - _TO_KEYWORDS)
            problem = f"tj.to_device has no {', '.join(extra)}=" if extra else "too many arguments"
        elif (
            len(call.args) == 2
            and isinstance(call.args[1], ast.Constant)
            and isinstance(call.args[1].value, bool)
        ):
            problem = "non_blocking given by position: write non_blocking=..."
        self.move(call, method, where, rule, None, (), problem=problem, framework=framework)

    def cuda_call(self, call: ast.Call, method: ast.Attribute, where: tuple[int, int]) -> None:
        """``tensor-cuda``: ``x.cuda(i, ...)`` becomes ``tj.to_device(x, "cuda:i", ...)``."""
        index = (
            call.args[0]
            if call.args
            else next((k.value for k in call.keywords if k.arg == "device"), None)
        )
        others = tuple(k for k in call.keywords if k.arg != "device")
        problem = ""
        if len(call.args) > 1 or any(
            k.arg not in ("device", "non_blocking") for k in call.keywords
        ):
            problem = "tj.to_device takes the device and non_blocking= only"
        if index is None:
            target = '"cuda"'
        elif (
            isinstance(index, ast.Constant)
            and isinstance(index.value, int)
            and not isinstance(index.value, bool)
        ):
            target = f'"cuda:{index.value}"'
        else:
            target = f'f"cuda:{{{self.text(index)}}}"'
            problem = problem or (
                f"{self.text(index)} may be None, an index or a device: write the target yourself"
            )
        self.move(call, method, where, "tensor-cuda", target, others, problem=problem)

    def move(
        self,
        call: ast.Call,
        method: ast.Attribute,
        where: tuple[int, int],
        rule: str,
        target: str | None,
        keywords: tuple[ast.keyword, ...],
        problem: str = "",
        framework: str | bool | None = False,
    ) -> None:
        """A ``.to``/``.cuda``/``.cpu`` call: ``tj.to_device(receiver, target, ...)``."""
        receiver = method.value
        parent = self.file.names.parents.get(call)
        if framework is False:
            framework = self.file.values.module_framework(receiver)
            if framework is not None:
                rule = "module-to"
        if framework is None and isinstance(parent, ast.Expr):
            rule = "module-to"  # the result is dropped: only a module moves in place
        start, end = self.file.span(call)
        receiver_span = self.file.receiver_span(method)
        if target is None:
            arguments = self.arguments(call)
            pieces: tuple[str | tuple[int, int], ...] = (
                "tj.to_device(",
                receiver_span,
                ", ",
                self.arguments_span(call),
            )
        else:
            extra = "".join(f", {self.text(k)}" for k in keywords)
            arguments = target + extra
            pieces = ("tj.to_device(", receiver_span, f", {target}")
            pieces += tuple(x for k in keywords for x in (", ", self.file.span(k)))
            pieces += (")",)
        replacement = f"tj.to_device({self.text(receiver)}, {arguments})"
        if rule == "tensor-cpu" and isinstance(parent, ast.Attribute) and parent.attr == "numpy":
            replacement = f"np.asarray({self.text(receiver)})"
        candidate = self.add(
            call,
            rule,
            replacement,
            position=where,
            rewrite=Rewrite(start, end, pieces),
            call=call,
            tj_name="tj.to_device",
            effect="value",
            subject=call,
        )
        if problem:
            candidate.reason = problem
        elif framework == "torch":
            candidate.reason = (
                f"{self.text(receiver)} is a torch.nn.Module: tj.to_device moves arrays and "
                "Flax NNX modules, so port the module first"
            )
        elif framework == "module":
            candidate.reason = (
                f"{self.text(receiver)} looks like a module, and the scanner cannot tell it is a "
                "Flax NNX module (tj.to_device leaves torch modules where they are)"
            )
        elif framework is None and isinstance(parent, ast.Expr):
            candidate.reason = (
                "the result is dropped, so this moves a module in place: tj.to_device moves "
                "Flax NNX modules only"
            )
        elif framework == "nnx":
            candidate.effect = "module"

    def is_tensor_like(self, node: ast.AST) -> bool:
        """``x.to(other)``: the argument is evidently an array, not a device."""
        if self.file.values.kinds(node) & {TORCH_TENSOR, JAX_ARRAY}:
            return True
        name = node.id if isinstance(node, ast.Name) else None
        return name is not None and (name in _TENSOR_NAMES or name.endswith(("_like", "_tensor")))

    def is_dtype(self, node: ast.AST) -> bool:
        name = self.qualname(node)
        if (
            name is not None
            and name.split(".")[-1] in _DTYPES
            and name.startswith(("torch.", "jax.numpy.", "numpy."))
        ):
            return True
        return isinstance(node, ast.Attribute) and node.attr == "dtype"

    # -- attributes -------------------------------------------------------------------------
    def attribute_idiom(self, node: ast.Attribute) -> bool:
        """``.device``, ``.is_cuda``, ``.module``, ``.require_backward_grad_sync``."""
        receiver = node.value
        parent = self.file.names.parents.get(node)
        where = self.file.method_position(node)
        if node.attr == "device" and self.is_next_parameters(receiver):
            assert isinstance(receiver, ast.Call)
            parameters = receiver.args[0]
            assert isinstance(parameters, ast.Call) and isinstance(parameters.func, ast.Attribute)
            model = parameters.func.value
            start, end = self.file.span(parameters)
            candidate = self.add(
                node,
                "parameters-device",
                f"next(tj.parameters({self.text(model)})).device",
                position=where,
                rewrite=Rewrite(
                    start, end, ("tj.parameters(", self.file.receiver_span(parameters.func), ")")
                ),
                call=parameters,
                tj_name="tj.parameters",
                effect="value",
                subject=node,
                policy="device",
            )
            if self.file.values.module_framework(model) != "nnx":
                candidate.reason = (
                    f"{self.text(model)} may be a torch module: tj.parameters reads Flax NNX "
                    "modules, so port the module first"
                )
            self.visit(model)
            return True
        if node.attr in ("is_cuda", "is_cpu") and isinstance(node.ctx, ast.Load):
            kind = "cuda" if node.attr == "is_cuda" else "cpu"
            self.add(
                node,
                "tensor-device-type",
                f'tj.device_of({self.text(receiver)}).type == "{kind}"',
                position=where,
            )
            self.visit(receiver)
            return True
        if (
            node.attr in ("type", "index")
            and isinstance(receiver, ast.Attribute)
            and receiver.attr == "device"
            and self.qualname(receiver) is None
        ):
            owner = receiver.value
            self.add(
                node,
                "tensor-device-type",
                f"tj.device_of({self.text(owner)}).{node.attr}",
                position=self.file.method_position(receiver),
            )
            self.visit(owner)
            return True
        if (
            node.attr == "device"
            and isinstance(node.ctx, ast.Load)
            and not self.in_factory_device(node)
            and self.qualname(receiver) is None
            and self.has_array_device(receiver)
        ):
            self.add(node, "tensor-device", f"tj.device_of({self.text(receiver)})", position=where)
            self.visit(receiver)
            return True
        if node.attr == "module" and (
            WRAPPED in self.file.values.kinds(receiver)
            or self.file.values.module_framework(receiver) is not None
        ):
            self.add(node, "ddp-module", self.text(receiver), position=where)
            self.visit(receiver)
            return True
        if node.attr == "require_backward_grad_sync":
            self.add(
                parent if isinstance(parent, ast.Assign) else node, "ddp-no-sync", position=where
            )
            self.visit(receiver)
            return True
        return False

    def has_array_device(self, receiver: ast.AST) -> bool:
        """``receiver.device`` reads where an array or module is, not a setting."""
        kinds = self.file.values.kinds(receiver)
        if kinds & {TORCH_TENSOR, JAX_ARRAY, "torch-module", NNX_MODULE}:
            return True
        if kinds & {"args", "args-value", PATH, NUMBER, "torch-device"}:
            return False
        name = receiver.id if isinstance(receiver, ast.Name) else None
        if isinstance(receiver, ast.Attribute):
            name = receiver.attr
        return name is None or name not in _SETTINGS

    def in_factory_device(self, node: ast.AST) -> bool:
        parent = self.file.names.parents.get(node)
        return isinstance(parent, ast.keyword) and parent.arg == "device"

    def is_next_parameters(self, node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "next"
            and self.file.names.is_builtin(node.func)
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Call)
            and isinstance(node.args[0].func, ast.Attribute)
            and node.args[0].func.attr == "parameters"
            and not node.args[0].args
        )

    # -- with torch.device(...) ----------------------------------------------------------------
    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            call = item.context_expr
            if isinstance(call, ast.Call) and self.qualname(call.func) == "torch.device":
                self.add(
                    call,
                    "default-device-context",
                    f"tj.device({self.arguments(call)})",
                    rewrite=self.rename(call.func, "tj.device"),
                    call=call,
                    tj_name="tj.device",
                    effect="default",
                    block=node.body,
                )
                for argument in [*call.args, *(k.value for k in call.keywords)]:
                    self.visit(argument)
            else:
                if "autocast" in self.file.values.kinds(call) and not isinstance(call, ast.Call):
                    self.add(call, "autocast")  # with ctx:, ctx = torch.autocast(...) or ...
                self.visit(item)
        for statement in node.body:
            self.visit(statement)

    # -- environment variables -------------------------------------------------------------------
    def environment(self, node: ast.AST, keys: list[ast.expr]) -> bool:
        key = keys[0] if keys else None
        found = _variable(key.value) if isinstance(key, ast.Constant) else None
        if found is None:
            return False
        rule, replacement = found
        self.add(node, rule, replacement)
        return True

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self.qualname(node.value) == "os.environ" and self.environment(node, [node.slice]):
            return
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        """``"RANK" in os.environ``: launched by torchrun or torch2jax-device run?"""
        found = None
        if (
            len(node.ops) == 1
            and isinstance(node.ops[0], (ast.In, ast.NotIn))
            and self.qualname(node.comparators[0]) == "os.environ"
            and isinstance(node.left, ast.Constant)
        ):
            found = _variable(node.left.value)
        if found is None:
            self.generic_visit(node)
            return
        self.add(node, found[0], f"{self.text(node)}  # torchrun and torch2jax-device run set it")

    # -- strings that name devices ---------------------------------------------------------
    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        first = node.values[0] if node.values else None
        if (
            id(node) not in self.reported
            and len(node.values) == 2
            and isinstance(first, ast.Constant)
            and isinstance(first.value, str)
            and first.value in _DEVICE_PREFIXES
            and isinstance(node.values[1], ast.FormattedValue)
        ):
            self.add(node, "device-indexed", f"tj.device({self.text(node)})")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        left = node.left
        if (
            id(node) not in self.reported
            and isinstance(node.op, ast.Mod)
            and isinstance(left, ast.Constant)
            and isinstance(left.value, str)
            and left.value in ("cuda:%d", "cuda:%s", "cuda:%i")
        ):
            self.add(node, "device-indexed", f"tj.device({self.text(node)})")
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        for key in node.keys:
            if isinstance(key, ast.Constant) and key.value in ("pin_memory", "pin_memory_device"):
                # DataLoader(**{"pin_memory": True, ...}): keyword arguments built as a dict.
                self.add(key, "dataloader-pin-memory")
        self.generic_visit(node)


def _variable(name: object) -> tuple[str, str | None] | None:
    """The rule and replacement of an environment variable the scanner knows."""
    if not isinstance(name, str):
        return None
    if name in _ENVIRONMENT:
        return _ENVIRONMENT[name]
    if name.startswith(_LAUNCHER_PREFIXES):
        return "dist-env", "unchanged: jax.distributed.initialize() reads it"
    return None


def _formats_a_device(node: ast.AST) -> bool:
    """``"cuda:{}".format(i)`` or ``"cuda:%d" % i``: an indexed device name."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        template = node.func.value if node.func.attr == "format" else None
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        template = node.left
    else:
        return False
    return (
        isinstance(template, ast.Constant)
        and isinstance(template.value, str)
        and template.value.startswith(_DEVICE_PREFIXES)
    )


def _wildcard(name: str) -> Idiom | None:
    best = ""
    for prefix in _WILDCARDS:
        if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > len(best):
            best = prefix
    return _WILDCARDS[best] if best else None


def _effect_of(tj_name: str) -> str:
    if tj_name in _ARRAY_RESULTS:
        return "value"
    if tj_name.startswith("tj.distributed."):
        return "dist"
    if tj_name in ("tj.set_default_device",):
        return "default"
    if (
        tj_name.startswith(("tj.cuda.", "tj.accelerator.", "tj.backends."))
        or tj_name == "tj.get_default_device"
    ):
        return "runtime"
    return "none"


# -- planning ------------------------------------------------------------------------------
def _plan(files: list[_File], candidates: list[_Candidate]) -> None:
    """Decide which rewrites are correct on their own (see the module docstring)."""
    for candidate in candidates:
        if candidate.rewrite is not None and candidate.file.tj_taken:
            candidate.disable(candidate.file.tj_taken)
    order = _StartupOrder(files, candidates)
    while True:
        changed = False
        rewritten = {id(c.call) for c in candidates if c.enabled and c.call is not None}
        is_rewritten = _member(rewritten)

        places = [c for c in candidates if c.rule in _PLACES_DATA and not c.enabled]
        defaults = any(c.enabled and c.effect == "default" for c in candidates)
        creates = _torch_creation(files, rewritten) if defaults else []
        dist_blocker = next((c for c in candidates if _is_dist(c) and not c.enabled), None)
        for candidate in candidates:
            if candidate.enabled:
                reason = _problem(candidate, is_rewritten, places, creates, dist_blocker)
                if reason:
                    candidate.disable(reason)
                    changed = True
        changed = changed or order.check() or _compose_check(files, candidates)
        if not changed:
            break
    order.report()


def _member(ids: set[int]) -> Callable[[ast.AST], bool]:
    return lambda node: id(node) in ids


def _problem(
    candidate: _Candidate,
    is_rewritten: Callable[[ast.AST], bool],
    places: list[_Candidate],
    creates: list[ast.Call],
    dist_blocker: _Candidate | None,
) -> str:
    values = candidate.file.values
    if candidate.effect == "value" and candidate.subject is not None:
        reason, read_by_jax = values.escape(candidate.subject, candidate.policy, is_rewritten)
        if reason:
            new = "a tj.device" if candidate.policy == "device" else "JAX arrays"
            return f"it would become {new}, and {reason}"
        if candidate.policy == "array" and not read_by_jax and not _already_jax(candidate):
            return (
                "no JAX code reads the result, so it stays torch's (a JAX array would only "
                "change its dtype rules: 64-bit data becomes 32-bit)"
            )
    if candidate.effect in ("runtime", "default") and places:
        first = places[0]
        return (
            f"torch still places data on devices ({first.file.path}:{first.position[0]}: "
            f"{first.rule}); this call changes torch's runtime state, so port that first"
        )
    if candidate.effect == "default":
        if creates:
            return (
                f"torch still creates tensors (line {creates[0].lineno}: "
                f"{ast.unparse(creates[0].func)}), and they would stop following it"
            )
        if candidate.block is not None:
            unknown = _unknown_call(candidate.file, candidate.block)
            if unknown is not None:
                return (
                    f"line {unknown.lineno}: {ast.unparse(unknown.func)}(...) may create torch "
                    "tensors, which would stop following the block's device"
                )
    if candidate.effect == "dist" and dist_blocker is not None and dist_blocker is not candidate:
        return (
            f"torch.distributed is still used ({dist_blocker.file.path}:"
            f"{dist_blocker.position[0]}: {dist_blocker.rule}): the process group stays torch's "
            "until every call is ported"
        )
    return ""


def _already_jax(candidate: _Candidate) -> bool:
    """The call moves a JAX array, which has no ``.to``/``.cpu``/``.cuda`` of its own."""
    call = candidate.call
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        return False
    return candidate.file.values.kinds(call.func.value) <= {JAX_ARRAY, NNX_MODULE}


def _is_dist(candidate: _Candidate) -> bool:
    if candidate.rule.startswith("dist-") and candidate.rule not in (
        "dist-env",
        "dist-local-rank",
        "dist-launch",
    ):
        return True
    return candidate.rule in ("sync-batchnorm", "ddp-module", "ddp-no-sync", "mp-spawn")


def _torch_creation(files: list[_File], rewritten: set[int]) -> list[ast.Call]:
    """Calls that create torch tensors or modules and stay torch's."""
    found: list[ast.Call] = []
    for file in files:
        for node in ast.walk(file.tree):
            if isinstance(node, ast.Call) and id(node) not in rewritten:
                name = file.qualname(node.func)
                if name in _TORCH_CREATES or (
                    name is not None
                    and name.startswith("torch.nn.")
                    and name.split(".")[-1][:1].isupper()
                ):
                    found.append(node)
                elif isinstance(node.func, ast.Name) and "torch-module" in file.values.kinds(node):
                    found.append(node)
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def _unknown_call(file: _File, block: list[ast.stmt]) -> ast.Call | None:
    """The first call in ``block`` that may create torch tensors."""
    for statement in block:
        for node in ast.walk(statement):
            if not isinstance(node, ast.Call):
                continue
            name = file.qualname(node.func)
            if name is not None and name.startswith((TJ, "jax", "flax", "optax", "numpy", "math")):
                continue
            if isinstance(node.func, ast.Name) and file.names.is_builtin(node.func):
                continue
            if name is None and isinstance(node.func, ast.Attribute):
                if file.values.kinds(node.func.value) <= {JAX_ARRAY, NNX_MODULE, NUMBER, PATH}:
                    continue
            return node
    return None


def _compose_check(files: list[_File], candidates: list[_Candidate]) -> bool:
    """Disable rewrites that do not compose, or leave a file that does not parse."""
    changed = False
    for file in files:
        own = [c for c in candidates if c.file is file and c.enabled]
        if not own:
            continue
        by_rewrite: dict[Rewrite, list[_Candidate]] = {}
        for c in own:
            assert c.rewrite is not None
            by_rewrite.setdefault(c.rewrite, []).append(c)
        data, rejected = compose(file.data, list(by_rewrite))
        for rewrite in rejected:
            for c in by_rewrite[rewrite]:
                c.disable("it overlaps another rewrite that leaves no room for it")
            changed = True
        if rejected or _parses(data):
            continue
        broken = [r for r in by_rewrite if not _parses(compose(file.data, [r])[0])]
        for rewrite in broken or list(by_rewrite):
            for c in by_rewrite[rewrite]:
                c.disable("the rewritten line would not parse; please report this")
        changed = True
    return changed


def _parses(data: bytes) -> bool:
    try:
        ast.parse(with_tj_import(data.decode()))
    except SyntaxError:
        return False
    return True


class _StartupOrder:
    """Calls that start JAX before the job is joined (or JAX configured), per process.

    A process's calls are followed in the order they run: module-level statements, then
    the functions they call (the file's own functions are entered where they are
    called), and for ``mp.spawn``/``Process(target=...)`` a new process that imports the
    module (without its ``__main__`` block) and runs the target.
    """

    def __init__(self, files: list[_File], candidates: list[_Candidate]) -> None:
        self.files = files
        self.by_call: dict[int, list[_Candidate]] = {}
        for candidate in candidates:
            for node in (candidate.node, candidate.call):
                if node is not None:
                    self.by_call.setdefault(id(node), []).append(candidate)
        self.candidates = candidates
        self.violations: dict[int, tuple[_Candidate | None, ast.Call, ast.Call, str, _File]] = {}
        self.traces = [(file, trace) for file in files for trace in _Traces(file).traces()]

    def check(self) -> bool:
        """Disable rewrites that would start JAX too early; ``True`` if any was."""
        changed = False
        for file, trace in self.traces:
            changed |= self._check_trace(file, trace)
        return changed

    def _check_trace(self, file: _File, trace: list[ast.Call]) -> bool:
        changed = False
        started: list[tuple[ast.Call, _Candidate | None]] = []
        for call in trace:
            first = self._first(file, call)
            if first is not None:
                rewritten_first = self._ported_first(file, call)
                for start, candidate in started:
                    key = id(start)
                    if key not in self.violations:
                        self.violations[key] = (candidate, start, call, first, file)
                    if rewritten_first and candidate is not None and candidate.enabled:
                        candidate.disable(
                            f"it would start JAX before {first} (line {call.lineno}); "
                            "move it after that line"
                        )
                        changed = True
                    elif rewritten_first and candidate is None:
                        for c in self.by_call.get(id(call), []):
                            if c.enabled:
                                c.disable(
                                    f"line {start.lineno} starts JAX before it; move that line "
                                    "after this one"
                                )
                                changed = True
                return changed  # after the job is joined, starting JAX is fine
            starter = self._starter(file, call)
            if starter is not None:
                started.append((call, starter if isinstance(starter, _Candidate) else None))
        return changed

    def _first(self, file: _File, call: ast.Call) -> str | None:
        name = file.qualname(call.func)
        return _FIRST.get(name) if name is not None else None

    def _ported_first(self, file: _File, call: ast.Call) -> bool:
        """The call is (or becomes) torch2jax_device's or JAX's, which care about the order."""
        name = file.qualname(call.func)
        if name is not None and not name.startswith("torch."):
            return True
        return any(c.enabled for c in self.by_call.get(id(call), []))

    def _starter(self, file: _File, call: ast.Call) -> _Candidate | bool | None:
        """A candidate whose port starts JAX, ``True`` for JAX code that does, else ``None``."""
        for candidate in self.by_call.get(id(call), []):
            if candidate.rule in _ADVICE_STARTS:
                return candidate
            if candidate.tj_name == "tj.device":
                if _device_starts(candidate):
                    return candidate
            elif candidate.tj_name is not None and candidate.tj_name not in _QUIET:
                return candidate
        name = file.qualname(call.func)
        if name is None:
            return None
        if name.startswith(TJ + "."):
            short = "tj." + name[len(TJ) + 1 :]
            if short in _QUIET or name in _FIRST:
                return None
            return True if not short.startswith(("tj.porting", "tj.distributed")) else None
        if name in _JAX_STARTERS or name.startswith(("jax.numpy.", "jax.random.")):
            return True
        if name.startswith("flax.nnx.") and name.split(".")[-1][:1].isupper():
            return True
        return None

    def report(self) -> None:
        """One ``startup-order`` finding per call that starts JAX too early."""
        for candidate, start, first_call, first, file in self.violations.values():
            what = ast.unparse(start.func)
            self.candidates.append(
                _Candidate(
                    file,
                    start,
                    "startup-order",
                    catalog.get("startup-order").tj,
                    (start.lineno, file.position(file.span(start)[0])[1]),
                    reason=(
                        f"{what}(...) {'would start' if candidate is not None else 'starts'} JAX "
                        f"before {first} (line {first_call.lineno}) runs: move it after that line"
                    ),
                )
            )


def _device_starts(candidate: _Candidate) -> bool:
    """``tj.device(0)`` resolves the accelerator at once; names only parse."""
    call = candidate.call
    return (
        isinstance(call, ast.Call)
        and bool(call.args)
        and isinstance(call.args[0], ast.Constant)
        and isinstance(call.args[0].value, int)
    ) or candidate.rule == "default-device-context"


class _Traces:
    """The calls of one file in the order they run, per process."""

    _SPAWN = frozenset(
        {
            "torch.multiprocessing.spawn",
            "torch.multiprocessing.start_processes",
            "multiprocessing.Process",
            "torch.multiprocessing.Process",
        }
    )

    # A trace stops growing here (a file calling its functions from everywhere).
    _LONGEST = 100_000

    def __init__(self, file: _File) -> None:
        self.file = file
        self.children: list[ast.AST] = []
        self.bodies: dict[int, list[ast.Call]] = {}  # a function's calls, entered once

    def traces(self) -> list[list[ast.Call]]:
        main: list[ast.Call] = []
        self._statements(self.file.tree.body, main, [], main_block=True)
        found = [main]
        for target in self.children:
            child: list[ast.Call] = []
            self._statements(self.file.tree.body, child, [], main_block=False)
            self._enter(target, child, [])
            found.append(child)
        return found

    def _statements(
        self,
        statements: list[ast.stmt],
        out: list[ast.Call],
        stack: list[ast.AST],
        main_block: bool,
    ) -> None:
        for statement in statements:
            if not main_block and _is_main_guard(statement):
                continue
            self._node(statement, out, stack)

    def _node(self, node: ast.AST, out: list[ast.Call], stack: list[ast.AST]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for expression in [*node.decorator_list, *node.args.defaults]:
                self._node(expression, out, stack)
            return
        if isinstance(node, ast.Lambda):
            return
        for child in ast.iter_child_nodes(node):
            self._node(child, out, stack)
        if isinstance(node, ast.Call) and len(out) < self._LONGEST:
            out.append(node)
            self._spawned(node)
            if len(stack) < 8:
                for definition in self._callees(node):
                    if definition not in stack:
                        self._enter(definition, out, stack)

    def _callees(self, call: ast.Call) -> list[ast.AST]:
        """The file's functions (or classes) a call enters: ``f()``, ``self.method()``."""
        func = call.func
        if isinstance(func, ast.Name):
            return [b.node for b in self.file.names.bindings(func) if b.kind in ("def", "class")]
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            klass = self.file.names.enclosing(call, ast.ClassDef)
            if func.value.id == "self" and isinstance(klass, ast.ClassDef):
                return [
                    s
                    for s in klass.body
                    if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and s.name == func.attr
                ]
        return []

    def _enter(self, definition: ast.AST, out: list[ast.Call], stack: list[ast.AST]) -> None:
        if isinstance(definition, ast.ClassDef):
            init = next(
                (
                    s
                    for s in definition.body
                    if isinstance(s, ast.FunctionDef) and s.name == "__init__"
                ),
                None,
            )
            if init is None:
                return
            definition = init
        assert isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef))
        if id(definition) not in self.bodies:
            body: list[ast.Call] = []
            stack.append(definition)
            for statement in definition.body:
                self._node(statement, body, stack)
            stack.pop()
            self.bodies[id(definition)] = body
        out.extend(self.bodies[id(definition)][: self._LONGEST - len(out)])

    def _spawned(self, call: ast.Call) -> None:
        name = self.file.qualname(call.func)
        if name not in self._SPAWN:
            return
        target = call.args[0] if call.args else None
        target = next((k.value for k in call.keywords if k.arg in ("fn", "target")), target)
        if isinstance(target, ast.Name):
            for binding in self.file.names.bindings(target):
                if binding.kind == "def" and binding.node not in self.children:
                    self.children.append(binding.node)


def _is_main_guard(statement: ast.stmt) -> bool:
    test = statement.test if isinstance(statement, ast.If) else None
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )
