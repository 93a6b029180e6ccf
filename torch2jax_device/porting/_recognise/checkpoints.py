"""The "Checkpoints" section: ``torch.load`` becomes ``tj.load`` when that is the same load;
a model's weights saved and loaded (``torch.save(model.state_dict(), p)``,
``model.load_state_dict(torch.load(p))``)."""

from __future__ import annotations

import ast
import re

from .._rewrites import Rewrite
from .._values import TJ, TORCH_MODULE, last_name
from .base import Recogniser
from .device_strings import is_device_value
from .names import inside_reported_call

__all__ = [
    "TORCHSCRIPT_LOADED",
    "forwarded_map_location",
    "fsdp_state",
    "load_call",
    "load_state_call",
    "loads_onto_a_parameter",
    "project_loader",
    "save_call",
]

#: ``torch.jit.load(path)``: a TorchScript program, code and weights together.
TORCHSCRIPT_LOADED = (
    "port by hand: a TorchScript program (code and weights), which JAX cannot run; port "
    "the module to Flax NNX and load its weights with tj.load_state(model, path) from a "
    "state dict saved by torch.save(module.state_dict(), path)"
)
# FSDP's context that decides what a model's state_dict() holds.
_FSDP_STATE_CONTEXTS = frozenset(
    {
        "torch.distributed.fsdp.FullyShardedDataParallel.state_dict_type",
        "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel"
        ".state_dict_type",
    }
)

_LOAD_REFUSED = {
    "weights_only": "tj.load never runs code from the file (always weights_only=True)",
    "pickle_module": "tj.load has no pickle_module=",
    "encoding": "tj.load has no encoding=",
}
# Receivers of load_state_dict that are not models (their state is no device idiom).
_NOT_MODELS = ("optim", "sched", "scaler", "loader", "sampler", "metric", "state")
# A project's wrapper of torch.load, by its name: safe_torch_load, _torch_load.
_TORCH_LOADER = re.compile(r"(^|_)torch_load$")
# A project's checkpoint loader, by its name: load_checkpoint, load_ckpt, _load_weights,
# load_model (nanochat's load_model(source, device)).
_CHECKPOINT_LOADER = re.compile(r"(^|_)load_(checkpoint|ckpt|weights|pretrained|model)s?$")
# Classes that run training rather than compute: their load_state_dict restores the run.
_RUNNER = re.compile(
    r"(Trainer|Solver|Checkpointer|Runner|Engine|Loop|Manager|Callback|Hook|Task|Experiment)$"
)


def load_call(r: Recogniser, call: ast.Call) -> None:
    """``torch-load*`` rows: ``torch.load(...)``."""
    location = next((k.value for k in call.keywords if k.arg == "map_location"), None)
    if location is None and len(call.args) > 1:
        location = call.args[1]
    if location is None:
        rule = "torch-load"
    elif isinstance(location, ast.Dict):
        rule = "torch-load-map-location-dict"
    elif isinstance(location, ast.Lambda):
        rule = "torch-load-map-location-callable"
        # storage.cuda(gpu) in the callable moves torch.load's storages: this finding's
        r.reported.update(id(node) for node in ast.walk(location.body))
    else:
        rule = "torch-load-map-location"
    kept = [k for k in call.keywords if k.arg != "weights_only"]
    replacement = "tj.load(" + ", ".join(r.text(a) for a in [*call.args, *kept]) + ")"
    candidate = r.add(call, rule, replacement, call=call, tj_name="tj.load")
    reason = _load_problem(r, call)
    if reason:
        candidate.reason = reason
        return
    pieces: list[str | tuple[int, int]] = ["tj.load("]
    for position, argument in enumerate([*call.args, *kept]):
        pieces += [", "] if position else []
        pieces.append(r.file.span(argument))
    pieces.append(")")
    start, end = r.file.span(call)
    candidate.rewrite = Rewrite(start, end, tuple(pieces))
    candidate.effect, candidate.subject = "value", call


def _load_problem(r: Recogniser, call: ast.Call) -> str:
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
        elif keyword.arg not in ("f", "map_location", "mmap"):
            return f"tj.load has no {keyword.arg}="
    source = (
        call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "f"), None)
    )
    if source is None:
        return "no file given"
    return ""


