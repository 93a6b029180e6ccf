"""Placement across processes: ``to_device`` onto a mesh that spans processes, and back.

``jax.device_put`` cannot take an array committed to one of this process's devices
onto a sharding whose devices belong to several processes ("does not support
cross-host device transfers"), nor a global array onto one device of this process
("must be a fully addressable array"). These are the two moves a DDP script makes:
``DDP(model.to(device))`` replicates the placed model over every process's devices,
and rank 0 saves a checkpoint from it. Here:

* **onto a global sharding**: each process passes the whole value (the same on
  every process, as DDP's replicas are) and supplies the pieces its own devices hold,
  cut from it where it lies, so no bytes cross processes and nothing goes through
  the host (``jax.make_array_from_single_device_arrays``);
* **from a global array to this process**: when this process's shards hold the whole
  value (a replicated parameter) it is read from them locally; otherwise it is
  gathered from every process with a collective, which every process must join (as
  FSDP's full state dict needs every rank), after a check-in at JAX's coordination
  service so that a rank that does not come raises instead of hanging;
* between two global shardings over the same processes, ``jax.device_put`` reshards
  by itself.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from .. import host_staging
from ..dtypes import is_prng_key
from ..errors import ConversionError
from . import agreement

__all__ = [
    "Index",
    "assemble",
    "crosses_processes",
    "device_put",
    "is_whole",
    "part_key",
    "to_numpy",
]

Index = tuple[slice, ...] | None  # None: the whole array (JAX's convention)


def crosses_processes(arrays: Sequence[Any], target: jax.sharding.Sharding) -> bool:
    """Whether moving ``arrays`` to ``target`` involves devices of other processes."""
    if not jax.distributed.is_initialized():
        return False
    return not target.is_fully_addressable or any(
        isinstance(array, jax.Array) and not array.is_fully_addressable for array in arrays
    )


def device_put(
    arrays: Sequence[Any], target: jax.sharding.Sharding, *, copy: bool, path: Callable[[int], str]
) -> list[jax.Array]:
    """``jax.device_put(arrays, target)`` where ``target`` or some arrays span processes.

    Args:
        arrays: JAX arrays (local or global), NumPy arrays.
        target: Where they go.
        copy: Never alias the sources' buffers.
        path: The leaf path of ``arrays[i]``, for error messages.

    Raises:
        ConversionError: an array's shape does not split evenly over ``target``; the
            message names the leaf.
        DistributedError: gathering a sharded array, some process did not join in time.
    """
    global_sources = [
        i for i, array in enumerate(arrays) if isinstance(array, jax.Array)
        if not array.is_fully_addressable
    ]  # fmt: skip
    placed: list[Any] = list(arrays)
    if target.is_fully_addressable:
        values = _gather([arrays[i] for i in global_sources])
        for i, value in zip(global_sources, values, strict=True):
            placed[i] = value
        return list(jax.device_put(placed, target, may_alias=False if copy else None))
    _copies_agree(
        [i for i in range(len(arrays)) if i not in global_sources],
        arrays,
        path,
        replicated=target.is_fully_replicated,
    )
    for i, array in enumerate(arrays):
        if i in global_sources:
            placed[i] = jax.device_put(array, target, may_alias=False if copy else None)
        else:
            placed[i] = _scatter(array, target, copy, path(i))
    return placed


def _copies_agree(
    local: list[int], arrays: Sequence[Any], path: Callable[[int], str], *, replicated: bool
) -> None:
    """Every process's copy of each array placed over the job is the same (a sample of its
    values compared through JAX's coordination service), or every rank raises.

    Each process passes the whole value and keeps its devices' parts. torch's
    ``DDP(model)`` broadcasts rank 0's parameters; replicas built from each rank's own
    copy (a model seeded per rank) would differ while XLA assumes they are one value, and
    the ranks' models would never converge. Split over the job, each process's part
    would be cut from a different value: a rank passing its own rows (a batch it loaded)
    would keep only its share of them, and the global array would hold some of each
    rank's rows, the others dropped.
    """
    process_group = importlib.import_module(".process_group", __package__)
    if not local or not process_group.joined():
        return
    brought = tuple(
        agreement.leaf(path(i), np.shape(arrays[i]), arrays[i].dtype, agreement.sampled(arrays[i]))
        for i in local
    )
    process_group.synchronize(
        "to_device",
        agreement.Step("to_device()", brought),
        fix=_REPLICATED_FIX if replicated else _SPLIT_FIX,
    )


_REPLICATED_FIX = (
    "A replicated array (DDP(model)'s parameters, NamedSharding(mesh, P())) is one "
    "value on every process, and torch's DDP broadcasts rank 0's; these copies "
    "differ. Fix: make every rank's copy the same before the move: initialize the "
    "model from one seed on every rank (nnx.Rngs(seed), not seed + rank), load one "
    "checkpoint, or take rank 0's values with "
    "jax.experimental.multihost_utils.broadcast_one_to_all(tree). A PRNG key (an "
    "nnx.Dropout's rngs) too: one key over the global batch already draws another "
    "mask for every row, what per-rank seeds give torch's dropout."
)
_SPLIT_FIX = (
    "An array split over processes is one value: every process passes the whole of it "
    "and keeps its devices' part, so copies that differ would make a global array of "
    "some of each rank's rows, the others dropped. Fix: to make one global batch of "
    "each rank's own rows (its DistributedSampler shard), use "
    "tj.distributed.make_global_batch(rows, mesh) or tj.DeviceLoader(loader, "
    "sharding); to split one value, pass the same value on every rank (one seed, one "
    "checkpoint)."
)


def _scatter(value: Any, target: jax.sharding.Sharding, copy: bool, where: str) -> jax.Array:
    """A global array of ``target`` from this process's copy of the whole ``value``."""
    shape = tuple(np.shape(value))
    return assemble(
        shape,
        target,
        lambda index: value if is_whole(index, shape) else value[index],
        copy=copy,
        where=where,
    )


