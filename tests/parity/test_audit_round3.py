"""The third adversarial audit, side by side with torch (1 device): the mismatches it found.

Each test runs the PyTorch idiom as the oracle and the torch2jax_device port, and fails
on the library as it was before the audit's fix:

- a model's arrays in the order its torch twin lists them (``state_dict()``,
  ``parameters()``), where ``nnx.state`` sorts names (``bias`` before ``kernel``);
- a bare Python int beyond int32 (``x.to(d)`` of ``2**40``): JAX's raw ``OverflowError``
  even where a dtype that holds it was asked for;
- ``tj.to_torch`` of a NumPy array of an ml_dtypes kind (``np.asarray`` of a bfloat16 or
  float8 JAX array): torch's raw ``TypeError`` where ``torch.from_numpy`` semantics (a
  tensor sharing the memory) were promised; of a reversed NumPy view, torch's raw
  ``ValueError``; of a JAX int4 / float4 / float8_e3m4 array, JAX's raw errors or an
  ``AttributeError``; onto a device torch lacks, torch's bare error;
- containers JAX takes for leaves (dict and list subclasses, ``UserDict`` such as Hugging
  Face's ``BatchEncoding``, tuple subclasses) came back unchanged inside a batch, their
  tensors never moved, where a batch move (Accelerate's ``send_to_device``) moves them;
- an NNX module inside a batch was copied, the model the caller holds left as it was
  (and one module held twice became two), where ``Module.to`` moves it in place;
- a torch state dict moved by ``tj.to_device`` lost its ``_metadata`` (the versions
  ``load_state_dict`` reads), which ``torch.load(..., map_location=device)`` keeps;
- ``tj.load_state``'s mismatches (missing, unexpected, mis-shaped names, a whole
  checkpoint) raised a ``ValueError`` where ``load_state_dict`` raises ``RuntimeError``.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch
from flax import nnx

import torch2jax_device as tj
from tests.parity.harness import assert_same_outcome, placement, run
from tests.support.models import NnxNet, TorchTwin

# --- a model's arrays in its twin's order ------------------------------------------------


class Assigned(nnx.Module):
    """Layers assigned out of alphabetical order, and an own parameter after a layer."""

    def __init__(self) -> None:
        rngs = nnx.Rngs(0)
        self.zeta = nnx.Linear(2, 3, rngs=rngs)
        self.alpha = nnx.LayerNorm(3, rngs=rngs)
        self.blocks = nnx.List([nnx.Linear(3, 3, rngs=rngs) for _ in range(11)])
        self.stats = nnx.BatchNorm(3, rngs=rngs)
        self.scale = nnx.Param(jnp.ones(3))


class AssignedTwin(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.zeta = torch.nn.Linear(2, 3)
        self.alpha = torch.nn.LayerNorm(3)
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(3, 3) for _ in range(11)])
        self.stats = torch.nn.BatchNorm1d(3)
        self.scale = torch.nn.Parameter(torch.ones(3))


def twin_names(twin: torch.nn.Module) -> list[str]:
    """The twin's state dict names, without what torch keeps and JAX models have not."""
    return [name for name in twin.state_dict() if not name.endswith("num_batches_tracked")]


@pytest.mark.parametrize(("model", "twin"), [(Assigned, AssignedTwin), (NnxNet, TorchTwin)])
def test_the_torch_layout_lists_names_in_the_twins_order(model: Any, twin: Any) -> None:
    built = model() if model is Assigned else model(seed=0)
    assert list(tj.state_dict(built, layout="torch")) == twin_names(twin())


def test_the_jax_layout_lists_arrays_in_the_twins_order() -> None:
    ours = [array.size for array in tj.state_dict(Assigned()).values()]
    theirs = [AssignedTwin().state_dict()[name].numel() for name in twin_names(AssignedTwin())]
    assert ours == theirs
    assert list(tj.state_dict(Assigned()))[:3] == ["scale", "zeta.kernel", "zeta.bias"]


@pytest.mark.parametrize(("model", "twin"), [(Assigned, AssignedTwin), (NnxNet, TorchTwin)])
def test_parameters_pair_with_the_twins_parameters(model: Any, twin: Any) -> None:
    built = model() if model is Assigned else model(seed=0)
    ours = [parameter.size for parameter in tj.parameters(built)]
    assert ours == [parameter.numel() for parameter in twin().parameters()]


def test_the_torch_layout_keeps_values_with_their_names() -> None:
    model = Assigned()
    state = tj.state_dict(model, layout="torch")
    assert state["zeta.weight"].tolist() == jax.numpy.transpose(model.zeta.kernel).tolist()
    result = AssignedTwin().load_state_dict(state)  # torch fills in num_batches_tracked
    assert not result.missing_keys and not result.unexpected_keys


