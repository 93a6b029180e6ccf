"""Process groups on ``jax.distributed``: ``init_process_group`` and the calls that need one.

``init_process_group`` reads what torchrun (or ``torch2jax-device run``, or a SLURM script) puts in
the environment (read by ``rendezvous``) and starts JAX's multi-process runtime; ``barrier`` and
``all_reduce`` meet the other ranks at JAX's coordination service.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import itertools
import math
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .. import platforms, trees
from ..detect import is_torch_tensor, is_tracer
from ..device import DeviceLike
from ..dtypes import is_prng_key, transfers
from ..errors import DistributedError, EmptyTreeError
from ..interop import to_jax
from . import agreement, narrowed
from . import rendezvous as _rendezvous
from . import torch_arguments as _torch_arguments
from .roll_call import roll_call

__all__ = [
    "ReduceOp",
    "all_reduce",
    "barrier",
    "destroy_process_group",
    "get_local_rank",
    "get_rank",
    "get_world_size",
    "init_process_group",
    "is_initialized",
    "join_launched_job",
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
_TORCH_RUNS_IT = (
    " torch.distributed runs this job (its init_process_group ran), and tj's answers are "
    "JAX's: ask torch.distributed, or call tj's init_process_group before JAX starts."
)


class ReduceOp:
    """Equivalent to `torch.distributed.ReduceOp`.

    The reductions ``all_reduce`` knows, under ``torch.distributed.ReduceOp``'s names.

    Each is a plain string, so ``op=ReduceOp.MAX`` and ``op="max"`` are the same.
    ``AVG`` is ``"mean"``. ``BAND``, ``BOR`` and ``BXOR`` take integers and bools only.

    Examples:
        >>> from torch2jax_device import distributed as dist
        >>> dist.ReduceOp.MAX, dist.ReduceOp.AVG, dist.ReduceOp.BXOR
        ('max', 'mean', 'bxor')
    """

    SUM = "sum"
    AVG = "mean"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"


def _sum(stacked: jax.Array) -> jax.Array:
    """torch's in-place SUM: the tensor's dtype (bool: any rank's True; int8 wraps)."""
    if stacked.dtype == jnp.bool_:
        return jnp.any(stacked, axis=0)
    return jnp.sum(stacked, axis=0, dtype=stacked.dtype)


def _product(stacked: jax.Array) -> jax.Array:
    """torch's in-place PRODUCT: the tensor's dtype (bool: every rank's True)."""
    if stacked.dtype == jnp.bool_:
        return jnp.all(stacked, axis=0)
    return jnp.prod(stacked, axis=0, dtype=stacked.dtype)


def _bitwise(operation: Any, stacked: jax.Array) -> jax.Array:
    """BAND, BOR, BXOR; bools through uint8 (XLA's CPU backend has no xor-reduction of them).

    ``_reducer`` gathers the values first: gloo's all-reduce has no bitwise operations.
    """
    if stacked.dtype == jnp.bool_:
        reduced: jax.Array = operation.reduce(stacked.astype(jnp.uint8), axis=0)
        return reduced.astype(jnp.bool_)
    result: jax.Array = operation.reduce(stacked, axis=0)
    return result


# Each reduces the stacked values of every process (axis 0) to the result. Every one keeps
# the dtype (as torch's in-place all_reduce does) except "mean" of integers and bools,
# which is floating point (torch refuses AVG for them).
_REDUCTIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    ReduceOp.SUM: _sum,
    ReduceOp.AVG: functools.partial(jnp.mean, axis=0),
    ReduceOp.PRODUCT: _product,
    ReduceOp.MIN: functools.partial(jnp.min, axis=0),
    ReduceOp.MAX: functools.partial(jnp.max, axis=0),
    ReduceOp.BAND: functools.partial(_bitwise, jnp.bitwise_and),
    ReduceOp.BOR: functools.partial(_bitwise, jnp.bitwise_or),
    ReduceOp.BXOR: functools.partial(_bitwise, jnp.bitwise_xor),
}
_BITWISE = frozenset({ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR})
# Kinds XLA's CPU collectives cannot reduce across processes (UNIMPLEMENTED), and the
# byte-wide kind each is reduced in.
_BYTE_WIDE = {"int2": np.dtype(np.int8), "uint2": np.dtype(np.uint8)}
_ORDERED = frozenset({ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX})


