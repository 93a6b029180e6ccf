"""``next(tj.parameters(model))`` answers torch's Tensor methods as torch does, or names
the JAX spelling.

``p.view(-1)`` is a reshape in torch and JAX's ``Array.view`` takes only a dtype (raw
``TypeError``) and ``p.dim()`` was missing: each now gives torch's result
(``round(p)`` raises ``TypeError`` in both: torch tensors define no ``__round__``).
torch methods JAX arrays lack raise the library's ``NoSuchAttributeError`` with the JAX
spelling; the table of them holds only names that are torch's and that JAX arrays lack,
so it cannot rot.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import torch2jax_device as tj
from torch2jax_device._src.location import _TORCH_METHODS

VALUES = np.array([[1.5, -2.5, 0.5], [3.0, 4.25, -0.75]], np.float32)


def _pair() -> tuple[torch.Tensor, tj.Parameter]:
    return torch.from_numpy(VALUES.copy()), next(tj.parameters({"w": jnp.asarray(VALUES)}))


@pytest.mark.parametrize(
    "call",
    [
        lambda p: p.view(-1),
        lambda p: p.view(3, 2),
        lambda p: p.view((2, 3)),
        lambda p: p.view(-1, 2),
        lambda p: p.dim(),
    ],
    ids=["view_flat", "view_args", "view_tuple", "view_inferred", "dim"],
)
def test_it_answers_as_torchs_tensor(call: object) -> None:
    theirs, ours = _pair()
    expected, got = call(theirs), call(ours)  # type: ignore[operator]
    if isinstance(expected, int):
        assert got == expected
        return
    assert tuple(got.shape) == tuple(expected.shape)
    assert np.asarray(got).tolist() == expected.numpy().tolist()


def test_round_raises_type_error_as_torchs_tensor_does() -> None:
    theirs, ours = _pair()
    for value in (theirs, ours):
        with pytest.raises(TypeError, match="__round__"):
            round(value)  # type: ignore[call-overload]


def test_view_of_a_dtype_reinterprets_the_bits_as_torch_does() -> None:
    theirs, ours = _pair()
    assert np.asarray(ours.view(jnp.int32)).tolist() == theirs.view(torch.int32).tolist()


@pytest.mark.parametrize("name", sorted(_TORCH_METHODS))
def test_each_torch_method_jax_lacks_names_the_jax_spelling(name: str) -> None:
    theirs, ours = _pair()
    assert callable(getattr(theirs, name)), f"torch.Tensor has no {name}"
    assert not hasattr(jnp.ones(1), name), f"JAX arrays have {name}: no entry needed"
    with pytest.raises(tj.NoSuchAttributeError, match=rf"Tensor\.{name}\): .* Fix: "):
        getattr(ours, name)
