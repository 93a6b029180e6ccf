"""docs/tutorial.md's two scripts: the port trains exactly as the PyTorch original.

A first checkpoint holds the original's initial weights (what ``--epochs 0 --save``
writes); the original and ``examples/tutorial_port.py`` both start from it, see the
same batches (the port keeps torch's DataLoader) and must print the same losses, step
by step, and save the same weights. PyTorch is the oracle.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.support.examples import EXAMPLES, ExampleRunner
from torch2jax_device.cli import main

_LOSS = re.compile(r"^epoch (\d+) (step \d+|eval) loss (\S+)", re.MULTILINE)


def _losses(output: str) -> dict[str, float]:
    found = {f"{epoch} {what}": float(loss) for epoch, what, loss in _LOSS.findall(output)}
    assert found, output
    return found


def test_the_port_prints_the_losses_of_the_original(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    examples: ExampleRunner,
) -> None:
    start, torch_model, jax_model = (tmp_path / name for name in ("start.pt", "torch.pt", "jax.pt"))
    spec = importlib.util.spec_from_file_location("tutorial_torch", EXAMPLES / "tutorial_torch.py")
    assert spec is not None and spec.loader is not None
    original_script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(original_script)
    torch.manual_seed(0)  # as the script seeds before it builds the model
    torch.save(original_script.Classifier().state_dict(), start)
    # The port runs in its own process, as a user runs it; the original (torch only,
    # already imported here) runs in this one meanwhile, through its own main().
    port = examples.start(
        "tutorial_port.py", "--epochs", "1", "--resume", str(start), "--save", str(jax_model)
    )
    try:
        argv = ["tutorial_torch.py", "--epochs", "1", "--resume", str(start), "--save"]
        monkeypatch.setattr(sys, "argv", [*argv, str(torch_model)])
        original_script.main()
    finally:
        out = port.output()
    outputs = {"tutorial_torch.py": capsys.readouterr().out, "tutorial_port.py": out}
    original, port_losses = (
        _losses(outputs["tutorial_torch.py"]),
        _losses(outputs["tutorial_port.py"]),
    )
    assert original.keys() == port_losses.keys()
    assert len(original) == 33  # 32 training steps and the evaluation
    np.testing.assert_allclose(list(port_losses.values()), list(original.values()), rtol=1e-4)
    assert "trained on cpu" in outputs["tutorial_port.py"]

    expected, got = torch.load(torch_model), torch.load(jax_model)
    assert got.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], atol=1e-5, err_msg=name)


def test_scan_lists_the_device_idioms_of_the_original(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tutorial's first step: what ``scan`` reports (and that it rewrites nothing yet),
    every line the tutorial prints of it included."""
    monkeypatch.chdir(EXAMPLES.parent)  # the tutorial scans from the repository's root
    assert main(["scan", "examples/tutorial_torch.py"]) == 1  # 1: idioms found
    out = capsys.readouterr().out
    assert out.rstrip().endswith("15 idiom(s) found, 0 rewritable with --diff")
    page = (EXAMPLES.parent / "docs" / "tutorial.md").read_text()
    shown = page.split("$ torch2jax-device scan examples/", 1)[1].split("```", 1)[0]
    lines = [line for line in shown.splitlines()[1:] if line != "..."]
    assert len(lines) > 5
    assert [line for line in lines if line not in out.splitlines()] == []


def test_scan_diff_rewrites_the_halfway_port_as_the_tutorial_shows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Step 4: ``scan --diff`` on the script with its compute ported; every line of the
    diff the tutorial prints is in the real one."""
    halfway = str(EXAMPLES / "tutorial_halfway.py")
    assert main(["scan", halfway]) == 1
    assert capsys.readouterr().out.rstrip().endswith("12 idiom(s) found, 8 rewritable with --diff")
    main(["scan", "--diff", halfway])
    diff = capsys.readouterr().out.splitlines()
    page = (EXAMPLES.parent / "docs" / "tutorial.md").read_text()
    shown = page.split("$ torch2jax-device scan --diff", 1)[1].split("```", 1)[0].splitlines()[1:]
    changed = [line for line in shown if line.startswith(("-", "+"))]
    assert len(changed) == 10
    assert [line for line in changed if line not in diff] == []
