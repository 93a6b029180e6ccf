"""Loading and saving checkpoints, side by side with ``torch.load`` and ``safetensors.torch``.

Torch is the oracle: each test runs the PyTorch idiom and its port on the same file and
compares placement, dtype and values of every tensor (and every non-tensor entry), or
the class of the error. A checkpoint "saved on cuda:0" is made on this CPU machine by
letting ``torch.save`` tag its storages ``cuda:0``, which is all a GPU save changes.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import safetensors
import safetensors.numpy
import safetensors.torch
import torch

import torch2jax_device as tj
from tests.support.checkpoints import nanogpt_checkpoint
from torch2jax_device import load, load_file, safe_open, save_file
from torch2jax_device._src.checkpoints.reader import Reader

from .harness import assert_same_outcome, run


def entries(tree: Any, prefix: str = "") -> Any:
    """A checkpoint as sorted ``(path, leaf)`` pairs, which the harness normalizes."""
    if isinstance(tree, dict):
        return sorted(
            (pair for key, value in tree.items() for pair in entries(value, f"{prefix}/{key}")),
            key=lambda pair: pair[0],
        )
    if isinstance(tree, (list, tuple)) and not isinstance(tree, torch.Size):
        return [pair for i, item in enumerate(tree) for pair in entries(item, f"{prefix}/{i}")]
    return [(prefix, tree)]


def compare(torch_fn: Callable[[], Any], tj_fn: Callable[[], Any]) -> None:
    assert_same_outcome(run(lambda: entries(torch_fn())), run(lambda: entries(tj_fn())))


TENSORS = {
    "bool": torch.tensor([True, False]),
    "u8": torch.arange(5, dtype=torch.uint8),
    "i8": torch.arange(-2, 2, dtype=torch.int8),
    "i16": torch.arange(6, dtype=torch.int16).reshape(2, 3),
    "u16": torch.arange(3).to(torch.uint16),
    "f16": torch.linspace(0, 1, 5, dtype=torch.float16),
    "bf16": torch.linspace(0, 1, 4, dtype=torch.bfloat16).reshape(2, 2),
    "i32": torch.arange(-1, 2, dtype=torch.int32),
    "u32": torch.arange(3).to(torch.uint32),
    "f32": torch.tensor(1.5),
    "f8_e4m3": torch.linspace(-2, 2, 5).to(torch.float8_e4m3fn),
    "f8_e5m2": torch.linspace(-2, 2, 5).to(torch.float8_e5m2),
    "f8_e8m0": torch.tensor([0.5, 2.0]).to(torch.float8_e8m0fnu),
    "empty": torch.zeros(0, 2),
}


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("weights") / "model.safetensors"
    safetensors.torch.save_file(TENSORS, str(path), metadata={"format": "pt"})
    return path


# ----------------------------------------------------------------- safetensors files


@pytest.mark.idiom("load-safetensors")
@pytest.mark.parametrize("device", ["cpu", None, 0, "cuda", "cuda:1", "meta", "bogus"])
def test_load_file_device(weights: Path, device: Any) -> None:
    compare(
        lambda: safetensors.torch.load_file(str(weights), device=device),
        lambda: load_file(weights, device=device),
    )


@pytest.mark.idiom("load-safetensors-default-device")
def test_load_file_ignores_the_default_device(weights: Path) -> None:
    def theirs() -> Any:
        with torch.device("meta"):  # any default: safetensors still loads onto the CPU
            return safetensors.torch.load_file(str(weights))

    def ours() -> Any:
        with tj.device("cpu"):
            return load_file(weights)

    compare(theirs, ours)
    torch.set_default_device("meta")
    tj.set_default_device("cpu")
    compare(lambda: safetensors.torch.load_file(str(weights)), lambda: load_file(weights))


@pytest.mark.idiom("load-safetensors-backend")
@pytest.mark.parametrize("backend", ["mmap", "pread"])
@pytest.mark.parametrize("read_first", [False, True], ids=["unread", "read"])
def test_a_file_rewritten_in_place_shows_through_mapped_loads_only(
    tmp_path: Path, backend: str, read_first: bool
) -> None:
    path = tmp_path / "model.safetensors"
    save_file({"w": torch.arange(16.0)}, path)  # aligned: tj maps it as torch does
    theirs = safetensors.torch.load_file(str(path), backend=backend)
    ours = load_file(path, backend=backend)
    if read_first:  # pages already read change too: the map shows the file's bytes
        assert theirs["w"].sum().item() == np.asarray(ours["w"]).sum() == 120.0
    with Reader(path) as reader:
        start = reader.tensors["w"].start
    descriptor = os.open(path, os.O_WRONLY)
    try:  # an in-place writer: same file, new bytes
        os.pwrite(descriptor, torch.full((16,), 7.0).numpy().tobytes(), start)
    finally:
        os.close(descriptor)
    compare(lambda: theirs, lambda: ours)
    expected = [7.0] * 16 if backend == "mmap" else list(range(16))
    assert np.asarray(ours["w"]).tolist() == expected


@pytest.mark.idiom("load-safetensors")
@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_writing_to_a_loaded_tensor_changes_a_private_copy_as_in_torch(
    tmp_path: Path, backend: str
) -> None:
    """Mixed code writes into the torch view of a loaded array (``tj.to_torch(w).add_(1)``);
    ``safetensors.torch`` maps copy-on-write, so the write never reaches the file, and
    neither may tj's (a read-only map would kill the process with SIGSEGV)."""
    path = tmp_path / "model.safetensors"
    save_file({"w": torch.arange(16.0)}, path)
    before = path.read_bytes()
    theirs = safetensors.torch.load_file(str(path), backend=backend)["w"]
    ours = tj.to_torch(load_file(path, backend=backend)["w"])
    for tensor in (theirs, ours):
        tensor.add_(1)
    assert ours.tolist() == theirs.tolist() == [float(n + 1) for n in range(16)]
    assert path.read_bytes() == before
    assert safetensors.torch.load_file(str(path))["w"].tolist() == list(map(float, range(16)))


