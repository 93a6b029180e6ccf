"""Prefetching onto 4 simulated CPU devices: shardings, other devices, whose default device."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np
import pytest
import torch
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from torch.utils.data import DataLoader, TensorDataset

import torch2jax_device as tj
from tests.support.deadlines import deadline
from torch2jax_device import DeviceLoader, prefetch_to_device

CPUS = jax.local_devices(backend="cpu")
DEADLINE = deadline(10.0)


def batches(count: int, rows: int = 8) -> list[dict[str, Any]]:
    return [
        {"x": np.arange(rows * 3, dtype=np.float32).reshape(rows, 3) + i, "id": i}
        for i in range(count)
    ]


def in_thread(fn: Any) -> Any:
    """``fn()`` in a fresh thread (which starts with JAX's process default device)."""
    outcome: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: outcome.update(value=fn()), daemon=True)
    worker.start()
    worker.join(DEADLINE)
    assert not worker.is_alive() and "value" in outcome, f"no result within {DEADLINE} s"
    return outcome["value"]


@pytest.fixture
def batch_sharding() -> NamedSharding:
    return NamedSharding(Mesh(np.array(CPUS), ("batch",)), PartitionSpec("batch"))


@pytest.mark.parametrize("background", [False, True, None])
@pytest.mark.parametrize("pinned", [False, True])
def test_a_sharding_splits_every_batch_over_the_devices(
    batch_sharding: NamedSharding, pinned: bool, background: bool | None
) -> None:
    # In the calling thread, batches are placed in groups: one transfer of several
    # batches must split each of them as it would alone.
    loader = DeviceLoader(batches(3), batch_sharding, pin_memory=pinned, background=background)
    placed = in_thread(lambda: list(loader))
    step = jax.jit(lambda x: x.sum(axis=1))
    for index, batch in enumerate(placed):
        x = batch["x"]
        assert x.sharding == batch_sharding and x.sharding.memory_kind == "device"
        shards = sorted(x.addressable_shards, key=lambda shard: shard.index[0].start)
        assert [shard.device for shard in shards] == CPUS
        assert [shard.data.shape for shard in shards] == [(2, 3)] * 4
        np.testing.assert_array_equal(np.asarray(x), batches(3)[index]["x"])
        assert batch["id"] == index
        assert step(x).sharding.spec == PartitionSpec("batch")  # compute stays split


def test_a_torch_dataloader_feeds_sharded_batches(batch_sharding: NamedSharding) -> None:
    dataset = TensorDataset(torch.arange(48, dtype=torch.float32).reshape(16, 3))
    loader = DeviceLoader(DataLoader(dataset, batch_size=8), batch_sharding)
    placed = in_thread(lambda: [x for (x,) in loader])
    assert [x.sharding for x in placed] == [batch_sharding] * 2
    np.testing.assert_array_equal(np.concatenate([np.asarray(x) for x in placed]), dataset[:][0])


@pytest.mark.parametrize("background", [False, True])
@pytest.mark.parametrize("spec", ["cpu:2", "cpu:3"])
def test_a_device_other_than_the_first(spec: str, background: bool) -> None:
    placed = in_thread(lambda: list(prefetch_to_device(batches(4), spec, background=background)))
    assert all(batch["x"].devices() == {tj.resolve(spec)} for batch in placed)
    assert all(batch["x"].committed for batch in placed)


def test_the_default_device_is_the_callers_when_the_stream_is_made() -> None:
    def made_under_cpu3() -> Iterator[Any]:
        with tj.device("cpu:3"):
            return prefetch_to_device(batches(3))

    stream = made_under_cpu3()  # consumed outside the context, fed by another thread
    placed = in_thread(lambda: list(stream))
    assert [batch["x"].devices() for batch in placed] == [{CPUS[3]}] * 3


def test_each_epoch_reads_the_default_device_of_the_thread_that_starts_it() -> None:
    loader = DeviceLoader(batches(2))

    def epoch_under(spec: str) -> list[set[jax.Device]]:
        tj.set_default_device(spec)
        return [batch["x"].devices() for batch in loader]

    assert in_thread(lambda: epoch_under("cpu:1")) == [{CPUS[1]}] * 2
    assert in_thread(lambda: epoch_under("cpu:2")) == [{CPUS[2]}] * 2
    assert in_thread(lambda: [batch["x"].devices() for batch in loader]) == [{CPUS[0]}] * 2
