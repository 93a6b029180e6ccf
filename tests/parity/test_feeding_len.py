"""``len()`` of prefetched batches, beside ``len(iter(data_loader))`` in torch.

torch's DataLoader iterator has a length, the whole epoch's batch count however many
were taken (``tqdm(iter(loader))`` and ``len(iter(loader))`` rely on it), and a loader
over an ``IterableDataset`` without ``__len__`` refuses ``len()`` with ``TypeError``.
``tj.prefetch_to_device`` (and so each epoch of ``tj.DeviceLoader``) answers the same,
and where the source has no length raises the library's ``ArgumentTypeError`` (still a
``TypeError``) naming the fix, not Python's "generator has no len()".
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    IterableDataset,
    SequentialSampler,
    TensorDataset,
)

import torch2jax_device as tj

DATASET = TensorDataset(torch.arange(11.0), torch.arange(11))


def loaders() -> dict[str, DataLoader[Any]]:
    return {
        "short-last": DataLoader(DATASET, batch_size=3),
        "drop-last": DataLoader(DATASET, batch_size=3, drop_last=True),
        "shuffled": DataLoader(DATASET, batch_size=4, shuffle=True),
        "batch-sampler": DataLoader(
            DATASET, batch_sampler=BatchSampler(SequentialSampler(DATASET), 5, False)
        ),
        "empty": DataLoader(TensorDataset(torch.zeros(0)), batch_size=2),
    }


@pytest.mark.parametrize("name", list(loaders()))
@pytest.mark.parametrize("feed", ["prefetch_to_device", "DeviceLoader epoch"])
def test_len_of_the_prefetched_batches_is_len_of_torchs_loader_iterator(
    name: str, feed: str
) -> None:
    loader = loaders()[name]
    theirs = iter(loader)
    ours = (
        tj.prefetch_to_device(loader, "cpu")
        if feed == "prefetch_to_device"
        else iter(tj.DeviceLoader(loader, "cpu"))
    )
    assert len(ours) == len(theirs) == len(loader)
    taken = [next(ours) for _ in range(min(1, len(theirs)))]
    for _ in taken:
        next(theirs)
    assert len(ours) == len(theirs)  # the whole epoch's count, however many were taken
    assert bool(ours)  # a generator is true, whatever its length (torch's iterator: len)
    assert len(list(ours)) == len(list(theirs))


class Stream(IterableDataset[np.ndarray]):
    def __iter__(self) -> Iterator[np.ndarray]:
        return iter([np.zeros(2, np.float32)] * 3)


def test_a_source_without_a_length_refuses_len_naming_the_fix() -> None:
    with pytest.raises(TypeError, match="has no len"):
        len(iter(DataLoader(Stream(), batch_size=None)))  # torch: no length either
    sources = {
        "DataLoader": DataLoader(Stream(), batch_size=None),
        "generator": (i for i in range(3)),
    }
    for kind, source in sources.items():
        batches = tj.prefetch_to_device(source, "cpu")
        with pytest.raises(tj.ArgumentTypeError, match=f"length of the {kind} .*count the batc"):
            len(batches)
        assert len(list(batches)) == 3  # list() still works: it only asks for a hint
