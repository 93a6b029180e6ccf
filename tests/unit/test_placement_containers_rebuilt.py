"""Containers tj.to_device rebuilds run none of their own code again.

The idiom being ported moves each tensor of a batch (Accelerate's ``send_to_device``, a
batch class's hand-written ``.to``): construction never runs twice. A dataclass whose
``__post_init__`` scales, pads or counts, ``init=False`` fields holding arrays or counters,
frozen and slotted dataclasses, a namedtuple with a ``__new__`` of its own, a dict
subclass whose ``__setitem__`` transforms: each is generated here, and every field after
``tj.to_device`` must equal the field moved on its own (same values, a JAX array where
an array was, the same other values).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import pytest

import torch2jax_device as tj


def _values() -> np.ndarray[Any, Any]:
    return np.array([1.0, 3.0], np.float32)


@dataclasses.dataclass
class Scaled:
    x: np.ndarray[Any, Any]

    def __post_init__(self) -> None:
        self.x = self.x * 2  # a unit conversion: applying it twice is wrong


@dataclasses.dataclass
class Derived:
    x: np.ndarray[Any, Any]
    count: int = dataclasses.field(init=False, default=0)
    cache: Any = dataclasses.field(init=False, default=None)

    def __post_init__(self) -> None:
        self.count += 1
        self.cache = self.x + 1


@dataclasses.dataclass(frozen=True)
class Frozen:
    x: np.ndarray[Any, Any]
    scale: float = 2.0


@dataclasses.dataclass(slots=True)
class Slotted:
    x: np.ndarray[Any, Any]
    mask: Any = dataclasses.field(init=False, default=None)

    def __post_init__(self) -> None:
        self.mask = self.x > 1


class Doubled(collections.namedtuple("Doubled", "x label")):
    __slots__ = ()

    def __new__(cls, x: Any, label: str) -> Doubled:
        return super().__new__(cls, np.asarray(x) * 2, label)


class Scaling(dict):  # type: ignore[type-arg]
    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, np.asarray(value) * 10)


def _derived() -> Derived:
    made = Derived(_values())
    made.count, made.cache = 5, np.array([9.0, 9.0], np.float32)  # changed since
    return made


def _scaling() -> Scaling:
    made = Scaling()
    made["x"] = _values()
    return made


CONTAINERS: dict[str, Callable[[], Any]] = {
    "post_init_scales": lambda: Scaled(_values()),
    "init_false_fields": _derived,
    "frozen": lambda: Frozen(_values()),
    "slots_init_false": lambda: Slotted(_values()),
    "namedtuple_own_new": lambda: Doubled(_values(), "a"),
    "dict_setitem_transforms": _scaling,
}


def _fields(container: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(container):
        return {f.name: getattr(container, f.name) for f in dataclasses.fields(container)}
    if isinstance(container, tuple):
        return dict(zip(type(container)._fields, container, strict=True))
    return dict(container)


@pytest.mark.parametrize("nested", [False, True], ids=["alone", "in_a_batch"])
@pytest.mark.parametrize("name", list(CONTAINERS))
def test_every_field_is_the_field_moved_on_its_own(name: str, nested: bool) -> None:
    original = CONTAINERS[name]()
    before = _fields(original)
    moved = (
        tj.to_device({"batch": [original]}, "cpu")["batch"][0]
        if nested
        else (tj.to_device(original, "cpu"))
    )
    assert type(moved) is type(original)
    after = _fields(moved)
    assert after.keys() == before.keys()
    for field, value in before.items():
        if isinstance(value, np.ndarray):
            assert isinstance(after[field], jax.Array), field
            assert np.asarray(after[field]).tolist() == value.tolist(), field
        else:
            assert after[field] == value, field
