"""The differential fuzzer: random ``Tensor.to`` calls, through torch and through ``tj.to_device``.

Each example draws a call form, a source, dtypes, edge values and a container
(``tests/support/fuzz.py``), runs it both ways and compares every part of the answers
(``tests/support/fuzz_oracle.py``). A difference that no row of the known-differences
table (``torch2jax_device.porting.known_differences``) covers fails the test with one
minimal reproduction per kind of difference.

The default run is the examples ``fuzz_runs.settings`` gives, from its seed, the same every
time. ``TORCH2JAX_DEVICE_FUZZ_EXAMPLES=N`` and ``TORCH2JAX_DEVICE_FUZZ_SEED=S`` make a
longer or another run (CONTRIBUTING.md, "The differential fuzzer").
"""

from __future__ import annotations

import pytest

from tests.support import fuzz_runs
from tests.support.fuzz import Token
from tests.support.fuzz_oracle import Draw, Finding, Tally, draw, judge, shrink
from tests.support.gpu_proxy import jax_default_is_torch_cpu
from torch2jax_device.porting import known_differences
from torch2jax_device.porting.known_differences import Leaf

# The oracle is torch on the CPU: where JAX's default device is an accelerator (a GPU
# machine, the GPU-proxy mode), torch has no device for the arrays JAX makes there, so
# the same call cannot place alike; the placement side of that machine is the proxy
# mode's own tests.
pytestmark = pytest.mark.skipif(
    not jax_default_is_torch_cpu(),
    reason="the fuzzer's oracle is torch's CPU; JAX's default device is another here",
)

EXAMPLES, SEED = fuzz_runs.settings("FUZZ", 300)
#: Kinds of difference shrunk and printed in a failure (the rest are counted).
SHOWN = 12


def fuzz(examples: int, seed: int) -> tuple[dict[tuple[str, ...], list[Finding]], Tally]:
    """Run ``examples`` draws from ``seed``; the unexplained findings by kind, and the tally."""
    tally = Tally()
    return fuzz_runs.run(examples, seed, draw, judge, tally), tally


def report(found: dict[tuple[str, ...], list[Finding]], tally: Tally, seed: int) -> str:
    examples = tally.examples
    lines = [
        f"{sum(map(len, found.values()))} differences from torch that no row of "
        f"torch2jax_device/porting/known_differences.py covers, in {len(found)} kinds "
        f"({examples} examples, TORCH2JAX_DEVICE_FUZZ_SEED={seed}):"
    ]
    lines += fuzz_runs.listed(found, shrink, SHOWN)
    rows = ", ".join(
        f"{row} {tally.explained[row]}/{count}" for row, count in sorted(tally.applied.items())
    )
    lines.append(f"Rows (differences explained / calls covered): {rows or 'none'}.")
    return "\n".join(lines)


@pytest.mark.idiom("tensor-to-device-dtype")
def test_to_device_answers_as_torch_or_as_the_table_says() -> None:
    found, tally = fuzz(EXAMPLES, SEED)
    assert tally.examples == EXAMPLES
    if found:
        pytest.fail(report(found, tally, SEED), pytrace=False)


#: ``tj.to_device(np.array([2**40, 1]), "cpu")``: torch keeps int64; JAX without x64 makes
#: int32, with the values torch's ``.to(torch.int32)`` gives (the row ``x64-narrowing``).
NARROWING = Draw(
    leaves=(Leaf("numpy", "dense", "int64", (2**20, 1), (2,)),),
    tree=None,
    args=(Token("device", '"cpu"'),),
    kwargs=(),
)


def test_a_difference_the_table_explains_passes() -> None:
    tally = Tally()
    assert judge(NARROWING, tally) == []
    assert tally.explained["x64-narrowing"] == 1


def test_a_difference_no_row_explains_fails_with_a_one_line_reproduction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = tuple(row for row in known_differences.DIFFERENCES if row.id != "x64-narrowing")
    monkeypatch.setattr(known_differences, "DIFFERENCES", rows)
    (finding,) = judge(NARROWING)
    assert finding.aspect == "dtype"
    assert shrink(finding).reproduction() == (
        'tj.to_device(np.array([1048576], dtype=np.int64), "cpu")  # dtype differs at '
        "<root>: torch [1048576] int64 on cpu; tj [1048576] int32 on cpu"
    )
