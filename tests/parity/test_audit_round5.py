"""The fifth side-by-side audit (issue 34), torch as the oracle: the casts and trees it found.

Each test runs the PyTorch idiom as the oracle and the torch2jax_device port, and fails
on the library as it was before the fix:

- int64/uint64 data cast to a float dtype wrapped through int32 first (``2**40`` became
  ``0.0``), in every ``.to`` form on torch tensors and the device-less forms on NumPy;
- ``float8_e4m3fn`` overflow (and ±inf) became NaN where torch saturates to ±448;
  ``float8_e8m0fnu`` of 0 or a negative number became NaN where torch keeps ``|x|``'s
  power of two (``2**-127`` for 0); a float32 subnormal became ``False`` as a bool;
- the dtype-only form took datetime64 (days since 1970) and object arrays as numbers;
- complex to real said nothing (torch warns);
- a tuple subclass built as ``Pair(a, b)`` stayed a leaf: unmoved inside a batch (its torch
  tensors stayed torch tensors) and refused at the top level;
- ``tj.Parameter.dtype`` never equalled a ``torch.dtype`` (its ``.device`` equals a
  ``torch.device``);
- NumPy scalars inside a batch became 0-d arrays (torch's batch move leaves them);
- calls torch's ``.to`` refuses were taken: flags that are not bools, ``(other, dtype)``,
  ``other=``, a dtype's name as the device, ``copy=True`` for a model, ``channels_last`` on a
  bare number; ``tj.load_file(b"path")`` raised Python's raw ``endswith`` error.

The generators here are the oracle: every dtype pair torch casts, at the edge values of
the source dtype, in every call form and from every source kind (torch tensor, NumPy
array, JAX array), against ``torch.Tensor.to``.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch

import torch2jax_device as tj
from tests.parity.harness import assert_same_outcome, run
from tests.support import fuzz
from tests.support.gpu_proxy import torch_named_here
from torch2jax_device._src.casting import ComplexCastWarning

# --- the dtype table and its edge values --------------------------------------------------

#: Every dtype torch and JAX (ml_dtypes) both name: the fuzzer's table, one owner.
DTYPES = list(fuzz.DTYPES)

FLOAT_EDGES = [
    0.0, -0.0, 1e-45, -1e-45, 2.0**-127, 1e-40, 2.0**-9, 0.3, 0.5, 1.5, 2.5, -1.5, -2.5,
    127.0, 128.0, 255.0, 256.0, 448.0, 464.0, 480.0, 57344.0, 65504.0, 65520.0, 1e5,
    2.0**31 - 1, 2.0**31, 2.0**32, 2.0**40, 2.0**53 + 1, 2.0**63, 3e38, 1e300,
    float("inf"), -float("inf"), float("nan"), -1.0, -129.0, -(2.0**31), -1e5, -1000.0,
]  # fmt: skip
INT_EDGES = [
    0, 1, -1, 127, 128, 255, 256, -128, -129, 448, 480, 2**15, 2**16, 2**24 + 1, 2**31 - 1,
    2**31, -(2**31), 2**32, 2**40, 3_000_000_000, 2**53 + 1, 2**63 - 1, -(2**63), 2**63,
    2**64 - 1,
]  # fmt: skip


def numpy_dtype(name: str) -> np.dtype[Any]:
    return np.dtype(getattr(ml_dtypes, name) if hasattr(ml_dtypes, name) else name)


def edge_tensor(name: str) -> torch.Tensor:
    """The source dtype's edge values, made by torch (so each is what torch holds)."""
    dtype = getattr(torch, name)
    if name == "bool":
        return torch.tensor([False, True])
    if dtype.is_floating_point or dtype.is_complex:
        real = torch.tensor(FLOAT_EDGES, dtype=torch.float64)
        if dtype.is_complex:
            return torch.complex(real, real.flip(0)).to(dtype)
        return real.to(dtype)
    info = torch.iinfo(dtype)
    return torch.tensor([v for v in INT_EDGES if info.min <= v <= info.max], dtype=dtype)


