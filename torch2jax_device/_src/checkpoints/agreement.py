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
"""

from __future__ import annotations

import collections
import itertools
import json
from collections.abc import Iterable
from typing import Any

import jax
import numpy as np
from jax.sharding import Sharding

from ..errors import CheckpointError
from .messages import shown

__all__ = ["TIMEOUT_S", "agree"]

#: How long a process waits for the others to describe their tensors (torch's default
#: process-group timeout).
TIMEOUT_S = 600
# The processes holding a load's devices make the same sequence of loads together, so
# the n-th load of one group of processes has the same number in each of them.
_loads: collections.defaultdict[tuple[int, ...], itertools.count[int]]
_loads = collections.defaultdict(itertools.count)

#: A tensor about to be loaded: its name, global shape, dtype and target sharding.
Description = tuple[str, tuple[int, ...], np.dtype[Any], Sharding]


def agree(tensors: Iterable[Description], what: str) -> None:
    """Check that the processes loading ``tensors`` together read the same shapes and dtypes.

    ``tensors`` describe what this process is about to load; ``what`` names the load
    for messages. Those whose sharding spans several processes are compared among the
    processes holding their devices, each of which makes the same load (as it must for
    the arrays to exist); nothing else is compared, and nobody is asked.

    Raises:
        CheckpointError: the processes disagree (the message names the tensor, both
            processes and what each read), or another process did not describe its
            tensors within ``TIMEOUT_S`` (it failed, or makes a different call).
    """
    if jax.process_count() == 1:
        return
    shared: list[Description] = [
        description for description in tensors if not description[3].is_fully_addressable
    ]
    holders: set[int] = set()
    for *_, sharding in shared:
        devices: set[jax.Device] = sharding.device_set
        holders.update(device.process_index for device in devices)
    processes = tuple(sorted(holders))
    if len(processes) < 2:
        return
    from jax._src import distributed as jax_distributed  # its key-value store: not exported

    client = jax_distributed.global_state.client
    if client is None:
        return  # several processes without JAX's distributed runtime: nothing to ask
    group = "-".join(map(str, processes))
    prefix = f"torch2jax_device/checkpoints/{group}/load-{next(_loads[processes])}/process-"
    me = jax.process_index()
    client.key_value_set(
        f"{prefix}{me}",
        json.dumps([[name, list(shape), str(dtype)] for name, shape, dtype, _ in shared]),
    )
    described: dict[int, dict[str, tuple[list[int], str]]] = {}
    for process in processes:
        try:
            text = client.blocking_key_value_get(f"{prefix}{process}", TIMEOUT_S * 1000)
        except Exception as err:  # JAX raises a RuntimeError-like XlaRuntimeError
            raise CheckpointError(
                f"{what}: process {me} waited {TIMEOUT_S} s for process {process} to say "
                "which tensors it loads, and it did not: it failed before this load or "
                f"makes a different call. Every process must make the same loads. JAX's "
                f"coordination service reported: {shown(str(err), 400)}"
            ) from err
        described[process] = {name: (shape, dtype) for name, shape, dtype in json.loads(text)}
    _compare(described, what)


def _compare(described: dict[int, dict[str, tuple[list[int], str]]], what: str) -> None:
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