def test_an_equinox_model_lists_its_own_arrays_before_its_layers() -> None:
    eqx = pytest.importorskip("equinox")

    class Model(eqx.Module):  # type: ignore[misc,name-defined]
        fc: Any
        scale: Any
        norm: Any

        def __init__(self) -> None:
            self.fc = eqx.nn.Linear(2, 3, key=jax.random.key(0))
            self.scale = jnp.ones(3)
            self.norm = eqx.nn.LayerNorm(3)

    class Twin(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(2, 3)
            self.scale = torch.nn.Parameter(torch.ones(3))
            self.norm = torch.nn.LayerNorm(3)

    assert list(tj.state_dict(Model(), layout="torch")) == list(Twin().state_dict())
    ours = [parameter.size for parameter in tj.parameters(Model())]
    assert ours == [parameter.numel() for parameter in Twin().parameters()]
    assert list(tj.state_dict(Model())) == list(Twin().state_dict())
    restored = tj.load_state(Model(), Twin().state_dict())
    assert restored.scale.tolist() == [1.0, 1.0, 1.0]


# --- a bare Python int beyond int32 --------------------------------------------------------

TORCH_TO_JAX = {torch.float32: jnp.float32, torch.int8: jnp.int8, torch.int32: jnp.int32}


BIG_INTS = [2**40, -(2**40), 2**63 - 1, 2**63, 2**70]


@pytest.mark.parametrize("number", BIG_INTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.int32])
def test_a_big_python_int_cast_like_torch(number: int, dtype: Any) -> None:
    theirs = run(lambda: torch.tensor(number).to("cpu", dtype))
    ours = run(lambda: tj.to_device(number, "cpu", TORCH_TO_JAX[dtype]))
    assert_same_outcome(theirs, ours)


@pytest.mark.parametrize("number", [2.5, 7, *BIG_INTS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.int32])
def test_a_python_number_cast_to_a_dtype_stays_on_the_cpu_like_torch(
    number: float, dtype: Any
) -> None:
    """``x.to(dtype)`` of a number: torch's tensor of it is on the CPU whatever the
    machine has, so the port's must be too, also where JAX's default is a GPU."""
    theirs = run(lambda: torch.tensor(number).to(dtype))
    assert_same_outcome(theirs, run(lambda: tj.to_device(number, TORCH_TO_JAX[dtype])))


def test_a_big_python_int_without_a_dtype_names_the_fix() -> None:
    assert torch.tensor(2**40).to("cpu").item() == 2**40  # torch: int64
    if jax.config.read("jax_enable_x64"):
        pytest.skip("with x64, JAX holds it as torch does")
    with pytest.raises(tj.ConversionError, match=r"1099511627776 needs int64.*jax_enable_x64"):
        tj.to_device(2**40, "cpu")
    assert_same_outcome(run(lambda: torch.tensor(2**70)), run(lambda: tj.to_device(2**70)))


def test_small_python_numbers_stay_weak_typed_as_torch_0_d_tensors_promote() -> None:
    half = torch.ones(2, dtype=torch.float16)
    assert (half + torch.tensor(2.5)).dtype == torch.float16  # a 0-d tensor does not promote
    assert (jnp.ones(2, jnp.float16) + tj.to_device(2.5, "cpu")).dtype == jnp.float16


# --- to_torch of the dtypes ml_dtypes adds, and of reversed NumPy views -----------------

ML_DTYPES = [
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "float4_e2m1fn",
    "int4",
    "uint4",
    "int2",
    "uint2",
]


def torch_computes(name: str) -> Any:
    """torch's dtype of that name if torch can make tensors of it (the oracle), else None."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        return None
    try:
        torch.zeros(1).to(dtype)
    except (NotImplementedError, RuntimeError):
        return None  # a placeholder dtype (torch.int4): no operations
    return dtype


@pytest.mark.parametrize("name", ML_DTYPES)
@pytest.mark.parametrize("source", ["numpy", "jax"])
def test_to_torch_of_ml_dtypes_gives_torchs_dtype_or_says_torch_has_none(
    name: str, source: str
) -> None:
    values = [0, 1, 2] if "int" in name else [1.0, 2.0, 0.5]
    host = np.asarray(values, getattr(ml_dtypes, name))
    array = host if source == "numpy" else jnp.asarray(host)
    dtype = torch_computes(name)
    if dtype is None:
        with pytest.raises(tj.ConversionError, match=rf"torch has no {name} tensors.*Fix: cast"):
            tj.to_torch(array)
        return
    theirs = torch.tensor(values).to(dtype)
    ours = tj.to_torch(array)
    assert (ours.dtype, ours.float().tolist()) == (theirs.dtype, theirs.float().tolist())
    if source == "numpy":  # torch.from_numpy's promise: the tensor shares the memory
        assert ours.data_ptr() == host.ctypes.data
        host[0] = host[1]
        assert ours.float().tolist()[0] == values[1]


def test_to_torch_of_a_reversed_numpy_view_raises_like_torch_from_numpy() -> None:
    reversed_view = np.arange(4.0)[::-1]
    assert_same_outcome(
        run(lambda: torch.from_numpy(reversed_view)), run(lambda: tj.to_torch(reversed_view))
    )
    with pytest.raises(tj.ConversionError, match=r"negative strides.*np.ascontiguousarray"):
        tj.to_torch(reversed_view)


# --- containers JAX takes for leaves --------------------------------------------------------


class Batch(dict):  # type: ignore[type-arg]
    """A dict subclass, as many loaders' batch types are."""


