"""Saving (``torch-save``): an NNX model to safetensors and back, and to a torch ``.pt``."""

from __future__ import annotations

from pathlib import Path

import flax.traverse_util
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import torch2jax_device as tj


def _model(seed: int) -> nnx.Linear:
    return nnx.Linear(3, 2, rngs=nnx.Rngs(seed))


@pytest.mark.idiom("torch-save")
def test_a_model_and_its_step_round_trip_through_safetensors(tmp_path: Path) -> None:
    model, step = _model(0), 7
    flat = flax.traverse_util.flatten_dict(nnx.to_pure_dict(nnx.state(model)), sep=".")
    tj.save_file(flat, tmp_path / "model.safetensors", {"step": str(step)})

    restored = _model(1)  # other weights, the same structure
    loaded = tj.load_file(tmp_path / "model.safetensors")
    state = nnx.state(restored)
    nnx.replace_by_pure_dict(state, flax.traverse_util.unflatten_dict(loaded, sep="."))
    nnx.update(restored, state)
    x = jnp.ones((4, 3))
    np.testing.assert_array_equal(np.asarray(restored(x)), np.asarray(model(x)))
    with tj.safe_open(tmp_path / "model.safetensors") as f:
        assert f.metadata() == {"step": "7"}


@pytest.mark.idiom("torch-save")
def test_the_same_checkpoint_as_torch_save_writes(tmp_path: Path) -> None:
    torch_layer = torch.nn.Linear(3, 2)
    torch.save({"model": torch_layer.state_dict(), "step": 7}, tmp_path / "theirs.pt")

    model = _model(0)  # a port of the layer: NNX keeps (in, out), torch (out, in)
    model.kernel[...] = jnp.asarray(torch_layer.weight.detach().numpy().T)
    model.bias[...] = jnp.asarray(torch_layer.bias.detach().numpy())
    state = {"weight": tj.to_torch(model.kernel[...].T), "bias": tj.to_torch(model.bias[...])}
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
