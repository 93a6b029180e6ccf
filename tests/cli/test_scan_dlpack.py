"""``scan`` on DLPack exchanges between torch and JAX, as public glue code writes them.

Each input is a small excerpt of a real file (its repository and path in a comment), cut
down to the lines a finding depends on, or a case shaped after one. Only
``torch.from_dlpack`` of a value known to be a JAX array is rewritten (``tj.to_torch`` is
the same DLPack import there, tests/parity/test_dlpack_porting.py); every other form is a
finding with the tj call and the reason it is left to the porter.
"""

from __future__ import annotations

import textwrap
from typing import Any

import jax.numpy as jnp
import pytest
import torch

from tests.support.cli import port_text, scan_text
from torch2jax_device.porting import scanner

_EXCHANGE_RULES = ("tensor-to-jax", "jax-to-tensor")


def _exchanges(source: str) -> list[scanner.Finding]:
    return [f for f in scan_text(source) if f.rule in _EXCHANGE_RULES]


def _run(source: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(source, "<ported>", "exec"), namespace)
    return namespace


# lucidrains/jax2torch jax2torch/jax2torch.py: j2t / t2j through DLPack capsules.
JAX2TORCH = """\
    import torch
    from torch.utils import dlpack as torch_dlpack

    import jax
    from jax import dlpack as jax_dlpack
    import jax.numpy as jnp

    def j2t(x_jax):
        x_torch = torch_dlpack.from_dlpack(jax_dlpack.to_dlpack(x_jax))
        return x_torch

    def t2j(x_torch):
        x_torch = x_torch.contiguous()
        x_jax = jax_dlpack.from_dlpack(torch_dlpack.to_dlpack(x_torch))
        return x_jax
"""


def test_jax2torch_one_finding_per_exchange() -> None:
    j2t, t2j = _exchanges(JAX2TORCH)  # the capsule is part of its exchange, not a second finding
    assert (j2t.rule, j2t.line, j2t.replacement, j2t.fixable) == (
        "jax-to-tensor",
        9,
        "tj.to_torch(x_jax)",
        True,
    )
    assert (t2j.rule, t2j.line, t2j.replacement, t2j.fixable) == (
        "tensor-to-jax",
        14,
        "tj.to_jax(x_torch)",
        False,
    )
    assert "other DLPack exporters" in t2j.reason and "negative bit" in t2j.reason


def test_jax2torch_j2t_port_runs_where_the_original_no_longer_does() -> None:
    """``jax.dlpack.to_dlpack`` is gone from JAX 0.10; the port is torch's DLPack import."""
    original = _run(textwrap.dedent(JAX2TORCH))
    ported_source = port_text(JAX2TORCH)
    assert "x_torch = tj.to_torch(x_jax)\n" in ported_source
    assert "jax_dlpack.from_dlpack(torch_dlpack.to_dlpack(x_torch))" in ported_source  # kept
    array = jnp.arange(6.0).reshape(2, 3)
    if hasattr(original["jax_dlpack"], "to_dlpack"):
        pytest.skip("this JAX still has jax.dlpack.to_dlpack")
    with pytest.raises(AttributeError, match="to_dlpack"):
        original["j2t"](array)
    ported = _run(ported_source)["j2t"](array)
    theirs = torch.from_dlpack(array)
    assert (ported.device, ported.dtype) == (theirs.device, theirs.dtype)
    assert ported.data_ptr() == theirs.data_ptr() == array.unsafe_buffer_pointer()
    assert torch.equal(ported, theirs)


# mlcommons/algorithmic-efficiency algorithmic_efficiency/pytorch_utils.py (an earlier
# version): the capsule is made with take_ownership=, an option of JAX's own.
ALGORITHMIC_EFFICIENCY = """\
    import jax
    import torch

    def jax_to_pytorch(x, take_ownership: bool = False):
        return torch.utils.dlpack.from_dlpack(
            jax.dlpack.to_dlpack(x, take_ownership=take_ownership)
        )

    def pytorch_to_jax(x: torch.Tensor):
        x = x.contiguous()  # https://github.com/google/jax/issues/8082
        return jax.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(x))
"""


