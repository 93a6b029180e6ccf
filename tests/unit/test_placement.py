"""``tj.to_device`` / ``device_of`` / ``parameters`` / ``to_jax`` / ``to_torch`` behaviour."""

from __future__ import annotations

import collections
import copy
import dataclasses
import pickle
import typing
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from flax.core import FrozenDict

import torch2jax_device as tj
from tests.support.gpu_proxy import host_cpu, torch_named_here
from torch2jax_device._src import dtypes as _dtypes
from torch2jax_device._src import placement as _placement
from torch2jax_device._src import trees as _trees

CPU = tj.resolve("cpu")


@pytest.fixture(autouse=True)
def _fresh_narrowing_warnings() -> None:
    _dtypes._warned.clear()


class Point(typing.NamedTuple):
    x: Any
    y: Any


@dataclasses.dataclass(frozen=True)
class Batch:
    tokens: Any
    meta: dict[str, Any]
    name: str = "train"


def _is_placed(leaf: Any) -> bool:
    return isinstance(leaf, jax.Array) and leaf.committed and leaf.devices() == {CPU}


def test_containers_keep_their_types_and_non_array_leaves() -> None:
    factory = collections.defaultdict(list, {"a": np.ones(2, np.float32)})
    tree = {
        "ordered": collections.OrderedDict(b=torch.ones(2), a=jnp.zeros(1)),
        "default": factory,
        "tuple": (np.arange(3, dtype=np.int32), "text", None, 7, 0.5),
        "named": Point(jnp.ones(1), 3),
        "data": Batch(np.zeros(2, np.float32), {"lr": 0.1, "w": torch.zeros(1)}),
        "frozen": FrozenDict(k=np.ones(1, np.float32)),
    }
    moved = tj.to_device(tree, "cpu")
    assert type(moved["ordered"]) is collections.OrderedDict
    assert list(moved["ordered"]) == ["b", "a"]
    assert type(moved["default"]) is collections.defaultdict
    assert moved["default"].default_factory is list
    assert moved["tuple"][1:] == ("text", None, 7, 0.5)
    assert type(moved["named"]) is Point and moved["named"].y == 3
    assert type(moved["data"]) is Batch and moved["data"].name == "train"
    assert moved["data"].meta["lr"] == 0.1
    assert type(moved["frozen"]) is FrozenDict
    placed = [
        moved["ordered"]["b"], moved["ordered"]["a"], moved["default"]["a"],
        moved["tuple"][0], moved["named"].x, moved["data"].tokens, moved["data"].meta["w"],
        moved["frozen"]["k"],
    ]  # fmt: skip
    assert all(_is_placed(leaf) for leaf in placed)


def test_input_is_never_mutated() -> None:
    inner = {"w": np.ones(2, np.float32)}
    batch = Batch(torch.zeros(2), inner)
    tj.to_device(batch, "cpu", jnp.float16)
    assert isinstance(batch.tokens, torch.Tensor) and batch.meta is inner
    assert isinstance(inner["w"], np.ndarray) and inner["w"].dtype == np.float32


def test_top_level_scalar_becomes_an_array_nested_scalars_pass_through() -> None:
    assert _is_placed(tj.to_device(2.5, "cpu"))
    assert tj.to_device({"steps": 3}, "cpu") == {"steps": 3}


def test_identity_when_nothing_changes_and_copy_forces_fresh_buffers() -> None:
    first = tj.to_device({"a": jnp.ones(3), "b": [np.ones(2, np.float32)]}, "cpu")
    again = tj.to_device(first, "cpu")
    assert again["a"] is first["a"] and again["b"][0] is first["b"][0]
    copied = tj.to_device(first, "cpu", copy=True)
    assert copied["a"].unsafe_buffer_pointer() != first["a"].unsafe_buffer_pointer()
    assert np.asarray(copied["a"]).tolist() == [1.0, 1.0, 1.0]


