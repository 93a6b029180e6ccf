"""Sharded checkpoint loads through pinned staging (issue 23): each shard piece by piece.

On a GPU, the part of a tensor each device of a mesh holds is read from the file
piece by piece straight into pooled pinned buffers and sent from them, so the host
never holds a part (let alone the tensor) whole. Here cpu:1..3 (or all four CPU
devices) play the accelerators, with pieces of 1 KiB; every test checks the values,
dtypes and shard placement against real safetensors / torch as the oracle, and that
the pinned route was taken: how many parts went in pieces, and that no read was
larger than one piece.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import torch2jax_device as tj
from tests.support.arrays import patterned
from torch2jax_device._src import host_staging, pinned_memory
from torch2jax_device._src.checkpoints.progress import Progress
from torch2jax_device._src.checkpoints.reader import Reader

CPUS = jax.devices("cpu")[:4]
HOST = CPUS[0]
PIECE = 1024
LINE = Mesh(np.array(CPUS), ("x",))
SQUARE = Mesh(np.array(CPUS).reshape(2, 2), ("a", "b"))


class Route:
    """Counts the parts sent in pinned pieces, and the bytes of every read from a file."""

    def __init__(self, patch: pytest.MonkeyPatch) -> None:
        self.streamed: list[tuple[tuple[int, ...], int]] = []  # (part shape, devices)
        self.piece_reads: list[int] = []  # bytes of each read into a staging buffer
        self.whole_reads: list[int] = []  # bytes of each part read whole
        send, into = host_staging.send_in_pieces, Reader.read_selection_into
        selection, tensor = Reader.read_selection, Reader.read_tensor

        def counting_send(shape: Any, dtype: Any, fill: Any, devices: Any) -> Any:
            self.streamed.append((tuple(shape), len(devices)))
            return send(shape, dtype, fill, devices)

        def counting_into(reader: Reader, info: Any, index: Any, out: Any) -> None:
            self.piece_reads.append(out.nbytes)
            into(reader, info, index, out)

        def counting_selection(reader: Reader, info: Any, index: Any) -> Any:
            host = selection(reader, info, index)
            self.whole_reads.append(host.nbytes)
            return host

        def counting_tensor(reader: Reader, info: Any, dtype: Any) -> Any:
            host = tensor(reader, info, dtype)
            self.whole_reads.append(host.nbytes)
            return host

        patch.setattr(host_staging, "send_in_pieces", counting_send)
        patch.setattr(Reader, "read_selection_into", counting_into)
        patch.setattr(Reader, "read_selection", counting_selection)
        patch.setattr(Reader, "read_tensor", counting_tensor)


@pytest.fixture(params=["cpu:1-3", "all"])
def route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Route]:
    """cpu:1..3 (or every CPU device) copy host data through pinned pieces of 1 KiB."""
    if request.param == "all":
        monkeypatch.setattr(host_staging, "routes_through_pinned", lambda device: True)
    else:
        monkeypatch.setattr(host_staging, "routes_through_pinned", lambda device: device != HOST)
    monkeypatch.setattr(host_staging, "PIECE_BYTES", PIECE)
    monkeypatch.setattr(host_staging, "PINNED_PIECES_FROM", 1)
    host_staging.POOL.clear()  # buffers of another piece size must not be reused
    yield Route(monkeypatch)
    host_staging.POOL.clear()


# name: (values, spec over LINE). Sizes are not multiples of the 1 KiB piece.
TENSORS = {
    "embed": (patterned((4 * 37, 77), ml_dtypes.bfloat16), P("x", None)),  # rows: 5.6 kB parts
    "proj": (patterned((65, 4 * 33), np.float32), P(None, "x")),  # columns: strided parts
    "fp8": (patterned((8, 129), ml_dtypes.float8_e4m3fn), P("x")),
    "ids": (patterned((7001,), np.int32), P()),  # replicated: one part for every device
    "cube": (patterned((4, 3, 101), np.float16), P("x")),
    "scalar": (np.array(2.5, np.float32), P()),
}


def _check(loaded: dict[str, jax.Array], path: Path, specs: dict[str, Any], mesh: Mesh) -> None:
    """Values and dtypes as safetensors.torch reads them (it has every float8 type, where
    safetensors.numpy has none); every shard where the spec says."""
    import torch

    oracle = safetensors.torch.load_file(str(path))
    assert set(loaded) == set(oracle)
    for name, tensor in oracle.items():
        array = loaded[name]
        assert tensor.dtype == getattr(torch, np.dtype(array.dtype).name), name
        assert array.shape == tuple(tensor.shape), name
        raw = tensor.reshape(-1).view(torch.uint8).numpy().tobytes()
        expected = np.frombuffer(raw, array.dtype)
        expected = expected.reshape(array.shape)
        assert array.sharding.is_equivalent_to(NamedSharding(mesh, specs[name]), array.ndim)
        assert np.asarray(array).tobytes() == expected.tobytes(), name
        for shard in array.addressable_shards:
            assert shard.data.devices() == {shard.device}, name
            assert np.asarray(shard.data).tobytes() == expected[shard.index].tobytes(), name


def test_a_sharded_load_reads_each_part_piece_by_piece_into_pinned_buffers(
    tmp_path: Path, route: Route
) -> None:
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file({name: v for name, (v, _) in TENSORS.items()}, str(path))
    specs = {name: spec for name, (_, spec) in TENSORS.items()}
    loaded = tj.load_file(path, device=tj.ShardingRule(LINE, specs))
    _check(loaded, path, specs, LINE)
    sharded = [name for name, spec in specs.items() if spec != P()]
    replicated = [name for name, spec in specs.items() if spec == P()]
    if host_staging.routes_through_pinned(HOST):  # every part read in pieces, once
        assert sorted(route.streamed) == sorted(
            [(part, 1) for name in sharded for part in [_part(name)] * 4]
            + [(TENSORS[name][0].shape, 4) for name in replicated]
        )
        assert route.whole_reads == []
    else:  # the host's parts are read whole (its arrays keep them), the others in pieces
        assert sorted(route.streamed) == sorted(
            [(part, 1) for name in sharded for part in [_part(name)] * 3]
            + [(TENSORS[name][0].shape, 1) for name in replicated for _ in range(3)]
        )
        whole = [TENSORS[name][0].nbytes for name in replicated]
        whole += [TENSORS[name][0].nbytes // 4 for name in sharded]
        assert sorted(route.whole_reads) == sorted(whole)
    assert route.piece_reads and max(route.piece_reads) <= PIECE  # never a part whole
    for device in CPUS:  # buffers of a piece's size, a few of each size
        kept = host_staging.POOL.kept(device)
        assert all(size <= PIECE for size in kept)
        assert all(kept.count(size) <= pinned_memory.POOL_BUFFERS for size in kept)


def _part(name: str) -> tuple[int, ...]:
    values, spec = TENSORS[name]
    return tuple(
        size // 4 if axis == "x" else size
        for size, axis in zip(values.shape, (*spec, *[None] * values.ndim), strict=False)
    )


def test_the_progress_bar_counts_each_part_once(
    tmp_path: Path, route: Route, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted: list[int] = []
    monkeypatch.setattr(Progress, "advance", lambda self, count: counted.append(count))
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file({name: v for name, (v, _) in TENSORS.items()}, str(path))
    specs = {name: spec for name, (_, spec) in TENSORS.items()}
    tj.load_file(path, device=tj.ShardingRule(LINE, specs), progress=True)
    # Each distinct part once: a sharded tensor's four parts, a replicated one's one.
    assert sum(counted) == sum(values.nbytes for values, _ in TENSORS.values())
    assert route.piece_reads  # in pieces, whose last ones overlap the ones before


def test_a_replicated_part_is_read_once_for_every_accelerator(tmp_path: Path, route: Route) -> None:
    values = patterned((3001,), ml_dtypes.bfloat16)
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file({"w": values}, str(path))
    mesh = Mesh(np.array(CPUS[1:]), ("x",))  # accelerators only, in both settings
    loaded = tj.load_file(path, device=NamedSharding(mesh, P()))
    _check(loaded, path, {"w": P()}, mesh)
    assert route.streamed == [((3001,), 3)]  # one part, sent to three devices
    assert len(route.piece_reads) == -(-values.nbytes // PIECE)  # once, not once a device
    assert route.whole_reads == []


def test_a_two_axis_mesh_and_safe_open_take_the_same_route(tmp_path: Path, route: Route) -> None:
    values = patterned((12, 10), np.uint16)
    path = tmp_path / "grid.safetensors"
    safetensors.numpy.save_file({"grid": values}, str(path))
    sharding = NamedSharding(SQUARE, P("a", "b"))
    with tj.safe_open(path, framework="flax", device=sharding) as file:
        grid = file.get_tensor("grid")
    _check({"grid": grid}, path, {"grid": P("a", "b")}, SQUARE)
    assert len(route.streamed) == (4 if host_staging.routes_through_pinned(HOST) else 3)
    assert all(shape == (6, 5) for shape, _ in route.streamed)


@pytest.mark.parametrize("dtype", [np.bool_, np.int64], ids=lambda d: np.dtype(d).name)
def test_dtypes_without_a_byte_route_are_read_per_part(
    tmp_path: Path, route: Route, dtype: Any
) -> None:
    # bool has no bit carrier; int64 is narrowed to int32 (no x64) as it is read.
    values = (np.arange(4 * 300) % 3).astype(dtype)
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file({"v": values}, str(path))
    with warnings.catch_warnings():  # int64: warned once a process, maybe already
        warnings.simplefilter("ignore", tj.DtypeNarrowingWarning)
        loaded = tj.load_file(path, device=NamedSharding(LINE, P("x")))["v"]
    assert route.piece_reads == []
    assert route.whole_reads == [values.nbytes // 4] * 4  # part by part, never the tensor
    assert loaded.dtype == jax.dtypes.canonicalize_dtype(dtype)
    np.testing.assert_array_equal(np.asarray(loaded), values.astype(loaded.dtype))
    if dtype == np.bool_:
        assert route.streamed == []


# With cpu:0 an accelerator too, torch's parts (arrays on cpu:0) would count as on a device.
@pytest.mark.parametrize("route", ["cpu:1-3"], indirect=True)
def test_torch_checkpoints_go_to_the_mesh_through_pinned_pieces(
    tmp_path: Path, route: Route
) -> None:
    import torch

    state = {
        "w": torch.arange(4 * 301, dtype=torch.float32).reshape(4, 301),
        "b": torch.arange(1000).to(torch.bfloat16),
    }
    path = tmp_path / "model.pt"
    torch.save(state, path)
    rule = tj.ShardingRule(LINE, {"w": P("x", None), "b": P()})
    loaded = tj.load(path, map_location=rule)
    # The parts torch slices out are host arrays: w's three on the accelerators, and b to
    # each of them (from cpu:0's own, which it keeps).
    assert sorted(route.streamed) == sorted([((1, 301), 1)] * 3 + [((1000,), 1)] * 3)
    for name, tensor in state.items():
        expected = tensor.view(torch.uint8).numpy().tobytes()
        assert np.asarray(loaded[name]).tobytes() == expected, name
        assert loaded[name].sharding.is_equivalent_to(rule(name, (), None), loaded[name].ndim)


@pytest.mark.parametrize("route", ["cpu:1-3"], indirect=True)
def test_a_replicated_host_part_is_copied_once_into_pinned_pieces_for_all_accelerators(
    tmp_path: Path, route: Route
) -> None:
    import torch

    bias = torch.arange(1000).to(torch.bfloat16)
    path = tmp_path / "model.pt"
    torch.save({"b": bias}, path)
    mesh = Mesh(np.array(CPUS[1:]), ("x",))
    loaded = tj.load(path, map_location=NamedSharding(mesh, P()))["b"]
    assert route.streamed == [((1000,), 3)]  # one pass over the host part, three devices
    assert loaded.sharding.is_equivalent_to(NamedSharding(mesh, P()), 1)
    for shard in loaded.addressable_shards:
        assert shard.data.devices() == {shard.device}
        assert np.asarray(shard.data).tobytes() == bias.view(torch.uint8).numpy().tobytes()


def test_a_full_pinned_allocator_midway_sends_the_remaining_pieces_from_pageable_memory(
    tmp_path: Path, route: Route, monkeypatch: pytest.MonkeyPatch
) -> None:
    allocate = pinned_memory._pinned_empty
    allocated: list[int] = []

    def two_then_full(device: jax.Device, nbytes: int) -> Any:
        if len(allocated) == 2:
            raise tj.OutOfMemoryError("pinned host memory is exhausted (simulated)")
        allocated.append(nbytes)
        return allocate(device, nbytes)

    monkeypatch.setattr(pinned_memory, "_pinned_empty", two_then_full)
    values = patterned((4 * 64, 33), ml_dtypes.bfloat16)  # five pieces a part
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file({"w": values}, str(path))
    loaded = tj.load_file(path, device=NamedSharding(LINE, P("x")))
    _check(loaded, path, {"w": P("x")}, LINE)
    assert len(allocated) == 2 and route.streamed
    assert host_staging.POOL.held() == 2  # the pinned ones went back to the pool
