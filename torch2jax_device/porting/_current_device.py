"""torch's current device, kept as torch's: the rewrites that would read tj's instead.

torch and tj each keep a current device of their own (per thread): ``torch.cuda.set_device(1)``
sets torch's, ``tj.cuda.set_device(1)`` tj's. An index-less accelerator (``x.cuda()``,
``x.to("cuda")``, ``torch.device("cuda")``) and a query without a device
(``torch.cuda.current_device()``, ``torch.cuda.memory_allocated()``) resolve through
the current device of the library that runs them. So while a torch current-device setter
stays torch's (torch code still places data, a library built on torch sets it, ...), a
rewrite of such a line to ``tj`` would resolve through tj's current device, ``cuda:0``,
where torch's is ``cuda:1``: it is not made, and its reason cites the setter. The other
way round, a setter is not rewritten while a line that reads the current device stays
torch's.

Decided: the scanner does not rewrite such a line with the setter's index written in
(``.cuda()`` -> ``tj.to_device(x, "cuda:1")``), even when that index is a literal. It would be
right only where that setter is the one in force on every path to the line, which the
scanner cannot prove for state that a call of any function, another setter or the end of
a ``with`` changes; the reason says to write the index by hand.

What a setter reaches (``reaches``): ``with torch.cuda.device(i):`` its block, and, when
the block calls code the scanner does not know is a library's, every function of the
program (the block may call it), and when it imports, the other modules of the program
(one first imported there runs under it); ``torch.cuda.set_device(i)`` (and
``torch.accelerator.set_device_index``, and the import of a library that sets torch's
current device for the process: DeepSpeed, Accelerate, Lightning...) stays set: it reaches
every line of the program but the module-level code of its own file above it, which runs
once, before it, when it is itself module-level code run once.
"""

from __future__ import annotations

import ast
import dataclasses

from ._candidate import Candidate
from ._source import SourceFile
from ._values import JAX_ARRAY, NNX_MODULE, TORCH_MODULE, TORCH_TENSOR, prefixed

__all__ = [
    "CURRENT_DEVICE_TJ",
    "SETTERS",
    "Setter",
    "reads_current_device",
    "setter_of",
    "setters",
]

# Rows whose call sets torch's current device (the ``with`` form for the context row).
SETTERS = frozenset({"cuda-set-device", "accelerator-set-device-index", "cuda-device-context"})
# tj calls that resolve through tj's current device: for each, where its device argument
# is (position, keyword), ``None`` when it always does (no device argument). A call
# without its device argument answers for, or acts on, the current device.
CURRENT_DEVICE_TJ: dict[str, tuple[int, str] | None] = {
    "tj.cuda.current_device": None,
    "tj.accelerator.current_device_index": None,
    "tj.get_default_device": None,
    "tj.cuda.is_bf16_supported": None,
    **{
        f"tj.cuda.{name}": (0, "device")
        for name in (
            "get_device_capability",
            "get_device_name",
            "get_device_properties",
            "max_memory_allocated",
            "max_memory_reserved",
            "mem_get_info",
            "memory_allocated",
            "memory_reserved",
            "memory_stats",
            "memory_summary",
            "reset_peak_memory_stats",
            "synchronize",
        )
    },
    "tj.accelerator.synchronize": (0, "device"),
    "tj.cuda.set_per_process_memory_fraction": (1, "device"),
}
# tj calls that take a device to place or name, and where it is: an index-less
# accelerator given there resolves through tj's current device.
_DEVICE_ARGUMENT: dict[str, tuple[int, str]] = {
    "tj.device": (0, "type"),
    "tj.set_default_device": (0, "device"),
    "tj.load": (1, "map_location"),
    "tj.load_file": (1, "device"),
    "tj.to_device": (1, "device"),
}
# Device types that have no current device (torch's ``cpu`` and ``meta``).
_NO_CURRENT = frozenset({"cpu", "meta"})
# Device types a script names (a string that names none is not a device).
_DEVICE_TYPES = frozenset("cuda cpu mps xla tpu gpu xpu hpu npu meta mtia".split())
# Values whose device is their own (``.to(other)``, ``tensor.device``): indexed.
_HAS_DEVICE = frozenset({TORCH_TENSOR, JAX_ARRAY, NNX_MODULE, TORCH_MODULE})
# Libraries whose calls run no code of the script's own.
_LIBRARIES = ("torch", "torch2jax_device", "jax", "flax", "optax", "numpy", "math")
# How far a device held in a name is followed through its assignments.
_DEEPEST = 8


