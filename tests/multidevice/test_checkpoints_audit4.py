"""PyTorch checkpoints onto a mesh, side by side with ``torch.load`` (fourth audit).

``tj.load(path, map_location=<mesh, sharding or ShardingRule>)`` must give back what
``torch.load(path, weights_only=True)`` gives, with each tensor a global array: the same
containers (types, attributes such as a state dict's ``_metadata``, shared objects,
cycles, nesting deeper than the recursion limit, a top-level list or tensor), and the
same tensors a load onto one device makes (sparse dense, quantized dequantized); a
tensor JAX cannot hold is the library's error naming the file and its place.
"""

from __future__ import annotations

import io
import sys
import warnings
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import torch2jax_device as tj
from tests.support.checkpoints import check_like

torch = pytest.importorskip("torch")

CPUS = jax.devices("cpu")[:4]
LINE = Mesh(np.array(CPUS), ("x",))
REPLICATED = NamedSharding(LINE, P())


def _saved(tmp_path: Path, obj: Any, name: str = "model.pt") -> Path:
    path = tmp_path / name
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))  # torch.save pickles recursively
    try:
        torch.save(obj, path)
    finally:
        sys.setrecursionlimit(limit)
    return path


def _on_the_mesh(ours: Any, theirs: Any, path: str) -> None:
    """A global array of the tensor's values on the mesh."""
    assert isinstance(ours, jax.Array), path
    assert ours.sharding.mesh == LINE, path
    np.testing.assert_array_equal(np.asarray(ours), theirs.numpy(), err_msg=path)


def _check_like(ours: Any, theirs: Any) -> None:
    check_like(ours, theirs, _on_the_mesh)


def test_a_state_dict_keeps_its_type_and_metadata(tmp_path: Path) -> None:
    state = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4)).state_dict()
    path = _saved(tmp_path, state)
    theirs = torch.load(path, weights_only=True)
    ours = tj.load(path, map_location=tj.ShardingRule(LINE, {"0.weight": P("x", None)}))
    _check_like(ours, theirs)
    assert ours._metadata == theirs._metadata  # BatchNorm/LayerNorm versions, as torch
    assert ours["0.weight"].sharding.spec == P("x", None)


@pytest.mark.parametrize(
    "top",
    ["list", "tensor", "tuple"],
)
def test_a_checkpoint_that_is_not_a_dict_loads_as_torch_gives_it(tmp_path: Path, top: str) -> None:
    tensors = [torch.arange(8.0), torch.ones(4, 2)]
    obj = {"list": tensors, "tensor": tensors[0], "tuple": tuple(tensors)}[top]
    path = _saved(tmp_path, obj)
    _check_like(tj.load(path, map_location=LINE), torch.load(path, weights_only=True))


