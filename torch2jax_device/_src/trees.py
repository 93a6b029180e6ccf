"""Flatten any container a PyTorch user passes around into leaves, and rebuild it.

JAX's pytree registry already covers dict (``OrderedDict`` and ``defaultdict`` with
its factory), list, tuple, namedtuple (optax states), ``None``, Flax ``FrozenDict``,
NNX ``State`` and every registered class. Plain ``@dataclass`` instances are leaves to
JAX; here their ``init`` fields are flattened too (Accelerate's ``send_to_device``
handles neither dataclasses nor ``defaultdict``), and rebuilt with
``dataclasses.replace`` so the input is never mutated.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax

__all__ = ["Flat", "flatten"]


def _is_plain_dataclass(obj: object) -> bool:
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


@dataclasses.dataclass
class Flat:
    """The leaves of a tree, their paths (when asked for), and how to rebuild it."""

    leaves: list[Any]
    paths: list[str]
    rebuild: Callable[[list[Any]], Any]


def flatten(tree: Any, *, with_paths: bool = False, prefix: str = "") -> Flat:
    """Flatten ``tree``; ``Flat.rebuild(new_leaves)`` makes a tree of the same structure.

    Paths (``"['layer']['w']"``, ``".weight"``) are computed only with ``with_paths``,
    which error messages use; the hot path skips them.
    """
    if with_paths:
        pairs, treedef = jax.tree_util.tree_flatten_with_path(tree)
        leaves = [leaf for _, leaf in pairs]
        paths = [prefix + jax.tree_util.keystr(path) for path, _ in pairs]
    else:
        leaves, treedef = jax.tree_util.tree_flatten(tree)
        paths = []
    if not any(_is_plain_dataclass(leaf) for leaf in leaves):
        return Flat(leaves, paths, functools.partial(jax.tree_util.tree_unflatten, treedef))

    flat_leaves: list[Any] = []
    flat_paths: list[str] = []
    # Per original leaf: how many flat leaves it became, and how to rebuild it.
    pieces: list[tuple[int, Callable[[list[Any]], Any] | None]] = []
    for position, leaf in enumerate(leaves):
        path = paths[position] if with_paths else ""
        if not _is_plain_dataclass(leaf):
            flat_leaves.append(leaf)
            flat_paths.extend([path] if with_paths else [])
            pieces.append((1, None))
            continue
        fields = {f.name: getattr(leaf, f.name) for f in dataclasses.fields(leaf) if f.init}
        inner = _flatten_fields(fields, with_paths=with_paths, prefix=path)
        flat_leaves.extend(inner.leaves)
        flat_paths.extend(inner.paths)
        pieces.append((len(inner.leaves), _replacer(leaf, inner.rebuild)))

    def rebuild(new_leaves: list[Any]) -> Any:
        rebuilt, start = [], 0
        for count, make in pieces:
            chunk = new_leaves[start : start + count]
            rebuilt.append(chunk[0] if make is None else make(chunk))
            start += count
        return jax.tree_util.tree_unflatten(treedef, rebuilt)

    return Flat(flat_leaves, flat_paths, rebuild)


def _flatten_fields(fields: dict[str, Any], *, with_paths: bool, prefix: str) -> Flat:
    names = list(fields)
    parts = [
        flatten(fields[name], with_paths=with_paths, prefix=f"{prefix}.{name}") for name in names
    ]

    def rebuild(new_leaves: list[Any]) -> dict[str, Any]:
        values, start = {}, 0
        for name, part in zip(names, parts, strict=True):
            values[name] = part.rebuild(new_leaves[start : start + len(part.leaves)])
            start += len(part.leaves)
        return values

    return Flat(
        [leaf for part in parts for leaf in part.leaves],
        [path for part in parts for path in part.paths],
        rebuild,
    )


def _replacer(
    instance: Any, rebuild_fields: Callable[[list[Any]], Any]
) -> Callable[[list[Any]], Any]:
    return lambda new_leaves: dataclasses.replace(instance, **rebuild_fields(new_leaves))