class Encoding(collections.UserDict):  # type: ignore[type-arg]
    """A UserDict with an attribute of its own, as Hugging Face's BatchEncoding."""

    def __init__(self, data: Any = None, n_sequences: int = 0) -> None:
        super().__init__(data)
        self.n_sequences = n_sequences


class Items(list):  # type: ignore[type-arg]
    pass


class Pair(tuple):  # type: ignore[type-arg]
    pass


def torch_send_to_device(obj: Any, device: str) -> Any:
    """A batch moved in torch as Accelerate's send_to_device does: containers by type."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, Mapping):
        moved = {key: torch_send_to_device(value, device) for key, value in obj.items()}
        if isinstance(obj, Encoding):
            return Encoding(moved, obj.n_sequences)
        return type(obj)(moved)
    if isinstance(obj, (list, tuple)):
        return type(obj)(torch_send_to_device(item, device) for item in obj)
    return obj


def described(obj: Any) -> Any:
    """Types, key order, attributes and leaves (placement, dtype, values) of a batch."""
    if isinstance(obj, Mapping):
        extra = getattr(obj, "n_sequences", None)
        return (type(obj).__name__, extra, [(k, described(v)) for k, v in obj.items()])
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, [described(item) for item in obj])
    if isinstance(obj, torch.Tensor):
        return (
            "tensor",
            placement(obj.device),
            str(obj.dtype).removeprefix("torch."),
            obj.tolist(),
        )
    if isinstance(obj, jax.Array):
        (device,) = obj.devices()  # (type, index): the CPU reads cpu:0 among simulated ones
        return ("tensor", placement(device), str(obj.dtype), obj.tolist())
    return ("unmoved", type(obj).__name__)


def batch_of(make: Any) -> Any:
    return {
        "z": Batch(ids=make([3, 1]), mask=make([1.0, 0.0])),
        "a": [Encoding({"input_ids": make([5, 6]), "labels": make([0.5])}, n_sequences=2)],
        "m": Items([make([1.5]), Pair((make([2.0]), make([3.0])))]),
    }


@pytest.mark.parametrize("root", ["nested", "root"])
def test_containers_jax_takes_for_leaves_are_moved_like_a_torch_batch(root: str) -> None:
    def tensors(values: list[Any]) -> Any:
        return torch.tensor(values, dtype=torch.int32 if isinstance(values[0], int) else None)

    theirs = batch_of(tensors)
    ours = batch_of(lambda values: np.asarray(values, np.asarray(tensors(values)).dtype))
    if root == "root":
        theirs, ours = theirs["z"], ours["z"]
    assert described(tj.to_device(ours, "cpu")) == described(torch_send_to_device(theirs, "cpu"))


def test_a_moved_user_dict_is_a_new_one_and_keeps_its_attributes() -> None:
    encoding = Encoding({"b": np.ones(2, np.float32), "a": np.zeros(1, np.float32)}, 3)
    moved = tj.to_device([encoding], "cpu", jnp.float16)[0]
    assert moved is not encoding and type(moved) is Encoding and moved.n_sequences == 3
    assert list(moved) == ["b", "a"] and moved["b"].dtype == jnp.float16
    assert isinstance(encoding["b"], np.ndarray)  # the input is never mutated


# --- an NNX module inside a batch moves in place, as Module.to ------------------------------


def torch_batch_to(batch: dict[str, Any], *args: Any) -> dict[str, Any]:
    """The torch idiom: ``{k: v.to(...)}``; a module's ``.to`` moves it in place."""
    return {key: value.to(*args) for key, value in batch.items()}


