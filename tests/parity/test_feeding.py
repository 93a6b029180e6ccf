"""Feeding the device: a torch DataLoader loop against DeviceLoader / prefetch_to_device.

The torch side is the loop every PyTorch script has: ``DataLoader(...)`` (with
``pin_memory=True`` where asked) and ``batch.to(device, non_blocking=True)``. The port
wraps the same loader. Batch by batch, both must agree on placement, dtype, values and
order; for a device that does not exist here, both must fail alike.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import torch2jax_device as tj
from tests.support.deadlines import deadline
from torch2jax_device import DeviceLoader, pin_memory, prefetch_to_device

from .harness import Outcome, assert_same_outcome, run

DEVICES = ["cpu", "cuda", "cuda:1"]


def dataset() -> TensorDataset:
    features = torch.arange(30, dtype=torch.float32).reshape(10, 3)
    return TensorDataset(features, torch.arange(10, dtype=torch.int32))


def shuffled_loader(**options: Any) -> DataLoader[Any]:
    """The same shuffled order every time it is built (so both sides see one order)."""
    generator = torch.Generator().manual_seed(0)
    return DataLoader(dataset(), batch_size=4, shuffle=True, generator=generator, **options)


def torch_epoch(loader: DataLoader[Any], device: str) -> list[list[torch.Tensor]]:
    with warnings.catch_warnings():
        # A CPU-only torch warns that it will not pin; that is torch's business.
        warnings.filterwarnings("ignore", message="'pin_memory' argument is set as true")
        return [[t.to(device, non_blocking=True) for t in batch] for batch in loader]


def assert_same_batches(torch_fn: Callable[[], list[Any]], tj_fn: Callable[[], Any]) -> None:
    """Both epochs succeed with the same batches in the same order, or both fail alike."""
    theirs, ours = run(torch_fn), run(lambda: list(tj_fn()))
    if theirs.error is not None or ours.error is not None:
        assert_same_outcome(theirs, ours)
        return
    assert len(ours.value) == len(theirs.value)
    for torch_batch, tj_batch in zip(theirs.value, ours.value, strict=True):
        assert_same_outcome(Outcome(torch_batch), Outcome(tj_batch))


#: Where the port's source runs: the calling thread, a background thread, automatic.
BACKGROUNDS = [False, True, None]


@pytest.mark.idiom("dataloader-to-device")
@pytest.mark.parametrize("background", BACKGROUNDS)
@pytest.mark.parametrize("device", DEVICES)
def test_dataloader_loop(device: str, background: bool | None) -> None:
    assert_same_batches(
        lambda: torch_epoch(shuffled_loader(), device),
        lambda: DeviceLoader(shuffled_loader(), device, background=background),
    )


@pytest.mark.idiom("dataloader-to-device")
def test_len_and_epochs() -> None:
    loader, device_loader = shuffled_loader(), DeviceLoader(shuffled_loader(), "cpu")
    assert len(device_loader) == len(loader)
    for _ in range(2):  # each epoch reshuffles, on both sides from the same seed
        assert_same_batches(lambda: torch_epoch(loader, "cpu"), lambda: device_loader)


@pytest.mark.idiom("dataloader-pin-memory")
@pytest.mark.parametrize("device", DEVICES)
def test_pinned_dataloader_loop(device: str) -> None:
    assert_same_batches(
        lambda: torch_epoch(shuffled_loader(pin_memory=True), device),
        lambda: DeviceLoader(shuffled_loader(), device, pin_memory=True),
    )


def host_batches() -> Iterator[list[np.ndarray[Any, Any]]]:
    """A nanoGPT-style source: host arrays made on the fly."""
    rng = np.random.default_rng(0)
    for _ in range(5):
        starts = rng.integers(0, 90, size=4)
        x = np.stack([np.arange(s, s + 8, dtype=np.int32) for s in starts])
        yield [x, x + 1]


@pytest.mark.idiom("prefetch-to-device")
@pytest.mark.parametrize("background", BACKGROUNDS)
@pytest.mark.parametrize("device", DEVICES)
def test_prefetch_a_host_source(device: str, background: bool | None) -> None:
    def torch_side() -> list[list[torch.Tensor]]:
        return [
            [torch.from_numpy(a).to(device, non_blocking=True) for a in batch]
            for batch in host_batches()
        ]

    assert_same_batches(
        torch_side, lambda: prefetch_to_device(host_batches(), device, background=background)
    )


@pytest.mark.idiom("dataloader-workers")
def test_worker_processes() -> None:
    loader = DataLoader(
        dataset(),
        batch_size=4,
        num_workers=2,
        multiprocessing_context="spawn",
        persistent_workers=True,  # every epoch below uses the same two workers
        timeout=deadline(60),
    )
    for background in BACKGROUNDS:  # one set of workers for all: spawning them is slow
        assert_same_batches(
            lambda: torch_epoch(loader, "cpu"),
            lambda b=background: DeviceLoader(loader, "cpu", background=b),
        )


# --- the wrapped loader's attributes ------------------------------------------------------


@pytest.mark.idiom("dataloader-attributes")
@pytest.mark.parametrize(
    "read",
    [
        lambda loader: loader.dataset,
        lambda loader: len(loader.dataset),
        lambda loader: loader.batch_size,
        lambda loader: loader.sampler,
        lambda loader: loader.batch_sampler,
        lambda loader: loader.drop_last,
        lambda loader: loader.num_workers,
        lambda loader: loader.collate_fn,
        lambda loader: len(loader),
    ],
    ids=[
        "dataset",
        "len-dataset",
        "batch_size",
        "sampler",
        "batch_sampler",
        "drop_last",
        "num_workers",
        "collate_fn",
        "len",
    ],
)
def test_ported_code_reads_the_loaders_attributes(read: Callable[[Any], Any]) -> None:
    loader = shuffled_loader(drop_last=True)
    theirs, ours = run(lambda: read(loader)), run(lambda: read(DeviceLoader(loader, "cpu")))
    assert ours.error is None and theirs.error is None
    assert ours.value is theirs.value or ours.value == theirs.value


@pytest.mark.idiom("dataloader-attributes")
def test_set_epoch_reshuffles_a_distributed_sampler_alike() -> None:
    def epochs(wrap: Callable[[DataLoader[Any]], Any]) -> list[list[int]]:
        sampler = DistributedSampler(dataset(), num_replicas=2, rank=1, shuffle=True, seed=3)
        loader = wrap(DataLoader(dataset(), batch_size=2, sampler=sampler))
        seen = []
        for epoch in range(3):
            loader.sampler.set_epoch(epoch)  # the line every DDP script has
            seen.append([int(i) for _, labels in loader for i in np.asarray(labels)])
        return seen

    theirs = epochs(lambda loader: loader)
    ours = epochs(lambda loader: DeviceLoader(loader, "cpu"))
    assert ours == theirs and theirs[0] != theirs[1]  # the same reshuffles, and they happen


@pytest.mark.idiom("dataloader-attributes")
@pytest.mark.parametrize(("name", "value"), [("batch_size", 2), ("sampler", None), ("timeout", 5)])
def test_setting_an_attribute_does_what_it_does_on_the_dataloader(name: str, value: Any) -> None:
    loader, wrapped = shuffled_loader(), shuffled_loader()
    device_loader = DeviceLoader(wrapped, "cpu")
    theirs = run(lambda: setattr(loader, name, value))
    ours = run(lambda: setattr(device_loader, name, value))
    assert type(ours.error) is type(theirs.error) and str(ours.error) == str(theirs.error)
    if theirs.error is None:
        assert getattr(wrapped, name) == getattr(loader, name) == value


@pytest.mark.idiom("tensor-pin-memory")
def test_pin_memory_is_a_documented_difference() -> None:
    tensor = torch.arange(4.0)
    theirs = run(tensor.pin_memory)
    if not torch.cuda.is_available():  # a CPU-only torch cannot pin at all
        assert isinstance(theirs.error, RuntimeError)
        assert "accelerator" in str(theirs.error)
    else:
        assert theirs.value.is_pinned()
    # The port pins wherever JAX has pinned host memory, the CPU backend included, and
    # the array belongs to the default device's memory space (cuda:0 on a GPU machine),
    # where torch's pinned tensor reports the CPU.
    pinned = pin_memory(tensor)
    assert pinned.sharding.memory_kind == "pinned_host"
    assert pinned.devices() == {tj.resolve(None)}
    assert pinned.tolist() == tensor.tolist()
