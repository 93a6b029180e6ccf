"""Loads onto a mesh checked against each device's free memory, as single-device loads are.

``capacity.memory_stats`` gives cpu:0..3 a JAX memory pool each (the CPU backend reports
none); one device's pool is made too small. Before reading a byte, the load must be
refused with ``tj.OutOfMemoryError`` naming that device, the bytes its shards need, the
free bytes, the pool and the fix; an allocation failure midway becomes the same error.
Where parts travel in pinned pieces (every device made to act as a GPU), the pieces in
flight to a device count too, as they do for a load onto one device (``transfer.need``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import safetensors.numpy
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import torch2jax_device as tj
from tests.support.arrays import patterned
from torch2jax_device._src import capacity, host_staging
from torch2jax_device._src.checkpoints import sharded
from torch2jax_device._src.checkpoints.reader import Reader

CPUS = jax.devices("cpu")[:4]
LINE = Mesh(np.array(CPUS), ("x",))
ROWS = NamedSharding(LINE, P("x"))
# Per device, w (400 x 64 float32) and b (64 float32) split by rows: 25,600 + 64 bytes.
ROWS_PER_DEVICE = 25_600 + 64
# Per device, w split by rows and b replicated (a ShardingRule for w): 25,600 + 256 bytes.
RULE = tj.ShardingRule(LINE, {"w": P("x", None)})
RULE_PER_DEVICE = 25_600 + 256


def _weights(tmp_path: Path) -> Path:
    path = tmp_path / "model.safetensors"
    tensors = {
        "w": patterned((400, 64), np.float32),
        "b": patterned((64,), np.float32),
    }
    safetensors.numpy.save_file(tensors, str(path))
    return path


def _pools(monkeypatch: pytest.MonkeyPatch, free: dict[jax.Device, int]) -> list[jax.Device]:
    """Each device reports a 1 MiB pool with ``free[device]`` bytes left (default: all);
    returns the devices whose pool was asked for, in order."""
    limit = 2**20
    asked: list[jax.Device] = []

    def stats(device: jax.Device) -> dict[str, Any]:
        asked.append(device)
        return {"bytes_limit": limit, "bytes_in_use": limit - free.get(device, limit)}

    monkeypatch.setattr(capacity, "memory_stats", stats)
    return asked


class Activity:
    """Counts every read from a file and every part sent to the mesh."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads: list[str] = []
        self.parts = 0
        for method in ("read_tensor", "read_selection", "read_selection_into", "read_into"):
            original = getattr(Reader, method)

            def counting(*args: Any, _original: Any = original, _name: str = method) -> Any:
                self.reads.append(_name)
                return _original(*args)

            monkeypatch.setattr(Reader, method, counting)
        assemble = sharded.assemble

        def counting_assemble(*args: Any, **kwargs: Any) -> Any:
            self.parts += 1
            return assemble(*args, **kwargs)

        monkeypatch.setattr(sharded, "assemble", counting_assemble)


@pytest.fixture
def activity(monkeypatch: pytest.MonkeyPatch) -> Activity:
    return Activity(monkeypatch)


def _short_of(monkeypatch: pytest.MonkeyPatch, device: jax.Device) -> None:
    """``device`` has 20,000 bytes free of a pool XLA_CLIENT_MEM_FRACTION=0.12 set, the
    figures ``_check_refusal`` reads back; the other devices have their 1 MiB pool free."""
    _pools(monkeypatch, {device: 20_000})
    monkeypatch.setenv("XLA_CLIENT_MEM_FRACTION", "0.12")


def _check_refusal(error: tj.OutOfMemoryError, device: jax.Device, name: str, needed: int) -> None:
    """The single-device message: the device, the load, the bytes, the pool, the fix."""
    message = str(error)
    assert message.startswith(f"{device} is out of memory: ")
    assert name in message
    assert f"needs 0.00 GiB ({needed:,} bytes)" in message  # its shards' bytes
    assert "(20,000 bytes) free of a 0.00 GiB (1,048,576 bytes) pool" in message
    assert "XLA_CLIENT_MEM_FRACTION=0.12" in message
    assert "device='cpu'" in message and "tj.to_device" in message and "sharding" in message
    assert isinstance(error, RuntimeError)  # torch.OutOfMemoryError is one


