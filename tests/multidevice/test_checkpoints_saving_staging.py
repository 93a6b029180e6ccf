"""Checkpoint saves from a device through pinned device->host copies (issue 23).

On a GPU, ``np.asarray`` of a device array runs at 2 GB/s and a copy into the device's
``pinned_host`` memory at the bus's speed. Here cpu:1..3 play the accelerators: every
test checks that the tensors read back by the real safetensors / torch equal the
values saved, that the file is byte for byte the one a save of the same values from
host NumPy writes, and that the pinned route was taken (counted).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import ml_dtypes
import numpy as np
import pytest
import safetensors.torch
import torch
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import torch2jax_device as tj
from tests.support.arrays import patterned
from torch2jax_device._src import host_staging

CPUS = jax.devices("cpu")[:4]
HOST, ACCELERATOR = CPUS[:2]


class Fetches:
    """The device->host copies through pinned memory, and whether earlier results live."""

    def __init__(self, patch: pytest.MonkeyPatch) -> None:
        self.sources: list[jax.Device] = []
        self.alive_at_fetch: list[int] = []  # earlier results still alive at each fetch
        self._results: list[weakref.ref[Any]] = []
        to_host = host_staging._to_host

        def counting(arrays: list[jax.Array], target: jax.Device) -> list[jax.Array]:
            self.alive_at_fetch.append(sum(ref() is not None for ref in self._results))
            self.sources.extend(next(iter(a.devices())) for a in arrays)
            results = to_host(arrays, target)
            self._results.extend(weakref.ref(result) for result in results)
            return results

        patch.setattr(host_staging, "_to_host", counting)


@pytest.fixture
def fetches(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fetches]:
    """cpu:0 is the host; cpu:1..3 copy to it through their pinned host memory."""
    monkeypatch.setattr(host_staging, "routes_through_pinned", lambda device: device != HOST)
    yield Fetches(monkeypatch)


TENSORS = {
    "embed": patterned((37, 77), ml_dtypes.bfloat16),
    "fp8": patterned((129,), ml_dtypes.float8_e4m3fn),
    "fp8b": patterned((5, 3), ml_dtypes.float8_e5m2),
    "ids": patterned((1001,), np.int32),
    "half": patterned((3, 7, 11), np.float16),
    "scalar": np.array(2.5, np.float32),
    "empty": np.zeros((0, 3), np.float32),
    "mask": np.arange(17) % 3 == 0,
}


def _read_back(path: Path) -> dict[str, bytes]:
    """Each tensor's bytes as safetensors.torch reads them (it has every float8 type)."""
    return {
        name: tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        for name, tensor in safetensors.torch.load_file(str(path)).items()
    }


def test_arrays_on_an_accelerator_are_saved_through_pinned_memory(
    tmp_path: Path, fetches: Fetches
) -> None:
    on_device = {name: jax.device_put(value, ACCELERATOR) for name, value in TENSORS.items()}
    path, from_host = tmp_path / "device.safetensors", tmp_path / "host.safetensors"
    tj.save_file(on_device, path)
    assert fetches.sources == [ACCELERATOR] * len(TENSORS)  # each tensor through pinned
    assert fetches.alive_at_fetch == [0] * len(TENSORS)  # one host copy at a time
    tj.save_file(TENSORS, from_host)
    assert path.read_bytes() == from_host.read_bytes()
    oracle = {name: value.tobytes() for name, value in TENSORS.items()}
    assert _read_back(path) == oracle


def test_a_sharded_array_is_saved_shard_by_shard(tmp_path: Path, fetches: Fetches) -> None:
    values = patterned((8, 301), ml_dtypes.bfloat16)
    mesh = Mesh(np.array(CPUS), ("x",))
    sharded = jax.device_put(values, NamedSharding(mesh, P("x", None)))
    replicated = jax.device_put(values[:3], NamedSharding(mesh, P()))
    path, from_host = tmp_path / "sharded.safetensors", tmp_path / "host.safetensors"
    tj.save_file({"sharded": sharded, "replicated": replicated}, path)
    # The sharded array's three accelerator shards (cpu:0's is read in place); the
    # replicated one from the shard already in host memory.
    assert sorted(fetches.sources, key=lambda device: device.id) == CPUS[1:]
    tj.save_file({"sharded": values, "replicated": values[:3]}, from_host)
    assert path.read_bytes() == from_host.read_bytes()
    assert _read_back(path) == {"sharded": values.tobytes(), "replicated": values[:3].tobytes()}


def test_arrays_on_the_host_device_are_saved_in_place(tmp_path: Path, fetches: Fetches) -> None:
    tj.save_file({"w": jax.device_put(TENSORS["embed"], HOST)}, tmp_path / "w.safetensors")
    assert fetches.sources == []
    assert _read_back(tmp_path / "w.safetensors") == {"w": TENSORS["embed"].tobytes()}


def test_a_torch_state_dict_of_a_model_on_an_accelerator_comes_through_pinned_memory(
    tmp_path: Path, fetches: Fetches
) -> None:
    from flax import nnx

    model = tj.to_device(nnx.Linear(3, 4, rngs=nnx.Rngs(0)), "cpu:1")
    state = tj.state_dict(model, layout="torch")
    assert fetches.sources == [ACCELERATOR] * 2
    path = tmp_path / "model.pt"
    torch.save(state, path)
    twin = torch.nn.Linear(3, 4)
    twin.load_state_dict(torch.load(path, weights_only=True))
    kernel = np.asarray(model.kernel[...])
    np.testing.assert_array_equal(twin.weight.detach().numpy(), kernel.T)
    np.testing.assert_array_equal(twin.bias.detach().numpy(), np.asarray(model.bias[...]))


def test_an_array_this_process_holds_only_part_of_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch2jax_device._src.checkpoints import safetensors as module

    monkeypatch.setattr(module, "to_numpy", lambda array: None)  # as a multi-process array
    path = tmp_path / "w.safetensors"
    with pytest.raises(
        tj.ConversionError, match=r"tensor 'w' is sharded over processes.*tj\.to_device"
    ):
        tj.save_file({"w": jax.device_put(np.ones(3), ACCELERATOR)}, path)
    assert not path.exists()
