"""The checkpoint fuzzer's draws: a checkpoint written one way and read another, as plain data.

A :class:`Draw` is everything one example of ``tests/parity/test_checkpoint_fuzz.py``
needs, written down as plain values (each tensor's name, dtype, shape, the seed of its
values and how it lies in its storage; the writer; the reader and its arguments, spelled
as Python; a corruption of the written bytes), so the same draw writes the same files
afresh, prints as one line of Python, and shrinks by rewriting a field. ``draw(rng)``
makes one from a seeded ``random.Random``; nothing here knows what torch or safetensors
answers (``checkpoint_fuzz_oracle`` asks them).

The space:

* what is written: named tensors of every dtype torch and the format share (bool, all
  integers, float16, bfloat16, float32, float64, the float8 kinds, complex) of any
  shape (0-d and empty included), at edge values (nan with payloads, inf, -0.0,
  subnormals, integer extremes, int64 past the 32-bit range); views of one storage (a
  slice, a transpose, a strided view, two names for one tensor, a view of another
  named tensor); metadata strings; for ``torch.save`` nested containers (``OrderedDict``,
  lists, tuples, ints, floats, strings, ``None``);
* how it is written: ``torch.save`` (zip and legacy format), ``safetensors.torch.save_file``,
  ``tj.save_file``, or shards with a ``model.safetensors.index.json``;
* how it is read: ``tj.load_file`` (each ``device=`` form, ``"auto"`` included,
  ``backend=``), ``tj.safe_open`` (``keys``, ``metadata``, ``get_tensor``, ``get_slice``
  with drawn index expressions: basic ones, and lists, arrays, tensors and bools by
  torch's rules), ``tj.load`` (each ``map_location`` form torch takes: a string, a
  ``torch.device``, a dict remapping, a callable; ``"auto"`` and tj's own spellings; the
  forms torch refuses; ``weights_only``, ``mmap``, a path or an open file); each with
  ``max_tensors=`` below, at and above the tensors it makes (0, 1, one fewer, exactly,
  one more, a million); with several CPU devices, ``"cpu:1"`` and ``device_map=``;
* what goes wrong: the file truncated at a drawn offset, a byte of the header (or the
  zip's directory) flipped, header offsets that overlap or run past the file, a shard
  missing.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import numpy as np
import torch

from tests.support import fuzz, fuzz_runs

#: The dtypes a safetensors file holds that safetensors.torch reads (its ``_TYPES``).
SAFETENSORS_DTYPES = tuple(d for d in fuzz.DTYPES if d not in ("complex128", "float8_e8m0fnu"))
#: Writers: the format each one writes.
WRITERS = {
    "torch.save": "torch",
    "torch.save-legacy": "torch",
    "safetensors": "safetensors",
    "tj.save_file": "safetensors",
    "sharded": "safetensors",
}
#: How a tensor lies in its storage: its own, a part of a larger one, or another entry's.
VIEWS = ("own", "slice", "transposed", "strided", "same", "view", "reinterpret", "conj")
#: Dtypes of one item size, by that size: ``view="reinterpret"`` reads another's bytes as one.
SAME_SIZE = {
    1: ("int8", "uint8", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"),
    2: ("int16", "uint16", "float16", "bfloat16"),
    4: ("int32", "uint32", "float32"),
    8: ("int64", "uint64", "float64", "complex64"),
}

#: ``device=`` of ``tj.load_file`` / ``tj.safe_open``, spelled as Python (the oracle
#: evaluates them with ``torch``, ``tj`` and ``jax`` in scope).
DEVICES = ("'cpu'", "None", "torch.device('cpu')", "tj.device('cpu')", "'cpu:0'", "'auto'")
#: ``map_location=`` of ``tj.load``.
MAP_LOCATIONS = (
    "None",
    "'cpu'",
    "torch.device('cpu')",
    "{'cpu': 'cpu'}",
    "{'cuda:0': 'cpu'}",
    "{}",
    "lambda storage, location: storage",
    "lambda storage, location: None",
    "lambda storage, location: storage.cpu()",
    "tj.device('cpu')",
    "'auto'",
)
#: ``map_location=`` forms only tj takes (torch refuses them; tj reads them as ``'cpu'``).
TJ_MAP_LOCATIONS = (
    "tj.device('cpu')",
    "'cpu:0'",
    "torch.device('cpu', 0)",
    "jax.devices('cpu')[0]",
)
#: ``map_location=`` forms torch refuses, each with its own error: tj must refuse them too.
REFUSED_MAP_LOCATIONS = (
    "b'cpu'",
    "0",
    "{'cpu': torch.device('cpu')}",
    "lambda storage, location: 3",
    "'bogus'",
    "'CPU'",
)
#: ``max_tensors=``, relative to the tensors the load makes (``"fewer"``: one less).
MAX_TENSORS = ("0", "1", "fewer", "exact", "more", "1000000")
#: With several CPU devices: the second one, or a plan putting each tensor somewhere.
MULTI_DEVICES = ("'cpu:1'", "device_map")
#: ``get_slice(name)[...]`` index expressions (``{n}`` is the first axis's length).
INDEXES = (
    "[:]", "[...]", "[0]", "[-1]", "[1:]", "[:{n}]", "[0:0]", "[::2]", "[1::3]", "[:, 0]",
    "[..., 0]", "[..., :1]", "[None]", "[:, None]", "[::-1]", "[-2:]", "[{n}:]", "[5:2]",
    "[:, 1:]", "[0, ...]", "[[0]]", "[[]]", "[0, 0]", "[{n}]", "[-{n}]", "[:, ::2]",
    # lists, arrays, tensors and bools: torch's indexing of the whole tensor ("pt" slices)
    "[[0, 0]]", "[[-1, 0]]", "[[{n}]]", "[:, [0]]", "[[0], 0]", "[..., [-1]]", "[None, [0]]",
    "[[1, 0], ::2]", "[[0, 1], [0, 0]]", "[[[0]]]", "[[True]]", "[[False] * {n}]",
    "[[True] + [False] * ({n} - 1)]", "[True]", "[False]", "[np.array([0])]",
    "[torch.tensor([-1])]", "[range({n})]", "[[0.5]]", "[(0, 0)]",
)  # fmt: skip
#: What ``torch.save`` writes: the named tensors as a dict, an ``OrderedDict``, a dict of
#: ``nn.Parameter`` (a module's state dict as ``named_parameters`` gives it), or nested
#: among plain values (ints, floats, strings, ``None``, lists, tuples, an int key).
CONTAINERS = ("dict", "OrderedDict", "parameters", "nested")
CORRUPTIONS = ("truncate", "flip-header", "flip-directory", "overlap", "past-end", "missing-shard")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One named tensor of the checkpoint.

    ``view``: ``"own"`` (its own storage), ``"slice"`` / ``"transposed"`` / ``"strided"``
    (a view of a larger storage of its own), ``"same"`` (the tensor ``of`` names, under a
    second name), ``"view"`` (a view of the tensor ``of`` names: its flat tail),
    ``"reinterpret"`` (``of``'s bytes read as ``dtype``, of the same item size) or
    ``"conj"`` (``of.conj()``: a lazily conjugated view where ``of`` is complex).
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    seed: int = 0
    #: int64 / uint64 values past the 32-bit range (JAX without x64 refuses them).
    wide: bool = False
    view: str = "own"
    of: str = ""


@dataclasses.dataclass(frozen=True)
class Draw:
    """A checkpoint, how it is written, how it is read, and what goes wrong."""

    writer: str
    entries: tuple[Entry, ...]
    #: ``"load_file"``, ``"safe_open"`` or ``"load"``.
    reader: str
    #: The container ``torch.save`` writes: ``"dict"``, ``"OrderedDict"`` or ``"nested"``.
    container: str = "dict"
    metadata: tuple[tuple[str, Any], ...] | None = None
    #: ``device=`` (load_file, safe_open) or ``map_location=`` (load), as Python.
    device: str = "'cpu'"
    weights_only: bool | None = None
    mmap: bool | None = None
    #: ``tj.load`` / ``torch.load`` given an open binary file rather than its path.
    as_file: bool = False
    backend: str = "mmap"
    #: ``(name, index expression)`` read through ``get_slice`` (safe_open).
    slices: tuple[tuple[str, str], ...] = ()
    #: ``max_tensors=`` of tj's reader, one of ``MAX_TENSORS`` (``None``: not passed).
    max_tensors: str | None = None
    shards: int = 1
    #: ``(kind, where)``: ``where`` is a permille of the part it damages, or a position.
    corruption: tuple[str, int] | None = None

    @property
    def format(self) -> str:
        return WRITERS[self.writer]

    def expression(self) -> str:
        """The draw as one line: what to rerun."""
        return fuzz_runs.expression(self)


# --- what is written ------------------------------------------------------------------------


def _drawn_values(entry: Entry, count: int) -> np.ndarray[Any, Any]:
    """``count`` values of ``entry.dtype`` from its seed: edge values and ordinary ones."""
    rng = np.random.default_rng(entry.seed)
    name = entry.dtype
    dtype = fuzz.numpy_dtype(name)
    if name == "bool":
        return rng.random(count) < 0.5
    edges = fuzz.edge_values(name)
    if fuzz.kind(name) == "i":
        info = np.iinfo(dtype)
        low, high = int(info.min), int(info.max)
        if name in ("int64", "uint64") and not entry.wide:
            narrow = np.iinfo(np.int32 if name == "int64" else np.uint32)
            low, high = int(narrow.min), int(narrow.max)
        edges = [value for value in edges if low <= value <= high]
        picked = [
            edges[int(rng.integers(len(edges)))]
            if rng.random() < 0.5
            else int(rng.integers(max(low, -1000), min(high, 1000) + 1))
            for _ in range(count)
        ]
        if entry.wide and count:
            picked[int(rng.integers(count))] = high  # at least one past 32 bits
        return np.array(picked, dtype=dtype)
    floats = [
        edges[int(rng.integers(len(edges)))] if rng.random() < 0.5 else float(rng.normal() * 10)
        for _ in range(count * (2 if fuzz.kind(name) == "c" else 1))
    ]
    with np.errstate(all="ignore"):
        if fuzz.kind(name) == "c":
            parts = np.array(floats).reshape(count, 2)
            return (parts[:, 0] + 1j * parts[:, 1]).astype(dtype)
        values = np.array(floats).astype(dtype)
    if count and dtype.itemsize >= 2 and rng.random() < 0.5:  # a NaN with a payload
        bits = values.view(np.dtype(f"u{dtype.itemsize}"))
        nan = np.array(np.nan, dtype).view(bits.dtype)
        sign = np.array(1, bits.dtype) << np.array(8 * dtype.itemsize - 1, bits.dtype)
        payload = nan | np.array(1, bits.dtype) | (sign if rng.random() < 0.5 else 0)
        bits[int(rng.integers(count))] = payload
    return values


def _storage_shape(entry: Entry) -> tuple[int, ...]:
    """The shape of the storage ``entry``'s tensor is a view of."""
    shape = entry.shape
    if entry.view == "slice":
        return (shape[0] + 2, *shape[1:]) if shape else (3,)
    if entry.view == "transposed":
        return tuple(reversed(shape))
    if entry.view == "strided":
        return (*shape[:-1], 2 * shape[-1] + 1) if shape else (2,)
    return shape


