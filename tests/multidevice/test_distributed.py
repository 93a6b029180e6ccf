"""Loading onto a mesh of 4 simulated CPU devices in one process, and meshes for DDP code.

safetensors' and torch's own loaders are the oracle for every value. The transfer
guard proves the data goes from the host straight to the devices that hold each part
(never through a device that holds the whole tensor first).
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.torch
import torch
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import torch2jax_device as tj
from torch2jax_device import distributed as dist

TENSORS = {
    "wte.weight": np.arange(64 * 8, dtype=np.float32).reshape(64, 8),
    "h.0.attn.weight": np.arange(8 * 24, dtype=np.float32).reshape(8, 24) / 7,
    "ln_f.bias": np.linspace(-1, 1, 8, dtype=np.float32),
    "step": np.array(3, np.int32),
}


@pytest.fixture(scope="module")
def mesh() -> jax.sharding.Mesh:
    return dist.init_device_mesh("cpu", (2, 2), mesh_dim_names=("data", "model"))


@pytest.fixture(scope="module")
def rule(mesh: jax.sharding.Mesh) -> tj.ShardingRule:
    return tj.ShardingRule(
        mesh, {"wte.weight": P("model", None), "h.*.weight": P(None, ("data", "model"))}
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sharded")
    tj.save_file(TENSORS, folder / "model.safetensors")
    torch.save({name: torch.from_numpy(a) for name, a in TENSORS.items()}, folder / "model.pt")
    names = sorted(TENSORS)
    weight_map = {}
    for part, chunk in enumerate((names[:2], names[2:])):
        tj.save_file({name: TENSORS[name] for name in chunk}, folder / f"part-{part}.safetensors")
        weight_map.update(dict.fromkeys(chunk, f"part-{part}.safetensors"))
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    return folder


def pieces(array: jax.Array) -> dict[int, tuple[int, ...]]:
    return {shard.device.id: shard.data.shape for shard in array.addressable_shards}


@pytest.mark.idiom("dist-mesh-axis-types")
def test_init_device_mesh_gives_ddp_code_auto_axes(mesh: jax.sharding.Mesh) -> None:
    assert mesh.axis_types == (AxisType.Auto, AxisType.Auto)
    table = jax.device_put(jnp.arange(12.0).reshape(6, 2), NamedSharding(mesh, P()))
    ids = dist.make_global_batch(np.array([0, 5, 2, 1], np.int32), mesh)
    rows = jax.jit(lambda table, ids: table[ids])(table, ids)  # an embedding lookup
    np.testing.assert_array_equal(np.asarray(rows), np.arange(12.0).reshape(6, 2)[[0, 5, 2, 1]])


def test_a_global_batch_keeps_the_dicts_key_order(mesh: jax.sharding.Mesh) -> None:
    """A DataLoader's {"x": ..., "label": ...} comes back in its own order, as torch's
    batches do: JAX's tree functions would sort the keys (and swap ``x, y = batch.values()``)."""
    local = {"x": np.ones((4, 3), np.float32), "label": np.arange(4, dtype=np.int32)}
    batch = dist.make_global_batch(local, mesh)
    assert list(batch) == ["x", "label"]
    x, y = batch.values()
    assert x.shape == (4, 3) and y.dtype == np.int32


@pytest.mark.idiom("dist-mesh-axis-types")
def test_explicit_axes_on_request_behave_as_jax_make_mesh() -> None:
    explicit = dist.init_device_mesh("cpu", (4,), mesh_dim_names=("data",),
                                     axis_types=AxisType.Explicit)  # fmt: skip
    assert explicit.axis_types == (AxisType.Explicit,)
    assert jax.make_mesh((4,), ("data",)).axis_types == explicit.axis_types
    table = jax.device_put(jnp.ones((6, 2)), NamedSharding(explicit, P()))
    ids = dist.make_global_batch(np.array([0, 5, 2, 1], np.int32), explicit)
    with pytest.raises(Exception, match="out_sharding"):  # JAX's ShardingTypeError
        jax.jit(lambda table, ids: table[ids])(table, ids)
    with pytest.raises(dist.DistributedError, match=r"must be one jax.sharding.AxisType or 1"):
        dist.init_device_mesh("cpu", (4,), axis_types=("auto",))  # type: ignore[arg-type]