def host(tensor: torch.Tensor) -> np.ndarray[Any, Any]:
    """A tensor's values as NumPy (bfloat16 and float8 through their bits)."""
    name = str(tensor.dtype).removeprefix("torch.")
    if name == "bfloat16" or name.startswith("float8"):
        unsigned = torch.uint8 if tensor.element_size() == 1 else torch.int16
        return tensor.view(unsigned).numpy().view(numpy_dtype(name))
    return tensor.numpy()


def narrowed(name: str) -> str:
    """The dtype JAX holds for ``name`` (without jax_enable_x64)."""
    return np.dtype(jax.dtypes.canonicalize_dtype(numpy_dtype(name))).name


def torch_answer(source: torch.Tensor, target: str) -> np.ndarray[Any, Any]:
    """torch's ``.to(target)``, narrowed by torch as JAX narrows it (int64 -> int32 wraps)."""
    return host(_wide(source, target).to(getattr(torch, narrowed(target))))


def past_32_bits(source: torch.Tensor, target: str) -> np.ndarray[Any, Any]:
    """Which values of torch's ``.to(target)`` the dtype JAX holds cannot: an int64 past
    int32, a finite float64 (or complex128 part) past float32's largest. tj refuses host
    data holding one, and wraps or overflows none (JAX arrays, already 32-bit, wrap as
    ``torch_answer`` does: the known difference ``float-to-int-saturates`` and casts on
    the device)."""
    narrow, result = narrowed(target), _wide(source, target)
    if narrow == target:
        return np.zeros(source.shape, bool)
    if result.is_floating_point() or result.is_complex():
        wide = result.numpy()
        with np.errstate(over="ignore"):
            return np.isinf(wide.astype(np.dtype(narrow))) & ~np.isinf(wide)
    info = np.iinfo(np.dtype(narrow))
    return np.array([not info.min <= int(value) <= info.max for value in result.tolist()])


def _wide(source: torch.Tensor, target: str) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # complex -> real, tested on its own
        return source.to(getattr(torch, target))


def defined(source: torch.Tensor, target: str) -> np.ndarray[Any, Any]:
    """Which elements torch defines a value for: a float outside an integer dtype's range
    (or NaN, or infinite) cast to it is undefined behaviour in torch's C++ cast."""
    if target == "bool" or not (source.is_floating_point() or source.is_complex()):
        return np.ones(source.shape, bool)
    if getattr(torch, target).is_floating_point or getattr(torch, target).is_complex:
        return np.ones(source.shape, bool)
    values = source.real if source.is_complex() else source
    values = values.to(torch.float64).numpy()
    info = np.iinfo(np.dtype(target))
    with np.errstate(invalid="ignore"):
        truncated = np.trunc(values)
        return np.isfinite(values) & (truncated >= info.min) & (truncated <= info.max)


