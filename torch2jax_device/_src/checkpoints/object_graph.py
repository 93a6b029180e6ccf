"""The object graph of an unpickled checkpoint: every object found once, without recursion.

An unpickled checkpoint is a graph, not a tree: objects can be shared and can refer to
themselves, and nesting can be deeper than Python's recursion limit. ``Graph`` walks it
iteratively, each object once, and remembers where it found each one, so a message can
name a tensor by its path (``['model']['0.weight']``). Nothing here knows JAX or torch
beyond the classes it is handed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .messages import shown

__all__ = ["ATOMS", "PLAIN", "Graph", "TooManyTensorsError", "fields", "has_fields"]

#: What the unpickler may produce that holds no tensors and needs no walking.
ATOMS = frozenset({str, bytes, bytearray, int, float, bool, complex, type(None)})
#: Containers whose instances have no attributes of their own.
PLAIN = frozenset({dict, list, tuple, set, frozenset})
# A path shows this many slots at most: the first and last halves, and a count between.
_SHOWN_SLOTS = 12


class TooManyTensorsError(Exception):
    """The walk found more tensors than it was allowed (caught by the loader, which says
    what the limit is and how to raise it)."""


class Graph:
    """Every object reachable from an unpickled checkpoint, found once each, iteratively.

    ``tensors`` are the distinct tensors; ``containers`` the objects holding others, in
    the order found. Each object remembers the first slot it was found in, from which
    ``path`` builds a leaf path for messages. The walk stops with
    ``TooManyTensorsError`` as soon as it finds more than ``max_tensors`` tensors.
    """

    def __init__(self, root: Any, torch: Any, max_tensors: int) -> None:
        self._tensor = torch.Tensor
        atoms = ATOMS | {torch.Size, torch.device, torch.dtype}
        self.objects: dict[int, Any] = {id(root): root}
        # id -> (parent id, slot kind, key)
        self._found_in: dict[int, tuple[int, str, Any]] = {}
        self.tensors: list[Any] = []
        self.containers: list[Any] = []
        if type(root) in atoms:
            return
        stack = [root]
        while stack:
            obj = stack.pop()
            if isinstance(obj, self._tensor):
                self.tensors.append(obj)
                if len(self.tensors) > max_tensors:
                    raise TooManyTensorsError
                continue
            children = list(_children(obj))
            if not children:
                continue
            self.containers.append(obj)
            parent = id(obj)
            for kind, key, child in children:
                if type(child) in atoms or id(child) in self.objects:
                    continue
                self.objects[id(child)] = child
                self._found_in[id(child)] = (parent, kind, key)
                stack.append(child)

    def name(self, obj: Any) -> str:
        """Where ``obj`` is as a dotted name, e.g. ``model.0.weight`` (its first slot's keys
        and attribute names, joined by dots): what a rule per tensor name matches."""
        parts = []
        current = id(obj)
        while current in self._found_in:
            current, _, key = self._found_in[current]
            parts.append(key if isinstance(key, str) else shown(key, 80))
        return ".".join(reversed(parts))

    def path(self, obj: Any) -> str:
        """Where ``obj`` is, e.g. ``['model']['0.weight']``."""
        parts = []
        current = id(obj)
        while current in self._found_in:
            current, slot_kind, slot_key = self._found_in[current]
            parts.append(_slot(slot_kind, slot_key))
        parts.reverse()
        if len(parts) > _SHOWN_SLOTS:
            hidden = len(parts) - _SHOWN_SLOTS
            parts[_SHOWN_SLOTS // 2 : -_SHOWN_SLOTS // 2] = [f"<{hidden:,} more>"]
        return "".join(parts) or "<root>"


def _children(obj: Any) -> Iterator[tuple[str, Any, Any]]:
    """``(kind, key, child)`` for what ``obj`` holds: items, keys, elements, attributes."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield "key", key, key
            yield "item", key, value
    elif isinstance(obj, (list, tuple)):
        yield from (("item", index, item) for index, item in enumerate(obj))
    elif isinstance(obj, (set, frozenset)):
        yield from (("element", None, element) for element in obj)
    elif isinstance(obj, (np.ndarray, np.generic)):
        return
    if type(obj) not in PLAIN and has_fields(obj):
        yield from (("attr", name, value) for name, value in fields(obj))


def has_fields(obj: Any) -> bool:
    """Whether ``obj`` can hold attributes (a ``__dict__`` or slots)."""
    return hasattr(obj, "__dict__") or hasattr(type(obj), "__slots__")


def fields(obj: Any) -> Iterator[tuple[str, Any]]:
    """An object's attributes: its ``__dict__`` and its slots."""
    yield from getattr(obj, "__dict__", {}).items()
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                yield name, getattr(obj, name)


def _slot(kind: str, key: Any) -> str:
    if kind == "attr":
        return f".{key}"
    if kind == "key":
        return f"<a key {_short(key)}>"
    if kind == "element":
        return "<a set element>"
    return f"[{_short(key)}]"


def _short(value: Any) -> str:
    """A key as a path shows it; only plain values are quoted, never an object's repr."""
    return shown(value, 80) if type(value) in ATOMS else f"<{type(value).__name__}>"
