"""The feeding fuzzer's draws: a torch data pipeline and the loop over it, as plain data.

A :class:`Draw` is everything one example of ``tests/parity/test_feeding_fuzz.py`` needs,
written as plain values: the dataset (its style, length, the dtypes of its array leaves,
an item whose load raises), how the ``DataLoader`` batches it (batch size, ``drop_last``,
shuffling from a seeded ``torch.Generator``, a sampler or batch sampler, the collate
function, worker processes, ``pin_memory``), the target device, how the port feeds it
(``tj.DeviceLoader`` or ``tj.prefetch_to_device``, lookahead, background thread, pinned
staging) and the loop (epochs, ``set_epoch`` between them, an early ``break``). The same
draw builds the torch pipeline and the port's afresh (:func:`build_loader`), prints as
one line, and shrinks by rewriting a field. ``draw(rng)`` makes one from a seeded
``random.Random``; nothing here knows what torch answers (``feeding_fuzz_oracle`` asks).

Everything a DataLoader worker runs (the datasets, the collate functions) is defined at
this module's top level, so that ``multiprocessing_context="spawn"`` workers import it.
"""

from __future__ import annotations

import builtins
import collections
import dataclasses
import math
import random
from typing import Any

import numpy as np
import torch
from torch.utils import data as torch_data
from torch.utils.data import Dataset, IterableDataset

from tests.support import fuzz_runs
from tests.support.deadlines import deadline

#: Tensor dtypes a dataset's array leaves take (torch's names).
TENSOR_DTYPES = (
    "float32", "float32", "float64", "int64", "int64", "int32", "int16", "int8", "uint8",
    "bool", "bfloat16", "float16", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2",
)  # fmt: skip
#: NumPy leaves' dtypes: the ones ``torch.from_numpy`` takes (a port's loop converts them).
NUMPY_DTYPES = ("float32", "float64", "int64", "int32", "uint8", "bool", "float16", "int8")

#: How a dataset's items look. ``iterable`` is an ``IterableDataset`` of ``tuples`` items.
STYLES = (
    "tensors", "tuples", "dicts", "nested", "numpy", "scalars", "strings", "named", "bare",
    "iterable",
)  # fmt: skip

#: Errors a dataset raises at its failing item (``DataError`` is a user's own class;
#: ``StopIteration`` ends torch's epoch there, quietly).
ERRORS = ("ValueError", "KeyError", "IndexError", "RuntimeError", "DataError", "StopIteration")

#: Where batches go: a device string, ``None`` (``default``), a ``torch.device``, a
#: ``jax.Device``; ``cpu:1`` and the shardings need two CPU devices.
TARGETS_ONE = ("cpu", "cpu:0", "default", "torch.device", "jax.Device")
TARGETS_MANY = ("cpu:1", "single:1", "mesh-split", "mesh-replicated")

#: A user's item: a named tuple (default_collate keeps its type).
Point = collections.namedtuple("Point", ["x", "y"])


class DataError(Exception):
    """A user's own error class, raised by a dataset."""


@dataclasses.dataclass(frozen=True)
class Data:
    """The dataset: which items it holds, and the one whose load raises."""

    style: str
    length: int
    #: The dtypes of the item's array leaves, in order (torch names).
    dtypes: tuple[str, ...]
    #: The shape of each array leaf of an item (a batch adds the batch axis).
    shape: tuple[int, ...] = (2,)
    #: Values at the edges of their dtype: NaN, infinities, -0.0, subnormals, int64 past
    #: 32 bits, float64 past float32's range.
    edges: bool = False
    #: The item whose load raises ``error``; ``None``: none does.
    raise_at: int | None = None
    error: str = "ValueError"
    #: An iterable dataset defines ``__len__`` (a DataLoader's ``len()`` then works).
    sized: bool = True


@dataclasses.dataclass(frozen=True)
class Draw:
    """One training loop's feeding, both frameworks' sides built from it."""

    data: Data
    #: ``None``: no automatic batching (each item is a batch).
    batch_size: int | None = 1
    drop_last: bool = False
    shuffle: bool = False
    #: ``None``, or (kind, its arguments): ``random``, ``sequential``, ``subset``,
    #: ``distributed`` (a ``sampler=``), ``batch`` (a ``batch_sampler=`` over a random or
    #: sequential sampler).
    sampler: tuple[str, tuple[tuple[str, Any], ...]] | None = None
    #: ``default``, ``lists`` (items as they are) or ``numpy`` (leaves stacked in NumPy).
    collate: str = "default"
    workers: int = 0
    #: The DataLoader's own ``pin_memory`` (the same on both sides).
    loader_pin: bool = False
    target: str = "cpu"
    #: ``DeviceLoader`` or ``prefetch`` (``tj.prefetch_to_device`` over the DataLoader).
    api: str = "DeviceLoader"
    size: int = 2
    background: bool | None = None
    #: The port's staging in pinned host memory (``DeviceLoader(pin_memory=...)``).
    pin: bool = False
    epochs: int = 1
    #: Leave the first epoch after this many batches (``break``), then iterate again.
    break_after: int | None = None
    seed: int = 0

    def expression(self) -> str:
        """The draw as one line: what to rerun."""
        return fuzz_runs.expression(self, always=("data",))

    def needs_devices(self) -> int:
        return 2 if self.target in TARGETS_MANY else 1