def test_a_sharded_load_whose_shards_fit_goes_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, activity: Activity
) -> None:
    path = _weights(tmp_path)
    asked = _pools(monkeypatch, dict.fromkeys(CPUS, ROWS_PER_DEVICE))  # exactly enough
    loaded = tj.load_file(path, device=ROWS)
    assert asked == CPUS  # each device checked once, for its own shards
    expected = safetensors.numpy.load_file(str(path))
    for name, values in expected.items():
        np.testing.assert_array_equal(np.asarray(loaded[name]), values)
        assert loaded[name].sharding == ROWS
    assert activity.parts == 2


def test_a_sharded_load_that_one_device_cannot_hold_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, activity: Activity
) -> None:
    path = _weights(tmp_path)
    _short_of(monkeypatch, CPUS[2])  # cpu:2 has 20,000 bytes free, needs 25,856
    with pytest.raises(tj.OutOfMemoryError) as info:
        tj.load_file(path, device=ROWS)
    _check_refusal(info.value, CPUS[2], "'model.safetensors'", ROWS_PER_DEVICE)
    assert "cpu:0" not in str(info.value) and "cpu:1" not in str(info.value)
    assert activity.reads == [] and activity.parts == 0  # refused before reading a byte


def test_a_sharding_rule_load_is_refused_on_the_device_that_cannot_hold_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, activity: Activity
) -> None:
    path = _weights(tmp_path)
    _short_of(monkeypatch, CPUS[3])
    with pytest.raises(tj.OutOfMemoryError) as info:
        tj.load(path, map_location=RULE)
    _check_refusal(info.value, CPUS[3], "'model.safetensors'", RULE_PER_DEVICE)
    assert activity.reads == [] and activity.parts == 0


def test_a_torch_checkpoint_onto_a_mesh_is_refused_before_any_part_is_placed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, activity: Activity
) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "model.pt"
    torch.save({"w": torch.from_numpy(patterned((400, 64), np.float32)), "b": torch.ones(64)}, path)
    _short_of(monkeypatch, CPUS[1])
    with pytest.raises(tj.OutOfMemoryError) as info:
        tj.load(path, map_location=RULE)
    _check_refusal(info.value, CPUS[1], "'model.pt'", RULE_PER_DEVICE)
    assert activity.parts == 0


def test_an_allocation_failure_midway_becomes_the_library_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _weights(tmp_path)
    _pools(monkeypatch, {CPUS[2]: 30_000})  # the check passes; then a device fails

    def exhausted(*args: Any, **kwargs: Any) -> Any:
        raise jax.errors.JaxRuntimeError(
            "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 25.0KiB"
        )

    monkeypatch.setattr(sharded, "assemble", exhausted)
    with pytest.raises(tj.OutOfMemoryError) as info:
        tj.load_file(path, device=ROWS)
    # Named: the device with the least room to spare for its shards.
    assert str(info.value).startswith("cpu:2 is out of memory: loading 2 tensor(s) of")
    assert "needs 0.00 GiB (25,664 bytes)" in str(info.value)
    assert isinstance(info.value.__cause__, jax.errors.JaxRuntimeError)


def test_a_tensor_of_a_file_opened_onto_a_mesh_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, activity: Activity
) -> None:
    path = _weights(tmp_path)
    _short_of(monkeypatch, CPUS[0])
    with tj.safe_open(path, "flax", device=RULE) as f:
        with pytest.raises(tj.OutOfMemoryError) as info:
            f.get_tensor("w")
        assert activity.reads == [] and activity.parts == 0
        bias = f.get_tensor("b")  # 256 bytes a device: fits
    message = str(info.value)
    assert message.startswith("cpu:0 is out of memory: loading 1 tensor(s) of 'model.safetensors'")
    assert "needs 0.00 GiB (25,600 bytes)" in message and "(20,000 bytes) free" in message
    np.testing.assert_array_equal(np.asarray(bias), safetensors.numpy.load_file(str(path))["b"])