def test_shared_objects_cycles_and_deep_nesting_as_torch(tmp_path: Path) -> None:
    weight = torch.arange(8.0)
    loop: list[Any] = [weight]
    loop.append(loop)
    shared = [1, 2]
    deep: Any = weight
    for _ in range(3000):  # deeper than Python's recursion limit
        deep = [deep]
    path = _saved(tmp_path, {"loop": loop, "a": shared, "b": shared, "deep": deep})
    theirs = torch.load(path, weights_only=True)
    ours = tj.load(path, map_location=REPLICATED)
    assert theirs["loop"][1] is theirs["loop"] and ours["loop"][1] is ours["loop"]
    assert theirs["a"] is theirs["b"] and ours["a"] is ours["b"]
    leaf = ours["deep"]
    for _ in range(3000):
        leaf = leaf[0]
    assert leaf is ours["loop"][0]  # one tensor, one array, wherever it is held
    np.testing.assert_array_equal(np.asarray(leaf), weight.numpy())


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated:UserWarning")  # torch's own
def test_sparse_quantized_and_conjugate_tensors_load_as_onto_one_device(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's sparse-invariants notice
        tensors = {
            "sparse": torch.eye(4).to_sparse(),
            "quantized": torch.quantize_per_tensor(torch.arange(4.0), 0.5, 0, torch.qint8),
            "conjugate": torch.tensor([1 + 2j, 3 - 1j, 0j, 1j]).conj(),
        }
    path = _saved(tmp_path, tensors)
    ours = tj.load(path, map_location=LINE)
    one_device = tj.load(path, map_location="cpu")
    for name, tensor in tensors.items():
        expected = tensor.to_dense() if name == "sparse" else tensor
        expected = expected.dequantize() if name == "quantized" else expected.resolve_conj()
        np.testing.assert_array_equal(np.asarray(ours[name]), expected.numpy(), err_msg=name)
        np.testing.assert_array_equal(np.asarray(ours[name]), np.asarray(one_device[name]))
        assert ours[name].sharding == REPLICATED, name


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("meta", r"meta tensor \(shape \(4,\), torch\.float32\) with no data"),
        ("bits8", r"its dtype, torch\.bits8, has no JAX dtype"),
        ("complex32", r"its dtype, torch\.complex32, has no JAX dtype"),
    ],
)
def test_a_tensor_jax_cannot_hold_is_named_with_its_file_and_place(
    tmp_path: Path, name: str, reason: str
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: ComplexHalf is experimental
        tensor = {
            "meta": torch.empty(4, device="meta"),
            "bits8": torch.zeros(4, dtype=torch.uint8).view(torch.bits8),
            "complex32": torch.zeros(4, dtype=torch.complex32),
        }[name]
    path = _saved(tmp_path, {"model": [1, {"weights": tensor}]})
    assert torch.load(path, weights_only=True)["model"][1]["weights"].dtype == tensor.dtype
    with pytest.raises(tj.CheckpointError, match=reason) as caught:
        tj.load(path, map_location=LINE)
    message = str(caught.value)
    assert message.startswith(f"{str(path)!r}: the tensor at ['model'][1]['weights'] cannot")
    assert message.count("Fix:") == 1


def test_a_warning_made_an_error_passes_through_as_onto_one_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _saved(tmp_path, {"w": torch.ones(4)})
    load = torch.load

    def warning_load(*args: Any, **kwargs: Any) -> Any:  # as torch warns of TypedStorage
        warnings.warn("a warning of torch.load's", UserWarning, stacklevel=2)
        return load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", warning_load)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        for target in ("cpu", LINE):  # the caller's filters decide, on one device or many
            with pytest.raises(UserWarning, match=r"a warning of torch\.load's"):
                tj.load(path, map_location=target)


def test_a_file_object_loads_onto_a_mesh_as_torch_reads_it(tmp_path: Path) -> None:
    path = _saved(tmp_path, {"w": torch.arange(8.0), "step": 3})
    with open(path, "rb") as file:
        theirs = torch.load(file, weights_only=True)
    with open(path, "rb") as file:  # a mesh is callable (a context manager), not torch's
        ours = tj.load(file, map_location=tj.ShardingRule(LINE, {"w": P("x")}))
    _check_like(ours, theirs)
    assert ours["w"].sharding.spec == P("x")
    buffer = io.BytesIO(b"junk" + path.read_bytes())
    buffer.seek(4)  # read from where it is, as torch.load reads it
    _check_like(tj.load(buffer, map_location=LINE), theirs)


def test_encoding_reaches_torchs_unpickler_onto_a_mesh(tmp_path: Path) -> None:
    path = _saved(tmp_path, {"w": torch.ones(4), "step": 3})
    with pytest.warns(UserWarning, match="pickle_load_args only works"):  # torch's own
        assert torch.load(path, weights_only=True, encoding="latin1")["step"] == 3
    for target in ("cpu", LINE):
        with pytest.warns(UserWarning, match="pickle_load_args only works"):
            assert tj.load(path, map_location=target, encoding="latin1")["step"] == 3


def test_mmap_that_torch_refuses_is_refused_onto_a_mesh_too(tmp_path: Path) -> None:
    legacy = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(4)}, legacy, _use_new_zipfile_serialization=False)
    with pytest.raises(RuntimeError, match="mmap"):
        torch.load(legacy, mmap=True, weights_only=True)
    zipped = _saved(tmp_path, {"w": torch.ones(4)})
    with open(zipped, "rb") as file, pytest.raises(ValueError, match="mmap"):
        torch.load(file, mmap=True, weights_only=True)
    for target in ("cpu", LINE):  # the same refusals, on one device or many
        with pytest.raises(tj.UnsupportedOperationError, match=r"legacy .*cannot be memory-mapped"):
            tj.load(legacy, map_location=target, mmap=True)
        with open(zipped, "rb") as file, pytest.raises(tj.CheckpointError, match="mmap=True"):
            tj.load(file, map_location=target, mmap=True)


def test_torchs_own_error_on_a_tensor_is_the_librarys_onto_a_mesh_as_onto_one_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tensor torch itself fails to make dense (``to_dense()``, ``dequantize()``
    raising): onto one device the error named the file and the tensor, onto a mesh
    torch's raw ``RuntimeError`` escaped."""
    from torch2jax_device._src.checkpoints import pickled

    def failing(self: Any, tensor: Any) -> Any:
        raise RuntimeError("to_dense(): invalid sparse tensor")

    monkeypatch.setattr(pickled.HostTensors, "__call__", failing)
    path = _saved(tmp_path, {"w": torch.ones(8)})
    for target in (LINE, "cpu"):
        with pytest.raises(
            tj.CheckpointError, match=r"\['w'\] cannot be loaded: .*RuntimeError: to_dense"
        ):
            tj.load(path, map_location=target)
