"""``tj.load``, ``tj.safe_open`` and ``tj.to_device`` by a plan, on one CPU device (issue 39).

The tiers over a stand-in accelerator are in ``tests/multidevice/test_device_map_entries.py``;
here, what needs none: names and order, torch's values (the oracle is real torch), a
machine without accelerators, and the forms each entry refuses.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import torch2jax_device as tj
from tests.support.checkpoints import odd_tensors, refused_tensors
from torch2jax_device._src.array_names import NamedArrays

torch = pytest.importorskip("torch")

#: Keys a tree may hold: dots, quotes, brackets and backslashes included.
_KEYS = st.text(alphabet="ab.'\"[]\\ 0", min_size=1, max_size=4)


def _trees(depth: int = 3) -> Any:
    leaves = st.builds(lambda n: np.full(n, n, np.float32), st.integers(1, 4))
    return st.recursive(
        leaves,
        lambda inner: (
            st.dictionaries(_KEYS, inner, min_size=1, max_size=3)
            | st.lists(inner, min_size=1, max_size=3)
        ),
        max_leaves=8,
    )


def _dotted_by_hand(tree: Any, prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    if isinstance(tree, dict):
        found: dict[str, Any] = {}
        for key, value in tree.items():
            found |= _dotted_by_hand(value, (*prefix, str(key)))
        return found
    if isinstance(tree, list):
        found = {}
        for index, value in enumerate(tree):
            found |= _dotted_by_hand(value, (*prefix, str(index)))
        return found
    return {".".join(prefix): tree}


@given(_trees())
def test_a_trees_arrays_are_named_by_their_dotted_keys_in_its_order(tree: Any) -> None:
    expected = _dotted_by_hand(tree)
    leaves = jax.tree.leaves(tree)
    if len(expected) < len(leaves):  # two paths with one dotted name: refused
        with pytest.raises(tj.ConversionError, match=r"both named .* cannot tell them apart"):
            NamedArrays(tree)
        return
    named = NamedArrays(tree)
    assert list(named.arrays) == list(expected)
    assert all(named.arrays[name] is leaf for name, leaf in expected.items())


def test_to_device_auto_without_accelerators_keeps_everything_on_the_host() -> None:
    nnx = pytest.importorskip("flax.nnx")
    model = nnx.Sequential(nnx.Linear(4, 4, rngs=nnx.Rngs(0)), nnx.Linear(4, 2, rngs=nnx.Rngs(1)))
    before = {name: np.asarray(array) for name, array in tj.state_dict(model).items()}
    assert tj.to_device(model, "auto", max_memory={"cpu": "1MiB"}) is model
    for name, array in tj.state_dict(model).items():
        assert array.devices() == {jax.devices("cpu")[0]}
        np.testing.assert_array_equal(array, before[name])


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda model: tj.to_device(model, "cpu", max_memory={"cpu": "1GiB"}),
            tj.InvalidDeviceError,
            r"max_memory= is the budget of device='auto'",
        ),
        (
            lambda model: tj.to_device(model, "auto", copy=True),
            tj.UnsupportedOperationError,
            r"Module.to does not accept copy",
        ),
        (
            lambda model: tj.to_device(model, "auto", np.int8),
            tj.DTypeError,
            r"only accepts floating point or complex dtypes",
        ),
        (
            lambda model: tj.to_device(model, "auto", max_memory=["cpu"]),
            tj.ConfigError,
            r"give a dict of devices to sizes",
        ),
        (
            lambda model: tj.to_device({"m": model}, "auto"),
            tj.ConversionError,
            r"leaf \['m'\] is an NNX module.*tj.to_device\(module, 'auto'",
        ),
    ],
)
def test_to_device_refuses_a_plan_it_cannot_make_before_moving(
    call: Any, error: type, message: str
) -> None:
    nnx = pytest.importorskip("flax.nnx")
    model = nnx.Linear(4, 4, rngs=nnx.Rngs(0))
    kernel = model.kernel[...]
    with pytest.raises(error, match=message):
        call(model)
    assert model.kernel[...] is kernel


def test_an_abstract_model_has_no_data_to_place() -> None:
    nnx = pytest.importorskip("flax.nnx")
    abstract = nnx.eval_shape(lambda: nnx.Linear(4, 4, rngs=nnx.Rngs(0)))
    with pytest.raises(tj.DeviceUnavailableError, match=r"leaf kernel is a jax.ShapeDtypeStruct"):
        tj.to_device(abstract, "auto")


def _checkpoint() -> dict[str, Any]:
    torch.manual_seed(0)
    state = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4)).state_dict()
    return {
        "model": state,
        "optimizer": {"state": {0: {"exp_avg": torch.ones(4, 3, dtype=torch.float64)}}},
        "iter_num": 5,
        "shared": (state["0.bias"],),
    }


@pytest.mark.filterwarnings("ignore::torch2jax_device.DtypeNarrowingWarning")  # exp_avg
@pytest.mark.parametrize("form", ["zip", "legacy", "file object"])
def test_a_pytorch_checkpoint_by_a_plan_is_what_torch_loads(tmp_path: Path, form: str) -> None:
    path = tmp_path / "ckpt.pt"
    torch.save(_checkpoint(), path, _use_new_zipfile_serialization=form != "legacy")
    source: Any = io.BytesIO(path.read_bytes()) if form == "file object" else path
    loaded = tj.load(source, map_location="auto", max_memory={"cpu": "1MiB"})
    expected = torch.load(path, map_location="cpu", weights_only=True)
    assert loaded["iter_num"] == expected["iter_num"]
    assert dict(loaded["model"]._metadata) == dict(expected["model"]._metadata)
    assert loaded["shared"][0] is loaded["model"]["0.bias"]  # shared once, as torch shares
    pairs = [(loaded["model"][n], t) for n, t in expected["model"].items()]
    pairs.append(
        (loaded["optimizer"]["state"][0]["exp_avg"], expected["optimizer"]["state"][0]["exp_avg"])
    )
    for array, tensor in pairs:
        assert array.devices() == {jax.devices("cpu")[0]}
        np.testing.assert_array_equal(np.asarray(array), tensor.to(torch.float32).numpy())
    plan = tj.DeviceMap.plan(path, max_memory={"cpu": "1MiB"})
    assert list(plan.placements()) == [
        "model.0.weight",
        "model.0.bias",
        "model.1.weight",
        "model.1.bias",
        "optimizer.state.0.exp_avg",
    ]  # the order torch.save wrote them in (a tensor held twice: its first place)


def test_safetensors_through_tj_load_by_a_plan_is_load_files(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    tj.save_file({"a": np.arange(4, dtype=np.float32), "b": np.ones(3, np.int8)}, path)
    loaded = tj.load(path, map_location="auto")
    expected = tj.load_file(path, device="auto")
    assert list(loaded) == list(expected)
    for name, array in loaded.items():
        assert array.sharding == expected[name].sharding
        np.testing.assert_array_equal(array, expected[name])
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"b": path.name, "a": path.name}}))
    assert list(tj.load(index, map_location="auto")) == ["b", "a"]


def test_a_plan_refuses_what_it_cannot_name(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    torch.save({"a": {"b": torch.zeros(2)}, "a.b": torch.ones(2)}, path)
    with pytest.raises(tj.CheckpointError, match=r"both named 'a.b'.*map_location='cpu'"):
        tj.load(path, map_location="auto")
    shard = tmp_path / "shard.pt"
    torch.save({"w": torch.zeros(2)}, shard)
    index = tmp_path / "pytorch_model.bin.index.json"
    index.write_text(json.dumps({"weight_map": {"w": shard.name}}))
    with pytest.raises(tj.InvalidDeviceError, match=r"an index of PyTorch shard files"):
        tj.load(index, map_location="auto")
    with pytest.raises(tj.InvalidDeviceError, match=r"budget of map_location='auto'"):
        tj.load(shard, max_memory={"cpu": "1GiB"})


def test_safe_open_without_a_plan_has_none(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    tj.save_file({"a": np.arange(4, dtype=np.float32)}, path)
    with tj.safe_open(path, framework="flax") as f:
        assert f.plan is None
    with pytest.raises(tj.InvalidDeviceError, match=r"budget of device='auto'"):
        tj.safe_open(path, framework="flax", max_memory={"cpu": "1GiB"})


def _inputs() -> Any:
    """What ``to_device`` takes: lone arrays of every kind and numbers, and trees of them
    with leaves that are not arrays."""
    dtypes = st.sampled_from([np.float32, np.float64, np.int64, np.int8, np.bool_, np.float16])
    numpy = st.builds(lambda n, d: (np.arange(n) % 3).astype(d), st.integers(0, 4), dtypes)
    tensors = numpy.map(lambda a: torch.from_numpy(a.copy()))
    numbers = st.sampled_from([3, 2.5, True, 1 + 2j, np.float32(1.5), np.int64(7)])
    arrays = numpy | tensors | numpy.map(jax.numpy.asarray)
    leaves = arrays | numbers | st.sampled_from(["train", None])
    trees = st.recursive(
        leaves,
        lambda inner: (
            st.dictionaries(st.sampled_from("abc"), inner, min_size=1, max_size=3)
            | st.lists(inner, min_size=1, max_size=3).map(tuple)
        ),
        max_leaves=6,
    )
    return arrays | numbers | trees


@pytest.mark.filterwarnings("ignore::torch2jax_device.DtypeNarrowingWarning")
@pytest.mark.filterwarnings("ignore::torch2jax_device.ComplexCastWarning")
@given(_inputs(), st.sampled_from([None, np.float16, np.float32, np.int32]))
def test_auto_without_accelerators_moves_anything_as_onto_the_host(obj: Any, dtype: Any) -> None:
    """The oracle is ``to_device(obj, "cpu", dtype)``: with no accelerator, a plan puts
    everything on the host, and every rule of a move (casts of a lone array or of a
    tree's floats, numbers becoming arrays alone and staying in a tree, containers'
    types, what is refused) must be the same."""
    try:
        expected = tj.to_device(obj, "cpu", dtype)
    except tj.Torch2JaxDeviceError as err:  # refused onto the host: refused by a plan too
        with pytest.raises(type(err)):
            tj.to_device(obj, "auto", dtype, max_memory={"cpu": "1GiB"})
        return
    got = tj.to_device(obj, "auto", dtype, max_memory={"cpu": "1GiB"})
    flat_expected, tree_expected = jax.tree.flatten(expected)
    flat_got, tree_got = jax.tree.flatten(got)
    assert tree_got == tree_expected
    for a, b in zip(flat_got, flat_expected, strict=True):
        assert type(a) is type(b)
        if isinstance(b, jax.Array):
            assert a.sharding == b.sharding and a.dtype == b.dtype and a.weak_type == b.weak_type
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        else:
            assert a == b


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated:UserWarning")  # torch's own
@pytest.mark.filterwarnings("ignore::torch2jax_device.DtypeNarrowingWarning")
@pytest.mark.parametrize("name", [*odd_tensors(), *refused_tensors()])
def test_every_kind_of_tensor_loads_by_a_plan_as_onto_the_host(tmp_path: Path, name: str) -> None:
    """The oracle is ``tj.load(path, map_location="cpu")`` (itself checked against torch's
    values in test_checkpoints_torch_load.py): with no accelerator a plan puts every
    tensor on the host, so sparse, quantized, conjugate, view and odd-dtype tensors come
    out the same, and the ones JAX cannot hold are refused the same way, naming their
    place."""
    tensor = {**odd_tensors(), **refused_tensors()}[name]
    path = tmp_path / f"{name}.pt"
    torch.save({"model": [1, {"weights": tensor}]}, path)
    try:
        expected = tj.load(path, map_location="cpu")["model"][1]["weights"]
    except tj.CheckpointError as err:
        with pytest.raises(tj.CheckpointError) as caught:
            tj.load(path, map_location="auto")
        assert "the tensor at ['model'][1]['weights'] cannot be loaded" in str(caught.value)
        assert (
            str(caught.value).split(" cannot be loaded: ")[1]
            == str(err).split(" cannot be loaded: ")[1]
        )
        return
    got = tj.load(path, map_location="auto")["model"][1]["weights"]
    assert (got.shape, got.dtype, got.sharding) == (
        expected.shape,
        expected.dtype,
        expected.sharding,
    )
    np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
