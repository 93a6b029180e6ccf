"""Model state among 4 simulated CPU devices: ``tj.load_state`` puts every array where
the one it replaces is (a device, or a sharding over several), in one transfer, as
``load_state_dict`` copies into parameters where they live; ``tj.load`` with
``map_location`` goes straight to the device asked for."""

from __future__ import annotations

import io
from pathlib import Path

import jax
import numpy as np
import torch
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import torch2jax_device as tj

CPUS = jax.local_devices(backend="cpu")


def test_load_state_keeps_each_arrays_device_and_sharding(tmp_path: Path) -> None:
    model = tj.to_device(nnx.Linear(4, 8, rngs=nnx.Rngs(0)), "cpu:2")
    sharded = NamedSharding(Mesh(np.array(CPUS), ("x",)), PartitionSpec(None, "x"))
    model.kernel.set_value(jax.device_put(model.kernel[...], sharded))
    path = tmp_path / "model.safetensors"
    source = nnx.Linear(4, 8, rngs=nnx.Rngs(1))
    tj.save_file(source, path)
    tj.load_state(model, path)
    assert model.kernel[...].sharding == sharded
    assert model.bias[...].committed and model.bias[...].devices() == {CPUS[2]}
    np.testing.assert_array_equal(np.asarray(model.kernel[...]), np.asarray(source.kernel[...]))


def test_a_twin_state_goes_to_the_models_devices() -> None:
    model = tj.to_device(nnx.Linear(3, 2, rngs=nnx.Rngs(0)), "cpu:3")
    twin = torch.nn.Linear(3, 2)
    tj.load_state(model, twin.state_dict())
    assert model.kernel[...].devices() == {CPUS[3]}
    np.testing.assert_array_equal(np.asarray(model.kernel[...]), twin.weight.detach().numpy().T)


def test_load_from_a_file_object_onto_a_device() -> None:
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(3.0), "tied": [torch.ones(1)]}, buffer)
    buffer.seek(0)
    loaded = tj.load(buffer, map_location="cpu:1")
    assert loaded["w"].devices() == {CPUS[1]} and loaded["tied"][0].devices() == {CPUS[1]}