def assemble(
    shape: tuple[int, ...],
    target: jax.sharding.Sharding,
    piece: Callable[[Index], Any],
    *,
    copy: bool = False,
    where: str,
) -> jax.Array:
    """The array of ``shape`` on ``target`` whose shards here are ``piece(index)``.

    ``piece`` is called once per distinct part of the array this process's devices
    hold (a replicated part is fetched once for all of them), with a tuple of slices
    (or ``None`` for the whole array). It returns the part: host data, a JAX array, or
    a ``host_staging.Streamed`` that accelerators take piece by piece through pinned
    buffers. Parts are placed one after the other (``host_staging.put_on_each``, over
    the fast routes), so the host holds one part at a time. No device gets more than
    its part.

    Raises:
        ConversionError: ``shape`` does not split evenly over ``target``; the message
            names ``where``.
    """
    try:
        indices = target.addressable_devices_indices_map(shape)
    except ValueError as err:
        raise _uneven(where, shape, target, err) from err
    holders: dict[tuple[tuple[int, int], ...], list[jax.Device]] = {}
    for device, index in indices.items():
        holders.setdefault(part_key(index, shape), []).append(device)
    placed: dict[jax.Device, jax.Array] = {}
    for devices in holders.values():
        copies = host_staging.put_on_each(
            piece(indices[devices[0]]),
            [SingleDeviceSharding(device, memory_kind=target.memory_kind) for device in devices],
            may_alias=False if copy else None,
        )
        placed.update(zip(devices, copies, strict=True))
    local = [placed[device] for device in indices]
    try:
        return jax.make_array_from_single_device_arrays(shape, target, local)
    except ValueError as err:
        raise _uneven(where, shape, target, err) from err


def _gather(arrays: list[jax.Array]) -> list[Any]:
    """Each global array as a value this process holds whole (a local array or NumPy).

    A PRNG key array travels as its key data (its shards' indices cover the data's
    trailing axes too) and is wrapped again.
    """
    keys = [i for i, array in enumerate(arrays) if is_prng_key(array.dtype)]
    if keys:
        data = [jax.random.key_data(a) if i in keys else a for i, a in enumerate(arrays)]
        gathered = _gather(data)
        for i in keys:
            impl = jax.random.key_impl(arrays[i])
            gathered[i] = jax.random.wrap_key_data(jax.numpy.asarray(gathered[i]), impl=impl)
        return gathered
    values: list[Any] = [_local_copy(array) for array in arrays]
    missing = [i for i, value in enumerate(values) if value is None]
    if not missing:
        return values
    process_group = importlib.import_module(".process_group", __package__)
    if process_group.joined():  # every rank gathers the same arrays, or all raise
        brought = tuple(agreement.leaf(f"[{i}]", arrays[i].shape, arrays[i].dtype) for i in missing)
        process_group.synchronize("to_device", agreement.Step("to_device()", brought))
    for i in missing:
        array = widened(arrays[i])
        if isinstance(array.sharding, NamedSharding):
            replicated = NamedSharding(
                array.sharding.mesh, PartitionSpec(), memory_kind=array.sharding.memory_kind
            )
            gathered = jax.device_put(array, replicated).addressable_data(0)
        else:
            multihost_utils = importlib.import_module("jax.experimental.multihost_utils")
            gathered = multihost_utils.process_allgather(array, tiled=True)
        values[i] = gathered.astype(arrays[i].dtype) if array is not arrays[i] else gathered
    return values