def same_values(ours: Any, theirs: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Elementwise equality: NaNs equal, zeros' signs compared."""
    ours = np.asarray(ours)
    if ours.dtype != theirs.dtype:
        return np.zeros(theirs.shape, bool)
    if theirs.dtype.kind == "c":
        return same_values(ours.real, theirs.real) & same_values(ours.imag, theirs.imag)
    if theirs.dtype.kind in "biu":
        return ours == theirs
    with np.errstate(invalid="ignore"):  # ml_dtypes' NaNs
        a, b = ours.astype(np.float64), theirs.astype(np.float64)
    return (np.isnan(a) & np.isnan(b)) | ((a == b) & (np.signbit(a) == np.signbit(b)))


def source_as(kind: str, tensor: torch.Tensor) -> Any:
    if kind == "torch":
        return tensor
    if kind == "numpy":
        return host(tensor).copy()
    return jnp.asarray(host(tensor))


#: torch's ``.to`` call forms on a single array (dtype given as torch's or NumPy's).
FORMS: dict[str, Callable[[Any, str], Any]] = {
    "to(dtype)": lambda x, name: tj.to_device(x, getattr(torch, name)),
    "to(dtype=)": lambda x, name: tj.to_device(x, dtype=numpy_dtype(name)),
    "to(device, dtype)": lambda x, name: tj.to_device(x, "cpu", getattr(torch, name)),
    "to(device, dtype=)": lambda x, name: tj.to_device(x, "cpu", dtype=name),
    "to(dtype, copy=True)": lambda x, name: tj.to_device(x, getattr(torch, name), copy=True),
    "to(dtype, nb, copy)": lambda x, name: tj.to_device(x, getattr(torch, name), False, True),
}


def jax_holds(name: str) -> bool:
    return narrowed(name) == name


@pytest.mark.parametrize("kind", ["torch", "numpy", "jax"])
@pytest.mark.parametrize("source_name", DTYPES)
def test_every_cast_gives_torchs_values_in_every_form(kind: str, source_name: str) -> None:
    """Every target dtype, every ``.to`` form and a batch (``Module.to``'s rule: only
    floating-point leaves are cast), against torch's own cast of the same values."""
    if kind == "jax" and not jax_holds(source_name):
        pytest.skip("JAX holds no 64-bit data without jax_enable_x64")
    source = edge_tensor(source_name)
    wrong = []
    for target in DTYPES:
        theirs, mask = torch_answer(source, target), defined(source, target)
        past = past_32_bits(source, target) if kind != "jax" else np.zeros(mask.shape, bool)
        refused = (mask & past).any()  # a value torch defines would wrap: an error
        undefined = (~mask & past).any()  # only undefined ones: an error, or the values
        forms = dict(FORMS)
        inexact = source.is_floating_point() or source.is_complex()
        if inexact and (
            getattr(torch, target).is_floating_point or getattr(torch, target).is_complex
        ):
            forms["batch"] = lambda x, name: tj.to_device({"w": x}, "cpu", getattr(torch, name))[
                "w"
            ]
        for form, call in forms.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ComplexCastWarning)
                warnings.simplefilter("ignore", tj.DtypeNarrowingWarning)
                try:
                    ours = call(source_as(kind, source), target)
                except tj.ConversionError as error:
                    if not (refused or undefined) or "does not fit" not in str(error):
                        raise
                    continue
            if refused:
                wrong.append(f"{source_name}->{target} {form}: wrapped instead of refused")
                continue
            equal = same_values(ours, theirs)
            bad = mask & ~equal
            if bad.any():
                where = np.nonzero(bad)[0][:3]
                wrong.append(
                    f"{source_name}->{target} {form}: values {host(source)[where].tolist()} "
                    f"gave {np.asarray(ours)[where].tolist()} ({np.asarray(ours).dtype}), torch "
                    f"{theirs[where].tolist()} ({theirs.dtype})"
                )
    assert not wrong, "\n".join(wrong[:20])


# --- 1. 64-bit integers cast before narrowing ---------------------------------------------


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("kind", ["torch", "numpy"])
def test_int64_to_float32_does_not_wrap_through_int32(kind: str, form: str) -> None:
    source = torch.tensor([2**40, 3_000_000_000, -(2**62)])
    theirs = source.to(torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tj.DtypeNarrowingWarning)
        ours = FORMS[form](source_as(kind, source), "float32")
    assert np.asarray(ours).tolist() == theirs.tolist()


def test_uint64_top_bit_and_half_precision_overflow_as_torch() -> None:
    big = torch.tensor([2**63], dtype=torch.uint64)
    assert tj.to_device(big, torch.float32).tolist() == big.to(torch.float32).tolist()
    assert tj.to_device(host(big), jnp.float32).tolist() == [2.0**63]
    huge = torch.tensor([2**40])
    for dtype in (torch.float16, torch.bfloat16):  # f16: inf; bf16 has float32's range
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tj.DtypeNarrowingWarning)
            ours = tj.to_device(huge, dtype)
        assert float(ours[0]) == huge.to(dtype).item()


def test_a_python_int_needing_int64_is_cast_as_torch_casts_it() -> None:
    assert (
        float(tj.to_device(2**40, "cpu", torch.float16))
        == torch.tensor(2**40).to(torch.float16).item()
    )


# --- 2. float8 at its edges ---------------------------------------------------------------