# --- the datasets (run in DataLoader workers too) --------------------------------------------


def leaf(data: Data, index: int, position: int, dtype: str) -> torch.Tensor:
    """Item ``index``'s array leaf at ``position``: distinct values, edges where drawn."""
    count = math.prod(data.shape)
    values = torch.arange(count, dtype=torch.float64) * 1.5 - 2.0 + 7 * index + 3 * position
    if data.edges and count:
        edges = {
            "float": [math.nan, math.inf, -0.0, 1e-40, -math.inf, 3.5e38],
            "int": [2**40 + index, -(2**35)],
            "small": [-128, 127, 255],
        }
        kind = "int" if dtype == "int64" else "small" if dtype in ("int8", "uint8") else "float"
        pool = edges[kind]
        flat = values.reshape(-1)
        flat[(index + position) % count] = pool[(index + position) % len(pool)]
    if dtype == "bool":
        return values.reshape(data.shape).remainder(2) > 0.5
    if dtype in ("int64", "int32", "int16", "int8", "uint8"):
        floor = values.nan_to_num(0.0, 0.0, 0.0).floor()
        if dtype != "int64":
            info = torch.iinfo(getattr(torch, dtype))
            floor = floor.clamp(info.min, info.max)
        return floor.to(torch.int64).to(getattr(torch, dtype)).reshape(data.shape)
    if dtype.startswith("complex"):
        return torch.complex(values, -values).to(getattr(torch, dtype)).reshape(data.shape)
    return values.to(getattr(torch, dtype)).reshape(data.shape)