def test_uncommitted_arrays_become_committed() -> None:
    loose = jnp.ones(2)
    assert not loose.committed
    assert tj.to_device(loose, "cpu").committed


def test_device_none_is_the_default_device() -> None:
    with tj.device("cpu"):
        assert _is_placed(tj.to_device(np.ones(2, np.float32)))


def test_dtype_forms_and_container_rule() -> None:
    tree = {"w": jnp.ones(2), "step": jnp.array(3), "mask": jnp.array([True])}
    cast = tj.to_device(tree, "cpu", "bfloat16")
    assert cast["w"].dtype == jnp.bfloat16
    assert cast["step"].dtype == jnp.int32 and cast["mask"].dtype == jnp.bool_
    assert tj.to_device(jnp.arange(3), jnp.float16).dtype == jnp.float16  # single array: always
    assert tj.to_device(jnp.ones(2), torch.float16).dtype == jnp.float16


def test_dtype_only_form_keeps_placement() -> None:
    array = tj.to_device(jnp.ones(2), "cpu")
    assert _is_placed(tj.to_device(array, dtype=jnp.float16))
    assert _is_placed(tj.to_device(array, jnp.float16))


@pytest.mark.parametrize("dtype", ["float128x", "torch.float", object()])
def test_unknown_dtype_names_the_value(dtype: Any) -> None:
    with pytest.raises(tj.DTypeError, match="unknown dtype"):
        tj.to_device(jnp.ones(2), "cpu", dtype)


def test_unknown_device_fails_before_anything_moves() -> None:
    with pytest.raises(tj.DeviceUnavailableError, match="cuda:3"):
        tj.to_device({"x": np.ones(2)}, "cuda:3")


def test_deleted_array_names_the_leaf_path() -> None:
    gone = jnp.ones(2)
    gone.delete()
    with pytest.raises(tj.ConversionError, match=r"leaf \['layers'\]\[1\] is a deleted"):
        tj.to_device({"layers": [jnp.ones(1), gone]}, "cpu")


class BrokenArray:
    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
        raise ValueError("cannot export")


def test_unconvertible_array_like_names_the_leaf_path() -> None:
    with pytest.raises(tj.ConversionError, match=r"leaf \['x'\]\.tokens of type .*BrokenArray"):
        tj.to_device({"x": Batch(BrokenArray(), {})}, "cpu")


def test_objects_without_array_protocols_pass_through() -> None:
    marker = object()
    assert tj.to_device({"m": marker}, "cpu")["m"] is marker


def test_int64_narrowing_warns_once_with_the_fix() -> None:
    with pytest.warns(tj.DtypeNarrowingWarning, match="jax_enable_x64"):
        moved = tj.to_device(torch.arange(3), "cpu")
    assert moved.dtype == jnp.int32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tj.to_device(np.arange(3), "cpu")  # int64 again: no second warning


def test_non_blocking_false_returns_ready_arrays() -> None:
    out = tj.to_device({"a": np.ones((64, 64), np.float32)}, "cpu")
    assert out["a"].is_ready()
    assert _is_placed(tj.to_device(np.ones(4, np.float32), "cpu", non_blocking=True))


def test_nnx_module_moves_in_place() -> None:
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    kernel_before = model.kernel[...]
    assert tj.to_device(model, "cpu") is model
    assert all(_is_placed(p.data) for p in tj.parameters(model))
    assert np.asarray(model.kernel[...]).tolist() == np.asarray(kernel_before).tolist()


