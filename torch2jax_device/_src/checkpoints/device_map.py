"""Placement plans from checkpoints: ``tj.DeviceMap``, Accelerate's ``device_map`` in JAX.

The rules of a plan (budgets, the fill order, explicit maps, the errors, the printed
form) are ``device_plan``'s, below ``placement`` and this package, which both place by
them. Here a plan is made from what a checkpoint says of its tensors before any of
their bytes are read: a safetensors header (or an index's), or a PyTorch checkpoint
unpickled over a memory map (``torch.load(mmap=True)`` touches no tensor page); and
loads that go by a plan read each tensor straight onto its place.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import SingleDeviceSharding

from .. import dtypes, host_staging
from ..device import resolve
from ..device_plan import DevicePlan, plan_for
from ..errors import CheckpointError
from ..interop import aligned_empty, to_jax
from .format import TensorBudget
from .index import not_in_shard, shard_files
from .messages import shown
from .object_graph import Graph, TooManyTensorsError
from .pickled import HostTensors, check_expansion, numpy_dtype, rebuilt, settle, tensor_error
from .reader import Reader
from .sharded import load_file as load_file_by_rule
from .source import PathLike, Source, import_torch, unreadable

__all__ = [
    "DeviceMap",
    "file_tensors",
    "load_for_model",
    "load_pickled_by_plan",
    "model_plan",
    "planned_target",
    "reads_straight",
]


class DeviceMap(DevicePlan):
    """Which device and memory kind each tensor of a model goes to: ``device_map="auto"``.

    Accelerate's ``infer_auto_device_map`` for JAX arrays.
    `DeviceMap.plan` makes one from a checkpoint (a safetensors header, a PyTorch
    checkpoint unpickled over a memory map: no tensor byte is read), a model or a tree
    of arrays; [`tj.load_file`][torch2jax_device.load_file],
    [`tj.safe_open`][torch2jax_device.safe_open], [`tj.load`][torch2jax_device.load]
    (``map_location=``), [`tj.load_state`][torch2jax_device.load_state] and
    [`tj.to_device`][torch2jax_device.to_device] make one themselves when given
    ``"auto"`` (or ``device_map=``), take one made earlier, and put each tensor
    straight onto its place.
    A plan prints like Accelerate's map (module prefix -> device), with the bytes on
    each; ``modules()`` gives that map as a dict, which ``device_map=`` takes back.

    A plan is also a loader's per-tensor rule ``(name, shape, dtype) -> Sharding``:
    ``tj.load_file(path, device=plan)`` loads by it.

    Examples:
        >>> import jax, numpy as np
        >>> import torch2jax_device as tj
        >>> shapes = {f"layers.{i}.kernel": jax.ShapeDtypeStruct((256, 256), np.float32)
        ...           for i in range(3)}
        >>> plan = tj.DeviceMap.plan(shapes, device_map={"layers.0.*": "cpu", "*": "cpu"})
        >>> plan.modules()  # one CPU device: torch's name for it, 'cpu'
        {'': 'cpu'}
        >>> plan.bytes_per_device()
        {'cpu': 786432}
        >>> tree = {"wte": np.ones((8, 4), np.float32), "h": [np.ones(4, np.float32)]}
        >>> tj.DeviceMap.plan(tree, device_map={"h.0": "cpu", "": "cpu"}).modules()
        {'': 'cpu'}
        >>> list(tj.DeviceMap.plan(tree).placements())  # a tree's dotted key paths
        ['wte', 'h.0']
    """

    @classmethod
    def plan(
        cls,
        tensors: Any,
        *,
        max_memory: Mapping[Any, Any] | None = None,
        device_map: Mapping[str, Any] | str | None = None,
    ) -> DeviceMap:
        """The plan for ``tensors``, before any of their bytes are read.

        Without ``device_map`` (or with ``device_map="auto"``), tensors in their order
        fill each accelerator up to its budget, then the ``pinned_host`` memory of
        the one that computes (the first the plan fills: ``execution_device``), then
        the CPU device; once a module does not fit a tier,
        it and every later one go to the next (the layers stay in order, as in
        Accelerate). A module's tensors (a run of names with one dotted prefix:
        ``layers.0.kernel``, ``layers.0.bias``) go to one place, as Accelerate never
        splits a module; only one that no tier holds whole is split, in order. A
        budget is ``max_memory``'s figure for the device, else 90 % of its free memory
        (``RESERVE`` is left for activations); a device that reports no figures (a CPU
        device) has no limit unless given one; no room is kept for the largest layer,
        as Accelerate keeps (give a smaller figure to keep more). Over several
        accelerators, ``"auto"`` is Accelerate's ``"balanced"`` (what Transformers'
        ``from_pretrained`` and ``load_checkpoint_and_dispatch`` do): each accelerator
        but the last takes at most the model's bytes over their number plus 1.25 times
        its mean final module (a module with no module below it), so the model is
        shared among them rather than filling the first.

        Args:
            tensors: A ``.safetensors`` file or ``*.index.json`` (only the headers are
                read), a PyTorch checkpoint (unpickled over a memory map: its tensors
                named by their dotted paths, in the order they were saved), or
                ``{name: array}`` of arrays or ``jax.ShapeDtypeStruct`` (e.g.
                ``tj.state_dict(nnx.eval_shape(...))``), in the model's order; or a model
                (NNX: by its ``tj.state_dict`` names, abstract ones too) or a tree of
                arrays (by dotted key paths), named as ``tj.to_device(..., "auto")``
                names them.
            max_memory: ``{device: size}`` as in Accelerate: the accelerators to fill,
                in index order as Accelerate sorts them (e.g. ``"cuda:0"``, ``0``, or
                ``"cpu:1"`` to let a CPU device stand in), ``"cpu"`` for host RAM (both
                host tiers together), and ``"pinned_host"`` for the part of it in the
                computing accelerator's pinned memory. Sizes are bytes or strings
                (``"20GiB"``, ``"500MB"``). As in Accelerate, the dict lists every
                device the plan may use: ``{"cpu": "100GiB"}`` puts nothing on a GPU.
                Without ``max_memory``, every local accelerator is filled.
            device_map: One of Accelerate's strategies: ``"auto"`` / ``"balanced"``
                (above), ``"balanced_low_0"`` (the first accelerator takes only what
                the others cannot, as Transformers' ``generate`` wants it free) or
                ``"sequential"`` (each accelerator filled before the next:
                ``infer_auto_device_map`` alone). Or an explicit map:
                ``{pattern: place}``, the most specific key that matches a tensor's
                name wins (the longest module prefix, as Accelerate places; a wildcard
                counts its literal characters; on a tie the earlier key). A key is a
                module prefix as Accelerate writes them (``"layers.0"`` covers
                ``"layers.0.kernel"``; ``""`` covers everything) or a wildcard
                (``"layers.1*"``). A place is a device (``"cuda:0"``, ``0``, ``"cpu"``)
                or ``(device, "pinned_host")``.

        Raises:
            ConfigError: a size that does not parse, or a ``"pinned_host"`` budget in a
                ``max_memory`` that names no accelerator.
            DeviceUnavailableError: ``max_memory`` or ``device_map`` names a device that
                does not exist here.
            InvalidDeviceError: ``device_map`` leaves a tensor unplaced, has a key that
                covers no tensor (a typo: its module would go where another key says;
                a module without tensors, such as a ``Dropout`` under a module that
                has some, is taken),
                gives a place that is not a device (``"disk"``) or a memory kind the
                device lacks, or is a string that is not one of the strategies.
            OutOfMemoryError: the tensors cannot fit even with host memory, or an
                explicit map overfills a budget (the message has the numbers).
            CheckpointError: a file that cannot be read as a checkpoint.
            ArgumentTypeError: ``tensors`` is none of those.
        """
        shapes = file_tensors(tensors) if isinstance(tensors, (str, os.PathLike)) else tensors
        plan: DeviceMap = cls.from_shapes(shapes, max_memory=max_memory, device_map=device_map)
        return plan


def file_tensors(path: PathLike) -> dict[str, jax.ShapeDtypeStruct]:
    """Every tensor of a checkpoint as ``{name: ShapeDtypeStruct}``, in the model's
    order as far as the file tells it, no tensor byte read: a safetensors file's or an
    index's (its ``weight_map``'s order) from the headers; a PyTorch checkpoint's by
    dotted path (``model.0.weight``), in the order it was saved, unpickled over a
    memory map (a legacy or file-object checkpoint is read whole: torch cannot map
    it). A safetensors file's own order (by
    data offset: its writer's layout, by dtype and name) and an index listed
    alphabetically (as Hugging Face writes them) say nothing of the model's, so their
    names come in natural order, as a model holds its layers: ``layers.2`` before
    ``layers.10``.

    Raises:
        CheckpointError: not a checkpoint, or a PyTorch one without torch installed.
    """
    found: dict[str, jax.ShapeDtypeStruct] = {}
    saved_in_order = False  # a PyTorch checkpoint lists its tensors as the model did
    with shard_files(path) as shards:  # an index's shards, opened through its folder
        for file, names in shards.files.items():
            with Source(file, shards.opened.get(file)) as source:
                if source.kind != "safetensors":
                    found |= _pickled_shapes(source)
                    saved_in_order = True
                    continue
                with Reader(file, opened=source.handle) as reader:
                    if names is not None and not set(names) <= reader.tensors.keys():
                        missing = [name for name in names if name not in reader.tensors]
                        raise not_in_shard(os.fspath(path), file, missing, list(reader.tensors))
                    for name in reader.tensors if names is None else names:
                        info = reader.info(name)
                        found[name] = jax.ShapeDtypeStruct(info.shape, info.dtype)
    if shards.names is not None:  # an index: its weight_map's order, unless alphabetical
        found = {name: found[name] for name in shards.names}
        saved_in_order = list(found) != sorted(found)
    if not saved_in_order:  # a safetensors file's order is its writer's layout
        found = {name: found[name] for name in sorted(found, key=_natural)}
    return found


def _natural(name: str) -> tuple[tuple[int, int, str], ...]:
    """A dotted name's key in natural order: numbers as numbers, so ``layers.2`` comes
    before ``layers.10``, as the model holds its layers."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in name.split("."))