@dataclasses.dataclass(frozen=True)
class Setter:
    """A setting of torch's current device that stays torch's.

    Attributes:
        file: Its file.
        node: The setting call (or the library's import).
        line: Its line.
        text: What sets it, as written.
        block: For ``with torch.cuda.device(i):``, the ``with`` statement.
    """

    file: SourceFile
    node: ast.AST
    line: int
    text: str
    block: ast.With | ast.AsyncWith | None = None

    def reaches(self, file: SourceFile, node: ast.AST) -> bool:
        """``node`` of ``file`` may run while this setting is torch's current device."""
        if self.block is not None:
            if file is self.file and _inside(file, node, self.block.body):
                return True
            body = self.block.body
            if file is not self.file and _imports(body):
                return True  # a module first imported in the block runs under it
            return _in_function(file, node) and _calls_unknown_code(self.file, body)
        if file is not self.file:
            return True
        statement = self.file.names.statement(self.node)
        if statement is None or not _runs_once(self.file, statement):
            return True
        return not (
            _runs_once(file, node) and _end(node) <= (statement.lineno, statement.col_offset)
        )

    def cited(self, file: SourceFile) -> str:
        """``line N: <text>`` in ``file``, else ``<path>:N: <text>``."""
        where = f"line {self.line}" if file is self.file else f"{self.file.path}:{self.line}"
        return f"{where}: {self.text}"


def setters(candidates: list[Candidate], owner: tuple[SourceFile, int, str] | None) -> list[Setter]:
    """The settings of torch's current device that stay torch's: the setter rows not
    rewritten, and the library that owns torch's devices (it sets torch's current
    device for the process: ``Accelerator()``, ``deepspeed.init_distributed``...)."""
    found = [setter_of(c) for c in candidates if c.rule in SETTERS and not c.enabled]
    if owner is not None:
        file, line, text = owner
        statement = _statement_at(file, line)
        if statement is not None:
            found.append(Setter(file, statement, line, text.splitlines()[0][:80]))
    return found


def setter_of(candidate: Candidate) -> Setter:
    """The setting a setter row's finding makes (``candidate.rule in SETTERS``)."""
    file, node = candidate.file, candidate.node
    parent = file.names.parents.get(node)
    block = file.names.parents.get(parent) if isinstance(parent, ast.withitem) else None
    text = file.text(node).splitlines()[0][:80]
    if isinstance(block, (ast.With, ast.AsyncWith)):
        return Setter(file, node, candidate.position[0], f"with {text}", block)
    return Setter(file, node, candidate.position[0], text)


def reads_current_device(candidate: Candidate) -> bool:
    """The rewrite (or the torch call) resolves through the current device: an
    index-less accelerator it places on or names, or a query without a device."""
    file, call, tj_name = candidate.file, candidate.call, candidate.tj_name
    if candidate.rule in ("tensor-to-dtype", "module-to-dtype", "tensor-cpu"):
        return False
    if candidate.rule == "device-string" and isinstance(candidate.node, ast.expr):
        return _index_free(file, candidate.node, 0)
    if not isinstance(call, ast.Call) or tj_name is None:
        return False
    method = call.func.attr if isinstance(call.func, ast.Attribute) else None
    if tj_name == "tj.to_device" and method in ("cuda", "to"):
        device = _argument(call, 0, "device")
        if device is None:
            return method == "cuda"
        return _index_free(file, device, 0)
    if tj_name in CURRENT_DEVICE_TJ:
        where = CURRENT_DEVICE_TJ[tj_name]
        if where is None:
            return True
        device = _argument(call, *where)
        return device is None or _index_free(file, device, 0)
    if tj_name in _DEVICE_ARGUMENT:
        device = _argument(call, *_DEVICE_ARGUMENT[tj_name])
        return device is not None and _index_free(file, device, 0)
    return False


