"""A device named in a string literal, wherever code writes it (CONTRIBUTING, "How a
blind set is labelled": *a device chosen by name*, *a device string inspected*).

The section recognisers report a device's name where they know its role: a name kept
(``device = "mps"``), a parameter's default, a name tested (``"cuda" in device``), a
call that places on it (``x.to("cuda")``). Real scripts write the name in many more
places, each one a line a porter must look at: a module's setting (``DEVICE = "mlu"``),
an option's default or choices (``add_argument("--device", default="cuda")``,
``choices=["cpu", "cuda", "auto"]``), a config's fallback (``config.get("device",
"cuda:0")``), a table keyed by device types, a name compared (``kind == "musa"``). After
the walk, ``uncovered_names`` reports every such literal on a line no other finding
covers (a name built from a type and an index, ``"cuda:" + str(rank)``, is
``devices.indexed_device_string``'s, as ``f"cuda:{rank}"`` is):

- a device type of torch's (``cpu``, ``cuda``, ``mps``, ``xpu``, ``npu``, ``mlu``,
  ``musa``, ``hpu``, ``dipu``, ``xla``; ``meta`` only where the value is evidently a
  device: a ``device=`` keyword, a setting that keeps a device, a comparison with one),
  with an optional ``:N``; a longer string that contains the word is not one
  (``"cuda_time_total"``);
- outside prose: a docstring, a ``help=``/``description=`` keyword, a message printed,
  logged, warned or raised, a piece of an f-string;
- in a file that imports torch or a library built on it (elsewhere ``"cpu"`` is a word
  like any other);
- not where a section recogniser decides (a parameter's default: ``default_names``; a
  type compared, ``device.type == "cuda"``: ``placement`` and ``device_types``, which
  report it where the device is made or handed in; a move, ``model.to("cpu")`` on a
  Flax module: ``placement``; a string method's operand, ``name.replace("cuda",
  "npu")``: ``device_strings``), nor handed positionally to a class of another package
  (``jax.Device("cuda")``, a project's ``DeviceMesh("cuda")``), nor in the port's own
  code (``tj.device("cuda" if ok else "cpu")``, ``jax.devices("cpu")``), nor a process
  group's back end (``backend = "xla" if xm else "nccl"``: the distributed rows'), nor a
  key (``budgets["cpu"]``, ``{"cuda": "nccl"}``, ``budgets.pop("cpu")``: a table keyed
  by device types is reported where it is looked up, ``keyed_by_type``);
- ``device-string-logic`` where it is compared (``==``, ``in``), ``device-string``
  elsewhere.

Advice only: the name works wherever torch2jax_device takes a device.

torch's profiler names its devices' columns the same way: a report sorted by one
(``prof.key_averages().table(sort_by="cuda_time_total")``) reads figures JAX's profiler
keeps in its trace (``profiler_sorted``).
"""

from __future__ import annotations

import ast
import re

from .._values import last_name
from .base import Recogniser
from .device_strings import keeps_device

__all__ = ["TORCH_DEVICE_TYPES", "noted", "profiler_sorted", "uncovered_names"]

#: torch's device types (``torch._C._get_privateuse1_backend_name`` aside), as the
#: labelling conventions list them.
TORCH_DEVICE_TYPES = frozenset("cpu cuda mps xpu npu mlu musa hpu dipu xla".split())
_META = "meta"
# Keywords whose string is prose: an option's help, a message, a title.
_PROSE_KEYWORDS = frozenset(
    "help description desc msg message doc epilog usage title label text prompt".split()
)
# Calls whose arguments are messages: print, a logger's or warnings' methods, a writer's.
_MESSAGE_CALLS = frozenset(
    "print log debug info warning warn error critical exception fatal write echo secho "
    "set_description set_postfix_str add_text".split()
)
# A profiler report's column of a device's figures: cuda_time_total, self_device_time_total,
# cuda_memory_usage, self_xpu_time_total.
_DEVICE_COLUMN = re.compile(r"^(self_)?(cuda|device|xpu|npu|mps|privateuse1)_(time|memory)")
_PROFILE_ADVICE = (
    "jax.profiler.trace(log_dir)  # JAX's profiler writes a trace (TensorBoard, Perfetto) "
    "with each device's times: read the kernels there"
)
# Libraries built on torch: a file importing one of them places torch's tensors.
_TORCH_LIBRARIES = frozenset(
    """accelerate apex colossalai deepspeed diffusers fairscale lightning lightning_fabric
    megatron mmcv mmengine peft pytorch_lightning timm transformers trl vllm""".split()
)
# str's methods: their operands are cut, matched or replaced text.
_STRING_METHODS = frozenset(
    """replace startswith endswith split rsplit partition rpartition strip lstrip rstrip
    find rfind index rindex count removeprefix removesuffix""".split()
)
# dict's methods whose first argument is a key.
_KEYED = frozenset({"get", "pop", "setdefault"})
# Methods that move a value: placement reports the moves that are torch's.
_MOVES = frozenset({"to", "cuda", "cpu", "to_empty"})
# Packages of the port's side: their calls take JAX's devices.
_PORT_PACKAGES = ("torch2jax_device", "jax", "flax")
# Keywords that hand a device (``device=``, ``map_location=``, ``device_type=``).
_DEVICE_KEYWORDS = frozenset({"device", "map_location", "device_type", "init_device"})


