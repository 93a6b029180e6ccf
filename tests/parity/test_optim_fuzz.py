"""The optimizer fuzzer: random training runs through torch.optim and through tj.optim.

Each example draws an optimizer with any of torch's keywords (some outside torch's
ranges), a model of parameters of several shapes and dtypes (frozen ones, ones without
a gradient on some steps, several parameter groups), a scheduler, a number of steps and
a checkpoint at a random step written by either framework (``tests/support/optim_fuzz.py``),
runs it both ways and compares parameters, optimizer and scheduler state dicts after
every step (``tests/support/optim_fuzz_oracle.py``). A difference that no row of the
oracle's ``DIFFERENCES`` covers fails the test with one shrunk reproduction per kind.

The default run is the examples ``fuzz_runs.settings`` gives, from its seed, the same every
time. ``TORCH2JAX_DEVICE_OPTIM_FUZZ_EXAMPLES=N`` and ``TORCH2JAX_DEVICE_OPTIM_FUZZ_SEED=S``
make a longer or another run. Each finding, once fixed, stays as a draw in
``tests/parity/test_optim_fuzz_findings.py``; differences by design are the oracle's
``DIFFERENCES`` rows, each said on docs/how-to/optimizers.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import fuzz_runs
from tests.support.gpu_proxy import jax_default_is_torch_cpu
from tests.support.optim_fuzz import Draw, Parameter, draw
from tests.support.optim_fuzz_oracle import DIFFERENCES, Finding, Tally, judge, shrink
from torch2jax_device import optim

pytestmark = pytest.mark.skipif(
    not jax_default_is_torch_cpu(),
    reason="the fuzzer's oracle is torch's CPU; JAX's default device is another here",
)

EXAMPLES, SEED = fuzz_runs.settings("OPTIM_FUZZ", 25)
SHOWN = 8


def fuzz(examples: int, seed: int) -> tuple[dict[tuple[str, ...], list[Finding]], Tally]:
    """Run ``examples`` draws from ``seed``; the unexplained findings by kind, and the tally."""
    tally = Tally()
    return fuzz_runs.run(examples, seed, draw, judge, tally), tally


def report(found: dict[tuple[str, ...], list[Finding]], tally: Tally, seed: int) -> str:
    lines = [
        f"{sum(map(len, found.values()))} differences from torch.optim that no row of "
        f"optim_fuzz_oracle.DIFFERENCES covers, in {len(found)} kinds ({tally.examples} "
        f"examples, TORCH2JAX_DEVICE_OPTIM_FUZZ_SEED={seed}):"
    ]
    lines += fuzz_runs.listed(found, shrink, SHOWN)
    lines.append(
        f"Refused alike: {tally.refused}; with parameter groups: {tally.grouped}; "
        f"rows: {tally.explained}."
    )
    return "\n".join(lines)


@pytest.mark.idiom("optimizer-torch-rules")
def test_tj_optim_trains_and_resumes_as_torch_optim() -> None:
    found, tally = fuzz(EXAMPLES, SEED)
    assert tally.examples == EXAMPLES
    if found:
        pytest.fail(report(found, tally, SEED), pytrace=False)


# A run the fuzzer drew, fixed: what each example checks, kept small and readable.
AMSGRAD_BFLOAT16 = Draw(
    kind="Adam",
    keywords=(("lr", 0.1), ("amsgrad", True), ("maximize", True), ("foreach", True)),
    parameters=(Parameter((2, 3), "bfloat16"), Parameter((3,), "complex64")),
    linear=True,
    scheduler=("LinearLR", (("start_factor", 0.5), ("total_iters", 2))),
    steps=3,
    switch=1,
    writer="tj",
    resume="last_epoch",
    through_file=True,
)


def test_a_run_the_fuzzer_drew_agrees() -> None:
    assert judge(AMSGRAD_BFLOAT16) == []


def test_a_difference_fails_with_a_one_line_reproduction(monkeypatch: pytest.MonkeyPatch) -> None:
    """The oracle can fail: tj's SGD given another learning rate than torch's."""
    sgd = optim.SGD
    monkeypatch.setattr(optim, "SGD", lambda **keywords: sgd(**{**keywords, "lr": 0.2}))
    altered = Draw(
        kind="SGD", keywords=(("lr", 0.1),), parameters=(Parameter((2,), "float32"),), writer="tj"
    )
    (finding,) = judge(altered)
    assert (finding.aspect, finding.where) == ("hyperparameter", "param_groups[0]['lr']")
    assert finding.reproduction().startswith("Draw(kind='SGD', keywords=(('lr', 0.1),)")
    assert shrink(finding).kind == finding.kind


def test_each_difference_by_design_is_on_the_optimizers_page() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs/how-to/optimizers.md").read_text()
    missing = [row.id for row in DIFFERENCES if row.docs and row.docs not in page]
    assert not missing, f"rows whose docs phrase is not on docs/how-to/optimizers.md: {missing}"
