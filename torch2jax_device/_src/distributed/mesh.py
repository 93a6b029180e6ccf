"""Device meshes and global batches: ``init_device_mesh`` and the ``DistributedSampler`` path."""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from .. import platforms, trees
from ..detect import is_torch_tensor
from ..device import Device
from ..errors import ConversionError, DistributedError, EmptyTreeError
from . import batch_agreement, process_group, torch_arguments

__all__ = ["global_batch", "init_device_mesh", "make_global_batch"]


def init_device_mesh(
    device_type: str,
    mesh_shape: Sequence[int],
    *,
    mesh_dim_names: Sequence[str] | None = None,
    backend_override: Any = None,
    axis_types: AxisType | Sequence[AxisType] | None = None,
) -> Mesh:
    """Equivalent to `torch.distributed.device_mesh.init_device_mesh`.

    A ``jax.sharding.Mesh`` over every process's devices.

    Like torch's, it initializes the process group first when a launcher started
    this process (``RANK`` and ``WORLD_SIZE`` set) and nobody has yet. The mesh
    holds all devices of the job (``jax.devices(platform)``, arranged by
    ``jax.make_mesh`` for the interconnect), so ``mesh_shape`` must multiply to
    the number of devices, which is the world size when each process owns one.
    Without a launcher it is a mesh over this process's devices.

    Its axes are ``Auto`` unless you ask otherwise: ``jax.jit`` then propagates
    shardings itself, so data-parallel code written for one device (an embedding
    lookup, a loss) runs unchanged over a batch split along the mesh, as DDP code
    does. ``jax.make_mesh`` itself defaults to ``Explicit`` axes (JAX's sharding-in-types
    mode), under which such a lookup fails with ``ShardingTypeError`` until every
    ambiguous operation names its output sharding.

    Args:
        device_type: ``"cuda"``, ``"cpu"``, ``"tpu"``... without an index.
        mesh_shape: Devices along each mesh dimension, e.g. ``(2, 4)``.
        mesh_dim_names: One name per dimension (default ``dim_0``, ``dim_1``...).
            ``NamedSharding`` and ``PartitionSpec`` refer to them.
        backend_override: Only ``None``: JAX chooses each axis's collectives itself.
        axis_types: ``jax.sharding.AxisType.Explicit`` (or one type per dimension)
            for JAX's explicit sharding mode; default ``Auto`` for every axis.

    Raises:
        DistributedError: an indexed device type, bad names, bad axis types, a shape
            that does not match the number of devices, or a ``backend_override``.
        DeviceUnavailableError: JAX has no such device here.

    Examples:
        >>> from torch2jax_device import distributed as dist
        >>> mesh = dist.init_device_mesh("cpu", (1,), mesh_dim_names=("data",))
        >>> dict(mesh.shape), mesh.axis_types
        ({'data': 1}, (Auto,))
    """
    if not isinstance(device_type, str):
        raise DistributedError(
            f"device_type must be a string such as 'cuda' or 'cpu', not "
            f"{type(device_type).__name__}."
        )
    device = Device(device_type)
    if device.index is not None:
        raise DistributedError(
            f"Device type with index is not supported but got {device_type!r}: "
            "init_device_mesh takes a device type such as 'cuda' or 'cpu' (pass "
            "device.type for a device object)."
        )
    torch_arguments.at_default(
        "init_device_mesh", "backend_override", backend_override, None,
        "JAX chooses the collectives of every mesh axis itself (NCCL between GPUs, gloo "
        "between CPU processes). Fix: drop backend_override=",
    )  # fmt: skip
    shape = _mesh_shape(mesh_shape)
    names = _mesh_names(mesh_dim_names, len(shape))
    types = _axis_types(axis_types, len(shape))
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        process_group.join_launched_job(defer_to_torch=False)
    platform = platforms.platform_of(device.jax_device)
    devices = jax.devices(platform)
    if math.prod(shape) != len(devices):
        raise DistributedError(
            f"Mesh shape {shape} holds {math.prod(shape)} devices, but this job has "
            f"{len(devices)} {platform} device(s): {jax.process_count()} process(es) with "
            f"{len(devices) // jax.process_count()} each. Unlike torch's DeviceMesh (one "
            "device per rank), a JAX mesh holds every device of every process. Fix: use a "
            f"shape whose sizes multiply to {len(devices)}."
        )
    return jax.make_mesh(shape, names, axis_types=types, devices=devices)