def test_shards_in_pinned_host_memory_are_not_counted_against_the_device_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _weights(tmp_path)
    asked = _pools(monkeypatch, dict.fromkeys(CPUS, 0))  # no device memory free at all
    host_rows = NamedSharding(LINE, P("x"), memory_kind="pinned_host")
    loaded = tj.load_file(path, device=host_rows)
    assert asked == []
    np.testing.assert_array_equal(
        np.asarray(loaded["w"]), safetensors.numpy.load_file(str(path))["w"]
    )
    assert loaded["w"].sharding.memory_kind == "pinned_host"


def test_a_slice_of_a_file_opened_onto_a_mesh_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, activity: Activity
) -> None:
    path = _weights(tmp_path)
    _pools(monkeypatch, {CPUS[3]: 10_000})
    with tj.safe_open(path, "flax", device=RULE) as f:
        with pytest.raises(tj.OutOfMemoryError) as info:
            f.get_slice("w")[::2, :]  # 200 x 64 float32: 12,800 bytes a device
        assert activity.reads == [] and activity.parts == 0
        half = f.get_slice("w")[:100]  # 6,400 bytes a device: fits
    message = str(info.value)
    assert message.startswith("cpu:3 is out of memory: a slice of shape [200, 64] of tensor 'w'")
    assert "needs 0.00 GiB (12,800 bytes)" in message and "(10,000 bytes) free" in message
    assert activity.reads == ["read_selection"] and activity.parts == 1
    expected = safetensors.numpy.load_file(str(path))["w"][:100]
    np.testing.assert_array_equal(np.asarray(half), expected)


# Pieces in flight (issue: the mesh check counted only the shards). With pinned pieces
# of 1 KiB, each device's part of w (100 rows x 64 float32 = 25,600 bytes) goes in 25
# pieces, 3 of them on the device at once; its part of b (64 bytes) in one.
PIECE = 1024
IN_FLIGHT = 3 * PIECE
ROWS_WITH_PIECES = ROWS_PER_DEVICE + IN_FLIGHT  # 28,736