def float32_sample() -> np.ndarray[Any, Any]:
    """Every 2**14th float32 bit pattern (each exponent, sign and mantissa region) and
    random ones: what the float8 and bool rules must get right bit for bit."""
    rng = np.random.default_rng(34)
    strided = np.arange(0, 2**32, 2**14, dtype=np.uint64).astype(np.uint32)
    drawn = rng.integers(0, 2**32, 20_000, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([strided, drawn]).view(np.float32)


@pytest.mark.parametrize(
    "target",
    [name for name in DTYPES if name.startswith("float8")] + ["bool", "float16", "bfloat16"],
)
@pytest.mark.parametrize("kind", ["torch", "numpy", "jax"])
def test_float32_bit_patterns_cast_as_torch(kind: str, target: str) -> None:
    values = torch.from_numpy(float32_sample())
    theirs = torch_answer(values, target)
    ours = tj.to_device(source_as(kind, values), "cpu", getattr(torch, target))
    equal = same_values(ours, theirs)
    assert equal.all(), (host(values)[~equal][:5], np.asarray(ours)[~equal][:5], theirs[~equal][:5])


def test_e4m3fn_saturates_and_e8m0_of_zero_is_two_to_the_minus_127() -> None:
    source = torch.tensor([1000.0, -1000.0, float("inf"), -float("inf"), float("nan")])
    ours = tj.to_device(source, torch.float8_e4m3fn)
    assert np.asarray(ours).astype(np.float32)[:4].tolist() == [448.0, -448.0, 448.0, -448.0]
    assert np.isnan(np.asarray(ours).astype(np.float32)[4])
    zero = tj.to_device(np.zeros(1, np.float32), jnp.float8_e8m0fnu)
    assert float(np.asarray(zero).astype(np.float32)[0]) == 2.0**-127
    assert torch.zeros(1).to(torch.float8_e8m0fnu).float().item() == 2.0**-127


def test_a_float32_subnormal_is_true_as_a_bool() -> None:
    subnormal = torch.tensor([1e-45, -1e-40, 0.0, -0.0])
    theirs = subnormal.to(torch.bool).tolist()
    assert theirs == [True, True, False, False]
    for kind in ("torch", "numpy", "jax"):
        assert tj.to_device(source_as(kind, subnormal), torch.bool).tolist() == theirs


# --- complex to real warns, as torch does -------------------------------------------------


@pytest.mark.parametrize("form", [*FORMS, "batch"])
@pytest.mark.parametrize("kind", ["torch", "numpy", "jax"])
def test_complex_to_real_warns_as_torch_does(kind: str, form: str) -> None:
    source = torch.tensor([1 + 2j, -3 - 4j], dtype=torch.complex64)
    with warnings.catch_warnings():  # torch warns once per process (TORCH_WARN_ONCE)
        warnings.simplefilter("ignore", UserWarning)
        theirs = source.to(torch.float32)
    call = FORMS.get(form) or (lambda x, name: tj.to_device({"w": x}, "cpu", name)["w"])
    with pytest.warns(ComplexCastWarning, match="discards the imaginary part") as caught:
        ours = call(source_as(kind, source), "float32")
    assert np.asarray(ours).tolist() == theirs.tolist()
    assert caught[0].filename == __file__  # said at the caller's line


# --- 4. non-numeric NumPy refused in every form -------------------------------------------

NON_NUMERIC = {
    "datetime64": lambda: np.array(["2020-01-01", "2021-06-30"], "datetime64[D]"),
    "timedelta64": lambda: np.array([1, 2], "timedelta64[s]"),
    "object": lambda: np.array([1, None], object),
    "text": lambda: np.array(["a", "b"]),
    "bytes": lambda: np.array([b"a", b"b"]),
}
REFUSING_FORMS: dict[str, Callable[[Any], Any]] = {
    "to(device)": lambda x: tj.to_device(x, "cpu"),
    "to(device, dtype)": lambda x: tj.to_device(x, "cpu", jnp.float16),
    "to(dtype)": lambda x: tj.to_device(x, jnp.float16),
    "to(dtype=)": lambda x: tj.to_device(x, dtype=torch.float32),
    "to(dtype, copy=True)": lambda x: tj.to_device(x, torch.float32, copy=True),
    "to(other)": lambda x: tj.to_device(x, jnp.zeros(1, jnp.float16)),
}


@pytest.mark.parametrize("form", list(REFUSING_FORMS))
@pytest.mark.parametrize("kind", list(NON_NUMERIC))
def test_non_numeric_numpy_is_refused_in_every_form(kind: str, form: str) -> None:
    array = NON_NUMERIC[kind]()
    with pytest.raises(TypeError):  # torch has no tensors of these
        torch.as_tensor(array)
    with pytest.raises(tj.ConversionError, match="cannot become a JAX array"):
        REFUSING_FORMS[form](array)


# --- 5. a parameter's dtype compares with torch's -----------------------------------------

TORCH_FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32]


