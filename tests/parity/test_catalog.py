"""Every runnable catalog row, executed as the migration guide prints it, in both frameworks."""

from __future__ import annotations

import pytest

import torch2jax_device as tj
from tests.support.gpu_proxy import several_cpu_devices
from torch2jax_device.porting import catalog

from .harness import assert_same_outcome, placement, run_idiom

RUNNABLE = [idiom for idiom in catalog.CATALOG if idiom.runs]
#: Rows whose notes say they hold with one CPU device: among simulated ones (the proxy
#: mode, JAX_NUM_CPU_DEVICES) ``cpu:1`` is the second CPU device, as the notes say.
ONE_CPU_DEVICE = {"device-cpu-any-index": "cpu:1"}


@pytest.mark.parametrize("idiom", RUNNABLE, ids=[idiom.id for idiom in RUNNABLE])
def test_idiom_runs_the_same_in_torch_and_tj(idiom: catalog.Idiom) -> None:
    torch_outcome, tj_outcome = run_idiom(idiom)
    if idiom.id in ONE_CPU_DEVICE and several_cpu_devices():
        assert tj_outcome.error is None, tj_outcome.describe()
        assert placement(tj_outcome.value.device) == placement(tj.device(ONE_CPU_DEVICE[idiom.id]))
        return
    assert_same_outcome(torch_outcome, tj_outcome)
