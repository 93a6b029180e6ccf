"""Flatten any container a PyTorch user passes around into leaves, and rebuild it.

Dicts keep their own order. JAX's pytree registry sorts the keys of ``dict`` and
``defaultdict`` when it flattens them, so a tree rebuilt by JAX has its keys sorted
(``x, y = batch.values()`` then swaps inputs and labels), and keys that cannot be
compared (``{1: a, "a": b}``) make it raise. Here mappings (``dict``, ``OrderedDict``,
``defaultdict`` with its factory) are flattened in insertion order and rebuilt as the
same type, as torch code sees them, at any depth: inside lists, tuples, namedtuples,
dataclasses and every registered pytree too. Lists and tuples are walked here as
well, which keeps the hot path (a batch dict of arrays) out of JAX's flattening.

Everything else comes from JAX's registry: namedtuple (optax states), ``None`` (no
leaves), Flax ``FrozenDict``, NNX ``State`` and every registered class. Plain
``@dataclass`` instances are leaves to JAX; here their ``init`` fields are flattened
too (Accelerate's ``send_to_device`` handles neither dataclasses nor ``defaultdict``),
and rebuilt with ``dataclasses.replace`` so the input is never mutated. Containers JAX
takes for leaves (subclasses of dict and list, ``UserDict``, other mutable mappings and
sequences such as ``deque``, tuple subclasses, whatever arguments their constructors
take) are walked too and rebuilt as shallow copies of themselves, as Accelerate's
``send_to_device`` moves them; attribute bags (``SimpleNamespace``,
``argparse.Namespace``) are rebuilt as new bags holding the new values.
"""

from __future__ import annotations

import argparse
import collections
import collections.abc
import copy
import dataclasses
import types
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np

__all__ = ["Flat", "flatten"]

#: Rebuilds one subtree from the iterator of new leaves, consuming its own leaves.
_Builder = Callable[[Iterator[Any]], Any]

#: The mappings rebuilt in their own order (exact types: JAX treats subclasses as leaves).
_MAPPINGS = (dict, collections.OrderedDict, collections.defaultdict)

#: Attribute bags, walked as containers: each attribute a child, rebuilt as a new bag.
_NAMESPACES = (types.SimpleNamespace, argparse.Namespace)

#: Values that are leaves for certain: no registry lookup needed.
_LEAF_TYPES = (np.ndarray, np.generic, jax.Array, str, bytes, int, float, complex)


@dataclasses.dataclass
class Flat:
    """The leaves of a tree, their paths (when asked for), and how to rebuild it."""

    leaves: list[Any]
    paths: list[str]
    rebuild: Callable[[list[Any]], Any]


def flatten(tree: Any, *, with_paths: bool = False, prefix: str = "", whole: _Whole = None) -> Flat:
    """Flatten ``tree``; ``Flat.rebuild(new_leaves)`` makes a tree of the same structure.

    Leaves come in the tree's own order (a dict's insertion order). Paths
    (``"['layer']['w']"``, ``".weight"``) are computed only with ``with_paths``, which
    error messages use; the hot path skips them. Nodes ``whole`` is true for are leaves
    themselves, never opened (``to_device`` moves NNX modules in place, as
    ``Module.to``); the same ``whole`` gives the same leaves and paths.
    """
    if not with_paths and type(tree) is dict:  # a batch of arrays: the hot path
        flat = _flat_dict(tree)
        if flat is not None:
            return flat
    leaves: list[Any] = []
    paths: list[str] | None = [] if with_paths else None
    build = _walk(tree, leaves, paths, whole, prefix)
    return Flat(leaves, paths or [], lambda new_leaves: build(iter(new_leaves)))


def _flat_dict(tree: dict[Any, Any]) -> Flat | None:
    """A dict whose values are all leaves, in one step; ``None`` for any other dict."""
    values = list(tree.values())
    for value in values:  # a loop, not all(...): this runs for every small batch
        if not isinstance(value, _LEAF_TYPES):
            return None
    keys = list(tree)
    return Flat(values, [], lambda new_leaves: dict(zip(keys, new_leaves, strict=True)))


#: Which nodes stay whole (leaves, their insides never walked); ``None``: none.
_Whole = Callable[[Any], bool] | None

#: A leaf's builder: the next new leaf.
_leaf: _Builder = next


def _none(new_leaves: Iterator[Any]) -> None:
    return None


