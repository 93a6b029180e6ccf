"""``tj.load_state`` casts a state's values into the model's dtypes as torch's
``load_state_dict`` does (its ``copy_``): every dtype pair, at the source dtype's edge
values, from a torch tensor, a NumPy array and a JAX array.

The oracle is a torch module holding a buffer of the target dtype, loaded with
``load_state_dict``. Before the fix, NumPy and JAX values went through ``astype``:
``1000.0`` into a ``float8_e4m3fn`` parameter became NaN (torch saturates to 448), a
float32 subnormal became ``False``, a negative into ``float8_e8m0fnu`` NaN, and complex
values warned only JAX's own deprecation (torch warns, as `tj.ComplexCastWarning` does).
"""

from __future__ import annotations

import warnings
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import torch2jax_device as tj
from tests.parity.test_audit_round5 import (
    DTYPES,
    defined,
    edge_tensor,
    host,
    jax_holds,
    numpy_dtype,
    same_values,
    source_as,
)


def _torch_loads(source: torch.Tensor, target: str) -> np.ndarray[Any, Any]:
    """What a torch module's ``target`` buffer holds after ``load_state_dict``."""
    module = torch.nn.Module()
    module.register_buffer("p", torch.zeros(source.shape, dtype=getattr(torch, target)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # complex -> real: checked below
        module.load_state_dict({"p": source})
    return host(module.p)


def _tj_loads(source: Any, target: str) -> Any:
    class Holder(nnx.Module):
        def __init__(self) -> None:
            self.p = nnx.Param(jnp.zeros(source.shape, numpy_dtype(target)))

    model = tj.load_state(Holder(), {"p": source})
    return np.asarray(model.p[...])


@pytest.mark.idiom("load-model-state")
@pytest.mark.parametrize("kind", ["torch", "numpy", "jax"])
@pytest.mark.parametrize("source_name", DTYPES)
def test_every_dtype_loads_into_a_model_with_torchs_values(kind: str, source_name: str) -> None:
    if kind == "jax" and not jax_holds(source_name):
        pytest.skip("JAX holds no 64-bit data without jax_enable_x64")
    source = edge_tensor(source_name)
    wrong = []
    for target in DTYPES:
        if not jax_holds(target):
            continue  # no model holds 64-bit arrays without jax_enable_x64
        theirs, mask = _torch_loads(source, target), defined(source, target)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tj.ComplexCastWarning)
            warnings.simplefilter("ignore", tj.DtypeNarrowingWarning)
            ours = _tj_loads(source_as(kind, source), target)
        bad = mask & ~same_values(ours, theirs)
        if bad.any():
            where = np.nonzero(bad)[0][:3]
            wrong.append(
                f"{source_name}->{target}: {host(source)[where].tolist()} gave "
                f"{ours[where].tolist()} ({ours.dtype}), torch {theirs[where].tolist()}"
            )
    assert not wrong, "\n".join(wrong[:20])


@pytest.mark.idiom("load-model-state")
@pytest.mark.parametrize("kind", ["torch", "numpy", "jax"])
def test_complex_values_into_a_real_parameter_warn_as_torch_does(kind: str) -> None:
    """torch warns "Casting complex values to real discards the imaginary part" (once
    per process: its C++ TORCH_WARN_ONCE); tj's warning says the same, each call."""
    source = torch.tensor([1 + 2j, -3j], dtype=torch.complex64)
    theirs = _torch_loads(source, "float32")
    with pytest.warns(tj.ComplexCastWarning, match="discards the imaginary part"):
        ours = _tj_loads(source_as(kind, source), "float32")
    assert ours.tolist() == theirs.tolist() == [1.0, 0.0]
