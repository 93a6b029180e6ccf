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
from torch.utils.data import DataLoader, TensorDataset

import torch2jax_device as tj
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


@pytest.mark.idiom("dataloader-to-device")
@pytest.mark.parametrize("device", DEVICES)
def test_dataloader_loop(device: str) -> None:
    assert_same_batches(
        lambda: torch_epoch(shuffled_loader(), device),
        lambda: DeviceLoader(shuffled_loader(), device),
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
@pytest.mark.parametrize("device", DEVICES)
def test_prefetch_a_host_source(device: str) -> None:
    def torch_side() -> list[list[torch.Tensor]]:
        return [
            [torch.from_numpy(a).to(device, non_blocking=True) for a in batch]
            for batch in host_batches()
        ]

    assert_same_batches(torch_side, lambda: prefetch_to_device(host_batches(), device))


@pytest.mark.idiom("dataloader-workers")
def test_worker_processes() -> None:
    loader = DataLoader(
        dataset(),
        batch_size=4,
        num_workers=2,
        multiprocessing_context="spawn",
        persistent_workers=True,  # both sides use the same two workers
        timeout=60,
    )
    assert_same_batches(lambda: torch_epoch(loader, "cpu"), lambda: DeviceLoader(loader, "cpu"))


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
