"""A device's type compared, where the device comes from outside the file's own
``torch.device`` calls.

``placement.device_attribute`` reports ``x.device.type`` (a tensor's) and ``device.type
== "cuda"`` on a device kept in a name and made elsewhere; a device this file makes with
``torch.device`` is reported where it is made. Two shapes fell between (round 7's
development set):

- a device that is made here *or* handed in: kohya's ``if isinstance(device, str):
  device = torch.device(device)`` then ``if device.type == "cuda":`` on the parameter;
  what the caller hands in must become a ``tj.device`` too;
- a project helper's device, compared on the call (``get_current_accelerator().type ==
  DeviceType.CUDA``, LLaMA-Factory), and a type named by a member of the project's own
  enum of device names (``class DeviceType(StrEnum): CUDA = "cuda"``).

A ``tj.device`` answers ``.type`` as torch's does, so the test keeps its text; the
finding says what must hand it one.
"""

from __future__ import annotations

import ast

from .._values import TORCH_DEVICE, UNKNOWN, last_name
from ..catalog.availability import ACCELERATOR_MODULES
from . import device_strings
from .base import Recogniser

__all__ = [
    "compared_type",
    "index_sliced",
    "index_stripped",
    "mapped_constructor",
    "module_by_name",
    "module_present",
    "names_device_type",
]


def compared_type(r: Recogniser, node: ast.Attribute) -> bool:
    """``tensor-device-type``: ``device.type`` or ``helper().type`` compared with a device
    type's name (a string, or a member of an enum of device names), the device made here
    and handed in too, or returned by a helper; ``True`` if one was reported (its
    receiver is then visited)."""
    parent = r.parent(node)
    if (
        node.attr != "type"
        or not isinstance(node.ctx, ast.Load)
        or id(node) in r.reported
        or not isinstance(parent, ast.Compare)
    ):
        return False
    receiver = node.value
    if isinstance(receiver, ast.Attribute) and receiver.attr == "device":
        return False  # x.device.type: the tensor's (placement.device_attribute)
    if r.qualname(receiver) is not None:
        return False
    others = [side for side in (parent.left, *parent.comparators) if side is not node]
    if not any(_device_type_named(r, side) for side in others):
        return False
    kinds = r.file.values.kinds(receiver)
    helper = receiver if isinstance(receiver, ast.Call) else _helper_kept(r, receiver)
    handed_in = TORCH_DEVICE in kinds and (
        _parameter_reaches(r, receiver, node)  # made here, or the parameter as given
        or (isinstance(receiver, ast.Call) and UNKNOWN in kinds)  # a helper's
        or helper is not None  # device = get_current_accelerator()
    )
    kept = (  # device.type == DeviceType.CUDA (a string: placement.device_attribute's)
        isinstance(receiver, (ast.Name, ast.Attribute))
        and device_strings.keeps_device(receiver)
        and TORCH_DEVICE not in kinds  # made here alone: reported where it is made
        and not any(isinstance(side, ast.Constant) for side in others)
        and not _iterated(r, receiver)  # for device in devices: the list's, where made
    )
    if not (handed_in or kept):
        return False
    if helper is not None:
        advice = (
            f"{r.text(node)}  # a tj.device has torch's .type: {r.text(helper.func)} must "
            "return one"
        )
    else:
        advice = (
            f"{r.text(node)}  # a tj.device has torch's .type: what hands "
            f"{r.text(receiver)} in must give one"
        )
    r.add(node, "tensor-device-type", advice, position=r.file.method_position(node))
    r.visit(receiver)
    return True


def _iterated(r: Recogniser, node: ast.expr) -> bool:
    """``node`` is a name every binding of which is a ``for`` loop's."""
    bindings = r.file.names.bindings(node) if isinstance(node, ast.Name) else []
    return bool(bindings) and all(b.kind == "for" for b in bindings)


