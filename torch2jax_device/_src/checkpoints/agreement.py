"""Processes that load a checkpoint together agree on what each tensor is, or all fail.

In a job of several processes every process reads its own parts of each tensor and the
parts become one global array (``jax.make_array_from_single_device_arrays``), each
process stating the global shape from its own file. JAX cannot see that two processes
read different files (a stale copy on one host, a shard written in between): rank 0
would build ``w`` as (4, 6), rank 1 as (8, 6), and a jitted step would compute on the
mix with no error. So before any part is read, every process publishes the name, global
shape and dtype of each tensor it is about to load through JAX's coordination service
(the key-value store Orbax synchronizes hosts with), reads everyone's, and compares:
every process sees the same descriptions, so all reach the same verdict and raise the
same error, naming the tensor and both shapes. Only tensors whose sharding spans
processes are described, and only the processes holding their devices take part: a
load onto one process's own devices (rank 0 reading a checkpoint alone) asks nobody.

Copies that agree on every shape and dtype can still hold different values: a host
with the checkpoint of an earlier step, a file rewritten on one host. Comparing every
byte would cost a full read of every tensor on every process, so the processes compare
a sample instead: each reads the first elements, the first elements of the middle row
and the last elements of each shared tensor (``SAMPLE_ELEMENTS`` at each place: at most
three small reads, wherever the process's own parts are), of at most
``SAMPLED_TENSORS`` tensors spread evenly over the names, and publishes a digest of
them with the descriptions. Checkpoints of different training steps differ at
all three places of every trained tensor; a change confined to elements not sampled
(one corrupted byte in the middle of a tensor) is not seen.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, Sharding

from ..errors import CheckpointError
from .messages import shown

__all__ = [
    "SAMPLED_TENSORS",
    "SAMPLE_ELEMENTS",
    "TIMEOUT_S",
    "agree",
    "failing_together",
    "sample_windows",
]

#: How long a process waits for the others to describe their tensors (torch's default
#: process-group timeout).
TIMEOUT_S = 600
# The processes holding a load's devices make the same sequence of loads together, so
# the n-th load of one group of processes has the same number in each of them: how many
# loads each group has made.
_loads: collections.Counter[tuple[int, ...]] = collections.Counter()

#: A tensor about to be loaded: its name, global shape, dtype and target sharding.
Description = tuple[str, tuple[int, ...], np.dtype[Any], Sharding]
#: Reads a tensor's sample (``sample_windows``) by name: the file it reads, and the bytes.
Sampler = Callable[[str], tuple[str, bytes]]
#: Elements read at each of the three sampled places of a tensor.
SAMPLE_ELEMENTS = 16
#: The most tensors of one load whose values are sampled.
SAMPLED_TENSORS = 256
# What a process publishes for one sampled tensor: [digest, file], or ["", error message].
_Sampled = list[str]
_Described = dict[str, tuple[list[int], str]]


def sample_windows(shape: tuple[int, ...]) -> list[tuple[Any, ...]]:
    """The basic indices of a tensor's sample: its first ``SAMPLE_ELEMENTS`` elements,
    those starting its middle row (along dimension 0) and its last ones, in C order.

    Each is one contiguous run of the last dimension, so reading one is one small read
    of the file (``Reader.read_selection``) or of a mapped storage. A tensor with no
    elements has no sample; a scalar's is itself.

    Examples:
        >>> sample_windows((8, 6))
        [(0, slice(0, 16, None)), (4, slice(0, 16, None)), (-1, slice(-16, None, None))]
        >>> sample_windows(())
        [()]
    """
    if 0 in shape:
        return []
    if not shape:
        return [()]
    run, last = slice(0, SAMPLE_ELEMENTS), slice(-SAMPLE_ELEMENTS, None)
    if len(shape) == 1:
        middle = slice(shape[0] // 2, shape[0] // 2 + SAMPLE_ELEMENTS)
        return [(run,), (middle,), (last,)]
    rest = (0,) * (len(shape) - 2)
    return [(0, *rest, run), (shape[0] // 2, *rest, run), (*(-1,) * (len(shape) - 1), last)]


def agree(tensors: Iterable[Description], what: str, sample: Sampler | None = None) -> None:
    """Check that the processes loading ``tensors`` together read the same shapes and
    dtypes, and the same values where ``sample`` reads them.

    ``tensors`` describe what this process is about to load; ``what`` names the load
    for messages; ``sample(name)`` reads the tensor's ``sample_windows`` from this
    process's file (called for at most ``SAMPLED_TENSORS`` of the shared tensors, and
    only when another process takes part). Those whose sharding spans several processes
    are compared among the processes holding their devices, each of which makes the same
    load (as it must for the arrays to exist); nothing else is compared, and nobody is
    asked.

    Raises:
        CheckpointError: the processes disagree (the message names the tensor, both
            processes, what each read and from which file), a process could not read
            its sample, or another process did not describe its tensors within
            ``TIMEOUT_S`` (it failed, or makes a different call).
    """
    shared: list[Description] = [
        description for description in tensors if not description[3].is_fully_addressable
    ]
    holders: set[int] = set()
    for *_, sharding in shared:
        devices: set[jax.Device] = sharding.device_set
        holders.update(device.process_index for device in devices)
    found = _load_of(tuple(sorted(holders)))
    if found is None:
        return
    client, prefix, processes = found
    me = jax.process_index()
    mine = {
        "tensors": [[name, list(shape), str(dtype)] for name, shape, dtype, _ in shared],
        "samples": _samples(sorted({name for name, *_ in shared}), sample),
    }
    client.key_value_set(f"{prefix}{me}", json.dumps(mine))
    described: dict[int, _Described] = {}
    sampled: dict[int, dict[str, _Sampled]] = {}
    for process in processes:
        try:
            text = client.blocking_key_value_get(f"{prefix}{process}", TIMEOUT_S * 1000)
        except Exception as err:  # JAX raises a RuntimeError-like XlaRuntimeError
            raise CheckpointError(
                f"{what}: process {me} waited {TIMEOUT_S} s for process {process} to say "
                "which tensors it loads, and it did not: it died, or makes a different "
                "call. Every process must make the same loads. JAX's coordination service "
                f"reported: {shown(str(err), 400)}"
            ) from err
        theirs = json.loads(text)
        if "failed" in theirs:
            raise CheckpointError(
                f"{what}: process {process} failed before the processes could compare this "
                f"load, so no process makes it: {theirs['failed']}. Fix what that process "
                "reports (its own error, with the traceback, is in its output)"
            )
        described[process] = {name: (shape, dtype) for name, shape, dtype in theirs["tensors"]}
        sampled[process] = theirs["samples"]
    _compare(described, what)
    _compare_samples(described, sampled, what)


@contextlib.contextmanager
def failing_together(target: Any) -> Iterator[None]:
    """Around what a process does before ``agree`` in a load onto ``target`` (opening the
    files, planning each tensor): if it fails, tell the other processes of ``target``'s
    devices, which wait in ``agree`` for this process's description, so that they fail
    at once naming this process's error instead of waiting ``TIMEOUT_S``.

    Only a target whose devices are known before reading (a mesh, a sharding, a rule over
    a mesh) can be told about; the processes of a callable's shardings are not known.
    """
    processes = _processes_of(target)
    before = _loads[processes]
    try:
        yield
    except Exception as err:
        # Told already: by ``agree`` in this stretch, or by a stretch inside it.
        found = None if _loads[processes] != before else _load_of(processes)
        if found is not None:
            client, prefix, _ = found
            failure = f"{type(err).__name__}: {shown(str(err), 600)}"
            client.key_value_set(f"{prefix}{jax.process_index()}", json.dumps({"failed": failure}))
        raise


def _processes_of(target: Any) -> tuple[int, ...]:
    """The processes holding ``target``'s devices; none for a target that does not say."""
    mesh = target if isinstance(target, Mesh) else getattr(target, "mesh", None)
    if isinstance(target, Sharding):
        devices: Iterable[jax.Device] = target.device_set
    elif isinstance(mesh, Mesh):
        devices = mesh.devices.flat
    else:
        return ()
    return tuple(sorted({device.process_index for device in devices}))


