"""Checkpoints straight onto a mesh: each process reads only the shards its devices hold.

``tj.load_file``, ``tj.safe_open`` and ``tj.load`` hand targets that are not one
device to this module: a ``jax.sharding.Sharding`` (every tensor gets it), a
``jax.sharding.Mesh`` (every tensor replicated over it), a
[`tj.ShardingRule`][torch2jax_device.ShardingRule] (a mesh and, per tensor name, a
``PartitionSpec``) or a callable ``(name, shape, dtype) -> Sharding``. Multi-file
checkpoints (``model.safetensors.index.json`` and its shards) load here too, onto
any target.

For every tensor, the target sharding says which part each of this process's devices
holds (``addressable_devices_indices_map``); each distinct part is read from the file
on its own (``Reader.read_selection``: one read for a range of rows, which safetensors
stores contiguously), put on its devices, and the parts become one global array
(``distributed.transfer.assemble``). So a process reads about its share of the bytes,
and no device ever holds a whole tensor that is meant to be sharded. Parts go one
after the other; a part held only by devices that copy host data through pinned
memory (GPUs) is read piece by piece straight into pooled pinned staging buffers
(``host_staging.send_in_pieces``), so the host holds a few pieces, never the part. With
several processes, each one loads its own parts and the arrays are global: every
process must make the same call, and before reading any part the processes check that
they agree on each tensor's global shape and dtype, and on a sample of its values
(``agreement``). Before reading,
each device's shards of the load, with the pieces of a part in flight to it, are checked
against its free memory (``transfer.room_on_each``, the rule of one-device loads): the
first device that cannot hold them refuses the load
with ``OutOfMemoryError``, and an allocation failure midway becomes the same error. PyTorch
checkpoints are read the same way through ``torch.load(mmap=True)``, which touches only
the pages of the parts it is asked for.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import math
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from .. import dtypes, host_staging
from ..detect import is_torch_device
from ..device import Device
from ..distributed.transfer import Index, assemble, is_whole, part_key
from ..errors import CheckpointError, DeviceTypeError
from ..host_staging import Piece, Streamed
from ..interop import to_jax
from .agreement import agree, failing_together, sample_windows
from .format import TensorBudget, TensorInfo
from .index import Shards, is_index, not_in_shard, shard_files, tensor_budget
from .map_location import MapLocationRule
from .messages import loading, shown, slice_load
from .object_graph import Graph
from .one_device import load_file as load_file_on_device
from .options import resolve_target
from .pickled import (
    HostTensors,
    check_expansion,
    load_pickled,
    numpy_dtype,
    rebuilt,
    settle,
    tensor_error,
)
from .progress import Progress
from .reader import Reader
from .source import PathLike, Source, import_torch, unreadable
from .transfer import Arrival, room_on_each, sent

__all__ = [
    "OnMesh",
    "ShardingRule",
    "handles_checkpoint",
    "handles_file",
    "handles_open",
    "load",
    "load_file",
    "load_object",
]

#: What a per-tensor rule is called with and returns.
RuleFunction = Callable[[str, tuple[int, ...], np.dtype[Any]], Sharding]


class ShardingRule:
    """Where each tensor of a checkpoint goes on a mesh: name patterns to ``PartitionSpec``.

    Pass it as ``device=`` to [`tj.load_file`][torch2jax_device.load_file] and
    [`tj.safe_open`][torch2jax_device.safe_open], or as ``map_location=`` to
    [`tj.load`][torch2jax_device.load]: each tensor is split over ``mesh`` as the first
    pattern matching its name says, and each process reads only the parts its devices
    hold. Accelerate's ``device_map`` answers the same question for torch, one device
    per module; here a tensor can span devices.

    Args:
        mesh: The mesh, e.g. from
            [`tj.distributed.init_device_mesh`][torch2jax_device.distributed.init_device_mesh].
        rules: ``{pattern: PartitionSpec}``, tried in order; a pattern is a shell-style
            wildcard (``fnmatch``: ``*`` matches dots too) over the whole tensor name,
            e.g. ``"transformer.h.*.attn.c_attn.weight"``. Or a callable
            ``(name, shape, dtype) -> PartitionSpec | None`` (``None``: ``default``).
        default: The spec of tensors no pattern matches: replicated.

    Raises:
        DeviceTypeError: ``mesh`` is not a ``Mesh`` or a rule is not a ``PartitionSpec``.

    Examples:
        >>> import numpy as np
        >>> from jax.sharding import PartitionSpec as P
        >>> import torch2jax_device as tj
        >>> mesh = tj.distributed.init_device_mesh("cpu", (1,), mesh_dim_names=("model",))
        >>> rule = tj.ShardingRule(mesh, {"*.weight": P("model", None)})
        >>> rule("wte.weight", (64, 32), np.dtype("float32")).spec
        P('model', None)
        >>> rule("wte.bias", (32,), np.dtype("float32")).spec  # no pattern: replicated
        P()
    """

    def __init__(
        self,
        mesh: Mesh,
        rules: Mapping[str, PartitionSpec]
        | Callable[[str, tuple[int, ...], np.dtype[Any]], PartitionSpec | None]
        | None = None,
        *,
        default: PartitionSpec = PartitionSpec(),  # noqa: B008 (immutable)
    ) -> None:
        if not isinstance(mesh, Mesh):
            raise DeviceTypeError(
                f"ShardingRule takes a jax.sharding.Mesh, not {type(mesh).__name__}"
            )
        specs = dict(rules) if isinstance(rules, Mapping) else {}
        for pattern, spec in [("default", default), *specs.items()]:
            if not isinstance(spec, PartitionSpec):
                raise DeviceTypeError(
                    f"ShardingRule: the rule for {pattern!r} is {spec!r}; give a "
                    "jax.sharding.PartitionSpec, e.g. P('model', None) (P() replicates)"
                )
            try:
                NamedSharding(mesh, spec)
            except Exception as err:  # ValueError, or JAX's DuplicateSpecError
                raise DeviceTypeError(
                    f"ShardingRule: the rule for {pattern!r}, {spec}, does not fit the mesh "
                    f"{dict(mesh.shape)}: {err}"
                ) from None
        self.mesh, self.default = mesh, default
        self._patterns = specs
        self._function = None if rules is None or isinstance(rules, Mapping) else rules

    def spec(self, name: str, shape: tuple[int, ...], dtype: np.dtype[Any]) -> PartitionSpec:
        """The ``PartitionSpec`` of tensor ``name``."""
        if self._function is not None:
            chosen = self._function(name, shape, dtype)
            if chosen is not None and not isinstance(chosen, PartitionSpec):
                raise DeviceTypeError(
                    f"the ShardingRule function returned {chosen!r} for tensor {shown(name)}; it "
                    "must return a jax.sharding.PartitionSpec or None"
                )
            return self.default if chosen is None else chosen
        for pattern, spec in self._patterns.items():
            if fnmatch.fnmatchcase(name, pattern):
                return spec
        return self.default

    def __call__(self, name: str, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Sharding:
        """The ``NamedSharding`` of tensor ``name``.

        Raises:
            CheckpointError: the function form gave a spec the mesh cannot take.
        """
        spec = self.spec(name, shape, dtype)
        try:
            return NamedSharding(self.mesh, spec)
        except Exception as err:  # ValueError, or JAX's DuplicateSpecError
            raise CheckpointError(
                f"no sharding for tensor {shown(name)}: the ShardingRule gave {spec}, which does "
                f"not fit the mesh {dict(self.mesh.shape)}: {err}"
            ) from None

    def __repr__(self) -> str:
        rules = self._function if self._function is not None else self._patterns
        return f"ShardingRule({dict(self.mesh.shape)}, {rules!r}, default={self.default!r})"


def handles_file(path: PathLike, device: Any) -> bool:
    """Whether ``load_file(path, device)`` is for this module (a callable is a rule)."""
    return is_index(path) or _is_sharded_target(device, callables=True)


def handles_open(device: Any) -> bool:
    """Whether ``safe_open(path, device)`` is for this module."""
    return _is_sharded_target(device, callables=True)


def handles_checkpoint(path: PathLike | None, map_location: Any) -> bool:
    """Whether ``load(path, map_location)`` is for this module (a callable is torch's);
    ``path`` is ``None`` for a file object, which ``load_object`` loads."""
    return (path is not None and is_index(path)) or _is_sharded_target(
        map_location, callables=False
    )


def load_file(
    path: PathLike,
    device: Any = "cpu",
    *,
    max_tensors: int | TensorBudget | None = None,
    progress: bool | None = None,
    shards: Shards | None = None,
) -> dict[str, jax.Array]:
    """``tj.load_file`` onto a sharding, a mesh or a per-tensor rule, or of an index of files.

    Every process reads only the parts of each tensor its own devices hold.
    ``max_tensors`` caps the tensors of all the files together, or is the budget of a
    larger load. ``shards``: the files, opened already by the caller (closed here).

    Raises:
        CheckpointError: the file or an index is invalid, or a rule does not fit a
            tensor (the message names it).
        DeviceTypeError: a rule returns something that is not a sharding.
    """
    with failing_together(device):  # the others are told if this process fails first
        rule = _rule(device, callables=True)
        with shards or shard_files(path) as opened:
            return _load_files(path, rule, opened, max_tensors, progress)


def _load_files(
    path: PathLike,
    rule: RuleFunction,
    shards: Shards,
    max_tensors: int | TensorBudget | None,
    progress: bool | None,
) -> dict[str, jax.Array]:
    budget = (
        max_tensors
        if isinstance(max_tensors, TensorBudget)
        else tensor_budget(shards, path, max_tensors, "tj.load_file")
    )
    readers: list[tuple[Reader, list[_Plan]]] = []
    try:
        for file, names in shards.files.items():
            reader = Reader(file, max_tensors=budget, opened=shards.opened.get(file))
            readers.append((reader, []))
            if names is not None and not set(names) <= reader.tensors.keys():
                missing = [name for name in names if name not in reader.tensors]
                raise not_in_shard(os.fspath(path), file, missing, list(reader.tensors))
            for name in reader.tensors if names is None else names:
                readers[-1][1].append(_plan(reader, name, rule))
        where = {plan.info.name: (reader, plan.info) for reader, plans in readers for plan in plans}
        agree(
            (
                (plan.info.name, plan.info.shape, plan.info.dtype, plan.sharding)
                for _, plans in readers
                for plan in plans
            ),
            f"tj.load_file({shown(os.fspath(path))})",
            lambda name: _file_sample(*where[name]),
        )
        total = sum(plan.local_bytes for _, plans in readers for plan in plans)
        arrivals = _gathered(plan.arrivals for _, plans in readers for plan in plans)
        what = loading(sum(len(plans) for _, plans in readers), path)
        arrays: dict[str, jax.Array] = {}
        label = f"Loading {os.path.basename(os.fspath(path))}"
        with room_on_each(arrivals, what), Progress(label, total, progress) as bar:
            for _, plans in readers:  # each new part's shape compiles while the first read
                for plan in plans:
                    if dtypes.canonical(plan.info.dtype) == plan.info.dtype:  # not narrowed
                        host_staging.compile_ahead_on(
                            plan.info.shape, plan.info.dtype, plan.sharding
                        )
            try:
                for reader, plans in readers:
                    for plan in sorted(plans, key=lambda plan: plan.info.start):
                        arrays[plan.info.name] = plan.load(reader, bar.advance)
                jax.block_until_ready(list(arrays.values()))
            except BaseException:
                settle(list(arrays.values()))  # nothing dropped while in flight
                raise
    finally:
        for reader, _ in readers:
            reader.close()
    order = shards.names if shards.names is not None else list(arrays)
    return {name: arrays[name] for name in order}


class OnMesh:
    """A mesh target of ``tj.safe_open``: tensors become global arrays.

    ``tensor`` reads only this process's parts; ``selection`` reads the selection and
    places it on the sharding the rule gives for its shape.
    """

    def __init__(self, target: Any) -> None:
        self._target, self._rule = target, _rule(target, callables=True)

    def tensor(self, reader: Reader, info: TensorInfo) -> jax.Array:
        with failing_together(self._target):
            return self._tensor(reader, info)

    def _tensor(self, reader: Reader, info: TensorInfo) -> jax.Array:
        plan = _Plan(info, _checked(self._rule, info.name, info.shape, info.dtype))
        described = [(info.name, info.shape, info.dtype, plan.sharding)]
        agree(
            described,
            f"get_tensor({shown(info.name)}) of {shown(reader.path)}",
            lambda name: _file_sample(reader, info),
        )
        with room_on_each(_gathered([plan.arrivals]), loading(1, reader.path)):
            return plan.load(reader, lambda count: None)

    def selection(self, reader: Reader, info: TensorInfo, index: Any) -> jax.Array:
        with failing_together(self._target):
            return self._selection(reader, info, index)

    def _selection(self, reader: Reader, info: TensorInfo, index: Any) -> jax.Array:
        shape, dtype = reader.selection_shape(info, index), dtypes.canonical(info.dtype)
        name = f"{shown(info.name)}[{index!r}]"
        sharding = _checked(self._rule, info.name, shape, dtype)
        described = [(name, shape, dtype, sharding)]
        agree(
            described,
            f"get_slice({shown(info.name)})[...] of {shown(reader.path)}",
            lambda name: _file_sample(reader, info),  # the tensor's: the slice is part of it
        )
        what = slice_load(shape, info.name, reader.path)
        with room_on_each(_gathered([_arrivals(shape, dtype, sharding)]), what):
            host = dtypes.as_canonical(reader.read_selection(info, index))
            return assemble(
                shape, sharding, lambda part: host if part is None else host[part], where=name
            )


def load(
    path: PathLike,
    map_location: Any,
    *,
    progress: bool | None = None,
    max_tensors: int | None = None,
    pickle_load_args: Mapping[str, Any] | None = None,
    opened: Source | None = None,
) -> Any:
    """``tj.load`` onto a sharding, a mesh or a ``ShardingRule``, or of an index of files.

    safetensors files go through ``load_file``; PyTorch checkpoints through
    ``torch.load(mmap=True, weights_only=True)``, each tensor named by its path in the
    checkpoint (``model.transformer.wte.weight``) for the rule, and each process
    slicing out only its parts. Everything that is not a tensor is kept as it is. An
    index of shards onto anything else ``tj.load`` takes loads each shard as
    ``tj.load`` does. ``opened``: the file ``path`` names, open already (not an index).
    ``max_tensors`` caps the tensors of all the files together;
    ``pickle_load_args`` (``encoding=``) go to torch's unpickler.

    Raises:
        CheckpointError: unreadable file or index, a rule that does not fit a tensor,
            or torch missing for a PyTorch checkpoint.
    """
    path = os.fspath(path)
    with failing_together(map_location), contextlib.ExitStack() as stack:
        shards = stack.enter_context(shard_files(path))
        budget = tensor_budget(shards, path, max_tensors, "tj.load")
        sources = [
            opened
            if opened is not None and shards.names is None
            else stack.enter_context(Source(file, shards.opened.get(file)))
            for file in shards.files
        ]
        for file, source in zip(shards.files, sources, strict=True):
            if source.handle is not None:
                shards.opened[file] = source.handle  # one handle per file, read by all
        return _load_sources(
            path, map_location, shards, sources, budget, progress, pickle_load_args
        )


def _load_sources(
    path: str,
    map_location: Any,
    shards: Shards,
    sources: list[Source],
    budget: TensorBudget,
    progress: bool | None,
    pickle_load_args: Mapping[str, Any] | None,
) -> Any:
    sharded = _is_sharded_target(map_location, callables=False)
    files = list(shards.files)
    if all(source.kind == "safetensors" for source in sources):
        device = (
            map_location
            if sharded
            else MapLocationRule(map_location).safetensors_device(repr(path))
        )
        return load_file(path, device, progress=progress, max_tensors=budget, shards=shards)
    arguments = dict(pickle_load_args or {})
    parts = []
    for file, source in zip(files, sources, strict=True):
        if sharded:
            part = _load_torch(source, map_location, budget, arguments)
        elif source.kind == "safetensors":
            device = MapLocationRule(map_location).safetensors_device(source.name)
            part = load_file_on_device(
                file, device, progress=progress, max_tensors=budget, opened=source.handle
            )
        else:
            rule = MapLocationRule(map_location)
            part = load_pickled(source, rule, False, progress, arguments, budget)
        if shards.names is not None:
            part = _listed(path, file, part, shards.files[file])
        parts.append(part)
    if shards.names is None:  # one file: its checkpoint, as torch.load returns it
        return parts[0]
    checkpoint: dict[str, Any] = {}
    for part in parts:
        checkpoint.update(part)
    return {name: checkpoint[name] for name in shards.names}


def _listed(path: str, file: str, part: Any, names: list[str] | None) -> dict[str, Any]:
    """The tensors the index ``path`` assigns to its shard ``file``, from the shard's
    checkpoint ``part``, as a safetensors shard is read: a name the index lists that the
    shard lacks is an error; what the shard holds beyond them is not the index's (a stale
    copy of a tensor another shard holds must not replace it)."""
    if not isinstance(part, dict):
        raise CheckpointError(
            f"{shown(file)}, a shard listed in {path!r}, holds a {type(part).__name__}, not a "
            "dict of tensors; an index can only join dicts"
        )
    assert names is not None
    missing = [name for name in names if name not in part]
    if missing:
        raise not_in_shard(path, file, missing, [key for key in part if isinstance(key, str)])
    return {name: part[name] for name in names}


def load_object(
    source: Source,
    map_location: Any,
    *,
    max_tensors: int | None = None,
    pickle_load_args: Mapping[str, Any] | None = None,
) -> Any:
    """``tj.load`` of a PyTorch checkpoint in a file object onto a sharding, a mesh or a
    ``ShardingRule``: as ``load`` loads one from a path, without a memory map.

    Raises:
        CheckpointError: as ``load``; a safetensors file, which is read from a path only.
    """
    if source.kind == "safetensors":
        raise CheckpointError(
            f"{source.name} holds a safetensors file, which tj.load reads from a path only: "
            "pass the path (tj.load(path, map_location=...) or tj.load_file(path, device=...))"
        )
    budget = TensorBudget(max_tensors, source.size(), verb="tj.load")
    return _load_torch(source, map_location, budget, dict(pickle_load_args or {}))


class _Plan:
    """One tensor: its sharding, and the distinct parts this process's devices hold."""

    def __init__(self, info: TensorInfo, sharding: Sharding) -> None:
        self.info, self.sharding = info, sharding
        indices = sharding.addressable_devices_indices_map(info.shape)
        parts = {part_key(index, info.shape): index for index in indices.values()}
        itemsize = dtypes.canonical(info.dtype).itemsize
        self.local_bytes = sum(
            math.prod(_part_shape(index, info.shape)) * itemsize for index in parts.values()
        )
        self.arrivals = _arrivals(info.shape, info.dtype, sharding, indices)

    def load(self, reader: Reader, advance: Callable[[int], None]) -> jax.Array:
        """The global array, each of this process's parts read once (see ``part``)."""
        return assemble(
            self.info.shape,
            self.sharding,
            lambda index: self.part(reader, index, advance),
            where=f"tensor {shown(self.info.name)}",
        )

    def part(
        self, reader: Reader, index: Index, advance: Callable[[int], None]
    ) -> np.ndarray[Any, Any] | Streamed:
        """The part ``index`` of the tensor, to be read whole or piece by piece.

        Devices that copy host data through pinned memory (a GPU) get the part read piece
        by piece straight into pinned staging buffers (``host_staging.send_in_pieces``),
        so the host never holds it whole; others get it read whole, into memory a CPU
        device keeps as the array's. Tensors narrowed as they are read (64-bit ones
        without ``jax_enable_x64``) are always read whole.
        """
        info = self.info
        dtype = dtypes.canonical(info.dtype)

        def whole() -> np.ndarray[Any, Any]:
            if is_whole(index, info.shape):
                host = reader.read_tensor(info, dtype)
            else:
                host = dtypes.as_canonical(reader.read_selection(info, index))
            advance(host.nbytes)
            return host

        if dtype != info.dtype:
            return whole()
        bounds = part_key(index, info.shape)
        shape = tuple(stop - begin for begin, stop in bounds)
        left = math.prod(shape) * dtype.itemsize  # to count: the last pieces may overlap

        def fill(piece: Piece, out: np.ndarray[Any, np.dtype[np.uint8]]) -> None:
            nonlocal left
            window = tuple(
                slice(begin + start, begin + start + size)
                for (begin, _), start, size in zip(bounds, piece.starts, piece.shape, strict=True)
            )
            reader.read_selection_into(info, window, out)
            advance(min(piece.nbytes, left))
            left -= min(piece.nbytes, left)

        return Streamed(shape, dtype, fill, whole)