@pytest.mark.idiom("safe-open-slice")
@pytest.mark.parametrize(
    "index",
    [
        (slice(0, 1),),
        (1,),
        (-1,),
        (slice(None), 2),
        (Ellipsis, 1),
        (slice(None, None, 2),),
        (slice(-1, None),),
        (slice(5, 10),),
        (None, slice(0, 1)),
        (2,),  # out of range
        (0, 0, 0),  # too many indices
        (slice(None, None, 0),),  # zero step
    ],
)
def test_get_slice(weights: Path, index: Any) -> None:
    def theirs() -> Any:
        with safetensors.safe_open(str(weights), framework="pt") as f:
            window = f.get_slice("i16")
            return window.get_shape(), window.get_dtype(), window[index]

    def ours() -> Any:
        with safe_open(weights) as f:
            window = f.get_slice("i16")
            return window.get_shape(), window.get_dtype(), window[index]

    assert_same_outcome(run(theirs), run(ours))


@pytest.mark.idiom("safe-open-slice")
def test_safe_open_keys_metadata_and_tensors(weights: Path) -> None:
    def read(f: Any) -> Any:
        return [f.keys(), f.metadata(), [f.get_tensor(name) for name in f.keys()]]

    def theirs() -> Any:
        with safetensors.safe_open(str(weights), framework="pt", device="cpu") as f:
            return read(f)

    def ours() -> Any:
        with safe_open(weights, device="cpu") as f:
            return read(f)

    assert_same_outcome(run(theirs), run(ours))


def write_raw(path: Path, header_order: list[str], tensors: dict[str, np.ndarray]) -> None:
    """A safetensors file whose data is laid out in ``tensors``' order and whose header
    lists the names in ``header_order``: safetensors' writer never makes one."""
    offsets, position = {}, 0
    for name, array in tensors.items():
        offsets[name] = [position, position + array.nbytes]
        position += array.nbytes
    header = {
        name: {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": offsets[name]}
        for name in header_order
    }
    text = json.dumps(header).encode()
    data = b"".join(array.tobytes() for array in tensors.values())
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)