@pytest.mark.idiom("optimizer-parameters")
def test_an_optimizer_placed_with_its_model_compiles_the_step_once() -> None:
    import optax

    compiles: list[str] = []

    def count(event: str, duration: float, **_: Any) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    model = tj.to_device(nnx.Linear(2, 3, rngs=nnx.Rngs(0)), "cpu")
    optimizer = tj.to_device(nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param), "cpu")
    assert isinstance(optimizer, nnx.Optimizer)
    assert all(_is_placed(leaf) for leaf in jax.tree_util.tree_leaves(nnx.state(optimizer)))

    @nnx.jit
    def step(model: nnx.Linear, optimizer: nnx.Optimizer, x: jax.Array) -> jax.Array:
        loss, grads = nnx.value_and_grad(lambda m: (m(x) ** 2).mean())(model)
        optimizer.update(model, grads)
        return loss

    x = tj.to_device(jnp.ones((4, 2)), "cpu")
    losses = [float(step(model, optimizer, x))]
    jax.monitoring.register_event_duration_secs_listener(count)
    try:
        losses += [float(step(model, optimizer, x)) for _ in range(3)]
    finally:
        jax.monitoring.unregister_event_duration_listener(count)
    assert compiles == []  # the first update committed nothing new: no second compile
    assert losses == sorted(losses, reverse=True) and int(optimizer.step[...]) == 4


def test_parameters_of_every_model_kind() -> None:
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    assert len(list(tj.parameters(model))) == 2
    variables = {"params": {"w": jnp.ones(2)}, "batch_stats": {"mean": jnp.zeros(2)}}
    assert [p.shape for p in tj.parameters(variables)] == [(2,)]
    assert len(list(tj.parameters([jnp.ones(1), "x", np.ones(2)]))) == 2


def test_device_of_trees_and_edge_cases() -> None:
    assert tj.device_of(np.ones(2)) == tj.device("cpu")
    assert tj.device_of(torch.ones(2)) == torch.device("cpu")
    assert tj.device_of({"a": tj.to_device(jnp.ones(1), "cpu"), "b": np.ones(1)}) == tj.device(CPU)
    with pytest.raises(tj.EmptyTreeError, match="found no arrays in list"):
        tj.device_of(["no", "arrays"])


def test_check_same_device_ignores_tracers_and_host_data() -> None:
    assert tj.check_same_device() is None
    assert tj.check_same_device(np.ones(1), "x") is None

    constant = tj.to_device(jnp.ones(1), "cpu")

    def step(x: jax.Array) -> jax.Array:
        assert tj.check_same_device(x, constant) == tj.device(CPU)
        return x + constant

    jax.jit(step)(jnp.ones(1))


def test_to_jax_detaches_and_keeps_memory() -> None:
    tensor = torch.ones(4, requires_grad=True)
    array = tj.to_jax(tensor)
    assert array.unsafe_buffer_pointer() == tensor.data_ptr()


def test_to_jax_strict_refuses_copies() -> None:
    with pytest.raises(tj.ConversionError, match="jax_enable_x64"):
        tj.to_jax(torch.arange(3), strict=True)
    with pytest.raises(tj.ConversionError, match="not contiguous"):
        tj.to_jax(torch.arange(8.0)[::2], strict=True)
    with pytest.raises(tj.ConversionError, match="not contiguous"):
        tj.to_jax(np.arange(8.0, dtype=np.float32)[::2], strict=True)


def test_to_jax_of_strided_and_float8_tensors() -> None:
    strided = torch.arange(8.0)[::2]
    assert np.asarray(tj.to_jax(strided)).tolist() == strided.tolist()
    fp8 = torch.tensor([1.0, -2.0, 0.5]).to(torch.float8_e4m3fn)
    array = tj.to_jax(fp8)
    assert array.dtype == jnp.float8_e4m3fn
    assert np.asarray(array).astype(np.float32).tolist() == [1.0, -2.0, 0.5]
    back = tj.to_torch(array)
    assert back.dtype == torch.float8_e4m3fn and back.float().tolist() == [1.0, -2.0, 0.5]


def test_to_jax_rejects_non_arrays() -> None:
    with pytest.raises(tj.ConversionError, match=r"for nested containers use tj\.to_device"):
        tj.to_jax([1, 2])