@pytest.mark.idiom("load-onto-mesh")
def test_load_file_onto_a_rule_gives_each_device_its_part_only(
    folder: Path, rule: tj.ShardingRule
) -> None:
    expected = safetensors.torch.load_file(folder / "model.safetensors")
    with jax.transfer_guard_device_to_device("disallow"):
        loaded = tj.load_file(folder / "model.safetensors", device=rule)
    assert sorted(loaded) == sorted(expected)
    for name, tensor in expected.items():
        np.testing.assert_array_equal(np.asarray(loaded[name]), tensor.numpy())
    assert loaded["wte.weight"].sharding.spec == P("model", None)
    assert set(pieces(loaded["wte.weight"]).values()) == {(32, 8)}
    assert set(pieces(loaded["h.0.attn.weight"]).values()) == {(8, 6)}
    assert set(pieces(loaded["ln_f.bias"]).values()) == {(8,)}  # replicated: the default
    assert loaded["step"].dtype == np.int32 and loaded["step"].shape == ()


def test_load_file_takes_a_sharding_a_mesh_and_a_function(
    folder: Path, mesh: jax.sharding.Mesh
) -> None:
    path = folder / "model.safetensors"
    replicated = tj.load_file(path, device=mesh)
    assert all(a.sharding == NamedSharding(mesh, P()) for a in replicated.values())
    one_sharding = tj.load_file(path, device=NamedSharding(mesh, P()))
    assert one_sharding["wte.weight"].sharding.spec == P()

    def by_rank(name: str, shape: tuple[int, ...], dtype: np.dtype) -> NamedSharding:
        return NamedSharding(mesh, P("data") if len(shape) == 2 else P())

    split = tj.load_file(path, device=by_rank)
    assert set(pieces(split["wte.weight"]).values()) == {(32, 8)}
    np.testing.assert_array_equal(np.asarray(split["wte.weight"]), TENSORS["wte.weight"])


@pytest.mark.idiom("load-onto-mesh")
def test_safe_open_onto_a_rule(folder: Path, rule: tj.ShardingRule) -> None:
    with tj.safe_open(folder / "model.safetensors", device=rule) as file:
        assert isinstance(file, tj.safe_open)
        assert file.keys() == sorted(TENSORS) and file.metadata() is None
        wte = file.get_tensor("wte.weight")
        window = file.get_slice("wte.weight")[10:18]
        assert file.get_slice("wte.weight").get_shape() == [64, 8]
        assert file.get_slice("step").get_dtype() == "I32"
    assert set(pieces(wte).values()) == {(32, 8)}
    assert window.shape == (8, 8) and set(pieces(window).values()) == {(4, 8)}
    np.testing.assert_array_equal(np.asarray(window), TENSORS["wte.weight"][10:18])
    with pytest.raises(tj.CheckpointError, match="was closed"):
        file.get_tensor("wte.weight")


@pytest.mark.idiom("load-onto-mesh")
def test_safe_open_onto_a_rule_takes_safetensors_arguments(
    folder: Path, rule: tj.ShardingRule
) -> None:
    """safetensors' positional framework, then the rule; its backend and a tensor cap."""
    with tj.safe_open(folder / "model.safetensors", "flax", rule, backend="pread") as file:
        assert set(pieces(file.get_tensor("wte.weight")).values()) == {(32, 8)}
    with pytest.raises(tj.InvalidDeviceError, match="safetensors' framework"):
        tj.safe_open(folder / "model.safetensors", "cuda:0", rule)
    with pytest.raises(tj.InvalidDeviceError, match="backend='disk'"):
        tj.safe_open(folder / "model.safetensors", device=rule, backend="disk")
    with pytest.raises(tj.CheckpointError, match="more than 2 tensors"):
        tj.safe_open(folder / "model.safetensors", device=rule, max_tensors=2)
    with pytest.raises(tj.CheckpointError, match="more than 2 tensors"):
        tj.load_file(folder / "model.safetensors", device=rule, max_tensors=2)