def _load_of(processes: tuple[int, ...]) -> tuple[Any, str, tuple[int, ...]] | None:
    """The next load ``processes`` make together: JAX's key-value store, the prefix of
    each process's key for this load, the processes; ``None`` where nobody is asked (one
    process, or several without JAX's distributed runtime)."""
    if jax.process_count() == 1 or len(processes) < 2:
        return None
    from jax._src import distributed as jax_distributed  # its key-value store: not exported

    client = jax_distributed.global_state.client
    if client is None:
        return None
    group = "-".join(map(str, processes))
    prefix = f"torch2jax_device/checkpoints/{group}/load-{_loads[processes]}/process-"
    _loads[processes] += 1
    return client, prefix, processes


def _samples(names: list[str], sample: Sampler | None) -> dict[str, _Sampled]:
    """This process's digest of each sampled tensor (evenly spread over ``names``)."""
    if sample is None or not names:
        return {}
    step = max(1, -(-len(names) // SAMPLED_TENSORS))
    found: dict[str, _Sampled] = {}
    for name in names[::step]:
        try:
            file, data = sample(name)
        except Exception as err:  # published, so every process fails with this message
            found[name] = ["", f"{type(err).__name__}: {shown(str(err), 400)}"]
            continue
        found[name] = [hashlib.blake2b(data, digest_size=16).hexdigest(), file]
    return found


def _compare(described: dict[int, _Described], what: str) -> None:
    """Raise the same error on every process for the first disagreement, if any."""
    first, *others = sorted(described)
    reference = described[first]
    for process in others:
        theirs = described[process]
        for name in sorted(reference.keys() | theirs.keys()):
            if reference.get(name) == theirs.get(name):
                continue
            raise CheckpointError(
                f"{what}: the processes loading it disagree on tensor {shown(name)}: "
                f"process {first} reads {_described(reference.get(name))}, process "
                f"{process} {_described(theirs.get(name))}. Each process reads its parts "
                "from its own copy of the files, and the parts of one array must come from "
                "the same tensor. Fix: give every process the same checkpoint (the same "
                "files, unchanged since the job started)"
            )


def _described(entry: tuple[list[int], str] | None) -> str:
    if entry is None:
        return "no such tensor"
    shape, dtype = entry
    return f"shape {tuple(shape)} of {dtype}"


def _compare_samples(
    described: dict[int, _Described], sampled: dict[int, dict[str, _Sampled]], what: str
) -> None:
    """Raise the same error on every process for the first sample that could not be
    read or differs, if any (the descriptions agree already)."""
    first, *others = sorted(sampled)
    for process in sorted(sampled):
        for name, (digest, detail) in sorted(sampled[process].items()):
            if not digest:
                raise CheckpointError(
                    f"{what}: process {process} could not read the elements of tensor "
                    f"{shown(name)} that the processes compare ({detail}), so no process "
                    "loads it. Fix: the message after the colon says what went wrong with "
                    "that process's copy of the checkpoint"
                )
    reference = sampled[first]
    for process in others:
        theirs = sampled[process]
        for name in sorted(reference.keys() & theirs.keys()):
            (mine, my_file), (other, their_file) = reference[name], theirs[name]
            if mine == other:
                continue
            raise CheckpointError(
                f"{what}: the processes loading it read different values for tensor "
                f"{shown(name)} ({_described(described[first].get(name))} on both): process "
                f"{first} read it from {shown(my_file)}, process {process} from "
                f"{shown(their_file)}, and its elements the processes compare (the first "
                f"{SAMPLE_ELEMENTS}, those starting its middle row, the last {SAMPLE_ELEMENTS}) "
                "differ. Each process reads its parts from its own copy of the files, and the "
                "parts of one array must come from the same tensor. Fix: give every process "
                "the same checkpoint (the same files, unchanged since the job started; "
                "sha256sum on each host shows which copy differs)"
            )