@pytest.fixture(scope="module")
def reordered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Header order b, c, a; data (offset) order c, a, b; sorted order a, b, c."""
    path = tmp_path_factory.mktemp("order") / "order.safetensors"
    tensors = {
        name: np.full(size, size, np.float32) for name, size in [("c", 2), ("a", 3), ("b", 4)]
    }
    write_raw(path, ["b", "c", "a"], tensors)
    return path


@pytest.mark.idiom("load-safetensors")
def test_load_file_keeps_the_files_order_as_safetensors(reordered: Path) -> None:
    theirs = list(safetensors.torch.load_file(str(reordered)))
    assert theirs == ["c", "a", "b"]  # the data order: neither the header's nor sorted
    assert list(load_file(reordered)) == theirs
    assert list(load(reordered)) == theirs
    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[:1]), ("data",))
    assert list(load_file(reordered, device=mesh)) == theirs


@pytest.mark.idiom("safe-open-slice")
def test_safe_open_keys_offset_keys_and_get_tensors_as_safetensors(reordered: Path) -> None:
    def read(f: Any) -> Any:
        return [f.keys(), f.offset_keys(), list(f.get_tensors().items())]

    def theirs() -> Any:
        with safetensors.safe_open(str(reordered), framework="pt") as f:
            return read(f)

    def ours() -> Any:
        with safe_open(reordered, framework="flax") as f:
            return read(f)

    assert run(theirs).value[:2] == [["a", "b", "c"], ["c", "a", "b"]]
    assert_same_outcome(run(theirs), run(ours))


def test_tensors_at_one_offset_keep_the_headers_order(tmp_path: Path) -> None:
    """Empty tensors share an offset; safetensors orders them by hash, tj by the header."""
    path = tmp_path / "empties.safetensors"
    tensors = {"z": np.zeros(0, np.float32), "y": np.ones(2, np.float32)}
    header = {"y": None, "z": None, "m": None}
    tensors_in_file = {"m": np.zeros(0, np.float32), **tensors}
    write_raw(path, list(header), tensors_in_file)
    theirs = list(safetensors.torch.load_file(str(path)))
    assert theirs[-1] == "y" and sorted(theirs[:2]) == ["m", "z"]  # empties first
    assert list(load_file(path)) == ["z", "m", "y"]


@pytest.mark.idiom("save-safetensors")
@pytest.mark.parametrize("metadata", [None, {"format": "pt"}])
def test_save_file_writes_what_safetensors_reads_back_exactly(
    tmp_path: Path, metadata: dict[str, str] | None
) -> None:
    """Same tensors and metadata as safetensors' own file; the layout is aligned instead."""
    tensors = {**TENSORS, "block": torch.arange(64.0).reshape(8, 8), "row": torch.ones(16)}
    safetensors.torch.save_file(tensors, str(tmp_path / "theirs.safetensors"), metadata)
    save_file(tensors, tmp_path / "ours.safetensors", metadata)
    compare(
        lambda: safetensors.torch.load_file(tmp_path / "theirs.safetensors"),
        lambda: safetensors.torch.load_file(tmp_path / "ours.safetensors"),
    )
    for name in ("theirs", "ours"):
        with safetensors.safe_open(str(tmp_path / f"{name}.safetensors"), "pt") as f:
            assert f.metadata() == metadata
            for key, tensor in tensors.items():  # bit for bit
                stored = f.get_tensor(key).reshape(-1).view(torch.uint8)
                assert stored.tolist() == tensor.reshape(-1).view(torch.uint8).tolist(), key
    ours = tmp_path / "ours.safetensors"
    with Reader(ours) as reader:
        starts = {name: info.start for name, info in reader.tensors.items()}
    data_start = min(starts.values())
    assert data_start % 64 == 0 and ours.read_bytes()[8:data_start].rstrip(b" ").endswith(b"}")
    aligned = [name for name, tensor in tensors.items() if tensor.nbytes % 64 == 0]
    assert {"block", "row", "empty"} <= set(aligned)
    for name in aligned:
        assert starts[name] % 64 == 0, name
    largest = max(tensor.nbytes for name, tensor in tensors.items() if name not in aligned)
    assert any(starts[n] % 64 == 0 for n, t in tensors.items() if t.nbytes == largest)


