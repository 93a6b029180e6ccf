"""Checkpoints side by side with torch 2.13 and safetensors (fourth audit).

Cases the other checkpoint tests do not cover: ``tj.load`` of ``.pt`` files holding
each kind of container, views, shared storages, strided and empty tensors and every
dtype torch saves; ``map_location`` strings torch cannot parse; safetensors files with
unusual names, metadata and zero-size tensors; ``save_file`` of views, strided,
conjugate and shared torch tensors; ``safe_open`` selections of empty tensors. Each is
checked against what ``torch.load`` / ``safetensors`` give for the same file.
"""

from __future__ import annotations

import collections
import warnings
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import safetensors
import safetensors.numpy

import torch2jax_device as tj
from tests.support.checkpoints import check_like

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

CPU = jax.devices("cpu")[0]


def _bytes(tensor: Any) -> bytes:
    """A torch tensor's values as raw bytes (any dtype, bool included)."""
    flat = tensor.detach().resolve_conj().resolve_neg().contiguous().reshape(-1)
    return bytes(flat.view(torch.uint8).numpy().tobytes())


def _on_the_cpu(ours: Any, theirs: Any, path: str) -> None:
    """An array of the tensor's values (its bytes) on the CPU."""
    assert isinstance(ours, jax.Array) and ours.devices() == {CPU}, path
    assert ours.shape == tuple(theirs.shape), path
    assert np.asarray(ours).tobytes() == _bytes(theirs), path


def _check_like(ours: Any, theirs: Any) -> None:
    check_like(ours, theirs, _on_the_cpu)


# ------------------------------------------------------------------ tj.load of .pt files

CONTAINERS = {
    "tuple": lambda: (torch.ones(2), torch.zeros(3)),
    "list": lambda: [torch.ones(2), 3, "x", None],
    "ordered dict": lambda: collections.OrderedDict(b=torch.ones(2), a=torch.zeros(1)),
    "nested": lambda: {"a": {"b": {"c": torch.ones(2)}}, "l": [{"x": (torch.ones(1), 2.5)}]},
    "bare tensor": lambda: torch.arange(6.0).reshape(2, 3),
}


