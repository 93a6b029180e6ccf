"""Every runnable catalog row, executed as the migration guide prints it, in both frameworks."""

from __future__ import annotations

import pytest

from torch2jax_device import idioms

from .harness import assert_same_outcome, run_idiom

RUNNABLE = [idiom for idiom in idioms.CATALOG if idiom.runs]


@pytest.mark.parametrize("idiom", RUNNABLE, ids=[idiom.id for idiom in RUNNABLE])
def test_idiom_runs_the_same_in_torch_and_tj(idiom: idioms.Idiom) -> None:
    torch_outcome, tj_outcome = run_idiom(idiom)
    assert_same_outcome(torch_outcome, tj_outcome)
