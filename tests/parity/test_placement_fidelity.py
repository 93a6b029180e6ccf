"""Placement fidelity, side by side with torch: a batch's keys keep their order, every
``Tensor.to`` form torch takes, torch's 0-dim CPU rule, and what a mixed codebase meets.

Torch is the oracle: each test runs the torch idiom and its port on the same data.
"""

from __future__ import annotations

import collections
import dataclasses
import typing
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import torch2jax_device as tj
from tests.support.gpu_proxy import host_cpu, torch_named_here
from torch2jax_device import DeviceLoader, prefetch_to_device

from .harness import Outcome, assert_same_outcome, run

# --- a batch's keys keep their order -----------------------------------------------------


class Pair(typing.NamedTuple):
    first: Any
    second: Any


@dataclasses.dataclass
class Holder:
    inner: dict[Any, Any]


def torch_to(tree: Any) -> Any:
    """What torch code does with a tree of tensors: ``.to`` on each, containers rebuilt."""
    if isinstance(tree, torch.Tensor):
        return tree.to("cpu")
    if isinstance(tree, collections.defaultdict):
        return collections.defaultdict(
            tree.default_factory, {key: torch_to(value) for key, value in tree.items()}
        )
    if isinstance(tree, dict):
        return type(tree)((key, torch_to(value)) for key, value in tree.items())
    if isinstance(tree, Pair):
        return Pair(*(torch_to(value) for value in tree))
    if isinstance(tree, (list, tuple)):
        return type(tree)(torch_to(value) for value in tree)
    if isinstance(tree, Holder):
        return Holder(torch_to(tree.inner))
    return tree


def key_orders(tree: Any) -> Any:
    """Every mapping's keys in order, and the container types, as plain data."""
    if isinstance(tree, dict):
        return (type(tree).__name__, [(key, key_orders(value)) for key, value in tree.items()])
    if isinstance(tree, (list, tuple)):
        return (type(tree).__name__, [key_orders(value) for value in tree])
    if isinstance(tree, Holder):
        return ("Holder", key_orders(tree.inner))
    return "leaf"


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


TREES = {
    "batch": lambda: {"x": t(1, 2), "label": t(0)},
    "state-dict-names": lambda: {"layer2.w": t(2), "layer10.w": t(10), "layer1.w": t(1)},
    "mixed-key-types": lambda: {1: t(1), "a": t(2), (0, "b"): t(3)},
    "unsortable-None-key": lambda: {None: t(0), "z": t(1)},
    "nested": lambda: {"z": {"b": t(1), "a": t(2)}, "y": [{"d": t(3), "c": t(4)}]},
    "ordered-dict": lambda: collections.OrderedDict(b=t(1), a=t(2)),
    "defaultdict": lambda: collections.defaultdict(list, {"b": t(1), "a": {"y": t(2), "x": t(3)}}),
    "inside-a-namedtuple": lambda: Pair({"b": t(1), "a": t(2)}, {2: t(3), 1: t(4)}),
    "inside-a-dataclass": lambda: Holder({"b": t(1), "a": t(2)}),
    "tuple-of-dicts": lambda: ({"b": t(1), "a": t(2)}, None, "text"),
}


@pytest.mark.idiom("batch-to-device")
@pytest.mark.parametrize("name", list(TREES))
def test_to_device_keeps_every_dicts_order(name: str) -> None:
    theirs, ours = torch_to(TREES[name]()), tj.to_device(TREES[name](), "cpu")
    assert key_orders(ours) == key_orders(theirs)
    torch_leaves = [leaf.tolist() for leaf in _leaves_in_order(theirs)]
    assert [np.asarray(leaf).tolist() for leaf in _leaves_in_order(ours)] == torch_leaves
    if isinstance(theirs, collections.defaultdict):
        assert ours.default_factory is theirs.default_factory


def _leaves_in_order(tree: Any) -> list[Any]:
    if isinstance(tree, dict):
        return [leaf for value in tree.values() for leaf in _leaves_in_order(value)]
    if isinstance(tree, (list, tuple)):
        return [leaf for value in tree for leaf in _leaves_in_order(value)]
    if isinstance(tree, Holder):
        return _leaves_in_order(tree.inner)
    return [tree] if isinstance(tree, (torch.Tensor, jax.Array)) else []


