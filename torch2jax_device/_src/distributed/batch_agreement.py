"""The processes building global batches together agree on each batch's shapes, or all fail.

A global batch is every process's rows stacked (``make_array_from_process_local_data``),
and each process infers the global shape from its own rows. Local batches of different
lengths (the short last batch of a shard, an ``IterableDataset`` whose shards differ, a
sampler without padding) give each process a different "global" array and a different
loss, with no error. So every batch is compared first (``agreement``): each process
publishes its leaves' local shapes and dtypes and reads the others'.

* ``make_global_batch`` compares before it builds: ``Calls``, one sequence of calls per
  thread (a loader thread and the main thread each keep their own order).
* A ``DeviceLoader`` (or ``prefetch_to_device``) over a multi-process sharding builds its
  batches ahead, in a background thread perhaps, which is harmless (building is local);
  ``agreed_batches`` compares each batch when the loop takes it, so only the batches the
  loop uses are compared, in the loop's order. The end of the loader is compared too: a
  process whose loader has one more batch than another's is an error on both. A loop
  left early (``break``) says so, and the others do not wait for it.

Each comparison costs this process one write and one read per other process to the
coordination service (``docs/distributed.md`` gives the measured cost; on 2 CPU
processes about 0.3-0.5 ms a call, 1.5-2.2 ms a batch with the wait for the other rank,
``docs/benchmarks.md``). The comparison itself (describing the leaves, comparing the
descriptions) is under 0.1 ms of it.

Why every batch, even when its shapes are those of the last agreed one. A rank cannot
skip a comparison on what it alone sees, however it decides: its own batch matching
the last agreed signature says nothing of the others' batch of the same index. Take
a rank whose batch is unchanged and a rank whose batch is short (the last batch of an
uneven shard, the case this module exists for): the first skips and goes on to its
step, the second compares and waits for a description that never comes. The second
times out naming the first as missing (not the shapes), and the first runs its step's
collectives alone and hangs, or computes on a different global array: silent, the
failure this module prevents. Skipping safely needs every rank to skip the same
batches, so the decision may rest only on what every rank knows before the batch: the
agreed past, which cannot tell that one rank's next batch differs. Comparing ahead
(each rank publishing a batch's description when it is built, in the prefetch, and
reading the others' when the loop takes it) would hide the wait but not the guarantee
that ranks take the same number of batches: a rank that leaves its loop (``break``)
after publishing the next batch's description ahead would let the others take that
batch and run its step alone. So each batch costs its write and reads; the test that
holds this is ``loader_short_last`` in ``tests/parity/test_distributed_collectives.py``
(rank 0's batches keep their shape, rank 1's last is short: both must raise).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Generator, Iterator, Sequence
from typing import Any

import jax
import numpy as np

from .. import trees
from ..dtypes import is_prng_key
from ..errors import DistributedError
from . import agreement, process_group
from .agreement import Leaf, Step

__all__ = ["Calls", "agreed_batches", "local_leaves"]

_FIX = (
    "A global batch is every rank's rows stacked, so every rank must bring the same "
    "shapes and dtypes: JAX would otherwise build a different global array on each rank "
    "and compute a different loss on each, silently. Fix: drop_last=True on the "
    "DataLoader (a short last batch), a DistributedSampler (it pads every rank to the "
    "same number of samples), or pad the short batch to the full size and pass a mask "
    "that zeroes the padded rows in the loss. A 0-d leaf (a count, a flag) is one value "
    "for the whole job and must be equal on every rank: all_reduce it first "
    "(dist.all_reduce(n)), or give it the batch axis (one value per row)"
)
_lock = threading.Lock()
_calls: dict[str, itertools.count[int]] = {}
_streams = itertools.count()


def _processes(sharding: jax.sharding.Sharding) -> tuple[int, ...]:
    devices: set[jax.Device] = sharding.device_set
    return tuple(sorted({device.process_index for device in devices}))


def _failure(err: BaseException) -> str:
    return f"{type(err).__name__}: {str(err)[:500]}"


class Calls:
    """This thread's next ``make_global_batch`` call over ``sharding``'s processes."""

    def __init__(self, sharding: jax.sharding.Sharding, function: str) -> None:
        self._ranks = _processes(sharding)
        thread = threading.current_thread().name.replace("/", "|")
        self._sequence = f"{function}/{thread}/{'-'.join(map(str, self._ranks))}"
        with _lock:
            self._index = next(_calls.setdefault(self._sequence, itertools.count()))
        self._function = function
        self._client, self._timeout_s = process_group.coordination(function)

    def failed(self, err: BaseException) -> None:
        """Tell the other processes this one cannot take part (it raises ``err`` itself)."""
        self._meet(Step(self._function, failure=_failure(err)))

    def agree(self, leaves: tuple[Leaf, ...]) -> None:
        """Compare ``leaves`` with every process's.

        Raises:
            DistributedError: they differ, or some process failed or did not come.
        """
        problem = agreement.disagreement(self._meet(Step(self._function, leaves)))
        if problem is not None:
            raise DistributedError(
                f"{self._function} (call #{self._index} of thread "
                f"{threading.current_thread().name}): the ranks' local batches differ: "
                f"{problem}. {_FIX}."
            )

    def _meet(self, step: Step) -> dict[int, Step]:
        return agreement.meet(
            self._client, self._sequence, self._index, step, jax.process_index(),
            self._ranks, self._timeout_s, self._function,
        )  # fmt: skip


def local_leaves(paths: Sequence[str], values: Sequence[Any]) -> tuple[Leaf, ...]:
    """The description of a local batch's data leaves (NumPy or local ``jax.Array``)."""
    return tuple(
        agreement.leaf(path, value.shape, _canonical(value.dtype), _replicated_value(value))
        for path, value in zip(paths, values, strict=True)
        if hasattr(value, "dtype")
    )


