"""``import torch2jax_device`` must not import torch or flax, nor start JAX's backends.

Checked in a fresh interpreter; the meta-tests show the same check does catch each
side effect, so the main test cannot pass vacuously. One interpreter serves them all:
the clean steps run first, the steps that cause each effect after them.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.deadlines import deadline

# One fresh interpreter runs the steps in order and records the side effects after each:
# the clean steps first (nothing may have happened yet), then the steps that must be
# caught. Side effects cannot be undone (a module stays imported, a backend started), so
# a step's record holds everything every earlier step did too.
_STEPS = {
    "import": "import torch2jax_device as tj",
    "construct devices": "tj.device('cuda:1'); tj.device('cpu', 0)",
    "import torch": "import torch",
    "import flax": "import flax",
    "resolve a device": "tj.resolve('cpu')",
}
_PROBE = textwrap.dedent(
    """
    import json, sys
    from jax._src import xla_bridge

    def side_effects():
        effects = [name for name in ("torch", "flax") if name in sys.modules]
        if xla_bridge.backends_are_initialized():
            effects.append("jax-backends")
        return effects

    records = {{}}
    for step, code in {steps!r}.items():
        exec(code)
        records[step] = side_effects()
    print(json.dumps(records))
    """
)


@pytest.fixture(scope="module")
def side_effects_after() -> dict[str, list[str]]:
    """Each step of ``_STEPS``, run in order in one fresh interpreter: the torch/flax
    imports and backend start-up seen after it."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE.format(steps=_STEPS)],
        capture_output=True,
        text=True,
        check=True,
        timeout=deadline(120),
    )
    records: dict[str, list[str]] = json.loads(result.stdout.strip().splitlines()[-1])
    assert list(records) == list(_STEPS)
    return records


def test_import_has_no_side_effects(side_effects_after: dict[str, list[str]]) -> None:
    assert side_effects_after["import"] == []


def test_constructing_devices_has_no_side_effects(
    side_effects_after: dict[str, list[str]],
) -> None:
    assert side_effects_after["construct devices"] == []


@pytest.mark.parametrize(
    ("step", "effect", "before"),
    [
        ("import torch", "torch", "construct devices"),
        ("import flax", "flax", "import torch"),
        ("resolve a device", "jax-backends", "import flax"),
    ],
)
def test_the_check_detects_each_side_effect(
    side_effects_after: dict[str, list[str]], step: str, effect: str, before: str
) -> None:
    """The check sees the effect the step causes, and did not see it the step before."""
    assert effect in side_effects_after[step]
    assert effect not in side_effects_after[before]


def _dotted_imports_in_functions(source: str) -> list[str]:
    found = []
    for function in ast.walk(ast.parse(source)):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += [
                f"line {node.lineno}: import {alias.name}"
                for node in ast.walk(function)
                if isinstance(node, ast.Import)
                for alias in node.names
                if "." in alias.name
            ]
    return found


def test_no_function_imports_a_submodule_by_attribute() -> None:
    """``import a.b`` inside a function reads ``a.b`` as an attribute of ``a``, which a
    thread still importing ``a`` has not set: 8 threads making their first call at once
    failed with ``AttributeError: module 'jax' has no attribute 'extend'``. Import at
    module level, or with ``importlib.import_module``."""
    package = Path(__file__).resolve().parents[2] / "torch2jax_device"
    offenders = {
        str(path.relative_to(package)): found
        for path in sorted(package.rglob("*.py"))
        if (found := _dotted_imports_in_functions(path.read_text()))
    }
    assert offenders == {}


def test_the_dotted_import_check_can_fail() -> None:
    source = "def resolve():\n    import jax.extend.backend\n    return jax.extend.backend\n"
    assert _dotted_imports_in_functions(source) == ["line 2: import jax.extend.backend"]


def imported_modules(importtime_report: str) -> set[str]:
    """The modules ``python -X importtime`` reports importing, from its stderr."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in importtime_report.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    } - {"imported package"}  # the header: "import time: self [us] | cumulative | imported package"


@pytest.fixture(scope="module")
def command_line_scan(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """``python -X importtime -m torch2jax_device scan`` on a small PyTorch file, in an
    environment JAX refuses at import."""
    script = tmp_path_factory.mktemp("scan") / "train.py"
    script.write_text("import torch\nx = torch.zeros(3, device='cuda')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "torch2jax_device", "scan", str(script)],
        capture_output=True, text=True, timeout=deadline(120), check=False,
        env={**env, "JAX_ENABLE_X64": "maybe", "JAX_NUM_CPU_DEVICES": "abc"},
    )  # fmt: skip


def test_the_command_line_imports_where_jax_refuses_its_environment(
    command_line_scan: subprocess.CompletedProcess[str],
) -> None:
    """A program gets tj.ConfigError from ``import torch2jax_device`` (tests/unit/
    test_startup.py); the command line must still run, to diagnose that environment."""
    assert command_line_scan.returncode == 1, command_line_scan.stderr  # 1: an idiom found
    assert "train.py:2:20: factory-device" in command_line_scan.stdout


def test_scan_imports_no_jax(command_line_scan: subprocess.CompletedProcess[str]) -> None:
    """``scan`` reads files: its process never imports JAX (nor torch), so it starts in a
    fraction of a second; ``devices`` and ``doctor`` import JAX when they are named."""
    imported = imported_modules(command_line_scan.stderr)
    assert {"torch2jax_device.cli.scan", "torch2jax_device.porting.scanner"} <= imported
    assert sorted(name for name in imported if name.split(".")[0] in ("jax", "jaxlib")) == []
    assert "torch" not in imported and "numpy" not in imported


def test_the_imported_modules_are_read_from_importtime() -> None:
    """The check above reads every module, nested ones included, so it cannot pass
    vacuously."""
    report = (
        "import time: self [us] | cumulative | imported package\n"
        "import time:       120 |        120 |   jaxlib.version\n"
        "import time:      1757 |       1877 | jax\n"
        "torch2jax-device: a line of the command's own\n"
    )
    assert imported_modules(report) == {"jaxlib.version", "jax"}


def test_the_command_line_process_is_told_why_a_library_name_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The command line's own process binds no library name (that would import JAX); one
    asked for there says why, and ``porting``, which needs no JAX, still loads."""
    import torch2jax_device as tj
    from torch2jax_device._src import preflight

    monkeypatch.setattr(preflight, "started_as_command_line", lambda argv=None: True)
    for name in ("to_device", "load_file"):  # bound at import, and loaded on first use
        with pytest.raises(
            AttributeError,
            match=rf"torch2jax_device\.{name} is not loaded in the torch2jax-device command "
            "line's own process, which imports JAX only for the commands that use it",
        ):
            tj.__getattr__(name)
    assert tj.__getattr__("porting") is importlib.import_module("torch2jax_device.porting")
    with pytest.raises(AttributeError, match="has no attribute 'nonsense'"):
        tj.__getattr__("nonsense")