def noted(r: Recogniser, node: ast.Constant) -> None:
    """During the walk: a string literal naming a device (``"meta"`` included) the walk
    reaches, kept for ``uncovered_names`` (annotations are never reached)."""
    if _device_name(node.value, meta=True):
        r.device_literals.append(node)


def _device_name(value: object, *, meta: bool) -> bool:
    """``"cuda"``, ``"npu:1"``; not ``"cuda:"``, the head of a name built by
    ``devices.indexed_device_string``'s spellings."""
    if not isinstance(value, str):
        return False
    kind, colon, index = value.partition(":")
    known = kind in TORCH_DEVICE_TYPES or (meta and kind == _META)
    return known and (not colon or index.isdigit())


def _statement_path(r: Recogniser, node: ast.AST) -> list[ast.AST]:
    """``node``'s ancestors from its parent up to its statement, included."""
    path = []
    parent = r.parent(node)
    while parent is not None:
        path.append(parent)
        if isinstance(parent, ast.stmt):
            break
        parent = r.parent(parent)
    return path


def _in_prose(r: Recogniser, node: ast.AST, path: list[ast.AST]) -> bool:
    child: ast.AST = node
    for parent in path:
        if isinstance(parent, (ast.JoinedStr, ast.FormattedValue, ast.Raise)):
            return True
        if isinstance(parent, ast.Expr) and isinstance(child, ast.Constant):
            return True  # a docstring, a bare string
        if isinstance(parent, ast.Assert) and child is parent.msg:
            return True
        if isinstance(parent, ast.keyword) and parent.arg in _PROSE_KEYWORDS:
            return True
        if (
            isinstance(parent, ast.Call)
            and child is not parent.func
            and last_name(parent.func) in _MESSAGE_CALLS
        ):
            return True
        child = parent
    return False


def _compared(node: ast.AST, path: list[ast.AST]) -> ast.Compare | None:
    """The comparison ``node`` is a side of, directly or as an element of a tuple, list or
    set tested with ``in``."""
    parent = path[0] if path else None
    if isinstance(parent, (ast.Tuple, ast.List, ast.Set)) and len(path) > 1:
        parent = path[1]
    return parent if isinstance(parent, ast.Compare) else None


def _subject(compare: ast.Compare, node: ast.AST) -> ast.expr:
    sides = [compare.left, *compare.comparators]
    return next((s for s in sides if s is not node and not _holds(s, node)), sides[0])


def _holds(container: ast.AST, node: ast.AST) -> bool:
    return any(part is node for part in ast.walk(container))


def _evidently_a_device(node: ast.AST, path: list[ast.AST], compare: ast.Compare | None) -> bool:
    """Where ``"meta"`` is a device: handed as one, kept as one, compared with one."""
    parent = path[0] if path else None
    if isinstance(parent, ast.keyword):
        return parent.arg in _DEVICE_KEYWORDS
    if isinstance(parent, ast.Assign):
        return any(keeps_device(t) or _type_name(t) for t in parent.targets)
    if compare is not None:
        subject = _subject(compare, node)
        return keeps_device(subject) or _type_name(subject)
    return False