@pytest.mark.idiom("load-onto-mesh")
def test_torch_checkpoint_onto_a_rule_matches_torch_load(
    folder: Path, rule: tj.ShardingRule
) -> None:
    expected = torch.load(folder / "model.pt", weights_only=True)
    loaded = tj.load(folder / "model.pt", map_location=rule)
    for name, tensor in expected.items():
        np.testing.assert_array_equal(np.asarray(loaded[name]), tensor.numpy())
    assert set(pieces(loaded["wte.weight"]).values()) == {(32, 8)}
    assert tj.load(folder / "model.safetensors", map_location=rule)["wte.weight"].sharding == (
        loaded["wte.weight"].sharding
    )


@pytest.mark.idiom("load-index-of-shards")
def test_an_index_of_shards_loads_onto_a_rule_or_one_device(
    folder: Path, rule: tj.ShardingRule
) -> None:
    index = folder / "model.safetensors.index.json"
    onto_mesh = tj.load_file(index, device=rule)
    on_one = tj.load_file(index, device="cpu:3")
    through_load = tj.load(index, map_location={"cpu": "cpu:1"})
    for name, value in TENSORS.items():
        for loaded in (onto_mesh, on_one, through_load):
            np.testing.assert_array_equal(np.asarray(loaded[name]), value)
    assert set(pieces(onto_mesh["wte.weight"]).values()) == {(32, 8)}
    assert {a.device for a in on_one.values()} == {jax.devices()[3]}
    assert {a.device for a in through_load.values()} == {jax.devices()[1]}


def test_an_index_of_torch_files_loads_as_one_checkpoint(
    tmp_path: Path, rule: tj.ShardingRule
) -> None:
    torch.save({"wte.weight": torch.from_numpy(TENSORS["wte.weight"])}, tmp_path / "a.bin")
    torch.save({"ln_f.bias": torch.from_numpy(TENSORS["ln_f.bias"])}, tmp_path / "b.bin")
    index = tmp_path / "pytorch_model.bin.index.json"
    index.write_text(json.dumps({"weight_map": {"wte.weight": "a.bin", "ln_f.bias": "b.bin"}}))
    for target in (rule, "cpu"):
        loaded = tj.load(index, map_location=target)
        assert sorted(loaded) == ["ln_f.bias", "wte.weight"]
        np.testing.assert_array_equal(np.asarray(loaded["wte.weight"]), TENSORS["wte.weight"])
    assert set(pieces(tj.load(index, map_location=rule)["wte.weight"]).values()) == {(32, 8)}


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"ln_f.bias": P("data", "model")}, r"tensor 'ln_f.bias' has shape \[8\] \(1 dimension"),
        ({"h.*": P(None, "data"), "*": P("data")}, r"tensor 'step' has shape \[\] \(0 dim"),
    ],
)
def test_rules_that_do_not_fit_a_tensor_name_it(
    folder: Path, mesh: jax.sharding.Mesh, rules: dict[str, P], message: str
) -> None:
    with pytest.raises((tj.CheckpointError, ValueError), match=message):
        tj.load_file(folder / "model.safetensors", device=tj.ShardingRule(mesh, rules))


def test_a_dimension_that_does_not_split_evenly_is_named(
    tmp_path: Path, mesh: jax.sharding.Mesh
) -> None:
    tj.save_file({"odd": np.ones((6, 3), np.float32)}, tmp_path / "odd.safetensors")
    with pytest.raises(
        tj.CheckpointError,
        match=r"tensor 'odd' of shape \[6, 3\] cannot be split 4 ways along dimension 0",
    ):
        tj.load_file(tmp_path / "odd.safetensors", device=NamedSharding(mesh, P(("data", "model"))))