def saved_file_states(directory: Path, save: Callable[[Path], None]) -> dict[str, Any]:
    """What a save leaves: modes kept or given, links followed or replaced."""
    directory.mkdir()
    existing = directory / "existing"
    save(existing)
    existing.chmod(0o600)
    save(existing)
    blob = directory / "blob"
    save(blob)
    blob.chmod(0o640)
    link = directory / "link"
    link.symlink_to("blob")
    save(link)
    previous = os.umask(0o027)
    try:
        save(directory / "new")
    finally:
        os.umask(previous)
    return {
        "existing": stat.S_IMODE(existing.stat().st_mode),
        "link": (link.is_symlink(), stat.S_IMODE(blob.stat().st_mode)),
        "new": stat.S_IMODE((directory / "new").stat().st_mode),
        "files": sorted(os.listdir(directory)),
    }


@pytest.mark.idiom("save-safetensors")
@pytest.mark.skipif(os.name != "posix", reason="POSIX modes and links")
def test_save_file_keeps_modes_and_follows_links_as_torch_save(tmp_path: Path) -> None:
    theirs = saved_file_states(tmp_path / "torch", lambda p: torch.save({"w": torch.ones(2)}, p))
    ours = saved_file_states(tmp_path / "tj", lambda p: save_file({"w": np.ones(2)}, p))
    assert ours == theirs


@pytest.mark.idiom("save-safetensors")
def test_save_file_round_trips_with_safetensors_torch_and_numpy(tmp_path: Path) -> None:
    arrays = {name: tj.to_jax(tensor) for name, tensor in TENSORS.items()}
    save_file(arrays, tmp_path / "from-jax.safetensors")
    compare(lambda: TENSORS, lambda: safetensors.torch.load_file(tmp_path / "from-jax.safetensors"))
    numpy_arrays = {"f32": np.arange(3, dtype=np.float32), "u16": np.arange(2, dtype=np.uint16)}
    save_file(numpy_arrays, tmp_path / "from-numpy.safetensors")
    back = safetensors.numpy.load_file(str(tmp_path / "from-numpy.safetensors"))
    assert {k: (v.dtype, v.tolist()) for k, v in back.items()} == {
        k: (v.dtype, v.tolist()) for k, v in numpy_arrays.items()
    }
    safetensors.numpy.save_file(numpy_arrays, str(tmp_path / "by-numpy.safetensors"))
    ours = load_file(tmp_path / "by-numpy.safetensors")
    assert {k: (v.dtype, np.asarray(v).tolist()) for k, v in ours.items()} == {
        k: (v.dtype, v.tolist()) for k, v in numpy_arrays.items()
    }


# ----------------------------------------------------------------- torch checkpoints


@pytest.fixture(scope="module")
def cpu_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ckpt") / "ckpt.pt"
    torch.save(nanogpt_checkpoint(), path)
    return path


