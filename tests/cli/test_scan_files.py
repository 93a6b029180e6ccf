"""``torch2jax-device scan`` on any file a repository can hold: special files, huge or
deeply nested files, names bound thousands of times, other encodings, CRLF line ends,
files that change while they are scanned, and what ``--diff`` says when it holds back."""

from __future__ import annotations

import io
import sys

import pytest

from torch2jax_device.cli import main
from torch2jax_device.porting import _values
from torch2jax_device.porting.scanner import scan_source


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        status = main(list(argv))
    finally:
        sys.stdout, sys.stderr = streams
    return status, out.getvalue(), err.getvalue()


# -- names bound many times ---------------------------------------------------------------
def test_a_name_bound_many_times_is_worked_out_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read of ``x`` sees the same bindings: their kinds are asked for once each,
    not once per read (which made a 1.7 MB file take 44 s)."""
    asked = []
    real = _values.Values.binding_kinds

    def counting(self: _values.Values, binding: object) -> set[str]:
        asked.append(binding)
        return real(self, binding)  # type: ignore[arg-type]

    monkeypatch.setattr(_values.Values, "binding_kinds", counting)
    lines = "x = torch.ones(2).cuda()\ny = jnp.sum(x)\nx.device\n"
    findings = scan_source("import torch\nimport jax.numpy as jnp\n" + lines * 300)
    assert len([f for f in findings if f.rule == "tensor-cuda"]) == 300
    assert len(asked) <= 2 * 300  # was 300 * 300


def test_a_name_rebound_from_itself_many_times_does_not_recurse() -> None:
    """``x = x.cuda()`` 1,500 times: one cycle, not 1,500 levels of recursion."""
    findings = scan_source("import torch\nx = torch.zeros(1)\n" + "x = x.cuda()\n" * 1500)
    assert [f.rule for f in findings] == ["tensor-cuda"] * 1500