def save_call(r: Recogniser, call: ast.Call) -> bool:
    """``save-model-torch-twin``: ``torch.save(model.state_dict(), path)``; ``True`` if it
    is one."""
    state = call.args[0] if call.args else None
    if isinstance(state, ast.Call) and r.qualname(state.func) == f"{TJ}.state_dict":
        return True  # what --diff writes for an NNX model: the torch original's file
    if not (
        len(call.args) == 2
        and isinstance(state, ast.Call)
        and isinstance(state.func, ast.Attribute)
        and state.func.attr == "state_dict"
        and not state.args
        and not state.keywords
    ):
        if state is None or len(call.args) < 2 or _holds_model(r, state):
            return False
        r.add(
            call,
            "torch-save",
            f"tj.save_file({r.text(state)}, {r.text(call.args[1])})  # a dict of arrays; "
            "other values (the step, settings) in its metadata= or a JSON file",
            jax=f"safetensors.flax.save_file({r.text(state)}, {r.text(call.args[1])})",
        )
        return True
    receiver = state.func.value
    model, path = r.text(receiver), r.text(call.args[1])
    if r.file.values.module_framework(receiver) != "nnx":
        r.add(
            call,
            "save-model-torch-twin",
            f"tj.save_file({model}, {path})  # for a PyTorch twin: "
            f'torch.save(tj.state_dict({model}, layout="torch"), {path})',
        )
        return True
    # A Flax NNX model has no state_dict(): tj.state_dict's "torch" layout is what the
    # torch original's state_dict() gave, so the file stays the one the torch script
    # wrote (its twin loads it), and tj.load_state reads it back.
    start, end = r.file.span(state)
    r.add(
        call,
        "save-model-torch-twin",
        f'torch.save(tj.state_dict({model}, layout="torch"), {path})',
        rewrite=Rewrite(start, end, ("tj.state_dict(", r.file.span(receiver), ', layout="torch")')),
        call=state,
        tj_name="tj.state_dict",
    )
    return True


def state_in_a_saved_dict(r: Recogniser, call: ast.Call, method: ast.Attribute) -> bool:
    """``save-model-torch-twin``: ``{"model": model.state_dict(), ...}`` built for a save
    of another file's or of DCP (``save_if_main(state, path)``,
    ``dist_cp.save_state_dict(state, ...)``): no ``torch.save`` of this file is there to
    report it; ``True`` if reported."""
    receiver = last_name(method.value) or ""
    holder = r.parent(call)
    if (
        call.args
        or call.keywords
        or any(part in receiver.lower() for part in _NOT_MODELS)
        or not isinstance(holder, ast.Dict)
        or inside_reported_call(r, call)
        or not _saved(r, holder)
    ):
        return False
    model = r.text(method.value)
    r.add(
        call,
        "save-model-torch-twin",
        f'tj.state_dict({model}, layout="torch")  # the weights under torch\'s names, '
        "for a file the torch original reads",
        position=r.file.method_position(method),
    )
    return True


def _saved(r: Recogniser, state: ast.Dict) -> bool:
    """The dict ``state`` is handed to a call named for saving, itself or through the
    name it is assigned to."""
    handed: list[ast.AST] = [state]
    statement = r.parent(state)
    if isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Name):
        for binding in r.file.names.bindings(statement.targets[0]):
            handed += r.file.names.loads(binding)
    for node in handed:
        user = r.parent(node)
        if isinstance(user, ast.Call) and node in user.args:
            if "save" in (last_name(user.func) or "").lower() and not _saved_here(r, user):
                return True
    return False


def _saved_here(r: Recogniser, call: ast.Call) -> bool:
    """``torch.save(state, path)`` (reported itself), or a save function of this file
    whose ``torch.save`` is reported in its body, naming what it saves; not one that
    forwards its arguments (MAE's ``save_if_main(*args)``: ``torch.save(*args)`` shows
    no state there)."""
    if r.qualname(call.func) == "torch.save":
        return True
    return isinstance(call.func, ast.Name) and any(
        isinstance(b.node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and not _forwards_to_torch_save(r, b.node)
        for b in r.file.names.bindings(call.func)
    )


def _forwards_to_torch_save(
    r: Recogniser, function: ast.FunctionDef | ast.AsyncFunctionDef
) -> bool:
    """``function``'s ``torch.save`` is handed its arguments starred: ``torch.save(*args)``."""
    return any(
        isinstance(node, ast.Call)
        and r.qualname(node.func) == "torch.save"
        and bool(node.args)
        and isinstance(node.args[0], ast.Starred)
        for node in ast.walk(function)
    )


def _holds_model(r: Recogniser, state: ast.expr) -> bool:
    """``torch.save``'s object holds a model's state: a ``.state_dict()`` in it, or a
    value that is evidently a module (``{"model": model}``)."""
    for node in ast.walk(state):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "state_dict"
        ):
            return True
        if isinstance(node, (ast.Name, ast.Attribute)) and r.file.values.module_framework(node):
            return True
    return False


