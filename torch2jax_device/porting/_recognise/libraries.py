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
from .._values import LIBRARY_OBJECT, last_name
from . import distributed
from .base import Recogniser

__all__ = [
    "TORCH_LIBRARIES",
    "device_keywords",
    "device_map_carried",
    "device_map_choice",
    "device_map_default",
    "device_map_test",
    "is_library_object",
    "member",
    "member_by_name",
    "trainer_subclass",
]

_CLASSES = ("Accelerator", "Fabric", "DeepSpeedEngine")
# Hugging Face's Trainer and its TrainingArguments (which run on Accelerate): known by
# their own members only, since other libraries and projects have trainers too.
_HF_CLASSES = ("Trainer", "TrainingArguments")
_ROWS = [row for row in catalog.CATALOG if row.section == catalog.libraries.SECTION]


def _members(classes: tuple[str, ...]) -> dict[str, str]:
    """Member name -> the row reporting it ("prepare" -> "library-prepare")."""
    return {
        name.split(".", 1)[1]: row.id
        for row in _ROWS
        for name in row.torch_api
        if name.split(".", 1)[0] in classes
    }


_MEMBERS = _members(_CLASSES)
_HF_MEMBERS = _members(_HF_CLASSES)
# Variable and attribute names the libraries' documentation gives their objects.
_OWNER_NAMES = frozenset({"accelerator", "fabric", "model_engine"})
_HF_OWNER_NAMES = frozenset({"trainer", "training_args"})
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
TORCH_LIBRARIES = ("transformers.", "diffusers.", "sentence_transformers.", "accelerate.")


def member(r: Recogniser, node: ast.Attribute) -> bool:
    """``library-*`` rows: ``accelerator.prepare(...)``, ``fabric.device``; ``True`` if one
    was reported (its receiver is then visited). Never rewritten: the object does several
    jobs at once, and the port keeps the ones the script needs."""
    row = _member_row(r, node.value, node.attr)
    parent = r.parent(node)
    if row is None and _MEMBERS.get(node.attr) and _deepspeed_checkpoint(node, parent):
        row = _MEMBERS[node.attr]
    if row is None:
        return False
    reported = parent if isinstance(parent, ast.Call) and parent.func is node else node
    fitting = _library_device_advice(r, reported) if row == "library-device" else None
    if row == "library-collective" and isinstance(reported, ast.Call):
        fitting = distributed.collective_advice(r, reported, node.attr)
    r.add(reported, row, fitting, position=r.file.method_position(node))
    r.visit(node.value)
    return True


def member_by_name(r: Recogniser, call: ast.Call) -> None:
    """``getattr(accelerator.state, "fsdp_plugin", None)``: a member asked for by name."""
    func = call.func
    if not (
        isinstance(func, ast.Name)
        and func.id in ("getattr", "hasattr")
        and r.file.names.is_builtin(func)
        and len(call.args) >= 2
        and isinstance(call.args[1], ast.Constant)
        and isinstance(call.args[1].value, str)
    ):
        return
    row = _member_row(r, call.args[0], call.args[1].value)
    if row is not None:
        r.add(call, row)


def trainer_subclass(r: Recogniser, call: ast.Call) -> None:
    """``library-launcher``: ``LLaVATrainer(model=model, args=training_args)``, a project's
    subclass of Hugging Face's ``Trainer`` (told its ``TrainingArguments``)."""
    name = last_name(call.func)
    if (
        name is None
        or not name.endswith("Trainer")
        or id(call) in r.reported
        or (r.qualname(call.func) or "").startswith(("transformers.", "lightning", "pytorch_"))
    ):
        return
    arguments = next((k.value for k in call.keywords if k.arg == "args"), None)
    if arguments is not None and (is_library_object(r, arguments) or _is_hf_trainer(arguments)):
        r.add(call, "library-launcher")


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


def _member_row(r: Recogniser, owner: ast.AST, name: str) -> str | None:
    """The row of ``owner.name`` when ``owner`` is a library's object with that member."""
    if name in _MEMBERS and is_library_object(r, owner):
        return _MEMBERS[name]
    if name in _HF_MEMBERS and (
        LIBRARY_OBJECT in r.file.values.kinds(owner) or _is_hf_trainer(owner)
    ):
        return _HF_MEMBERS[name]
    return None


