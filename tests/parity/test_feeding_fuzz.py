"""The feeding fuzzer: random torch data pipelines, looped over by torch and by the port.

Each example draws a dataset (tensors, dicts, tuples, nested lists, NumPy arrays, Python
and NumPy scalars, strings, named tuples, bare leaves, an iterable dataset; dtypes from
bool to complex, edge values; an item whose load raises), a DataLoader over it (batch
size, ``drop_last``, shuffling from a seeded generator, a sampler or batch sampler, a
custom collate function, ``pin_memory``), a target and how the port feeds it
(``tj.DeviceLoader`` or ``tj.prefetch_to_device``, lookahead, background thread,
pinned staging) and the loop (two epochs with ``set_epoch``, an early ``break``)
(``tests/support/feeding_fuzz.py``), runs the loop through torch and through the port
and compares every batch (``tests/support/feeding_fuzz_oracle.py``). A difference that
no row of the oracle's ``DIFFERENCES`` covers fails the test with one shrunk
reproduction per kind.

The default run is the examples ``fuzz_runs.settings`` gives, from its seed, the same
every time. ``TORCH2JAX_DEVICE_FEEDING_FUZZ_EXAMPLES=N`` and
``TORCH2JAX_DEVICE_FEEDING_FUZZ_SEED=S`` make a longer or another run. The slow test
runs draws with DataLoader worker processes (``spawn``). Draws onto ``cpu:1`` and
shardings run in ``tests/multidevice/test_feeding_fuzz.py``. Each finding, once fixed,
stays as a draw in ``tests/parity/test_feeding_fuzz_findings.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support import fuzz_runs
from tests.support.feeding_fuzz import Data, Draw
from tests.support.feeding_fuzz_oracle import DIFFERENCES, DOCS, fuzz, judge, report, shrink
from tests.support.gpu_proxy import jax_default_is_torch_cpu
from torch2jax_device._src import feeding

pytestmark = pytest.mark.skipif(
    not jax_default_is_torch_cpu(),
    reason="the fuzzer's oracle is torch's CPU; JAX's default device is another here",
)

EXAMPLES, SEED = fuzz_runs.settings("FEEDING_FUZZ", 300)


@pytest.mark.idiom("dataloader-to-device")
def test_tj_feeds_batches_as_torchs_dataloader_loop() -> None:
    found, tally = fuzz(EXAMPLES, SEED)
    assert tally.examples == EXAMPLES
    if found:
        pytest.fail(report(found, tally, SEED), pytrace=False)


@pytest.mark.slow  # DataLoader worker processes (spawned: seconds each)
@pytest.mark.idiom("dataloader-workers")
def test_tj_feeds_batches_from_worker_processes_as_torch() -> None:
    found, tally = fuzz(5, SEED, workers=True)
    workers = [
        Draw(
            data=Data(style="dicts", length=9, dtypes=("float32", "int64"), raise_at=6),
            batch_size=2, shuffle=True, workers=2, epochs=2, break_after=1, size=3,
        ),
        Draw(
            data=Data(style="iterable", length=7, dtypes=("bfloat16",), sized=False),
            batch_size=3, workers=2, api="prefetch", background=True, pin=True,
        ),
    ]  # fmt: skip
    for drawn in workers:
        tally.examples += 1
        tally.workers += 1
        for finding in judge(drawn, tally):
            found.setdefault(finding.kind, []).append(finding)
    if found:
        pytest.fail(report(found, tally, SEED), pytrace=False)


# A loop the fuzzer drew: what each example checks, kept small and readable.
SHUFFLED_DICTS = Draw(
    data=Data(style="dicts", length=7, dtypes=("float32", "bool", "int64"), shape=(2, 3)),
    batch_size=3, shuffle=True, size=2, epochs=2, break_after=1, seed=11,
)  # fmt: skip


def test_a_loop_the_fuzzer_drew_agrees() -> None:
    assert judge(SHUFFLED_DICTS) == []


def test_a_difference_fails_with_a_one_line_reproduction(monkeypatch: pytest.MonkeyPatch) -> None:
    """The oracle can fail: a port that hands batches over out of order."""
    place_group = feeding._place_group

    def reversed_groups(batches: list[Any], place: Callable[[Any], Any]) -> list[Any]:
        return place_group(batches, place)[::-1]

    monkeypatch.setattr(feeding, "_place_group", reversed_groups)
    altered = Draw(data=Data(style="tuples", length=4, dtypes=("float32",)), background=False)
    (finding,) = judge(altered)
    assert (finding.aspect, finding.where) == ("values", "epoch 0 batch 0[0]")
    assert finding.reproduction().startswith("Draw(data=Data(style='tuples', length=4")
    assert shrink(finding).kind == finding.kind


def test_each_difference_by_design_is_on_the_docs_page() -> None:
    page = (Path(__file__).resolve().parents[2] / DOCS).read_text()
    missing = [row.id for row in DIFFERENCES if row.docs not in page]
    assert not missing, f"rows whose docs phrase is not on {DOCS}: {missing}"
