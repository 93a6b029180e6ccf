"""``torch.distributed`` for JAX: torchrun jobs, device meshes and metric reductions.

A data-parallel PyTorch script launched with ``torchrun`` ports line by line and
lands on JAX's own multi-process engine (``jax.distributed``, a global ``Mesh``,
``NamedSharding``, ``jax.make_array_from_process_local_data``), not on an imitation
of PyTorch's process groups::

    from torch2jax_device import distributed as dist

    dist.init_process_group(backend="nccl")    # jax.distributed.initialize, once per process
    rank, world_size = dist.get_rank(), dist.get_world_size()
    mesh = dist.init_device_mesh("cuda", (jax.device_count(),), mesh_dim_names=("data",))
    params = jax.device_put(params, NamedSharding(mesh, P()))   # DDP(model): replicated
    batch = dist.make_global_batch(local_batch, mesh)           # DistributedSampler shards
    params, loss = train_step(params, batch)   # jax.jit: XLA averages the gradients
    metric = dist.all_reduce(local_metric, op="mean")           # dist.all_reduce
    dist.destroy_process_group()

``init_process_group`` reads what torchrun (or ``torch2jax-device run``, or a SLURM
script) puts in the environment and must run before anything starts JAX's backends.
With several processes on a host, each one owns the GPU ``LOCAL_RANK`` names, as
``cuda:{LOCAL_RANK}`` does in the PyTorch script. ``docs/distributed.md`` covers
multi-host jobs, TPU pods and what happens when a process fails.

Example:
    >>> from torch2jax_device import distributed as dist
    >>> dist.is_initialized()
    False
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import itertools
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from . import _platforms, _rendezvous
from ._detect import is_torch_tensor, is_tracer
from ._device import Device, DeviceLike
from ._errors import ConversionError, DistributedError, EmptyTreeError
from ._interop import to_jax

__all__ = [
    "DistributedError",
    "ReduceOp",
    "all_reduce",
    "barrier",
    "destroy_process_group",
    "get_local_rank",
    "get_rank",
    "get_world_size",
    "init_device_mesh",
    "init_process_group",
    "is_initialized",
    "make_global_batch",
]

# Used when init_process_group gets no timeout: JAX's own initialization and shutdown
# timeout (torch's default is 30 minutes).
_DEFAULT_TIMEOUT_S = 300.0
# JAX declares a silent process dead after this long (its default); a shorter
# timeout shortens it too.
_HEARTBEAT_S = 100
_BACKENDS = frozenset({"gloo", "nccl"})
_NOT_INITIALIZED = (
    "Default process group has not been initialized, please make sure to call init_process_group."
)


class ReduceOp:
    """The reductions :func:`all_reduce` knows, under ``torch.distributed.ReduceOp``'s names.

    Each is a plain string, so ``op=ReduceOp.MAX`` and ``op="max"`` are the same.
    ``AVG`` is ``"mean"``, which gloo lacks in torch (there: ``SUM``, then divide).
    """

    SUM = "sum"
    AVG = "mean"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"


_REDUCTIONS: dict[str, Callable[..., jax.Array]] = {
    ReduceOp.SUM: jnp.sum,
    ReduceOp.AVG: jnp.mean,
    ReduceOp.PRODUCT: jnp.prod,
    ReduceOp.MIN: jnp.min,
    ReduceOp.MAX: jnp.max,
}


@dataclasses.dataclass(frozen=True)
class _ProcessGroup:
    rendezvous: _rendezvous.Rendezvous
    timeout_s: float


_group: _ProcessGroup | None = None
# Every rank numbers its synchronizing calls the same way, so the n-th call on one
# rank meets the n-th call on the others at JAX's coordination service.
_synchronizations = itertools.count()


def init_process_group(
    backend: str | None = None,
    init_method: str | None = None,
    timeout: datetime.timedelta | float | None = None,
    world_size: int = -1,
    rank: int = -1,
    *,
    device_id: DeviceLike | None = None,
) -> None:
    """Join this process to the job: ``torch.distributed.init_process_group`` on JAX.

    Calls ``jax.distributed.initialize`` with rank 0's host as the coordinator
    (``MASTER_ADDR``; port ``MASTER_PORT``, or ``MASTER_PORT + 1`` under torchrun,
    whose own store holds ``MASTER_PORT``; ``JAX_COORDINATOR_PORT`` overrides),
    ``num_processes=WORLD_SIZE`` and ``process_id=RANK``. After it, ``jax.devices()``
    lists the devices of every process and jitted computations over a mesh of them
    run as one program.

    Which GPUs this process owns (``local_device_ids``): the one ``device_id`` names;
    else, when several processes share the host (``LOCAL_WORLD_SIZE`` > 1), GPU
    ``LOCAL_RANK``, like ``cuda:{LOCAL_RANK}`` in the PyTorch script (JAX then shows
    it as this process's only GPU); else all of them, JAX's preferred
    one-process-per-host layout. ``JAX_LOCAL_DEVICE_IDS`` overrides. CPU
    collectives use gloo unless ``jax_cpu_collectives_implementation`` says
    otherwise.

    Must run before anything starts JAX's backends (creating an array,
    ``jax.devices()``, ``tj.cuda.is_available()``...), as ``jax.distributed``
    requires. When a rank never arrives or dies later, JAX's runtime terminates
    the other processes (SIGABRT) once the timeout has passed
    (``docs/distributed.md`` lists every case).

    Args:
        backend: ``"nccl"``, ``"gloo"``, ``"cpu:gloo,cuda:nccl"`` or ``None``. Accepted
            for ported scripts; JAX picks the collectives itself (NCCL between
            GPUs, gloo between CPU processes).
        init_method: ``"env://"`` (the default: read ``MASTER_ADDR``, ``MASTER_PORT``,
            ``RANK``, ``WORLD_SIZE``) or ``"tcp://HOST:PORT"``.
        timeout: A ``datetime.timedelta`` or seconds (default 300 s). Bounds the
            start-up rendezvous, :func:`barrier`, :func:`all_reduce`'s wait for the
            other ranks and the shutdown handshake, and (capped at JAX's 100 s) how
            long a silent process may go before JAX terminates every process.
        world_size: The number of processes; ``-1`` reads ``WORLD_SIZE``.
        rank: This process's rank; ``-1`` reads ``RANK``.
        device_id: The one GPU this process uses (``"cuda:1"``, ``1``), or ``"cpu"``.

    Raises:
        DistributedError: already initialized, JAX already started, a missing or
            invalid setting, a busy coordinator port (rank 0), a coordinator that
            does not answer within ``timeout`` (other ranks), or a ``WORLD_SIZE``
            other than rank 0's. Each message names the value and the fix.

    Example:
        First thing in a script launched by torchrun or ``torch2jax-device run``::

            dist.init_process_group(backend="nccl")

        Settings are checked before anything starts:

        >>> from torch2jax_device import distributed as dist
        >>> dist.init_process_group(init_method="file:///tmp/rendezvous")
        ... # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        DistributedError: init_method 'file:///tmp/rendezvous' is not supported: ...
    """
    global _group
    if _group is not None or jax.distributed.is_initialized():
        raise DistributedError(
            "trying to initialize the default process group twice! JAX's distributed "
            "runtime is already running in this process (init_process_group or "
            "jax.distributed.initialize was called before)."
        )
    _check_backend(backend)
    timeout_s = _seconds(timeout)
    rendezvous = _rendezvous.parse(init_method, world_size, rank, os.environ)
    device_ids = _rendezvous.local_device_ids(rendezvous, device_id, os.environ)
    if _platforms.backends_initialized():
        raise DistributedError(
            "init_process_group must run before JAX starts its backends, and they are "
            "already running in this process (something created an array or asked for "
            "devices: jax.devices(), tj.cuda.is_available(), ...). Fix: call "
            "init_process_group (or init_device_mesh, which calls it under a launcher) "
            "first thing in the script, before any JAX computation. A process whose group "
            "was destroyed cannot join another job."
        )
    if jax.config.values.get("jax_cpu_collectives_implementation") is None:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    remaining_s = _rendezvous.check_coordinator(rendezvous, timeout_s, os.environ)
    jax.distributed.initialize(
        coordinator_address=rendezvous.coordinator_address,
        num_processes=rendezvous.world_size,
        process_id=rendezvous.rank,
        local_device_ids=device_ids,
        cluster_detection_method="deactivate",
        initialization_timeout=_rendezvous.whole_seconds(remaining_s),
        heartbeat_timeout_seconds=min(_rendezvous.whole_seconds(timeout_s), _HEARTBEAT_S),
        shutdown_timeout_seconds=_rendezvous.whole_seconds(timeout_s),
    )
    _check_world_size(rendezvous, timeout_s)
    _group = _ProcessGroup(rendezvous, timeout_s)


def is_initialized() -> bool:
    """Whether :func:`init_process_group` has run (``torch.distributed.is_initialized``).

    Example:
        >>> from torch2jax_device import distributed as dist
        >>> dist.is_initialized()
        False
    """
    return _group is not None


def get_rank() -> int:
    """This process's rank, 0 to world size - 1 (``torch.distributed.get_rank``).

    Equals ``jax.process_index()`` once JAX has started.

    Raises:
        DistributedError: the process group is not initialized (torch: ValueError).

    Example:
        >>> from torch2jax_device import distributed as dist
        >>> dist.get_rank()  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        DistributedError: Default process group has not been initialized, ...
    """
    return _require_group("get_rank").rendezvous.rank


def get_world_size() -> int:
    """The number of processes in the job (``torch.distributed.get_world_size``).

    Equals ``jax.process_count()`` once JAX has started; the number of devices,
    ``jax.device_count()``, is larger when a process owns several.

    Raises:
        DistributedError: the process group is not initialized (torch: ValueError).

    Example:
        >>> from torch2jax_device import distributed as dist
        >>> dist.get_world_size()  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        DistributedError: Default process group has not been initialized, ...
    """
    return _require_group("get_world_size").rendezvous.world_size


def get_local_rank() -> int:
    """This process's rank on its host: ``int(os.environ["LOCAL_RANK"])``.

    Like ``torch.distributed.get_node_local_rank``, it reads ``LOCAL_RANK`` (set by
    torchrun and ``torch2jax-device run``) and works before initialization.

    Raises:
        DistributedError: ``LOCAL_RANK`` is not set or not an integer.

    Example:
        >>> import os
        >>> from torch2jax_device import distributed as dist
        >>> os.environ["LOCAL_RANK"] = "1"
        >>> dist.get_local_rank()
        1
        >>> del os.environ["LOCAL_RANK"]
    """
    if _group is not None and _group.rendezvous.local_rank is not None:
        return _group.rendezvous.local_rank
    text = os.environ.get("LOCAL_RANK")
    if text is None or not text.strip():
        raise DistributedError(
            "LOCAL_RANK is not in the environment. Fix: launch with torchrun or "
            "`torch2jax-device run`, which set it, or export LOCAL_RANK for each process."
        )
    try:
        return int(text)
    except ValueError:
        raise DistributedError(f"LOCAL_RANK={text!r} is not an integer.") from None


def barrier() -> None:
    """Wait until every process reaches its matching ``barrier()`` (``dist.barrier``).

    Runs on JAX's coordination service (the one ``jax.distributed`` starts), not
    on a device, so it neither starts backends nor compiles anything. Every rank
    must call it the same number of times.

    Raises:
        DistributedError: the process group is not initialized, or some rank did not
            arrive within the group's timeout; the message names those ranks.

    Example:
        In a job, every rank calls ``dist.barrier()``. Before joining one, it fails
        as in torch:

        >>> from torch2jax_device import distributed as dist
        >>> dist.barrier()  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        DistributedError: barrier(): Default process group has not been initialized, ...
    """
    _synchronize("barrier")


def destroy_process_group() -> None:
    """Leave the job: ``torch.distributed.destroy_process_group`` (``jax.distributed.shutdown``).

    JAX's shutdown waits (up to the group's timeout) until every process shuts down,
    so call it on every rank, at the end: JAX's backends cannot join a new job in
    the same process afterwards.

    Raises:
        DistributedError: the process group is not initialized.

    Example:
        The last line of every rank's script is ``dist.destroy_process_group()``.
        Before joining a job, it fails:

        >>> from torch2jax_device import distributed as dist
        >>> dist.destroy_process_group()  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        DistributedError: destroy_process_group(): Default process group has not ...
    """
    global _group
    _require_group("destroy_process_group")
    jax.distributed.shutdown()
    _group = None


def init_device_mesh(
    device_type: str,
    mesh_shape: Sequence[int],
    *,
    mesh_dim_names: Sequence[str] | None = None,
) -> Mesh:
    """A ``jax.sharding.Mesh`` over every process's devices: ``init_device_mesh`` for JAX.

    Like torch's, it initializes the process group first when a launcher started
    this process (``RANK`` and ``WORLD_SIZE`` set) and nobody has yet. The mesh
    holds all devices of the job (``jax.devices(platform)``, arranged by
    ``jax.make_mesh`` for the interconnect), so ``mesh_shape`` must multiply to
    the number of devices, which is the world size when each process owns one.
    Without a launcher it is a mesh over this process's devices.

    Args:
        device_type: ``"cuda"``, ``"cpu"``, ``"tpu"``... without an index.
        mesh_shape: Devices along each mesh dimension, e.g. ``(2, 4)``.
        mesh_dim_names: One name per dimension (default ``dim_0``, ``dim_1``...).
            ``NamedSharding`` and ``PartitionSpec`` refer to them.

    Raises:
        DistributedError: an indexed device type, bad names or a shape that does not
            match the number of devices.
        DeviceUnavailableError: JAX has no such device here.

    Example:
        >>> from torch2jax_device import distributed as dist
        >>> mesh = dist.init_device_mesh("cpu", (1,), mesh_dim_names=("data",))
        >>> dict(mesh.shape)
        {'data': 1}
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
    shape = _mesh_shape(mesh_shape)
    names = _mesh_names(mesh_dim_names, len(shape))
    if _group is None and "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        init_process_group()
    platform = _platforms.platform_of(device.jax_device)
    devices = jax.devices(platform)
    if math.prod(shape) != len(devices):
        raise DistributedError(
            f"Mesh shape {shape} holds {math.prod(shape)} devices, but this job has "
            f"{len(devices)} {platform} device(s): {jax.process_count()} process(es) with "
            f"{len(devices) // jax.process_count()} each. Unlike torch's DeviceMesh (one "
            "device per rank), a JAX mesh holds every device of every process. Fix: use a "
            f"shape whose sizes multiply to {len(devices)}."
        )
    return jax.make_mesh(shape, names, devices=devices)


