"""How ranks compare what they bring to a step (``_src/distributed/agreement.py``), in one process.

The multi-process behaviour is in ``tests/parity/test_distributed_collectives.py``; here
the comparison's verdicts and the key-value store's bookkeeping run against an
in-memory store standing in for JAX's coordination service, with every rank's steps
published by hand.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import torch2jax_device as tj
from torch2jax_device._src.distributed import agreement
from torch2jax_device._src.distributed.agreement import Step, leaf


class Store:
    """The calls of JAX's coordination client that ``agreement`` makes, in memory."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def key_value_set(self, key: str, value: str) -> None:
        assert key not in self.values, f"{key} written twice"
        self.values[key] = value

    def blocking_key_value_get(self, key: str, timeout_ms: int) -> str:
        if key not in self.values:
            raise RuntimeError(f"DEADLINE_EXCEEDED: {key} after {timeout_ms} ms")
        return self.values[key]

    def key_value_dir_get(self, prefix: str) -> list[tuple[str, str]]:
        return [(key, value) for key, value in self.values.items() if key.startswith(prefix)]

    def wait_at_barrier(self, barrier_id: str, timeout_ms: int) -> None:
        pass

    def key_value_delete(self, directory: str) -> None:
        for key in [key for key in self.values if key.startswith(directory + "/")]:
            del self.values[key]


def x(*shape: int, dtype: Any = np.float32, path: str = "['x']") -> tuple[Any, ...]:
    return (leaf(path, shape, dtype),)


def test_steps_that_agree_have_no_disagreement() -> None:
    steps = {rank: Step("all_reduce(op='sum')", x(4, 3)) for rank in range(3)}
    assert agreement.disagreement(steps) is None


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        (
            {0: Step("batch", x(4, 3)), 1: Step("batch", x(2, 3))},
            "at leaf ['x'], rank 0 has float32[4, 3]; rank 1 has float32[2, 3]",
        ),
        (
            {0: Step("batch", x(2, 3)), 1: Step("batch", x(2, 3, dtype=np.float16))},
            "at leaf ['x'], rank 0 has float32[2, 3]; rank 1 has float16[2, 3]",
        ),
        (
            {0: Step("barrier()"), 1: Step("all_reduce(op='sum')")},
            "the ranks are at different calls: rank 0 at barrier(); rank 1 at all_reduce(op='sum')",
        ),
        (
            {0: Step("c", x(1)), 1: Step("c", x(1) + x(1, path="['y']"))},
            "the ranks pass different trees: rank 0 has the leaves ['x']; rank 1 has the "
            "leaves ['x'], ['y']",
        ),
        (
            {0: Step("c", x(1)), 1: Step("c", failure="ConversionError: too big")},
            "rank 1 failed before it could take part: ConversionError: too big",
        ),
        (  # many ranks: grouped by what they hold
            {rank: Step("c", x(3 if rank % 5 else 2)) for rank in range(12)},
            "at leaf ['x'], ranks 0, 5, 10 have float32[2]; ranks 1, 2, 3, 4, 6, 7, 8, 9 and "
            "1 more have float32[3]",
        ),
    ],
)
def test_disagreement_names_the_first_difference_and_each_ranks_side(
    steps: dict[int, Step], expected: str
) -> None:
    assert agreement.disagreement(steps) == expected


def test_disagreement_counts_the_other_leaves_that_differ() -> None:
    two = x(4) + x(4, path="['y']")
    other = x(2) + x(2, path="['y']")
    found = agreement.disagreement({0: Step("c", two), 1: Step("c", other)})
    assert (
        found
        == "at leaf ['x'], rank 0 has float32[4]; rank 1 has float32[2] (1 more leaves differ too)"
    )


def test_every_rank_reads_the_same_steps_in_a_stream() -> None:
    store = Store()
    mine = Step("batch #0", x(4, 3))
    store.key_value_set(agreement._key("loader-0", 0, 1), Step("batch #0", x(2, 3)).to_text())
    steps = agreement.meet(store, "loader-0", 0, mine, 0, (0, 1), 5.0, "DeviceLoader")
    assert steps == {0: mine, 1: Step("batch #0", x(2, 3))}


def test_a_rank_that_never_publishes_is_named_after_the_timeout() -> None:
    with pytest.raises(
        tj.DistributedError, match=r"rank 0 waited 5 s for rank 1 to reach"
    ) as error:
        agreement.meet(Store(), "loader-0", 3, Step("batch #3"), 0, (0, 1), 5.0, "DeviceLoader")
    assert "Fix: give every rank the same number of batches" in str(error.value)


def test_a_failure_or_a_rank_leaving_only_publishes() -> None:
    store = Store()
    failed = Step("batch #0", failure="ConversionError: no")
    assert agreement.meet(store, "s", 0, failed, 0, (0, 1), 5.0, "w") == {}
    assert agreement.meet(store, "s", 1, Step("left"), 0, (0, 1), 5.0, "w", read=False) == {}
    assert len(store.values) == 2


def test_the_store_forgets_each_block_once_every_rank_has_read_it() -> None:
    store = Store()
    last = 5 * agreement.BLOCK + 2
    for index in range(last + 1):
        # rank 1 has published (a real barrier waits for it); rank 0 reads and cleans up
        store.key_value_set(agreement._key("calls", index, 1), Step("barrier()").to_text())
        steps = agreement.meet_at_barrier(store, "calls", index, Step("barrier()"), 0, 5.0)
        assert set(steps) == {0, 1}
    blocks = {key.split("/")[3] for key in store.values}
    assert blocks == {str(last // agreement.BLOCK)}, sorted(store.values)


def test_steps_travel_as_text_unchanged() -> None:
    step = Step("all_reduce(op='max')", x(2, 3) + x(path="<root>"), None)
    assert Step.from_text(step.to_text()) == step
    assert agreement.shown(step.leaves[0]) == "float32[2, 3]"
    assert agreement.shown(step.leaves[1]) == "float32[]"


def random_leaves(rng: np.random.Generator) -> tuple[Any, ...]:
    """A small random tree's description: 1-3 leaves of random rank, sizes and dtype."""
    names = rng.choice(["['x']", "['y']", "['mask']"], size=rng.integers(1, 4), replace=False)
    dtypes = ["float32", "int32", "bool"]
    return tuple(
        leaf(str(name), rng.integers(1, 4, size=rng.integers(0, 3)), rng.choice(dtypes))
        for name in sorted(names)
    )


@pytest.mark.parametrize("seed", range(5))
def test_random_trees_disagree_exactly_when_they_differ_and_the_message_names_the_leaf(
    seed: int,
) -> None:
    # the generator of the next mistake like these: two ranks' random trees, often equal
    rng = np.random.default_rng(seed)
    for _ in range(100):
        mine = random_leaves(rng)
        theirs = mine if rng.random() < 0.3 else random_leaves(rng)
        found = agreement.disagreement({0: Step("c", mine), 1: Step("c", theirs)})
        if mine == theirs:
            assert found is None
            continue
        assert found is not None
        if [path for path, _, _ in mine] != [path for path, _, _ in theirs]:
            assert found.startswith("the ranks pass different trees")
            continue
        first = next(
            i for i, pair in enumerate(zip(mine, theirs, strict=True)) if len(set(pair)) > 1
        )
        assert found.startswith(
            f"at leaf {mine[first][0]}, rank 0 has {agreement.shown(mine[first])}; "
            f"rank 1 has {agreement.shown(theirs[first])}"
        ), found
