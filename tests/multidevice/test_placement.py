"""Placement across 4 simulated CPU devices: transfers, identity, mixed devices, sharding."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import torch2jax_device as tj
from torch2jax_device._src import placement as _placement

CPUS = jax.local_devices(backend="cpu")


@pytest.fixture
def device_put_calls(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record every jax.device_put from here on (tests clear it after their set-up)."""
    calls: list[Any] = []
    real = jax.device_put

    def recording(x: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(x)
        return real(x, *args, **kwargs)

    monkeypatch.setattr(_placement.jax, "device_put", recording)
    return calls


def test_a_whole_tree_moves_in_one_batched_transfer(device_put_calls: list[Any]) -> None:
    tree = {f"w{i}": jax.device_put(jnp.full(2, i), CPUS[0]) for i in range(50)}
    device_put_calls.clear()
    moved = tj.to_device(tree, "cpu:3")
    assert len(device_put_calls) == 1 and len(device_put_calls[0]) == 50
    assert all(leaf.devices() == {CPUS[3]} and leaf.committed for leaf in moved.values())
    assert float(moved["w7"][0]) == 7.0


def test_already_placed_tree_makes_no_transfer(device_put_calls: list[Any]) -> None:
    tree = jax.device_put({"a": jnp.ones(2), "b": [jnp.zeros(3)]}, CPUS[2])
    device_put_calls.clear()
    again = tj.to_device(tree, "cpu:2")
    assert device_put_calls == []
    assert again["a"] is tree["a"] and again["b"][0] is tree["b"][0]


def test_mixed_devices_name_every_device_and_a_leaf_on_each() -> None:
    tree = {"w": jax.device_put(jnp.ones(1), CPUS[0]), "b": [jax.device_put(jnp.ones(1), CPUS[2])]}
    with pytest.raises(tj.MixedDeviceError) as caught:
        tj.device_of(tree)
    message = str(caught.value)
    assert message.startswith(
        "Expected all tensors to be on the same device, but found at least two devices, "
    )
    assert "['b'][0] is on cpu:2" in message and "['w'] is on cpu:0" in message
    assert isinstance(caught.value, RuntimeError) and isinstance(caught.value, ValueError)


@pytest.mark.idiom("mixed-device-error")
def test_check_same_device_gives_torchs_error_where_jax_gives_its_own() -> None:
    x = jax.device_put(jnp.ones(2), CPUS[0])
    y = jax.device_put(jnp.ones(2), CPUS[1])
    with pytest.raises(ValueError, match="Received incompatible devices"):
        jax.jit(lambda a, b: a + b)(x, y)
    with pytest.raises(tj.MixedDeviceError, match=r"cpu:0 and cpu:1! \(arguments: args\[0\]"):
        tj.check_same_device(x, y)
    # torch raises RuntimeError for tensors on two devices; the port's error is one too.
    with pytest.raises(RuntimeError) as theirs:
        torch.zeros(1) + torch.zeros(1, device="meta")
    with pytest.raises(type(theirs.value)):
        tj.check_same_device(x, y)
    assert tj.check_same_device(x, jax.device_put(jnp.ones(1), CPUS[0])) == tj.device("cpu:0")


def test_sharded_arrays_have_no_single_device() -> None:
    mesh = Mesh(np.array(CPUS), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    batch = tj.to_device({"x": np.arange(8, dtype=np.float32)}, sharding)
    assert batch["x"].sharding == sharding and len(batch["x"].devices()) == 4
    with pytest.raises(tj.MixedDeviceError, match=r"\['x'\] is sharded over 4 devices"):
        tj.device_of(batch)
    with pytest.raises(tj.ConversionError, match="sharded over 4 devices"):
        tj.to_torch(batch["x"])
    gathered = tj.to_device(batch, "cpu:1")
    assert gathered["x"].devices() == {CPUS[1]}


def test_default_device_is_the_target_when_none_is_given() -> None:
    with tj.device("cpu:2"):
        assert tj.to_device(np.ones(2, np.float32)).devices() == {CPUS[2]}


def test_dtype_only_keeps_each_array_on_its_device() -> None:
    x = jax.device_put(jnp.ones(2), CPUS[3])
    assert tj.to_device(x, jnp.float16).devices() == {CPUS[3]}


@pytest.mark.idiom("tensor-to-memory-format")
@pytest.mark.parametrize(
    "memory_format", [torch.contiguous_format, torch.preserve_format, None], ids=str
)
def test_memory_format_only_keeps_each_array_on_its_device(memory_format: Any) -> None:
    # x.to(memory_format=...) keeps the device in torch; the GPU run found the port moving
    # a CPU array to the default device (the GPU) instead. cpu:3 stands in for the CPU.
    x = jax.device_put(jnp.arange(6.0).reshape(2, 3), CPUS[3])
    tensor = torch.arange(6.0).reshape(2, 3)
    assert tensor.to(memory_format=memory_format) is tensor
    assert tj.to_device(x, memory_format=memory_format) is x
    assert tj.to_device({"x": x}, memory_format=memory_format)["x"] is x
    assert tj.to_device(x).devices() == {CPUS[0]}  # no argument at all: the default device


def test_nnx_module_moves_in_place_between_devices() -> None:
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    assert tj.to_device(model, "cpu:2") is model
    assert next(tj.parameters(model)).device == tj.device("cpu:2")
    assert tj.device_of(model) == tj.device("cpu:2")
    y = jax.jit(lambda m, x: m(x))(model, jnp.ones((1, 2)))
    assert y.devices() == {CPUS[2]}


def test_jit_follows_committed_inputs() -> None:
    x = tj.to_device(jnp.ones(3), "cpu:1")
    assert jax.jit(lambda a: a * 2)(x).devices() == {CPUS[1]}
    assert jax.jit(lambda a: tj.to_device(a, dtype=jnp.float16))(x).devices() == {CPUS[1]}


def test_to_jax_with_a_device_transfers() -> None:
    array = tj.to_jax(torch.arange(4.0), "cpu:3")
    assert array.devices() == {CPUS[3]}


def test_parameter_device_names_the_local_index_torch_style() -> None:
    model = tj.to_device(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), "cpu:2")
    device = next(tj.parameters(model)).device
    assert (device.type, device.index, str(device)) == ("cpu", 2, "cpu:2")
    assert device == torch.device("cpu", 2) and device == tj.device("cpu:2") == CPUS[2]
    assert device != torch.device("cpu")  # as torch.device("cpu", 2) != torch.device("cpu")


def test_a_sharded_parameter_has_no_single_device() -> None:
    mesh = Mesh(np.array(CPUS), ("data",))
    sharded = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, PartitionSpec("data")))
    weight = next(tj.parameters({"w": sharded}))
    with pytest.raises(tj.MixedDeviceError, match=r"sharded over 4 devices.*array\.sharding"):
        _ = weight.device
    assert weight.sharding == sharded.sharding  # the array's own attributes still answer
    assert float(jax.jit(jnp.sum)(weight)) == 28.0