def _device_type_named(r: Recogniser, node: ast.expr) -> bool:
    """``"cuda"``, ``("cuda", "xpu")``, or ``DeviceType.CUDA`` / ``DeviceType.CUDA.value``
    where ``DeviceType`` is a class of the file whose member ``CUDA`` is ``"cuda"``."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(_device_type_named(r, e) for e in node.elts)
    if isinstance(node, ast.Constant):
        return node.value in device_strings.DEVICE_TYPES
    if isinstance(node, ast.Attribute) and node.attr == "value":
        node = node.value
    if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
        return False
    for binding in r.file.names.bindings(node.value):
        klass = binding.node
        if not isinstance(klass, ast.ClassDef):
            continue
        for statement in klass.body:
            if (
                isinstance(statement, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == node.attr for t in statement.targets)
                and isinstance(statement.value, ast.Constant)
                and statement.value.value in device_strings.DEVICE_TYPES
            ):
                return True
    return False


def _parameter_reaches(r: Recogniser, receiver: ast.expr, node: ast.AST) -> bool:
    """``receiver`` is a parameter that reaches ``node`` unchanged on some path: no
    statement of the function before it rebinds it on every path (``if isinstance(device,
    str): device = torch.device(device)`` leaves the ``torch.device`` handed in)."""
    if not isinstance(receiver, ast.Name):
        return False
    bindings = r.file.names.bindings(receiver)
    if not any(b.kind == "param" for b in bindings):
        return False
    function = r.file.names.enclosing(node, ast.FunctionDef, ast.AsyncFunctionDef)
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    statement: ast.AST | None = r.file.names.statement(node)
    while statement is not None and r.parent(statement) is not function:
        statement = r.parent(statement)
    if statement is None or statement not in function.body:
        return False
    before = function.body[: function.body.index(statement)]
    return not any(_rebinds(s, receiver.id) for s in before)


def _helper_kept(r: Recogniser, receiver: ast.expr) -> ast.Call | None:
    """The call of a project's helper whose device the name ``receiver`` was assigned
    (the helper makes one, or hands on one it did not make); ``None`` if none."""
    if not isinstance(receiver, ast.Name):
        return None
    for binding in r.file.names.bindings(receiver):
        value = binding.value
        if binding.kind == "assign" and binding.element is None and isinstance(value, ast.Call):
            kinds = r.file.values.kinds(value)
            if r.qualname(value.func) is None and TORCH_DEVICE in kinds and UNKNOWN in kinds:
                return value
    return None


def _rebinds(statement: ast.stmt, name: str) -> bool:
    """``statement`` binds ``name`` on every path through it."""
    if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        return any(isinstance(t, ast.Name) and t.id == name for t in targets)
    if isinstance(statement, ast.If):
        return any(_rebinds(s, name) for s in statement.body) and any(
            _rebinds(s, name) for s in statement.orelse
        )
    return False


def module_by_name(r: Recogniser, call: ast.Call) -> None:
    """``accelerator-current``: ``getattr(torch, device_name)``, the accelerator's module
    (``torch.cuda``, ``torch.npu``) looked up by the device's type, ``None`` where torch has
    none (``getattr(torch, name, None)``). With a module as the fallback
    (``getattr(torch, name, torch.cuda)``) the fallback is the finding (``cuda-other``)."""
    if r.file.values.builtin(call.func) != "getattr" or len(call.args) not in (2, 3):
        return
    owner, name = call.args[0], call.args[1]
    if len(call.args) == 3 and not _is_none(call.args[2]):
        return  # getattr(torch, name, torch.cuda): the fallback is the finding
    if r.qualname(owner) != "torch" or id(call) in r.reported or not names_device_type(name):
        return
    r.add(
        call,
        "accelerator-current",
        f"tj.cuda  # {r.text(call)}: the device module by name; tj.cuda's memory and "
        "synchronize calls answer for JAX's accelerator, tj.accelerator.current_accelerator() "
        "names it",
    )


def module_present(r: Recogniser, call: ast.Call) -> None:
    """``xpu-npu-is-available``: ``hasattr(torch, "npu")``, whether a plugin added an
    accelerator's module to torch (``torch_npu`` adds ``torch.npu``); ``hasattr(torch,
    "compile")`` asks about torch's version, not a device."""
    if r.file.values.builtin(call.func) != "hasattr" or len(call.args) != 2:
        return
    owner, name = call.args
    if (
        r.qualname(owner) == "torch"
        and isinstance(name, ast.Constant)
        and isinstance(name.value, str)
        and f"torch.{name.value}" in ACCELERATOR_MODULES
        and id(call) not in r.reported
    ):
        r.add(call, "xpu-npu-is-available")