def load_state_call(
    r: Recogniser, call: ast.Call, method: ast.Attribute, where: tuple[int, int]
) -> None:
    """``load-model-state``: ``model.load_state_dict(torch.load(path))`` is
    ``tj.load_state(model, path)``. Never ``model.load_state_dict(tj.load(path))``: an NNX
    module has no ``load_state_dict``. Rewritten for a Flax NNX model only."""
    receiver = method.value
    name = receiver.attr if isinstance(receiver, ast.Attribute) else r.text(receiver)
    if len(call.args) != 1 or any(n in name.lower() for n in _NOT_MODELS):
        return
    if _is_super(receiver) and not _in_torch_module(r, call):
        return  # a trainer's or a checkpointer's own load_state_dict (detectron2's)
    if last_name(receiver) == "self" and _in_a_runner(r, call):
        return  # audiocraft's solver restoring its own state
    if call.keywords:  # strict=False, assign=True: which keys load is torch's own rule
        if any(k.arg not in ("strict", "assign") for k in call.keywords):
            return  # not Module.load_state_dict (a helper's, map_location=...)
        given = ", ".join(r.text(k) for k in call.keywords)
        loaded = r.loaded_into(receiver, f"tj.load_state({r.text(receiver)}, state)")
        partial = any(
            k.arg == "strict" and isinstance(k.value, ast.Constant) and k.value.value is False
            for k in call.keywords
        )
        r.add(
            call,
            "load-model-state",
            (
                f'state = tj.state_dict({r.text(receiver)}, layout="torch")  # strict=False: '
                "the keys both have\n"
                f"state.update({{k: v for k, v in {r.text(call.args[0])}.items() if k in state}})\n"
                + loaded
            )
            if partial
            else loaded.replace(", state)", ", path)"),
            position=where,
            reason=(
                f"{given}: tj.load_state has no such argument; port the model to Flax NNX "
                "and load the keys it has by hand (nnx.update with the arrays you keep)"
                if not partial
                else "strict=False: tj.load_state loads every key the model has; the advice "
                "keeps the model's own values where the state has none"
            ),
        )
        return
    source = call.args[0]
    load = source if isinstance(source, ast.Call) else None
    if load is not None and r.qualname(load.func) == "torch.load" and load.args:
        r.reported.update({id(load), id(load.func)})  # one finding: tj.load_state reads it
        source = load.args[0]
    else:
        load = None
    model = r.text(receiver)
    candidate = r.add(
        call,
        "load-model-state",
        r.loaded_into(receiver, f"tj.load_state({model}, {r.text(source)})"),
        position=where,
        call=call,
        tj_name="tj.load_state",
    )
    plain_load = (
        load is not None
        and len(load.args) == 1
        and all(k.arg in ("map_location", "weights_only") for k in load.keywords)
    )
    if r.file.values.module_framework(receiver) != "nnx":
        candidate.reason = (
            f"{model} may be a torch module: port it to Flax NNX first "
            "(model.load_state_dict(tj.load(path)) fails: an NNX module has no load_state_dict)"
        )
    elif not isinstance(receiver, (ast.Name, ast.Attribute, ast.Subscript)):
        candidate.reason = f"{model} is no name to assign the loaded model to"
    elif not plain_load or not isinstance(r.parent(call), ast.Expr):
        candidate.reason = "tj.load_state reads the file itself: give it the path"
    else:
        start, end = r.file.span(call)
        candidate.rewrite = Rewrite(
            start, end, ("tj.load_state(", r.file.span(receiver), ", ", r.file.span(source), ")")
        )


def _is_super(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
    )


def _in_a_runner(r: Recogniser, node: ast.AST) -> bool:
    """``node`` is in a method of a class that runs training rather than computes (a
    ``*Trainer``, ``*Solver``, ``*Checkpointer``...) and is no torch module."""
    klass = r.file.names.enclosing(node, ast.ClassDef)
    return (
        isinstance(klass, ast.ClassDef)
        and _RUNNER.search(klass.name) is not None
        and not _in_torch_module(r, node)
    )


def _in_torch_module(r: Recogniser, node: ast.AST) -> bool:
    """``node`` is in a method of a class whose instances are torch modules."""
    klass = r.file.names.enclosing(node, ast.ClassDef)
    return isinstance(klass, ast.ClassDef) and TORCH_MODULE in r.file.values.class_kinds(klass)


