"""``tj.parameters(model, recurse=False)``: a model's own parameters, as torch's
``module.parameters(recurse=False)`` gives them (before the fix, Python's raw
``TypeError: unexpected keyword argument 'recurse'``).

The oracle is a torch twin with one parameter of its own and one layer; the same model
in NNX, Equinox and as a plain tree of arrays.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
import torch
from flax import nnx

import torch2jax_device as tj


class _Twin(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(3))
        self.layer = torch.nn.Linear(3, 2)


class _Nnx(nnx.Module):
    def __init__(self) -> None:
        self.scale = nnx.Param(jnp.ones(3))
        self.layer = nnx.Linear(3, 2, rngs=nnx.Rngs(0))


class _Eqx(eqx.Module):
    scale: jax.Array
    layer: eqx.nn.Linear


MODELS = {
    "nnx": _Nnx,
    "equinox": lambda: _Eqx(jnp.ones(3), eqx.nn.Linear(3, 2, key=jax.random.key(0))),
    "tree": lambda: {"scale": jnp.ones(3), "layer": {"weight": jnp.ones((2, 3))}},
    "torch": _Twin,
}


def _shapes(parameters: Any) -> list[tuple[int, ...]]:
    """Each parameter's shape, its axes sorted: NNX's Linear kernel is (in, out),
    torch's weight (out, in)."""
    return [tuple(sorted(p.shape)) for p in parameters]


@pytest.mark.parametrize("kind", sorted(MODELS))
@pytest.mark.parametrize("recurse", [True, False])
def test_recurse_false_gives_the_models_own_parameters_as_torch(kind: str, recurse: bool) -> None:
    theirs = _shapes(_Twin().parameters(recurse=recurse))
    ours = _shapes(tj.parameters(MODELS[kind](), recurse=recurse))
    if kind == "tree" and recurse:  # a tree has no bias: its layer holds one array
        assert ours == [(3,), (2, 3)]  # (axes sorted)
    else:
        assert ours == theirs


def test_recurse_that_is_not_a_bool_is_the_librarys_type_error() -> None:
    with pytest.raises(tj.ArgumentTypeError, match=r"recurse must be True .* or False"):
        tj.parameters(_Nnx(), recurse="no")  # type: ignore[arg-type]


def test_recurse_false_takes_a_dict_whose_keys_do_not_sort() -> None:
    tree = {1: jnp.ones(1), "a": {"b": jnp.ones(2)}}
    assert _shapes(tj.parameters(tree, recurse=False)) == [(1,)]
    assert _shapes(tj.parameters(tree)) == [(1,), (2,)]