def _plan(reader: Reader, name: str, rule: RuleFunction) -> _Plan:
    info = reader.info(name)
    return _Plan(info, _checked(rule, name, info.shape, info.dtype))


def _checked(
    rule: RuleFunction, name: str, shape: tuple[int, ...], dtype: np.dtype[Any]
) -> Sharding:
    """``rule``'s sharding for a tensor, checked to fit it."""
    sharding = rule(name, shape, dtype)
    if not isinstance(sharding, Sharding):
        raise DeviceTypeError(
            f"the sharding rule returned {sharding!r} for tensor {shown(name)} (shape "
            f"{list(shape)}); it must return a jax.sharding.Sharding, e.g. "
            "NamedSharding(mesh, P('model', None))"
        )
    if isinstance(sharding, NamedSharding):
        spec, sizes = sharding.spec, dict(sharding.mesh.shape)
        if len(spec) > len(shape):
            raise CheckpointError(
                f"tensor {shown(name)} has shape {list(shape)} ({len(shape)} dimension(s)) but its "
                f"PartitionSpec {spec} names {len(spec)}. Fix: a spec of at most {len(shape)} "
                "entries for it (P() replicates), e.g. with a tj.ShardingRule per tensor name"
            )
        for dimension, (size, axes) in enumerate(zip(shape, spec, strict=False)):
            names = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
            ways = math.prod(sizes[axis] for axis in names)
            if size % ways:
                raise CheckpointError(
                    f"tensor {shown(name)} of shape {list(shape)} cannot be split {ways} ways "
                    f"along dimension {dimension} (size {size}) as {spec} says over mesh "
                    f"{dict(sizes)}. Fix: a rule that leaves this dimension whole (None) or "
                    "splits it over axes whose sizes divide it"
                )
    return sharding