@pytest.mark.parametrize("dtype", TORCH_FLOATS, ids=str)
def test_a_comparable_dtype_equals_torchs_dtype_of_its_name(dtype: torch.dtype) -> None:
    from torch2jax_device._src.dtypes import ComparableDtype

    theirs = torch.zeros(1, dtype=dtype).dtype
    ours = ComparableDtype(numpy_dtype(str(dtype).removeprefix("torch.")))
    for other in TORCH_FLOATS:
        assert (ours == other) == (theirs == other)
        assert (other == ours) == (other == theirs)
        assert (ours != other) == (theirs != other)
    assert ours == np.dtype(ours.name) and hash(ours) == hash(np.dtype(ours.name))


def test_a_parameters_dtype_equals_torchs_as_its_device_does() -> None:
    from flax import nnx

    with tj.device("cpu"):  # where torch's twin is, also where JAX's default is a GPU
        model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    theirs = next(iter(torch.nn.Linear(2, 3).parameters()))
    ours = next(tj.parameters(model))
    cpu = torch_named_here(torch.device("cpu"))  # cpu:0 where JAX has two CPU devices
    assert (ours.device == cpu) == (theirs.device == torch.device("cpu"))
    assert (ours.dtype == torch.float32) == (theirs.dtype == torch.float32)
    assert (ours.dtype == torch.float16) == (theirs.dtype == torch.float16)
    assert ours.element_size() == theirs.element_size()
    assert ours.is_floating_point() == theirs.is_floating_point()


# --- 3. a tuple subclass whose constructor takes its items as separate arguments ----------


class Pair(tuple):  # type: ignore[type-arg]
    """A tuple subclass built as ``Pair(a, b)``: ``Pair([a, b])`` raises TypeError."""

    def __new__(cls, first: Any, second: Any) -> Pair:
        return super().__new__(cls, (first, second))


def torch_moved_pair(pair: Pair, *args: Any) -> Pair:
    """The pair with each tensor moved by torch, rebuilt by its own constructor."""
    moved = Pair(*(item.to(*args) for item in pair))
    moved.__dict__.update(pair.__dict__)
    return moved


def pair_description(pair: Any) -> Any:
    """Type, attribute, and each item's dtype and values."""
    items = [(str(item.dtype).removeprefix("torch."), np.asarray(item).tolist()) for item in pair]
    return type(pair).__name__, getattr(pair, "label", None), items


@pytest.mark.parametrize("where", ["root", "in a dict", "in a list"])
@pytest.mark.parametrize("args", [("cpu",), ("cpu", torch.float16), (torch.float16,)], ids=str)
def test_a_tuple_subclass_built_from_separate_arguments_moves(where: str, args: Any) -> None:
    def make(kind: Callable[[list[float]], Any]) -> Pair:
        pair = Pair(kind([1.0, 2.0]), kind([3.0]))
        pair.label = "train"  # type: ignore[attr-defined]
        return pair

    theirs = torch_moved_pair(make(torch.tensor), *args)
    wrap: dict[str, Callable[[Any], Any]] = {
        "root": lambda x: x,
        "in a dict": lambda x: {"pair": x},
        "in a list": lambda x: [x],
    }
    unwrap: dict[str, Callable[[Any], Any]] = {
        "root": lambda x: x,
        "in a dict": lambda x: x["pair"],
        "in a list": lambda x: x[0],
    }
    for source in (torch.tensor, lambda values: np.asarray(values, np.float32)):
        ours = unwrap[where](tj.to_device(wrap[where](make(source)), *args))
        assert pair_description(ours) == pair_description(theirs)
        assert all(isinstance(item, jax.Array) for item in ours)


def test_a_tuple_subclass_without_arrays_comes_back_as_it_is() -> None:
    pair = Pair("train", 3)
    assert tj.to_device({"pair": pair}, "cpu")["pair"] is pair


