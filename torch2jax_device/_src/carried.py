"""Which objects a moved batch may carry as they are, and which it must refuse.

``tj.to_device`` walks containers (``trees``) and moves their arrays, tensors and
numbers; any other object inside is carried unchanged (a string, ``None``, metadata, an
image object), as Accelerate's ``send_to_device`` carries it. Two kinds are refused,
since carried they would leave arrays where they are in a batch the caller believes
moved: an object with its own ``.to()`` (a graph batch, a batch class: a torch batch
move would call it), and an object that holds arrays or tensors tj does not reach (a
class of the user's, a ``set`` of tensors).
"""

from __future__ import annotations

import collections.abc
import itertools
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from .detect import is_torch_tensor, type_name
from .errors import ConversionError

__all__ = ["refuse_uncarried"]

#: Objects carried through a batch as they are, never looked inside.
_PLAIN = (str, bytes, bytearray, type(None), bool, int, float, complex, type, range, slice)

#: How many levels of attributes and items to look through, and how many values at most.
_LOOK_DEPTH, _LOOK_VALUES = 4, 2000

#: What the fix of either refusal offers.
_CONTAINERS = (
    "hold its arrays in a dict, list, dataclass or NamedTuple, or register its class as a "
    "pytree (jax.tree_util.register_dataclass / register_pytree_node), which tj.to_device "
    "moves"
)


def refuse_uncarried(leaf: Any, path: Callable[[], str]) -> None:
    """Raise `tj.ConversionError` if ``leaf`` (an object ``to_device`` does not move) may
    not be carried unchanged; ``path()`` gives its leaf path for the message."""
    if isinstance(leaf, _PLAIN):
        return
    try:
        mover = getattr(leaf, "to", None)
    except Exception:  # an object's own __getattr__: then it has no usable .to
        mover = None
    if callable(mover):
        raise ConversionError(
            f"leaf {path()} is a {type_name(leaf)} with its own .to(), which tj.to_device "
            "does not call: its arrays would stay where they are. Fix: move it with its "
            f"own method (in torch: leaf.to(device.torch_device)), or {_CONTAINERS}"
        )
    where = _array_inside(leaf)
    if where is not None:
        raise ConversionError(
            f"leaf {path()} is a {type_name(leaf)}, which tj.to_device does not walk, and "
            f"it holds an array (at {where}) that would stay where it is. Fix: {_CONTAINERS}"
        )


def _array_inside(root: Any) -> str | None:
    """Where (``.attribute[item]``) the first array or tensor inside ``root`` is, looking
    a few levels into attributes, slots and items, breadth first; ``None`` if none is."""
    seen = {id(root)}
    frontier = [(root, "")]
    looked = 0
    for _ in range(_LOOK_DEPTH):
        following = []
        for node, path in frontier:
            for step, value in _insides(node):
                looked += 1
                if looked > _LOOK_VALUES:
                    return None
                if id(value) in seen or isinstance(value, _PLAIN):
                    continue
                seen.add(id(value))
                if isinstance(value, (jax.Array, np.ndarray)) or is_torch_tensor(value):
                    return path + step
                following.append((value, path + step))
        frontier = following
    return None


def _insides(node: Any) -> list[tuple[str, Any]]:
    """The (path step, value) pairs of ``node``'s instance attributes, slots and items;
    none for an object whose own code fails to show them."""
    if isinstance(node, (np.generic, type)):
        return []
    try:
        found: list[tuple[str, Any]] = []
        attributes = getattr(node, "__dict__", None)
        if isinstance(attributes, dict):
            found.extend((f".{name}", value) for name, value in attributes.items())
        slots = [name for name in getattr(type(node), "__slots__", ()) if isinstance(name, str)]
        found.extend((f".{name}", getattr(node, name)) for name in slots if hasattr(node, name))
        if isinstance(node, collections.abc.Mapping):  # at most _LOOK_VALUES, never all
            items = itertools.islice(node.items(), _LOOK_VALUES)
            found.extend((f"[{key!r}]", value) for key, value in items)
        elif isinstance(node, (collections.abc.Set, collections.abc.Sequence)):
            values = itertools.islice(node, _LOOK_VALUES)
            found.extend((f"[{i}]", value) for i, value in enumerate(values))
        return found
    except Exception:  # any class's own attribute or iteration code
        return []