def test_values_unpack_the_same_as_torchs() -> None:
    batch = {"x": torch.arange(4.0), "label": torch.tensor([1], dtype=torch.int32)}
    torch_x, torch_y = {key: value.to("cpu") for key, value in batch.items()}.values()
    x, y = tj.to_device(batch, "cpu").values()
    assert (np.asarray(x).tolist(), np.asarray(y).tolist()) == (torch_x.tolist(), torch_y.tolist())


class DictSamples(Dataset[dict[str, Any]]):
    """Samples as dicts, inputs first: a DataLoader collates them into one dict, in order."""

    def __len__(self) -> int:
        return 6

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {
            "x": torch.full((2,), float(index)),
            "label": torch.tensor(index % 2, dtype=torch.int32),
        }


@pytest.mark.idiom("dataloader-to-device")
@pytest.mark.parametrize("background", [False, True, None])
def test_a_dataloaders_dict_batches_keep_their_order(background: bool | None) -> None:
    loader = DataLoader(DictSamples(), batch_size=4)
    theirs = [{key: value.to("cpu") for key, value in batch.items()} for batch in loader]
    for ours in (
        list(DeviceLoader(loader, "cpu", background=background)),
        list(prefetch_to_device(iter(loader), "cpu", background=background)),
    ):
        assert [list(batch) for batch in ours] == [list(batch) for batch in theirs]
        for torch_batch, tj_batch in zip(theirs, ours, strict=True):
            torch_x, torch_y = torch_batch.values()
            x, y = tj_batch.values()
            assert np.asarray(x).tolist() == torch_x.tolist()
            assert np.asarray(y).tolist() == torch_y.tolist()


def test_numpy_batches_keep_their_order_through_the_loader() -> None:
    batches = [{"x": np.ones(2, np.float32), "label": np.zeros(1, np.int32)}] * 3
    assert [list(batch) for batch in DeviceLoader(batches, "cpu")] == [["x", "label"]] * 3


def test_device_of_and_check_same_device_take_unsortable_keys() -> None:
    tree = {1: tj.to_device(jnp.ones(1), "cpu"), "a": np.zeros(1)}
    assert tj.device_of(tree) == torch_named_here(torch.tensor(1.0).device)
    assert tj.check_same_device(tree) == host_cpu()
    assert [next(iter(tj.parameters(tree))).tolist()] == [[1.0]]


# --- every Tensor.to form torch takes ------------------------------------------------------