def test_a_module_inside_a_batch_is_cast_in_place_and_kept() -> None:
    torch_model = torch.nn.Linear(2, 2)
    theirs = torch_batch_to({"model": torch_model, "x": torch.ones(2)}, torch.bfloat16)
    model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    ours = tj.to_device({"model": model, "x": np.ones(2, np.float32)}, jnp.bfloat16)
    assert (ours["model"] is model) == (theirs["model"] is torch_model) == True  # noqa: E712
    assert [str(p.dtype) for p in tj.parameters(model)] == [
        str(p.dtype).removeprefix("torch.") for p in torch_model.parameters()
    ]
    assert str(ours["x"].dtype) == str(theirs["x"].dtype).removeprefix("torch.")


def test_a_module_held_twice_in_a_batch_stays_one_module() -> None:
    torch_model = torch.nn.Linear(2, 2)
    theirs = torch_batch_to({"a": torch_model, "b": torch_model}, torch.float16)
    model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    ours = tj.to_device([model, {"again": model}], jnp.float16)
    assert (ours[0] is ours[1]["again"] is model) == (theirs["a"] is theirs["b"])


# --- load_state's mismatches raise what load_state_dict raises ---------------------------


def twin_state(change: str) -> dict[str, Any]:
    state = dict(TorchTwin().state_dict())
    if change == "missing":
        del state["head.0.bias"]
    elif change == "unexpected":
        state["extra.weight"] = torch.ones(1)
    elif change == "shape":
        state["head.0.bias"] = torch.ones(4)
    elif change == "whole-checkpoint":
        state = {"model": state, "step": 3}
    return state


@pytest.mark.parametrize("change", ["missing", "unexpected", "shape", "whole-checkpoint"])
def test_load_state_mismatches_raise_what_load_state_dict_raises(change: str) -> None:
    theirs = run(lambda: TorchTwin().load_state_dict(twin_state(change)))
    ours = run(lambda: tj.load_state(NnxNet(seed=0), twin_state(change)))
    assert isinstance(theirs.error, RuntimeError)
    assert_same_outcome(theirs, ours)
    assert isinstance(ours.error, tj.CheckpointError)  # and still the library's class


@pytest.mark.parametrize("device", ["cuda", "cuda:1", "mps"])
def test_to_torch_onto_a_device_torch_lacks_raises_the_librarys_error(device: str) -> None:
    theirs = run(lambda: torch.ones(2).to(device))
    ours = run(lambda: tj.to_torch(jnp.ones(2), device))
    assert_same_outcome(theirs, ours)  # both succeed where torch has the device
    if theirs.error is not None:
        assert isinstance(ours.error, tj.DeviceUnavailableError)
        assert f"on {device}" in str(ours.error) and "Fix:" in str(ours.error)


def test_to_torch_onto_the_cpu_still_shares_memory() -> None:
    """A CPU array (pinned there: JAX's default may be a GPU) is shared, not copied."""
    array = tj.to_device(jnp.arange(4.0), "cpu")
    tensor = tj.to_torch(array, "cpu")
    assert tensor.data_ptr() == array.unsafe_buffer_pointer()
    assert tj.to_torch(array, "cpu", dtype=torch.float16).dtype == torch.float16


@pytest.mark.parametrize("device", [None, "cpu"])
def test_to_torch_copy_gives_a_tensor_of_its_own_as_tensor_to_copy_does(
    device: str | None,
) -> None:
    """torch's ``from_dlpack`` shares: an in-place op reaches the JAX array. ``copy=True``
    is ``Tensor.to(copy=True)``: the tensor's own memory, the JAX array untouched."""
    array = tj.to_device(jnp.full(3, 255.0), "cpu")
    shared = torch.from_dlpack(array)
    assert tj.to_torch(array, device).data_ptr() == shared.data_ptr()  # as torch's
    own = tj.to_torch(array, device, copy=True)
    assert own.data_ptr() != shared.data_ptr() and own.dtype == shared.dtype
    own /= 255
    assert own.tolist() == [1.0] * 3 and np.asarray(array).tolist() == [255.0] * 3
    assert tj.to_torch(array, device, dtype=torch.float16, copy=True).dtype == torch.float16


# --- a state dict keeps its _metadata through to_device -------------------------------------


@pytest.mark.filterwarnings("ignore::torch2jax_device.DtypeNarrowingWarning")  # int64 count
def test_a_moved_state_dict_keeps_its_metadata_as_torch_load_map_location_does() -> None:
    import io

    buffer = io.BytesIO()
    torch.save(torch.nn.Sequential(torch.nn.BatchNorm1d(2)).state_dict(), buffer)
    buffer.seek(0)
    theirs = torch.load(buffer, map_location="cpu")
    buffer.seek(0)
    ours = tj.to_device(tj.load(buffer), "cpu")
    assert type(ours) is type(theirs) and list(ours) == list(theirs)
    assert ours._metadata == theirs._metadata
