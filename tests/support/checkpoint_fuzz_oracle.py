"""The checkpoint fuzzer's oracle: a drawn checkpoint read by torch / safetensors and by tj.

``judge(draw)`` writes the files of one :class:`checkpoint_fuzz.Draw` into a fresh
folder, reads them with the oracle (``torch.load`` with the same arguments for a
PyTorch checkpoint; ``safetensors.torch.load_file`` / ``safetensors.safe_open(...,
"pt")`` for a safetensors file, shard by shard in the index's order for an index) and
with tj's reader, and returns every :class:`Finding`: a part of the answers that differs
and that no row of ``DIFFERENCES`` explains.

Compared: the containers (type, keys and their order, plain values), each tensor's
dtype (JAX's 32-bit one without x64: the placement fuzzer's table,
``torch2jax_device.porting.known_differences``, says which and what torch's cast to it
gives), shape and bytes (bit for bit: NaN payloads, ``-0.0``), its placement (the device
asked for, committed), one array wherever torch returns one tensor twice; ``safe_open``'s
keys, metadata, tensors and slices. Where the oracle raises, tj must raise its own error
(a ``tj.Torch2JaxDeviceError``); for a damaged file a ``tj.CheckpointError`` naming the
file, leaving no file descriptor open. Where tj raises and the oracle does not, that is
a finding unless a row says why.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import gc
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
import safetensors
import safetensors.torch
import torch

import torch2jax_device as tj
from tests.support import fuzz, fuzz_runs
from tests.support.checkpoint_fuzz import (
    REFUSED_MAP_LOCATIONS,
    TJ_MAP_LOCATIONS,
    Draw,
    index_of,
    smaller,
    tensors,
)
from tests.support.fuzz_runs import Different, Explained, Row
from torch2jax_device.porting import known_differences
from torch2jax_device.porting.known_differences import Call, Leaf

#: The differences by design, each said on docs/known-differences-checkpoints.md (or, for
#: device maps, docs/how-to/big-models.md) in the phrase its ``docs`` gives.
DIFFERENCES = (
    Row(
        "x64-narrowing",
        "int64, uint64, float64 and complex128 tensors load as the 32-bit dtype, with what "
        "torch's cast to it gives (the placement table's row of that name)",
        "**64-bit tensors become 32-bit**",
    ),
    Row(
        "int64-values-past-32-bits-refused",
        "a load of int64 / uint64 values the 32-bit dtype cannot hold raises "
        "tj.ConversionError, where torch keeps them",
        "Integer values past the 32-bit range raise",
    ),
    Row(
        "float64-values-past-float32-refused",
        "a load of finite float64 / complex128 values past float32's largest raises "
        "tj.ConversionError, where torch keeps them (narrowed, they would become inf)",
        "float64 values past float32's largest (`1e300`)",
    ),
    Row(
        "weights-only",
        "weights_only=False raises tj.UnsupportedOperationError",
        "**`tj.load` only ever loads weights.**",
    ),
    Row(
        "map-location-tj-spellings",
        "map_location=tj.device(...) places like torch's 'cpu', which torch has no restorer for",
        "**`map_location` takes `tj.device` spellings too**",
    ),
    Row(
        "map-location-auto",
        "map_location='auto' (and device='auto') plans each tensor's place, where torch has "
        "no such location: read as torch reads map_location='cpu'",
        '**`map_location="auto"` plans where\neach tensor goes**',
    ),
    Row(
        "callable-map-location-safetensors",
        "a callable map_location for a safetensors file raises tj.DeviceTypeError",
        "**A callable `map_location` works only for PyTorch checkpoints**",
    ),
    Row(
        "missing-file-os-error",
        "a shard an index names is missing: FileNotFoundError naming the shard and the "
        "index, as opening it would raise (safetensors raises it too)",
        "so does a shard that an index names and",
    ),
    Row(
        "zip-record-marked-a-folder",
        "a zip whose directory marks a record as a folder is refused (tj.CheckpointError); "
        "torch.load reads the record as uninitialized memory",
        "does a zip whose directory marks a record as a folder",
    ),
    Row(
        "device-map-keys-checked",
        "a device_map key that covers no tensor raises tj.InvalidDeviceError (Accelerate "
        "places what it can): a damaged header that renames a tensor shows this way",
        "a map key that covers no tensor",
    ),
    Row(
        "empty-tensors-order",
        "empty tensors sharing one offset come in the header's order, where safetensors "
        "leaves their order unspecified",
        "Empty tensors sharing one offset come in the header's order",
    ),
    Row(
        "negative-step-slices",
        "get_slice takes negative steps, where safetensors raises ValueError",
        "**`get_slice` takes negative steps**",
    ),
    Row(
        "shared-tensors-written-in-full",
        "tj.save_file writes tensors that share memory (and non-contiguous ones) in full, "
        "where safetensors.torch.save_file refuses them",
        "**`save_file` writes tensors that share memory in full**",
    ),
)


class Finding(fuzz_runs.Finding):
    @property
    def kind(self) -> tuple[str, ...]:
        return (self.aspect, self.draw.writer, self.draw.reader)


class Tally:
    """What the rows explained, and what both sides refused, over a run."""

    def __init__(self) -> None:
        self.examples = 0
        self.refused = 0  # failed alike (a damaged file, an argument torch refuses)
        self.explained: dict[str, int] = {row.id: 0 for row in DIFFERENCES}


def x64() -> bool:
    return bool(jax.config.read("jax_enable_x64"))


# --- writing ---------------------------------------------------------------------------------


def _container(draw: Draw, named: dict[str, torch.Tensor]) -> Any:
    if draw.container == "OrderedDict":
        return collections.OrderedDict(named)
    if draw.container == "parameters":
        made: dict[int, torch.nn.Parameter] = {}
        for tensor in named.values():
            if id(tensor) not in made:
                grad = tensor.is_floating_point() or tensor.is_complex()
                made[id(tensor)] = torch.nn.Parameter(tensor, requires_grad=grad)
        return {name: made[id(tensor)] for name, tensor in named.items()}
    if draw.container == "nested":
        items = list(named.items())
        half = (len(items) + 1) // 2
        return {
            "model": collections.OrderedDict(items[:half]),
            "step": 7,
            "lr": 2.5e-4,
            "tag": "é",
            "none": None,
            "extra": [(name, tensor) for name, tensor in items[half:]] + [1.5, -0.0],
            3: ("three", [None, True]),
        }
    return dict(named)


def _shard_names(draw: Draw) -> list[str]:
    return [f"model-{i + 1:05d}-of-{draw.shards:05d}.safetensors" for i in range(draw.shards)]


def _metadata(draw: Draw) -> dict[str, Any] | None:
    return None if draw.metadata is None else dict(draw.metadata)


def write(draw: Draw, folder: Path) -> Path:
    """Write ``draw``'s checkpoint into ``folder``; the path its readers are given.

    Raises ``Explained`` / ``Different`` where the writer is the one compared
    (``tj.save_file`` against ``safetensors.torch.save_file``), and ``_WriterRefused``
    where the oracle's own writer refuses the draw (nothing to read then).
    """
    named = tensors(draw)
    if draw.writer in ("torch.save", "torch.save-legacy"):
        path = folder / "checkpoint.pt"
        legacy = draw.writer == "torch.save-legacy"
        _oracle_write(
            lambda: torch.save(
                _container(draw, named), path, _use_new_zipfile_serialization=not legacy
            )
        )
    elif draw.writer == "safetensors":
        path = folder / "model.safetensors"
        _oracle_write(lambda: safetensors.torch.save_file(named, path, _metadata(draw)))
    elif draw.writer == "tj.save_file":
        path = folder / "model.safetensors"
        _compare_writers(draw, named, path)
    else:
        names = list(named)
        files = _shard_names(draw)
        cut = [round(i * len(names) / draw.shards) for i in range(draw.shards + 1)]
        weight_map = {}
        for number, file in enumerate(files):
            part = {name: named[name] for name in names[cut[number] : cut[number + 1]]}
            _oracle_write(
                lambda part=part, file=file: safetensors.torch.save_file(
                    part, folder / file, _metadata(draw)
                )
            )
            weight_map.update(dict.fromkeys(part, file))
        path = folder / "model.safetensors.index.json"
        path.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    return path


class _WriterRefused(Exception):
    pass


def _oracle_write(function: Callable[[], None]) -> None:
    try:
        function()
    except Exception as error:
        raise _WriterRefused(str(error)) from error


def _compare_writers(draw: Draw, named: dict[str, torch.Tensor], path: Path) -> None:
    """``tj.save_file`` against ``safetensors.torch.save_file`` on the same tensors."""
    shares = len({t.untyped_storage().data_ptr() for t in named.values() if t.numel()}) < len(
        [t for t in named.values() if t.numel()]
    ) or any(not t.is_contiguous() for t in named.values())
    theirs = _attempt(
        lambda: safetensors.torch.save_file(named, path.with_suffix(".st"), _metadata(draw))
    )
    ours = _attempt(lambda: tj.save_file(named, path, _metadata(draw)))
    if theirs is None and ours is not None:
        unreadable = _attempt(lambda: safetensors.torch.load_file(path.with_suffix(".st")))
        if unreadable is None:  # safetensors writes what it cannot read ("__metadata__")
            raise Different("writer: tj refuses", "save_file", "written", ours)
        _own_error(ours, "save_file", unreadable)
        raise _WriterRefused(str(unreadable))
    if theirs is not None and ours is None and not shares:
        raise Different("writer: tj takes what safetensors refuses", "save_file", theirs, "written")
    if theirs is not None and ours is not None:
        _own_error(ours, "save_file", theirs)
        raise _WriterRefused(str(theirs))


def _attempt(function: Callable[[], Any]) -> BaseException | None:
    try:
        function()
    except Exception as error:
        return error
    return None


def _own_error(ours: BaseException, where: str, theirs: Any) -> None:
    if not isinstance(ours, tj.Torch2JaxDeviceError):
        raise Different("error: not the library's", where, theirs, ours)


# --- damage ----------------------------------------------------------------------------------


def damage(draw: Draw, path: Path) -> Path:
    """Apply ``draw.corruption`` to the written files; the file it damaged."""
    assert draw.corruption is not None
    kind, where = draw.corruption
    target = path
    if draw.writer == "sharded":
        files = [path.parent / name for name in _shard_names(draw)]
        if kind == "missing-shard":
            target = files[where % len(files)]
            target.unlink()
            return target
        target = files[0]
    data = bytearray(target.read_bytes())
    if kind == "truncate":
        del data[len(data) * where // 1000 :]
    elif kind in ("flip-header", "flip-directory"):
        span = (8 + int.from_bytes(data[:8], "little")) if kind == "flip-header" else 512
        span = max(1, min(span, len(data)))
        position = (
            span * where // 1000 if kind == "flip-header" else len(data) - 1 - span * where // 1000
        )
        data[position] ^= (where * 7) % 255 + 1
    else:
        data = _rewritten_header(data, kind, where)
    target.write_bytes(bytes(data))
    return target


def _rewritten_header(data: bytearray, kind: str, where: str | int) -> bytearray:
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + length])
    names = [name for name in header if name != "__metadata__"]
    names.sort(key=lambda name: header[name]["data_offsets"])
    if not names:  # nothing to damage: the file stays as written
        return data
    if kind == "overlap" and len(names) > 1:  # one tensor's bytes claimed by another too
        first = names[int(where) % len(names)]
        second = names[(int(where) + 1) % len(names)]
        header[second] = dict(header[first])
    else:  # the last tensor one element longer than the file holds
        last = header[names[-1]]
        begin, end = last["data_offsets"]
        count = int(np.prod(last["shape"], dtype=np.int64))
        size = (end - begin) // count if count else 1
        last["shape"] = [count + 1]
        last["data_offsets"] = [begin, begin + (count + 1) * max(size, 1)]
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return bytearray(len(text).to_bytes(8, "little") + text + data[8 + length :])


# --- reading ---------------------------------------------------------------------------------


def _namespace() -> dict[str, Any]:
    return {"torch": torch, "tj": tj, "jax": jax}


def _cpu(index: int) -> jax.Device:
    return jax.devices("cpu")[index]


def _device_map(draw: Draw) -> dict[str, str]:
    """Each drawn tensor on one of two devices; a name a damaged header made, the first."""
    placed = {entry.name: f"cpu:{i % 2}" for i, entry in enumerate(draw.entries)}
    return {**placed, "*": "cpu:0"}


def expected_device(draw: Draw, name: str | None) -> jax.Device | None:
    """Where tj must place the tensor ``name`` (``None``: a tensor of a container); ``None``
    for any one CPU device (a plan's choice, ``"auto"``, with several)."""
    if draw.device == "'auto'" and len(jax.devices("cpu")) > 1:
        return None
    if draw.device == "'cpu:1'":
        return _cpu(1)
    if draw.device == "device_map" and name is not None:
        return _cpu(int(_device_map(draw).get(name, "cpu:0")[-1]))
    return _cpu(0)


def _tj_keywords(draw: Draw, count: int) -> dict[str, Any]:
    """tj's keywords; ``count``: the tensors the load makes (what ``max_tensors`` is
    drawn against)."""
    keywords: dict[str, Any] = {}
    if draw.max_tensors is not None:
        keywords["max_tensors"] = max_tensors(draw, count)
    if draw.device == "device_map":
        return {**keywords, "device_map": _device_map(draw)}
    value = eval(draw.device, _namespace())
    return {**keywords, ("map_location" if draw.reader == "load" else "device"): value}


def max_tensors(draw: Draw, count: int) -> int:
    """``draw.max_tensors`` as a number, for a load that makes ``count`` tensors."""
    relative = {"fewer": count - 1, "exact": count, "more": count + 1}
    drawn = draw.max_tensors or "0"
    return max(0, relative[drawn]) if drawn in relative else int(drawn)


def _made(draw: Draw, theirs: dict[str, Any]) -> int:
    """How many tensors the oracle's load made: distinct ones (a tensor saved twice is one)."""
    if "keys" in theirs:
        return len(theirs["keys"])
    return len({id(tensor) for tensor in _leaves(theirs["tree"])})


def _torch_map_location(draw: Draw) -> Any:
    """torch's ``map_location``: tj's own forms (and ``"auto"``, ``"cpu:1"``) as ``'cpu'``."""
    if draw.device in (*TJ_MAP_LOCATIONS, "'cpu:1'", "'auto'"):
        return "cpu"
    return eval(draw.device, _namespace())


@functools.cache
def torch_refusal(expression: str) -> BaseException | None:
    """The error ``torch.load`` raises for ``map_location=expression`` (of a CPU tensor),
    or ``None``: what tj must refuse for a safetensors file too."""
    buffer = io.BytesIO()
    torch.save({"t": torch.zeros(1)}, buffer)
    buffer.seek(0)
    try:
        torch.load(buffer, map_location=eval(expression, _namespace()), weights_only=True)
    except Exception as error:
        return error
    return None


def read_theirs(draw: Draw, path: Path) -> dict[str, Any]:
    """The oracle's answers: ``{"tree": ...}`` and, for safe_open, its other parts."""
    if draw.reader == "load" and draw.device not in (*TJ_MAP_LOCATIONS, "'cpu:1'", "'auto'"):
        refused = torch_refusal(draw.device)
        if refused is not None and draw.format == "safetensors":
            raise refused  # torch.load refuses this map_location whatever the file holds
    if draw.format == "torch":
        with contextlib.ExitStack() as stack:
            given = stack.enter_context(open(path, "rb")) if draw.as_file else path
            loaded = torch.load(
                given,
                map_location=_torch_map_location(draw),
                weights_only=draw.weights_only,
                mmap=draw.mmap,
            )
        return {"tree": loaded}
    if draw.writer == "sharded":
        index = json.loads(path.read_text())["weight_map"]
        loaded = {}
        for file in dict.fromkeys(index.values()):
            loaded.update(safetensors.torch.load_file(path.parent / file))
        return {"tree": {name: loaded[name] for name in index}}
    if draw.reader != "safe_open":
        return {"tree": safetensors.torch.load_file(path)}
    with safetensors.safe_open(path, "pt") as opened:
        return _opened(draw, opened)


def _opened(draw: Draw, opened: Any) -> dict[str, Any]:
    """What a ``safe_open`` handle (safetensors' or tj's) answers: its keys, metadata,
    tensors and the slices ``draw`` asks for."""
    keys = opened.keys()
    return {
        "keys": keys,
        "metadata": opened.metadata(),
        "tree": {name: opened.get_tensor(name) for name in keys},
        "slices": [_slice(opened, name, expression) for name, expression in draw.slices],
    }


def _slice(opened: Any, name: str, expression: str) -> Any:
    """``get_slice(name)[index]``, or the error it raises."""
    try:
        part = opened.get_slice(name)
        shape = part.get_shape()
        return part[index_of(expression, shape[0] if shape else 0)]
    except Exception as error:
        return error


def read_ours(draw: Draw, path: Path, count: int) -> dict[str, Any]:
    """tj's answers, shaped as ``read_theirs``'s (``count``: the tensors the oracle made)."""
    keywords = _tj_keywords(draw, count)
    if draw.reader == "load":
        with contextlib.ExitStack() as stack:
            given = stack.enter_context(open(path, "rb")) if draw.as_file else path
            tree = tj.load(given, weights_only=draw.weights_only, mmap=draw.mmap, **keywords)
        return {"tree": tree}
    if draw.reader == "load_file":
        return {"tree": tj.load_file(path, backend=draw.backend, **keywords)}
    with tj.safe_open(path, framework="pt", backend=draw.backend, **keywords) as opened:
        return _opened(draw, opened)


# --- comparing -------------------------------------------------------------------------------


def _leaves(tree: Any) -> Iterator[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, dict):
        for value in tree.values():
            yield from _leaves(value)
    elif isinstance(tree, (list, tuple)):
        for value in tree:
            yield from _leaves(value)


def _call(tensor: torch.Tensor) -> Call:
    name = str(tensor.dtype).removeprefix("torch.")
    values: tuple[Any, ...] = ()
    if name in ("int64", "uint64", "float64", "complex128"):  # what the range rows read
        values = tuple(tensor.reshape(-1).tolist())
    leaf = Leaf(
        source="torch", layout="dense", dtype=name, values=values, shape=tuple(tensor.shape)
    )
    return Call(leaf=leaf, device='"cpu"', dtype=None)


#: The placement table's rows that refuse values the 32-bit dtype cannot hold.
_RANGE_ROWS = ("int64-values-past-32-bits-refused", "float64-values-past-float32-refused")


def refusal_expected(tree: Any) -> str | None:
    """The range row that refuses a tensor of ``tree`` (int64 values JAX's int32 cannot
    hold, float64 values float32 would make inf; without x64), or None."""
    if x64():
        return None
    return next(
        (
            row.id
            for tensor in _leaves(tree)
            for row in known_differences.covering(_call(tensor))
            if row.id in _RANGE_ROWS
        ),
        None,
    )


def _bits(values: Any) -> bytes:
    if isinstance(values, torch.Tensor):
        if not values.numel():
            return b""
        flat = values.detach().reshape(-1).clone(memory_format=torch.contiguous_format)
        return flat.view(torch.uint8).numpy().tobytes()
    return np.ascontiguousarray(np.asarray(values)).tobytes()


def compare_tensor(
    draw: Draw, theirs: torch.Tensor, ours: Any, where: str, name: str | None
) -> None:
    if not isinstance(ours, jax.Array):
        raise Different("type", where, "torch.Tensor", type(ours).__name__)
    expected = theirs
    if not x64():
        call, _, _ = known_differences.instead(_call(theirs))
        if call.dtype is not None:  # x64-narrowing: torch's cast to the 32-bit dtype
            expected = theirs.to(fuzz.torch_dtype(call.dtype))
    wanted = str(expected.dtype).removeprefix("torch.")
    if ours.dtype != fuzz.numpy_dtype(wanted):
        raise Different("dtype", where, wanted, ours.dtype)
    if tuple(ours.shape) != tuple(expected.shape):
        raise Different("shape", where, tuple(expected.shape), ours.shape)
    device = expected_device(draw, name)
    devices = {device} if device is not None else ours.devices() & set(jax.devices("cpu"))
    if ours.devices() != devices or len(devices) != 1 or not ours.committed:
        raise Different("placement", where, device, (ours.devices(), ours.committed))
    if _bits(expected) != _bits(ours):
        raise Different("values", where, expected.tolist(), np.asarray(ours).tolist())


def compare_tree(draw: Draw, theirs: Any, ours: Any, where: str, seen: dict[int, Any]) -> None:
    if isinstance(theirs, torch.Tensor):
        if id(theirs) in seen and seen[id(theirs)] is not ours:
            raise Different("sharing", where, "the same tensor as before", "another array")
        seen[id(theirs)] = ours
        name = where.split("'")[-2] if where.endswith("']") else None
        compare_tensor(draw, theirs, ours, where, name)
        return
    if type(theirs) is not type(ours):
        raise Different("container", where, type(theirs).__name__, type(ours).__name__)
    if isinstance(theirs, dict):
        if list(theirs) != list(ours):
            _empty_tensors_reordered(draw, theirs, ours, where)
        for key in theirs:
            compare_tree(draw, theirs[key], ours[key], f"{where}[{key!r}]", seen)
    elif isinstance(theirs, (list, tuple)):
        if len(theirs) != len(ours):
            raise Different("length", where, len(theirs), len(ours))
        for i, (a, b) in enumerate(zip(theirs, ours, strict=True)):
            compare_tree(draw, a, b, f"{where}[{i}]", seen)
    elif repr(theirs) != repr(ours):
        raise Different("value", where, repr(theirs), repr(ours))


def _empty_tensors_reordered(
    draw: Draw, theirs: dict[Any, Any], ours: dict[Any, Any], where: str
) -> None:
    """Keys in another order: only empty tensors of a safetensors file may move (their
    order there is the header's; safetensors leaves it unspecified)."""

    def full(keys: list[Any]) -> list[Any]:
        return [
            k for k in keys if not (isinstance(theirs[k], torch.Tensor) and not theirs[k].numel())
        ]

    same_keys = set(theirs) == set(ours)
    if draw.format == "safetensors" and same_keys and full(list(theirs)) == full(list(ours)):
        raise Explained("empty-tensors-order")
    raise Different("keys", where, list(theirs), list(ours))


def compare_slice(draw: Draw, theirs: Any, ours: Any, name: str, expression: str) -> None:
    where = f"get_slice({name!r}){expression}"
    if isinstance(theirs, BaseException):
        if ours is None or not isinstance(ours, BaseException):
            if "::-" in expression:
                raise Explained("negative-step-slices")
            raise Different("slice: tj takes what safetensors refuses", where, theirs, "a slice")
        _own_error(ours, where, theirs)
        return
    if isinstance(ours, BaseException):
        raise Different("slice: tj refuses", where, tuple(theirs.shape), ours)
    compare_tensor(draw, theirs, ours, where, name)


def compare(draw: Draw, theirs: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    """Compare every part; the rows that explained a slice's difference."""
    for part in ("keys", "metadata"):
        if part in theirs and theirs[part] != ours[part]:
            raise Different(part, part, theirs[part], ours[part])
    compare_tree(draw, theirs["tree"], ours["tree"], "<root>", {})
    rows = []
    for (name, expression), a, b in zip(
        draw.slices, theirs.get("slices", []), ours.get("slices", []), strict=True
    ):
        try:
            compare_slice(draw, a, b, name, expression)
        except Explained as explained:  # noqa: PERF203 (the other slices are still compared)
            rows.append(explained.row)
    return rows


# --- judging ---------------------------------------------------------------------------------


def _open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()


def _judge_load(draw: Draw, path: Path, damaged: Path | None, tally: Tally | None) -> None:
    theirs_error = None
    try:
        theirs = read_theirs(draw, path)
    except Exception as error:
        theirs_error = error
    before = _open_descriptors()
    ours_error = None
    count = len(draw.entries) if theirs_error is not None else _made(draw, theirs)
    try:
        ours = read_ours(draw, path, count)
    except Exception as error:
        ours_error = error
    if ours_error is not None:
        ours_error.__traceback__ = None
        gc.collect()  # arrays a failed load made before it failed hold their mapping
        leaked = _open_descriptors() - before
        if leaked:
            raise Different("descriptors left open", "load", "none", sorted(leaked))
    if theirs_error is None and draw.max_tensors is not None:
        _judge_max_tensors(draw, count, ours_error, tally)
    if ours_error is not None and theirs_error is None:
        _explain_refusal(draw, theirs["tree"], ours_error, path)
    if ours_error is not None:
        _explain_argument(draw, ours_error)  # tj checks its arguments before the file
    if theirs_error is not None:
        if ours_error is None:
            raise Different("error: tj takes what torch refuses", "load", theirs_error, "loaded")
        missing = isinstance(ours_error, FileNotFoundError)  # a shard: the files' kinds unknown
        if draw.reader == "load" and draw.device in REFUSED_MAP_LOCATIONS and not missing:
            _refused_map_location(draw, theirs_error, ours_error, tally)
        if draw.corruption is not None and draw.corruption[0] == "missing-shard":
            if isinstance(ours_error, FileNotFoundError) and damaged is not None:
                if damaged.name in str(ours_error) and path.name in str(ours_error):
                    raise Explained("missing-file-os-error")
        _own_error(ours_error, "load", theirs_error)
        if damaged is not None and damaged.name not in str(ours_error):
            raise Different("error: does not name the file", "load", theirs_error, ours_error)
        if damaged is not None and "Fix" not in str(ours_error):
            raise Different("error: names no fix", "load", theirs_error, ours_error)
        if tally is not None:
            tally.refused += 1
        return
    if refusal_expected(theirs["tree"]):
        raise Different("int64 past 32 bits", "load", "tj.ConversionError", "loaded")
    rows = compare(draw, theirs, ours)
    if tally is not None:
        for row in rows:
            tally.explained[row] += 1
        narrowed = not x64() and any(
            str(t.dtype).removeprefix("torch.") in known_differences.NARROWED
            for t in _leaves(theirs["tree"])
        )
        for row, applies in (
            ("x64-narrowing", narrowed),
            ("map-location-tj-spellings", draw.device in TJ_MAP_LOCATIONS),
            ("map-location-auto", draw.device == "'auto'"),
        ):
            tally.explained[row] += applies


def _refused_map_location(
    draw: Draw, theirs: BaseException, ours: BaseException, tally: Tally | None
) -> None:
    """A ``map_location`` torch refuses: tj's own error, naming the argument and the fix
    (checked before the file is read, so it names no file)."""
    _own_error(ours, "map_location", theirs)
    if "Fix" not in str(ours):
        raise Different("error: names no fix", "map_location", theirs, ours)
    if tally is not None:
        tally.refused += 1
    raise _RefusedAlike


class _RefusedAlike(Exception):
    """Both sides refused (tj as it must): nothing more to compare."""


def _judge_max_tensors(
    draw: Draw, count: int, ours: BaseException | None, tally: Tally | None
) -> None:
    """A load of ``count`` tensors under ``max_tensors=``: read as torch reads it within
    the limit; past it, ``tj.CheckpointError`` naming the count and the fix, nothing read.

    Raises ``_RefusedAlike`` once tj refused as it must."""
    limit = max_tensors(draw, count)
    if limit >= count:
        return
    if ours is None:
        raise Different("max_tensors: read past the limit", "load", f"refused ({count})", "read")
    _explain_argument(draw, ours)  # tj checks its arguments before the file
    if not isinstance(ours, tj.CheckpointError) or f"max_tensors={limit:,}" not in str(ours):
        raise Different("max_tensors: not the limit's error", "load", f"{count} > {limit}", ours)
    if "larger max_tensors=" not in str(ours):
        raise Different("error: names no fix", "load", "larger max_tensors=", ours)
    if tally is not None:
        tally.refused += 1
    raise _RefusedAlike


def _explain_refusal(draw: Draw, tree: Any, ours: BaseException, path: Path) -> None:
    """tj raised where the oracle did not: a row that says why, or a finding."""
    if draw.device == "device_map" and draw.corruption is not None:
        if isinstance(ours, tj.InvalidDeviceError) and "device_map" in str(ours):
            raise Explained("device-map-keys-checked")  # a renamed tensor's key
    if isinstance(ours, tj.CheckpointError) and "as a folder" in str(ours):
        if draw.corruption is not None and path.name in str(ours) and "Fix" in str(ours):
            raise Explained("zip-record-marked-a-folder")
    refused_by = refusal_expected(tree)
    if refused_by and isinstance(ours, tj.ConversionError):
        if path.name not in str(ours) and draw.writer != "sharded":
            raise Different("error: does not name the file", "load", "loaded", ours)
        raise Explained(refused_by)
    _explain_argument(draw, ours)
    raise Different("error: tj refuses", "load", "loaded", ours)


def _explain_argument(draw: Draw, ours: BaseException) -> None:
    """An argument tj refuses by design (before it reads the file): the row that says so."""
    if draw.reader == "load" and draw.weights_only is False:
        if isinstance(ours, tj.UnsupportedOperationError):
            raise Explained("weights-only")
    if draw.reader == "load" and draw.format == "safetensors" and "lambda" in draw.device:
        if isinstance(ours, tj.DeviceTypeError):
            raise Explained("callable-map-location-safetensors")


def judge(draw: Draw, tally: Tally | None = None) -> list[Finding]:
    """The differences between the oracle and tj on ``draw`` that no row explains (a
    crash on either side is one, named)."""
    return fuzz_runs.outcome(draw, _judge, tally, Finding, crashes=True)


def _judge(draw: Draw, tally: Tally | None) -> None:
    with tempfile.TemporaryDirectory(prefix="ckptfuzz-") as folder:
        try:
            path = write(draw, Path(folder))
        except _WriterRefused:
            if tally is not None:
                tally.refused += 1
            return
        damaged = damage(draw, path) if draw.corruption is not None else None
        try:
            _judge_load(draw, path, damaged, tally)
        except _RefusedAlike:
            return
        if draw.writer == "tj.save_file" and draw.corruption is None:
            _written_in_full(draw, tally)


def _written_in_full(draw: Draw, tally: Tally | None) -> None:
    if tally is not None and any(entry.view != "own" for entry in draw.entries):
        tally.explained["shared-tensors-written-in-full"] += 1


def shrink(finding: Finding, budget: int = 40) -> Finding:
    """A smaller draw showing the same kind of difference."""
    return fuzz_runs.shrink(finding, judge, smaller, budget)