@dataclasses.dataclass(frozen=True)
class _ProcessGroup:
    rendezvous: _rendezvous.Rendezvous
    timeout_s: float
    device_ids: list[int] | None
    # The tj call that joined the job before init_process_group ran, if one did.
    joined_by: str | None


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
    store: Any = None,
    group_name: str = "",
    pg_options: Any = None,
    device_id: DeviceLike | None = None,
) -> None:
    """Equivalent to `torch.distributed.init_process_group`.

    Join this process to the job, on ``jax.distributed``.

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

    Must run before JAX calls start JAX's backends (``jax.devices()``, creating an
    array...), as ``jax.distributed`` requires. tj's own queries may come first, as
    they do in PyTorch scripts (``tj.cuda.is_available()``,
    ``tj.cuda.set_device(LOCAL_RANK)``): under a launcher (``RANK`` and
    ``WORLD_SIZE`` set) the first of them joins the job with the launcher's
    settings, and this call then confirms them and sets the timeout of later waits.

    Every rank first checks in with rank 0: a rank that never arrives makes the
    others raise ``DistributedError`` naming it once ``timeout`` has passed. A rank
    that dies later makes JAX's runtime terminate the others (SIGABRT) after the
    timeout (``docs/distributed.md`` lists every case).

    Args:
        backend: ``"nccl"``, ``"gloo"``, ``"cpu:gloo,cuda:nccl"`` or ``None``. Accepted
            for ported scripts; JAX picks the collectives itself (NCCL between
            GPUs, gloo between CPU processes).
        init_method: ``"env://"`` (the default: read ``MASTER_ADDR``, ``MASTER_PORT``,
            ``RANK``, ``WORLD_SIZE``) or ``"tcp://HOST:PORT"``.
        timeout: A ``datetime.timedelta`` or seconds (default 300 s). Bounds the
            start-up rendezvous, [`tj.distributed.barrier`][torch2jax_device.distributed.barrier],
            [`tj.distributed.all_reduce`][torch2jax_device.distributed.all_reduce]'s wait for the
            other ranks and the shutdown handshake, and (capped at JAX's 100 s) how long a silent
            process may go before JAX terminates every process. JAX's waits stop at
            2**31 - 1 of their units: a longer timeout (``datetime.timedelta.max``) waits
            68 years to start and about 24.8 days at a barrier.
        world_size: The number of processes; ``-1`` reads ``WORLD_SIZE``.
        rank: This process's rank; ``-1`` reads ``RANK``.
        store: Only ``None``: the ranks meet at JAX's coordination service, at
            ``MASTER_ADDR``/``MASTER_PORT`` or ``init_method``, not in a torch store.
        group_name: Only ``""``: the job has one group.
        pg_options: Only ``None``: JAX configures its collectives itself.
        device_id: The one GPU this process uses (``"cuda:1"``, ``1``), or ``"cpu"``.

    Raises:
        DistributedError: already initialized, JAX already started, a missing or
            invalid setting (a ``store``, ``group_name`` or ``pg_options`` included), a
            busy coordinator port (rank 0), a coordinator that does not answer within
            ``timeout`` (other ranks), a rank that does not
            arrive within ``timeout`` (every rank that did; the message names the
            missing ones), two processes with one rank, or a ``WORLD_SIZE`` other
            than rank 0's. Each message names the value and the fix.

    Examples:
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
    _check_backend(backend)
    _torch_arguments.at_default(
        "init_process_group", "store", store, None,
        "the ranks meet at JAX's coordination service, not in a torch store. Fix: drop "
        "store= and set MASTER_ADDR and MASTER_PORT (torchrun does), or pass "
        "init_method='tcp://HOST:PORT'",
    )  # fmt: skip
    _torch_arguments.at_default(
        "init_process_group", "group_name", group_name, "",
        "JAX's job has one process group, which has no name. Fix: drop group_name=",
    )  # fmt: skip
    _torch_arguments.at_default(
        "init_process_group", "pg_options", pg_options, None,
        "JAX chooses and configures its collectives itself (NCCL between GPUs, gloo "
        "between CPU processes). Fix: drop pg_options=",
    )  # fmt: skip
    timeout_s = _seconds(timeout)
    rendezvous = _rendezvous.parse(init_method, world_size, rank, os.environ)
    device_ids = _rendezvous.local_device_ids(rendezvous, device_id, os.environ)
    if _group is not None and _group.joined_by is not None:
        _group = _confirm_joined_job(_group, rendezvous, device_ids, timeout_s)
        return
    if _group is not None or jax.distributed.is_initialized():
        raise DistributedError(
            "trying to initialize the default process group twice! JAX's distributed "
            "runtime is already running in this process (init_process_group or "
            "jax.distributed.initialize was called before)."
        )
    _group = _join(rendezvous, device_ids, timeout_s, joined_by=None)


def join_launched_job(*, defer_to_torch: bool = True) -> None:
    """Join the job a launcher started this process in, before tj starts JAX's backends.

    Runs when ``RANK`` and ``WORLD_SIZE`` are set and a tj call (``tj.cuda.is_available()``,
    ``tj.cuda.set_device(LOCAL_RANK)``, resolving a device...) is about to start JAX's
    backends before ``init_process_group`` ran: this package registers it with
    ``platforms.call_before_backends_start``.
    ``jax.distributed`` must start first, and on a GPU host each process must start
    on its own GPU only, so the process joins now with the launcher's settings, and
    the script's own ``init_process_group`` later confirms them. Nothing happens when
    the process already joined, or (with ``defer_to_torch``) when ``torch.distributed``
    runs this job: a torch DDP script that uses JAX on the side.
    """
    global _group
    if _group is not None or jax.distributed.is_initialized():
        return
    if defer_to_torch and _torch_owns_the_job():
        return
    rendezvous = _rendezvous.parse(None, -1, -1, os.environ)
    device_ids = _rendezvous.local_device_ids(rendezvous, None, os.environ)
    _group = _join(rendezvous, device_ids, _DEFAULT_TIMEOUT_S, joined_by=_caller())


def _join(
    rendezvous: _rendezvous.Rendezvous,
    device_ids: list[int] | None,
    timeout_s: float,
    joined_by: str | None,
) -> _ProcessGroup:
    if platforms.backends_initialized():
        raise DistributedError(
            "init_process_group must run before JAX starts its backends, and they are "
            "already running in this process (a JAX call created an array or asked for "
            "devices: jax.devices(), jnp.zeros(...), ...). Fix: call init_process_group "
            "(or init_device_mesh, which calls it under a launcher) before any JAX call; "
            "tj's own queries (tj.cuda.is_available(), ...) may come first under a "
            "launcher. A process whose group was destroyed cannot join another job."
        )
    if jax.config.values.get("jax_cpu_collectives_implementation") is None:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    remaining_s = roll_call(rendezvous, timeout_s, os.environ)
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
    return _ProcessGroup(rendezvous, timeout_s, device_ids, joined_by)


def _confirm_joined_job(
    group: _ProcessGroup,
    rendezvous: _rendezvous.Rendezvous,
    device_ids: list[int] | None,
    timeout_s: float,
) -> _ProcessGroup:
    """The script's own ``init_process_group`` after an automatic join: same job, or raise."""
    if (rendezvous, device_ids) != (group.rendezvous, group.device_ids):
        raise DistributedError(
            f"This process already joined its job when {group.joined_by} started JAX "
            f"under the launcher (rank {group.rendezvous.rank} of "
            f"{group.rendezvous.world_size} at {group.rendezvous.coordinator_address}, "
            f"devices {group.device_ids or 'all'}), and JAX cannot join another: this "
            f"init_process_group asks for rank {rendezvous.rank} of {rendezvous.world_size} "
            f"at {rendezvous.coordinator_address}, devices {device_ids or 'all'}. Fix: call "
            "init_process_group first, before anything that starts JAX."
        )
    return dataclasses.replace(group, timeout_s=timeout_s, joined_by=None)