def test_to_torch_devices_and_inputs() -> None:
    assert tj.to_torch(np.arange(3)).tolist() == [0, 1, 2]
    tensor = torch.ones(1)
    assert tj.to_torch(tensor) is tensor
    assert tj.to_torch(jnp.ones(2), "cpu").device == torch.device("cpu")
    with pytest.raises(tj.ConversionError, match="cannot convert list"):
        tj.to_torch([1])


def test_a_sharding_target_keeps_its_memory_kind() -> None:
    pinned = jax.sharding.SingleDeviceSharding(tj.resolve("cpu"), memory_kind="pinned_host")
    moved = tj.to_device(np.arange(3, dtype=np.float32), pinned)
    assert moved.sharding == pinned and moved.committed
    assert tj.to_device(moved, pinned) is moved


def test_arrays_leave_another_memory_kind_of_the_same_device() -> None:
    pinned = jax.device_put(np.arange(3, dtype=np.float32), jax.memory.Space.Host)
    moved = tj.to_device({"x": pinned}, "cpu")["x"]
    assert moved.sharding.memory_kind == "device" and moved.tolist() == [0.0, 1.0, 2.0]


def test_numpy_leaves_are_cast_on_the_host_before_the_transfer() -> None:
    moved = tj.to_device({"w": np.ones(2, np.float64), "ids": np.arange(2, dtype=np.int32)},
                         "cpu", jnp.float16)  # fmt: skip
    assert moved["w"].dtype == jnp.float16 and moved["ids"].dtype == jnp.int32


def test_host_memory_targets_never_alias_the_numpy_source() -> None:
    raw = np.empty(64 + 16, dtype=np.uint8)
    start = -raw.ctypes.data % 64
    source = raw[start : start + 16].view(np.float32)  # 64-byte aligned: JAX could alias it
    source[:] = [0.0, 1.0, 2.0, 3.0]
    pinned = jax.sharding.SingleDeviceSharding(tj.resolve("cpu"), memory_kind="pinned_host")
    moved = tj.to_device(source, pinned)
    source[:] = -1.0
    assert moved.tolist() == [0.0, 1.0, 2.0, 3.0]


# --- copy=True: a fresh buffer for every input kind and form ------------------------


def _aligned_numpy() -> np.ndarray[Any, Any]:
    """Host data JAX's CPU backend would alias (64-byte aligned), as loaders allocate it."""
    from torch2jax_device._src.interop import aligned_empty

    values = aligned_empty(16).view(np.float32)
    values[:] = [0.0, 1.0, 2.0, 3.0]
    return values


COPY_SOURCES: dict[str, Any] = {
    "aligned-numpy": _aligned_numpy,
    "numpy": lambda: np.arange(4, dtype=np.float32),
    "torch": lambda: torch.arange(4.0),
    "jax": lambda: tj.to_device(jnp.arange(4.0), "cpu"),
}
COPY_FORMS: dict[str, Any] = {
    "device": lambda x: tj.to_device(x, "cpu", copy=True),
    "same-dtype": lambda x: tj.to_device(x, jnp.float32, copy=True),
    "dtype-keyword": lambda x: tj.to_device(x, dtype="float32", copy=True),
    "device-and-dtype": lambda x: tj.to_device(x, "cpu", jnp.float32, copy=True),
    "in-a-tree": lambda x: tj.to_device({"x": x}, "cpu", copy=True)["x"],
    "dtype-in-a-tree": lambda x: tj.to_device([x], jnp.float32, copy=True)[0],
}


@pytest.mark.parametrize("form", list(COPY_FORMS))
@pytest.mark.parametrize("kind", list(COPY_SOURCES))
def test_copy_true_never_shares_the_source(kind: str, form: str) -> None:
    source = COPY_SOURCES[kind]()
    result = COPY_FORMS[form](source)
    if isinstance(source, jax.Array):  # immutable: compare buffers instead of writing
        assert result.unsafe_buffer_pointer() != source.unsafe_buffer_pointer()
    else:
        source[0] = 99.0
    assert np.asarray(result).tolist() == [0.0, 1.0, 2.0, 3.0]


