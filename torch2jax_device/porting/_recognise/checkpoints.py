"""The "Checkpoints" section: ``torch.load`` becomes ``tj.load`` when that is the same load;
a model's weights saved and loaded (``torch.save(model.state_dict(), p)``,
``model.load_state_dict(torch.load(p))``)."""

from __future__ import annotations

import ast

from .._rewrites import Rewrite
from .._values import TJ
from .base import Recogniser

__all__ = ["forwarded_map_location", "load_call", "load_state_call", "save_call"]

_LOAD_REFUSED = {
    "weights_only": "tj.load never runs code from the file (always weights_only=True)",
    "pickle_module": "tj.load has no pickle_module=",
    "encoding": "tj.load has no encoding=",
}
# Receivers of load_state_dict that are not models (their state is no device idiom).
_NOT_MODELS = ("optim", "sched", "scaler", "loader", "sampler", "metric")


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
        return False
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
    if isinstance(receiver, ast.Call) and r.file.values.builtin(receiver.func) == "super":
        return  # a class's own load_state_dict handing on to its base's (not a model)
    if call.keywords:  # strict=False, assign=True: which keys load is torch's own rule
        if any(k.arg not in ("strict", "assign") for k in call.keywords):
            return  # not Module.load_state_dict (a helper's, map_location=...)
        given = ", ".join(r.text(k) for k in call.keywords)
        r.add(
            call,
            "load-model-state",
            f"nnx.update({r.text(receiver)}, kept)  # kept: the arrays of "
            f"{r.text(call.args[0])} the model has",
            position=where,
            reason=(
                f"{given}: tj.load_state has no such argument; port the model to Flax NNX "
                "and load the keys it has by hand (nnx.update with the arrays you keep)"
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
        f"{model} = tj.load_state({model}, {r.text(source)})",
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
    elif not plain_load or not isinstance(r.parent(call), ast.Expr):
        candidate.reason = "tj.load_state reads the file itself: give it the path"
    else:
        start, end = r.file.span(call)
        candidate.rewrite = Rewrite(
            start, end, ("tj.load_state(", r.file.span(receiver), ", ", r.file.span(source), ")")
        )


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