def own_tensor(entry: Entry) -> torch.Tensor:
    """``entry``'s tensor when it is not another's: its values, laid out as drawn."""
    shape = _storage_shape(entry)
    count = int(np.prod(shape, dtype=np.int64))
    storage = fuzz.torch_twin(np.ascontiguousarray(_drawn_values(entry, count))).reshape(shape)
    if entry.view == "slice":
        return storage[1] if not entry.shape else storage[1 : 1 + entry.shape[0]]
    if entry.view == "transposed":
        return storage.permute(*reversed(range(storage.dim())))
    if entry.view == "strided":
        return storage[0] if not entry.shape else storage[..., 1::2]
    return storage


def view_of(tensor: torch.Tensor) -> torch.Tensor:
    """The view an entry with ``view="view"`` is of its ``of``: the flat tail."""
    flat = tensor.reshape(-1) if tensor.is_contiguous() else tensor.select(-1, 0)
    return flat[1:] if flat.dim() and flat.shape[0] else flat


def tensors(draw_: Draw) -> dict[str, torch.Tensor]:
    """The named tensors ``draw_`` writes, in its order (views sharing what they share)."""
    made: dict[str, torch.Tensor] = {}
    for entry in draw_.entries:
        if entry.view == "same":
            made[entry.name] = made[entry.of]
        elif entry.view == "view":
            made[entry.name] = view_of(made[entry.of])
        elif entry.view == "reinterpret":
            made[entry.name] = made[entry.of].view(fuzz.torch_dtype(entry.dtype))
        elif entry.view == "conj":
            made[entry.name] = made[entry.of].conj()
        else:
            made[entry.name] = own_tensor(entry)
    return made