def _rule(target: Any, *, callables: bool) -> RuleFunction:
    """Any target this module takes, as ``(name, shape, dtype) -> Sharding``."""
    if isinstance(target, ShardingRule):
        return target
    if isinstance(target, Sharding):
        return lambda name, shape, dtype: target
    if isinstance(target, Mesh):
        replicated = NamedSharding(target, PartitionSpec())
        return lambda name, shape, dtype: replicated
    if _is_sharded_target(target, callables=callables):
        return cast(RuleFunction, target)
    single = jax.sharding.SingleDeviceSharding(resolve_target(target))
    return lambda name, shape, dtype: single


def _is_sharded_target(target: Any, *, callables: bool) -> bool:
    if isinstance(target, (Sharding, Mesh, ShardingRule)):
        return True
    device_like = isinstance(target, (str, int, Device, jax.Device)) or is_torch_device(target)
    return callables and callable(target) and not device_like


def _load_torch(
    source: Source, target: Any, budget: TensorBudget, pickle_load_args: dict[str, Any]
) -> Any:
    """A PyTorch checkpoint, each tensor placed part by part as ``target`` (a sharding, a
    mesh or a rule) says.

    Its containers come back as ``torch.load`` gives them (``pickled.rebuilt``: types,
    attributes, sharing, cycles, any depth), its tensors as a load onto one device makes
    them (``pickled.HostTensors``: sparse ones dense, quantized ones dequantized, copies
    bounded, the library's error for one JAX cannot hold); each is named for the rule by its
    dotted path (``model.transformer.wte.weight``; a tensor held in several places takes
    the first one found, for one dict its first key).
    """
    with failing_together(target):  # the others are told if this process fails first
        return _load_torch_on(source, _rule(target, callables=False), budget, pickle_load_args)


