"""``examples/quickstart.py`` runs end to end and says where things were placed."""

from __future__ import annotations

import re

import pytest

from tests.support.examples import ExampleRunner


@pytest.fixture(scope="module")
def out(examples: ExampleRunner) -> str:
    return examples.run("quickstart.py", fresh=True)  # the README's demo: a first run


def test_quickstart_runs_and_reports_placement(out: str) -> None:
    labels = ("compute device:", "dataset:", "model:", "batch:", "logits:", "bf16 model:")
    for label in labels:
        assert label in out
    assert "dataset:           (1000000,) int32 on cpu" in out
    assert "model:             parameters on cpu (JAX's object: CpuDevice(id=0))" in out
    assert "bf16 model:        bfloat16" in out


def test_quickstart_names_each_device_one_way(out: str) -> None:
    """One CPU device is ``cpu``, as torch names it; JAX's own object is shown as such,
    never as a second name (``cpu:0``) for the same device."""
    assert re.search(r"\bcpu:0\b", out) is None, out


def test_quickstart_presents_the_missing_device_error_as_expected(out: str) -> None:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("missing device:"))
    assert "cuda:0 is not here, as expected" in lines[start]
    assert "DeviceUnavailableError (torch raises too), with the fix:" in lines[start + 1]
    message = " ".join(line.strip() for line in lines[start + 2 :])
    assert message.startswith("Device 'cuda:0' is not available")
    assert "Fix: install a CUDA build of JAX" in message
    assert not any(line.startswith(("Traceback", "Error", "ERROR")) for line in lines)
