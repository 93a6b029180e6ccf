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
  ``AttributeError``;
- ...
"""

from __future__ import annotations

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
    assert list(tj.state_dict(Model())) == list(Twin().state_dict())
    restored = tj.load_state(Model(), Twin().state_dict())
    assert restored.scale.tolist() == [1.0, 1.0, 1.0]


# --- a bare Python int beyond int32 --------------------------------------------------------

TORCH_TO_JAX = {torch.float32: jnp.float32, torch.int8: jnp.int8, torch.int32: jnp.int32}


@pytest.mark.parametrize("number", [2**40, -(2**40), 2**63 - 1, 2**63, 2**70])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.int32])
def test_a_big_python_int_cast_like_torch(number: int, dtype: Any) -> None:
    theirs = run(lambda: torch.tensor(number).to("cpu", dtype))
    ours = run(lambda: tj.to_device(number, "cpu", TORCH_TO_JAX[dtype]))
    assert_same_outcome(theirs, ours)
    assert_same_outcome(
        run(lambda: torch.tensor(number).to(dtype)),
        run(lambda: tj.to_device(number, TORCH_TO_JAX[dtype])),
    )


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
