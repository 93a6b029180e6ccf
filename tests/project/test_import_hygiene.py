"""``import torch2jax_device`` must not import torch or flax, nor start JAX's backends.

Checked in a fresh interpreter; the meta-tests show the same check does catch each
side effect, so the main test cannot pass vacuously.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

_PROBE = textwrap.dedent(
    """
    import sys
    {code}
    from jax._src import xla_bridge
    effects = [name for name in ("torch", "flax") if name in sys.modules]
    if xla_bridge.backends_are_initialized():
        effects.append("jax-backends")
    print(",".join(effects))
    """
)


def import_side_effects(code: str) -> list[str]:
    """Run ``code`` in a fresh interpreter; list torch/flax imports and backend start-up."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE.format(code=code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    output = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    return [effect for effect in output.split(",") if effect]


def test_import_has_no_side_effects() -> None:
    assert import_side_effects("import torch2jax_device") == []


def test_constructing_devices_has_no_side_effects() -> None:
    code = "import torch2jax_device as tj; tj.device('cuda:1'); tj.device('cpu', 0)"
    assert import_side_effects(code) == []


@pytest.mark.parametrize(
    ("code", "effect"),
    [
        ("import torch2jax_device, torch", "torch"),
        ("import torch2jax_device, flax", "flax"),
        ("import torch2jax_device as tj; tj.resolve('cpu')", "jax-backends"),
    ],
)
def test_the_check_detects_each_side_effect(code: str, effect: str) -> None:
    assert effect in import_side_effects(code)


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


def test_the_command_line_imports_where_jax_refuses_its_environment(tmp_path: Path) -> None:
    """A program gets tj.ConfigError from ``import torch2jax_device`` (tests/unit/
    test_startup.py); the command line must still run, to diagnose that environment."""
    script = tmp_path / "empty.py"
    script.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    result = subprocess.run(
        [sys.executable, "-m", "torch2jax_device", "scan", str(script)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**env, "JAX_ENABLE_X64": "maybe", "JAX_NUM_CPU_DEVICES": "abc"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
