"""``import torch2jax_device`` must not import torch or flax, nor start JAX's backends.

Checked in a fresh interpreter; the meta-tests show the same check does catch each
side effect, so the main test cannot pass vacuously.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

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