@pytest.mark.parametrize("kind", list(CONTAINERS))
def test_containers_load_as_torch_gives_them(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "checkpoint.pt"
    torch.save(CONTAINERS[kind](), path)
    _check_like(tj.load(path), torch.load(path, weights_only=True))


def test_views_shared_storages_strided_empty_and_0_d_tensors_as_torch(tmp_path: Path) -> None:
    base = torch.arange(12.0).reshape(3, 4)
    saved = {
        "base": base,
        "again": base,  # the same tensor twice
        "row": base[1],  # a view at an offset
        "transposed": base.t(),
        "every_other": base[:, ::2],
        "reversed": torch.arange(5.0).flip(0),
        "expanded": torch.ones(1, 4).expand(3, 4),  # stride 0
        "scalar": torch.tensor(3.5),
        "empty": torch.empty(0),
        "empty_rows": torch.zeros(3, 0, dtype=torch.int8),
    }
    path = tmp_path / "views.pt"
    torch.save(saved, path)
    theirs = torch.load(path, weights_only=True)
    ours = tj.load(path)
    _check_like(ours, theirs)
    assert theirs["again"] is theirs["base"] and ours["again"] is ours["base"]


DTYPES = [
    "bool",
    "uint8",
    "int8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "float16",
    "bfloat16",
    "float32",
    "complex64",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
]


@pytest.mark.parametrize("name", DTYPES)
def test_every_dtype_jax_holds_loads_bit_exact(tmp_path: Path, name: str) -> None:
    dtype = getattr(torch, name)
    tensor = torch.tensor([0.0, 1.0, 2.0, 0.5, 3.0, 1.0]).to(dtype).reshape(2, 3)
    path = tmp_path / f"{name}.pt"
    torch.save({"t": tensor, "t_strided": tensor.t()}, path)
    loaded = tj.load(path)
    theirs = torch.load(path, weights_only=True)
    for key in ("t", "t_strided"):
        assert np.dtype(loaded[key].dtype).name == name, key
        assert np.asarray(loaded[key]).tobytes() == _bytes(theirs[key]), key


@pytest.mark.parametrize(
    ("name", "dtype"),
    [("complex32", "complex32"), ("bits8", "bits8"), ("float4", "float4_e2m1fn_x2")],
)
def test_a_dtype_jax_cannot_hold_is_refused_with_one_fix(
    tmp_path: Path, name: str, dtype: str
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: ComplexHalf is experimental
        raw = torch.zeros(4, dtype=torch.uint8)
        tensor = (
            raw.view(getattr(torch, dtype))
            if name != "complex32"
            else torch.zeros(2).to(torch.complex32)
        )
    path = tmp_path / f"{name}.pt"
    torch.save({"w": tensor}, path)
    assert torch.load(path, weights_only=True)["w"].dtype == tensor.dtype  # torch loads it
    with pytest.raises(tj.CheckpointError) as caught:
        tj.load(path)
    message = str(caught.value)
    assert message.startswith(f"{str(path)!r}: the tensor at ['w'] cannot be loaded: ")
    assert f"torch.{dtype}" in message
    assert message.count("Fix:") == 1 and "torch.load(path, weights_only=True)" in message
    assert "pass e.g." not in message  # advice for a dtype argument, not for a file


@pytest.mark.parametrize("location", ["CPU", " cpu", "cpu "])
def test_a_map_location_torch_cannot_parse_is_refused_as_torch_refuses(
    tmp_path: Path, location: str
) -> None:
    path = tmp_path / "model.pt"
    torch.save({"w": torch.ones(2)}, path)
    with pytest.raises(RuntimeError):
        torch.load(path, map_location=location, weights_only=True)
    with pytest.raises(tj.InvalidDeviceError) as caught:
        tj.load(path, map_location=location)
    assert location.strip() in str(caught.value)
    assert isinstance(caught.value, RuntimeError)  # caught where torch's error is


# ------------------------------------------------------------------ safetensors files

NAMES = {
    "": np.ones(2, np.float32),
    "a.b.c": np.zeros(3, np.int8),
    "é漢字": np.arange(4, dtype=np.int16),
    "with space": np.ones(1, np.uint8),
    "slash/and\\back": np.arange(2, dtype=np.float32),
    "nul\x00inside": np.ones(1, np.float32),
    "empty": np.zeros((0,), np.float32),
    "empty_middle": np.zeros((3, 0, 2), np.float32),
    "scalar": np.array(1.5, np.float32),
}
METADATA = {"format": "pt", "": "empty key", "ü": "ß", "json": '{"a": [1]}'}


def test_unusual_names_metadata_and_zero_size_tensors_as_safetensors(tmp_path: Path) -> None:
    path = tmp_path / "odd.safetensors"
    safetensors.numpy.save_file(NAMES, str(path), metadata=METADATA)
    expected = safetensors.numpy.load_file(str(path))
    with safetensors.safe_open(str(path), "numpy") as theirs:
        their_keys, their_metadata = list(theirs.keys()), theirs.metadata()
    loaded = tj.load_file(path)
    assert set(loaded) == set(expected)
    for name, values in expected.items():
        assert loaded[name].shape == values.shape, name
        np.testing.assert_array_equal(np.asarray(loaded[name]), values, err_msg=name)
    with tj.safe_open(path, "flax") as ours:
        assert list(ours.keys()) == their_keys
        assert ours.metadata() == their_metadata
        for name, values in expected.items():
            np.testing.assert_array_equal(np.asarray(ours.get_tensor(name)), values)
            assert ours.get_slice(name).get_shape() == list(values.shape)
    # tj writes the same names and metadata, and safetensors reads them back
    again = tmp_path / "again.safetensors"
    tj.save_file(loaded, again, metadata=METADATA)
    with safetensors.safe_open(str(again), "numpy") as theirs:
        assert sorted(theirs.keys()) == sorted(their_keys)
        assert theirs.metadata() == their_metadata
    for name, values in safetensors.numpy.load_file(str(again)).items():
        np.testing.assert_array_equal(values, expected[name], err_msg=name)


@pytest.mark.parametrize("name", [0, None, b"w", ("w",)])
def test_a_tensor_name_that_is_not_a_string_is_a_type_error_as_in_safetensors(
    tmp_path: Path, name: Any
) -> None:
    path = tmp_path / "w.safetensors"
    safetensors.numpy.save_file({"w": np.ones(2, np.float32)}, str(path))
    with safetensors.safe_open(str(path), "numpy") as theirs:
        with pytest.raises(TypeError):
            theirs.get_tensor(name)
        with pytest.raises(TypeError):
            theirs.get_slice(name)
    with tj.safe_open(path, "flax") as ours:
        with pytest.raises(tj.ArgumentTypeError, match=r"tensor names are strings.*keys"):
            ours.get_tensor(name)
        with pytest.raises(TypeError, match="tensor names are strings"):
            ours.get_slice(name)


@pytest.mark.parametrize(
    "index",
    [(), Ellipsis, slice(None), slice(0, 0), (slice(None), 1), (Ellipsis, slice(1, 3))],
)
def test_selections_of_an_empty_tensor_as_numpy_and_torch_select(
    tmp_path: Path, index: Any
) -> None:
    path = tmp_path / "empty.safetensors"
    safetensors.numpy.save_file({"e": np.zeros((0, 3), np.float32)}, str(path))
    whole = safetensors.numpy.load_file(str(path))["e"]
    with tj.safe_open(path, "flax") as f:
        selected = f.get_slice("e")[index]
    # safetensors 0.7 refuses most of these ("index 0 out of bounds for tensor dimension
    # #0 of size 0"); NumPy and torch select nothing, as tj does.
    assert selected.shape == whole[index].shape == tuple(torch.from_numpy(whole)[index].shape)
    assert selected.dtype == whole.dtype


# ------------------------------------------------------------------ save_file of torch tensors


def test_conjugate_and_negative_views_are_saved_with_their_values(tmp_path: Path) -> None:
    conjugate = torch.tensor([1 + 2j, 3 - 1j]).conj()  # a view with the conjugate bit
    negative = torch.tensor([1.0, -2.0])._neg_view()  # a view with the negative bit
    path = tmp_path / "bits.safetensors"
    tj.save_file({"conjugate": conjugate, "negative": negative}, path)
    read = safetensors_torch.load_file(str(path))
    # The tensors' values as torch computes with them (safetensors.torch 0.7 writes the
    # storage as it is, without the bit).
    assert torch.equal(read["conjugate"], conjugate.resolve_conj())
    assert torch.equal(read["negative"], negative.resolve_neg())


@pytest.mark.parametrize(
    "make",
    [
        lambda base: base.t(),
        lambda base: base[:, ::2],
        lambda base: torch.ones(1, 4).expand(3, 4),
    ],
    ids=["transposed", "strided", "expanded"],
)
def test_strided_tensors_safetensors_refuses_are_saved_contiguous(
    tmp_path: Path, make: Any
) -> None:
    tensor = make(torch.arange(12.0).reshape(3, 4))
    with pytest.raises(ValueError, match="non contiguous"):
        safetensors_torch.save_file({"t": tensor}, str(tmp_path / "theirs.safetensors"))
    path = tmp_path / "ours.safetensors"
    tj.save_file({"t": tensor}, path)
    assert torch.equal(safetensors_torch.load_file(str(path))["t"], tensor.contiguous())


def test_tensors_sharing_memory_are_written_in_full_a_documented_difference(
    tmp_path: Path,
) -> None:
    base = torch.arange(8.0)
    tensors = {"all": base, "head": base[:4]}
    with pytest.raises(RuntimeError, match="share memory"):
        safetensors_torch.save_file(tensors, str(tmp_path / "theirs.safetensors"))
    path = tmp_path / "ours.safetensors"
    tj.save_file(tensors, path)  # docs/known-differences-checkpoints.md
    read = safetensors_torch.load_file(str(path))
    for name, tensor in tensors.items():
        assert torch.equal(read[name], tensor), name


def test_a_packed_float4_tensor_safetensors_writes_is_refused_without_blaming_safetensors(
    tmp_path: Path,
) -> None:
    packed = torch.tensor([0x12, 0x34], dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    safetensors_torch.save_file({"w": packed}, str(tmp_path / "theirs.safetensors"))  # as F4
    with pytest.raises(tj.DTypeError) as caught:
        tj.save_file({"w": packed}, tmp_path / "ours.safetensors")
    message = str(caught.value)
    assert "tensor 'w' has dtype torch.float4_e2m1fn_x2, which save_file cannot write" in message
    assert "F4" in message and "cast it first" in message
    assert "safetensors cannot store" not in message  # it can: safetensors.torch wrote it