# --- drawing ---------------------------------------------------------------------------------

NAMES = ("w", "b", "model.layer.0.weight", "h.1.attn.bias", "é", "a", "tokens", "z.0", "_x")
#: Names drawn now and then: the empty name, and the header's own key (safetensors writes a
#: tensor so named, and then cannot read the file).
ODD_NAMES = ("", "__metadata__")


def _shape(rng: random.Random) -> tuple[int, ...]:
    return rng.choice([(), (1,), (3,), (2, 3), (0,), (4, 0), (2, 1, 2), (5,), (1, 4), (3, 2)])


def _entries(rng: random.Random, writer: str) -> tuple[Entry, ...]:
    dtypes = fuzz.DTYPES if WRITERS[writer] == "torch" else SAFETENSORS_DTYPES
    names = rng.sample(NAMES, rng.randint(1, 4))
    if rng.random() < 0.05:
        names[rng.randrange(len(names))] = rng.choice(ODD_NAMES)
    views_allowed = writer in ("torch.save", "torch.save-legacy", "tj.save_file")
    entries: list[Entry] = []
    for name in names:
        dtype = rng.choice(dtypes)
        shape = _shape(rng)
        view = rng.choice(VIEWS) if views_allowed and rng.random() < 0.4 else "own"
        of = ""
        if view in ("same", "view", "reinterpret", "conj"):
            if not entries:
                view = "own"
            else:
                other = rng.choice(entries)
                dtype, shape, of = other.dtype, other.shape, other.name
                size = fuzz.numpy_dtype(dtype).itemsize
                partners = [d for d in SAME_SIZE.get(size, ()) if d in dtypes and d != dtype]
                # torch.save refuses two dtypes over one storage; tj.save_file writes each
                if view == "reinterpret" and writer == "tj.save_file" and partners:
                    dtype = rng.choice(partners) if other.view != "conj" else dtype
                    view = "reinterpret" if other.view != "conj" else "same"
                elif view == "reinterpret":
                    view = "same"
        if view == "transposed" and len(shape) < 2:
            view = "own"
        entries.append(
            Entry(
                name=name,
                dtype=dtype,
                shape=shape,
                seed=rng.randrange(2**16),
                wide=dtype in ("int64", "uint64") and rng.random() < 0.15,
                view=view,
                of=of,
            )
        )
    return tuple(entries)