def forwarded_map_location(r: Recogniser, call: ast.Call) -> None:
    """``torch-load-map-location``: ``map_location=`` given to a function of the script's
    own (``dist_util.load_state_dict(path, map_location=dev())``) is torch.load's, handed on:
    advice (the helper is where ``tj.load`` goes)."""
    name = r.qualname(call.func)
    if name is not None and name.startswith(("torch.", "tj.", "torch2jax_device.")):
        return  # torch.load and torch.hub's loaders have rows of their own
    for keyword in call.keywords:
        if keyword.arg == "map_location" and id(call) not in r.reported:
            candidate = r.add(
                keyword,
                "torch-load-map-location",
                f"tj.load(path, map_location={r.text(keyword.value)})",
                position=r.file.position(r.file.span(keyword)[0]),
            )
            candidate.reason = (
                f"{r.text(call.func)} hands map_location to torch.load: port the helper "
                "(tj.load inside it), not this call"
            )


def project_loader(r: Recogniser, call: ast.Call) -> bool:
    """A project's checkpoint loader, defined in another file: handed a ``map_location``
    (``setup_model(cfg, map_location)``, ``load(path, map_location=device)``), or named
    for ``torch.load`` (``safe_torch_load(path)``); ``True`` if reported."""
    for argument in [*call.args, *call.keywords]:
        value = argument.value if isinstance(argument, ast.keyword) else argument
        named = argument.arg if isinstance(argument, ast.keyword) else last_name(value)
        if named == "map_location":
            found = r.add(
                argument,
                "torch-load-map-location",
                position=r.file.position(r.file.span(argument)[0]),
            )
            break
    else:
        loader = last_name(call.func) or ""
        device = next((a for a in call.args if is_device_value(r, a)), None)
        if device is not None and _CHECKPOINT_LOADER.search(loader):
            found = r.add(  # load_checkpoint(path, device): torch.load's map_location
                device,
                "torch-load-map-location",
                f"tj.load(path, map_location={r.text(device)})",
                position=r.file.position(r.file.span(device)[0]),
            )
        elif _TORCH_LOADER.search(loader):
            found = r.add(call, "torch-load")
        else:
            return False
    found.reason = (
        f"{r.text(call.func)} is the project's own: it loads a torch checkpoint; port it "
        "where it is defined"
    )
    return True


def loads_onto_a_parameter(r: Recogniser, call: ast.Call) -> bool:
    """A function of this file whose ``torch.load(..., map_location=p)`` takes its
    parameter ``p`` (HiFi-GAN's ``load_checkpoint(filepath, device)``), called with a
    device there: the call's argument is torch.load's ``map_location``; ``True`` if
    reported."""
    if not isinstance(call.func, ast.Name):
        return False
    definition = next((b.node for b in r.file.names.bindings(call.func) if b.kind == "def"), None)
    if not isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    parameters = [a.arg for a in definition.args.args]
    for node in ast.walk(definition):
        if not (isinstance(node, ast.Call) and r.qualname(node.func) == "torch.load"):
            continue
        location = next((k.value for k in node.keywords if k.arg == "map_location"), None)
        if isinstance(location, ast.Name) and location.id in parameters:
            position = parameters.index(location.id)
            given = call.args[position] if position < len(call.args) else None
            given = next((k.value for k in call.keywords if k.arg == location.id), given)
            if given is not None and is_device_value(r, given):
                found = r.add(
                    given,
                    "torch-load-map-location",
                    f"tj.load(path, map_location={r.text(given)})",
                    position=r.file.position(r.file.span(given)[0]),
                )
                found.reason = (
                    f"{definition.name} hands {r.text(given)} to torch.load as its "
                    f"map_location (line {node.lineno}): port it there"
                )
                return True
    return False


def fsdp_state(r: Recogniser, call: ast.Call, where: tuple[int, int]) -> bool:
    """``dist-checkpoint-state``: ``model.state_dict()`` inside ``with
    FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, ...):``, the state FSDP
    gathers (or keeps sharded) as the context says; ``True`` if reported."""
    for block in _enclosing_withs(r, call):
        for item in block.items:
            entered = item.context_expr
            if isinstance(entered, ast.Call) and r.qualname(entered.func) in _FSDP_STATE_CONTEXTS:
                model = r.text(call.func.value) if isinstance(call.func, ast.Attribute) else ""
                r.add(
                    call,
                    "dist-checkpoint-state",
                    f'state = tj.state_dict(tj.to_device({model}, "cpu"))  # the full state '
                    "FSDP gathers here (every process calls it); orbax.checkpoint for "
                    "sharded state",
                    position=where,
                )
                return True
    return False


def _enclosing_withs(r: Recogniser, node: ast.AST) -> list[ast.With]:
    """The ``with`` statements around ``node`` in its function (or module)."""
    found = []
    parent = r.parent(node)
    while parent is not None and not isinstance(
        parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    ):
        if isinstance(parent, ast.With):
            found.append(parent)
        parent = r.parent(parent)
    return found