def _type_name(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
    return isinstance(name, str) and name.strip("_").lower() in ("type", "device_type")


def uncovered_names(r: Recogniser) -> None:
    """After the walk: each device name written in a literal on a line no finding covers
    (``DEVICE = "mlu"``, ``default="cuda"``, ``choices=["cpu", "cuda", "auto"]``), once
    per line."""
    if not r.device_literals or not _imports_torch(r.file.tree):
        return
    covered = {candidate.position[0] for candidate in r.found}
    for reported in r.device_literals:
        if reported.lineno in covered:
            continue
        path = _statement_path(r, reported)
        if (
            any(id(n) in r.reported for n in [reported, *path])
            or _in_prose(r, reported, path)
            or _decided_elsewhere(r, reported, path)
        ):
            continue
        compare = _compared(reported, path)
        if not _device_name(reported.value, meta=False) and not _evidently_a_device(
            reported, path, compare
        ):
            continue  # "meta" as a word: a model's metadata, a meta-learner
        covered.add(reported.lineno)
        if compare is not None:
            subject = r.text(_subject(compare, reported))
            advice = f"tj.device({subject}).type  # the type, not the name"
            r.add(compare, "device-string-logic", advice, position=_position(r, reported))
        else:
            r.add(reported, "device-string", f"tj.device({r.text(reported)})")


def _position(r: Recogniser, node: ast.AST) -> tuple[int, int]:
    return (node.lineno, r.file.position(r.file.span(node)[0])[1])  # type: ignore[attr-defined]


def profiler_sorted(r: Recogniser, call: ast.Call) -> None:
    """``profiler``: ``prof.key_averages().table(sort_by="cuda_time_total")``, a report
    of torch's profiler sorted by a device's column."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "table"):
        return
    for keyword in call.keywords:
        value = keyword.value
        if (
            keyword.arg == "sort_by"
            and isinstance(value, ast.Constant)
            and isinstance(value.value, str)
            and _DEVICE_COLUMN.match(value.value)
        ):
            r.add(call, "profiler", _PROFILE_ADVICE, position=_position(r, value))


def _imports_torch(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            tops = [alias.name.partition(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            tops = [node.module.partition(".")[0]]
        else:
            continue
        if any(top.startswith("torch") or top in _TORCH_LIBRARIES for top in tops):
            return True
    return False


def _decided_elsewhere(r: Recogniser, node: ast.AST, path: list[ast.AST]) -> bool:
    """The literal's place is a section recogniser's to judge, or is no torch device's
    (module docstring)."""
    parent = path[0] if path else None
    if isinstance(parent, ast.arguments):
        return True  # a parameter's default
    if isinstance(parent, ast.Dict) and any(key is node for key in parent.keys):
        return True  # a key
    if isinstance(parent, ast.Subscript) and parent.slice is node:
        return True
    if (
        isinstance(parent, ast.Call)
        and parent.args[:1] == [node]
        and last_name(parent.func) in _KEYED
        and isinstance(parent.func, ast.Attribute)
    ):
        return True
    for part in path:
        if isinstance(part, ast.Call) and (r.qualname(part.func) or "").partition(".")[0] in (
            _PORT_PACKAGES
        ):
            return True  # tj.device("cuda" if ok else "cpu"): the port's own
        if isinstance(part, ast.Call) and last_name(part.func) in _MOVES:
            return True  # a move placement did not report (a Flax module's, another's)
        named = [part.arg] if isinstance(part, ast.keyword) else []
        if isinstance(part, (ast.Assign, ast.AnnAssign)):
            targets = part.targets if isinstance(part, ast.Assign) else [part.target]
            named = [last_name(t) or "" for t in targets]
        if any(name and name.lower().endswith("backend") for name in named):
            return True  # a process group's back end
    if isinstance(parent, (ast.Tuple, ast.List, ast.Set)) and len(path) > 1:
        parent = path[1]
    if isinstance(parent, ast.Compare):
        sides = [parent.left, *parent.comparators]
        return any(isinstance(s, ast.Attribute) and s.attr == "type" for s in sides)
    if isinstance(parent, ast.Call) and node in parent.args:
        func = parent.func
        if isinstance(func, ast.Attribute) and func.attr in _STRING_METHODS:
            return True
        name = r.qualname(func) or ""
        foreign = bool(name) and not name.startswith("torch")
        last = name.rsplit(".", 1)[-1]
        # a class's name, not absl's flags.DEFINE_string("device", "cpu", help)
        declares = "_" in last and last.split("_")[0].isupper()
        return foreign and last[:1].isupper() and not declares
    return False