def mapped_constructor(r: Recogniser, call: ast.Call) -> None:
    """``device-from-spec``: ``map(torch.device, names)``, each name made a device."""
    if r.file.values.builtin(call.func) != "map" or len(call.args) < 2:
        return
    made = call.args[0]
    if r.qualname(made) == "torch.device" and id(made) not in r.reported:
        r.add(
            made,
            "device-from-spec",
            f"map(tj.device, {', '.join(r.text(a) for a in call.args[1:])})",
        )


def names_device_type(node: ast.expr) -> bool:
    """``"cuda"``, ``device_name``, ``device.type``, ``get_device_type()``: a device
    type's name (``dtype``, ``"float16"`` are not)."""
    if isinstance(node, ast.Constant):
        return node.value in device_strings.DEVICE_TYPES
    if isinstance(node, ast.Call):
        node = node.func
    named = (last_name(node) or "").lower()
    if isinstance(node, ast.Attribute) and named == "type":
        return device_strings.keeps_device(node.value)
    return "dtype" not in named and ("device" in named or "accelerator" in named)


# The length of "<type>:" for each device type: where a name's index starts.
_INDEX_STARTS = frozenset(len(kind) + 1 for kind in device_strings.DEVICE_TYPES)


def index_sliced(r: Recogniser, node: ast.Subscript) -> None:
    """``device-string-logic``: ``device[5:]``, the index cut out of ``"cuda:N"``."""
    window = node.slice
    if not (
        isinstance(window, ast.Slice)
        and window.upper is None
        and window.step is None
        and _index_start(window.lower)
        and isinstance(node.value, (ast.Name, ast.Attribute))
        and r.qualname(node.value) is None
        and device_strings.keeps_device(node.value)
        and id(node) not in r.reported
    ):
        return
    r.add(
        node,
        "device-string-logic",
        f"tj.device({r.text(node.value)}).index  # the index, not a slice of the name",
    )


def _index_start(node: ast.expr | None) -> bool:
    """``5`` (``len("cuda:")``), or ``len("cuda:")`` itself."""
    if isinstance(node, ast.Constant):
        return node.value in _INDEX_STARTS
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "len"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
        and node.args[0].value.endswith(":")
    )


# str methods that drop a prefix: device.replace("cuda:", ""), device.removeprefix("cuda:").
_STRIPPING = frozenset({"replace", "removeprefix", "lstrip"})


def index_stripped(r: Recogniser, call: ast.Call) -> None:
    """``device-string-logic``: ``device.replace("cuda:", "")``, the index left once the
    type's name is stripped from ``"cuda:N"``."""
    func = call.func
    if not (
        isinstance(func, ast.Attribute)
        and func.attr in _STRIPPING
        and call.args
        and isinstance(call.args[0], ast.Constant)
        and isinstance(call.args[0].value, str)
        and call.args[0].value.endswith(":")
        and call.args[0].value[:-1] in device_strings.DEVICE_TYPES
        and (func.attr != "replace" or _replaced_by_nothing(call))
        and isinstance(func.value, (ast.Name, ast.Attribute))
        and r.qualname(func.value) is None
        and device_strings.keeps_device(func.value)
        and id(call) not in r.reported
    ):
        return
    r.add(
        call,
        "device-string-logic",
        f"tj.device({r.text(func.value)}).index  # the index, not what is left of the name",
        position=r.file.method_position(func),
    )


def _replaced_by_nothing(call: ast.Call) -> bool:
    return (
        len(call.args) >= 2 and isinstance(call.args[1], ast.Constant) and call.args[1].value == ""
    )


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None
