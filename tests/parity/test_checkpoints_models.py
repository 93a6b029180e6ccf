"""Saving models side by side with PyTorch: a JAX model and its PyTorch twin exchange
state both ways and then compute the same outputs; safetensors files hold what
``safetensors.torch`` reads.

The oracle is the twin: the same input through the JAX model and through the torch
module given the model's state (or the reverse) must give the same numbers.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import safetensors.torch
import torch
from flax import nnx

import torch2jax_device as tj
from tests.support.models import (
    EquinoxTwin,
    NnxNet,
    TorchTwin,
    equinox_net,
    equinox_output,
    equinox_twin_output,
    nnx_output,
    twin_output,
)
from torch2jax_device._src import dtypes as _dtypes

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


@pytest.fixture(autouse=True)
def _fresh_narrowing_warnings() -> None:
    """int64 narrowing warns once per process; each test here expects to see it."""
    _dtypes._warned.clear()


@pytest.mark.idiom("save-model-torch-twin")
def test_an_nnx_model_saved_for_its_torch_twin_computes_the_same(tmp_path: Path) -> None:
    model = NnxNet(seed=0)
    path = tmp_path / "model.pt"
    torch.save(tj.state_dict(model, layout="torch"), path)
    twin = TorchTwin()
    assert not np.allclose(twin_output(twin), nnx_output(model), **TOLERANCE)
    result = twin.load_state_dict(torch.load(path))
    assert not result.missing_keys and not result.unexpected_keys
    np.testing.assert_allclose(twin_output(twin), nnx_output(model), **TOLERANCE)


@pytest.mark.idiom("save-model-torch-twin")
def test_the_torch_layout_is_what_the_twin_saves() -> None:
    ours = tj.state_dict(NnxNet(seed=0), layout="torch")
    theirs = TorchTwin().state_dict()
    del theirs["bn.num_batches_tracked"]  # torch fills it in when it is missing
    assert {k: (v.shape, v.dtype, v.device) for k, v in ours.items()} == {
        k: (v.shape, v.dtype, v.device) for k, v in theirs.items()
    }


@pytest.mark.idiom("load-model-state")
def test_a_torch_twins_state_loads_into_the_nnx_model(tmp_path: Path) -> None:
    twin = TorchTwin()
    with torch.no_grad():
        twin.bn.running_mean.uniform_(-1, 1)
        twin.bn.running_var.uniform_(0.5, 2)
    path = tmp_path / "twin.pt"
    torch.save(twin.state_dict(), path)
    model = NnxNet(seed=3)
    with pytest.warns(tj.DtypeNarrowingWarning, match="int64"):  # num_batches_tracked
        loaded = tj.load_state(model, path)
    assert loaded is model
    np.testing.assert_allclose(nnx_output(model), twin_output(twin), **TOLERANCE)


@pytest.mark.idiom("load-model-state")
def test_a_live_twin_state_dict_loads_without_a_file() -> None:
    twin = TorchTwin()
    state = {k: v for k, v in twin.state_dict().items() if "num_batches" not in k}
    model = tj.load_state(NnxNet(seed=4), state)
    np.testing.assert_allclose(nnx_output(model), twin_output(twin), **TOLERANCE)


@pytest.mark.idiom("load-model-state")
def test_missing_and_unexpected_names_are_refused_like_load_state_dict(tmp_path: Path) -> None:
    """Both refuse and list the names; tj's StateDictError is a RuntimeError, as torch's,
    and a CheckpointError."""
    state = TorchTwin().state_dict()
    del state["head.0.bias"]
    state["extra.weight"] = torch.ones(1)
    with pytest.raises(RuntimeError, match=r"Missing key\(s\).*head\.0\.bias") as theirs:
        TorchTwin().load_state_dict(state)
    assert "extra.weight" in str(theirs.value)
    with pytest.raises(tj.CheckpointError, match=r"Missing key\(s\): 'head\.0\.bias'") as ours:
        tj.load_state(NnxNet(seed=0), state)
    assert "Unexpected key(s): 'extra.weight'" in str(ours.value)


@pytest.mark.idiom("save-model-safetensors")
def test_safetensors_of_an_nnx_model_read_by_safetensors_torch(tmp_path: Path) -> None:
    model = NnxNet(seed=0)
    path = tmp_path / "model.safetensors"
    tj.save_file(model, path)
    theirs = safetensors.torch.load_file(path)
    ours = tj.state_dict(model)
    assert sorted(theirs) == sorted(ours)
    for name, array in ours.items():
        np.testing.assert_array_equal(theirs[name].numpy(), np.asarray(array))


@pytest.mark.idiom("save-model-safetensors")
def test_safetensors_in_the_torch_layout_load_into_the_twin(tmp_path: Path) -> None:
    model = NnxNet(seed=1)
    path = tmp_path / "hf-style.safetensors"
    tj.save_file(tj.state_dict(model, layout="torch"), path)
    twin = TorchTwin()
    twin.load_state_dict(safetensors.torch.load_file(path), strict=False)
    np.testing.assert_allclose(twin_output(twin), nnx_output(model), **TOLERANCE)
    back = tj.load_state(NnxNet(seed=2), path)  # the torch layout, read back
    np.testing.assert_allclose(nnx_output(back), nnx_output(model), **TOLERANCE)


@pytest.mark.idiom("load-model-state")
def test_an_nnx_model_round_trips_through_safetensors(tmp_path: Path) -> None:
    model = NnxNet(seed=0)
    path = tmp_path / "model.safetensors"
    tj.save_file(nnx.state(model), path)
    restored = tj.load_state(NnxNet(seed=5), path)
    np.testing.assert_array_equal(nnx_output(restored), nnx_output(model))


# ------------------------------------------------------------------------ Equinox


@pytest.fixture
def eqx() -> Any:
    return pytest.importorskip("equinox")


@pytest.mark.idiom("save-model-torch-twin")
def test_an_equinox_model_and_its_twin_exchange_state(eqx: Any) -> None:
    model = equinox_net(seed=0)
    twin = EquinoxTwin()
    buffer = io.BytesIO()
    torch.save(tj.state_dict(model, layout="torch"), buffer)
    buffer.seek(0)
    twin.load_state_dict(torch.load(buffer))
    np.testing.assert_allclose(equinox_twin_output(twin), equinox_output(model), **TOLERANCE)
    other = EquinoxTwin()
    loaded = tj.load_state(equinox_net(seed=1), other.state_dict())
    np.testing.assert_allclose(equinox_output(loaded), equinox_twin_output(other), **TOLERANCE)


@pytest.mark.idiom("save-model-safetensors")
def test_an_equinox_model_round_trips_through_safetensors(eqx: Any, tmp_path: Path) -> None:
    model = equinox_net(seed=0)
    path = tmp_path / "eqx.safetensors"
    tj.save_file(model, path)
    assert sorted(safetensors.torch.load_file(path)) == sorted(tj.state_dict(model))
    target = equinox_net(seed=1)
    restored = tj.load_state(target, path)
    assert type(restored) is type(target) and restored is not target
    np.testing.assert_array_equal(equinox_output(restored), equinox_output(model))
    assert jax.tree_util.tree_structure(restored) == jax.tree_util.tree_structure(target)