def _replicated_value(value: Any) -> str:
    """A 0-d leaf's digest: it is replicated, one value for the whole job, so the ranks'
    values are compared too (a per-rank count would otherwise be a different "global"
    value on each rank). Rows are every rank's own: only their shapes are compared."""
    return agreement.sampled(value) if np.ndim(value) == 0 else ""


def _canonical(dtype: Any) -> Any:
    """The dtype JAX gives a value (int64 as int32 without x64); a PRNG key's as it is."""
    return dtype if is_prng_key(dtype) else jax.dtypes.canonicalize_dtype(dtype)


def _global_leaves(batch: Any) -> tuple[Leaf, ...]:
    """The description of a global batch by the shape of this process's rows of each leaf."""
    flat = trees.flatten(batch, with_paths=True)
    return tuple(
        agreement.leaf(
            path,
            _local_shape(value),
            value.dtype,
            _replicated_value(value.addressable_data(0)) if value.ndim == 0 else "",
        )
        for path, value in zip(flat.paths, flat.leaves, strict=True)
        if isinstance(value, jax.Array)
    )


def _local_shape(array: jax.Array) -> tuple[int, ...]:
    """The shape of the part of ``array`` this process's devices hold (its local rows)."""
    if array.is_fully_addressable:
        return tuple(array.shape)
    indices = array.sharding.addressable_devices_indices_map(array.shape).values()
    shape = []
    for axis, size in enumerate(array.shape):
        bounds = [index[axis].indices(size)[:2] if index else (0, size) for index in indices]
        shape.append(max(stop for _, stop in bounds) - min(start for start, _ in bounds))
    return tuple(shape)


def agreed_batches(
    batches: Generator[Any, None, None], sharding: jax.sharding.Sharding, caller: str
) -> Generator[Any, None, None]:
    """``batches`` (global batches of ``sharding``), each compared across processes as taken.

    The sequence is numbered now, in the calling thread (every process creates its
    loaders' iterators in the same order).
    """
    ranks = _processes(sharding)
    with _lock:
        sequence = f"{caller}-{next(_streams)}/{'-'.join(map(str, ranks))}"
    client, timeout_s = process_group.coordination(caller)

    def meet(index: int, step: Step, *, read: bool = True) -> dict[int, Step]:
        return agreement.meet(
            client, sequence, index, step, jax.process_index(), ranks, timeout_s, caller,
            read=read,
        )  # fmt: skip

    return _checked(iter(batches), meet, caller)


def _checked(batches: Iterator[Any], meet: Any, caller: str) -> Generator[Any, None, None]:
    """Each batch, compared with the other ranks' batch of the same index when taken.

    ``index`` is the next step this rank has not published: a loop left early says so
    there, after the batches it took.
    """
    index, finished = 0, False
    try:
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                finished = True
                _agree_on_end(meet(index, Step(_ended(index))), index, caller)
                return
            except Exception as err:
                finished = True
                meet(index, Step(f"batch #{index}", failure=_failure(err)))
                raise
            index += 1
            steps = meet(index - 1, Step(f"batch #{index - 1}", _global_leaves(batch)))
            problem = agreement.disagreement(steps)
            if problem is not None:
                finished = True
                if any(step.call.startswith(("the end", "leaving")) for step in steps.values()):
                    raise _uneven_count(problem, caller)
                raise DistributedError(
                    f"{caller}: batch #{index - 1} differs between the ranks: {problem}. {_FIX}."
                )
            yield batch
    finally:
        if not finished:  # the loop was left (break, an error in the step)
            # Best effort (at interpreter exit the runtime may be gone): a rank that does
            # not hear of it waits out its timeout and raises.
            with contextlib.suppress(Exception):
                meet(index, Step(_stopped(index)), read=False)
        close = getattr(batches, "close", None)
        if close is not None:
            close()


def _ended(index: int) -> str:
    return f"the end of its batches (after {index})"


def _stopped(index: int) -> str:
    return f"leaving the loop (after {index} batches)"


def _agree_on_end(steps: dict[int, Step], index: int, caller: str) -> None:
    """Every other process ended or left the loop too, or raise naming who has a batch."""
    if all(step.call in (_ended(index), _stopped(index)) for step in steps.values()):
        return
    raise _uneven_count(agreement.disagreement(steps), caller)


def _uneven_count(problem: str | None, caller: str) -> DistributedError:
    return DistributedError(
        f"{caller}: the ranks have different numbers of batches: {problem}. The ranks take "
        "their batches together (each step runs on every rank's rows), so a rank with one "
        "more batch would wait for the others forever. Fix: give every rank the same number "
        "of batches: a DistributedSampler (it pads every rank to the same number of "
        "samples), or an IterableDataset whose shards yield as many batches each (drop the "
        "surplus, or stop every rank at the shortest shard's count)."
    )
