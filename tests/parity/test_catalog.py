"""Every runnable catalog row, executed as the migration guide prints it, in both frameworks."""

from __future__ import annotations

import pytest

from torch2jax_device.porting import catalog

from .harness import assert_same_outcome, run_idiom

RUNNABLE = [idiom for idiom in catalog.CATALOG if idiom.runs]


@pytest.mark.parametrize("idiom", RUNNABLE, ids=[idiom.id for idiom in RUNNABLE])
def test_idiom_runs_the_same_in_torch_and_tj(idiom: catalog.Idiom) -> None:
    torch_outcome, tj_outcome = run_idiom(idiom)
    assert_same_outcome(torch_outcome, tj_outcome)