def _load_torch_on(
    source: Source, rule: RuleFunction, budget: TensorBudget, pickle_load_args: dict[str, Any]
) -> Any:
    torch = import_torch(source.name)
    check_expansion(source, budget)
    data_bytes = source.size()  # a file object: from where it is read
    # The legacy (pre-zip) format and file objects cannot be mapped.
    mmap = source.kind == "zip" and source.path is not None
    opened: Any = source.by_name() if source.path is not None else source.file
    try:
        checkpoint = torch.load(
            opened, map_location="cpu", mmap=mmap, weights_only=True, **pickle_load_args
        )
    except (OSError, Warning):
        raise  # the file system's error, or a warning the caller's filters made one
    except Exception as err:
        raise unreadable(source.name, err) from err

    def arrays(graph: Graph) -> dict[int, Any]:
        # First every tensor's name and sharding, agreed on and checked; then the parts.
        hosts = HostTensors(torch, data_bytes)
        plans = []
        for tensor in graph.tensors:
            try:  # dense, of a JAX dtype: as a load onto one device makes it
                host = hosts(tensor)
                dtype = numpy_dtype(host.dtype)
            except Warning:
                raise  # a warning the caller's filters made an error stays what it is
            except Exception as err:  # torch's own (to_dense, dequantize) too, as there
                raise tensor_error(source.name, graph, tensor, err) from err
            name, shape = graph.name(tensor), tuple(host.shape)
            sharding = _checked(rule, name, shape, dtypes.canonical(dtype))
            plans.append((name, tensor, host, dtype, sharding))
        hosts_by_name = {name: host for name, _, host, _, _ in plans}
        agree(
            (
                (name, tuple(host.shape), dtype, sharding)
                for name, _, host, dtype, sharding in plans
            ),
            f"tj.load({source.name})",
            lambda name: (source.name, _torch_sample(torch, hosts_by_name[name])),
        )
        arrivals = _gathered(
            _arrivals(tuple(host.shape), dtype, sharding) for _, _, host, dtype, sharding in plans
        )
        placed: dict[int, Any] = {}
        with room_on_each(arrivals, loading(len(plans), source.path, source.name)):
            try:
                for name, tensor, host, _, sharding in plans:
                    placed[id(tensor)] = assemble(
                        tuple(host.shape),
                        sharding,
                        functools.partial(_torch_part, host),
                        where=f"tensor {shown(name)}",
                    )
                jax.block_until_ready(list(placed.values()))
            except BaseException:
                settle(list(placed.values()))  # nothing dropped while in flight
                raise
        return placed

    return rebuilt(source.name, checkpoint, torch, budget, arrays)