@pytest.fixture(scope="module")
def cuda_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same checkpoint with every storage tagged ``cuda:0``, as a GPU save writes it."""
    path = tmp_path_factory.mktemp("ckpt") / "ckpt-cuda.pt"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        torch.save(nanogpt_checkpoint(), path)
    return path


def both(path: Path, **kwargs: Any) -> tuple[Callable[[], Any], Callable[[], Any]]:
    return lambda: torch.load(path, weights_only=True, **kwargs), lambda: load(path, **kwargs)


@pytest.mark.idiom("torch-load")
def test_load_puts_tensors_where_they_were_saved(
    cpu_checkpoint: Path, cuda_checkpoint: Path
) -> None:
    compare(*both(cpu_checkpoint))
    compare(*both(cuda_checkpoint))  # no CUDA here: both raise RuntimeError


@pytest.mark.idiom("torch-load")
def test_load_ignores_the_default_device(cpu_checkpoint: Path) -> None:
    def theirs() -> Any:
        with torch.device("meta"):
            return torch.load(cpu_checkpoint, weights_only=True)

    def ours() -> Any:
        with tj.device("cpu"):
            return load(cpu_checkpoint)

    compare(theirs, ours)


@pytest.mark.idiom("torch-load")
def test_load_refuses_what_weights_only_refuses(tmp_path: Path) -> None:
    path = tmp_path / "hostile.pt"
    torch.save({"w": torch.ones(1), "payload": Path("x")}, path)
    compare(*both(path))


@pytest.mark.idiom("torch-load-map-location")
@pytest.mark.parametrize(
    "map_location",
    [
        "cpu",
        torch.device("cpu"),
        "cuda",
        "cuda:1",
        torch.device("cuda", 0),
    ],
    ids=str,
)
def test_map_location_device(
    cpu_checkpoint: Path, cuda_checkpoint: Path, map_location: Any
) -> None:
    compare(*both(cpu_checkpoint, map_location=map_location))
    compare(*both(cuda_checkpoint, map_location=map_location))


@pytest.mark.idiom("torch-load-map-location")
def test_map_location_cpu_0_is_a_documented_difference(cpu_checkpoint: Path) -> None:
    """torch maps a ``torch.device`` to its string; no restorer accepts ``"cpu:0"``."""
    with pytest.raises(RuntimeError, match="don't know how to restore data location"):
        torch.load(cpu_checkpoint, map_location=torch.device("cpu", 0), weights_only=True)
    loaded = load(cpu_checkpoint, map_location=torch.device("cpu", 0))
    assert loaded["model"]["0.weight"].devices() == {tj.resolve("cpu:0")}


@pytest.mark.idiom("torch-load-map-location")
@pytest.mark.parametrize("map_location", [tj.device("cpu"), jax.local_devices(backend="cpu")[0]])
def test_map_location_tj_and_jax_devices(cuda_checkpoint: Path, map_location: Any) -> None:
    compare(
        lambda: torch.load(cuda_checkpoint, map_location="cpu", weights_only=True),
        lambda: load(cuda_checkpoint, map_location=map_location),
    )


@pytest.mark.idiom("torch-load-map-location-dict")
@pytest.mark.parametrize(
    "map_location",
    [{"cuda:0": "cpu"}, {"cuda:1": "cpu"}, {"cpu": "cuda:0"}, {"cpu": "cpu"}, {}],
    ids=str,
)
def test_map_location_dict(cpu_checkpoint: Path, cuda_checkpoint: Path, map_location: Any) -> None:
    compare(*both(cpu_checkpoint, map_location=map_location))
    compare(*both(cuda_checkpoint, map_location=map_location))


def keep(storage: Any, location: str) -> Any:
    return storage


def default(storage: Any, location: str) -> Any:
    return None


def to_cpu(storage: Any, location: str) -> Any:
    return storage.cpu()


@pytest.mark.idiom("torch-load-map-location-callable")
@pytest.mark.parametrize("map_location", [keep, default, to_cpu], ids=lambda f: f.__name__)
def test_map_location_callable(
    cpu_checkpoint: Path, cuda_checkpoint: Path, map_location: Any
) -> None:
    compare(*both(cpu_checkpoint, map_location=map_location))
    compare(*both(cuda_checkpoint, map_location=map_location))


@pytest.mark.idiom("torch-load-map-location-callable")
def test_map_location_callable_sees_what_torch_passes(cuda_checkpoint: Path) -> None:
    def recorder(calls: list[tuple[str, str, int]]) -> Any:
        def record(storage: Any, location: str) -> Any:
            calls.append((location, storage.device.type, storage.nbytes()))
            return storage

        return record

    theirs: list[tuple[str, str, int]] = []
    ours: list[tuple[str, str, int]] = []
    torch.load(cuda_checkpoint, map_location=recorder(theirs), weights_only=True)
    load(cuda_checkpoint, map_location=recorder(ours))
    assert ours == theirs and theirs[0][:2] == ("cuda:0", "cpu")
