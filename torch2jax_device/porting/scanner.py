"""Find PyTorch device idioms in source code and say what each becomes (``scan``).

A real parser (``ast``), never regular expressions over text: imports are followed
(``import torch as T``, ``from torch.cuda import is_available``), so ``T.device(...)``
and ``is_available()`` are recognized too. Every rule is named by the id of its row in
the idiom catalog, and the tables of plain renames and advice-only calls are derived
from the rows' ``torch_api`` / ``tj_api`` / ``rewrite`` fields; the ``custom`` rows
(``torch.device``, ``.to``, ``.cuda()``, ``torch.load``...) have their own handlers
below. Rewrites that are mechanical and safe carry byte-exact edits
(``Finding.edits``); the rest are findings only.
"""

from __future__ import annotations

import ast
import dataclasses

from . import catalog
from .idiom import Idiom

__all__ = ["RULES", "Edit", "Finding", "apply_edits", "scan_source"]

# torch name -> (rule, the torch2jax_device name that replaces it one for one).
_RENAMED_CALLS = {
    torch_name: (row.id, tj_name)
    for row in catalog.CATALOG
    if row.rewrite == "rename"
    for torch_name, tj_name in zip(row.torch_api, row.tj_api, strict=True)
}
# torch name -> rule, for calls reported with their row's advice and never rewritten.
_ADVICE_CALLS = {
    torch_name: row.id
    for row in catalog.CATALOG
    if row.rewrite == "advice"
    for torch_name in row.torch_api
}
_DATALOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
# torchrun's variables, and what tj.distributed answers for each.
_TORCHRUN_VARIABLES = {
    "LOCAL_RANK": "tj.distributed.get_local_rank()",
    "RANK": "tj.distributed.get_rank()",
    "WORLD_SIZE": "tj.distributed.get_world_size()",
    "LOCAL_WORLD_SIZE": "int(os.environ['LOCAL_WORLD_SIZE'])",
}
# torch.load arguments tj.load does not take: such calls are findings, not rewrites.
_TORCH_LOAD_ONLY = frozenset({"weights_only", "mmap", "pickle_module", "pickle_load_args"})

#: Every rule id the scanner can report; each is a row of the idiom catalog.
RULES: frozenset[str] = frozenset(row.id for row in catalog.CATALOG if row.rewrite)


@dataclasses.dataclass(frozen=True)
class Edit:
    """Replace bytes ``[start, end)`` of the file with ``text``."""

    start: int
    end: int
    text: str


@dataclasses.dataclass(frozen=True)
class Finding:
    """One idiom found: where, which catalog row, the code, and what it becomes."""

    path: str
    line: int
    column: int
    rule: str
    original: str
    replacement: str
    edits: tuple[Edit, ...] = ()

    @property
    def fixable(self) -> bool:
        """Whether ``--diff`` rewrites it (mechanical and safe)."""
        return bool(self.edits)

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
    tree = ast.parse(source, filename=path)
    visitor = _Visitor(source, path)
    visitor.visit(tree)
    return sorted(visitor.findings, key=lambda f: (f.line, f.column, f.rule))


def apply_edits(source: str, findings: list[Finding]) -> str:
    """``source`` with every fixable finding rewritten, importing ``tj`` if needed."""
    edits = sorted({edit for finding in findings for edit in finding.edits}, key=lambda e: e.start)
    if not edits:
        return source
    data = source.encode()
    pieces, position = [], 0
    for edit in edits:
        pieces += [data[position : edit.start], edit.text.encode()]
        position = edit.end
    pieces.append(data[position:])
    return _with_tj_import(b"".join(pieces).decode())


def _with_tj_import(source: str) -> str:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(
            alias.name == "torch2jax_device" and alias.asname == "tj" for alias in node.names
        ):
            return source
    lines = source.splitlines(keepends=True)
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    after = imports[-1].end_lineno if imports else _after_docstring(tree)
    return "".join(lines[:after]) + "import torch2jax_device as tj\n" + "".join(lines[after:])


def _after_docstring(tree: ast.Module) -> int:
    first = tree.body[0] if tree.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        return first.end_lineno or 0
    return 0