def _file_sample(reader: Reader, info: TensorInfo) -> tuple[str, bytes]:
    """The file and bytes of a tensor's sample (``agreement.sample_windows``): a few small
    reads, whatever this process's parts are."""
    return reader.path, b"".join(
        reader.read_selection(info, window).tobytes() for window in sample_windows(info.shape)
    )


def _torch_sample(torch: Any, tensor: Any) -> bytes:
    """The bytes of a torch tensor's sample (``agreement.sample_windows``), read from its
    (mapped) storage, never a copy of the tensor."""
    return b"".join(
        tensor[window].contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        for window in sample_windows(tuple(tensor.shape))
    )


def _torch_part(tensor: Any, index: Index | None) -> jax.Array:
    """The part ``index`` of a torch tensor (``None``: all of it), as an array on the CPU."""
    return to_jax(tensor if index is None else tensor[index].contiguous())


def _arrivals(
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    sharding: Sharding,
    indices: Mapping[jax.Device, Index] | None = None,
) -> dict[jax.Device, Arrival]:
    """What each of this process's devices receives of a tensor placed on ``sharding``:
    its part, sent from the host (``transfer.sent``: with its pieces in flight).

    ``indices``: ``sharding.addressable_devices_indices_map(shape)``, where known already.
    Nothing where the shards live in host memory (a ``pinned_host`` memory kind), or where
    the sharding cannot split ``shape`` (``assemble`` explains that when placing it).
    """
    if sharding.memory_kind not in (None, "device"):
        return {}
    canonical = dtypes.canonical(dtype)
    if indices is None:
        try:
            indices = sharding.addressable_devices_indices_map(shape)
        except ValueError:
            return {}
    return {
        device: sent(device, _part_shape(index, shape), canonical)
        for device, index in indices.items()
    }


def _gathered(tensors: Iterable[Mapping[jax.Device, Arrival]]) -> dict[jax.Device, list[Arrival]]:
    """Per device, what it receives of all the tensors, in the order the devices first appear."""
    arrivals: dict[jax.Device, list[Arrival]] = {}
    for tensor in tensors:
        for device, arrival in tensor.items():
            arrivals.setdefault(device, []).append(arrival)
    return arrivals


def _part_shape(index: Index, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(stop - start for start, stop in part_key(index, shape))
