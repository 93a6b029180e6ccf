"""The differential fuzzer: random ``Tensor.to`` calls, through torch and through ``tj.to_device``.

Each example draws a call form, a source, dtypes, edge values and a container
(``tests/support/fuzz.py``), runs it both ways and compares every part of the answers
(``tests/support/fuzz_oracle.py``). A difference that no row of the known-differences
table (``torch2jax_device.porting.known_differences``) covers fails the test with one
minimal reproduction per kind of difference.

The default run is ``DEFAULT_EXAMPLES`` examples from ``DEFAULT_SEED``, the same every
time. ``TORCH2JAX_DEVICE_FUZZ_EXAMPLES=N`` and ``TORCH2JAX_DEVICE_FUZZ_SEED=S`` make a
longer or another run (CONTRIBUTING.md, "The differential fuzzer").
"""

from __future__ import annotations

import os
import random

import pytest

from tests.support.fuzz_oracle import Finding, Tally, draw, judge, shrink

DEFAULT_EXAMPLES = 300
DEFAULT_SEED = 20261129
EXAMPLES = int(os.environ.get("TORCH2JAX_DEVICE_FUZZ_EXAMPLES", DEFAULT_EXAMPLES))
SEED = int(os.environ.get("TORCH2JAX_DEVICE_FUZZ_SEED", DEFAULT_SEED))
#: Kinds of difference shrunk and printed in a failure (the rest are counted).
SHOWN = 12


def fuzz(examples: int, seed: int) -> tuple[dict[tuple[str, ...], list[Finding]], Tally]:
    """Run ``examples`` draws from ``seed``; the unexplained findings by kind, and the tally."""
    found: dict[tuple[str, ...], list[Finding]] = {}
    tally = Tally()
    for number in range(examples):
        example = draw(random.Random(f"{seed}:{number}"))  # each example reproducible alone
        tally.examples += 1
        for finding in judge(example, tally):
            found.setdefault(finding.kind, []).append(finding)
    return found, tally


def report(found: dict[tuple[str, ...], list[Finding]], examples: int, seed: int) -> str:
    lines = [
        f"{sum(map(len, found.values()))} differences from torch that no row of "
        f"torch2jax_device/porting/known_differences.py covers, in {len(found)} kinds "
        f"({examples} examples, TORCH2JAX_DEVICE_FUZZ_SEED={seed}):"
    ]
    for number, (kind, findings) in enumerate(
        sorted(found.items(), key=lambda item: -len(item[1]))
    ):
        if number < SHOWN:
            lines.append(
                f"- {' / '.join(kind)} ({len(findings)}x): {shrink(findings[0]).reproduction()}"
            )
        else:
            lines.append(f"- {' / '.join(kind)} ({len(findings)}x)")
    return "\n".join(lines)


@pytest.mark.idiom("tensor-to-device-dtype")
def test_to_device_answers_as_torch_or_as_the_table_says() -> None:
    found, tally = fuzz(EXAMPLES, SEED)
    assert tally.examples == EXAMPLES
    if found:
        pytest.fail(report(found, EXAMPLES, SEED), pytrace=False)