def make_global_batch(local_batch: Any, mesh: Mesh, axis: str | Sequence[str] | None = None) -> Any:
    """One global batch from each process's local batch: the ``DistributedSampler`` + DDP path.

    Each process passes the rows it loaded (its ``DistributedSampler`` shard); every
    array leaf becomes one ``jax.Array`` whose leading dimension is the
    concatenation of all processes' rows in rank order, split over the mesh
    ``axis`` (``jax.make_array_from_process_local_data``). Jitted code then sees
    the whole batch and XLA averages gradients across processes, which is what DDP
    does. 0-d leaves (a step counter) are replicated: one value for the whole job,
    so they must be equal on every process, and this is checked with the shapes.

    Every process must pass the same structure, shapes and dtypes, and this is
    checked: over a mesh of several processes, each call first compares every leaf's
    local shape and dtype with the other processes' (one write and one read per other
    process at JAX's coordination service, about a millisecond; ``docs/distributed.md``)
    and every process raises the same ``DistributedError`` where they differ. Without
    the check each process would infer a different global shape from its own rows and
    compute a different loss, silently. Calls are matched in order per thread.

    Args:
        local_batch: A pytree of NumPy arrays, torch CPU tensors, JAX arrays or
            Python numbers.
        mesh: The mesh, e.g. from
            [`tj.distributed.init_device_mesh`][torch2jax_device.distributed.init_device_mesh].
        axis: The mesh axis (or axes) the batch dimension is split over; default the
            first mesh axis.

    Returns:
        The same structure with global ``jax.Array`` leaves.

    Raises:
        EmptyTreeError: ``local_batch`` holds no arrays.
        ConversionError: a leaf does not split evenly over this process's devices;
            the message names the leaf.
        DistributedError: ``axis`` is not an axis of ``mesh``; the processes' local
            batches differ, or a 0-d leaf's values do (on every process: the message
            names the leaf and each rank's shape, and the fix: ``drop_last=True``, a
            ``DistributedSampler``, or padding and a mask); another process failed
            first, or did not come within the group's timeout.

    Examples:
        Where rank 0 passes 4 rows and rank 1 the 2 rows of a short last batch, both
        raise::

            DistributedError: make_global_batch (call #7 of thread MainThread): the
            ranks' local batches differ: at leaf ['x'], rank 0 has float32[4, 3]; rank 1
            has float32[2, 3]. ... Fix: drop_last=True on the DataLoader ...

        In one process, nothing is compared:

        >>> import jax
        >>> import numpy as np
        >>> from torch2jax_device import distributed as dist
        >>> mesh = dist.init_device_mesh("cpu", (1,), mesh_dim_names=("data",))
        >>> batch = dist.make_global_batch({"x": np.ones((4, 3), np.float32)}, mesh)
        >>> batch["x"].shape, batch["x"].sharding.spec == jax.sharding.PartitionSpec("data")
        ((4, 3), True)
    """
    if not isinstance(mesh, Mesh):
        raise DistributedError(
            f"make_global_batch: mesh must be a jax.sharding.Mesh, not "
            f"{type(mesh).__name__} {mesh!r:.60}. Fix: pass the mesh init_device_mesh returned"
        )
    if axis is None:
        axes: tuple[str, ...] = (mesh.axis_names[0],)
    else:
        axes = (axis,) if isinstance(axis, str) else _items(axis) or (axis,)
    unknown = [name for name in axes if not isinstance(name, str) or name not in mesh.axis_names]
    if unknown:
        raise DistributedError(
            f"make_global_batch: axis {unknown[0]!r:.60} is not an axis of the mesh, which has "
            f"{mesh.axis_names}. Fix: pass one of them (or a tuple of them) as axis="
        )
    sharding = NamedSharding(mesh, PartitionSpec(axes[0] if len(axes) == 1 else axes))
    if sharding.is_fully_addressable:  # one process: nobody to agree with
        return global_batch(local_batch, sharding, "make_global_batch")
    agreeing = batch_agreement.Calls(sharding, "make_global_batch")
    try:
        flat, values = _local_values(local_batch, "make_global_batch")
    except Exception as err:
        agreeing.failed(err)
        raise
    agreeing.agree(batch_agreement.local_leaves(flat.paths, values))
    return _built(flat, values, sharding, "make_global_batch")