def _argument(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    for given in call.keywords:
        if given.arg == keyword:
            return given.value
    if len(call.args) > position and not any(
        isinstance(a, ast.Starred) for a in call.args[: position + 1]
    ):
        return call.args[position]
    return None


def _index_free(file: SourceFile, node: ast.expr, depth: int) -> bool:
    """``node`` may be an accelerator without an index (``"cuda"``,
    ``torch.device("cuda")``, a name holding one, anything the scanner cannot tell)."""
    if depth > _DEEPEST:
        return True
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, str):
            return False  # an index (0), None (stay where it is)
        kind, colon, _ = node.value.partition(":")
        return not colon and kind in _DEVICE_TYPES - _NO_CURRENT
    if isinstance(node, ast.JoinedStr):
        return not any(
            isinstance(part, ast.Constant) and ":" in str(part.value) for part in node.values
        )
    if isinstance(node, ast.BinOp):
        return not any(
            isinstance(side, ast.Constant) and ":" in str(side.value)
            for side in (node.left, node.right)
        )
    if isinstance(node, ast.IfExp):
        return _index_free(file, node.body, depth + 1) or _index_free(file, node.orelse, depth + 1)
    if isinstance(node, ast.Dict):
        return any(_index_free(file, value, depth + 1) for value in node.values)
    if _has_own_device(file, node):
        return False  # .to(other): other's own device
    if isinstance(node, ast.Call):
        name = file.qualname(node.func)
        if name in ("torch.device", "torch2jax_device.device"):
            if len(node.args) >= 2 or any(k.arg == "index" for k in node.keywords):
                return False
            first = _argument(node, 0, "type")
            return first is None or _index_free(file, first, depth + 1)
        if isinstance(node.func, ast.Name) and node.func.id == "str" and len(node.args) == 1:
            return _index_free(file, node.args[0], depth + 1)
        return True
    if isinstance(node, ast.Attribute):
        name = file.qualname(node)
        if name is not None and name.startswith("torch.") and name != "torch.device":
            return False  # a dtype, a memory format
        if node.attr == "device" and _has_own_device(file, node.value):
            return False  # a tensor's own device has its index
        return True
    if isinstance(node, ast.Name):
        bindings = file.names.bindings(node)
        if not bindings:
            return True
        return any(
            binding.kind != "assign"
            or binding.value is None
            or _index_free(file, binding.value, depth + 1)
            for binding in bindings
        )
    return True


def _has_own_device(file: SourceFile, node: ast.expr) -> bool:
    """Whatever ``node`` holds is an array or a module, placed on an indexed device."""
    kinds = file.values.kinds(node)
    return bool(kinds) and kinds <= _HAS_DEVICE


def _statement_at(file: SourceFile, line: int) -> ast.stmt | None:
    return next(
        (
            node
            for node in ast.walk(file.tree)
            if isinstance(node, ast.stmt)
            and not isinstance(node, ast.Module)
            and node.lineno == line
        ),
        None,
    )


def _inside(file: SourceFile, node: ast.AST, body: list[ast.stmt]) -> bool:
    statements = {id(statement) for statement in body}
    current: ast.AST | None = node
    while current is not None:
        if id(current) in statements:
            return True
        current = file.names.parents.get(current)
    return False


def _ancestors(file: SourceFile, node: ast.AST) -> list[ast.AST]:
    found = []
    current = file.names.parents.get(node)
    while current is not None:
        found.append(current)
        current = file.names.parents.get(current)
    return found


def _in_function(file: SourceFile, node: ast.AST) -> bool:
    return any(
        isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for parent in _ancestors(file, node)
    )


def _runs_once(file: SourceFile, node: ast.AST) -> bool:
    """``node`` is module-level code outside any loop, function, class or comprehension:
    it runs once, when the module is first imported."""
    return not any(
        isinstance(
            parent,
            (
                ast.For,
                ast.AsyncFor,
                ast.While,
                ast.FunctionDef,
                ast.AsyncFunctionDef,
                ast.Lambda,
                ast.ClassDef,
                ast.ListComp,
                ast.SetComp,
                ast.DictComp,
                ast.GeneratorExp,
            ),
        )
        for parent in _ancestors(file, node)
    )


def _end(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "end_lineno", 0) or 0, getattr(node, "end_col_offset", 0) or 0)


def _imports(body: list[ast.stmt]) -> bool:
    return any(
        isinstance(node, (ast.Import, ast.ImportFrom))
        for statement in body
        for node in ast.walk(statement)
    )


def _calls_unknown_code(file: SourceFile, body: list[ast.stmt]) -> bool:
    """A call in ``body`` may run the program's own functions (not a library's, not a
    builtin's)."""
    for statement in body:
        for node in ast.walk(statement):
            if not isinstance(node, ast.Call):
                continue
            name = file.qualname(node.func)
            if name is not None and prefixed(name, _LIBRARIES):
                continue
            if isinstance(node.func, ast.Name) and file.names.is_builtin(node.func):
                continue
            return True
    return False