def load_pickled_by_plan(
    source: Source,
    map_location: Any,
    max_memory: Mapping[Any, Any] | None,
    budget: TensorBudget,
    pickle_load_args: dict[str, Any],
) -> Any:
    """A PyTorch checkpoint with each tensor where a plan says (``map_location="auto"``
    within ``max_memory``, or a ``DeviceMap``), the rest as ``torch.load`` returns it.

    Unpickled once, over a memory map where torch can map the file; the plan is made
    from the tensors' dotted names, shapes and dtypes, in the order they were saved,
    before any is converted, so a budget that cannot hold them is refused before a
    tensor page is read. Each tensor then goes to its place, one after the other.

    Raises:
        CheckpointError, OutOfMemoryError, InvalidDeviceError, ConfigError: as
            ``tj.load`` and ``tj.DeviceMap.plan`` document.
    """
    torch = import_torch(source.name)
    checkpoint = _unpickled(source, torch, budget, pickle_load_args)

    def arrays(graph: Graph) -> dict[int, Any]:
        named = _named_tensors(source.name, checkpoint, graph, torch)
        shapes = {name: shape for name, (_, shape) in named.items()}
        plan = plan_for(
            lambda: shapes,
            map_location,
            device_map=None,
            max_memory=max_memory,
            kind=DeviceMap,
            argument="map_location",
        )
        hosts = HostTensors(torch, source.size())

        def converted(tensor: Any, sharding: SingleDeviceSharding) -> np.ndarray[Any, Any]:
            """Dense, of a JAX dtype: a view of the file's pages for a place that copies
            it (an accelerator, pinned memory), else a copy of its own, which a CPU
            device keeps as the array (never the file's pages: it may change after the
            load, and XLA's CPU client aborts at exit when an array over a memory-mapped
            tensor outlives it)."""
            try:
                host = np.asarray(to_jax(hosts(tensor)))
            except Warning:
                raise  # a warning the caller's filters made an error stays what it is
            except Exception as err:
                raise tensor_error(source.name, graph, tensor, err) from err
            if not (sharding.memory_kind == "device" and _is_cpu(sharding)):
                return host
            copy = aligned_empty(host.nbytes).view(host.dtype).reshape(host.shape)
            host_staging.parallel_copy(copy, host)  # aligned: the CPU device keeps it
            return copy

        shardings = [plan.destination(name).sharding for name in named]  # all, first
        placed: list[jax.Array] = []
        try:  # one tensor at a time: the host holds the one in flight, not a copy of all
            for (tensor, _), sharding in zip(named.values(), shardings, strict=True):
                placed += host_staging.device_put([converted(tensor, sharding)], sharding)
            jax.block_until_ready(placed)
        except BaseException:
            settle(placed)  # nothing dropped while in flight
            raise
        return {
            id(tensor): array for (tensor, _), array in zip(named.values(), placed, strict=True)
        }

    return rebuilt(source.name, checkpoint, torch, budget, arrays)


