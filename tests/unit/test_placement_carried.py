"""Nothing in a moved batch keeps an array where it was: holders by positions, generated.

For every way a batch can hold a tensor (containers tj walks, attribute bags, a ``set``,
a class of the user's with attributes or slots, an object with its own ``.to()``, the
tensor a few levels down inside such an object) and every position of the holder in a
batch (the root, a dict value, a list item, a dataclass field), ``tj.to_device`` either
moves every tensor (none is left anywhere in the result) or raises `tj.ConversionError`
naming the leaf path and the fix. The oracle is the garbage collector's own view of what
the result references (``gc.get_referents``), not tj's walk: a tensor reachable from the
result is a tensor tj left behind.
"""

from __future__ import annotations

import argparse
import collections
import collections.abc
import dataclasses
import gc
import types
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import pytest
import torch

import torch2jax_device as tj


class _Attributes:
    def __init__(self, value: Any) -> None:
        self.value = value


class _Slots:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class _MovesItself:
    def __init__(self, value: Any) -> None:
        self.value = value

    def to(self, device: object) -> _MovesItself:
        return self


@dataclasses.dataclass
class _Field:
    value: Any


#: How a batch holds a tensor, and whether tj moves it (True) or refuses it (False).
HOLDERS: dict[str, tuple[Callable[[Any], Any], bool]] = {
    "list": (lambda t: [t], True),
    "deque": (lambda t: collections.deque([t], maxlen=4), True),
    "simple-namespace": (lambda t: types.SimpleNamespace(a=t), True),
    "argparse-namespace": (lambda t: argparse.Namespace(a=t), True),
    "set": (lambda t: {t}, False),
    "frozenset": (lambda t: frozenset([t]), False),
    "attributes": (_Attributes, False),
    "slots": (_Slots, False),
    "moves-itself": (_MovesItself, False),
    "deep-inside": (lambda t: _Attributes({"layers": [_Slots(t)]}), False),
}

#: Where the holder sits in the batch, and the leaf path a refusal must name.
POSITIONS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "dict": (lambda holder: {"x": holder, "y": torch.zeros(1)}, r"\['x'\]"),
    "list": (lambda holder: [torch.zeros(1), holder], r"\[1\]"),
    "dataclass": (lambda holder: _Field(holder), r"\.value"),
}


def _left_tensors(root: Any) -> list[Any]:
    """Tensors reachable from ``root`` through plain objects (never through types,
    modules, functions or JAX/NumPy arrays' internals)."""
    stop = (type, types.ModuleType, types.FunctionType, jax.Array, np.ndarray, str, bytes)
    seen, found, frontier = {id(root)}, [], [root]
    for _ in range(8):
        following = []
        for node in frontier:
            if isinstance(node, torch.Tensor):
                found.append(node)
                continue
            for child in gc.get_referents(node):
                if id(child) not in seen and not isinstance(child, stop):
                    seen.add(id(child))
                    following.append(child)
        frontier = following
    return found


@pytest.mark.parametrize("position", list(POSITIONS))
@pytest.mark.parametrize("holder", list(HOLDERS))
def test_a_batch_comes_back_moved_or_refused_naming_the_leaf(holder: str, position: str) -> None:
    make, moves = HOLDERS[holder]
    place, path = POSITIONS[position]
    batch = place(make(torch.arange(3.0)))
    if moves:
        moved = tj.to_device(batch, "cpu")
        assert _left_tensors(moved) == []
        assert _left_tensors(batch)  # the oracle sees tensors where they are
    else:
        with pytest.raises(tj.ConversionError, match=rf"^leaf {path} is a .*Fix: .*pytree"):
            tj.to_device(batch, "cpu")


@pytest.mark.parametrize("holder", [name for name, (_, moves) in HOLDERS.items() if moves])
def test_moved_holders_keep_their_type_and_values_and_the_input(holder: str) -> None:
    make, _ = HOLDERS[holder]
    tensor = torch.arange(3.0)
    given = make(tensor)
    moved = tj.to_device(given, "cpu")
    assert type(moved) is type(given) and moved is not given
    (value,) = list(moved) if isinstance(moved, (list, collections.deque)) else vars(moved).values()
    assert isinstance(value, jax.Array) and value.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(value), tensor.numpy())
    assert _left_tensors(given)  # the input is not changed
    if isinstance(given, collections.deque):
        assert moved.maxlen == given.maxlen


def test_objects_holding_no_arrays_are_carried_as_they_are() -> None:
    note, plain = _Attributes({"run": "a", "step": 3}), object()
    moved = tj.to_device({"note": note, "plain": plain, "name": "x", "x": torch.ones(1)}, "cpu")
    assert moved["note"] is note and moved["plain"] is plain and moved["name"] == "x"


class _Endless(collections.abc.Sequence):  # type: ignore[type-arg]
    """A sequence object of a trillion items (a lazy dataset view, say)."""

    def __len__(self) -> int:
        return 10**12

    def __getitem__(self, index: Any) -> int:
        if isinstance(index, slice) or index >= 10**12:
            raise IndexError(index)
        return int(index)


def test_a_long_object_in_a_batch_is_looked_into_only_so_far() -> None:
    # What a batch may carry is decided from a bounded look: listing the whole object
    # first would never end here.
    endless = _Endless()
    assert tj.to_device({"rows": endless, "y": torch.ones(1)}, "cpu")["rows"] is endless
