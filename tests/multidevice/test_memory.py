"""Live arrays and leak tracking per device, with 4 simulated CPU devices."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import torch2jax_device as tj

CPUS = jax.local_devices(backend="cpu")


def test_live_arrays_of_one_device() -> None:
    on_one = jax.device_put(jnp.ones(4), CPUS[1])
    on_two = jax.device_put(jnp.ones(4), CPUS[2])
    found = tj.live_arrays("cpu:1")
    assert any(a is on_one for a in found) and not any(a is on_two for a in found)


def test_track_arrays_counts_only_the_tracked_device() -> None:
    mesh = Mesh(np.array(CPUS), ("data",))
    keep = []
    with tj.track_arrays("cpu:2") as report:
        keep.append(jax.device_put(jnp.zeros(100), CPUS[2]))
        keep.append(jax.device_put(jnp.zeros(100), CPUS[3]))
        keep.append(jax.device_put(jnp.zeros(8), NamedSharding(mesh, PartitionSpec("data"))))
    # The cpu:2 array (400 bytes) and the sharded one's cpu:2 shard (2 floats, 8 bytes).
    assert len(report.arrays) == 2
    assert report.nbytes == 400 + 8
    assert str(report).startswith("2 array(s), 408 bytes left on cpu:2")