def _is_cpu(sharding: SingleDeviceSharding) -> bool:
    device: jax.Device = next(iter(sharding.device_set))
    return str(device.platform) == "cpu"


def _unpickled(
    source: Source, torch: Any, budget: TensorBudget, pickle_load_args: Mapping[str, Any]
) -> Any:
    """``torch.load(weights_only=True)`` of ``source``, its storages over a memory map
    where torch can map the file (a zip checkpoint at a path): no tensor page is read,
    and none once its zip's entries are more than ``budget`` allows (or expand past the
    copy bound)."""
    check_expansion(source, budget)
    mmap = source.kind == "zip" and source.path is not None
    opened: Any = source.by_name() if source.path is not None else source.file
    try:
        return torch.load(
            opened, map_location="cpu", mmap=mmap, weights_only=True, **pickle_load_args
        )
    except (OSError, Warning):
        raise  # the file system's error, or a warning the caller's filters made one
    except Exception as err:
        raise unreadable(source.name, err) from err


def _pickled_shapes(source: Source) -> dict[str, jax.ShapeDtypeStruct]:
    torch = import_torch(source.name)
    budget = TensorBudget(None, source.size(), verb="tj.DeviceMap.plan")
    checkpoint = _unpickled(source, torch, budget, {})
    try:
        graph = Graph(checkpoint, torch, budget.left)
    except TooManyTensorsError:
        raise budget.refusal(source.name, f"more than {budget.left:,}") from None
    named = _named_tensors(source.name, checkpoint, graph, torch)
    return {name: shape for name, (_, shape) in named.items()}