def test_algorithmic_efficiency_capsule_options_hold_the_rewrite_back() -> None:
    to_torch, to_jax = _exchanges(ALGORITHMIC_EFFICIENCY)
    assert (to_torch.rule, to_torch.replacement, to_torch.fixable) == (
        "jax-to-tensor",
        "tj.to_torch(x)",
        False,
    )
    assert "take_ownership=" in to_torch.reason
    assert (to_jax.rule, to_jax.replacement, to_jax.fixable) == (
        "tensor-to-jax",
        "tj.to_jax(x)",
        False,
    )
    assert port_text(ALGORITHMIC_EFFICIENCY) == textwrap.dedent(ALGORITHMIC_EFFICIENCY)


# NiklasKappel/nnx-lightning try_pydlpack.py: pydlpack's asdlpack wraps either side.
NNX_LIGHTNING = """\
    import jax
    import jax.numpy as jnp
    import torch
    from dlpack import asdlpack

    def convert_to_torch_and_back_dlpack(jax_array):
        torch_tensor = torch.from_dlpack(asdlpack(jax_array))  # type: ignore
        jax_array = jnp.from_dlpack(asdlpack(torch_tensor)).block_until_ready()
"""


def test_nnx_lightning_other_exporters_are_findings_without_rewrite() -> None:
    to_torch, to_jax = _exchanges(NNX_LIGHTNING)
    assert (to_torch.rule, to_torch.replacement, to_torch.fixable) == (
        "jax-to-tensor",
        "tj.to_torch(asdlpack(jax_array))",
        False,
    )
    assert "other DLPack exporters" in to_torch.reason
    assert (to_jax.rule, to_jax.replacement, to_jax.fixable) == (
        "tensor-to-jax",
        "tj.to_jax(asdlpack(torch_tensor))",
        False,
    )


# Shaped after glue modules that import the functions themselves (e.g. a jaxtyping-
# annotated torch_to_jax / jax_to_torch pair): a JAX array the scanner can see is renamed.
DIRECT = """\
    import jax.numpy as jnp
    from jax.dlpack import from_dlpack as jax_from_dlpack
    from torch.utils.dlpack import from_dlpack as torch_from_dlpack

    def torch_to_jax(x):
        return jax_from_dlpack(x.contiguous())

    def jax_to_torch(x):
        return torch_from_dlpack(x)

    logits = jnp.linspace(0.0, 1.0, 6)
    scores = torch_from_dlpack(logits)
"""


def test_direct_imports_rename_only_a_known_jax_array() -> None:
    to_jax, unknown, known = _exchanges(DIRECT)
    assert (to_jax.rule, to_jax.replacement, to_jax.fixable) == (
        "tensor-to-jax",
        "tj.to_jax(x.contiguous())",
        False,
    )
    assert (unknown.replacement, unknown.fixable) == ("tj.to_torch(x)", False)
    assert (known.line, known.replacement, known.fixable) == (12, "tj.to_torch(logits)", True)
    ported = port_text(DIRECT)
    assert "scores = tj.to_torch(logits)\n" in ported
    assert "return torch_from_dlpack(x)\n" in ported
    namespace = _run(ported)
    theirs = torch.from_dlpack(namespace["logits"])
    assert namespace["scores"].data_ptr() == theirs.data_ptr()
    assert torch.equal(namespace["scores"], theirs)


def test_a_standalone_capsule_and_a_reference_are_reported() -> None:
    found = _exchanges(
        """\
        import jax
        import torch
        import torch.utils.dlpack

        def export(t):
            return torch.utils.dlpack.to_dlpack(t)

        def hand_back(xs):
            return jax.tree.map(torch.from_dlpack, xs)

        def export_jax(x):
            return jax.dlpack.to_dlpack(x)
        """
    )
    capsule, reference, gone = found
    assert (capsule.rule, capsule.replacement, capsule.fixable) == (
        "tensor-to-jax",
        "tj.to_jax(t)",
        False,
    )
    assert "no longer takes" in capsule.reason
    assert (reference.rule, reference.replacement, reference.fixable) == (
        "jax-to-tensor",
        "tj.to_torch",
        False,
    )
    assert "a reference" in reference.reason
    assert (gone.rule, gone.replacement) == ("jax-to-tensor", "tj.to_torch(x)")
    assert "gone from JAX" in gone.reason
