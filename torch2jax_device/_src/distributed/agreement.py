"""Ranks agree on what they bring to a step they take together, or every rank fails alike.

A collective (``all_reduce``) and a jitted step over a global batch run one XLA program
on every process, and that program needs the same call, tree, shapes and dtypes
everywhere. JAX does not check: ``all_reduce`` of a ``(3,)`` array on rank 0 and a
``(2,)`` array on rank 1 returns garbage on rank 1 while rank 0 waits forever, and
``make_array_from_process_local_data`` builds a different "global" batch on each rank
from local batches of different lengths. So before such a step every rank publishes a
``Step`` (what it is doing, and each leaf's path, shape and dtype) in the key-value
store of JAX's coordination service (the one ``jax.distributed`` runs, which the
process group already meets at), reads every other rank's, and compares: every rank
reads the same descriptions, so all reach the same verdict (``disagreement``) and raise
the same error.

Two ways to meet, for two kinds of sequence:

* ``meet_at_barrier``: the process group's ordered calls (``barrier``, ``all_reduce``,
  ``to_device``'s gather). Publish, wait at the coordination service's barrier (which
  names the ranks that did not come), read everyone's in one directory read.
* ``meet``: a stream of batches (a ``DeviceLoader``'s iteration, one thread's
  ``make_global_batch`` calls). Publish, then read each other rank's key: no barrier,
  so a rank that stopped taking batches (``break``) can say so without waiting.

A rank that fails before a step (a leaf it cannot convert) publishes its failure in the
step's place, so the others raise at once, naming it, instead of waiting out the timeout.

Keys are ``torch2jax_device/agree/{sequence}/{block}/{index}/{rank}``. A rank publishes
index ``n`` only after it has read everyone's ``n - 1``, so once it has read everyone's
``n``, every key below ``n`` has been read by all: then, at the start of each block of
``BLOCK`` indices, the lowest taking part deletes the block before: a long job keeps at
most two blocks per sequence in the store.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

import jax
import numpy as np

from ..dtypes import is_prng_key
from ..errors import DistributedError
from .rendezvous import whole_milliseconds

__all__ = ["BLOCK", "Step", "disagreement", "leaf", "meet", "meet_at_barrier", "shown"]

#: Indices per block of keys; a block is deleted once every rank has read it.
BLOCK = 16
_ROOT = "torch2jax_device/agree"
# How many ranks a message lists by number before it counts the rest.
_RANKS_SHOWN = 8

#: A leaf as described: its path in the tree, its shape and its dtype's name.
Leaf = tuple[str, tuple[int, ...], str]


@dataclasses.dataclass(frozen=True)
class Step:
    """What one rank brings to a step: the call, its leaves, or the error that stopped it."""

    call: str
    leaves: tuple[Leaf, ...] = ()
    failure: str | None = None

    def to_text(self) -> str:
        leaves = [[path, list(shape), dtype] for path, shape, dtype in self.leaves]
        return json.dumps([self.call, leaves, self.failure])

    @classmethod
    def from_text(cls, text: str) -> Step:
        call, leaves, failure = json.loads(text)
        return cls(
            call, tuple((path, tuple(shape), dtype) for path, shape, dtype in leaves), failure
        )


def leaf(path: str, shape: Iterable[int], dtype: Any, values: str = "") -> Leaf:
    """One leaf's description: ``path`` (``""`` is the root), shape and dtype, and where
    given a digest of its ``values`` (`sampled`), compared with the rest."""
    # A PRNG key's dtype is JAX's own (key<fry>), which NumPy does not know.
    name = str(dtype) if is_prng_key(dtype) else np.dtype(dtype).name
    return (
        path or "<root>",
        tuple(int(size) for size in shape),
        f"{name}{_VALUES}{values}" if values else name,
    )


#: Between a leaf's dtype and the digest of its values, in its description.
_VALUES = " with values #"
#: Elements sampled from each end and the middle of an array: a different seed or a
#: different checkpoint differs in all of them; a change to one element may not.
_SAMPLED = 16


def sampled(array: Any) -> str:
    """A short digest of ``array``'s first, middle and last elements (device arrays give
    only those to the host): equal on ranks whose copies are equal. PRNG keys are
    sampled by their key data (an nnx.Dropout's ``rngs``, a key in a state)."""
    if is_prng_key(getattr(array, "dtype", None)):
        array = jax.random.key_data(array)
    size = int(np.prod(np.shape(array), dtype=np.int64))
    ends = {*range(min(size, _SAMPLED))}
    ends |= {*range(max(0, size // 2 - _SAMPLED // 2), min(size, size // 2 + _SAMPLED // 2))}
    ends |= {*range(max(0, size - _SAMPLED), size)}
    flat = array.reshape(-1)
    values = np.asarray(flat[np.array(sorted(ends), dtype=np.int64)] if ends else flat[:0])
    return hashlib.blake2b(values.tobytes(), digest_size=6).hexdigest()


def shown(described: Leaf | None) -> str:
    """``float32[4, 3]``: a leaf's dtype and shape as messages show them (and the digest
    of its values where it was sampled: ``float32[4, 3] with values #3fa2c1...``)."""
    if described is None:
        return "no such leaf"
    _, shape, dtype = described
    name, _, values = dtype.partition(_VALUES)
    return f"{name}[{', '.join(map(str, shape))}]" + (f"{_VALUES}{values}" if values else "")


def meet_at_barrier(
    client: Any, sequence: str, index: int, step: Step, rank: int, timeout_s: float
) -> dict[int, Step]:
    """Publish ``step``, wait for every process at the barrier, return everyone's steps.

    A ``step`` with a failure only publishes and waits (its rank raises its own error),
    and gets ``{}``.

    Raises:
        RuntimeError: JAX's barrier timed out or a process died (the caller words it).
    """
    client.key_value_set(_key(sequence, index, rank), step.to_text())
    client.wait_at_barrier(f"{_ROOT}/{sequence}/{index}", whole_milliseconds(timeout_s))
    if step.failure is not None:
        return {}
    found = client.key_value_dir_get(f"{_ROOT}/{sequence}/{index // BLOCK}/{index}/")
    steps = {int(key.rsplit("/", 1)[1]): Step.from_text(text) for key, text in found}
    _forget_old_blocks(client, sequence, index, rank, min(steps))
    return steps


def meet(
    client: Any,
    sequence: str,
    index: int,
    step: Step,
    rank: int,
    ranks: Sequence[int],
    timeout_s: float,
    what: str,
    *,
    read: bool = True,
) -> dict[int, Step]:
    """Publish ``step``, then read the step of each rank in ``ranks`` (this one included).

    A ``step`` with a failure, or ``read=False`` (this rank stops taking part), only
    publishes and gets ``{}``: it waits for nobody.

    Raises:
        DistributedError: some rank did not publish its step within ``timeout_s``; the
            message starts with ``what`` and names the rank.
    """
    client.key_value_set(_key(sequence, index, rank), step.to_text())
    if step.failure is not None or not read:
        return {}
    limit = time.monotonic() + timeout_s
    steps = {rank: step}
    for other in ranks:
        if other == rank:
            continue
        remaining = max(limit - time.monotonic(), 0.001)
        try:
            text = client.blocking_key_value_get(
                _key(sequence, index, other), whole_milliseconds(remaining)
            )
        except Exception as err:  # JAX raises its XlaRuntimeError, a RuntimeError
            raise DistributedError(
                f"{what}: rank {rank} waited {timeout_s:g} s for rank {other} to reach the same "
                f"step (#{index} of {sequence}) and it did not: it is still busy elsewhere "
                "(longer than the timeout), it failed, or it died. Every rank must take the "
                "same steps. Fix: give every rank the same number of batches (drop_last=True, "
                "a DistributedSampler), or a longer timeout in init_process_group. JAX's "
                f"coordination service reported: {str(err)[:300]}"
            ) from err
        steps[other] = Step.from_text(text)
    _forget_old_blocks(client, sequence, index, rank, min(ranks))
    return steps


def disagreement(steps: dict[int, Step]) -> str | None:
    """How the ranks' steps differ, in words (the first difference), or ``None``.

    The same on every rank that reads the same steps.
    """
    failed = {rank: step.failure for rank, step in steps.items() if step.failure is not None}
    if failed:
        rank, failure = min(failed.items())
        return f"rank {rank} failed before it could take part: {failure}"
    calls = _grouped({rank: step.call for rank, step in steps.items()})
    if len(calls) > 1:
        return "the ranks are at different calls: " + "; ".join(
            f"{_ranks(ranks)} at {call}" for call, ranks in calls
        )
    paths = _grouped({rank: tuple(p for p, _, _ in step.leaves) for rank, step in steps.items()})
    if len(paths) > 1:
        return "the ranks pass different trees: " + "; ".join(
            f"{_ranks(ranks)} {'has' if len(ranks) == 1 else 'have'} the leaves {_listed(tree)}"
            for tree, ranks in paths
        )
    first = steps[min(steps)]
    differing = [
        index
        for index in range(len(first.leaves))
        if len({step.leaves[index] for step in steps.values()}) > 1
    ]
    if not differing:
        return None
    path = first.leaves[differing[0]][0]
    kinds = _grouped({rank: shown(step.leaves[differing[0]]) for rank, step in steps.items()})
    others = len(differing) - 1
    return (
        f"at leaf {path}, "
        + "; ".join(
            f"{_ranks(ranks)} {'has' if len(ranks) == 1 else 'have'} {kind}"
            for kind, ranks in kinds
        )
        + (f" ({others} more leaves differ too)" if others else "")
    )


def _grouped(values: dict[int, Any]) -> list[tuple[Any, list[int]]]:
    """The distinct values, each with the ranks holding it, in order of their first rank."""
    groups: dict[Any, list[int]] = {}
    for rank in sorted(values):
        groups.setdefault(values[rank], []).append(rank)
    return list(groups.items())


def _ranks(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    listed = ", ".join(map(str, ranks[:_RANKS_SHOWN]))
    more = f" and {len(ranks) - _RANKS_SHOWN} more" if len(ranks) > _RANKS_SHOWN else ""
    return f"ranks {listed}{more}"


def _listed(paths: tuple[str, ...]) -> str:
    if not paths:
        return "(none)"
    return ", ".join(paths[:_RANKS_SHOWN]) + (
        f" and {len(paths) - _RANKS_SHOWN} more" if len(paths) > _RANKS_SHOWN else ""
    )


def _key(sequence: str, index: int, rank: int) -> str:
    return f"{_ROOT}/{sequence}/{index // BLOCK}/{index}/{rank}"


def _forget_old_blocks(client: Any, sequence: str, index: int, rank: int, lowest: int) -> None:
    """At a block's first index, the lowest rank deletes the block before (read by all)."""
    if rank == lowest and index % BLOCK == 0 and index >= BLOCK:
        client.key_value_delete(f"{_ROOT}/{sequence}/{index // BLOCK - 1}")