def _named_tensors(
    name: str, checkpoint: Any, graph: Graph, torch: Any
) -> dict[str, tuple[Any, jax.ShapeDtypeStruct]]:
    """Each tensor of an unpickled checkpoint by its dotted path, in the order it was
    saved (dicts' and lists' own order, depth first), with its shape and dtype as a
    load converts it (a quantized tensor dequantized to float32; the plan counts 64-bit
    ones narrowed, and the load warns of that, not the plan).

    Raises:
        CheckpointError: a tensor JAX cannot hold (nested, meta, a dtype JAX lacks), or
            two tensors with one dotted name (the message names them).
    """
    found: dict[str, tuple[Any, jax.ShapeDtypeStruct]] = {}
    refusals = HostTensors(torch, 0)  # refuses a nested or meta tensor before any copy
    for dotted, tensor in _in_saved_order(checkpoint, graph, torch.Tensor):
        try:
            if tensor.is_nested or tensor.is_meta:  # no shape, or no data: as a load says
                refusals(tensor)
            dtype = np.dtype(np.float32) if tensor.is_quantized else numpy_dtype(tensor.dtype)
        except CheckpointError as err:
            raise tensor_error(name, graph, tensor, err) from None
        if dotted in found:
            raise CheckpointError(
                f"{name}: two tensors are both named {shown(dotted)} by their place (one at "
                f"{graph.path(tensor)}), so a plan cannot tell them apart. Fix: load it "
                "onto one device (map_location='cpu') and place it with tj.to_device"
            )
        found[dotted] = (tensor, jax.ShapeDtypeStruct(tuple(tensor.shape), dtype))
    return found