# --- NumPy scalars in a batch stay as they are, as torch's batch moves leave them ----------


def torch_batch_move(batch: dict[str, Any], *args: Any) -> dict[str, Any]:
    """How torch code moves a batch: ``.to`` what is a tensor, keep the rest."""
    return {k: v.to(*args) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


@pytest.mark.parametrize("scalar", [np.float32(0.5), np.int64(7), np.bool_(True)], ids=repr)
@pytest.mark.parametrize("args", [("cpu",), ("cpu", torch.float16), (torch.float16,)], ids=str)
def test_a_numpy_scalar_in_a_batch_is_left_as_torch_leaves_it(scalar: Any, args: Any) -> None:
    theirs = torch_batch_move({"x": torch.ones(2), "lr": scalar}, *args)
    ours = tj.to_device({"x": np.ones(2, np.float32), "lr": scalar}, *args)
    assert ours["lr"] is theirs["lr"] is scalar
    assert isinstance(ours["x"], jax.Array)
    assert str(ours["x"].dtype) == str(theirs["x"].dtype).removeprefix("torch.")
    with warnings.catch_warnings():  # np.int64 narrows (warned once per process)
        warnings.simplefilter("ignore", tj.DtypeNarrowingWarning)
        alone = tj.to_device(scalar, "cpu")  # a lone number is the array asked for
    assert isinstance(alone, jax.Array) and alone.shape == ()


# --- 9. calls torch's .to refuses are refused, with the library's errors -------------------

OTHER = {"torch": torch.zeros(1, dtype=torch.float16), "tj": jnp.zeros(1, jnp.float16)}
REFUSED_CALLS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "to(other, dtype)": (
        lambda t: t.to(OTHER["torch"], torch.float16),
        lambda x: tj.to_device(x, OTHER["tj"], torch.float16),
    ),
    "to(dtype, 1)": (lambda t: t.to(torch.float16, 1), lambda x: tj.to_device(x, jnp.float16, 1)),
    'copy="yes"': (lambda t: t.to("cpu", copy="yes"), lambda x: tj.to_device(x, "cpu", copy="yes")),
    "copy=1": (lambda t: t.to("cpu", copy=1), lambda x: tj.to_device(x, "cpu", copy=1)),
    "copy=np.bool_": (
        lambda t: t.to("cpu", copy=np.bool_(True)),
        lambda x: tj.to_device(x, "cpu", copy=np.bool_(True)),
    ),
    "non_blocking=None": (
        lambda t: t.to("cpu", non_blocking=None),
        lambda x: tj.to_device(x, "cpu", non_blocking=None),
    ),
    "non_blocking=1 (dtype form)": (
        lambda t: t.to(torch.float16, non_blocking=1),
        lambda x: tj.to_device(x, torch.float16, non_blocking=1),
    ),
    "to(other=)": (
        lambda t: t.to(other=OTHER["torch"]),
        lambda x: tj.to_device(x, other=OTHER["tj"]),
    ),
    'to("float16")': (lambda t: t.to("float16"), lambda x: tj.to_device(x, "float16")),
    'to("bfloat16", copy=True)': (
        lambda t: t.to("bfloat16", copy=True),
        lambda x: tj.to_device(x, "bfloat16", copy=True),
    ),
}


@pytest.mark.parametrize("call", list(REFUSED_CALLS))
def test_calls_torch_refuses_are_refused_with_the_librarys_error(call: str) -> None:
    theirs, ours = REFUSED_CALLS[call]
    torch_outcome = run(lambda: theirs(torch.ones(2)))
    assert torch_outcome.error is not None  # torch refuses it
    for source in (torch.ones(2), np.ones(2, np.float32), jnp.ones(2)):
        outcome = run(lambda source=source: ours(source))
        assert_same_outcome(torch_outcome, outcome)
        assert "Fix:" in str(outcome.error)


def test_the_forms_torch_takes_still_work() -> None:
    x = np.ones(2, np.float32)
    assert tj.to_device(x, OTHER["tj"]).dtype == np.float16  # .to(other)
    assert tj.to_device(x, OTHER["tj"], False, True).dtype == np.float16  # + flags
    assert tj.to_device(x, jnp.float16, False, True).dtype == np.float16  # .to(dtype, nb, copy)
    assert tj.to_device(x, "cpu", "bfloat16").dtype == jnp.bfloat16  # a name as the dtype
    assert tj.to_device(x, dtype="float16").dtype == np.float16


