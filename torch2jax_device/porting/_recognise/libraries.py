"""The objects of libraries built on torch that own a script's device work.

Hugging Face Accelerate's ``Accelerator`` (and ``PartialState``) and Lightning Fabric's
``Fabric`` pick the device, join the process group, wrap the model and run collectives.
Their members that do device work are the rows of the catalog's "Libraries built on
torch" section (``"Accelerator.prepare"`` in a row's ``torch_api``); the scanner reports
them, on an object built by one of the libraries' constructors or held in a variable
named as the libraries' documentation names it (``accelerator``, ``fabric``).
"""

from __future__ import annotations

import ast

from .. import catalog
from .._values import LIBRARY_OBJECT
from .base import Recogniser

__all__ = ["device_keywords", "device_map_choice", "is_library_object", "member"]

_CLASSES = ("Accelerator", "Fabric", "DeepSpeedEngine")
_ROWS = [row for row in catalog.CATALOG if row.section == catalog.libraries.SECTION]

# Member name -> the row reporting it ("prepare" -> "library-prepare").
_MEMBERS: dict[str, str] = {
    name.split(".", 1)[1]: row.id
    for row in _ROWS
    for name in row.torch_api
    if name.split(".", 1)[0] in _CLASSES
}
# Variable and attribute names the libraries' documentation gives their objects.
_OWNER_NAMES = frozenset({"accelerator", "fabric", "model_engine"})
# Keywords of DeepSpeedEngine.save_checkpoint / load_checkpoint no torch API takes.
_DEEPSPEED_CHECKPOINT_ARGUMENTS = frozenset(
    {
        "client_state",
        "save_latest",
        "exclude_frozen_parameters",
        "load_optimizer_states",
        "load_lr_scheduler_states",
        "load_module_only",
        "load_module_strict",
    }
)
# Packages built on torch whose calls take a device: their device= and device_map= are
# the library's device work.
_TORCH_LIBRARIES = ("transformers.", "diffusers.", "sentence_transformers.", "accelerate.")


def member(r: Recogniser, node: ast.Attribute) -> bool:
    """``library-*`` rows: ``accelerator.prepare(...)``, ``fabric.device``; ``True`` if one
    was reported (its receiver is then visited). Never rewritten: the object does several
    jobs at once, and the port keeps the ones the script needs."""
    row = _MEMBERS.get(node.attr)
    parent = r.parent(node)
    if row is None or not (is_library_object(r, node.value) or _deepspeed_checkpoint(node, parent)):
        return False
    reported = parent if isinstance(parent, ast.Call) and parent.func is node else node
    fitting = _library_device_advice(r, reported) if row == "library-device" else None
    r.add(reported, row, fitting, position=r.file.method_position(node))
    r.visit(node.value)
    return True


# This process's device once joined: what the libraries' ``device`` is.
_THIS_DEVICE = 'tj.device(f"cuda:{tj.distributed.get_local_rank()}")'


def _library_device_advice(r: Recogniser, reported: ast.AST) -> str | None:
    """The ``library-device`` advice that fits where the library's device is used:
    entered (``with fabric.init_module():``, ``with fabric.device:``), kept in a name,
    asked its type; ``None``: the row's (a move to it)."""
    parent = r.parent(reported)
    if isinstance(parent, ast.withitem):
        return f"with {_THIS_DEVICE}:  # the arrays made inside land there"
    if isinstance(parent, ast.Attribute) and parent.attr in ("type", "index"):
        return f"{_THIS_DEVICE}.{parent.attr}"
    statement = r.file.names.statement(reported)
    if isinstance(statement, (ast.Assign, ast.Return)) and statement.value is reported:
        kept = r.text(statement.targets[0]) if isinstance(statement, ast.Assign) else "device"
        return f"{kept} = {_THIS_DEVICE}  # after tj.distributed.init_process_group()"
    return None


def _deepspeed_checkpoint(node: ast.Attribute, parent: ast.AST | None) -> bool:
    """``engine.save_checkpoint(dir, client_state=sd)``, ``engine.load_checkpoint(dir,
    load_optimizer_states=...)``: arguments only DeepSpeed's engine takes, whatever the
    engine's name (GPT-NeoX calls it ``model``)."""
    return (
        node.attr in ("save_checkpoint", "load_checkpoint")
        and isinstance(parent, ast.Call)
        and parent.func is node
        and any(k.arg in _DEEPSPEED_CHECKPOINT_ARGUMENTS for k in parent.keywords)
    )


def is_library_object(r: Recogniser, node: ast.AST) -> bool:
    """``node`` holds an ``Accelerator``, ``PartialState`` or ``Fabric``: made by one of
    their constructors (passed around included), or named as their documentation names it."""
    if LIBRARY_OBJECT in r.file.values.kinds(node):
        return True
    if isinstance(node, ast.Attribute):
        if node.attr == "state":  # accelerator.state: its AcceleratorState, the same job
            return is_library_object(r, node.value)
        return node.attr in _OWNER_NAMES
    return isinstance(node, ast.Name) and node.id in _OWNER_NAMES


def device_keywords(r: Recogniser, call: ast.Call) -> None:
    """``library-device``: ``from_pretrained(..., device_map="auto")`` anywhere, and
    ``device=`` given to a call of Transformers, Diffusers or Sentence Transformers
    (``pipeline("text-generation", model=m, device=0)``)."""
    name = r.qualname(call.func)
    for keyword in call.keywords:
        ours = keyword.arg == "device" and name is not None and name.startswith(_TORCH_LIBRARIES)
        if keyword.arg == "device_map" or ours:
            fitting = _device_map_advice(r, keyword.value) if keyword.arg == "device_map" else None
            r.add(
                keyword,
                "library-device",
                fitting,
                position=r.file.position(r.file.span(keyword)[0]),
            )


def device_map_choice(r: Recogniser, node: ast.Assign) -> None:
    """``library-device``: ``device_map = "auto"`` (or a dict) kept in a name for a
    ``from_pretrained(..., device_map=device_map)`` later: the choice itself."""
    for target in node.targets:
        name = target.id if isinstance(target, ast.Name) else None
        if isinstance(target, ast.Attribute):
            name = target.attr
        value = node.value
        if name == "device_map" and (
            isinstance(value, ast.Dict)
            or (isinstance(value, ast.Constant) and isinstance(value.value, str))
        ):
            r.add(value, "library-device", _device_map_advice(r, value))
            return


def _device_map_advice(r: Recogniser, value: ast.expr) -> str | None:
    """``device_map="auto"``: tj.load_state's plan within max_memory; ``{"": device}``:
    every weight on that device; ``None`` for another map (the row's advice)."""
    if isinstance(value, ast.Constant) and value.value in ("auto", "balanced", "sequential"):
        return (
            'model = tj.load_state(model, path, device="auto")  # a tj.DeviceMap plan, '
            "within max_memory="
        )
    if (
        isinstance(value, ast.Dict)
        and len(value.keys) == 1
        and isinstance(value.keys[0], ast.Constant)
        and value.keys[0].value == ""
    ):
        return f"model = tj.load_state(model, path, device={r.text(value.values[0])})"
    return None
