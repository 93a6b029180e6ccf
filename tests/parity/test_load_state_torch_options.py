"""Each option of torch's ``load_state_dict``: taken by ``tj.load_state``, or refused with a fix.

The oracle is torch's own signature: each keyword ``torch.nn.Module.load_state_dict``
takes (read with ``inspect``, so a keyword a later torch adds is checked too) is passed
with its default, which must load as torch loads, and with the other value of a flag,
which must load or raise the library's error with a fix, never Python's "unexpected
keyword argument" (a ported ``model.load_state_dict(state, strict=False)`` raised that).
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest
import torch
from flax import nnx

import torch2jax_device as tj

OPTIONS = [
    parameter
    for parameter in inspect.signature(torch.nn.Module.load_state_dict).parameters.values()
    if parameter.name not in ("self", "state_dict")
]


def _model_and_state() -> tuple[nnx.Linear, dict[str, Any]]:
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    return model, dict(tj.state_dict(nnx.Linear(2, 3, rngs=nnx.Rngs(1)), layout="torch"))


@pytest.mark.parametrize("option", OPTIONS, ids=lambda parameter: parameter.name)
def test_torchs_default_loads_as_torch_loads(option: inspect.Parameter) -> None:
    model, state = _model_and_state()
    tj.load_state(model, state, **{option.name: option.default})
    np.testing.assert_array_equal(np.asarray(model.kernel[...]).T, state["weight"].numpy())


@pytest.mark.parametrize(
    "option",
    [parameter for parameter in OPTIONS if isinstance(parameter.default, bool)],
    ids=lambda parameter: parameter.name,
)
def test_the_other_value_loads_or_is_refused_with_the_fix(option: inspect.Parameter) -> None:
    model, state = _model_and_state()
    before = np.asarray(model.kernel[...]).copy()
    with pytest.raises(tj.StateDictError, match=f"{option.name}=.*Fix: "):
        tj.load_state(model, state, **{option.name: not option.default})
    np.testing.assert_array_equal(np.asarray(model.kernel[...]), before)  # nothing changed