@pytest.mark.parametrize("copy", [True, False])
def test_a_model_refuses_copy_as_module_to_does(copy: bool) -> None:
    """torch's Module.to refuses a copy argument at all, True or False (found by the
    fuzzer: copy=False was taken)."""
    from flax import nnx

    torch_outcome = run(lambda: torch.nn.Linear(2, 3).to("cpu", copy=copy))
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    outcome = run(lambda: tj.to_device(model, "cpu", copy=copy))
    assert_same_outcome(torch_outcome, outcome)
    assert "nnx.clone(model)" in str(outcome.error)
    batch = tj.to_device({"model": model}, "cpu", copy=True)  # inside a batch: moved in place
    assert batch["model"] is model


def test_load_file_takes_a_bytes_path_as_safe_open_does(tmp_path: Any) -> None:
    """safetensors' own load_file refuses bytes (TypeError); tj.safe_open and tj.load take
    them, so tj.load_file does too (it raised Python's raw 'endswith' TypeError)."""
    import safetensors.torch

    path = str(tmp_path / "w.safetensors")
    safetensors.torch.save_file({"w": torch.arange(3.0)}, path)
    theirs = safetensors.torch.load_file(path)
    ours = tj.load_file(os.fsencode(path))
    with tj.safe_open(os.fsencode(path), framework="flax") as opened:
        lazily = opened.get_tensor("w")
    assert np.asarray(ours["w"]).tolist() == theirs["w"].tolist() == lazily.tolist()


@pytest.mark.parametrize("number", [True, 3, 1.5, 2 + 1j], ids=repr)
def test_channels_last_refuses_a_bare_number_as_a_0d_tensor(number: Any) -> None:
    for memory_format in (torch.channels_last, torch.channels_last_3d):
        theirs = run(lambda fmt=memory_format: torch.tensor(number).to(memory_format=fmt))
        ours = run(lambda fmt=memory_format: tj.to_device(number, memory_format=fmt))
        assert_same_outcome(theirs, ours)


def test_a_complex_tensor_cast_to_real_is_a_copy_as_torchs() -> None:
    """Found by the fuzzer: the real part of a complex tensor is a view, and the cast
    shared it, so a later write to the tensor changed the result; torch's cast copies."""
    theirs_source = torch.tensor([1.5 + 2j])
    ours_source = torch.tensor([1.5 + 2j])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns once a process: maybe not here
        theirs = theirs_source.to(torch.float32)
    with pytest.warns(tj.ComplexCastWarning):
        ours = tj.to_device(ours_source, torch.float32)
    theirs_source[0] = 9
    ours_source[0] = 9
    assert np.asarray(ours).tolist() == theirs.tolist() == [1.5]


@pytest.mark.parametrize("dtype", [np.longdouble, np.clongdouble], ids=["float128", "complex256"])
def test_long_double_data_is_the_librarys_error_and_casts_on_the_host(dtype: Any) -> None:
    """torch.from_numpy refuses long double (TypeError); tj raised JAX's raw TypeError
    ("not a valid JAX array type") from every path (issue 36 item 9). It names the leaf
    and the host cast now, and casts it on the host when a dtype is asked."""
    host = np.arange(3).astype(dtype)
    if host.dtype.itemsize <= (16 if host.dtype.kind == "c" else 8):
        pytest.skip("long double is double on this platform")
    with pytest.raises(TypeError):
        torch.from_numpy(host)
    with pytest.raises(tj.ConversionError, match=rf"leaf \['w'\]: .*{host.dtype}.*Fix: cast"):
        tj.to_device({"w": host}, "cpu")
    with pytest.raises(tj.ConversionError, match=rf"{host.dtype} cannot be held"):
        tj.to_jax(host)
    cast = tj.to_device(host, "cpu", np.complex64 if host.dtype.kind == "c" else np.float32)
    np.testing.assert_array_equal(np.asarray(cast), np.arange(3))