def global_batch(local_batch: Any, sharding: jax.sharding.Sharding, function: str) -> Any:
    """``local_batch``'s leaves as global arrays of ``sharding``, each process giving its rows.

    What [`make_global_batch`][torch2jax_device.distributed.make_global_batch] does for a
    mesh axis, for any sharding (a ``DeviceLoader``'s): a leaf's leading dimension is the
    concatenation of every process's rows, in process order; 0-d leaves are replicated
    over a ``NamedSharding``'s mesh; other leaves (strings, flags, ``None``) stay as they
    are. ``function`` names the caller in errors. Nothing is compared with the other
    processes here: ``make_global_batch`` checks before it builds, a ``DeviceLoader``
    when it hands the batch out (``agreed_batches``).
    """
    flat, values = _local_values(local_batch, function)
    return _built(flat, values, sharding, function)


def _local_values(local_batch: Any, function: str) -> tuple[trees.Flat, list[Any]]:
    """The flattened batch, with each data leaf as NumPy or a local ``jax.Array``."""
    flat = trees.flatten(local_batch, with_paths=True)  # dicts keep their own order
    if not flat.leaves:
        raise EmptyTreeError(
            f"{function}: the local batch holds no arrays ({type(local_batch).__name__} "
            f"{local_batch!r:.60}). Fix: pass this process's rows, as an array or a tree of "
            "arrays"
        )
    values = [
        process_group.host_value(leaf, function, path) if _is_data(leaf) else leaf
        for path, leaf in zip(flat.paths, flat.leaves, strict=True)
    ]
    return flat, values


def _built(
    flat: trees.Flat, values: list[Any], sharding: jax.sharding.Sharding, function: str
) -> Any:
    replicated = (
        NamedSharding(sharding.mesh, PartitionSpec(), memory_kind=sharding.memory_kind)
        if isinstance(sharding, NamedSharding)
        else sharding
    )
    leaves = []
    for path, leaf, value in zip(flat.paths, flat.leaves, values, strict=True):
        if not _is_data(leaf):  # a name, a flag: as tj.to_device leaves them
            leaves.append(leaf)
            continue
        target = replicated if np.ndim(value) == 0 else sharding
        value = _in_memory_kind(value, target)
        try:
            leaves.append(jax.make_array_from_process_local_data(target, value))
        except ValueError as err:
            parts = _local_parts(target)
            rows = np.shape(value)[0] if np.ndim(value) else None
            if parts is not None and rows is not None and rows % parts:
                fix = (
                    f"its {rows} rows do not split into this process's {parts} devices along "
                    "the batch axis. Fix: make the local batch size a multiple of "
                    f"{parts} (drop_last=True, or a batch size that divides)"
                )
            else:
                fix = (
                    "Fix: hand this process's rows over as NumPy arrays or torch tensors on "
                    "the host, whose dtype JAX takes (JAX's message says what did not fit)"
                )
            raise ConversionError(
                f"{function}: leaf {path or '<root>'} of shape {np.shape(value)} cannot be "
                f"placed on this process's devices of {_described(target)}: {err}; {fix}."
            ) from err
    return flat.rebuild(leaves)