class Pinned:
    """Every CPU device copies host data through pinned pieces of 1 KiB, as a GPU; counts,
    per device, the most pinned buffers taken and not yet given back (pieces in flight)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(host_staging, "routes_through_pinned", lambda device: True)
        monkeypatch.setattr(host_staging, "PIECE_BYTES", PIECE)
        monkeypatch.setattr(host_staging, "PINNED_PIECES_FROM", 1)
        self.out: dict[jax.Device, int] = {}
        self.most: dict[jax.Device, int] = {}
        take, give = host_staging.POOL.take, host_staging.POOL.give

        def counting_take(device: jax.Device, nbytes: int = 0) -> Any:
            buffer = take(device, nbytes)
            self.out[device] = self.out.get(device, 0) + 1
            self.most[device] = max(self.most.get(device, 0), self.out[device])
            return buffer

        def counting_give(device: jax.Device, buffer: Any) -> None:
            self.out[device] -= 1
            give(device, buffer)

        monkeypatch.setattr(host_staging.POOL, "take", counting_take)
        monkeypatch.setattr(host_staging.POOL, "give", counting_give)


@pytest.fixture
def pinned(monkeypatch: pytest.MonkeyPatch) -> Iterator[Pinned]:
    host_staging.POOL.clear()  # buffers of another piece size must not be reused
    yield Pinned(monkeypatch)
    host_staging.POOL.clear()


def _load_file(path: Path) -> Any:
    return tj.load_file(path, device=ROWS)


def _torch_file(path: Path) -> Path:
    """The safetensors file at ``path`` as a ``torch.save`` checkpoint beside it."""
    import torch

    pt = path.with_suffix(".pt")
    tensors = safetensors.numpy.load_file(str(path))
    torch.save({name: torch.from_numpy(values) for name, values in tensors.items()}, pt)
    return pt


def _load_torch(path: Path) -> Any:
    return tj.load(_torch_file(path), map_location=ROWS)


def _open_tensors(path: Path) -> Any:
    with tj.safe_open(path, "flax", device=ROWS) as f:
        return {name: f.get_tensor(name) for name in ("w", "b")}


# Each load, and what it needs on cpu:2: load_file and tj.load check the whole load at
# once (w's and b's parts, and w's pieces in flight); safe_open checks each tensor as it
# is read, w first (its part and its pieces).
LOADS = {
    "load_file": (_load_file, ROWS_WITH_PIECES),
    "tj.load(.pt)": (_load_torch, ROWS_WITH_PIECES),
    "safe_open": (_open_tensors, 25_600 + IN_FLIGHT),
}


@pytest.mark.parametrize(("load", "needed"), LOADS.values(), ids=LOADS.keys())
def test_a_mesh_load_counts_the_pieces_in_flight_to_each_device(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    activity: Activity,
    pinned: Pinned,
    load: Any,
    needed: int,
) -> None:
    path = _weights(tmp_path)
    _pools(monkeypatch, {CPUS[2]: ROWS_PER_DEVICE})  # its shards fit; their pieces do not
    with pytest.raises(tj.OutOfMemoryError) as info:
        load(path)
    message = str(info.value)
    assert message.startswith("cpu:2 is out of memory: loading ")
    assert "tensor(s) of 'model." in message
    assert f"needs 0.00 GiB ({needed:,} bytes)" in message
    assert "(25,664 bytes) free" in message
    assert activity.reads == [] and activity.parts == 0  # refused before reading a byte


@pytest.mark.parametrize(("load", "needed"), LOADS.values(), ids=LOADS.keys())
def test_the_pieces_counted_are_the_pieces_the_route_keeps_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pinned: Pinned, load: Any, needed: int
) -> None:
    path = _weights(tmp_path)
    _pools(monkeypatch, dict.fromkeys(CPUS, needed))  # exactly enough
    loaded = load(path)
    for name, values in safetensors.numpy.load_file(str(path)).items():
        np.testing.assert_array_equal(np.asarray(loaded[name]), values)
        assert loaded[name].sharding == ROWS
    # The most pinned buffers out at once, per device: the pieces the check counted.
    assert pinned.most == dict.fromkeys(CPUS, IN_FLIGHT // PIECE)


def _rows(path: Path, target: Any) -> Any:
    with tj.safe_open(path, "flax", device=target) as f:
        return f.get_slice("w")[:200]


FILE = "loading 2 tensor(s) of 'model.safetensors'"
TORCH = "loading 2 tensor(s) of 'model.pt'"
SLICE = "a slice of shape [200, 64] of tensor 'w' of 'model.safetensors'"
# Every load names itself one way in a capacity error, onto one device or a mesh.
NAMED = {
    "load_file onto a device": (lambda path: tj.load_file(path, device="cpu:1"), FILE),
    "load_file onto a mesh": (lambda path: tj.load_file(path, device=ROWS), FILE),
    "tj.load(.pt) onto a device": (lambda path: tj.load(_torch_file(path), "cpu:1"), TORCH),
    "tj.load(.pt) onto a mesh": (lambda path: tj.load(_torch_file(path), ROWS), TORCH),
    "a slice onto a device": (lambda path: _rows(path, "cpu:1"), SLICE),
    "a slice onto a mesh": (lambda path: _rows(path, ROWS), SLICE),
}


@pytest.mark.parametrize(("load", "named"), NAMED.values(), ids=NAMED.keys())
def test_every_capacity_error_names_its_load_in_one_wording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, load: Any, named: str
) -> None:
    path = _weights(tmp_path)
    _pools(monkeypatch, dict.fromkeys(CPUS, 100))  # no device can hold any of it
    with pytest.raises(tj.OutOfMemoryError) as info:
        load(path)
    assert str(info.value).split(" is out of memory: ")[1].startswith(f"{named} needs ")