def make_global_batch(local_batch: Any, mesh: Mesh, axis: str | Sequence[str] | None = None) -> Any:
    """One global batch from each process's local batch: the ``DistributedSampler`` + DDP path.

    Each process passes the rows it loaded (its ``DistributedSampler`` shard); every
    array leaf becomes one ``jax.Array`` whose leading dimension is the
    concatenation of all processes' rows in rank order, split over the mesh
    ``axis`` (``jax.make_array_from_process_local_data``). Jitted code then sees
    the whole batch and XLA averages gradients across processes, which is what DDP
    does. 0-d leaves (a step counter) are replicated: they must agree across
    processes. Every process must pass the same structure and shapes.

    Args:
        local_batch: A pytree of NumPy arrays, torch CPU tensors, JAX arrays or
            Python numbers.
        mesh: The mesh, e.g. from :func:`init_device_mesh`.
        axis: The mesh axis (or axes) the batch dimension is split over; default the
            first mesh axis.

    Returns:
        The same structure with global ``jax.Array`` leaves.

    Raises:
        EmptyTreeError: ``local_batch`` holds no arrays.
        ConversionError: a leaf does not split evenly over this process's devices;
            the message names the leaf.
        DistributedError: ``axis`` is not an axis of ``mesh``.

    Example:
        >>> import jax
        >>> import numpy as np
        >>> from torch2jax_device import distributed as dist
        >>> mesh = dist.init_device_mesh("cpu", (1,), mesh_dim_names=("data",))
        >>> batch = dist.make_global_batch({"x": np.ones((4, 3), np.float32)}, mesh)
        >>> batch["x"].shape, batch["x"].sharding.spec == jax.sharding.PartitionSpec("data")
        ((4, 3), True)
    """
    if axis is None:
        axes: tuple[str, ...] = (mesh.axis_names[0],)
    else:
        axes = (axis,) if isinstance(axis, str) else tuple(axis)
    unknown = [name for name in axes if name not in mesh.axis_names]
    if unknown:
        raise DistributedError(
            f"make_global_batch: axis {unknown[0]!r} is not an axis of the mesh, which has "
            f"{mesh.axis_names}."
        )
    spec = PartitionSpec(axes[0] if len(axes) == 1 else axes)
    sharded, replicated = NamedSharding(mesh, spec), NamedSharding(mesh, PartitionSpec())
    paths_and_leaves, treedef = jax.tree_util.tree_flatten_with_path(local_batch)
    if not paths_and_leaves:
        raise EmptyTreeError("make_global_batch: the local batch holds no arrays.")
    leaves = []
    for path, leaf in paths_and_leaves:
        value = _host_value(leaf, "make_global_batch", path)
        sharding = replicated if np.ndim(value) == 0 else sharded
        try:
            leaves.append(jax.make_array_from_process_local_data(sharding, value))
        except ValueError as err:
            raise ConversionError(
                f"make_global_batch: leaf {jax.tree_util.keystr(path) or '<root>'} of shape "
                f"{np.shape(value)} cannot be split over this process's devices along mesh "
                f"axis {axes}: {err}. Fix: make the local batch size a multiple of the "
                "number of devices this process has along that axis."
            ) from err
    return jax.tree.unflatten(treedef, leaves)


