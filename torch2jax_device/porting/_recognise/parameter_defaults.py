"""A device named as the default of a parameter that is no ``device`` by its name (round
9's development set: Chatterbox's ``def load(cls, fpath, map_location="cpu")``), section
"Devices".

``map_location="cpu"`` as a parameter's default is the device a checkpoint is loaded
onto (``device-string``), handed on to ``torch.load(..., map_location=map_location)``:
``tj.load`` takes the same names.
"""

from __future__ import annotations

import ast

from .base import Recogniser
from .device_strings import names_a_device

__all__ = ["map_location_default"]

_LOCATIONS = frozenset({"map_location"})


def map_location_default(r: Recogniser, node: ast.arguments) -> None:
    """``device-string``: ``def load(path, map_location="cpu")``."""
    positional = [*node.posonlyargs, *node.args]
    pairs = list(
        zip(positional[len(positional) - len(node.defaults) :], node.defaults, strict=True)
    )
    pairs += [
        (a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if d is not None
    ]
    for argument, default in pairs:
        if (
            argument.arg.strip("_").lower() in _LOCATIONS
            and isinstance(default, ast.Constant)
            and names_a_device(default.value)
            and id(default) not in r.reported
        ):
            r.add(
                default,
                "device-string",
                f"{argument.arg}={r.text(default)}  # a device's name: tj.load(path, "
                f"map_location={argument.arg}) takes the same names",
            )