class _Visitor(ast.NodeVisitor):
    def __init__(self, source: str, path: str) -> None:
        self.source = source
        self.data = source.encode()
        self.path = path
        self.aliases: dict[str, str] = {}  # local name -> dotted origin
        self.findings: list[Finding] = []
        self.inside_device_call: set[int] = set()  # f-strings already reported with it
        starts = [0]
        for line in self.data.splitlines(keepends=True):
            starts.append(starts[-1] + len(line))
        self.line_starts = starts

    # -- helpers ---------------------------------------------------------------
    def offset(self, line: int, column: int) -> int:
        return self.line_starts[line - 1] + column

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def text(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.data[start:end].decode()

    def qualname(self, node: ast.AST) -> str | None:
        """``torch.cuda.is_available`` for ``T.cuda.is_available`` after ``import torch as T``."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        origin = self.aliases.get(node.id)
        if origin is None:
            return None
        return ".".join([origin, *reversed(parts)])

    def report(self, node: ast.AST, rule: str, replacement: str, *edits: Edit) -> None:
        self.findings.append(
            Finding(
                path=self.path,
                line=node.lineno,  # type: ignore[attr-defined]
                column=node.col_offset + 1,  # type: ignore[attr-defined]
                rule=rule,
                original=self.text(node),
                replacement=replacement,
                edits=edits,
            )
        )

    # -- imports -----------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.aliases[alias.asname] = alias.name
            else:
                top = alias.name.split(".")[0]
                self.aliases[top] = top
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and node.level == 0:
            for alias in node.names:
                self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        self.generic_visit(node)

    # -- idioms --------------------------------------------------------------------
    def visit_Subscript(self, node: ast.Subscript) -> None:
        variable = self._torchrun_variable([node.slice])
        if variable and self.qualname(node.value) == "os.environ":
            self.report(node, "dist-local-rank", _TORCHRUN_VARIABLES[variable])
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        if any(isinstance(k, ast.Constant) and k.value == "pin_memory" for k in node.keys):
            # DataLoader(**{"pin_memory": True, ...}): kwargs built as a dict.
            self.report(node, "dataloader-pin-memory", catalog.get("dataloader-pin-memory").tj)
        self.generic_visit(node)

    def _torchrun_variable(self, nodes: list[ast.expr]) -> str:
        first = nodes[0] if nodes else None
        if isinstance(first, ast.Constant) and first.value in _TORCHRUN_VARIABLES:
            return str(first.value)
        return ""

    def _is_name(self, node: ast.AST, name: str) -> bool:
        return isinstance(node, ast.Name) and node.id == name and name not in self.aliases

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        first = node.values[0] if node.values else None
        if (
            isinstance(first, ast.Constant)
            and isinstance(first.value, str)
            and first.value in ("cuda:", "cpu:", "gpu:")
            and len(node.values) > 1
            and id(node) not in self.inside_device_call
        ):
            # f"cuda:{local_rank}" names the same device through tj.device.
            self.report(node, "device-indexed", f"tj.device({self.text(node)})")
        self.generic_visit(node)

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            call = item.context_expr
            if isinstance(call, ast.Call) and self.qualname(call.func) == "torch.device":
                self.report(
                    call, "default-device-context", f"tj.device({self._args(call)})",
                    self._rename(call.func, "tj.device"),
                )  # fmt: skip
                for argument in [*call.args, *(k.value for k in call.keywords)]:
                    self.visit(argument)
            else:
                self.visit(item)
        for statement in node.body:
            self.visit(statement)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        value = node.value
        if (
            node.attr == "numpy"
            and isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr == "cpu"
            and not value.args
        ):
            # x.cpu().numpy(): a JAX array has no .numpy(); np.asarray is the port.
            receiver = value.func.value
            self.report(value, "tensor-cpu", f"np.asarray({self.text(receiver)})")
            self.visit(receiver)
            return
        if node.attr == "device" and self._is_next_parameters(node.value):
            call = node.value
            assert isinstance(call, ast.Call)
            parameters = call.args[0]
            assert isinstance(parameters, ast.Call) and isinstance(parameters.func, ast.Attribute)
            model = parameters.func.value
            start, end = self.span(parameters)
            model_start, model_end = self.span(model)
            self.report(
                node, "parameters-device", f"next(tj.parameters({self.text(model)})).device",
                Edit(start, model_start, "tj.parameters("), Edit(model_end, end, ")"),
            )  # fmt: skip
            self.visit(model)
            return
        self.generic_visit(node)

    def _is_next_parameters(self, node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "next"
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Call)
            and isinstance(node.args[0].func, ast.Attribute)
            and node.args[0].func.attr == "parameters"
            and not node.args[0].args
        )

    def visit_Call(self, node: ast.Call) -> None:
        name = self.qualname(node.func)
        if name == "torch.device":
            self._device_call(node)
        elif name == "torch.load":
            self._load_call(node)
        elif name in _RENAMED_CALLS:
            rule, new_name = _RENAMED_CALLS[name]
            self.report(
                node, rule, f"{new_name}({self._args(node)})", self._rename(node.func, new_name)
            )
        elif name in _ADVICE_CALLS:
            rule = _ADVICE_CALLS[name]
            self.report(node, rule, catalog.get(rule).tj)
        elif (name in _DATALOADERS or (name is None and self._is_name(node.func, "dict"))) and any(
            k.arg == "pin_memory" for k in node.keywords
        ):
            self.report(node, "dataloader-pin-memory", catalog.get("dataloader-pin-memory").tj)
        elif name in ("os.environ.get", "os.getenv") and self._torchrun_variable(node.args[:1]):
            variable = self._torchrun_variable(node.args[:1])
            self.report(node, "dist-local-rank", _TORCHRUN_VARIABLES[variable])
        elif name is None and isinstance(node.func, ast.Attribute):
            self._method_call(node, node.func)
        self.generic_visit(node)

    def _device_call(self, node: ast.Call) -> None:
        first = node.args[0] if node.args else None
        if isinstance(first, ast.JoinedStr):
            self.inside_device_call.add(id(first))
        if isinstance(first, ast.IfExp) and self._calls(first.test, "torch.cuda.is_available"):
            rule = "device-select"
        elif len(node.args) == 2 or any(k.arg == "index" for k in node.keywords):
            rule = "device-type-index"
        elif isinstance(first, ast.Constant) and isinstance(first.value, int):
            rule = "device-accelerator-index"
        else:
            rule = "device-indexed"
        self.report(
            node, rule, f"tj.device({self._args(node)})", self._rename(node.func, "tj.device")
        )

    def _load_call(self, node: ast.Call) -> None:
        location = next((k.value for k in node.keywords if k.arg == "map_location"), None)
        if location is None and len(node.args) > 1:
            location = node.args[1]
        if location is None:
            rule = "torch-load"
        elif isinstance(location, ast.Dict):
            rule = "torch-load-map-location-dict"
        elif isinstance(location, ast.Lambda):
            rule = "torch-load-map-location-callable"
        else:
            rule = "torch-load-map-location"
        replacement = f"tj.load({self._args(node)})"
        if any(k.arg in _TORCH_LOAD_ONLY for k in node.keywords):
            self.report(node, rule, replacement)  # tj.load always loads weights only
        else:
            self.report(node, rule, replacement, self._rename(node.func, "tj.load"))

    def _calls(self, node: ast.AST, name: str) -> bool:
        return isinstance(node, ast.Call) and self.qualname(node.func) == name

    def _method_call(self, node: ast.Call, method: ast.Attribute) -> None:
        receiver = method.value
        if method.attr == "to" and (node.args or node.keywords):
            self._to_call(node, receiver)
        elif method.attr == "cuda" and not node.keywords and len(node.args) <= 1:
            target = '"cuda"'
            if node.args:
                index = node.args[0]
                if not (isinstance(index, ast.Constant) and isinstance(index.value, int)):
                    self.report(node, "tensor-cuda", f"tj.to_device({self.text(receiver)}, ...)")
                    return
                target = f'"cuda:{index.value}"'
            self._wrap(node, receiver, "tensor-cuda", target)
        elif method.attr == "cpu" and not node.args and not node.keywords:
            self._wrap(node, receiver, "tensor-cpu", '"cpu"')
        elif method.attr == "pin_memory" and not node.args and not node.keywords:
            start, end = self.span(receiver)
            _, call_end = self.span(node)
            self.report(
                node, "tensor-pin-memory", f"tj.pin_memory({self.text(receiver)})",
                Edit(start, start, "tj.pin_memory("), Edit(end, call_end, ")"),
            )  # fmt: skip

    def _to_call(self, node: ast.Call, receiver: ast.AST) -> None:
        keywords = {k.arg for k in node.keywords}
        if "non_blocking" in keywords:
            rule = "tensor-non-blocking"
        elif "copy" in keywords:
            rule = "tensor-to-copy"
        elif len(node.args) == 2 or {"device", "dtype"} <= keywords:
            rule = "tensor-to-device-dtype"
        elif (node.args and self._is_dtype(node.args[0])) or keywords == {"dtype"}:
            rule = "tensor-to-dtype"
        else:
            rule = "tensor-to-device"
        first = [*node.args, *(k for k in node.keywords)][0]
        start, end = self.span(receiver)
        first_start = self.span(first)[0]
        self.report(
            node, rule, f"tj.to_device({self.text(receiver)}, {self._args(node)})",
            Edit(start, start, "tj.to_device("), Edit(end, first_start, ", "),
        )  # fmt: skip

    def _is_dtype(self, node: ast.AST) -> bool:
        name = self.qualname(node)
        return name is not None and name.startswith("torch.") and name.split(".")[-1] in _DTYPES

    def _wrap(self, node: ast.Call, receiver: ast.AST, rule: str, target: str) -> None:
        start, _ = self.span(receiver)
        _, receiver_end = self.span(receiver)
        _, end = self.span(node)
        self.report(
            node, rule, f"tj.to_device({self.text(receiver)}, {target})",
            Edit(start, start, "tj.to_device("), Edit(receiver_end, end, f", {target})"),
        )  # fmt: skip

    def _rename(self, func: ast.AST, new_name: str) -> Edit:
        start, end = self.span(func)
        return Edit(start, end, new_name)

    def _args(self, node: ast.Call) -> str:
        return ", ".join(self.text(argument) for argument in [*node.args, *node.keywords])

    def generic_visit(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            self.visit(child)


_DTYPES = frozenset(
    "float16 half bfloat16 float32 float float64 double int8 int16 int32 int int64 long "
    "uint8 bool complex64 complex128 float8_e4m3fn float8_e5m2".split()
)