def _in_saved_order(root: Any, graph: Graph, tensor_type: type) -> list[tuple[str, Any]]:
    """``(dotted name, tensor)`` for every tensor of ``graph``, in the order ``root``
    holds them: depth first through dicts, lists and tuples, each in its own order (a
    state dict's order), a tensor held twice named by its first place; tensors held
    only in objects' attributes after those, named as the graph found them."""
    found: dict[int, tuple[str, Any]] = {}
    seen: set[int] = set()
    stack: list[tuple[Any, tuple[str, ...]]] = [(root, ())]
    while stack:
        obj, path = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, tensor_type):
            found[id(obj)] = (".".join(path), obj)
            continue
        items: list[tuple[Any, Any]] = []
        if isinstance(obj, Mapping):
            items = list(obj.items())
        elif isinstance(obj, (list, tuple)):
            items = list(enumerate(obj))
        for key, child in reversed(items):
            stack.append((child, (*path, key if isinstance(key, str) else shown(key, 80))))
    rest = [(graph.name(tensor), tensor) for tensor in graph.tensors if id(tensor) not in found]
    return list(found.values()) + rest


def reads_straight(source: Any) -> bool:
    """Whether a load can place each tensor of ``source`` as it reads it: a path to a
    safetensors file, or to an index of them. A PyTorch checkpoint is unpickled whole
    first, and a file object has no header to plan from."""
    if not isinstance(source, (str, os.PathLike)):
        return False
    with shard_files(source) as shards:
        for file in shards.files:
            with Source(file, shards.opened.get(file)) as opened:
                if opened.kind != "safetensors":
                    return False
    return True


def planned_target(
    tensors: PathLike | Mapping[str, Any],
    device: Any,
    *,
    device_map: Mapping[str, Any] | str | DeviceMap | None,
    max_memory: Mapping[Any, Any] | None,
    argument: str = "device",
) -> Any:
    """What a load of ``tensors`` onto ``device`` with ``device_map=`` and ``max_memory=``
    goes by: a plan when one is asked for (``device="auto"``, ``device_map=``), made from
    the headers alone, else ``device`` itself (``device_plan.plan_for``'s rules).

    Raises:
        InvalidDeviceError: ``device_map`` together with a device, or ``max_memory``
            without a plan to apply it to.
    """

    def describe() -> Mapping[str, Any]:
        return file_tensors(tensors) if isinstance(tensors, (str, os.PathLike)) else tensors

    return plan_for(
        describe,
        device,
        device_map=device_map,
        max_memory=max_memory,
        kind=DeviceMap,
        argument=argument,
    )


def model_plan(
    arrays: Mapping[str, Any],
    device: Any,
    *,
    device_map: Mapping[str, Any] | str | DeviceMap | None,
    max_memory: Mapping[Any, Any] | None,
) -> DeviceMap | None:
    """The plan for a model's ``arrays`` (in its order) that ``tj.load_state`` loads by:
    ``None`` when none is asked for; a single ``device`` is a plan too (checked to exist
    and, where it reports its memory, to hold the model)."""
    if device is None and device_map is None and max_memory is None:
        return None
    target = planned_target(
        arrays, "cpu" if device is None else device, device_map=device_map, max_memory=max_memory
    )
    if isinstance(target, DeviceMap):
        return target
    return DeviceMap.plan(arrays, device_map={"": target})


def load_for_model(
    path: PathLike,
    plan: DeviceMap,
    names: Mapping[str, str],
    wanted: Mapping[str, tuple[tuple[int, ...], Any]],
) -> dict[str, jax.Array]:
    """The tensors of ``path`` for a model whose arrays ``plan`` places.

    ``names`` maps a file's tensor names to the model's (a torch twin's names to the
    model's own); ``wanted`` is each model array's shape and dtype. A tensor that
    arrives as the model holds it goes straight to its place; one the caller must
    first transpose, reshape or cast (and one the model has no array for) comes on the
    CPU device, for the caller to adapt and move.
    """
    host = SingleDeviceSharding(resolve("cpu"))

    def rule(name: str, shape: tuple[int, ...], dtype: Any) -> SingleDeviceSharding:
        model_name = names.get(name)
        if model_name is None:
            return host
        want_shape, want_dtype = wanted[model_name]
        if tuple(want_shape) != tuple(shape) or np.dtype(want_dtype) != dtypes.canonical(dtype):
            return host
        return plan(model_name, shape, dtype)

    return load_file_by_rule(path, rule)