def _walk(
    node: Any, leaves: list[Any], paths: list[str] | None, whole: _Whole, path: str
) -> _Builder:
    """Append ``node``'s leaves (and paths) in order; return how to rebuild it."""
    kind = type(node)
    if kind in _MAPPINGS:
        return _walk_mapping(node, leaves, paths, whole, path)
    if kind is list or kind is tuple:
        parts = [
            _walk(item, leaves, paths, whole, _item_path(paths, path, index))
            for index, item in enumerate(node)
        ]
        return lambda new_leaves: kind([part(new_leaves) for part in parts])
    if node is None:
        return _none
    if isinstance(node, _LEAF_TYPES):
        leaves.append(node)
        if paths is not None:
            paths.append(path)
        return _leaf
    return _walk_registered(node, leaves, paths, whole, path)


def _walk_mapping(
    mapping: Any, leaves: list[Any], paths: list[str] | None, whole: _Whole, path: str
) -> _Builder:
    keys = list(mapping)
    parts: list[_Builder] = []
    for key, value in mapping.items():
        if isinstance(value, _LEAF_TYPES) and paths is None:  # the common case, inline
            leaves.append(value)
            parts.append(_leaf)
        else:
            parts.append(_walk(value, leaves, paths, whole, _item_path(paths, path, key)))
    if type(mapping) is collections.defaultdict:
        factory = mapping.default_factory
        return lambda new_leaves: collections.defaultdict(
            factory, zip(keys, [part(new_leaves) for part in parts], strict=True)
        )
    kind = type(mapping)
    attributes = getattr(mapping, "__dict__", None)  # a state dict's _metadata
    if attributes:
        return lambda new_leaves: _with_attributes(
            kind(zip(keys, [part(new_leaves) for part in parts], strict=True)), attributes
        )
    return lambda new_leaves: kind(zip(keys, [part(new_leaves) for part in parts], strict=True))


def _with_attributes(mapping: Any, attributes: dict[str, Any]) -> Any:
    """``mapping`` with the instance attributes of the one it replaces (``_metadata``:
    the versions ``load_state_dict`` reads from a torch state dict)."""
    mapping.__dict__.update(attributes)
    return mapping


def _item_path(paths: list[str] | None, path: str, key: Any) -> str:
    """``path[key]``, computed only where paths are asked for (errors; not the hot path)."""
    return f"{path}[{key!r}]" if paths is not None else ""


def _is_mapping(value: Any) -> bool:
    return type(value) in _MAPPINGS


def _walk_registered(
    node: Any, leaves: list[Any], paths: list[str] | None, whole: _Whole, path: str
) -> _Builder:
    """A node JAX's registry knows (or a leaf): its children walked here, mappings included."""
    if whole is not None and whole(node):
        leaves.append(node)
        if paths is not None:
            paths.append(path)
        return _leaf
    if _is_namedtuple(node):
        return _walk_namedtuple(node, leaves, paths, whole, path)
    is_leaf = _is_mapping if whole is None else lambda child: _is_mapping(child) or whole(child)
    if paths is None:
        children, treedef = jax.tree_util.tree_flatten(node, is_leaf=is_leaf)
        child_paths = [""] * len(children)
    else:
        pairs, treedef = jax.tree_util.tree_flatten_with_path(node, is_leaf=is_leaf)
        children = [child for _, child in pairs]
        child_paths = [path + jax.tree_util.keystr(key) for key, _ in pairs]
    if len(children) == 1 and children[0] is node:  # a leaf to JAX
        if _is_plain_dataclass(node):
            return _walk_dataclass(node, leaves, paths, whole, path)
        foreign = _walk_foreign_container(node, leaves, paths, whole, path)
        if foreign is not None:
            return foreign
        leaves.append(node)
        if paths is not None:
            paths.append(path)
        return _leaf
    parts = [
        _walk(child, leaves, paths, whole, child_path)
        for child, child_path in zip(children, child_paths, strict=True)
    ]
    return lambda new_leaves: jax.tree_util.tree_unflatten(
        treedef, [part(new_leaves) for part in parts]
    )