def item(data: Data, index: int) -> Any:
    """Item ``index`` of the dataset (raising at ``data.raise_at``)."""
    if index == data.raise_at:
        error = DataError if data.error == "DataError" else getattr(builtins, data.error)
        raise error(f"item {index} cannot be loaded")
    leaves = [leaf(data, index, position, dtype) for position, dtype in enumerate(data.dtypes)]
    first, rest = leaves[0], leaves[1:]
    style = data.style
    if style in ("tensors", "tuples", "iterable"):
        return tuple(leaves)
    if style == "dicts":
        built: dict[str, Any] = {"x": first, "label": index % 3}
        built.update({f"f{position}": value for position, value in enumerate(rest)})
        return built
    if style == "nested":
        return {"inputs": [first, tuple(rest)], "meta": {"id": index, "scale": index / 4}}
    if style == "numpy":
        return tuple(_numpy(value) for value in leaves)
    if style == "scalars":
        return (first, index, index / 2 - 1, bool(index % 2), np.int16(index), np.float32(index))
    if style == "strings":  # None: default_collate refuses it (TypeError), lists keep it
        return (first, f"item-{index}", *rest) if index % 3 else (first, f"item-{index}", None)
    if style == "named":
        return Point(first, tuple(rest) if rest else index)
    if style == "bare":  # one leaf, no container: a tensor, a NumPy scalar, a number
        bare: tuple[Any, ...] = (
            first,
            np.float32(index / 2),
            np.int16(index),
            index,
            index / 4,
            bool(index % 2),
        )
        return bare[(index // 3 + len(data.dtypes)) % len(bare)]  # in runs of one kind
    raise AssertionError(style)


def _numpy(value: torch.Tensor) -> Any:
    """The NumPy array of ``value`` (bfloat16 and float8, which NumPy lacks, as float32)."""
    if value.dtype.itemsize < 4 and value.dtype.is_floating_point:
        value = value.float()
    return value.numpy()


class MapDataset(Dataset[Any]):
    """A map-style dataset of ``item(data, index)``."""

    def __init__(self, data: Data) -> None:
        self.data = data

    def __len__(self) -> int:
        return self.data.length

    def __getitem__(self, index: int) -> Any:
        return item(self.data, index)


class IterableData(IterableDataset[Any]):
    """An iterable dataset of ``item(data, index)``; each worker yields its share."""

    def __init__(self, data: Data) -> None:
        self.data = data

    def __iter__(self) -> Any:
        info = torch_data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for index in range(start, self.data.length, step):
            yield item(self.data, index)


class SizedIterableData(IterableData):
    def __len__(self) -> int:
        return self.data.length


def collate_lists(items: Any) -> Any:
    """A custom collate function that keeps the items as they are: in a list when the
    DataLoader batches, each item alone when it does not (``batch_size=None``)."""
    return items


def collate_numpy(items: list[Any]) -> Any:
    """A custom collate function that stacks each leaf in NumPy (others into lists)."""
    first = items[0]
    if isinstance(first, dict):
        return {key: collate_numpy([each[key] for each in items]) for key in first}
    if isinstance(first, (tuple, list)):
        columns = [collate_numpy(list(column)) for column in zip(*items, strict=True)]
        return type(first)(*columns) if hasattr(first, "_fields") else type(first)(columns)
    if isinstance(first, torch.Tensor):
        return np.stack([_numpy(each) for each in items])
    if isinstance(first, np.ndarray):
        return np.stack(items)
    return list(items)


def dataset(data: Data) -> torch_data.Dataset[Any]:
    if data.style == "iterable":
        return SizedIterableData(data) if data.sized else IterableData(data)
    if data.style == "tensors" and data.raise_at is None:  # the real TensorDataset
        columns = [torch.stack([leaf(data, i, p, d) for i in range(data.length)])
                   for p, d in enumerate(data.dtypes)] if data.length else [
            torch.empty((0, *data.shape), dtype=getattr(torch, d)) for d in data.dtypes
        ]  # fmt: skip
        return torch_data.TensorDataset(*columns)
    return MapDataset(data)


def _sampler(draw_: Draw, source: torch_data.Dataset[Any]) -> dict[str, Any]:
    """The DataLoader's sampling keywords."""
    if draw_.sampler is None:
        if draw_.shuffle:
            return {"shuffle": True, "generator": torch.Generator().manual_seed(draw_.seed)}
        return {}
    kind, arguments = draw_.sampler
    options = dict(arguments)
    length = draw_.data.length
    generator = torch.Generator().manual_seed(draw_.seed)
    if kind == "sequential":
        return {"sampler": torch_data.SequentialSampler(range(length))}
    if kind == "random":
        return {"sampler": torch_data.RandomSampler(range(length), generator=generator, **options)}
    if kind == "subset":
        return {"sampler": torch_data.SubsetRandomSampler(options["indices"], generator=generator)}
    if kind == "distributed":
        return {"sampler": torch_data.DistributedSampler(source, seed=draw_.seed, **options)}
    if kind == "batch":
        inner: torch_data.Sampler[int] = (
            torch_data.RandomSampler(range(length), generator=generator)
            if options["random"]
            else torch_data.SequentialSampler(range(length))
        )
        batches = torch_data.BatchSampler(inner, options["size"], options["drop_last"])
        return {"batch_sampler": batches}
    raise AssertionError(kind)


def build_loader(draw_: Draw) -> torch_data.DataLoader[Any]:
    """The torch DataLoader of ``draw_``, fresh (both sides build their own)."""
    source = dataset(draw_.data)
    options: dict[str, Any] = _sampler(draw_, source)
    if "batch_sampler" not in options:
        options["batch_size"] = draw_.batch_size
        options["drop_last"] = draw_.drop_last
    if draw_.collate != "default":
        options["collate_fn"] = collate_lists if draw_.collate == "lists" else collate_numpy
    if draw_.workers:
        options.update(
            num_workers=draw_.workers, multiprocessing_context="spawn", timeout=deadline(120)
        )
    return torch_data.DataLoader(source, pin_memory=draw_.loader_pin, **options)


# --- drawing ---------------------------------------------------------------------------------


def _data(rng: random.Random, workers: bool) -> Data:
    style = rng.choice(STYLES)
    length = rng.choice([0, 1, 2, 3, 5, 7, 8, 10, 13])
    leaves = rng.randint(1, 3)
    pool = NUMPY_DTYPES if style == "numpy" else TENSOR_DTYPES
    dtypes = tuple(rng.choice(pool) for _ in range(leaves))
    raise_at = rng.randrange(length) if length and rng.random() < 0.2 else None
    return Data(
        style=style,
        length=length,
        dtypes=dtypes,
        shape=rng.choice([(2,), (2,), (3,), (), (2, 3), (0,)]),
        edges=rng.random() < 0.15,
        raise_at=raise_at,
        error=rng.choice(ERRORS),
        sized=style != "iterable" or rng.random() < 0.6,
    )


def _draw_sampler(rng: random.Random, data: Data) -> tuple[str, tuple[tuple[str, Any], ...]] | None:
    if data.style == "iterable" or rng.random() < 0.5:
        return None
    kind = rng.choice(["random", "sequential", "subset", "distributed", "distributed", "batch"])
    if kind == "random":
        replacement = rng.random() < 0.3
        arguments: dict[str, Any] = {"replacement": replacement}
        if replacement or rng.random() < 0.3:
            if data.length or replacement:
                arguments["num_samples"] = rng.randint(1, 12)
        return kind, tuple(arguments.items())
    if kind == "subset":
        indices = [index for index in range(data.length) if rng.random() < 0.6]
        rng.shuffle(indices)
        return kind, (("indices", indices),)
    if kind == "distributed":
        replicas = rng.randint(1, 4)
        return kind, (
            ("num_replicas", replicas),
            ("rank", rng.randrange(replicas)),
            ("shuffle", rng.random() < 0.6),
            ("drop_last", rng.random() < 0.4),
        )
    if kind == "batch":
        return kind, (
            ("random", rng.random() < 0.5),
            ("size", rng.randint(1, 4)),
            ("drop_last", rng.random() < 0.4),
        )
    return kind, ()


def draw(rng: random.Random, *, devices: int = 1, workers: bool = False) -> Draw:
    """One feeding loop from ``rng``; ``devices`` CPU devices exist; ``workers``: a few
    draws start DataLoader worker processes."""
    data = _data(rng, workers)
    sampler = _draw_sampler(rng, data)
    if sampler is not None and sampler[0] == "random" and not data.length:
        sampler = None  # RandomSampler refuses an empty dataset: nothing of tj's
    batch_size = None if rng.random() < 0.1 else rng.randint(1, 5)
    collate = rng.choice(["default"] * 4 + ["lists", "numpy"])
    if data.style == "bare" and rng.random() < 0.5:  # each leaf a batch of its own
        batch_size, collate = None, "lists"
    if batch_size is None and collate == "numpy":
        collate = "default"  # without batching, collate_fn is applied per item
    targets = TARGETS_ONE + (TARGETS_MANY if devices > 1 else ())
    target = rng.choice(targets)
    if (batch_size is None or collate == "lists") and target == "mesh-split":
        target = "mesh-replicated"  # 0-d leaves and lists of items: nothing to split
    api = rng.choice(["DeviceLoader", "DeviceLoader", "prefetch"])
    size = rng.choice([0, 1, 2, 2, 3])
    background = rng.choice([None, None, True, False]) if size else rng.choice([None, False])
    epochs = rng.choice([1, 2, 2])
    return Draw(
        data=data,
        batch_size=batch_size,
        drop_last=rng.random() < 0.3,
        shuffle=sampler is None and data.style != "iterable" and rng.random() < 0.5,
        sampler=sampler,
        collate=collate,
        workers=2 if workers and rng.random() < 0.03 else 0,
        loader_pin=rng.random() < 0.15,
        target=target,
        api=api,
        size=size,
        background=background,
        pin=rng.random() < 0.3,
        epochs=epochs,
        break_after=rng.randint(0, 3) if rng.random() < 0.25 else None,
        seed=rng.randrange(2**31),
    )


def smaller(draw_: Draw) -> list[Draw]:
    """Draws one step simpler than ``draw_`` (for shrinking a finding)."""
    replace = dataclasses.replace
    data = draw_.data
    candidates = []
    if data.length > 1:
        length = data.length - 1
        raise_at = data.raise_at if data.raise_at is None or data.raise_at < length else None
        sampler = draw_.sampler if draw_.sampler is None or draw_.sampler[0] != "subset" else None
        candidates.append(
            replace(draw_, data=replace(data, length=length, raise_at=raise_at), sampler=sampler)
        )
    if len(data.dtypes) > 1:
        candidates.extend(
            replace(draw_, data=replace(data, dtypes=data.dtypes[:i] + data.dtypes[i + 1 :]))
            for i in range(len(data.dtypes))
        )
    if data.edges:
        candidates.append(replace(draw_, data=replace(data, edges=False)))
    if data.raise_at is not None:
        candidates.append(replace(draw_, data=replace(data, raise_at=None)))
    if data.shape != (2,):
        candidates.append(replace(draw_, data=replace(data, shape=(2,))))
    for name, simple in (
        ("sampler", None), ("shuffle", False), ("collate", "default"), ("workers", 0),
        ("loader_pin", False), ("pin", False), ("epochs", 1), ("break_after", None),
        ("background", None), ("drop_last", False), ("api", "DeviceLoader"),
    ):  # fmt: skip
        if getattr(draw_, name) != simple:
            candidates.append(replace(draw_, **{name: simple}))
    if draw_.size > 1:
        candidates.append(
            replace(
                draw_, size=draw_.size - 1, background=draw_.background if draw_.size > 1 else None
            )
        )
    return [candidate for candidate in candidates if candidate != draw_]