def all_reduce(tree: Any, op: str = ReduceOp.SUM) -> Any:
    """Reduce every process's values and give the result to all: ``dist.all_reduce``.

    For metrics and other host-side values: each process passes its own (a loss,
    a count, a tree of them); each gets back the reduction over all processes as
    ``jax.Array`` leaves on its first local device (torch updates the tensor in
    place; JAX arrays are immutable, so use the return value). The ranks first
    meet at JAX's coordination service, so a rank that never calls
    ``all_reduce`` makes the others fail after the group's timeout instead of
    waiting forever; then one jitted XLA all-reduce runs over all processes.

    Gradients inside a jitted training step need none of this: with the batch
    sharded over the mesh (:func:`make_global_batch`), XLA reduces them itself.

    Args:
        tree: A pytree of arrays, torch CPU tensors or Python numbers, with the same
            structure, shapes and dtypes on every process.
        op: ``"sum"``, ``"mean"``, ``"max"``, ``"min"`` or ``"product"`` (or the
            :class:`ReduceOp` names). ``"mean"`` gives floating point.

    Returns:
        The same structure with the reduced ``jax.Array`` leaves.

    Raises:
        DistributedError: the process group is not initialized, an unknown ``op``,
            a leaf that already spans processes or is traced, or a rank that did
            not arrive within the timeout.
        EmptyTreeError: ``tree`` holds no arrays.

    Example:
        In a job of two ranks, where each passes its own numbers::

            totals = dist.all_reduce({"loss": local_loss, "seen": 32})
            totals["seen"]  # Array(64, dtype=int32) on every rank

        Before joining a job, it fails as in torch:

        >>> from torch2jax_device import distributed as dist
        >>> dist.all_reduce(1.0)  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        DistributedError: all_reduce(): Default process group has not been initialized, ...
    """
    _require_group("all_reduce")
    name = op.lower() if isinstance(op, str) else op
    if name not in _REDUCTIONS:
        raise DistributedError(
            f"all_reduce: unknown op {op!r}; use one of {', '.join(map(repr, _REDUCTIONS))} "
            "(ReduceOp.AVG is 'mean')."
        )
    paths_and_leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    if not paths_and_leaves:
        raise EmptyTreeError("all_reduce: the tree holds no arrays.")
    values = [_host_value(leaf, "all_reduce", path) for path, leaf in paths_and_leaves]
    _synchronize("all_reduce")
    mesh = _process_mesh()
    stacked = NamedSharding(mesh, PartitionSpec("processes"))
    per_process = [
        jax.make_array_from_process_local_data(
            stacked, value[None], (jax.process_count(), *np.shape(value))
        )
        for value in values
    ]
    reduced = _reducer(name, mesh)(per_process)
    return jax.tree.unflatten(treedef, [array.addressable_data(0) for array in reduced])


