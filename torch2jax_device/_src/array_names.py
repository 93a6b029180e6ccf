"""The names and order a plan gives a model's or a tree's arrays.

A plan places arrays by name, in order: Accelerate's map is a model's module prefixes,
filled in the model's order. An NNX module's arrays are named and ordered as
``tj.state_dict`` lists them (``state_variables``, the one rule of which variables a
state dict holds); a tree's (a dict of arrays, nested lists and dicts, any registered
pytree, an Equinox module) by their dotted key paths, in the tree's own order.
``NamedArrays`` gives them and puts the placed ones back.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from .checkpoints.messages import shown
from .detect import is_equinox_module, is_nnx_module, is_nnx_state
from .errors import ConversionError
from .location import in_torch_order, is_array
from .trees import flatten

__all__ = ["NamedArrays", "is_model", "state_variables"]

#: Numbers ``to_device`` makes arrays of when given alone.
_NUMBERS = (bool, int, float, complex, np.generic)


def is_model(obj: Any) -> bool:
    """A Flax NNX or Equinox module: what ``NamedArrays`` names as a model."""
    return is_nnx_module(obj) or is_equinox_module(obj)


def state_variables(model: Any) -> list[tuple[tuple[Any, ...], Any]]:
    """``(path, variable)`` for each array of an NNX module or ``nnx.State`` that is its
    state: what ``tj.state_dict`` lists (by the path's dotted name) and a plan places.

    A module's come in the order its torch twin lists them (``location.in_torch_order``),
    a ``State``'s in its own. RNG state (keys and counts: nothing torch's state dict
    holds) and sown ``Intermediate`` values are left out, and so are variables holding
    no array.
    """
    nnx = sys.modules["flax.nnx"]
    state = model if is_nnx_state(model) else nnx.state(model)
    pairs = nnx.to_flat_state(state)
    if is_nnx_module(model):
        pairs = in_torch_order(model, pairs)
    found = []
    for path, variable in pairs:
        if isinstance(variable, (nnx.RngState, nnx.Intermediate)):
            continue
        if isinstance(variable.get_value(), (jax.Array, np.ndarray, jax.ShapeDtypeStruct)):
            found.append((tuple(path), variable))
    return found


class NamedArrays:
    """The arrays of a model or tree that a plan places, by name in the model's order,
    and how to put the placed ones back.

    An NNX module's are ``state_variables``' (``tj.state_dict``'s names and order); its
    other variables' values (RNG state) are ``unplanned``, and ``rebuild`` sets every
    variable in place and returns the module. A tree's are its array leaves (JAX,
    NumPy, torch), named by their dotted key paths (``layers.0.kernel`` for
    ``{"layers": [{"kernel": ...}]}``) in the tree's own order; ``rebuild`` gives a new
    tree, other leaves as they were (numbers in it too; a lone number is an array to
    place, named ``""``, as a lone array is). Abstract arrays (``jax.ShapeDtypeStruct``, from
    ``nnx.eval_shape``) are named too: a plan can be made for them, though they have no
    data to place.

    Raises:
        ConversionError: a tree holding an NNX module, or two leaves with one dotted
            name.
    """

    def __init__(self, obj: Any) -> None:
        self.arrays: dict[str, Any] = {}
        self.unplanned: list[Any] = []
        self._obj = obj
        if is_nnx_module(obj):
            nnx = sys.modules["flax.nnx"]
            self._variables = {
                ".".join(map(str, path)): variable for path, variable in state_variables(obj)
            }
            planned = {id(variable) for variable in self._variables.values()}
            self._others = [
                variable
                for _, variable in nnx.to_flat_state(nnx.state(obj))
                if id(variable) not in planned
            ]
            self.unplanned = [variable.get_value() for variable in self._others]
            self.arrays = {name: variable.get_value() for name, variable in self._variables.items()}
        else:
            self._flat = flatten(obj, with_paths=True, whole=is_nnx_module)
            self._names = _dotted(self._flat.paths)
            single = len(self._flat.leaves) == 1 and self._flat.leaves[0] is obj
            for name, path, leaf in zip(
                self._names, self._flat.paths, self._flat.leaves, strict=True
            ):
                if is_nnx_module(leaf):
                    raise ConversionError(
                        f"leaf {path} is an NNX module, and a plan places one model. Fix: "
                        "tj.to_device(module, 'auto', max_memory=...) for it"
                    )
                number = single and isinstance(leaf, _NUMBERS)
                if is_array(leaf) or isinstance(leaf, jax.ShapeDtypeStruct) or number:
                    self.arrays[name] = leaf

    def rebuild(self, placed: Mapping[str, Any], unplanned: list[Any]) -> Any:
        """The model with ``placed`` (by name) and ``unplanned`` (in order) in place."""
        if not is_nnx_module(self._obj):
            leaves = self._flat.leaves
            return self._flat.rebuild(
                [placed.get(name, leaf) for name, leaf in zip(self._names, leaves, strict=True)]
            )
        for variable, value in zip(self._others, unplanned, strict=True):
            variable.set_value(value)
        for name, variable in self._variables.items():
            variable.set_value(placed[name])
        return self._obj


def _dotted(paths: list[str]) -> list[str]:
    """Leaf paths as ``flatten`` writes them (``['layers'][0]['kernel']``,
    ``.layers[0].kernel``) as dotted names (``layers.0.kernel``).

    Raises:
        ConversionError: two leaves get one name (keys ``"a.b"`` and ``"a"``/``"b"``).
    """
    names: list[str] = []
    seen: set[str] = set()
    for path in paths:
        parts = []
        for match in _PATH_PART.finditer(path):
            attribute, key = match.group(1), match.group(2)
            if attribute is not None:
                parts.append(attribute)
            else:
                try:
                    parts.append(str(ast.literal_eval(key)))
                except (ValueError, SyntaxError):
                    parts.append(key)
        name = ".".join(parts)
        if name in seen:
            raise ConversionError(
                f"two leaves of the tree are both named {shown(name)} (the second at {path}), "
                "so a plan cannot tell them apart. Fix: rename a key, or place the tree "
                "with tj.to_device(tree, device) per part"
            )
        seen.add(name)
        names.append(name)
    return names


#: One step of a leaf path: ``.attribute`` or ``[key]``.
_PATH_PART = re.compile(
    r"""\.([A-Za-z_][A-Za-z0-9_]*)"""  # .attribute
    r"""|\[((?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\]])*)\]"""  # [key], quotes and all
)
