"""Sharded loading in a 2-process job: each rank reads only what its devices hold.

``sharded_loads(DIR, mesh)``, called by ``checkpoint_worker.py`` in each rank of a job of
2 processes x 2 CPU devices. ``DIR`` holds ``model.safetensors`` (written by the test),
the same tensors as a PyTorch checkpoint (``model.pt``) and split over two files with an
index (``split/model.safetensors.index.json``). It returns this rank's facts: how many
bytes it read for a whole load and for a sharded load, which parts its devices hold, and
whether every loaded value equals safetensors' own NumPy load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from safetensors.numpy import load_file as numpy_load_file

import torch2jax_device as tj
from torch2jax_device import distributed as dist


def bytes_read() -> int:
    """Bytes this process has read through system calls (``rchar``), as the reader reads.

    A whole load must read at least the file's size (the test checks it), which shows
    the measure sees the reader's reads.
    """
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))


def measured(load: Any) -> tuple[Any, int]:
    before = bytes_read()
    result = load()
    return result, bytes_read() - before


def shard_shapes(array: jax.Array) -> list[list[int]]:
    return sorted(list(shard.data.shape) for shard in array.addressable_shards)


def equal(loaded: dict[str, jax.Array], expected: dict[str, np.ndarray]) -> bool:
    """Every array gathered to the host equals the reference (every rank gathers)."""
    on_host = tj.to_device(loaded, "cpu")
    return sorted(on_host) == sorted(expected) and all(
        np.array_equal(np.asarray(on_host[name]), expected[name]) for name in expected
    )


def sharded_loads(folder: Path, mesh: Mesh) -> dict[str, Any]:
    """This rank's facts about every sharded load of ``folder``'s checkpoints."""
    rule = tj.ShardingRule(mesh, {"*.weight": P("data", None), "columns": P(None, "data")})
    path = folder / "model.safetensors"
    expected = numpy_load_file(path)

    tj.load_file(folder / "warm-up.safetensors", device=rule)  # compile JAX's helpers first
    # "pread": a whole CPU load would otherwise map the file and read nothing yet.
    whole, whole_bytes = measured(lambda: tj.load_file(path, backend="pread"))
    del whole
    sharded, sharded_bytes = measured(lambda: tj.load_file(path, device=rule))
    replicated = tj.load_file(path, device=NamedSharding(mesh, P()))
    with tj.safe_open(path, device=rule) as file:
        opened = {name: file.get_tensor(name) for name in file.keys()}
        window = file.get_slice("big.weight")[8:16]
    from_torch = tj.load(folder / "model.pt", map_location=rule)
    from_index = tj.load_file(folder / "split" / "model.safetensors.index.json", device=rule)
    return {
        "rank": dist.get_rank(),
        "whole_bytes": whole_bytes,
        "sharded_bytes": sharded_bytes,
        "big_weight_shards": shard_shapes(sharded["big.weight"]),
        "columns_shards": shard_shapes(sharded["columns"]),
        "bias_shards": shard_shapes(sharded["big.bias"]),
        "specs": {name: str(array.sharding.spec) for name, array in sharded.items()},
        "sharded_equal": equal(sharded, expected),
        "replicated_equal": equal(replicated, expected),
        "safe_open_equal": equal(opened, expected),
        "window_equal": np.array_equal(
            np.asarray(tj.to_device(window, "cpu")), expected["big.weight"][8:16]
        ),
        "window_shards": shard_shapes(window),
        "torch_equal": equal(from_torch["model"], expected),
        "torch_step": from_torch["step"],
        "torch_shards": shard_shapes(from_torch["model"]["big.weight"]),
        "index_equal": equal(from_index, expected),
        "index_shards": shard_shapes(from_index["big.weight"]),
    }
