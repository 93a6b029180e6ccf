"""The fourth side-by-side audit, torch as the oracle (1 device): the mismatches it found.

Each test runs the PyTorch idiom as the oracle and the torch2jax_device port, and fails
on the library as it was before the audit's fix:

- a class held in a batch as configuration (``{"x": x, "dtype": np.float32}``; also
  ``ml_dtypes.bfloat16``, ``np.ndarray``, ``torch.Tensor``) was taken for an array (the
  class has ``__array__``) and raised ``tj.ConversionError``, where a torch batch move
  passes it through as it passes ``torch.float32``;
- ``tj.to_device(model, jnp.bfloat16)`` of an NNX model holding dropout RNG state (JAX
  PRNG key arrays) raised NumPy's raw ``TypeError``, where ``model.to(torch.bfloat16)``
  of its torch twin casts the parameters; a tree with a key and a dtype raised the same;
  a lone key cast to a dtype raised JAX's raw ``NotImplementedError``;
- ``tj.to_torch`` of a key array raised NumPy's raw ``TypeError``;
- ``tj.to_device(equinox_model, torch.int32)`` cast the weights to int32, where
  ``Module.to`` (and ``tj.to_device`` of an NNX model) refuses a dtype that is not
  floating-point or complex;
- ``tj.get_default_device()`` after ``set_default_device("cpu:0")`` (or in
  ``with tj.device("cpu:1")``) said ``cpu``, where ``torch.get_default_device()`` keeps
  an indexed CPU default as written;
- ``tj.DeviceLoader`` / ``tj.prefetch_to_device`` raised builtin ``TypeError`` /
  ``ValueError`` (and ``len()`` / a missing attribute Python's own errors), outside the
  library's hierarchy, where torch's ``DataLoader`` raises those builtin classes;
- ``tj.to_torch`` / ``tj.to_jax`` of a ``float0`` gradient called it an array of records.

The multi-device half (a model with RNG state onto ``cpu:N``, a sharding that does not fit
a leaf) is ``tests/multidevice/test_audit_round4.py``.
"""

from __future__ import annotations

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
from tests.parity.harness import assert_same_outcome, run
from tests.support.gpu_proxy import torch_named_here

# --- classes held in a batch as configuration --------------------------------------------


def torch_send_to_device(obj: Any, *args: Any) -> Any:
    """A torch batch moved as Accelerate's send_to_device does: what has ``.to`` moves."""
    if isinstance(obj, torch.Tensor):
        return obj.to(*args)
    if isinstance(obj, Mapping):
        return type(obj)({key: torch_send_to_device(value, *args) for key, value in obj.items()})
    if isinstance(obj, (list, tuple)):
        return type(obj)(torch_send_to_device(item, *args) for item in obj)
    return obj


CLASSES = [np.float32, ml_dtypes.bfloat16, np.ndarray, torch.Tensor, np.int64, jnp.float16]
FORMS = {
    "device": ("cpu",),
    "device-and-dtype": ("cpu", torch.float16),
    "dtype": (torch.float16,),
}


