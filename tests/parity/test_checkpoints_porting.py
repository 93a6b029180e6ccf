"""Saving (``torch-save``): an NNX model to safetensors and back, and to a torch ``.pt``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import flax.traverse_util
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.flax
import torch
from flax import nnx

import torch2jax_device as tj


def _model(seed: int) -> nnx.Linear:
    return nnx.Linear(3, 2, rngs=nnx.Rngs(seed))


def _sequential(seed: int) -> nnx.Sequential:
    """A model as real ones are: numbered layers, batch statistics, and RNG state (which
    no state dict holds): the row's first port broke on the numbers and the key."""
    return nnx.Sequential(
        nnx.Linear(3, 2, rngs=nnx.Rngs(seed)),
        nnx.BatchNorm(2, rngs=nnx.Rngs(seed)),
        nnx.Dropout(0.1, rngs=nnx.Rngs(seed)),
    )


@pytest.mark.idiom("torch-save")
@pytest.mark.parametrize("make", [_model, _sequential], ids=["linear", "sequential"])
def test_a_model_and_its_step_round_trip_through_safetensors(
    tmp_path: Path, make: Callable[[int], nnx.Module]
) -> None:
    model, step = make(0), 7
    tj.save_file(model, tmp_path / "model.safetensors", {"step": str(step)})  # the row's port

    restored = tj.load_state(make(1), tmp_path / "model.safetensors")  # and its way back
    x = jnp.ones((4, 3))
    np.testing.assert_array_equal(np.asarray(_eval(restored)(x)), np.asarray(_eval(model)(x)))
    with tj.safe_open(tmp_path / "model.safetensors") as f:
        assert f.metadata() == {"step": "7"}
    # The plain-JAX column writes the same names and values.
    jax_column = tmp_path / "jax.safetensors"
    state = nnx.to_pure_dict(nnx.state(model, nnx.Not(nnx.RngState)))
    flat = {".".join(map(str, k)): v for k, v in flax.traverse_util.flatten_dict(state).items()}
    safetensors.flax.save_file(flat, str(jax_column), {"step": str(step)})
    ours, theirs = tj.load_file(tmp_path / "model.safetensors"), tj.load_file(jax_column)
    assert set(ours) == set(theirs)
    for name, value in theirs.items():
        np.testing.assert_array_equal(np.asarray(ours[name]), np.asarray(value))


def _eval(model: nnx.Module) -> nnx.Module:
    """The model in evaluation mode (batch statistics used, dropout off)."""
    model.eval()
    return model


@pytest.mark.idiom("torch-save")
def test_the_same_checkpoint_as_torch_save_writes(tmp_path: Path) -> None:
    torch_layer = torch.nn.Linear(3, 2)
    torch.save({"model": torch_layer.state_dict(), "step": 7}, tmp_path / "theirs.pt")

    model = _model(0)  # a port of the layer: NNX keeps (in, out), torch (out, in)
    model.kernel[...] = jnp.asarray(torch_layer.weight.detach().numpy().T)
    model.bias[...] = jnp.asarray(torch_layer.bias.detach().numpy())
    state = tj.state_dict(model, layout="torch")  # the row's notes: torch's names and layout
    torch.save({"model": state, "step": 7}, tmp_path / "ours.pt")

    theirs = torch.load(tmp_path / "theirs.pt", weights_only=True)
    ours = torch.load(tmp_path / "ours.pt", weights_only=True)
    assert ours["step"] == theirs["step"]
    for name, tensor in theirs["model"].items():
        # On a GPU machine the port's model (and so its tensors) sits on the GPU, where
        # JAX puts new arrays; torch's layer is on the CPU. The values are compared.
        assert torch.equal(ours["model"][name].cpu(), tensor), name
    back = tj.load(tmp_path / "ours.pt", map_location="cpu")  # and JAX reads it back
    np.testing.assert_array_equal(np.asarray(back["model"]["bias"]), np.asarray(model.bias[...]))