# --- trees: every container in its own order -----------------------------------------


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Registered:
    """A registered pytree whose fields hold dicts: JAX walks it, the library its dicts."""

    params: dict[Any, Any]
    step: Any


def test_trees_walk_dicts_in_their_own_order_at_any_depth() -> None:
    tree = {
        "z": [{"b": 1, "a": 2}, None, ()],
        1: Point({"d": 3, "c": 4}, Batch(5, {"y": 6, "x": 7})),
        "r": Registered({"w2": 8, "w10": 9, 0: 10}, 11),
        "empty": {},
    }
    flat = _trees.flatten(tree, with_paths=True)
    assert flat.leaves == [*range(1, 8), "train", *range(8, 12)]
    assert flat.paths == [
        "['z'][0]['b']", "['z'][0]['a']", "[1].x['d']", "[1].x['c']", "[1].y.tokens",
        "[1].y.meta['y']", "[1].y.meta['x']", "[1].y.name", "['r'].params['w2']",
        "['r'].params['w10']", "['r'].params[0]", "['r'].step",
    ]  # fmt: skip
    rebuilt = flat.rebuild([leaf if isinstance(leaf, str) else -leaf for leaf in flat.leaves])
    assert list(rebuilt) == ["z", 1, "r", "empty"]
    assert rebuilt["z"] == [{"b": -1, "a": -2}, None, ()]
    assert list(rebuilt[1].x) == ["d", "c"] and list(rebuilt[1].y.meta) == ["y", "x"]
    assert type(rebuilt["r"]) is Registered and list(rebuilt["r"].params) == ["w2", "w10", 0]
    assert rebuilt["r"].step == -11 and rebuilt["empty"] == {}


def test_jax_sorts_what_the_library_keeps_in_order() -> None:
    batch = {"x": np.ones(1, np.float32), "label": np.zeros(1, np.int32)}
    assert list(jax.device_put(batch, CPU)) == ["label", "x"]  # JAX's order: sorted
    assert list(tj.to_device(batch, CPU)) == ["x", "label"]
    with pytest.raises(ValueError, match="Comparator"):
        jax.tree.leaves({1: np.ones(1), "a": np.ones(1)})
    assert list(tj.to_device({1: np.ones(1), "a": np.ones(1)}, CPU)) == [1, "a"]


# --- the lane for NumPy batches: exactly what the general path gives -----------------


Pair = collections.namedtuple("Pair", ["x", "y"])


class Tagged(np.ndarray[Any, Any]):
    """An ndarray subclass, as np.memmap is one."""


def _unaligned(count: int) -> np.ndarray[Any, Any]:
    """A float32 view that starts 4 bytes into its buffer (JAX cannot alias it)."""
    return np.frombuffer(bytearray(4 * count + 4), np.float32, count, offset=4)


def _numpy_batches() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    matrix = rng.random((6, 8), dtype=np.float32)
    frozen = np.arange(6, dtype=np.int32)
    frozen.flags.writeable = False
    return {
        "dict": {"x": rng.integers(0, 9, (4, 16), dtype=np.int32), "y": np.ones(3, np.float32)},
        "dtypes": [np.zeros(2, dtype) for dtype in (np.uint8, np.int16, np.float16, np.bool_)],
        "bfloat16": {"x": np.ones(4, jnp.bfloat16)},
        "0-d": np.array(7, np.int32),
        "strided": {"x": matrix[::2, 1::3], "fortran": np.asfortranarray(matrix)},
        "read-only": (frozen,),
        "unaligned": {"x": _unaligned(5)},
        "nested": {"pair": Pair(np.zeros(2, np.int32), [np.ones(1, np.float32), None])},
        "ordered": collections.OrderedDict(b=np.ones(2, np.int32), a=np.zeros(2, np.int32)),
        "group": [{"x": np.full(3, i, np.float32)} for i in range(3)],
    }