def _in_memory_kind(value: Any, target: jax.sharding.Sharding) -> Any:
    """``value`` in ``target``'s memory kind where it is a local ``jax.Array`` on the
    target's devices: JAX takes such an array as the shard of its device as it is, in
    whatever memory it lies (a torch tensor's zero-copy array is in device memory), and
    then refuses a target in another kind (``DeviceLoader(pin_memory=True)`` stages in
    ``pinned_host``) with "Memory kind mismatch"."""
    kind = target.memory_kind
    if not isinstance(value, jax.Array) or kind is None or value.sharding.memory_kind == kind:
        return value
    if not value.devices() <= target.addressable_devices:
        return value  # copied to the target's devices, into its memory kind, anyway
    return jax.device_put(value, value.sharding.with_memory_kind(kind))


def _is_data(leaf: Any) -> bool:
    """An array, a tensor or a number: what becomes part of a global batch."""
    if isinstance(leaf, (str, bytes, bool)) or leaf is None:
        return False
    return isinstance(leaf, (numbers.Number, np.ndarray, np.generic, jax.Array)) or (
        is_torch_tensor(leaf)
    )


def _local_parts(sharding: jax.sharding.Sharding) -> int | None:
    """How many pieces this process's rows are cut into along the first axis: its
    devices' distinct places along the mesh axes the spec's first entry names (``None``
    for a sharding that is not a ``NamedSharding``)."""
    if not isinstance(sharding, NamedSharding):
        return None
    first = sharding.spec[0] if len(sharding.spec) else None
    if first is None:
        return 1
    axes = first if isinstance(first, tuple) else (first,)
    mesh = sharding.mesh
    where = [mesh.axis_names.index(axis) for axis in axes]
    here = jax.process_index()
    return len(
        {
            tuple(index[position] for position in where)
            for index in np.ndindex(mesh.devices.shape)
            if mesh.devices[index].process_index == here
        }
    )


def _described(sharding: jax.sharding.Sharding) -> str:
    if isinstance(sharding, NamedSharding):
        return f"mesh axes {sharding.spec}"
    return str(sharding)


def _mesh_shape(mesh_shape: Sequence[int]) -> tuple[int, ...]:
    if isinstance(mesh_shape, (str, bytes)) or not isinstance(mesh_shape, Sequence):
        raise DistributedError(
            f"mesh_shape must be a tuple of ints such as (2, 4), not {mesh_shape!r}."
        )
    shape = tuple(mesh_shape)
    if not shape or any(
        isinstance(size, bool) or not isinstance(size, int) or size < 1 for size in shape
    ):
        raise DistributedError(
            f"mesh_shape must be a non-empty tuple of positive ints, got {mesh_shape!r}."
        )
    return shape


def _items(value: Any) -> tuple[Any, ...] | None:
    """``value``'s items where it is a sequence of them (not a mapping, a string or a
    file); ``None`` where it is none, so the caller raises its own error."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (Sequence, np.ndarray)):
        return None
    return tuple(value)


def _mesh_names(mesh_dim_names: Sequence[str] | None, ndim: int) -> tuple[str, ...]:
    if mesh_dim_names is None:
        return tuple(f"dim_{index}" for index in range(ndim))
    names = (mesh_dim_names,) if isinstance(mesh_dim_names, str) else _items(mesh_dim_names)
    if (
        names is None
        or not all(isinstance(name, str) for name in names)  # before set(): lists are unhashable
        or len(set(names)) != ndim
        or len(names) != ndim
    ):
        raise DistributedError(
            f"mesh_dim_names {mesh_dim_names!r:.60} must be {ndim} distinct strings, one per "
            "mesh dimension."
        )
    return names


def _axis_types(
    axis_types: AxisType | Sequence[AxisType] | None, ndim: int
) -> tuple[AxisType, ...]:
    if axis_types is None:
        return (AxisType.Auto,) * ndim
    types = (axis_types,) * ndim if isinstance(axis_types, AxisType) else _items(axis_types)
    if types is None or len(types) != ndim or not all(isinstance(t, AxisType) for t in types):
        raise DistributedError(
            f"axis_types {axis_types!r:.60} must be one jax.sharding.AxisType or {ndim} of them, "
            "one per mesh dimension (e.g. AxisType.Explicit)."
        )
    return types