def _walk_foreign_container(
    node: Any, leaves: list[Any], paths: list[str] | None, whole: _Whole, path: str
) -> _Builder | None:
    """A container JAX takes for a leaf: subclasses of dict and list (``UserDict``,
    ``UserList``, any mutable mapping or sequence: ``deque``), attribute bags
    (``SimpleNamespace``, ``argparse.Namespace``), and tuples.

    Its items are walked and it is rebuilt as a shallow copy of itself holding the new
    items (attributes kept, as Hugging Face's ``BatchEncoding`` needs); ``None`` for
    anything else (it stays a leaf).
    """
    if isinstance(node, (dict, collections.abc.MutableMapping)):
        keys = list(node)
        parts = [
            _walk(node[key], leaves, paths, whole, _item_path(paths, path, key)) for key in keys
        ]

        # A dict's own item setter, not the subclass's: the copy holds every key already,
        # and a __setitem__ that transforms values would apply to them a second time.
        set_item: Callable[[Any, Any, Any], None] = (
            dict.__setitem__ if isinstance(node, dict) else type(node).__setitem__
        )

        def rebuild_mapping(new_leaves: Iterator[Any]) -> Any:
            new = copy.copy(node)
            for key, part in zip(keys, parts, strict=True):
                set_item(new, key, part(new_leaves))
            return new

        return rebuild_mapping
    if isinstance(node, (list, collections.UserList)):
        parts = [
            _walk(item, leaves, paths, whole, _item_path(paths, path, i))
            for i, item in enumerate(node)
        ]

        def rebuild_list(new_leaves: Iterator[Any]) -> Any:
            new = copy.copy(node)
            new[:] = [part(new_leaves) for part in parts]
            return new

        return rebuild_list
    if isinstance(node, collections.abc.MutableSequence):  # deque (its maxlen kept)
        parts = [
            _walk(item, leaves, paths, whole, _item_path(paths, path, i))
            for i, item in enumerate(node)
        ]

        def rebuild_sequence(new_leaves: Iterator[Any]) -> Any:
            new = copy.copy(node)
            new.clear()
            new.extend([part(new_leaves) for part in parts])
            return new

        return rebuild_sequence
    if type(node) in _NAMESPACES:
        names = list(vars(node))
        parts = [
            _walk(value, leaves, paths, whole, f"{path}.{name}")
            for name, value in vars(node).items()
        ]
        kind = type(node)
        return lambda new_leaves: kind(
            **{name: part(new_leaves) for name, part in zip(names, parts, strict=True)}
        )
    if isinstance(node, tuple):
        kind = type(node)
        parts = [
            _walk(item, leaves, paths, whole, _item_path(paths, path, i))
            for i, item in enumerate(node)
        ]
        if _rebuilds_from_items(node):
            return lambda new_leaves: kind([part(new_leaves) for part in parts])
        return lambda new_leaves: _tuple_holding(node, [part(new_leaves) for part in parts])
    return None


def _rebuilds_from_items(node: tuple[Any, ...]) -> bool:
    """Whether ``type(node)(items)`` makes an equal tuple (``torch.Size``, a plain
    subclass); not for one whose constructor takes its items as separate arguments."""
    try:
        return bool(type(node)(list(node)) == node)
    except Exception:  # any constructor of any class: then it is rebuilt by _tuple_holding
        return False


def _tuple_holding(node: tuple[Any, ...], items: list[Any]) -> tuple[Any, ...]:
    """A tuple subclass whose constructor takes other arguments (``Pair(a, b)``), holding
    ``items``: made as ``tuple`` makes it, with the original's attributes, since its own
    constructor cannot take the items; ``node`` itself where no item changed."""
    if all(new is old for new, old in zip(items, node, strict=True)):
        return node
    rebuilt: tuple[Any, ...] = tuple.__new__(type(node), items)
    attributes = getattr(node, "__dict__", None)
    if attributes:
        rebuilt.__dict__.update(attributes)
    return rebuilt


def _is_namedtuple(node: Any) -> bool:
    return isinstance(node, tuple) and isinstance(getattr(type(node), "_fields", None), tuple)


def _walk_namedtuple(
    node: Any, leaves: list[Any], paths: list[str] | None, whole: _Whole, path: str
) -> _Builder:
    """A namedtuple's items, rebuilt as ``tuple`` makes it: a ``__new__`` of its own that
    transforms its arguments is not run again (JAX's unflatten would call it)."""
    fields = type(node)._fields
    parts = [
        _walk(item, leaves, paths, whole, f"{path}.{field}")
        for field, item in zip(fields, node, strict=False)
    ]
    return lambda new_leaves: _tuple_holding(node, [part(new_leaves) for part in parts])


def _is_plain_dataclass(obj: object) -> bool:
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


def _walk_dataclass(
    instance: Any, leaves: list[Any], paths: list[str] | None, whole: _Whole, path: str
) -> _Builder:
    """Every field the instance holds (``init=False`` ones too), rebuilt as a copy with
    the new values set: its ``__init__`` and ``__post_init__`` are not run again (a
    ``__post_init__`` that scales or pads would apply twice, and ``init=False`` fields
    would be reset)."""
    names = [field.name for field in dataclasses.fields(instance) if hasattr(instance, field.name)]
    parts = [
        _walk(getattr(instance, name), leaves, paths, whole, f"{path}.{name}") for name in names
    ]

    def rebuild(new_leaves: Iterator[Any]) -> Any:
        new = copy.copy(instance)
        for name, part in zip(names, parts, strict=True):
            object.__setattr__(new, name, part(new_leaves))  # frozen ones too
        return new

    return rebuild