def _is_hf_trainer(node: ast.AST) -> bool:
    """``trainer``, ``training_args``, ``self.trainer``, ``trainer.args``: named as
    Hugging Face's documentation names its Trainer and TrainingArguments."""
    if isinstance(node, ast.Attribute) and node.attr == "args":
        return _is_hf_trainer(node.value)
    name = last_name(node)
    return name is not None and name in _HF_OWNER_NAMES


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
        ours = keyword.arg == "device" and name is not None and name.startswith(TORCH_LIBRARIES)
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
    if isinstance(value, (ast.Name, ast.Attribute)):  # a map chosen elsewhere
        return (
            f"model = tj.load_state(model, path, device_map={r.text(value)})  # "
            '"auto" or a map of module names to devices'
        )
    return None


def device_map_carried(r: Recogniser, node: ast.Call | ast.Dict | ast.Subscript) -> None:
    """``library-device``: a ``device_map`` carried in a dict of keyword arguments: the key
    written (``{"device_map": device_map, **kwargs}``, ``kwargs["device_map"] = ...``)
    and the dict handed on (``from_pretrained(path, **kwargs)``)."""
    if isinstance(node, ast.Dict):
        for key in node.keys:
            if isinstance(key, ast.Constant) and key.value == "device_map":
                r.add(key, "library-device", position=r.file.position(r.file.span(key)[0]))
        return
    if isinstance(node, ast.Subscript):
        if (
            isinstance(node.ctx, ast.Store)
            and isinstance(node.slice, ast.Constant)
            and node.slice.value == "device_map"
        ):
            r.add(node, "library-device")
        return
    for keyword in node.keywords:
        if keyword.arg is None and _carries_device_map(r, keyword.value):
            candidate = r.add(
                keyword, "library-device", position=r.file.position(r.file.span(keyword)[0])
            )
            candidate.reason = f"{r.text(keyword.value)} holds a device_map= for the call"


def _carries_device_map(r: Recogniser, node: ast.expr) -> bool:
    """A name some value of which holds a ``device_map`` key: bound to a dict with one
    (``dict(device_map=...)`` included), given one by ``name["device_map"] = ...``, or
    updated with one."""
    if not isinstance(node, ast.Name):
        return False
    bindings = r.file.names.bindings(node)
    for binding in bindings:
        if (
            binding.kind == "assign"
            and binding.value is not None
            and _has_device_map(binding.value)
        ):
            return True
        for load in r.file.names.loads(binding):
            user = r.parent(load)
            if (
                isinstance(user, ast.Subscript)
                and isinstance(user.ctx, ast.Store)
                and isinstance(user.slice, ast.Constant)
                and user.slice.value == "device_map"
            ):
                return True
            call = r.parent(user) if isinstance(user, ast.Attribute) else None
            if (
                isinstance(user, ast.Attribute)
                and user.attr == "update"
                and isinstance(call, ast.Call)
                and any(_has_device_map(a) for a in [*call.args, *call.keywords])
            ):
                return True
    return False


def _has_device_map(node: ast.AST) -> bool:
    """``{"device_map": ...}``, ``dict(device_map=...)``, ``device_map=...``."""
    if isinstance(node, ast.keyword):
        return node.arg == "device_map"
    if isinstance(node, ast.Dict):
        return any(isinstance(k, ast.Constant) and k.value == "device_map" for k in node.keys)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        return any(k.arg == "device_map" for k in node.keywords)
    return False


def device_map_test(r: Recogniser, node: ast.Compare) -> None:
    """``library-device``: ``if device_map != "auto":``, the plan asked which it is."""
    sides = [node.left, *node.comparators]
    if any(last_name(side) == "device_map" for side in sides) and any(
        isinstance(side, ast.Constant) and isinstance(side.value, str) for side in sides
    ):
        r.add(node, "library-device")


def device_map_default(r: Recogniser, node: ast.arguments) -> None:
    """``library-device``: ``def load(path, device_map="auto")``, the plan's default."""
    positional = [*node.posonlyargs, *node.args]
    pairs = list(
        zip(positional[len(positional) - len(node.defaults) :], node.defaults, strict=True)
    )
    pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if d]
    for argument, default in pairs:
        if argument.arg == "device_map" and isinstance(default, (ast.Constant, ast.Dict)):
            if isinstance(default, ast.Constant) and default.value is None:
                continue
            r.add(default, "library-device", _device_map_advice(r, default))
