"""The audit's leftovers, side by side with torch and safetensors (1 device).

Each test runs the PyTorch (or safetensors) idiom as the oracle and the
torch2jax_device port, and fails on the library as it was before the fix:

- ``tj.Parameter(...).size()`` raised Python's raw ``'int' object is not callable``
  where ``Parameter.size()`` gives the shape and ``size(dim)`` one length;
- ``tj.to_device`` / ``tj.to_jax`` of NumPy data in an ml_dtypes kind JAX names but
  cannot transfer (float6, complex32) raised JAX's raw errors, and so did asking for one
  as ``dtype=``;
- ``tj.save_file`` with a name or a metadata entry that is not a string raised a
  ``ValueError`` where ``safetensors.torch.save_file`` raises ``TypeError``;
- ``get_slice(name)[[]]``: safetensors reads the empty selection, the library refused it
  (other list indexes: both refuse).
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy
import safetensors.torch
import torch

import torch2jax_device as tj
from torch2jax_device._src import dtypes as _dtypes

# --- Parameter.size -----------------------------------------------------------------------


SHAPES = [(2, 3), (4,), (2, 1, 3), ()]


def outcome(call: Any, *args: Any) -> tuple[str, Any]:
    """What ``call(*args)`` gives: ``("value", result)`` or ``("raises", the builtin class)``."""
    try:
        return "value", call(*args)
    except (IndexError, TypeError) as error:
        return "raises", IndexError if isinstance(error, IndexError) else TypeError


@pytest.mark.parametrize("shape", SHAPES)
def test_parameter_size_called_is_torchs_size(shape: tuple[int, ...]) -> None:
    theirs = torch.nn.Parameter(torch.ones(shape))
    ours = tj.Parameter(jnp.ones(shape))
    assert ours.size() == theirs.size()
    assert ours.size(None) == theirs.size(None)
    for dim in range(-len(shape) - 2, len(shape) + 2):
        expected = outcome(theirs.size, dim)
        assert outcome(ours.size, dim) == expected, dim
        assert outcome(ours.size, np.int64(dim)) == expected, dim


#: A ``str`` dim is a dimension name to torch: 2.13 refuses it with ``TypeError`` on an
#: unnamed tensor, 2.11 with ``RuntimeError`` (its named-dimension lookup); tj's error is
#: both (``DimensionNameError``), asked of the installed torch, not its version.


@pytest.mark.parametrize("dim", [1.0, "0", True])
def test_parameter_size_of_a_non_int_dim_raises_torchs_type_error(dim: Any) -> None:
    try:
        torch.nn.Parameter(torch.ones(2, 3)).size(dim)
    except (TypeError, RuntimeError) as error:
        theirs: BaseException = error
    else:
        pytest.fail(f"torch {torch.__version__} took size({dim!r})")
    with pytest.raises(tj.ArgumentTypeError, match="argument 'dim' must be int") as ours:
        tj.Parameter(jnp.ones((2, 3))).size(dim)
    if isinstance(dim, str):  # either torch's class: 2.11's RuntimeError, 2.13's TypeError
        assert isinstance(ours.value, TypeError) and isinstance(ours.value, RuntimeError)
    assert isinstance(ours.value, type(theirs)), f"torch raised {type(theirs).__name__}"


def test_parameter_size_out_of_range_names_the_range_as_torch_does() -> None:
    with pytest.raises(IndexError) as theirs:
        torch.nn.Parameter(torch.ones(2, 3)).size(2)
    with pytest.raises(tj.InvalidIndexError) as ours:
        tj.Parameter(jnp.ones((2, 3))).size(2)
    assert str(ours.value) == str(theirs.value)


def test_parameter_size_read_as_a_value_stays_jaxs_element_count() -> None:
    array = jnp.ones((2, 3))
    size = tj.Parameter(array).size
    assert size == array.size == torch.ones(2, 3).numel()
    assert isinstance(size, int) and size * 2 == 12
    params = [tj.Parameter(jnp.ones((2, 3))), tj.Parameter(jnp.ones(4))]
    assert sum(p.size for p in params) == sum(p.numel() for p in params) == 10


# --- ml_dtypes kinds JAX cannot transfer ------------------------------------------------


ML_KINDS = [
    "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn", "int2", "uint2", "int4", "uint4",
    "float8_e4m3fn", "float8_e5m2", "float8_e3m4", "float8_e4m3", "float8_e8m0fnu",
    "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz", "bfloat16", "complex32",
    "bcomplex32",
]  # fmt: skip
KINDS = [name for name in ML_KINDS if hasattr(ml_dtypes, name)]


def jax_runtime_takes(dtype: np.dtype[Any]) -> bool:
    """The oracle: whether ``jnp.asarray`` takes NumPy data of ``dtype`` (any error: no)."""
    try:
        jnp.asarray(np.zeros(2, dtype))
    except Exception:  # whatever JAX raises
        return False
    return True


@pytest.mark.parametrize("name", KINDS)
def test_ml_dtypes_move_or_raise_the_librarys_error(name: str) -> None:
    dtype = np.dtype(getattr(ml_dtypes, name))
    batch = {"w": [np.zeros(2, dtype)]}
    if jax_runtime_takes(dtype):
        assert tj.to_device(batch, "cpu")["w"][0].dtype == dtype
        assert tj.to_jax(batch["w"][0]).dtype == dtype
        assert tj.to_device(np.zeros(2, np.float32), "cpu", dtype=dtype).dtype == dtype
        return
    with pytest.raises(tj.ConversionError, match=rf"leaf \['w'\]\[0\]: .*{name}.*Fix: cast it"):
        tj.to_device(batch, "cpu")
    with pytest.raises(tj.ConversionError, match=rf"{name} cannot be held"):
        tj.to_jax(batch["w"][0])
    with pytest.raises(tj.DTypeError, match=rf"dtype '{name}' cannot be held.*Fix"):
        tj.to_device(np.zeros(2, np.float32), "cpu", dtype=dtype)


def jax_cpu_casts(dtype: np.dtype[Any]) -> bool:
    """The oracle: whether JAX holds ``dtype`` and XLA's CPU compiler casts it to float32
    (jax 0.10 holds no float6; jax 0.11.2 holds it, and its compiler fails with "Invalid
    bitcast i6 to i8"), asked of the installed JAX rather than read from its version."""
    try:
        jnp.asarray(np.zeros(2, dtype), device=jax.devices("cpu")[0]).astype(jnp.float32)
    except Exception:  # whatever JAX raises
        return False
    return True


@pytest.mark.parametrize("name", ["float6_e2m3fn", "float6_e3m2fn"])
@pytest.mark.parametrize("device", ["cpu", None])
def test_a_dtype_casts_float6_data_on_the_host_as_before(name: str, device: Any) -> None:
    """Asking for a dtype JAX holds still works, in every form: NumPy data is cast on the
    host before the transfer (where jax 0.11.2's CPU compiler cannot cast float6)."""
    host = np.arange(-3, 4).astype(getattr(ml_dtypes, name))
    expected = host.astype(np.float32)
    for moved in (
        tj.to_device({"w": host}, device, dtype=jnp.float32)["w"],
        tj.to_device(host, device, dtype=jnp.float32),
        tj.to_device(host, device, jnp.bfloat16),
    ):
        np.testing.assert_array_equal(np.asarray(moved, np.float32), expected)


@pytest.mark.parametrize("name", ["float6_e2m3fn", "float6_e3m2fn"])
def test_a_float6_array_the_compiler_cannot_cast_is_refused_with_the_fix(name: str) -> None:
    """A JAX array of float6 (jax 0.11 holds them) cast where XLA's compiler cannot cast
    it: the library's DTypeError naming the JAX version and the host cast, not XLA's raw
    INTERNAL error. Where the compiler casts it, the values; asked of the installed JAX."""
    dtype = np.dtype(getattr(ml_dtypes, name))
    if not jax_runtime_takes(dtype):
        pytest.skip(f"this JAX ({jax.__version__}) holds no {name} arrays")
    host = np.arange(-3, 4).astype(dtype)
    array = jnp.asarray(host, device=jax.devices("cpu")[0])
    if jax_cpu_casts(dtype):
        moved = tj.to_device(array, jnp.float32)
        np.testing.assert_array_equal(np.asarray(moved), host.astype(np.float32))
        return
    with pytest.raises(tj.DTypeError, match=rf"JAX {jax.__version__} holds {name}.*Fix: cast"):
        tj.to_device(array, jnp.float32)


def pinned_host() -> jax.sharding.Sharding:
    return jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0], memory_kind="pinned_host")


