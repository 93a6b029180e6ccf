"""Differences the feeding fuzzer found, each kept as the draw that found it, fixed.

Each test is one of ``tests/parity/test_feeding_fuzz.py``'s findings, shrunk: the draw
(``tests/support/feeding_fuzz.py``) judged again against torch's DataLoader loop
(``tests/support/feeding_fuzz_oracle.py``), with no difference left.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler, TensorDataset

import torch2jax_device as tj
from tests.support.feeding_fuzz import Data, Draw
from tests.support.feeding_fuzz_oracle import judge
from tests.support.gpu_proxy import jax_default_is_torch_cpu

pytestmark = pytest.mark.skipif(
    not jax_default_is_torch_cpu(),
    reason="the fuzzer's oracle is torch's CPU; JAX's default device is another here",
)

# Found 2026-11-29 (seed 2, 7 of 2,000 draws): a loop left early (``break``) had pulled
# batches ahead, so the DataLoader's seeded generator (``shuffle=True, generator=``, a
# sampler's ``generator=``) had drawn more than torch's loop draws; the next epoch
# came in another order than torch's.
SHUFFLED_EPOCHS_AFTER_A_BREAK = [
    Draw(
        data=Data(style="named", length=7, dtypes=("bool", "int64"), shape=(2, 3)),
        batch_size=4, shuffle=True, size=3, background=False, epochs=2, break_after=0,
        seed=43201915,
    ),
    Draw(
        data=Data(style="tuples", length=2, dtypes=("bfloat16",), shape=()),
        batch_size=None, sampler=("random", (("replacement", False),)), target="cpu:0",
        api="prefetch", size=3, background=True, epochs=2, break_after=1, seed=1122252487,
    ),
    Draw(
        data=Data(style="nested", length=8, dtypes=("float16", "bool", "bool"), shape=()),
        batch_size=5, drop_last=True,
        sampler=("batch", (("random", True), ("size", 3), ("drop_last", True))),
        target="default", api="prefetch", background=False, epochs=2, break_after=0,
        seed=675617894,
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    "draw", SHUFFLED_EPOCHS_AFTER_A_BREAK, ids=["shuffle", "sampler", "batch-sampler"]
)
def test_an_epoch_after_a_break_is_shuffled_as_torch_shuffles_it(draw: Draw) -> None:
    assert judge(draw) == []


def test_a_break_leaves_the_generator_where_torch_leaves_it() -> None:
    """The generator's state itself, whatever the next epoch does with it."""

    def left_state(wrap: bool, size: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(5)
        dataset = TensorDataset(torch.arange(10.0))
        sampler = RandomSampler(dataset, replacement=True, num_samples=40, generator=generator)
        loader = DataLoader(dataset, batch_size=1, sampler=sampler)
        batches = tj.DeviceLoader(loader, "cpu", prefetch=size) if wrap else loader
        for number, _ in enumerate(batches):
            if number == 30:  # past the sampler's first 32 draws once the port pulls ahead
                break
        return generator.get_state()

    torch_state = left_state(wrap=False, size=0)
    for size in (1, 3, 8):
        assert torch.equal(left_state(wrap=True, size=size), torch_state)


# Found 2026-11-29 (seed 5, 9 of 2,000 draws): batches that are bare NumPy scalars,
# pulled ahead together, were placed in one transfer as a list's items, where a NumPy
# scalar stays a scalar; alone, one becomes a 0-d array. So the same loader gave
# np.float32 or arrays depending on ``size``.
NUMPY_SCALAR_BATCHES = Draw(
    data=Data(style="bare", length=2, dtypes=("int8",)),
    batch_size=None, collate="lists", api="prefetch", size=1, background=False,
)  # fmt: skip


@pytest.mark.parametrize("size", [1, 2, 3])
def test_numpy_scalar_batches_arrive_as_arrays_however_many_are_ahead(size: int) -> None:
    assert judge(dataclasses.replace(NUMPY_SCALAR_BATCHES, size=size)) == []