def _torch_owns_the_job() -> bool:
    torch_distributed = sys.modules.get("torch.distributed")
    return bool(
        torch_distributed is not None
        and torch_distributed.is_available()
        and torch_distributed.is_initialized()
    )


def _caller() -> str:
    """The first call outside this package on the stack, as ``name() (file:line)``."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    frames = traceback.extract_stack()
    inside = [frame for frame in frames if frame.filename.startswith(package + os.sep)]
    for frame in reversed(frames):
        if not frame.filename.startswith(package + os.sep):
            entry = inside[0].name if inside else "a call"
            return f"{entry}() (called at {os.path.basename(frame.filename)}:{frame.lineno})"
    return "a tj call"


def is_initialized() -> bool:
    """Equivalent to `torch.distributed.is_initialized`.

    Whether ``init_process_group`` ran in this process (and the group was not destroyed),
    as in torch. Under a launcher, a tj query that starts JAX first (``tj.cuda.is_available()``)
    joins the job already, but this stays ``False`` until the script's own
    ``init_process_group`` confirms it: the common guard
    ``if not dist.is_initialized(): dist.init_process_group(timeout=...)`` then still
    runs, and its ``timeout`` applies. ``get_rank()`` and the collectives work from the
    join on.

    Examples:
        >>> from torch2jax_device import distributed as dist
        >>> dist.is_initialized()
        False
    """
    return _group is not None and _group.joined_by is None


def joined() -> bool:
    """Whether this process belongs to a job: ``init_process_group`` ran, or a tj query
    joined the job before it (``join_launched_job``)."""
    return _group is not None


def get_rank(group: Any = None) -> int:
    """Equivalent to `torch.distributed.get_rank`.

    This process's rank, 0 to world size - 1.

    Equals ``jax.process_index()`` once JAX has started. ``group`` is only ``None``,
    torch's default group: the job has one.

    Raises:
        DistributedError: the process group is not initialized (torch: ValueError), or
            a ``group`` other than ``None``.

    Examples:
        >>> from torch2jax_device import distributed as dist
        >>> dist.get_rank()  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        DistributedError: Default process group has not been initialized, ...
    """
    _torch_arguments.default_group("get_rank", group)
    return _require_group("get_rank").rendezvous.rank


def get_world_size(group: Any = None) -> int:
    """Equivalent to `torch.distributed.get_world_size`.

    The number of processes in the job.

    Equals ``jax.process_count()`` once JAX has started; the number of devices,
    ``jax.device_count()``, is larger when a process owns several. ``group`` is only
    ``None``, torch's default group: the job has one.

    Raises:
        DistributedError: the process group is not initialized (torch: ValueError), or
            a ``group`` other than ``None``.

    Examples:
        >>> from torch2jax_device import distributed as dist
        >>> dist.get_world_size()  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        DistributedError: Default process group has not been initialized, ...
    """
    _torch_arguments.default_group("get_world_size", group)
    return _require_group("get_world_size").rendezvous.world_size


def get_local_rank(fallback_rank: int | None = None) -> int:
    """This process's rank on its host: ``int(os.environ["LOCAL_RANK"])``.

    Like ``torch.distributed.get_node_local_rank``, it reads ``LOCAL_RANK`` (set by
    torchrun and ``torch2jax-device run``) and works before initialization; without
    ``LOCAL_RANK``, ``fallback_rank`` is the answer where given, as in torch.

    Raises:
        DistributedError: ``LOCAL_RANK`` is not set (and no ``fallback_rank``) or not an
            integer (torch: RuntimeError).

    Examples:
        >>> import os
        >>> from torch2jax_device import distributed as dist
        >>> os.environ["LOCAL_RANK"] = "1"
        >>> dist.get_local_rank()
        1
        >>> del os.environ["LOCAL_RANK"]
        >>> dist.get_local_rank(fallback_rank=0)  # torch's get_node_local_rank(fallback_rank=0)
        0
    """
    if _group is not None and _group.rendezvous.local_rank is not None:
        return _group.rendezvous.local_rank
    text = os.environ.get("LOCAL_RANK")
    if text is None and fallback_rank is not None:
        return fallback_rank
    if text is None or not text.strip():
        raise DistributedError(
            "LOCAL_RANK is not in the environment. Fix: launch with torchrun or "
            "`torch2jax-device run`, which set it, or export LOCAL_RANK for each process."
        )
    try:
        return int(text)
    except ValueError:
        raise DistributedError(f"LOCAL_RANK={text!r} is not an integer.") from None


def barrier(
    group: Any = None,
    async_op: bool = False,
    device_ids: list[int] | None = None,
    timeout: datetime.timedelta | float | None = None,
) -> None:
    """Equivalent to `torch.distributed.barrier`.

    Wait until every process reaches its matching ``barrier()``.

    Runs on JAX's coordination service (the one ``jax.distributed`` starts), not
    on a device, so it neither starts backends nor compiles anything. Every rank
    must call it the same number of times.

    Args:
        group: Only ``None``, torch's default group: the job has one.
        async_op: Only ``False``: it returns once every rank has arrived.
        device_ids: Checked as torch checks them (a list of indices); the barrier uses
            no device, so they choose none.
        timeout: How long to wait for the other ranks (a ``datetime.timedelta`` or
            seconds); default the group's, as in torch.

    Raises:
        DistributedError: the process group is not initialized, some rank did not
            arrive within the timeout (the message names those ranks), or a ``group``,
            ``async_op`` or ``device_ids`` tj cannot take.

    Examples:
        In a job, every rank calls ``dist.barrier()``. Before joining one, it fails
        as in torch:

        >>> from torch2jax_device import distributed as dist
        >>> dist.barrier()  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        DistributedError: barrier(): Default process group has not been initialized, ...
    """
    _torch_arguments.default_group("barrier", group)
    _torch_arguments.synchronous("barrier", async_op)
    _torch_arguments.device_ids("barrier", device_ids)
    synchronize("barrier", timeout_s=None if timeout is None else _seconds(timeout))


def destroy_process_group(group: Any = None) -> None:
    """Equivalent to `torch.distributed.destroy_process_group`.

    Leave the job (``jax.distributed.shutdown``).

    JAX's shutdown waits (up to the group's timeout) until every process shuts down,
    so call it on every rank, at the end: JAX's backends cannot join a new job in
    the same process afterwards.

    Raises:
        DistributedError: the process group is not initialized, or a ``group`` other
            than ``None`` (the job has one group).

    Examples:
        The last line of every rank's script is ``dist.destroy_process_group()``.
        Before joining a job, it fails:

        >>> from torch2jax_device import distributed as dist
        >>> dist.destroy_process_group()  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        DistributedError: destroy_process_group(): Default process group has not ...
    """
    global _group
    _torch_arguments.default_group("destroy_process_group", group)
    _require_group("destroy_process_group")
    jax.distributed.shutdown()
    _group = None


def all_reduce(
    tensor: Any, op: str = ReduceOp.SUM, group: Any = None, async_op: bool = False
) -> Any:
    """Equivalent to `torch.distributed.all_reduce`.

    Reduce every process's values and give the result to all.

    For metrics and other host-side values: each process passes its own (a loss,
    a count, a tree of them); each gets back the reduction over all processes as
    ``jax.Array`` leaves on its first local device (torch updates the tensor in
    place; JAX arrays are immutable, so use the return value). The result keeps each
    leaf's dtype, as torch's in-place reduction does: a bool ``"sum"`` is a logical OR
    and ``"product"`` an AND, an int8 ``"sum"`` wraps (``"mean"`` of integers or bools
    is floating point, where torch refuses ``AVG``). NumPy values and Python numbers take
    the dtype JAX gives them (int64 is held as int32 without ``jax_enable_x64``); a sum
    or product of 64-bit integers whose total leaves 32 bits raises ``DistributedError``
    instead of wrapping (torch's int64 would hold it), as does a float64 value or total
    past float32's largest instead of becoming inf.

    The ranks first meet at JAX's coordination service and compare what each brings:
    the call, the ``op``, each leaf's path, shape and dtype. Where they differ, every
    rank raises the same ``DistributedError`` naming the leaf and each rank's shape
    (XLA's all-reduce would otherwise return garbage on one rank and wait forever on
    another); a rank that fails before the call (a leaf it cannot convert) makes the
    others raise at once, naming its error; a rank that never calls ``all_reduce``
    makes the others fail after the group's timeout instead of waiting forever. Then
    one jitted XLA all-reduce runs over all processes.

    Gradients inside a jitted training step need none of this: with the batch sharded over the mesh
    ([`tj.distributed.make_global_batch`][torch2jax_device.distributed.make_global_batch]), XLA
    reduces them itself.

    Args:
        tensor: A pytree of arrays, torch CPU tensors or Python numbers, with the same
            structure, shapes and dtypes on every process.
        op: ``"sum"``, ``"mean"``, ``"max"``, ``"min"``, ``"product"``, or for integers
            and bools ``"band"``, ``"bor"``, ``"bxor"`` (or the
            [`tj.distributed.ReduceOp`][torch2jax_device.distributed.ReduceOp] names, or
            torch's ``torch.distributed.ReduceOp`` members).
        group: Only ``None``, torch's default group: the job has one.
        async_op: Only ``False``: the result is returned (JAX dispatches the
            reduction asynchronously anyway).

    Returns:
        The same structure with the reduced ``jax.Array`` leaves, in their dtypes.

    Raises:
        DistributedError: the process group is not initialized, an unknown ``op``, an
            ``op`` torch refuses for a leaf's dtype (``"band"`` of floats; ``"max"``,
            ``"min"``, ``"product"`` of complex numbers), a leaf that already spans
            processes or is traced, ranks that pass different calls, ops, trees, shapes
            or dtypes (on every rank), another rank that failed first, or a rank that
            did not arrive within the timeout.
            A ``group`` other than ``None`` and ``async_op=True`` are refused, naming the fix.
        EmptyTreeError: ``tensor`` holds no arrays.

    Examples:
        In a job of two ranks, where each passes its own numbers::

            totals = dist.all_reduce({"loss": local_loss, "seen": 32})
            totals["seen"]  # Array(64, dtype=int32) on every rank
            done = dist.all_reduce(np.array(finished))  # bool: True if any rank finished

        Where rank 0 passes ``np.ones(3)`` and rank 1 ``np.ones(2)``, both raise::

            DistributedError: all_reduce() on rank 0 (call #4): at leaf <root>, rank 0
            has float32[3]; rank 1 has float32[2]. ... Fix: pad each rank's values ...

        Before joining a job, it fails as in torch:

        >>> from torch2jax_device import distributed as dist
        >>> dist.all_reduce(1.0)  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        DistributedError: all_reduce(): Default process group has not been initialized, ...
    """
    _torch_arguments.default_group("all_reduce", group)
    _torch_arguments.synchronous("all_reduce", async_op)
    _require_group("all_reduce")
    flat = trees.flatten(tensor, with_paths=True)  # dicts keep their own order
    call = f"all_reduce(op={op!r})"
    try:
        name = _op_name(op)
        if not flat.leaves:
            raise EmptyTreeError("all_reduce: the tree holds no arrays.")
        originals = [narrowed.original_dtype(leaf) for leaf in flat.leaves]
        for path, leaf, original in zip(flat.paths, flat.leaves, originals, strict=True):
            narrowed.check_fits(leaf, path, original)
        values = [
            _reducible(host_value(leaf, "all_reduce", path), name, path)
            for path, leaf in zip(flat.paths, flat.leaves, strict=True)
        ]
    except Exception as err:
        failure = f"{type(err).__name__}: {str(err)[:500]}"
        synchronize("all_reduce", agreement.Step(call, failure=failure))
        raise
    originals = [original if name in narrowed.CHECKED else None for original in originals]
    leaves = tuple(
        agreement.leaf(path, np.shape(value), narrowed.describe(value.dtype, original))
        for path, value, original in zip(flat.paths, values, originals, strict=True)
    )
    synchronize("all_reduce", agreement.Step(f"all_reduce(op={name!r})", leaves))
    mesh = _process_mesh()
    stacked = NamedSharding(mesh, PartitionSpec("processes"))
    # 2-bit integers cannot cross processes: reduced in their byte-wide kind, then cast
    # back (a sum wraps as an int8 sum does).
    wide = [_BYTE_WIDE.get(np.dtype(value.dtype).name) for value in values]
    per_process = [
        jax.make_array_from_process_local_data(
            stacked,
            (value if kind is None else value.astype(kind))[None],
            (jax.process_count(), *np.shape(value)),
        )
        for value, kind in zip(values, wide, strict=True)
    ]
    for path, array, value, original in zip(
        flat.paths, per_process, values, originals, strict=True
    ):
        if original is not None:  # 64-bit held in 32: a total past 32 bits must not wrap
            narrowed.check_in_range(name, path, array, np.dtype(value.dtype), original)
    reduced = [array.addressable_data(0) for array in _reducer(name, mesh)(per_process)]
    return flat.rebuild(
        [
            result.astype(value.dtype) if kind is not None and result.dtype == kind else result
            for result, value, kind in zip(reduced, values, wide, strict=True)
        ]
    )


def _op_name(op: Any) -> str:
    torch_name = None if isinstance(op, str) else getattr(op, "name", None)
    if isinstance(torch_name, str):  # torch.distributed.ReduceOp.SUM (its RedOpType)
        op = getattr(ReduceOp, torch_name, op)
    name = op.lower() if isinstance(op, str) else op
    if name not in _REDUCTIONS:
        raise DistributedError(
            f"all_reduce: unknown op {op!r}; use one of {', '.join(map(repr, _REDUCTIONS))} "
            "(ReduceOp.AVG is 'mean')."
        )
    return str(name)


def _reducible(value: Any, op: str, path: str) -> Any:
    """``value`` in the dtype the reduction runs in, or raise where torch refuses ``op``.

    NumPy values take the dtype JAX gives them (int64 becomes int32 without x64).
    """
    if is_prng_key(getattr(value, "dtype", None)):
        raise DistributedError(
            f"all_reduce: leaf {path or '<root>'} is a PRNG key ({value.dtype}), which has no "
            "sum, max or mean (torch has no keys). Fix: reduce jax.random.key_data(key) if "
            "the ranks' key data is what you mean to combine, or leave the key out of the tree."
        )
    if isinstance(value, np.ndarray | np.generic):
        value = np.asarray(value, jax.dtypes.canonicalize_dtype(value.dtype))
    dtype = np.dtype(value.dtype)
    if op in _BITWISE and dtype.kind not in "biu":
        raise DistributedError(
            f"all_reduce: op {op!r} takes integers or bools, and leaf {path or '<root>'} is "
            f"{dtype.name} (torch: Cannot use ReduceOp.{op.upper()} with non-integral "
            "dtype). Fix: reduce floating point with 'sum', 'max' or 'min', or cast the "
            "leaf to an integer dtype first."
        )
    if op in _ORDERED and dtype.kind == "c":
        raise DistributedError(
            f"all_reduce: op {op!r} is not defined for complex numbers, and leaf "
            f"{path or '<root>'} is {dtype.name} (torch: all_reduce does not support "
            f"{op.upper()} on complex tensors). Fix: reduce the real and imaginary parts "
            "(or the magnitudes) separately."
        )
    return value


def _require_group(function: str) -> _ProcessGroup:
    if _group is None:
        torch_runs_it = _TORCH_RUNS_IT if _torch_owns_the_job() else ""
        raise DistributedError(
            f"{function}(): {_NOT_INITIALIZED} (torch2jax_device.distributed."
            f"init_process_group, called before JAX starts).{torch_runs_it}"
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
    # torch takes any timedelta; JAX's timeouts stop at 2**31 - 1 seconds (68 years), and
    # a longer one (timedelta.max, "wait forever") waits that long, as near forever.
    return min(seconds, float(_rendezvous.MAX_WAIT))


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


def coordination(what: str) -> tuple[Any, float]:
    """JAX's coordination client, and how long to wait there: the group's timeout.

    Without a group (``jax.distributed.initialize`` called directly), the default timeout.
    """
    timeout_s = _group.timeout_s if _group is not None else _DEFAULT_TIMEOUT_S
    return _coordination_client(what), timeout_s


def synchronize(
    what: str,
    step: agreement.Step | None = None,
    *,
    fix: str = "",
    timeout_s: float | None = None,
) -> None:
    """Meet every rank's matching call at JAX's coordination service, and compare.

    Every rank's ``step`` (default: just the call, ``what()``) is compared with the
    others' there: a rank at another call, with another tree, shape or dtype (the
    ``step``'s leaves), or that failed before the call (a ``step`` with a failure: it only
    waits, then raises its own error) makes every rank raise the same error.

    ``timeout_s`` (default the group's) bounds the wait.

    Raises:
        DistributedError: no process group, some rank did not come in time, or the
            ranks' steps differ (the message names the ranks and the first difference,
            and ``fix`` where given, else how to make shapes and dtypes agree).
    """
    group = _require_group(what)
    client = _coordination_client(what)
    call = next(_synchronizations)
    rank = group.rendezvous.rank
    step = step if step is not None else agreement.Step(f"{what}()")
    timeout_s = group.timeout_s if timeout_s is None else timeout_s
    try:
        steps = agreement.meet_at_barrier(client, "calls", call, step, rank, timeout_s)
    except RuntimeError as err:
        if step.failure is not None:
            return  # this rank raises its own error; the others learn of it or time out
        raise DistributedError(
            f"{what}() on rank {rank} (call #{call}) failed waiting for the "
            f"other ranks (timeout {timeout_s:g} s). Every rank must make the same "
            "sequence of barrier() and all_reduce() calls; a rank that died or is busy "
            f"elsewhere never arrives. JAX's coordination service reported: {err}"
        ) from err
    problem = agreement.disagreement(steps) if steps else None
    if problem is not None:
        raise DistributedError(
            f"{what}() on rank {rank} (call #{call}): {problem}. "
            + (
                fix
                or "Every rank must make the same sequence of barrier(), all_reduce() and "
                "to_device() calls, and pass all_reduce the same op and the same tree "
                "structure, shapes and dtypes: XLA's all-reduce would otherwise return "
                "garbage on one rank and wait forever on another. Fix: pad each rank's "
                "values to one shape (and reduce a count alongside to know how much is "
                "real), cast them to one dtype, or all_reduce the sizes first."
            )
        )


def host_value(leaf: Any, function: str, path: str) -> Any:
    """A leaf (at ``path`` in its tree) as NumPy or a fully addressable ``jax.Array``."""
    where = path or "<root>"
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
    array = np.asarray(leaf)
    if not transfers(array.dtype):  # text, objects, an int past 64 bits
        raise DistributedError(
            f"{function}: leaf {where} is {type(leaf).__name__} {leaf!r:.60}, whose NumPy "
            f"dtype {array.dtype} JAX arrays cannot hold. Fix: keep it out of the batch, or "
            "encode it as numbers (int64 at most) first"
        )
    return array


def _process_mesh() -> Mesh:
    """Every device, one row per process: the mesh cross-process reductions run on."""
    devices = np.array(jax.devices()).reshape(jax.process_count(), jax.local_device_count())
    return Mesh(devices, ("processes", "local"))


@functools.cache
def _reducer(name: str, mesh: Mesh) -> Callable[[list[jax.Array]], list[jax.Array]]:
    reduce = _REDUCTIONS[name]
    replicated = NamedSharding(mesh, PartitionSpec())
    # gloo's all-reduce has no bitwise operations: gather every process's values first.
    gathered = name in _BITWISE

    def reduce_over_processes(arrays: list[jax.Array]) -> list[jax.Array]:
        if gathered:
            arrays = [jax.lax.with_sharding_constraint(a, replicated) for a in arrays]
        return [reduce(array) for array in arrays]

    return jax.jit(reduce_over_processes, out_shardings=replicated)