@pytest.mark.parametrize("held", CLASSES, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize("form", list(FORMS))
def test_a_class_in_a_batch_passes_through_as_in_a_torch_batch(held: type, form: str) -> None:
    args = FORMS[form]
    theirs = torch_send_to_device({"x": torch.ones(2), "dtype": held}, *args)
    ours = tj.to_device({"x": np.ones(2, np.float32), "dtype": held}, *args)
    assert (ours["dtype"] is held) == (theirs["dtype"] is held)
    assert str(ours["x"].dtype) == str(theirs["x"].dtype).removeprefix("torch.")
    assert tj.to_device([held], "cpu", copy=True)[0] is held


@pytest.mark.parametrize("held", CLASSES, ids=lambda cls: cls.__name__)
def test_a_class_in_a_batch_passes_every_feeding_path(held: type) -> None:
    batch = {"x": np.ones(2, np.float32), "dtype": held}
    assert tj.pin_memory(batch)["dtype"] is held
    assert next(iter(tj.prefetch_to_device([batch], "cpu")))["dtype"] is held


def test_a_class_as_the_whole_argument_is_refused_by_name() -> None:
    with pytest.raises(AttributeError):
        np.float32.to("cpu")  # type: ignore[attr-defined]  # what torch-style code would do
    with pytest.raises(tj.ConversionError, match=r"cannot move a class \(numpy\.float32\)"):
        tj.to_device(np.float32, "cpu")


# --- JAX PRNG key arrays (an NNX model's dropout state) -------------------------------------


class Dropped(nnx.Module):
    def __init__(self) -> None:
        self.fc = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        self.drop = nnx.Dropout(0.1, rngs=nnx.Rngs(1))


class DroppedTwin(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(2, 3)
        self.drop = torch.nn.Dropout(0.1)


def key_leaves(model: nnx.Module) -> list[Any]:
    return [leaf for leaf in jax.tree.leaves(nnx.state(model)) if tj_is_key(leaf)]


def tj_is_key(leaf: Any) -> bool:
    return bool(jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key))


@pytest.mark.parametrize("args", [(torch.bfloat16,), ("cpu", torch.float16)], ids=str)
def test_a_model_with_dropout_rng_state_casts_like_its_torch_twin(args: tuple[Any, ...]) -> None:
    twin, model = DroppedTwin(), Dropped()
    keys_before = key_leaves(model)
    theirs = run(lambda: [str(p.dtype).removeprefix("torch.") for p in twin.to(*args).parameters()])
    ours = run(lambda: [str(p.dtype) for p in tj.parameters(tj.to_device(model, *args))])
    assert_same_outcome(theirs, ours)
    assert [key.dtype for key in key_leaves(model)] == [key.dtype for key in keys_before]


def test_a_key_in_a_tree_stays_a_key_as_integer_state_stays_in_module_to() -> None:
    norm = torch.nn.BatchNorm1d(2).to(torch.float16)  # the oracle: non-float state is kept
    key = jax.random.key(0)
    moved = tj.to_device({"key": key, "w": np.ones(2, np.float32)}, "cpu", jnp.float16)
    assert str(moved["w"].dtype) == str(norm.weight.dtype).removeprefix("torch.")
    assert norm.num_batches_tracked.dtype == torch.int64
    assert moved["key"].dtype == key.dtype
    np.testing.assert_array_equal(jax.random.key_data(moved["key"]), jax.random.key_data(key))


@pytest.mark.parametrize("args", [(jnp.float16,), ("cpu", jnp.float16)], ids=str)
def test_a_lone_key_cast_to_a_dtype_names_the_fix(args: tuple[Any, ...]) -> None:
    with pytest.raises(tj.DTypeError, match=r"PRNG key array \(key<fry>\).*Fix: .*key_data"):
        tj.to_device(jax.random.key(0), *args)
    with pytest.raises(tj.DTypeError, match="PRNG key array"):
        jax.jit(lambda key: tj.to_device(key, jnp.float16))(jax.random.key(0))


def test_to_torch_of_a_key_array_names_the_fix() -> None:
    with pytest.raises(tj.ConversionError, match=r"PRNG key array.*Fix: .*key_data\(key\)"):
        tj.to_torch(jax.random.key(0))
    bits = tj.to_torch(jax.random.key_data(jax.random.key(0)))  # the fix works
    assert bits.tolist() == np.asarray(jax.random.key_data(jax.random.key(0))).tolist()


# --- an Equinox model given an integer dtype refuses it, as Module.to does -------------------


@pytest.mark.parametrize(
    "args",
    [(torch.int32,), ("cpu", torch.bool), (torch.zeros(1, dtype=torch.int32),), (torch.float16,)],
    ids=str,
)
def test_an_equinox_model_takes_the_dtypes_module_to_takes(args: tuple[Any, ...]) -> None:
    eqx = pytest.importorskip("equinox")
    theirs = run(lambda: [str(p.dtype) for p in torch.nn.Linear(2, 3).to(*args).parameters()])
    model = eqx.nn.Linear(2, 3, key=jax.random.key(0))
    ours = run(lambda: [f"torch.{p.dtype}" for p in tj.parameters(tj.to_device(model, *args))])
    assert_same_outcome(theirs, ours)
    if ours.error is not None:
        assert isinstance(ours.error, tj.DTypeError)
        assert "only accepts floating point or complex dtypes" in str(ours.error)


# --- an indexed CPU default reads back as written, as torch.get_default_device -------------


def read_back(module: Any, spec: Any, form: str) -> Any:
    if form == "context":
        with module.device(spec):
            return module.get_default_device()
    module.set_default_device(spec)
    try:
        return module.get_default_device()
    finally:
        module.set_default_device(None)


SPECS = ["cpu", "cpu:0", "cpu:1", torch.device("cpu", 0), torch.device("cpu")]


@pytest.mark.parametrize("spec", SPECS, ids=str)
@pytest.mark.parametrize("form", ["context", "setter"])
def test_a_cpu_default_reads_back_as_torch_reads_it(spec: Any, form: str) -> None:
    if len(jax.devices("cpu")) != 1:
        pytest.skip("one CPU device: simulated ones are cpu:N whatever was written")
    assert_same_outcome(
        run(lambda: read_back(torch, spec, form)), run(lambda: read_back(tj, spec, form))
    )


def test_nested_cpu_defaults_read_back_as_torch_reads_them() -> None:
    def nested(module: Any) -> Any:
        with module.device("cpu"):
            with module.device("cpu:0"):
                inner = module.get_default_device()
            return inner, module.get_default_device()

    # An unindexed CPU reads back as tj names the host CPU here (cpu:0 among simulated ones).
    theirs = run(lambda: [torch_named_here(device) for device in nested(torch)])
    assert_same_outcome(theirs, run(lambda: nested(tj)))
    with tj.device("cpu:0"):
        assert jnp.zeros(1).device == jax.devices("cpu")[0]  # still placed on the CPU


# --- feeding's argument errors belong to the library's hierarchy ----------------------------


def torch_loader(source: Any, prefetch: Any) -> Any:
    """torch's DataLoader checks, without starting a worker: a negative prefetch_factor is
    refused when the loader is built, a source that is not a dataset when it is read."""
    if prefetch < 0:
        return torch.utils.data.DataLoader(source, num_workers=1, prefetch_factor=prefetch)
    return list(torch.utils.data.DataLoader(source))


BAD_FEEDING = [
    pytest.param([1.0, 2.0], -1, id="negative-prefetch"),
    pytest.param(3, 2, id="not-iterable"),
]


@pytest.mark.parametrize(("source", "prefetch"), BAD_FEEDING)
def test_feeding_argument_errors_are_the_librarys_and_torchs_class(
    source: Any, prefetch: Any
) -> None:
    theirs = run(lambda: torch_loader(source, prefetch))
    assert theirs.error is not None
    assert_same_outcome(theirs, run(lambda: list(tj.DeviceLoader(source, "cpu", prefetch))))
    assert_same_outcome(
        theirs, run(lambda: list(tj.prefetch_to_device(source, "cpu", size=prefetch)))
    )


@pytest.mark.parametrize("prefetch", [1.5, True, "2"])
def test_a_prefetch_that_is_not_an_int_is_the_librarys_type_error(prefetch: Any) -> None:
    with pytest.raises(tj.ArgumentTypeError, match="must be an int"):
        tj.DeviceLoader([np.ones(2)], "cpu", prefetch)
    with pytest.raises(tj.ArgumentTypeError, match="must be an int"):
        next(tj.prefetch_to_device([np.ones(2)], "cpu", size=prefetch))


class Stream(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    def __iter__(self) -> Any:
        return iter([torch.ones(1)])


def test_len_and_missing_attributes_of_a_device_loader_are_the_librarys_errors() -> None:
    theirs = run(lambda: len(torch.utils.data.DataLoader(Stream())))
    loader = tj.DeviceLoader((batch for batch in [np.ones(1)]), "cpu")
    assert_same_outcome(theirs, run(lambda: len(loader)))
    assert_same_outcome(
        run(lambda: torch.utils.data.DataLoader(Stream()).no_such_setting),
        run(lambda: loader.no_such_setting),
    )
    assert not hasattr(loader, "no_such_setting")
    assert len(list(loader)) == 1  # list() still works without a length


# --- a float0 gradient handed to to_torch / to_jax is named as what it is -------------------


@pytest.mark.parametrize("convert", [tj.to_torch, tj.to_jax], ids=["to_torch", "to_jax"])
def test_a_float0_gradient_is_named_not_called_records(convert: Any) -> None:
    grads = jax.grad(lambda p: p["w"] @ p["ids"], allow_int=True)(
        {"w": jnp.ones(2), "ids": jnp.arange(2)}
    )
    with pytest.raises(tj.ConversionError, match=r"a float0 array \(shape \(2,\).*Fix: "):
        convert(grads["ids"])


# --- jax.ShapeDtypeStruct (eval_shape) is JAX's meta tensor ----------------------------------


def abstract(value: Any) -> Any:
    """Shape and dtype of a meta tensor or a ShapeDtypeStruct, comparable across frameworks."""
    if isinstance(value, (torch.Tensor, jax.ShapeDtypeStruct)):
        return (tuple(value.shape), str(value.dtype).removeprefix("torch."))
    return {key: abstract(item) for key, item in value.items()}


META_FORMS = [
    ((torch.float16,), {}),
    ((), {"dtype": torch.bfloat16}),
    ((torch.int32,), {}),
    ((), {"memory_format": torch.preserve_format}),
    (("cpu",), {}),
    (("cpu", torch.float16), {}),
]


@pytest.mark.parametrize(("args", "kwargs"), META_FORMS, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_an_abstract_array_moves_and_casts_as_a_meta_tensor(
    args: tuple[Any, ...], kwargs: dict[str, Any], dtype: str
) -> None:
    theirs = run(lambda: abstract(torch.empty(2, 3, device="meta", dtype=getattr(torch, dtype))
                                  .to(*args, **kwargs)))  # fmt: skip
    struct = jax.ShapeDtypeStruct((2, 3), np.dtype(dtype))
    ours = run(lambda: abstract(tj.to_device(struct, *args, **kwargs)))
    assert_same_outcome(theirs, ours)
    if dtype == "float32":  # in a batch only floating-point leaves cast ("dtype in containers")
        batch = run(lambda: abstract(tj.to_device({"w": struct}, *args, **kwargs)))
        if theirs.error is None:
            theirs.value = {"w": theirs.value}
        assert_same_outcome(theirs, batch)


@pytest.mark.parametrize(("args", "kwargs"), META_FORMS, ids=str)
def test_an_abstract_model_moves_and_casts_as_a_meta_module(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    def theirs() -> list[str]:
        model = torch.nn.Linear(2, 3, device="meta").to(*args, **kwargs)
        return sorted({str(p.dtype) for p in model.parameters()})

    def ours() -> list[str]:
        model = nnx.eval_shape(lambda: nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
        moved = tj.to_device(model, *args, **kwargs)
        return sorted({f"torch.{leaf.dtype}" for leaf in jax.tree.leaves(nnx.state(moved))})

    assert_same_outcome(run(theirs), run(ours))


def test_moving_an_abstract_model_names_the_leaf_and_the_fix() -> None:
    model = nnx.eval_shape(lambda: nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    with pytest.raises(tj.DeviceUnavailableError, match=r"leaf .*ShapeDtypeStruct.*Fix: build"):
        tj.to_device(model, "cpu")


def test_an_abstract_models_parameters_are_listed_as_a_meta_models() -> None:
    def described(params: Any) -> tuple[Any, ...]:
        params = list(params)
        devices = {str(p.device) for p in params}
        dtypes = {str(p.dtype).removeprefix("torch.") for p in params}
        return len(params), sum(p.numel() for p in params), devices, dtypes

    theirs = described(torch.nn.Linear(2, 3, device="meta").parameters())
    model = nnx.eval_shape(lambda: nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    assert described(tj.parameters(model)) == theirs
    assert next(tj.parameters(model)).device == torch.device("meta")
    eqx = pytest.importorskip("equinox")
    built = eqx.filter_eval_shape(eqx.nn.Linear, 2, 3, key=jax.random.key(0))
    assert described(tj.parameters(built)) == theirs


def test_an_abstract_models_device_is_meta_as_a_meta_models() -> None:
    """``next(model.parameters()).device`` of a model built on the meta device; tj's
    ``device_of`` raised EmptyTreeError ("found no arrays") for ``nnx.eval_shape``'s."""
    theirs = next(torch.nn.Linear(2, 3, device="meta").parameters()).device
    model = nnx.eval_shape(lambda: nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    assert tj.device_of(model) == theirs
    assert tj.device_of(jax.ShapeDtypeStruct((2,), np.float32)) == theirs
    assert tj.device_of(model) == next(tj.parameters(model)).device
