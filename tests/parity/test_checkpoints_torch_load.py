"""``tj.load`` side by side with ``torch.load``: the arguments it takes, ``map_location``
forms it refuses, object graphs and odd tensor kinds.

Torch is the oracle: each test loads the same bytes with ``torch.load(...,
weights_only=True)`` and with ``tj.load`` and compares placement, dtype, values, the
shape of the object graph (shared objects and cycles included) or the class of the
error. A checkpoint "saved on cuda:0" is made on this CPU machine by letting
``torch.save`` tag its storages ``cuda:0``.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import torch

import torch2jax_device as tj
from tests.support.checkpoints import (
    nanogpt_checkpoint,
    nested_lists,
    odd_tensors,
    refused_tensors,
    save_deep,
    saved_bytes,
)
from torch2jax_device import load
from torch2jax_device._src import dtypes as _dtypes

from .harness import assert_same_outcome, normalize, run


@pytest.fixture(autouse=True)
def _fresh_narrowing_warnings() -> None:
    """int64 narrowing warns once per process; each test here expects to see it."""
    _dtypes._warned.clear()


def graph(obj: Any) -> Any:
    """Plain data for a loaded checkpoint; a container or array met again is ``("ref", n)``.

    Tensors and arrays become the harness's normalized form, so both frameworks' results
    compare equal exactly when their values, placements, dtypes, containers (type,
    items, attributes) and sharing agree.
    """
    seen: dict[int, int] = {}

    def describe(node: Any) -> Any:
        if isinstance(node, (torch.Tensor, jax.Array)):
            if id(node) in seen:
                return ("ref", seen[id(node)])
            seen[id(node)] = len(seen)
            return normalize(node)
        if isinstance(node, (dict, list, tuple)) and not isinstance(node, torch.Size):
            if id(node) in seen:
                return ("ref", seen[id(node)])
            seen[id(node)] = len(seen)
            attributes = (
                {key: describe(value) for key, value in vars(node).items()}
                if hasattr(node, "__dict__")
                else {}
            )
            items = node.items() if isinstance(node, dict) else enumerate(node)
            return (type(node).__name__, [(k, describe(v)) for k, v in items], attributes)
        return node

    return describe(obj)


def both(data: bytes, **kwargs: Any) -> tuple[Callable[[], Any], Callable[[], Any]]:
    return (
        lambda: torch.load(io.BytesIO(data), weights_only=True, **kwargs),
        lambda: load(io.BytesIO(data), **kwargs),
    )


def compare(torch_fn: Callable[[], Any], tj_fn: Callable[[], Any]) -> None:
    assert_same_outcome(run(lambda: graph(torch_fn())), run(lambda: graph(tj_fn())))


@pytest.fixture(scope="module")
def cpu_data() -> bytes:
    return saved_bytes(nanogpt_checkpoint())


@pytest.fixture(scope="module")
def cuda_data() -> bytes:
    return saved_bytes(nanogpt_checkpoint(), location="cuda:0")


# ------------------------------------------------------------------- file objects


@pytest.mark.idiom("torch-load-file-object")
def test_file_objects(cpu_data: bytes, cuda_data: bytes, tmp_path: Path) -> None:
    compare(*both(cpu_data))
    compare(*both(cuda_data))  # no CUDA here: both raise RuntimeError
    compare(*both(cpu_data, map_location="cpu"))
    path = tmp_path / "ckpt.pt"
    path.write_bytes(cpu_data)
    with open(path, "rb") as theirs, open(path, "rb") as ours:
        compare(lambda: torch.load(theirs, weights_only=True), lambda: load(ours))


@pytest.mark.idiom("torch-load-file-object")
def test_file_objects_are_read_from_their_position(cpu_data: bytes) -> None:
    def at_offset() -> io.BytesIO:
        stream = io.BytesIO(b"prefix" + cpu_data)
        stream.seek(6)
        return stream

    compare(lambda: torch.load(at_offset(), weights_only=True), lambda: load(at_offset()))


@pytest.mark.idiom("torch-load-file-object")
@pytest.mark.parametrize(
    "data", [b"", b"not a checkpoint", b"PK\x03\x04 truncated zip"], ids=["empty", "text", "zip"]
)
def test_unreadable_streams_are_a_documented_difference(data: bytes) -> None:
    """Both refuse; torch raises EOFError, UnpicklingError or RuntimeError by the damage,
    tj always its CheckpointError (a ValueError) naming the file."""
    theirs, ours = both(data)
    assert run(theirs).error is not None
    with pytest.raises(tj.CheckpointError, match="the BytesIO object is not a readable"):
        ours()


# ------------------------------------------------------------------- weights_only


@pytest.mark.idiom("torch-load-weights-only")
@pytest.mark.parametrize("weights_only", [True, None])
def test_weights_only(cpu_data: bytes, weights_only: bool | None) -> None:
    compare(
        lambda: torch.load(io.BytesIO(cpu_data), weights_only=weights_only),
        lambda: load(io.BytesIO(cpu_data), weights_only=weights_only),
    )


@dataclasses.dataclass
class Trusted:
    lr: float


@pytest.mark.idiom("torch-load-weights-only")
def test_weights_only_false_is_a_documented_difference(tmp_path: Path) -> None:
    """torch unpickles anything with ``weights_only=False``; tj refuses, and allowlisting
    the class (what its message says) loads it under both."""
    data = saved_bytes({"w": torch.ones(2), "opt": Trusted(0.1)})
    assert torch.load(io.BytesIO(data), weights_only=False)["opt"] == Trusted(0.1)
    with pytest.raises(tj.UnsupportedOperationError, match="add_safe_globals"):
        load(io.BytesIO(data), weights_only=False)
    compare(*both(data))  # both refuse the class
    with torch.serialization.safe_globals([Trusted]):
        compare(*both(data))


# --------------------------------------------------------------------------- mmap


@pytest.mark.idiom("torch-load-mmap")
def test_mmap(cpu_data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    path.write_bytes(cpu_data)
    compare(
        lambda: torch.load(path, weights_only=True, mmap=True),
        lambda: load(path, mmap=True),
    )


@pytest.mark.idiom("torch-load-mmap")
def test_mmap_needs_a_path_and_a_zip_file(cpu_data: bytes, tmp_path: Path) -> None:
    compare(*both(cpu_data, mmap=True))  # a file object: ValueError in both
    legacy = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(2)}, legacy, _use_new_zipfile_serialization=False)
    compare(
        lambda: torch.load(legacy, weights_only=True, mmap=True),
        lambda: load(legacy, mmap=True),  # RuntimeError in both
    )


# ------------------------------------------------------------ map_location forms


def to_text(storage: Any, location: str) -> Any:
    return "cpu"


def to_device(storage: Any, location: str) -> Any:
    return torch.device("cpu")


@pytest.mark.idiom("torch-load-map-location-invalid")
@pytest.mark.parametrize(
    "map_location",
    [
        0,
        1,
        True,
        1.5,
        b"cpu",
        ["cpu"],
        {"cuda:0": torch.device("cpu")},
        {"cuda:0": 0},
        {"cuda:0": b"cpu"},
        to_text,
        to_device,
        "bogus",
        "cuda:0:1",
    ],
    ids=str,
)
def test_map_location_forms_torch_refuses(cuda_data: bytes, map_location: Any) -> None:
    """On a checkpoint where torch must apply them, both raise the same builtin class."""
    theirs, ours = both(cuda_data, map_location=map_location)
    torch_outcome, tj_outcome = run(theirs), run(ours)
    assert torch_outcome.error is not None
    assert_same_outcome(torch_outcome, tj_outcome)


@pytest.mark.idiom("torch-load-map-location-invalid")
def test_map_location_is_checked_before_reading_a_documented_difference() -> None:
    """torch checks a ``map_location`` at the first tensor it places; tj at once."""
    data = saved_bytes({"step": 3})
    assert torch.load(io.BytesIO(data), weights_only=True, map_location=0) == {"step": 3}
    with pytest.raises(tj.DeviceTypeError):
        load(io.BytesIO(data), map_location=0)


# ------------------------------------------------------------------ object graphs


@pytest.mark.idiom("torch-load-state-dict-metadata")
def test_a_state_dict_with_metadata() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.LayerNorm(2))
    compare(*both(saved_bytes(model.state_dict())))


@pytest.mark.idiom("torch-load-state-dict-metadata")
def test_batchnorm_metadata_and_its_int64_counter() -> None:
    """Identical but for ``num_batches_tracked``: int64 becomes int32 without x64."""
    state = torch.nn.BatchNorm1d(2).state_dict()
    theirs = torch.load(io.BytesIO(saved_bytes(state)), weights_only=True)
    with pytest.warns(tj.DtypeNarrowingWarning, match="int64"):
        ours = load(io.BytesIO(saved_bytes(state)))
    assert ours._metadata == theirs._metadata and ours._metadata[""]["version"] == 2
    assert int(ours.pop("num_batches_tracked")) == int(theirs.pop("num_batches_tracked"))
    assert graph(ours) == graph(theirs)


@pytest.mark.idiom("torch-load-state-dict-metadata")
def test_cycles_and_shared_objects() -> None:
    weight = torch.arange(4.0)
    block: dict[str, Any] = {"w": weight, "tied": weight}
    looped: list[Any] = [block, weight]
    looped.append(looped)
    block["owner"] = looped
    compare(*both(saved_bytes({"a": block, "b": block, "loop": looped, "t": (weight, block)})))


@pytest.mark.idiom("torch-load-state-dict-metadata")
def test_recursive_tuples_are_refused_by_both() -> None:
    holder: list[Any] = []
    cycle = (holder, torch.ones(1))
    holder.append(cycle)
    compare(*both(saved_bytes({"t": cycle})))


@pytest.mark.idiom("torch-load-state-dict-metadata")
def test_nesting_3000_deep(tmp_path: Path) -> None:
    path = tmp_path / "deep.pt"
    save_deep({"deep": nested_lists(3000, torch.ones(2)), "w": torch.zeros(1)}, path)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # for graph(), which recurses; tj.load does not
    try:
        compare(lambda: torch.load(path, weights_only=True), lambda: load(path))
    finally:
        sys.setrecursionlimit(limit)


@pytest.mark.idiom("torch-load-state-dict-metadata")
def test_counters_and_ordered_dict_attributes() -> None:
    tagged = collections.OrderedDict(w=torch.ones(2))
    tagged.note = "kept"  # type: ignore[attr-defined]
    compare(*both(saved_bytes({"tagged": tagged, "counts": collections.Counter("aab")})))


# ------------------------------------------------------------------ tensor kinds


def _as_torch_would_compute(tensor: Any) -> Any:
    """What a torch user computes with: dense, dequantized, bits resolved."""
    if tensor.is_quantized:
        return tensor.dequantize()
    if tensor.layout != torch.strided:
        return tensor.to_dense()
    return tensor.resolve_conj().resolve_neg()


@pytest.mark.idiom("torch-load-sparse-quantized")
@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated:UserWarning")  # torch's own
# torch 2.11's own, loading a sparse tensor (seen on an H200); torch 2.13 does not warn.
@pytest.mark.filterwarnings("ignore:Sparse invariant checks are implicitly disabled:UserWarning")
@pytest.mark.parametrize("name", [name for name in odd_tensors() if name != "bf16"])
def test_sparse_quantized_and_view_tensors(name: str) -> None:
    data = saved_bytes({"x": [odd_tensors()[name]]})
    compare(
        lambda: _as_torch_would_compute(torch.load(io.BytesIO(data), weights_only=True)["x"][0]),
        lambda: load(io.BytesIO(data))["x"][0],
    )


@pytest.mark.idiom("torch-load-sparse-quantized")
def test_bfloat16_values() -> None:
    data = saved_bytes({"x": odd_tensors()["bf16"]})
    theirs = torch.load(io.BytesIO(data), weights_only=True)["x"]
    ours = load(io.BytesIO(data))["x"]
    assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(np.asarray(ours, np.float32), theirs.float().numpy())


@pytest.mark.idiom("torch-load-sparse-quantized")
@pytest.mark.parametrize("name", list(refused_tensors()))
def test_tensors_jax_cannot_hold_are_a_documented_difference(name: str) -> None:
    """torch returns them; tj raises its CheckpointError naming the place."""
    data = saved_bytes({"layer": {"w": refused_tensors()[name]}})
    torch.load(io.BytesIO(data), weights_only=True)
    with pytest.raises(tj.CheckpointError, match=r"the tensor at \['layer'\]\['w'\]"):
        load(io.BytesIO(data))