@pytest.mark.parametrize("name", list(_numpy_batches()))
def test_the_numpy_lane_places_exactly_as_the_general_path(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = _numpy_batches()[name]
    assert _placement._plain_host_data(_trees.flatten(batch).leaves)  # the lane is taken
    ours = tj.to_device(batch, CPU, non_blocking=True)
    monkeypatch.setattr(_placement, "_plain_host_data", lambda leaves: False)
    theirs = tj.to_device(batch, CPU, non_blocking=True)  # the general path
    assert jax.tree.structure(ours) == jax.tree.structure(theirs)
    assert type(ours) is type(theirs)
    leaves = (jax.tree.leaves(ours), jax.tree.leaves(theirs), jax.tree.leaves(batch))
    for mine, reference, source in zip(*leaves, strict=True):
        assert mine.sharding == reference.sharding and mine.committed and reference.committed
        assert mine.dtype == reference.dtype and mine.shape == reference.shape
        before = np.asarray(reference).copy()
        np.testing.assert_array_equal(np.asarray(mine), before)
        if source.flags.writeable:  # alias or copy: a write to the source shows in both or none
            source[...] = ~source if source.dtype == np.bool_ else 1 - source
            changed_here = not np.array_equal(np.asarray(mine), before)
            changed_there = not np.array_equal(np.asarray(reference), before)
            assert changed_here == changed_there


def test_the_lane_follows_jax_enable_x64() -> None:
    batch = {"x": np.arange(3, dtype=np.int64)}
    jax.config.update("jax_enable_x64", True)
    try:
        assert _placement._plain_host_data(_trees.flatten(batch).leaves)
        assert tj.to_device(batch, CPU)["x"].dtype == np.int64
    finally:
        jax.config.update("jax_enable_x64", False)
    assert not _placement._plain_host_data(_trees.flatten(batch).leaves)
    with pytest.warns(tj.DtypeNarrowingWarning):
        assert tj.to_device(batch, CPU)["x"].dtype == np.int32


@pytest.mark.parametrize(
    "batch",
    [
        {"x": np.arange(3)},  # int64: to_device narrows it, and warns
        {"x": np.zeros(2, np.float32).view(Tagged)},  # a subclass (np.memmap is one)
        {"x": torch.zeros(2)},
        {"x": jnp.zeros(2)},
        {"x": np.float32(1.0)},  # a NumPy scalar
        [np.zeros(2, np.float32), 3],  # a Python number leaf
        {"x": np.array(["a", "b"])},  # no numbers: the general path's error
        {"x": np.zeros(2, ">f4")},  # big-endian: converted first
        {},  # no leaves: to_device gives the same object back
    ],
    ids=[
        "int64", "subclass", "torch", "jax", "numpy-scalar", "python-number", "strings",
        "big-endian", "empty",
    ],
)  # fmt: skip
def test_everything_else_takes_the_general_path(batch: Any) -> None:
    assert not _placement._plain_host_data(_trees.flatten(batch).leaves)


# --- tj.Parameter: torch's .device, still an array -----------------------------------


def test_parameter_device_is_torch_style_and_it_stays_an_array() -> None:
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    kernel, bias = tj.parameters(tj.to_device(model, "cpu"))  # torch's order: weight, bias
    assert bias.data is model.bias[...]
    device = kernel.device
    assert isinstance(device, tj.Device) and not isinstance(device, jax.Device)
    host = host_cpu()  # cpu: "cpu:0" only among simulated CPU devices (the proxy mode)
    assert (device.type, device.index, str(device)) == (host.type, host.index, str(host))
    assert device == torch_named_here(torch.device("cpu")) and device == host and device == CPU
    assert kernel.data is model.kernel[...]
    assert (kernel.shape, kernel.dtype, kernel.numel()) == ((2, 3), jnp.float32, 6)
    # It is still an array in JAX code.
    expected = np.asarray(model.kernel[...])
    assert np.allclose(jnp.tanh(kernel), np.tanh(expected))
    assert np.allclose(jax.jit(lambda w: w @ jnp.ones(3))(kernel), expected @ np.ones(3))
    assert np.allclose(kernel * 2 + 1, expected * 2 + 1)
    assert np.allclose(1 - kernel, 1 - expected) and np.allclose(kernel.T, expected.T)
    grad = jax.grad(lambda w: (w**2).sum())(kernel)
    assert isinstance(grad, tj.Parameter) and np.allclose(grad.data, 2 * expected)
    placed = jax.device_put(kernel, CPU)
    assert isinstance(placed, tj.Parameter) and placed.data.committed
    assert np.allclose(jax.tree.map(lambda w: w + 1, kernel).data, expected + 1)
    assert jax.tree_util.keystr(jax.tree_util.tree_flatten_with_path([kernel])[0][0][0]) == (
        "[0].data"
    )
    assert torch.from_dlpack(kernel).shape == (2, 3) and np.asarray(kernel).shape == (2, 3)
    assert tj.to_jax(kernel) is kernel.data and tj.to_torch(kernel).shape == (2, 3)
    assert isinstance(tj.to_device(kernel, "cpu", jnp.float16), tj.Parameter)
    assert tj.to_device(kernel, "cpu", jnp.float16).dtype == jnp.float16  # a single array
    assert sum(p.numel() for p in tj.parameters(model)) == 2 * 3 + 3


def test_parameter_is_read_only_and_says_what_to_do_instead() -> None:
    weight = next(tj.parameters({"w": jnp.ones(2)}))
    with pytest.raises(tj.NoSuchAttributeError, match=r"cannot set 'requires_grad'.*Fix: change"):
        weight.requires_grad = False  # type: ignore[misc]
    with pytest.raises(AttributeError, match=r"no attribute 'grad'.*jax\.grad"):
        _ = weight.grad
    with pytest.raises(TypeError, match="unhashable"):
        hash(weight)
    for clone in (copy.copy(weight), copy.deepcopy(weight), pickle.loads(pickle.dumps(weight))):
        assert isinstance(clone, tj.Parameter) and clone.tolist() == [1.0, 1.0]


def test_parameter_device_of_a_tracer_is_none() -> None:
    devices: list[Any] = []

    def step(params: dict[str, Any]) -> jax.Array:
        weight = next(tj.parameters(params))
        devices.append(weight.device)
        return jnp.zeros(2, device=weight.device) + weight

    assert jax.jit(step)({"w": jnp.ones(2)}).tolist() == [1.0, 1.0]
    assert devices == [None]


# --- one documented way to use a tj.device with torch and with JAX -------------------


def test_a_device_gives_torch_and_jax_their_own_objects() -> None:
    device = tj.device("cpu")
    assert torch.zeros(2, device=device.torch_device).device == torch.device("cpu")
    assert torch.ones(2).to(device.torch_device).device == torch.device("cpu")
    assert jax.device_put(np.ones(2), device.jax_device).devices() == {CPU}
    assert jnp.zeros(2, device=device.jax_device).devices() == {CPU}
    assert tj.device("gpu:1").torch_device == torch.device("cuda", 1)  # never starts JAX
    with pytest.raises(tj.DeviceUnavailableError, match="torch has no device type for tpu"):
        _ = tj.device("tpu").torch_device


def test_jax_apis_given_a_tj_device_say_what_to_pass() -> None:
    device = tj.device("cpu")
    with pytest.raises(
        tj.NoSuchAttributeError, match=r"no attribute '_is_concrete'.*device\.jax_device"
    ):
        jnp.zeros(2, device=device)  # type: ignore[arg-type]
    with pytest.raises(AttributeError, match=r"has no attribute 'platform'.*device\.jax_device"):
        _ = device.platform
    assert not hasattr(device, "__array__")  # protocol probes stay plain and quiet
