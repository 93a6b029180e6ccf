"""The third adversarial audit, side by side with torch (1 device): the mismatches it found.

Each test runs the PyTorch idiom as the oracle and the torch2jax_device port, and fails
on the library as it was before the audit's fix:

- a model's arrays in the order its torch twin lists them (``state_dict()``,
  ``parameters()``), where ``nnx.state`` sorts names (``bias`` before ``kernel``);
- ...
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import pytest
import torch
from flax import nnx

import torch2jax_device as tj
from tests.support.models import NnxNet, TorchTwin

# --- a model's arrays in its twin's order ------------------------------------------------


class Assigned(nnx.Module):
    """Layers assigned out of alphabetical order, and an own parameter after a layer."""

    def __init__(self) -> None:
        rngs = nnx.Rngs(0)
        self.zeta = nnx.Linear(2, 3, rngs=rngs)
        self.alpha = nnx.LayerNorm(3, rngs=rngs)
        self.blocks = nnx.List([nnx.Linear(3, 3, rngs=rngs) for _ in range(11)])
        self.stats = nnx.BatchNorm(3, rngs=rngs)
        self.scale = nnx.Param(jnp.ones(3))


class AssignedTwin(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.zeta = torch.nn.Linear(2, 3)
        self.alpha = torch.nn.LayerNorm(3)
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(3, 3) for _ in range(11)])
        self.stats = torch.nn.BatchNorm1d(3)
        self.scale = torch.nn.Parameter(torch.ones(3))


def twin_names(twin: torch.nn.Module) -> list[str]:
    """The twin's state dict names, without what torch keeps and JAX models have not."""
    return [name for name in twin.state_dict() if not name.endswith("num_batches_tracked")]


@pytest.mark.parametrize(("model", "twin"), [(Assigned, AssignedTwin), (NnxNet, TorchTwin)])
def test_the_torch_layout_lists_names_in_the_twins_order(model: Any, twin: Any) -> None:
    built = model() if model is Assigned else model(seed=0)
    assert list(tj.state_dict(built, layout="torch")) == twin_names(twin())


def test_the_jax_layout_lists_arrays_in_the_twins_order() -> None:
    ours = [array.size for array in tj.state_dict(Assigned()).values()]
    theirs = [AssignedTwin().state_dict()[name].numel() for name in twin_names(AssignedTwin())]
    assert ours == theirs
    assert list(tj.state_dict(Assigned()))[:3] == ["scale", "zeta.kernel", "zeta.bias"]


@pytest.mark.parametrize(("model", "twin"), [(Assigned, AssignedTwin), (NnxNet, TorchTwin)])
def test_parameters_pair_with_the_twins_parameters(model: Any, twin: Any) -> None:
    built = model() if model is Assigned else model(seed=0)
    ours = [parameter.size for parameter in tj.parameters(built)]
    assert ours == [parameter.numel() for parameter in twin().parameters()]


def test_the_torch_layout_keeps_values_with_their_names() -> None:
    model = Assigned()
    state = tj.state_dict(model, layout="torch")
    assert state["zeta.weight"].tolist() == jax.numpy.transpose(model.zeta.kernel).tolist()
    result = AssignedTwin().load_state_dict(state)  # torch fills in num_batches_tracked
    assert not result.missing_keys and not result.unexpected_keys


def test_an_equinox_model_lists_its_own_arrays_before_its_layers() -> None:
    eqx = pytest.importorskip("equinox")

    class Model(eqx.Module):  # type: ignore[misc,name-defined]
        fc: Any
        scale: Any
        norm: Any

        def __init__(self) -> None:
            self.fc = eqx.nn.Linear(2, 3, key=jax.random.key(0))
            self.scale = jnp.ones(3)
            self.norm = eqx.nn.LayerNorm(3)

    class Twin(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(2, 3)
            self.scale = torch.nn.Parameter(torch.ones(3))
            self.norm = torch.nn.LayerNorm(3)

    assert list(tj.state_dict(Model(), layout="torch")) == list(Twin().state_dict())
    assert list(tj.state_dict(Model())) == list(Twin().state_dict())
    restored = tj.load_state(Model(), Twin().state_dict())
    assert restored.scale.tolist() == [1.0, 1.0, 1.0]