#: Kinds whose cross-process collectives XLA's CPU backend (gloo) gets wrong: an all-gather
#: of 2-bit integers returns other numbers (each rank's rows reread as packed bits), an
#: all-reduce of them is UNIMPLEMENTED. They travel as their byte-wide kind.
_BYTE_WIDE = {"int2": np.int8, "uint2": np.uint8}


def widened(array: jax.Array) -> jax.Array:
    """``array``, or where its kind cannot cross processes (``_BYTE_WIDE``), a copy of it
    in the byte-wide kind that holds the same numbers (on the same devices)."""
    wide = _BYTE_WIDE.get(str(array.dtype))
    if wide is None:
        return array
    cast: Callable[[jax.Array], jax.Array] = jax.jit(
        lambda value: value.astype(wide), out_shardings=array.sharding
    )
    return cast(array)


def _local_copy(array: jax.Array) -> Any:
    """The whole value from this process's shards, or ``None`` if they hold only part.

    A shard that holds it whole is returned as it is (a device array), others are
    joined on the host.
    """
    shards = _distinct_shards(array)
    if shards is None:
        return None
    for shard in shards:
        if is_whole(shard.index, array.shape):
            return shard.data
    return _joined(array, shards)


def to_numpy(array: jax.Array) -> np.ndarray[Any, Any] | None:
    """The whole value of ``array`` as NumPy, or ``None`` if this process holds only part.

    Each distinct shard is fetched once, from an accelerator through its pinned host
    memory (``host_staging.to_numpy``), and the host holds the value plus one shard at
    a time: what a checkpoint writer needs of a sharded array.
    """
    shards = _distinct_shards(array)
    if shards is None:
        return None
    for shard in shards:
        if is_whole(shard.index, array.shape):
            return host_staging.to_numpy(shard.data)
    return _joined(array, shards)


def _distinct_shards(array: jax.Array) -> list[Any] | None:
    """One of this process's shards per distinct part, or ``None`` if they miss some part.

    Of shards holding the same part, one already in host memory is chosen.
    """
    shape = array.shape
    everywhere = array.sharding.devices_indices_map(shape)
    in_host_memory_last = sorted(
        array.addressable_shards,
        key=lambda shard: not host_staging.routes_through_pinned(shard.device),
    )
    shards = {part_key(shard.index, shape): shard for shard in in_host_memory_last}
    if {part_key(index, shape) for index in everywhere.values()} != set(shards):
        return None
    return list(shards.values())


def _joined(array: jax.Array, shards: list[Any]) -> np.ndarray[Any, Any]:
    """The value of ``array`` on the host, from shards that cover it."""
    whole = np.empty(array.shape, array.dtype)
    for shard in shards:
        whole[shard.index] = host_staging.to_numpy(shard.data)
    return whole


def part_key(index: Index, shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """A hashable form of a shard's index (slices are not hashable before Python 3.12)."""
    if index is None:
        return tuple((0, size) for size in shape)
    return tuple(part.indices(size)[:2] for part, size in zip(index, shape, strict=True))


def is_whole(index: Index, shape: tuple[int, ...]) -> bool:
    return part_key(index, shape) == tuple((0, size) for size in shape)


def _uneven(
    where: str, shape: tuple[int, ...], target: jax.sharding.Sharding, err: Exception
) -> ConversionError:
    return ConversionError(
        f"leaf {where} of shape {shape} cannot be placed on {target}: {err}. Fix: pick a "
        "PartitionSpec whose mesh axes divide the dimensions they split, or pad the array."
    )