#: (torch call, port call) on the same source; "o" is a float16 tensor/array (``.to(other)``).
TO_FORMS: dict[str, tuple[Any, Any]] = {
    'to("cpu", f16, True)': (
        lambda x, o: x.to("cpu", torch.float16, True),
        lambda x, o: tj.to_device(x, "cpu", torch.float16, True),
    ),
    'to("cpu", f16, True, True)': (
        lambda x, o: x.to("cpu", torch.float16, True, True),
        lambda x, o: tj.to_device(x, "cpu", torch.float16, True, True),
    ),
    'to("cpu", None, True)': (
        lambda x, o: x.to("cpu", None, True),
        lambda x, o: tj.to_device(x, "cpu", None, True),
    ),
    "to(f16, False, True)": (
        lambda x, o: x.to(torch.float16, False, True),
        lambda x, o: tj.to_device(x, torch.float16, False, True),
    ),
    "to(f16, True)": (
        lambda x, o: x.to(torch.float16, True),
        lambda x, o: tj.to_device(x, torch.float16, True),
    ),
    "to(f16, True, copy=True)": (
        lambda x, o: x.to(torch.float16, True, copy=True),
        lambda x, o: tj.to_device(x, torch.float16, True, copy=True),
    ),
    "to(f32, False, True)": (  # nothing changes, but copy=True: a fresh tensor
        lambda x, o: x.to(torch.float32, False, True),
        lambda x, o: tj.to_device(x, torch.float32, False, True),
    ),
    "to(f32, True)": (  # nothing changes: the tensor itself
        lambda x, o: x.to(torch.float32, True),
        lambda x, o: tj.to_device(x, torch.float32, True),
    ),
    "to(other, True)": (
        lambda x, o: x.to(o, True),
        lambda x, o: tj.to_device(x, o, True),
    ),
    "to(other, True, True)": (
        lambda x, o: x.to(o, True, True),
        lambda x, o: tj.to_device(x, o, True, True),
    ),
    "to(other, False, copy=True)": (
        lambda x, o: x.to(o, False, copy=True),
        lambda x, o: tj.to_device(x, o, False, copy=True),
    ),
    'to("cpu", f16, True, copy=True)': (
        lambda x, o: x.to("cpu", torch.float16, True, copy=True),
        lambda x, o: tj.to_device(x, "cpu", torch.float16, True, copy=True),
    ),
    "to(memory_format=preserve_format)": (
        lambda x, o: x.to(memory_format=torch.preserve_format),
        lambda x, o: tj.to_device(x, memory_format=torch.preserve_format),
    ),
    "to(memory_format=contiguous_format)": (
        lambda x, o: x.to(memory_format=torch.contiguous_format),
        lambda x, o: tj.to_device(x, memory_format=torch.contiguous_format),
    ),
    'to("cpu", memory_format=contiguous_format)': (
        lambda x, o: x.to("cpu", memory_format=torch.contiguous_format),
        lambda x, o: tj.to_device(x, "cpu", memory_format=torch.contiguous_format),
    ),
    "to(other, memory_format=contiguous_format)": (
        lambda x, o: x.to(o, memory_format=torch.contiguous_format),
        lambda x, o: tj.to_device(x, o, memory_format=torch.contiguous_format),
    ),
    "to(memory_format=None)": (
        lambda x, o: x.to(memory_format=None),
        lambda x, o: tj.to_device(x, memory_format=None),
    ),
    "2-d to(memory_format=channels_last)": (
        lambda x, o: x.to(memory_format=torch.channels_last),
        lambda x, o: tj.to_device(x, memory_format=torch.channels_last),
    ),
    "2-d to(memory_format=channels_last_3d)": (
        lambda x, o: x.to(memory_format=torch.channels_last_3d),
        lambda x, o: tj.to_device(x, memory_format=torch.channels_last_3d),
    ),
    'to(memory_format="channels_last")': (
        lambda x, o: x.to(memory_format="channels_last"),
        lambda x, o: tj.to_device(x, memory_format="channels_last"),
    ),
    'to("cpu", True)': (
        lambda x, o: x.to("cpu", True),
        lambda x, o: tj.to_device(x, "cpu", True),
    ),
    "to(f16, 1)": (
        lambda x, o: x.to(torch.float16, 1),
        lambda x, o: tj.to_device(x, torch.float16, 1),
    ),
}


def _to_sources() -> tuple[torch.Tensor, torch.Tensor, jax.Array, jax.Array]:
    x, other = torch.arange(6.0).reshape(2, 3), torch.zeros(1, dtype=torch.float16)
    jax_x = tj.to_device(jnp.arange(6.0).reshape(2, 3), "cpu")
    return x, other, jax_x, tj.to_device(jnp.zeros(1, jnp.float16), "cpu")


@pytest.mark.idiom("tensor-non-blocking")
@pytest.mark.parametrize("form", list(TO_FORMS))
def test_every_to_form_torch_takes(form: str) -> None:
    torch_call, tj_call = TO_FORMS[form]
    x, other, jax_x, jax_other = _to_sources()
    theirs, ours = run(lambda: torch_call(x, other)), run(lambda: tj_call(jax_x, jax_other))
    assert_same_outcome(theirs, ours, torch_source=x, tj_source=jax_x)
    if theirs.error is None:
        assert (ours.value is jax_x) == (theirs.value is x), "identity differs"


