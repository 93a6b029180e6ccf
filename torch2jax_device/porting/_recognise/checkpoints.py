"""The "Checkpoints" section: ``torch.load`` becomes ``tj.load`` when that is the same load."""

from __future__ import annotations

import ast

from .._rewrites import Rewrite
from .._values import PATH
from .base import Recogniser

__all__ = ["load_call"]

_LOAD_REFUSED = {
    "weights_only": "tj.load never runs code from the file (always weights_only=True)",
    "mmap": "tj.load has no mmap=: it reads the file once into aligned memory",
    "pickle_module": "tj.load has no pickle_module=",
    "encoding": "tj.load has no encoding=",
}


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
        elif keyword.arg not in ("f", "map_location"):
            return f"tj.load has no {keyword.arg}="
    source = (
        call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "f"), None)
    )
    if source is None:
        return "no file given"
    kinds = r.file.values.kinds(source)
    if "file" in kinds:
        return f"tj.load takes a path, and {r.text(source)} is a file object"
    if not kinds <= {PATH, "args-value"}:
        return f"tj.load takes a path; the scanner cannot tell what {r.text(source)} is"
    return ""