MOVES = {
    "pinned": lambda batch: tj.to_device(batch, pinned_host()),
    "pin_memory": tj.pin_memory,
    "prefetch": lambda batch: list(tj.prefetch_to_device([batch], "cpu")),
    "non_blocking": lambda batch: tj.to_device(batch, "cpu", non_blocking=True),
    "copy": lambda batch: tj.to_device(batch, "cpu", copy=True),
}


@pytest.mark.parametrize("move", list(MOVES))
def test_every_host_to_device_path_names_a_kind_jax_cannot_transfer(move: str) -> None:
    dtype = np.dtype(ml_dtypes.float6_e2m3fn)
    if jax_runtime_takes(dtype):
        pytest.skip("this JAX transfers float6")
    with pytest.raises(tj.ConversionError, match=r"leaf \['w'\]: .*float6_e2m3fn cannot be held"):
        MOVES[move]({"w": np.zeros(4, dtype)})


def test_the_question_of_a_kind_is_asked_of_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether JAX takes a kind is asked once, of the CPU device: on a GPU machine a first
    bfloat16 batch bound for the CPU must not start the GPU to find out."""
    asked: list[Any] = []
    put = jax.device_put

    def recording(value: Any, device: Any = None, **kwargs: Any) -> Any:
        asked.append(device)
        return put(value, device, **kwargs)

    monkeypatch.setattr(jax, "device_put", recording)
    _dtypes._moves_one_element.cache_clear()
    try:
        dtype = np.dtype(ml_dtypes.float6_e2m3fn)
        assert _dtypes.transfers(dtype) == jax_runtime_takes(dtype)
        assert _dtypes.transfers(dtype) == jax_runtime_takes(dtype)  # kept: asked once
    finally:
        _dtypes._moves_one_element.cache_clear()
    assert asked == [jax.devices("cpu")[0]]


# --- save_file's names and metadata ------------------------------------------------------


BAD_ARGUMENTS = [
    pytest.param({1: "w"}, None, "names must be strings", id="int-name"),
    pytest.param({("a",): "w"}, None, "names must be strings", id="tuple-name"),
    pytest.param({"w": "w"}, {1: "x"}, "metadata must map str to str", id="int-key"),
    pytest.param({"w": "w"}, {"x": 1}, "metadata must map str to str", id="int-value"),
    pytest.param({"w": "w"}, {"x": None}, "metadata must map str to str", id="none-value"),
    pytest.param({"w": "w"}, [("x", "y")], "metadata must map str to str", id="list"),
]


@pytest.mark.parametrize(("names", "metadata", "match"), BAD_ARGUMENTS)
@pytest.mark.parametrize("existing", [False, True])
def test_save_file_refuses_non_str_names_and_metadata_as_safetensors_does(
    tmp_path: pathlib.Path, names: dict[Any, str], metadata: Any, match: str, existing: bool
) -> None:
    theirs_path, ours_path = tmp_path / "theirs.safetensors", tmp_path / "ours.safetensors"
    if existing:
        for path in (theirs_path, ours_path):
            safetensors.numpy.save_file({"old": np.ones(2)}, str(path))
    before = {path: path.read_bytes() if existing else None for path in (theirs_path, ours_path)}
    with pytest.raises(TypeError) as theirs:
        safetensors.torch.save_file(
            {key: torch.zeros(2) for key in names}, str(theirs_path), metadata=metadata
        )
    with pytest.raises(tj.ArgumentTypeError, match=match) as ours:
        tj.save_file({key: np.zeros(2) for key in names}, ours_path, metadata=metadata)
    assert isinstance(ours.value, type(theirs.value))
    for path, content in before.items():
        assert (path.read_bytes() if path.exists() else None) == content
    assert sorted(os.listdir(tmp_path)) == sorted(p.name for p, c in before.items() if c)


# --- get_slice with list indexes ---------------------------------------------------------


@pytest.fixture
def stored(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "a.safetensors"
    safetensors.numpy.save_file({"a": np.arange(12, dtype=np.float32).reshape(3, 4)}, str(path))
    return path


@pytest.mark.parametrize(
    "index",
    [[], [0, 2], [[0, 2]], ([0, 2],), (slice(None), [1, 3]), (0, [1]), np.array([0, 2])],
    ids=repr,
)
def test_get_slice_takes_the_list_indexes_safetensors_takes(
    stored: pathlib.Path, index: Any
) -> None:
    with safetensors.safe_open(str(stored), "np") as theirs, tj.safe_open(stored) as ours:
        try:
            expected = theirs.get_slice("a")[index]
        except Exception:  # safetensors' SafetensorError: refused
            with pytest.raises(tj.InvalidIndexError, match="takes ints, slices"):
                ours.get_slice("a")[index]
            return
        got = ours.get_slice("a")[index]
        assert got.shape == expected.shape and got.dtype == expected.dtype
        np.testing.assert_array_equal(np.asarray(got), expected)


@pytest.mark.parametrize(
    ("value", "refused"), [(np.arange(3, dtype=np.float32), False), (np.array(3, np.float32), True)]
)
def test_get_slice_of_an_empty_list_by_rank_as_safetensors(
    tmp_path: pathlib.Path, value: np.ndarray[Any, Any], refused: bool
) -> None:
    path = tmp_path / "v.safetensors"
    safetensors.numpy.save_file({"v": value}, str(path))
    with safetensors.safe_open(str(path), "np") as theirs, tj.safe_open(path) as ours:
        if refused:
            with pytest.raises(safetensors.SafetensorError):
                theirs.get_slice("v")[[]]
            with pytest.raises(tj.InvalidIndexError, match="too many indices"):
                ours.get_slice("v")[[]]
            return
        expected = theirs.get_slice("v")[[]]
        got = ours.get_slice("v")[[]]
        assert got.shape == expected.shape == (0,) and got.dtype == expected.dtype
