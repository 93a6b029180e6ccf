"""The pinned transfer routes on a real GPU: values, dtypes, devices, memory kinds.

The CPU suite forces these routes onto a second CPU device
(``tests/multidevice/test_placement_transfers.py``); here they run as users get them.
Speed is ``benchmarks/bench_gpu.py``'s job, not a test's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy
import torch

import torch2jax_device as tj
from torch2jax_device._src import host_staging

MIB = 2**20


def _values(count: int, dtype: Any) -> np.ndarray[Any, Any]:
    return (np.arange(count) % 97 - 40).astype(np.float32).astype(dtype)


def test_the_gpu_takes_the_pinned_routes() -> None:
    assert host_staging.routes_through_pinned(tj.resolve("cuda"))


@pytest.mark.parametrize(
    "dtype",
    [
        np.float32,
        ml_dtypes.bfloat16,
        ml_dtypes.float8_e4m3fn,
        np.int8,
        np.bool_,
        np.complex64,
        ml_dtypes.int4,  # packed on the GPU: copied out of pinned memory by JAX
    ],
)
def test_device_to_host_through_pinned_memory(dtype: Any) -> None:
    values = _values(3 * MIB + 7, dtype)
    on_gpu = jax.device_put(values, tj.resolve("cuda"))
    back = tj.to_device(on_gpu, "cpu")
    assert back.devices() == {tj.resolve("cpu")} and back.committed
    assert back.dtype == values.dtype
    assert np.asarray(back).tobytes() == values.tobytes()


@pytest.mark.parametrize("source", ["device memory", "pinned_host memory"])
def test_results_on_the_cpu_compute_with_other_cpu_arrays(source: str) -> None:
    # jax.device_put(pinned, cpu) types its result as host memory, which jit refuses to
    # mix with other CPU arrays: 3 tests of the 2026-11-26 H200 run failed so.
    values = _values(MIB, np.float32)
    if source == "device memory":
        on_gpu = jax.device_put(values, tj.resolve("cuda"))
    else:
        on_gpu = tj.pin_memory(values, "cuda")
    back = tj.to_device(on_gpu, "cpu")
    weights = tj.to_device(np.full(MIB, 2, np.float32), "cpu")
    assert jax.typeof(back) == jax.typeof(weights)
    product = jax.jit(lambda a, b: a * b)(back, weights)
    np.testing.assert_array_equal(np.asarray(product), values * 2)


@pytest.mark.parametrize("dtype", [ml_dtypes.int4, ml_dtypes.float4_e2m1fn])
def test_sub_byte_dtypes_arrive_whole(dtype: Any) -> None:
    # JAX packs them on the GPU: the byte routes (pieces, pin by memcpy) must not carry them.
    values = _values(host_staging.PINNED_PIECES_FROM + 13, np.float32).clip(-6, 6)
    values = values.astype(dtype)
    moved = tj.to_device(values, "cuda")
    np.testing.assert_array_equal(np.asarray(moved).astype(np.float32), values.astype(np.float32))
    pinned = tj.pin_memory(values, "cuda")
    np.testing.assert_array_equal(np.asarray(pinned).astype(np.float32), values.astype(np.float32))


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, ml_dtypes.float8_e5m2])
def test_large_pageable_host_data_in_pinned_pieces(dtype: Any) -> None:
    values = _values(3 * host_staging.PIECE_BYTES // 2 + 13, dtype)  # two pieces, odd size
    moved = tj.to_device(values.reshape(-1, 1), "cuda")
    assert moved.devices() == {tj.resolve("cuda")}
    assert moved.sharding.memory_kind == "device"
    assert np.asarray(moved).reshape(-1).tobytes() == values.tobytes()


def test_non_contiguous_torch_tensor_to_the_gpu() -> None:
    tensor = torch.arange(4096 * 1024, dtype=torch.float32).reshape(4096, 1024).t()
    moved = tj.to_device(tensor, "cuda")
    np.testing.assert_array_equal(np.asarray(moved), tensor.numpy())


@pytest.mark.parametrize("count", [1000, host_staging.PINNED_PIECES_FROM // 4 + 13])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_the_source_may_change_once_a_non_blocking_transfer_returns(kind: str, count: int) -> None:
    """torch's ``.to("cuda", non_blocking=True)`` from pageable memory has read the source
    when it returns; the oracle checks that, then tj is held to it on both routes (plain,
    and pinned pieces from ``PINNED_PIECES_FROM``). The CPU suite checks the pieces route
    only: JAX aliases NumPy data on a CPU device, so there a later write shows anyway."""
    expected = _values(count, np.float32)
    oracle_source = torch.from_numpy(expected.copy())
    oracle = oracle_source.to("cuda", non_blocking=True)
    oracle_source.fill_(-1)
    np.testing.assert_array_equal(oracle.cpu().numpy(), expected)
    for _ in range(20):  # a late read of the source is a race: give it chances
        source: Any = expected.copy() if kind == "numpy" else torch.from_numpy(expected.copy())
        moved = tj.to_device(source, "cuda", non_blocking=True)
        source[:] = -1
        np.testing.assert_array_equal(np.asarray(moved), expected)


def test_pin_memory_then_to_the_gpu() -> None:
    values = _values(16 * MIB, np.float32)
    pinned = tj.pin_memory(values, "cuda")
    assert pinned.sharding.memory_kind == "pinned_host"
    moved = tj.to_device(pinned, "cuda", non_blocking=True)
    np.testing.assert_array_equal(np.asarray(moved), values)


def test_to_torch_onto_the_cpu() -> None:
    values = _values(4 * MIB, np.float32)
    tensor = tj.to_torch(jax.device_put(values, tj.resolve("cuda")), "cpu")
    assert tensor.device == torch.device("cpu")
    np.testing.assert_array_equal(tensor.numpy(), values)


def test_a_load_onto_the_gpu_through_pinned_staging(tmp_path: Path) -> None:
    tensors = {
        "big": _values(40 * MIB + 3, ml_dtypes.bfloat16).reshape(-1, 1),  # pieces
        "mid": _values(5 * MIB, np.float16),  # one pinned piece
        "small": _values(100, np.int32),
        "mask": np.arange(1000) % 2 == 0,
    }
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file(tensors, str(path))
    loaded = tj.load_file(path, device="cuda")
    for name, expected in tensors.items():
        assert loaded[name].devices() == {tj.resolve("cuda")}, name
        assert np.asarray(loaded[name]).tobytes() == expected.tobytes(), name


@pytest.mark.parametrize(
    "values",
    [np.arange(3 * MIB) % 3 == 0, (np.arange(MIB) + 0.5j).astype(np.complex64)],
    ids=["bool", "complex64"],
)
def test_a_load_of_tensors_without_a_bit_carrier_in_pinned_pieces(
    tmp_path: Path, values: np.ndarray[Any, Any]
) -> None:
    # Larger than one staging buffer (a third of staging_bytes): pieces from pinned
    # buffers, as typed views, since JAX cannot bitcast bytes into bool or complex.
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file({"t": values}, str(path))
    array = tj.load_file(path, device="cuda", staging_bytes=3 * MIB)["t"]
    assert array.devices() == {tj.resolve("cuda")}
    assert array.dtype == values.dtype and array.shape == values.shape
    assert np.asarray(array).tobytes() == values.tobytes()


def test_a_load_bigger_than_the_free_pool_is_refused(tmp_path: Path) -> None:
    stats = tj.resolve("cuda").memory_stats() or {}
    free = stats.get("bytes_limit", 0) - stats.get("bytes_in_use", 0)
    if not 0 < free < 64 * 2**30:
        pytest.skip("needs a pool smaller than 64 GiB (set XLA_PYTHON_CLIENT_MEM_FRACTION)")
    path = tmp_path / "huge.safetensors"
    count = free // 2 + MIB
    header = f'{{"t":{{"dtype":"U16","shape":[{count}],"data_offsets":[0,{2 * count}]}}}}'
    encoded = header.encode() + b" " * (-len(header) % 8)
    with open(path, "wb") as file:
        file.write(len(encoded).to_bytes(8, "little") + encoded)
        file.truncate(8 + len(encoded) + 2 * count)  # sparse: nothing is read anyway
    with pytest.raises(tj.OutOfMemoryError, match="Fix: load onto device='cpu'"):
        tj.load_file(path, device="cuda")


def test_a_sharded_load_onto_a_gpu_mesh_through_pinned_pieces(tmp_path: Path) -> None:
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    gpus = jax.devices("gpu")
    tensors = {
        "big": _values(len(gpus) * (20 * MIB + 3), ml_dtypes.bfloat16).reshape(len(gpus), -1),
        "small": _values(1000, np.float16),
    }
    path = tmp_path / "model.safetensors"
    safetensors.numpy.save_file(tensors, str(path))
    mesh = Mesh(np.array(gpus), ("x",))
    loaded = tj.load_file(path, device=tj.ShardingRule(mesh, {"big": P("x", None)}))
    for name, expected in tensors.items():
        assert loaded[name].sharding.mesh == mesh, name
        assert np.asarray(loaded[name]).tobytes() == expected.tobytes(), name
        for shard in loaded[name].addressable_shards:
            assert np.asarray(shard.data).tobytes() == expected[shard.index].tobytes(), name
    assert isinstance(loaded["big"].sharding, NamedSharding)


def test_a_save_from_the_gpu_through_pinned_memory(tmp_path: Path) -> None:
    tensors = {
        "w": _values(3 * MIB + 7, ml_dtypes.bfloat16),
        "fp8": _values(1001, ml_dtypes.float8_e4m3fn),
        "ids": np.arange(77, dtype=np.int32),
    }
    on_gpu = {name: jax.device_put(value, tj.resolve("cuda")) for name, value in tensors.items()}
    saved, from_host = tmp_path / "gpu.safetensors", tmp_path / "host.safetensors"
    tj.save_file(on_gpu, saved)
    tj.save_file(tensors, from_host)
    assert saved.read_bytes() == from_host.read_bytes()