@pytest.mark.idiom("tensor-to-memory-format")
@pytest.mark.parametrize("fmt", ["channels_last", "channels_last_3d"])
def test_channels_last_on_images_changes_no_value(fmt: str) -> None:
    shape = (2, 3, 4, 5) if fmt == "channels_last" else (2, 3, 4, 5, 2)
    x = torch.arange(float(np.prod(shape))).reshape(shape)
    theirs = x.to("cpu", memory_format=getattr(torch, fmt))
    ours = tj.to_device(tj.to_jax(x), "cpu", memory_format=getattr(torch, fmt))
    assert_same_outcome(Outcome(theirs), Outcome(ours))
    assert not theirs.is_contiguous()  # torch changes strides; JAX arrays have none


@pytest.mark.idiom("tensor-to-memory-format")
def test_module_to_channels_last_leaves_values_as_torch_does() -> None:
    from flax import nnx

    torch_model = torch.nn.Conv2d(3, 4, 3)
    torch_model.to(memory_format=torch.channels_last)  # the vision idiom
    model = nnx.Conv(3, 4, (3, 3), rngs=nnx.Rngs(0))
    before = np.asarray(model.kernel[...]).copy()
    assert tj.to_device(model, "cpu", memory_format=torch.channels_last) is model
    np.testing.assert_array_equal(np.asarray(model.kernel[...]), before)


# --- torch's 0-dim CPU rule ---------------------------------------------------------------


@pytest.mark.idiom("mixed-device-error")
def test_a_0_dim_cpu_tensor_meets_any_device_as_in_torch() -> None:
    # torch: a 0-dim CPU tensor takes part in an operation on another device; with one
    # CPU here, the same rule is checked with a CPU array and a 0-dim tensor.
    scalar, vector = torch.tensor(2.0), torch.ones(3)
    assert (vector * scalar).device == vector.device
    array = tj.to_device(jnp.ones(3), "cpu")
    assert tj.check_same_device(array, scalar) == host_cpu()  # cpu:0 among simulated CPUs
    assert tj.check_same_device(scalar) == scalar.device


# --- what a mixed codebase meets -----------------------------------------------------------


@pytest.mark.idiom("jax-to-tensor")
def test_int64_labels_come_back_as_int32_and_go_back_to_int64() -> None:
    labels = torch.tensor([0, 2, 1])
    logits = torch.zeros(3, 3)
    assert jax.config.jax_enable_x64 is False  # the default, under which JAX has no int64
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tj.DtypeNarrowingWarning)  # said once per process
        in_jax = tj.to_jax(labels)
    through_jax = tj.to_torch(in_jax)
    assert through_jax.dtype == torch.int32
    with pytest.raises(RuntimeError, match="Long"):
        torch.nn.functional.nll_loss(logits, through_jax)
    back = tj.to_torch(in_jax, dtype=torch.int64)
    assert back.dtype == torch.int64 and back.tolist() == labels.tolist()
    expected = torch.nn.functional.nll_loss(logits, labels)
    assert torch.nn.functional.nll_loss(logits, back) == expected


@pytest.mark.parametrize(
    ("name", "points_at"),
    [
        ("is_cuda", "tj.device_of"),
        ("get_device", "tj.device_of"),
        ("cpu", "tj.to_device"),
        ("cuda", "tj.to_device"),
        ("to", "tj.to_device"),
    ],
)
def test_parameter_placement_methods_point_at_the_library(name: str, points_at: str) -> None:
    assert hasattr(torch.nn.Parameter(torch.ones(1)), name)  # torch code uses them
    weight = next(tj.parameters({"w": tj.to_device(jnp.ones(2), "cpu")}))
    with pytest.raises(tj.NoSuchAttributeError, match=points_at) as raised:
        getattr(weight, name)
    assert "grad" not in str(raised.value)


def test_an_optimizer_is_on_its_models_device_before_the_first_update() -> None:
    nnx = pytest.importorskip("flax.nnx")
    optax = pytest.importorskip("optax")
    model = tj.to_device(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), "cpu")
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    torch_model = torch.nn.Linear(2, 2)
    torch_optimizer = torch.optim.Adam(torch_model.parameters())
    assert not torch_optimizer.state  # torch's state appears at the first step, on the device
    assert tj.device_of(optimizer) == torch_named_here(next(torch_model.parameters()).device)