def _require_group(function: str) -> _ProcessGroup:
    if _group is None:
        raise DistributedError(
            f"{function}(): {_NOT_INITIALIZED} (torch2jax_device.distributed."
            "init_process_group, called before JAX starts)"
        )
    return _group


def _check_backend(backend: str | None) -> None:
    if backend is None:
        return
    names = (
        [part.split(":", 1)[-1].strip().lower() for part in backend.split(",")]
        if isinstance(backend, str)
        else []
    )
    if not names or any(name not in _BACKENDS for name in names):
        raise DistributedError(
            f"backend {backend!r} is not supported: JAX chooses its collectives itself "
            "(NCCL between GPUs, gloo between CPU processes), so pass 'nccl', 'gloo', "
            "'cpu:gloo,cuda:nccl' or None."
        )


def _seconds(timeout: datetime.timedelta | float | None) -> float:
    if timeout is None:
        return _DEFAULT_TIMEOUT_S
    if isinstance(timeout, datetime.timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise DistributedError(
            f"timeout must be a datetime.timedelta or a number of seconds, not "
            f"{type(timeout).__name__}."
        )
    if not (math.isfinite(seconds) and seconds > 0):
        raise DistributedError(f"timeout must be positive and finite, got {seconds} s.")
    return seconds


def _coordination_client(what: str) -> Any:
    """The client of JAX's coordination service that ``jax.distributed`` runs.

    Its barrier and key-value store (what Orbax synchronizes hosts with) are not
    exported by ``jax.distributed``, hence the private import.
    """
    from jax._src import distributed as jax_distributed

    client = jax_distributed.global_state.client
    if client is None:  # shut down behind this module's back
        raise DistributedError(f"{what}(): JAX's distributed runtime is not running.")
    return client


def _check_world_size(rendezvous: _rendezvous.Rendezvous, timeout_s: float) -> None:
    """Every rank must have been told the world size rank 0 started the job with.

    JAX takes a rank's own ``num_processes`` on trust, so a rank given a larger
    ``WORLD_SIZE`` would join and then wait for processes that never come.
    """
    client = _coordination_client("init_process_group")
    key = "torch2jax_device/world_size"
    if rendezvous.rank == 0:
        client.key_value_set(key, str(rendezvous.world_size))
    timeout_ms = _rendezvous.whole_seconds(timeout_s) * 1000
    agreed = int(client.blocking_key_value_get(key, timeout_ms))
    if agreed != rendezvous.world_size:
        raise DistributedError(
            f"WORLD_SIZE={rendezvous.world_size} on rank {rendezvous.rank}, but rank 0 "
            f"started the job with WORLD_SIZE={agreed}. Fix: give every process the same "
            "WORLD_SIZE (torchrun and `torch2jax-device run` do)."
        )


def _synchronize(what: str) -> None:
    """Meet every rank's matching call at JAX's coordination service."""
    group = _require_group(what)
    client = _coordination_client(what)
    call = next(_synchronizations)
    try:
        client.wait_at_barrier(
            f"torch2jax_device.{call}.{what}", _rendezvous.whole_seconds(group.timeout_s) * 1000
        )
    except RuntimeError as err:
        raise DistributedError(
            f"{what}() on rank {group.rendezvous.rank} (call #{call}) failed waiting for the "
            f"other ranks (timeout {group.timeout_s:g} s). Every rank must make the same "
            "sequence of barrier() and all_reduce() calls; a rank that died or is busy "
            f"elsewhere never arrives. JAX's coordination service reported: {err}"
        ) from err


def _host_value(leaf: Any, function: str, path: Any) -> Any:
    """A leaf as NumPy or as a fully addressable ``jax.Array`` of this process."""
    where = jax.tree_util.keystr(path) or "<root>"
    if is_tracer(leaf):
        raise DistributedError(
            f"{function}: leaf {where} is traced (inside jax.jit): {function} works on "
            "concrete values between steps. Inside jit, reduce across devices with "
            "jnp operations on sharded arrays, or jax.lax.psum under shard_map."
        )
    if isinstance(leaf, jax.Array):
        if not leaf.is_fully_addressable:
            raise DistributedError(
                f"{function}: leaf {where} is a global array spanning several processes; "
                "it is already one value for the whole job. Reduce it with jnp operations "
                "under jax.jit instead."
            )
        return leaf
    if is_torch_tensor(leaf):
        return to_jax(leaf)
    return np.asarray(leaf)


def _process_mesh() -> Mesh:
    """Every device, one row per process: the mesh cross-process reductions run on."""
    devices = np.array(jax.devices()).reshape(jax.process_count(), jax.local_device_count())
    return Mesh(devices, ("processes", "local"))


@functools.cache
def _reducer(name: str, mesh: Mesh) -> Callable[[list[jax.Array]], list[jax.Array]]:
    reduce = _REDUCTIONS[name]
    replicated = NamedSharding(mesh, PartitionSpec())

    def reduce_over_processes(arrays: list[jax.Array]) -> list[jax.Array]:
        return [reduce(array, axis=0) for array in arrays]

    return jax.jit(reduce_over_processes, out_shardings=replicated)


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


def _mesh_names(mesh_dim_names: Sequence[str] | None, ndim: int) -> tuple[str, ...]:
    if mesh_dim_names is None:
        return tuple(f"dim_{index}" for index in range(ndim))
    names = (mesh_dim_names,) if isinstance(mesh_dim_names, str) else tuple(mesh_dim_names)
    if len(names) != ndim or len(set(names)) != ndim or not all(isinstance(n, str) for n in names):
        raise DistributedError(
            f"mesh_dim_names {mesh_dim_names!r} must be {ndim} distinct strings, one per "
            "mesh dimension."
        )
    return names
