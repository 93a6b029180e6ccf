"""What a trainer does to a model between loading it and saving it, side by side with torch.

Two silent failures a real port (pytorch/examples' ImageNet trainer) met, each checked
against the torch twin as the oracle:

* ``tj.load_state(model, twin.state_dict())`` copies, as ``Module.load_state_dict``
  does: what torch later changes in place (``optimizer.step()``, BatchNorm's running
  statistics) never reaches the JAX model.
* The twin's order (``twin.parameters()``, ``twin.state_dict()``) survives every NNX
  transformation a trainer puts a model through: ``nnx.clone``, split and merge,
  ``nnx.jit`` (inside and out), ``nnx.Optimizer`` steps, pytree maps. Torch optimizer
  state is keyed by parameter index, so an order that changes misassigns it.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
from flax import nnx

import torch2jax_device as tj
from tests.parity.test_audit_round3 import Assigned, AssignedTwin
from tests.support.models import NnxNet, TorchTwin

# --- load_state copies, as load_state_dict does ------------------------------------------


class Small(nnx.Module):
    def __init__(self) -> None:
        rngs = nnx.Rngs(0)
        self.fc = nnx.Linear(3, 4, rngs=rngs)
        self.bn = nnx.BatchNorm(4, rngs=rngs)


class SmallTwin(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 4)
        self.bn = torch.nn.BatchNorm1d(4)


def _twin_changes_in_place(twin: SmallTwin) -> None:
    """What a torch training step does to the tensors of a state dict taken before it."""
    optimizer = torch.optim.SGD(twin.parameters(), lr=0.5)
    twin.train()
    twin.bn(twin.fc(torch.randn(8, 3))).square().sum().backward()  # running stats, in place
    optimizer.step()  # parameters, in place


def _snapshot(model: Any) -> dict[str, np.ndarray]:
    return {name: np.array(value) for name, value in tj.state_dict(model).items()}


@pytest.mark.parametrize("source", ["state_dict", "jax_layout", "numpy"])
def test_load_state_copies_what_torch_later_changes_in_place(source: str) -> None:
    twin, torch_model = SmallTwin(), SmallTwin()
    torch_model.load_state_dict(twin.state_dict())  # the oracle: torch copies
    state = twin.state_dict()
    if source == "jax_layout":
        state = dict(state)  # torch tensors under the twin's names, as a user passes them
    elif source == "numpy":
        state = {name: tensor.numpy() for name, tensor in state.items()}
    model = tj.load_state(Small(), state)
    before = _snapshot(model)
    torch_before = {name: t.clone() for name, t in torch_model.state_dict().items()}
    _twin_changes_in_place(twin)
    for name, tensor in torch_model.state_dict().items():  # torch's copy did not move
        assert torch.equal(tensor, torch_before[name]), name
    after = _snapshot(model)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)


def test_load_state_shares_only_when_asked() -> None:
    twin = SmallTwin()
    with tj.device("cpu"):  # where the twin's tensors are, also where JAX's default is a GPU
        model = tj.load_state(Small(), twin.state_dict(), copy=False)
    with torch.no_grad():
        twin.bn.running_mean.add_(1.0)  # needs no transpose: shared through DLPack
    np.testing.assert_array_equal(np.asarray(model.bn.mean[...]), twin.bn.running_mean.numpy())


def test_load_state_copy_must_be_a_bool() -> None:
    with pytest.raises(tj.ArgumentTypeError, match="copy must be True"):
        tj.load_state(Small(), SmallTwin().state_dict(), copy="yes")  # type: ignore[arg-type]


def test_load_state_copies_jax_arrays_too() -> None:
    """A JAX source is not aliased either: donating the model's buffers in a train step
    must not delete the arrays of the state dict it came from."""
    source = tj.state_dict(Small())
    model = tj.load_state(Small(), source)
    for name, value in tj.state_dict(model).items():
        assert value.unsafe_buffer_pointer() != source[name].unsafe_buffer_pointer(), name


# --- the twin's order survives the transformations a trainer uses ---------------------------


def _merged(model: Any) -> Any:
    graphdef, state = nnx.split(model)
    return nnx.merge(graphdef, state)


def _merged_by_kind(model: Any) -> Any:
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    return nnx.merge(graphdef, params, rest)


def _through_jit(model: Any) -> Any:
    return nnx.jit(lambda m: m)(model)


def _after_optimizer_steps(model: Any) -> Any:
    optimizer = nnx.Optimizer(model, optax.sgd(0.1, momentum=0.9), wrt=nnx.Param)

    @nnx.jit
    def step(model: Any, optimizer: Any) -> None:
        grads = nnx.grad(
            lambda m: sum(jnp.sum(p) for p in jax.tree.leaves(nnx.state(m, nnx.Param)))
        )(model)
        optimizer.update(model, grads)

    step(model, optimizer)
    step(model, optimizer)
    return model


def _through_tree_map(model: Any) -> Any:
    return jax.tree.map(lambda leaf: leaf, model)


TRANSFORMATIONS: dict[str, Callable[[Any], Any]] = {
    "as_built": lambda model: model,
    "nnx.clone": nnx.clone,
    "split_merge": _merged,
    "split_merge_by_kind": _merged_by_kind,
    "nnx.jit_returned": _through_jit,
    "nnx.Optimizer_steps": _after_optimizer_steps,
    "jax.tree.map": _through_tree_map,
    "copy.deepcopy": copy.deepcopy,
    "pickle": lambda model: pickle.loads(pickle.dumps(model)),
    "clone_of_merge": lambda model: nnx.clone(_merged(model)),
}


class Keyed(nnx.Module):
    """Layers in a dict whose keys are out of alphabetical order."""

    def __init__(self) -> None:
        rngs = nnx.Rngs(0)
        self.heads = nnx.Dict(
            {"zeta": nnx.Linear(2, 2, rngs=rngs), "alpha": nnx.Linear(2, 3, rngs=rngs)}
        )


class KeyedTwin(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.heads = torch.nn.ModuleDict(
            {"zeta": torch.nn.Linear(2, 2), "alpha": torch.nn.Linear(2, 3)}
        )


MODELS = {
    "assigned": (Assigned, AssignedTwin),
    "every_layer": (lambda: NnxNet(seed=0), TorchTwin),
    "keyed": (Keyed, KeyedTwin),
}


def _twin_state_names(twin: torch.nn.Module) -> list[str]:
    return [name for name in twin.state_dict() if not name.endswith("num_batches_tracked")]


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("transform", list(TRANSFORMATIONS))
def test_the_twins_order_survives(kind: str, transform: str) -> None:
    build, build_twin = MODELS[kind]
    model, twin = TRANSFORMATIONS[transform](build()), build_twin()
    assert list(tj.state_dict(model, layout="torch")) == _twin_state_names(twin)
    ours = [(parameter.ndim, parameter.size) for parameter in tj.parameters(model)]
    assert ours == [(parameter.ndim, parameter.numel()) for parameter in twin.parameters()]


@pytest.mark.parametrize("kind", list(MODELS))
def test_the_twins_order_holds_inside_nnx_jit(kind: str) -> None:
    build, build_twin = MODELS[kind]
    seen: list[list[tuple[int, ...]]] = []

    @nnx.jit
    def traced(model: Any) -> None:
        seen.append([(parameter.ndim, parameter.size) for parameter in tj.parameters(model)])
        seen.append([(array.ndim, array.size) for array in tj.state_dict(model).values()])

    traced(build())
    twin = build_twin()
    assert seen[0] == [(parameter.ndim, parameter.numel()) for parameter in twin.parameters()]
    state = twin.state_dict()
    assert seen[1] == [(state[name].ndim, state[name].numel()) for name in _twin_state_names(twin)]
