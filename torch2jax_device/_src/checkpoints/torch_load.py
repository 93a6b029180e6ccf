"""``torch.load`` for JAX users: checkpoints as JAX arrays, ``map_location`` included.

The public entry point. ``.safetensors`` files are read natively (``one_device``);
PyTorch ``.pt`` / ``.bin`` checkpoints through ``torch.load(weights_only=True)``
(``pickled``; torch is imported only for them). A target that is not one device, or an
index of shard files, goes to ``sharded``; a plan (``map_location="auto"``, a
``DeviceMap``) to ``device_map``. ``map_location`` is classified once, by
``map_location.MapLocationRule``, for every format.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..device_plan import asks_for_plan
from ..errors import CheckpointError, InvalidDeviceError, UnsupportedOperationError
from ..truth import truth
from . import sharded
from .device_map import load_pickled_by_plan, planned_target, reads_straight
from .format import TensorBudget
from .index import is_index
from .map_location import MapLocation, MapLocationRule
from .messages import shown
from .one_device import load_file
from .pickled import load_pickled
from .source import FileLike, Source

__all__ = ["load"]


def load(
    f: FileLike,
    map_location: MapLocation = None,
    pickle_module: Any = None,
    *,
    weights_only: bool | None = None,
    mmap: bool | None = None,
    progress: bool | None = None,
    max_tensors: int | None = None,
    max_memory: Mapping[Any, Any] | None = None,
    **pickle_load_args: Any,
) -> Any:
    """Equivalent to `torch.load`.

    Loads a checkpoint as ``torch.load(f, map_location, weights_only=True)`` does, with
    every tensor a committed JAX array. ``.safetensors`` files are read natively (see
    [`tj.load_file`][torch2jax_device.load_file]); PyTorch ``.pt`` / ``.bin`` files
    through ``torch.load(weights_only=True)``, which needs torch and never runs code
    from the file. Their tensors become JAX arrays without copies where the memory
    allows (``tj.to_jax``); everything else (ints, strings, nested dicts and lists such
    as nanoGPT's ``{'model', 'optimizer', 'iter_num', 'model_args'}``) is kept as
    ``torch.load`` returns it: containers keep their type and attributes (a state
    dict's ``_metadata`` with its BatchNorm versions), shared objects stay shared (a
    tensor saved twice is one array), and self-references and nesting of any depth
    load as they were saved.

    Tensors go where ``torch.load`` would put them: without ``map_location``, where they
    were saved (``cuda:0`` stays ``cuda:0``, and fails if there is no such GPU, as in
    torch; a safetensors file counts as saved on the CPU). ``map_location`` takes the
    forms ``torch.load`` takes, and refuses the ones it refuses:

    * a device: a string (``"cpu"``, ``"cuda:1"``), a ``torch.device``, a ``tj.device``
      or a ``jax.Device``: everything goes there;
    * a dict from saved location tags to location strings (``{"cuda:0": "cpu"}``); tags
      it does not list stay where they were saved;
    * a callable ``(storage, location) -> storage | None``, called with each CPU storage
      and its saved location: the tensor goes where the returned storage is, or to the
      saved location if it returns ``None`` (PyTorch checkpoints only);
    * a ``jax.sharding.Sharding``, a ``jax.sharding.Mesh`` (replicated over it) or a
      [`tj.ShardingRule`][torch2jax_device.ShardingRule]: every tensor a global array,
      each process reading only the parts its devices hold; the checkpoint comes back
      as onto one device (containers, sharing and all), each tensor named for the
      rule by its dotted path (``model.transformer.wte.weight``);
    * ``"auto"`` (not torch's: Accelerate's ``device_map="auto"``), with
      ``max_memory=``: a plan (a [`tj.DeviceMap`][torch2jax_device.DeviceMap]) fills
      each accelerator in the order the tensors were saved, then its ``pinned_host``
      memory, then host memory, each tensor named by its dotted path; or a
      ``tj.DeviceMap`` made earlier (``tj.DeviceMap.plan(path, device_map={...})``
      for an explicit map). The plan is made from the names, shapes and dtypes alone
      (a zip checkpoint is unpickled over a memory map), so a budget that cannot hold
      the tensors is refused before a tensor byte is read; then each goes straight to
      its place, never left over the mapped file (``mmap=`` changes nothing here).

    Note:
        Sparse tensors (COO, CSR, CSC, BSR, BSC) load **dense**, and quantized tensors
        **dequantized** to float32 (``tensor.dequantize()``): JAX has neither. Tensors
        JAX cannot hold at all (nested/jagged, ``meta`` tensors without data,
        ``complex32``, the ``quint``/``bits`` kinds) raise ``tj.CheckpointError`` naming
        their place in the checkpoint. Copies a load makes beyond the data in the file
        (dense sparse tensors, views that repeat their data) are bounded by 1 GiB plus
        4x that data: more is refused before it is allocated, as a file crafted to
        exhaust memory would ask. ``weights_only=False`` and ``pickle_module`` are
        refused: see Raises. ``map_location`` is checked before the file is read (torch
        checks it at the first tensor), and accepts ``tj.device`` spellings torch does
        not (``"gpu"``, ``"cpu:0"``).

    Args:
        f: A path (``str`` / ``os.PathLike``) or a binary file object open for reading
            and seekable (``open(path, "rb")``, ``io.BytesIO``), read from its current
            position, as ``torch.load`` reads it. Safetensors files need a path.
        map_location: Where tensors go, as above.
        pickle_module: Must be ``None``: the unpickler is always torch's weights-only one.
        weights_only: ``True`` or ``None`` (the same, as in torch since 2.6).
        mmap: Memory-map the file instead of reading it, as ``torch.load(mmap=True)``
            (needs a path to a zip checkpoint, torch's format since 1.6). On the CPU
            the arrays then use the mapped file in place: pages are read when first
            touched, and RAM holds only what was touched. Do not change the file while
            they live. No effect on safetensors files, which are read once into
            aligned memory.
        progress: Draw a progress bar on stderr (see [`tj.load_file`][torch2jax_device.load_file]);
            never with ``mmap=True``, which reads nothing up front, nor for a PyTorch
            checkpoint placed by a plan (it is mapped too).
        max_tensors: The most tensors the load may make arrays of, counting every view
            (each becomes an array) and every file of an index together. By default one
            per 4 KiB of the files and at least 16,384, as for ``tj.load_file``: each
            array costs kilobytes of host memory, and a small file of many views could
            otherwise exhaust RAM. Counted after ``torch.load`` unpickles the file and
            before any tensor is converted.
        max_memory: The budgets of ``map_location="auto"``: ``{"cuda:0": "20GiB",
            "cpu": "100GiB"}`` as in Accelerate (see ``tj.DeviceMap.plan``).
        **pickle_load_args: ``encoding=`` for checkpoints pickled by Python 2, passed to
            torch's unpickler (torch warns that it is ignored; it is not).

    Returns:
        The checkpoint, with every tensor replaced by a committed JAX array.

    Raises:
        CheckpointError: the file is corrupted, truncated or not a checkpoint; holds
            objects ``weights_only=True`` refuses (nothing from it is executed; the
            message says how to allowlist classes you trust) or tensors JAX cannot
            hold or more tensors than ``max_tensors``; ``f`` is not a readable,
            seekable binary file; or torch is needed and not installed. The message
            names the file and, for a tensor, its path in the checkpoint
            (``['model']['0.weight']``).
        DeviceUnavailableError: a tensor's device does not exist here, e.g. a checkpoint
            saved on ``cuda:0`` loaded on a machine without one and no ``map_location``
            (torch raises ``RuntimeError``; this is one).
        DeviceTypeError: ``map_location`` is none of the forms above (torch raises
            ``TypeError``; this is one): an ``int``, a dict whose values are not
            strings, a callable returning something other than a storage or ``None``,
            or a callable for a safetensors file (which has no storages to pass it).
        InvalidDeviceError: ``map_location`` names no device (``"bogus"``);
            ``max_memory`` without ``map_location="auto"``; ``"auto"`` for an index of
            PyTorch shard files.
        ConfigError: a ``max_memory`` size that does not parse (``"20Gb"``).
        OutOfMemoryError: the plan cannot fit the tensors even with host memory (the
            message has the numbers), before a tensor byte is read.
        UnsupportedOperationError: ``weights_only=False``, a ``pickle_module``,
            ``mmap=True`` on a legacy (pre-zip) checkpoint, or unpickler arguments
            other than ``encoding`` (torch raises ``RuntimeError`` or ``TypeError``).
        OSError: the path cannot be opened (``FileNotFoundError``, ...), as in torch.

    Examples:
        >>> import io, os, tempfile
        >>> import torch
        >>> import torch2jax_device as tj
        >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
        >>> torch.save({"model": {"w": torch.ones(2)}, "iter_num": 7}, path)
        >>> checkpoint = tj.load(path, map_location="cpu", weights_only=True)
        >>> checkpoint["iter_num"], checkpoint["model"]["w"].device
        (7, CpuDevice(id=0))
        >>> buffer = io.BytesIO()
        >>> torch.save(torch.nn.LayerNorm(2).state_dict(), buffer)
        >>> _ = buffer.seek(0)
        >>> state = tj.load(buffer)
        >>> dict(state._metadata), state["weight"].tolist()
        ({'': {'version': 1}}, [1.0, 1.0])

        A plan within budgets (here the host's only: on a GPU machine, name it too,
        ``{"cuda:0": "20GiB", "cpu": "100GiB"}``):

        >>> placed = tj.load(path, map_location="auto", max_memory={"cpu": "1GiB"})
        >>> placed["model"]["w"].sharding.memory_kind
        'device'
        >>> plan = tj.DeviceMap.plan(path, max_memory={"cpu": "1GiB"})  # reads no tensor
        >>> list(plan.placements()), plan.bytes_per_device()
        (['model.w'], {'cpu': 8})
    """
    weights_only, mmap, progress = (
        None if value is None else truth("tj.load()", name, value)
        for name, value in (("weights_only", weights_only), ("mmap", mmap), ("progress", progress))
    )
    with Source(f) as source:
        _check_arguments(source.name, weights_only, pickle_module, pickle_load_args)
        if max_memory is not None or asks_for_plan(map_location):
            return _load_by_plan(
                source, map_location, max_memory, mmap, progress, max_tensors, pickle_load_args
            )
        return _load(source, map_location, mmap, progress, max_tensors, pickle_load_args)


def _load_by_plan(
    source: Source,
    map_location: Any,
    max_memory: Mapping[Any, Any] | None,
    mmap: bool | None,
    progress: bool | None,
    max_tensors: int | None,
    pickle_load_args: dict[str, Any],
) -> Any:
    """``tj.load`` by a plan: safetensors files (and indexes of them) through the
    per-tensor loader, each tensor read straight onto its place; PyTorch checkpoints
    through ``load_pickled_by_plan``.

    Raises:
        InvalidDeviceError: ``max_memory`` without ``map_location="auto"``, or a plan
            for an index of PyTorch shards.
    """
    if not asks_for_plan(map_location):  # max_memory without a plan: the plan's error
        planned_target(
            {}, map_location, device_map=None, max_memory=max_memory, argument="map_location"
        )
    path = source.path
    if path is not None and source.kind in ("safetensors", "index"):
        if not reads_straight(path):
            raise InvalidDeviceError(
                f"map_location={shown(map_location)} for {source.name}, an index of PyTorch "
                "shard files: a plan places the tensors of one file, or of an index of "
                "safetensors files. Fix: load each shard with tj.load(shard, "
                "map_location='auto'), or a model with tj.load_state(model, path, "
                "device='auto')"
            )
        plan = planned_target(
            path, map_location, device_map=None, max_memory=max_memory, argument="map_location"
        )
        return sharded.load_file(path, plan, max_tensors=max_tensors, progress=progress)
    if source.kind == "safetensors":
        raise CheckpointError(
            f"{source.name} holds a safetensors file, which tj.load reads from a path "
            "only: pass the path (tj.load(path, map_location='auto'))"
        )
    if mmap:
        _check_mappable(source)
    budget = TensorBudget(max_tensors, source.size(), verb="tj.load")
    return load_pickled_by_plan(source, map_location, max_memory, budget, pickle_load_args)


def _load(
    source: Source,
    map_location: MapLocation,
    mmap: bool | None,
    progress: bool | None,
    max_tensors: int | None,
    pickle_load_args: dict[str, Any],
) -> Any:
    if mmap and source.kind != "safetensors" and not (source.path and is_index(source.path)):
        _check_mappable(source)
    if not sharded.handles_checkpoint(None, map_location):
        MapLocationRule(map_location)  # checked before any file is read (an index's shards too)
    if sharded.handles_checkpoint(source.path, map_location):
        if source.path is None:
            return sharded.load_object(
                source, map_location, max_tensors=max_tensors, pickle_load_args=pickle_load_args
            )
        return sharded.load(
            source.path,
            map_location,
            progress=progress,
            max_tensors=max_tensors,
            pickle_load_args=pickle_load_args,
            opened=None if source.kind == "index" else source,
        )
    budget = TensorBudget(max_tensors, source.size(), verb="tj.load")
    rule = MapLocationRule(map_location)
    if source.kind == "safetensors":
        if source.path is None:
            raise CheckpointError(
                f"{source.name} holds a safetensors file, which tj.load reads from a path "
                "only: pass the path (tj.load(path) or tj.load_file(path))"
            )
        device = rule.safetensors_device(source.name)
        return load_file(
            source.path, device, progress=progress, max_tensors=budget, opened=source.handle
        )
    return load_pickled(source, rule, bool(mmap), progress, pickle_load_args, budget)


def _check_arguments(
    name: str, weights_only: Any, pickle_module: Any, pickle_load_args: dict[str, Any]
) -> None:
    if weights_only is not None and not weights_only:
        raise UnsupportedOperationError(
            f"tj.load({name}, weights_only=False): tj.load never unpickles arbitrary "
            "objects, which can run code from the file. If the checkpoint holds classes "
            "you trust, allowlist them and keep weights_only=True: "
            "torch.serialization.add_safe_globals([MyClass]), or "
            "`with torch.serialization.safe_globals([MyClass]): tj.load(...)`. For a file "
            "you trust entirely: tj.to_device(torch.load(path, weights_only=False), device)"
        )
    if pickle_module is not None:
        raise UnsupportedOperationError(
            f"tj.load({name}, pickle_module=...): tj.load always uses torch's weights-only "
            "unpickler, which takes no pickle_module (torch raises RuntimeError: 'Can not "
            "safely load weights when explicit pickle_module is specified'). Drop it"
        )
    unknown = sorted(set(pickle_load_args) - {"encoding"})
    if unknown:
        raise UnsupportedOperationError(
            f"tj.load({name}) got {', '.join(f'{key}=' for key in unknown)}: torch's "
            "weights-only unpickler takes only encoding= (torch raises TypeError for the "
            "others). Drop them"
        )


def _check_mappable(source: Source) -> None:
    """Refuse ``mmap=True`` for a checkpoint torch cannot map, as torch refuses it."""
    if source.path is None:
        raise CheckpointError(
            f"mmap=True maps a file by its path, and {source.name} is a file object (torch "
            "raises ValueError here too). Fix: tj.load(path, mmap=True)"
        )
    if source.kind == "legacy":
        raise UnsupportedOperationError(
            f"{source.name} is in torch's legacy (pre-zip) format, which cannot be "
            "memory-mapped (torch raises RuntimeError here too). Fix: load it without "
            "mmap=True, or re-save it once with torch.save(torch.load(path), path)"
        )
