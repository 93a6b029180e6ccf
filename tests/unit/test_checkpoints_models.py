"""``tj.state_dict``, ``tj.load_state`` and ``tj.save_file`` of a model: names, what is
saved, where loaded arrays go, and the errors (side by side with torch twins in
``tests/parity/test_checkpoints_models.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import torch2jax_device as tj
from tests.support.models import NnxNet, equinox_net, nnx_output
from torch2jax_device import CheckpointError, ConversionError, StateDictError


class Tagged(nnx.Module):
    """Variables of every kind: only arrays that are not RNG state or sown are saved."""

    def __init__(self) -> None:
        self.dense = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        self.drop = nnx.Dropout(0.5, rngs=nnx.Rngs(dropout=1))
        self.steps = nnx.Variable(jnp.zeros((), jnp.int32))
        self.label = nnx.Variable("not an array")
        self.activations = nnx.Intermediate(jnp.zeros(3))


def test_names_join_attributes_and_indices_with_dots() -> None:
    names = sorted(tj.state_dict(NnxNet(seed=0)))
    assert "layers.0.kernel" in names and "head.layers.0.kernel" in names
    assert "bn.mean" in names and "embed.embedding" in names and "temperature" in names
    assert not any("rngs" in name or "drop" in name for name in names)


def test_what_an_nnx_state_dict_holds() -> None:
    model = Tagged()
    state = tj.state_dict(model)
    assert sorted(state) == ["dense.bias", "dense.kernel", "steps"]
    assert state["dense.kernel"] is model.dense.kernel[...]


def test_an_nnx_state_gives_the_same_names_and_no_torch_layout() -> None:
    model = NnxNet(seed=0)
    assert sorted(tj.state_dict(nnx.state(model))) == sorted(tj.state_dict(model))
    with pytest.raises(ConversionError, match=r"needs the module, not its nnx\.State"):
        tj.state_dict(nnx.state(model), layout="torch")


def test_save_file_takes_a_model_or_its_state(tmp_path: Path) -> None:
    model = NnxNet(seed=0)
    tj.save_file(model, tmp_path / "model.safetensors")
    tj.save_file(nnx.state(model), tmp_path / "state.safetensors")
    assert (tmp_path / "model.safetensors").read_bytes() == (
        tmp_path / "state.safetensors"
    ).read_bytes()
    loaded = tj.load_file(tmp_path / "model.safetensors")
    np.testing.assert_array_equal(loaded["layers.1.kernel"], model.layers[1].kernel[...])


def test_torch_layout_copies_so_torch_code_cannot_change_the_model() -> None:
    model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    before = np.asarray(model.bias[...]).copy()
    state = tj.state_dict(model, layout="torch")
    state["bias"].add_(1.0)
    state["weight"].zero_()
    np.testing.assert_array_equal(np.asarray(model.bias[...]), before)
    assert state["weight"].is_contiguous() and state["weight"].device == torch.device("cpu")


def test_load_state_updates_an_nnx_model_in_place(tmp_path: Path) -> None:
    source = NnxNet(seed=0)
    path = tmp_path / "model.safetensors"
    tj.save_file(source, path)
    target = NnxNet(seed=1)
    kernel = target.layers[0].kernel
    assert tj.load_state(target, path) is target
    assert target.layers[0].kernel is kernel  # the same Variable, a new value
    np.testing.assert_array_equal(nnx_output(target), nnx_output(source))


def test_loaded_arrays_take_the_models_dtype_and_placement() -> None:
    model = nnx.Linear(2, 3, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    where = model.kernel[...].devices()  # JAX's default device: the GPU where there is one
    state = {"kernel": np.ones((2, 3), np.float32), "bias": torch.zeros(3, dtype=torch.float64)}
    tj.load_state(model, state)
    assert model.kernel[...].dtype == jnp.bfloat16 and model.bias[...].dtype == jnp.bfloat16
    assert model.kernel[...].committed and model.kernel[...].devices() == where
    assert np.asarray(model.kernel[...], np.float32).tolist() == [[1.0] * 3] * 2


def test_load_state_errors_say_what_to_fix(tmp_path: Path) -> None:
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    good = {"kernel": np.ones((2, 3), np.float32), "bias": np.zeros(3, np.float32)}
    with pytest.raises(CheckpointError, match=r"size mismatch for 'kernel'.*\(3, 2\).*\(2, 3\)"):
        tj.load_state(model, {**good, "kernel": np.ones((3, 2), np.float32)})
    with pytest.raises(CheckpointError, match=r"Missing key.*'bias'; Unexpected key.*'b'"):
        tj.load_state(model, {"kernel": good["kernel"], "b": good["bias"]})
    with pytest.raises(CheckpointError, match=r"whole checkpoint.*tj\.load\(path\)\['model'\]"):
        tj.load_state(model, {"model": good, "step": 3})
    with pytest.raises(ConversionError, match="'bias' is a list, not an array"):
        tj.load_state(model, {**good, "bias": [0.0, 0.0, 0.0]})
    with pytest.raises(ConversionError, match="not dict"):
        tj.load_state({"kernel": 1}, good)
    path = tmp_path / "list.pt"
    torch.save([torch.ones(1)], path)
    with pytest.raises(CheckpointError, match="holds a list, not a state dict"):
        tj.load_state(model, path)
    untouched = np.asarray(model.kernel[...]).copy()
    np.testing.assert_array_equal(np.asarray(model.kernel[...]), untouched)


def test_a_failed_load_changes_nothing() -> None:
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    before = {name: np.asarray(value).copy() for name, value in tj.state_dict(model).items()}
    with pytest.raises(CheckpointError):
        tj.load_state(model, {"kernel": np.ones((2, 3), np.float32), "bias": np.ones(4)})
    after = {name: np.asarray(value) for name, value in tj.state_dict(model).items()}
    assert all(np.array_equal(before[name], after[name]) for name in before)


@pytest.mark.parametrize(
    ("make", "layer"),
    [
        (lambda: nnx.LinearGeneral(2, (3, 4), rngs=nnx.Rngs(0)), "LinearGeneral"),
        (lambda: nnx.ConvTranspose(2, 3, (3,), rngs=nnx.Rngs(0)), "ConvTranspose"),
        (
            lambda: nnx.MultiHeadAttention(2, 4, decode=False, rngs=nnx.Rngs(0)),
            "LinearGeneral",
        ),
    ],
    ids=["linear-general", "conv-transpose", "attention"],
)
def test_flax_layers_without_a_torch_layout_are_refused(make: Any, layer: str) -> None:
    model = make()
    assert tj.state_dict(model)  # the JAX layout always works
    with pytest.raises(ConversionError, match=f"flax {layer}, which has no torch counterpart"):
        tj.state_dict(model, layout="torch")
    # Loading a torch-named state says why the names cannot match, not only which differ.
    torch_named = {
        name.replace("kernel", "weight"): np.asarray(value)
        for name, value in tj.state_dict(model).items()
    }
    with pytest.raises(StateDictError, match=f"Unexpected key.*flax {layer}, which has no torch"):
        tj.load_state(model, torch_named)


def test_a_dotted_name_that_repeats_another_is_refused() -> None:
    class Clash(nnx.Module):
        def __init__(self) -> None:
            self.a = nnx.Dict({"b": nnx.Param(jnp.ones(1))})
            setattr(self, "a.b", nnx.Param(jnp.zeros(1)))

    with pytest.raises(ConversionError, match=r"both be named 'a\.b'"):
        tj.state_dict(Clash())


def test_non_models_are_refused() -> None:
    with pytest.raises(ConversionError, match="not dict; for a dict of arrays, use it"):
        tj.state_dict({"w": jnp.ones(1)})
    with pytest.raises(ConversionError, match="layout must be 'jax' or 'torch'"):
        tj.state_dict(nnx.Linear(1, 1, rngs=nnx.Rngs(0)), layout="pt")  # type: ignore[arg-type]


# ------------------------------------------------------------------------ Equinox


@pytest.fixture
def eqx() -> Any:
    return pytest.importorskip("equinox")


def test_equinox_names_and_a_new_module_back(eqx: Any) -> None:
    model = equinox_net(seed=0)
    assert sorted(tj.state_dict(model)) == [
        "conv.bias",
        "conv.weight",
        "mlp.layers.0.bias",
        "mlp.layers.0.weight",
        "mlp.layers.2.bias",
        "mlp.layers.2.weight",
        "norm.bias",
        "norm.weight",
    ]
    torch_names = tj.state_dict(model, layout="torch")
    assert torch_names["conv.bias"].shape == (6,)  # Equinox keeps it (6, 1)
    assert "mlp.0.weight" in torch_names
    target = equinox_net(seed=1)
    loaded = tj.load_state(target, tj.state_dict(model))
    assert loaded is not target
    assert all(
        np.array_equal(a, b)
        for a, b in zip(
            jax.tree.leaves(eqx.filter(loaded, eqx.is_array)),
            jax.tree.leaves(eqx.filter(model, eqx.is_array)),
            strict=True,
        )
    )


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda eqx: eqx.nn.ConvTranspose1d(2, 3, 3, key=jax.random.key(0)), "ConvTranspose1d"),
        (lambda eqx: eqx.nn.BatchNorm(3, "batch", mode="batch"), "BatchNorm, and its running"),
    ],
    ids=["conv-transpose", "batchnorm"],
)
def test_equinox_layers_without_a_torch_layout_are_refused(
    eqx: Any, make: Any, reason: str
) -> None:
    with pytest.raises(ConversionError, match=reason):
        tj.state_dict(make(eqx), layout="torch")