def _metadata(rng: random.Random) -> tuple[tuple[str, Any], ...] | None:
    if rng.random() < 0.5:
        return None
    texts: list[Any] = ["pt", "", "é ✓", '{"a": 1}', "x" * 40, "0", "line\nbreak", "tab\t"]
    if rng.random() < 0.1:
        texts = [1, None]  # not a string: both writers refuse it
    keys = rng.sample(["format", "author", "é", "", "total_size"], rng.randint(0, 3))
    return tuple((key, rng.choice(texts)) for key in keys)


def draw(rng: random.Random, *, devices: int = 1) -> Draw:
    """One example from ``rng``; ``devices``: how many CPU devices JAX has here."""
    writer = rng.choice(tuple(WRITERS))
    entries = _entries(rng, writer)
    torch_format = WRITERS[writer] == "torch"
    readers = ["load_file", "load_file", "load"] + ["safe_open"] * (writer != "sharded")
    reader = "load" if torch_format else rng.choice(readers)
    device = rng.choice(MAP_LOCATIONS if reader == "load" else DEVICES)
    if reader == "load" and rng.random() < 0.2:
        device = rng.choice(TJ_MAP_LOCATIONS + REFUSED_MAP_LOCATIONS)
    if devices > 1 and rng.random() < 0.4:
        device = "'cpu:1'" if reader == "load" else rng.choice(MULTI_DEVICES)
    slices: tuple[tuple[str, str], ...] = ()
    if reader == "safe_open":
        slices = tuple((entry.name, rng.choice(INDEXES)) for entry in entries if rng.random() < 0.7)
    corruption = None
    if rng.random() < 0.15:
        kinds = ["truncate", "flip-directory"] if torch_format else ["truncate", "flip-header"]
        if not torch_format:
            kinds += ["overlap", "past-end"]
        if writer == "sharded":
            kinds.append("missing-shard")
        corruption = (rng.choice(kinds), rng.randrange(1000))
    return Draw(
        writer=writer,
        entries=entries,
        reader=reader,
        container=rng.choice(CONTAINERS) if torch_format else "dict",
        metadata=None if torch_format else _metadata(rng),
        device=device,
        weights_only=rng.choice([None, True, True, True, None, True, True, True, False])
        if reader == "load"
        else None,
        mmap=rng.choice([None, True, False]) if reader == "load" else None,
        as_file=torch_format and rng.random() < 0.2,
        backend=rng.choice(["mmap", "mmap", "pread"]) if reader != "load" else "mmap",
        slices=slices,
        max_tensors=rng.choice(MAX_TENSORS) if corruption is None and rng.random() < 0.2 else None,
        shards=min(len(entries), rng.randint(2, 3)) if writer == "sharded" else 1,
        corruption=corruption,
    )