def test_bad_rules_and_targets_are_refused(folder: Path, mesh: jax.sharding.Mesh) -> None:
    with pytest.raises(tj.DeviceTypeError, match=r"takes a jax.sharding.Mesh, not str"):
        tj.ShardingRule("cpu", {})  # type: ignore[arg-type]
    with pytest.raises(tj.DeviceTypeError, match=r"the rule for '\*' is \('model',\)"):
        tj.ShardingRule(mesh, {"*": ("model",)})  # type: ignore[dict-item]
    with pytest.raises(tj.DeviceTypeError, match=r"the rule for 'w', .*does not fit the mesh"):
        tj.ShardingRule(mesh, {"w": P(("data", "model", "data"))})
    with pytest.raises(tj.CheckpointError, match=r"no sharding for tensor 'h.0.attn.weight'"):
        tj.load_file(
            folder / "model.safetensors",
            device=tj.ShardingRule(mesh, lambda name, shape, dtype: P("nope")),
        )
    with pytest.raises(tj.DeviceTypeError, match=r"returned 'model' for tensor 'h.0.attn.weight'"):
        tj.load_file(folder / "model.safetensors", device=lambda name, shape, dtype: "model")
    function_rule = tj.ShardingRule(mesh, lambda name, shape, dtype: "x")  # type: ignore[arg-type, return-value]
    with pytest.raises(tj.DeviceTypeError, match="ShardingRule function returned 'x'"):
        tj.load_file(folder / "model.safetensors", device=function_rule)
    with pytest.raises(tj.DeviceTypeError, match=r"map_location=3.5 is not a form"):
        tj.load(folder / "model.safetensors", map_location=3.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "is not a checkpoint index like model.safetensors.index.json"),
        ('{"metadata": {}}', "KeyError: 'weight_map'"),
        ('{"weight_map": {"w": 3}}', "weight_map must map tensor names to file names"),
        ('{"weight_map": {"w": "../w.safetensors"}}', "outside the index's folder"),
        (
            '{"weight_map": {"nope": "part-0.safetensors"}}',
            r"lists tensor 'nope' in shard '[^']*part-0.safetensors', which has no such tensor",
        ),
    ],
)
def test_bad_indexes_are_checkpoint_errors(folder: Path, content: str, message: str) -> None:
    index = folder / "bad.index.json"
    index.write_text(content)
    with pytest.raises(tj.CheckpointError, match=message):
        tj.load_file(index, device="cpu")


def test_to_device_in_one_process_keeps_jax_semantics(mesh: jax.sharding.Mesh) -> None:
    params = tj.to_device({"w": np.ones((4, 2), np.float32)}, "cpu:1")
    replicated = tj.to_device(params, NamedSharding(mesh, P()))
    assert replicated["w"].sharding == NamedSharding(mesh, P())
    back = tj.to_device(replicated, "cpu:2")
    assert back["w"].devices() == {jax.devices()[2]}


def test_a_global_batch_that_fails_names_the_fix_that_fits_its_failure() -> None:
    """The batch-size fix is given where the rows do not split, and only there: a batch
    whose rows split but that JAX refuses for another reason gets the fix for that."""
    mesh = dist.init_device_mesh("cpu", (2, 2), mesh_dim_names=("data", "model"))
    with pytest.raises(
        tj.ConversionError,
        match=r"its 5 rows do not split into this process's 2 devices along the batch axis\. "
        r"Fix: make the local batch size a multiple of 2",
    ):
        dist.make_global_batch({"x": np.ones((5, 3), np.float32)}, mesh)
    with pytest.raises(tj.ConversionError, match=r"6 rows do not split into this process's 4"):
        dist.make_global_batch({"x": np.ones((6, 3), np.float32)}, mesh, ("data", "model"))
    assert dist.make_global_batch({"x": np.ones((6, 3), np.float32)}, mesh)["x"].shape == (6, 3)