def test_copy_true_to_another_device_and_back_never_aliases() -> None:
    from torch2jax_device._src.interop import aligned_empty

    source = aligned_empty(16).view(np.float32)
    source[:] = 1.0
    for device in ("cpu:0", "cpu:3"):
        copied = tj.to_device(source, device, copy=True)
        source[0] = 5.0
        assert copied.tolist() == [1.0, 1.0, 1.0, 1.0] and copied.devices() == {tj.resolve(device)}
        source[0] = 1.0
    placed = tj.to_device(jnp.ones(2), "cpu:1")
    kept = tj.to_device(placed, jnp.float32, copy=True)
    assert kept.devices() == {CPUS[1]} and kept.committed
    assert kept.unsafe_buffer_pointer() != placed.unsafe_buffer_pointer()


@pytest.mark.idiom("mixed-device-error")
def test_a_0_dim_cpu_tensor_meets_another_device_as_in_torch() -> None:
    # torch: a 0-dim CPU tensor takes part in an operation on any device ("meta" stands in
    # for the accelerator on this machine); a 1-dim one does not.
    assert (torch.ones(3, device="meta") * torch.tensor(2.0)).device.type == "meta"
    with pytest.raises(RuntimeError, match="device"):
        torch.ones(3, device="meta") * torch.ones(1)
    array = jax.device_put(jnp.ones(3), CPUS[1])
    assert tj.check_same_device(array, torch.tensor(2.0)) == tj.device("cpu:1")
    assert tj.device_of({"w": array, "scale": torch.tensor(2.0)}) == tj.device("cpu:1")
    with pytest.raises(tj.MixedDeviceError, match="cpu:1 and cpu!"):
        tj.check_same_device(array, torch.ones(1))
    assert tj.check_same_device(torch.tensor(2.0)) == torch.tensor(2.0).device


def test_an_uncommitted_scalar_follows_the_committed_arrays() -> None:
    # optax's step count starts uncommitted on the default device; JAX moves it where
    # the parameters are, so it is on their device, not a second one.
    optax = pytest.importorskip("optax")
    model = tj.to_device(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), "cpu:1")
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    assert tj.device_of(optimizer) == tj.device("cpu:1")
    loose = jnp.zeros((), jnp.int32)  # uncommitted, on cpu:0
    assert tj.check_same_device(jax.device_put(jnp.ones(2), CPUS[1]), loose) == tj.device("cpu:1")
    assert tj.device_of(loose) == tj.device("cpu:0")  # alone, it is where it is
    with pytest.raises(tj.MixedDeviceError, match="cpu:1 and cpu:0!"):
        tj.check_same_device(jax.device_put(jnp.ones(2), CPUS[1]), jnp.zeros(2))  # not a scalar