def smaller(draw_: Draw) -> list[Draw]:
    """Draws one step simpler than ``draw_`` (for shrinking a finding)."""
    replace = dataclasses.replace
    candidates = []
    referenced = {entry.of for entry in draw_.entries}
    for i, entry in enumerate(draw_.entries):
        if len(draw_.entries) > 1 and entry.name not in referenced:
            rest = draw_.entries[:i] + draw_.entries[i + 1 :]
            candidates.append(
                replace(
                    draw_,
                    entries=rest,
                    slices=tuple(s for s in draw_.slices if s[0] != entry.name),
                    shards=min(draw_.shards, len(rest)),
                )
            )
        simpler = [replace(entry, wide=False), replace(entry, seed=0)]
        if entry.view in ("slice", "transposed", "strided"):
            simpler.append(replace(entry, view="own"))
        if entry.shape and entry.view not in ("same", "view") and entry.name not in referenced:
            simpler.append(replace(entry, shape=(min(entry.shape[0], 1), *entry.shape[1:])))
        candidates.extend(
            replace(draw_, entries=(*draw_.entries[:i], other, *draw_.entries[i + 1 :]))
            for other in simpler
            if other != entry
        )
    for name, default in (
        ("metadata", None), ("container", "dict"), ("slices", ()), ("backend", "mmap"),
        ("mmap", None), ("weights_only", None), ("as_file", False), ("max_tensors", None),
    ):  # fmt: skip
        if getattr(draw_, name) != default:
            candidates.append(replace(draw_, **{name: default}))
    if draw_.reader == "load" and draw_.device not in ("None", "'cpu'"):
        candidates.append(replace(draw_, device="None"))
    candidates.extend(
        replace(draw_, slices=draw_.slices[:i] + draw_.slices[i + 1 :])
        for i in range(len(draw_.slices))
    )
    return [candidate for candidate in candidates if candidate != draw_]


def index_of(expression: str, length: int) -> Any:
    """The index an expression of ``INDEXES`` spells, for a first axis of ``length``."""
    spelled = expression.format(n=length)
    return eval(f"_[{spelled[1:-1]}]", {"_": _Indexer(), "np": np, "torch": torch})


class _Indexer:
    def __getitem__(self, index: Any) -> Any:
        return index


__all__ = ["Draw", "Entry", "draw", "index_of", "smaller", "tensors"]
