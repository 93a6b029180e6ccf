"""Host <-> device copies through pinned memory (``host_staging``), on simulated devices.

On a GPU, ``tj.to_device`` sends device->host copies through the source device's
``pinned_host`` memory and large pageable host->device copies in pinned pieces. This
machine has no GPU: the fixture treats cpu:1..3 as accelerators (CPU devices have a
``pinned_host`` memory kind too), with small pieces, so every route runs here and each
test checks the route was taken as well as the values, dtype, device and memory kind.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import ml_dtypes
import numpy as np
import pytest
import torch

import torch2jax_device as tj
from tests.support.arrays import patterned
from tests.support.clocks import ManualClock
from torch2jax_device._src import host_staging, pinned_memory

HOST, ACCELERATOR = jax.devices("cpu")[:2]
PIECE = 1024


class Routes:
    """Counts which route each transfer took."""

    def __init__(self, patch: pytest.MonkeyPatch) -> None:
        self.pieces = 0
        self.to_host = 0
        self.pinned = 0
        pieces, to_host, pin = (
            host_staging._to_device_in_pieces,
            host_staging._to_host,
            host_staging.pin,
        )

        def count_pieces(*args: Any) -> Any:
            self.pieces += 1
            return pieces(*args)

        def count_to_host(*args: Any) -> Any:
            self.to_host += 1
            return to_host(*args)

        def count_pin(*args: Any) -> Any:
            self.pinned += 1
            return pin(*args)

        patch.setattr(host_staging, "_to_device_in_pieces", count_pieces)
        patch.setattr(host_staging, "_to_host", count_to_host)
        patch.setattr(host_staging, "pin", count_pin)


@pytest.fixture
def routes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Routes]:
    """cpu:0 is the host; the other CPU devices copy through pinned pieces of 1 KiB, and
    every array is pinned by a memcpy."""
    monkeypatch.setattr(host_staging, "routes_through_pinned", lambda device: device != HOST)
    monkeypatch.setattr(host_staging, "PIECE_BYTES", PIECE)
    monkeypatch.setattr(host_staging, "PINNED_PIECES_FROM", 1)
    monkeypatch.setattr(host_staging, "PIN_BY_MEMCPY_FROM", 0)
    monkeypatch.setattr(host_staging, "_PARALLEL_FROM", 256)
    host_staging.POOL.clear()  # buffers of another piece size must not be reused
    yield Routes(monkeypatch)
    host_staging.POOL.clear()


DTYPES = [
    np.float32,
    np.float16,
    ml_dtypes.bfloat16,
    ml_dtypes.float8_e4m3fn,
    ml_dtypes.float8_e5m2,
    np.int8,
    np.uint8,
    np.int16,
    np.uint32,
    np.int32,
]
# Not multiples of the piece size; one along an axis of one row per piece; 0-d; empty.
SHAPES = [(1000,), (3, 7, 101), (2, 1000), (513, 3), (), (0,), (4, 0, 5), (1,)]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_pageable_host_data_reaches_the_device_in_pinned_pieces(
    routes: Routes, dtype: Any, shape: tuple[int, ...]
) -> None:
    values = patterned(shape, dtype)
    moved = tj.to_device(values, "cpu:1")
    assert routes.pieces == (1 if values.size else 0)  # nothing to send: the plain route
    assert moved.devices() == {ACCELERATOR} and moved.committed
    assert moved.sharding.memory_kind == "device"
    assert moved.dtype == values.dtype and moved.shape == values.shape
    assert np.asarray(moved).tobytes() == values.tobytes()
    _check_pool_bounds(ACCELERATOR)


def _check_pool_bounds(device: jax.Device) -> None:
    """The pool keeps at most ``POOL_BUFFERS`` buffers of a size, ``POOL_BYTES`` in all."""
    kept = host_staging.POOL.kept(device)
    assert all(kept.count(size) <= pinned_memory.POOL_BUFFERS for size in kept), kept
    assert sum(kept) <= pinned_memory.POOL_BYTES


def test_buffers_are_reused_and_released_when_idle(
    routes: Routes, pool_clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = np.arange(20 * PIECE, dtype=np.uint8)  # 20 pieces, twice
    allocated = []
    original = pinned_memory._pinned_empty

    def counting(device: jax.Device, nbytes: int) -> Any:
        allocated.append(nbytes)
        return original(device, nbytes)

    monkeypatch.setattr(pinned_memory, "_pinned_empty", counting)
    for _ in range(2):
        np.testing.assert_array_equal(np.asarray(tj.to_device(values, "cpu:1")), values)
        pool_clock.advance(pinned_memory.IDLE_SECONDS / 2)  # busy again before it expires
    assert len(allocated) == pinned_memory.POOL_BUFFERS  # 40 pieces through 3 buffers
    assert host_staging.POOL.held() == pinned_memory.POOL_BUFFERS
    pool_clock.advance(pinned_memory.IDLE_SECONDS / 2 - 0.01)  # idle just short of the limit
    assert host_staging.POOL.held() == pinned_memory.POOL_BUFFERS
    pool_clock.advance(0.01)
    assert host_staging.POOL.held() == 0
    assert pool_clock.pending() == 0  # no timer left behind


def test_non_contiguous_torch_tensors_arrive_whole(routes: Routes) -> None:
    tensor = torch.arange(60 * 70, dtype=torch.float32).reshape(60, 70).t()[:, ::3]
    moved = tj.to_device(tensor, "cpu:1")
    assert routes.pieces == 1
    np.testing.assert_array_equal(np.asarray(moved), tensor.numpy())
    assert moved.devices() == {ACCELERATOR}


def test_host_arrays_on_the_cpu_device_take_the_pinned_route(routes: Routes) -> None:
    values = jax.device_put(np.arange(5000, dtype=np.float32), HOST)
    moved = tj.to_device({"x": values}, "cpu:1")["x"]
    assert routes.pieces == 1
    np.testing.assert_array_equal(np.asarray(moved), np.asarray(values))


@pytest.mark.parametrize(
    "dtype",
    [np.bool_, np.complex64, ml_dtypes.int4, ml_dtypes.float4_e2m1fn],
    ids=lambda d: np.dtype(d).name,
)
def test_dtypes_without_a_bit_carrier_take_the_plain_route(routes: Routes, dtype: Any) -> None:
    # Sub-byte dtypes are packed on a device: their NumPy bytes are no carrier.
    values = (np.arange(3000) % 3).astype(dtype)
    moved = tj.to_device(values, "cpu:1")
    assert routes.pieces == 0
    assert moved.dtype == values.dtype
    np.testing.assert_array_equal(np.asarray(moved), values)


def test_small_arrays_take_the_plain_route(routes: Routes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_staging, "PINNED_PIECES_FROM", 4096)
    values = np.arange(1023, dtype=np.float32)  # 4092 bytes
    np.testing.assert_array_equal(np.asarray(tj.to_device(values, "cpu:1")), values)
    assert routes.pieces == 0


def test_a_full_pinned_allocator_falls_back_to_the_plain_copy(
    routes: Routes, monkeypatch: pytest.MonkeyPatch
) -> None:
    def exhausted(sharding: Any) -> Any:
        def allocate(*args: Any) -> Any:
            raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory (simulated)")

        return allocate

    monkeypatch.setattr(pinned_memory, "empty_in", exhausted)
    values = np.arange(5000, dtype=np.float32)
    moved = tj.to_device(values, "cpu:1")
    assert routes.pieces == 1
    np.testing.assert_array_equal(np.asarray(moved), values)
    with pytest.raises(tj.OutOfMemoryError, match="XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB") as info:
        tj.pin_memory(values, "cpu:1")
    assert isinstance(info.value, RuntimeError)
    assert isinstance(info.value.__cause__, jax.errors.JaxRuntimeError)


UNPATTERNED = (np.bool_, np.complex64, ml_dtypes.int4)


@pytest.mark.parametrize("dtype", [*DTYPES, *UNPATTERNED], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(1000,), (3, 7, 11), (), (0, 4)], ids=str)
def test_device_arrays_come_back_to_the_host_through_pinned_memory(
    routes: Routes, dtype: Any, shape: tuple[int, ...]
) -> None:
    values = patterned(shape, dtype) if dtype not in UNPATTERNED else None
    if values is None:
        values = (np.arange(int(np.prod(shape))) % 3).astype(dtype).reshape(shape)
    on_device = jax.device_put(values, ACCELERATOR)
    back = tj.to_device(on_device, "cpu")
    assert routes.to_host == 1
    assert back.devices() == {HOST} and back.committed
    assert back.sharding.memory_kind == "device"
    assert back.dtype == values.dtype and back.shape == values.shape
    assert np.asarray(back).tobytes() == values.tobytes()
    assert on_device.devices() == {ACCELERATOR}  # the source stays


@pytest.mark.parametrize("source", ["device memory", "pinned_host memory"])
def test_arrays_come_back_as_ordinary_cpu_arrays(routes: Routes, source: str) -> None:
    """``jax.device_put(pinned, cpu)`` types its result as host memory (``float32<host>``)
    although its sharding says ``device``, and jitted code refuses to mix that with other
    CPU arrays: a GPU run failed so. The route must give what NumPy placed there gives."""
    values = np.arange(1000, dtype=np.float32)
    if source == "device memory":
        on_device = jax.device_put(values, ACCELERATOR)
    else:
        on_device = tj.pin_memory(values, "cpu:1")
    back = tj.to_device(on_device, "cpu")
    weights = tj.to_device(np.full(1000, 2, np.float32), "cpu")
    assert routes.to_host == 1
    assert jax.typeof(back) == jax.typeof(weights)  # the memory space included
    assert back.sharding == weights.sharding and back.committed
    product = jax.jit(lambda a, b: a * b)(back, weights)
    np.testing.assert_array_equal(np.asarray(product), values * 2)


def test_a_pinned_array_of_the_callers_is_copied_not_shared(routes: Routes) -> None:
    # Deleting or donating the caller's pinned array frees its bytes, whoever points at
    # them; only the route's own staging buffers may back the CPU array.
    values = np.arange(1000, dtype=np.float32)
    pinned = tj.pin_memory(values, "cpu:1")
    back = tj.to_device(pinned, "cpu")
    assert back.unsafe_buffer_pointer() != pinned.unsafe_buffer_pointer()
    pinned.delete()
    np.testing.assert_array_equal(np.asarray(back), values)
    staged_back = tj.to_device(jax.device_put(values, ACCELERATOR), "cpu")
    np.testing.assert_array_equal(np.asarray(staged_back), values)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.int4], ids=lambda d: np.dtype(d).name)
def test_pin_memory_copies_numpy_data_once(
    routes: Routes, monkeypatch: pytest.MonkeyPatch, dtype: Any
) -> None:
    """NumPy goes straight into pinned memory: no CPU array is made from it first (a
    second copy that made ``pin_memory`` run at 1.6 GB/s on an H200, 0.16x
    ``jax.device_put``). Sub-byte dtypes, which JAX may pack, are copied as they are."""
    from torch2jax_device._src import placement

    conversions: list[Any] = []
    to_jax = placement.to_jax

    def counting(value: Any, *args: Any, **kwargs: Any) -> Any:
        conversions.append(value)
        return to_jax(value, *args, **kwargs)

    monkeypatch.setattr(placement, "to_jax", counting)
    values = (np.arange(3000) % 7).astype(dtype)
    pinned = tj.pin_memory(values, "cpu:1")
    assert conversions == []
    assert routes.pinned == (1 if dtype is np.float32 else 0)
    assert pinned.sharding.memory_kind == "pinned_host" and pinned.dtype == values.dtype
    values[:] = 0  # a copy: the source may be reused
    np.testing.assert_array_equal(np.asarray(pinned), (np.arange(3000) % 7).astype(dtype))


def test_results_keep_pinned_memory_only_within_the_alias_budget(
    routes: Routes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each result shares its pinned staging bytes while the live ones stay within
    ``ALIAS_BUDGET_BYTES``; past it results are copied out, so live results never fill
    XLA's pinned allocator (a GPU would then copy at 1 GB/s). Freed results give their
    share back."""
    values = np.arange(1024, dtype=np.float32)  # 4 KiB each
    monkeypatch.setattr(host_staging, "ALIAS_BUDGET_BYTES", 3 * values.nbytes)
    held = host_staging.ALIASES.held()
    on_device = [jax.device_put(values + i, ACCELERATOR) for i in range(5)]
    backs = [tj.to_device(array, "cpu") for array in on_device]
    for i, back in enumerate(backs):
        np.testing.assert_array_equal(np.asarray(back), values + i)
    assert host_staging.ALIASES.held() - held == 3 * values.nbytes  # 2 of 5 were copied
    assert routes.to_host == 5
    del backs[:2]
    gc.collect()
    assert host_staging.ALIASES.held() - held == values.nbytes
    again = tj.to_device(on_device[0], "cpu")  # room again: shared
    assert host_staging.ALIASES.held() - held == 2 * values.nbytes
    np.testing.assert_array_equal(np.asarray(again), values)


def test_a_full_pinned_allocator_sends_results_the_slow_way_and_says_so(
    routes: Routes, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = np.arange(1024, dtype=np.float32)
    on_device = jax.device_put(values, ACCELERATOR)
    put = jax.device_put

    def exhausted(arrays: Any, destination: Any, **kwargs: Any) -> Any:
        kinds = destination if isinstance(destination, list) else [destination]
        if any(getattr(kind, "memory_kind", None) == "pinned_host" for kind in kinds):
            raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: out of pinned host memory")
        return put(arrays, destination, **kwargs)

    monkeypatch.setattr(jax, "device_put", exhausted)
    with pytest.warns(tj.PinnedMemoryWarning, match=r"copying 4,096 bytes to .* the slow way"):
        back = tj.to_device(on_device, "cpu")
    assert back.devices() == {HOST}
    np.testing.assert_array_equal(np.asarray(back), values)


def test_a_tree_mixes_the_routes_in_order(routes: Routes) -> None:
    big = np.arange(3000, dtype=np.int32)
    tree = {"a": jax.device_put(big, ACCELERATOR), "b": big + 1, "c": np.array(2.5, np.float32)}
    moved = tj.to_device(tree, "cpu")
    assert routes.to_host == 1
    for name in tree:
        assert moved[name].devices() == {HOST}, name
        np.testing.assert_array_equal(np.asarray(moved[name]), np.asarray(tree[name]))


@pytest.mark.parametrize("dtype", [*DTYPES, np.bool_, np.complex64], ids=lambda d: np.dtype(d).name)
def test_pin_memory_copies_into_pinned_host_memory(routes: Routes, dtype: Any) -> None:
    values = (np.arange(4000) % 5).astype(dtype).reshape(40, 100)[:, ::2]  # non-contiguous
    pinned = tj.pin_memory(values, "cpu:1")
    assert routes.pinned == 1
    assert pinned.sharding.memory_kind == "pinned_host" and pinned.devices() == {ACCELERATOR}
    assert pinned.dtype == values.dtype and pinned.shape == values.shape
    np.testing.assert_array_equal(np.asarray(pinned), values)
    values[0, 0] = 1  # a copy: the source may be reused
    assert np.asarray(pinned)[0, 0] == 0
    moved = tj.to_device(pinned, "cpu:1", non_blocking=True)
    np.testing.assert_array_equal(np.asarray(moved)[1:], values[1:])
    assert moved.sharding.memory_kind == "device"


@pytest.mark.parametrize("shape", [(), (0,), (0, 3)], ids=str)
def test_pin_memory_of_scalars_and_empty_arrays(routes: Routes, shape: tuple[int, ...]) -> None:
    values = np.full(shape, 7, np.float32)
    pinned = tj.pin_memory(torch.from_numpy(values), "cpu:1")
    assert pinned.shape == shape and pinned.sharding.memory_kind == "pinned_host"
    np.testing.assert_array_equal(np.asarray(pinned), values)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=lambda d: np.dtype(d).name)
def test_to_torch_onto_the_cpu_copies_through_pinned_memory(routes: Routes, dtype: Any) -> None:
    values = patterned((3, 50), dtype)
    on_device = jax.device_put(values, ACCELERATOR)
    tensor = tj.to_torch(on_device, "cpu")
    assert routes.to_host == 1
    assert tensor.device == torch.device("cpu")
    assert tensor.view(torch.uint8).numpy().tobytes() == values.tobytes()


def test_to_torch_of_a_cpu_array_still_shares_its_memory(routes: Routes) -> None:
    array = jax.device_put(np.arange(8, dtype=np.float32), HOST)
    tensor = tj.to_torch(array, "cpu")
    assert routes.to_host == 0
    assert tensor.data_ptr() == array.unsafe_buffer_pointer()


def test_to_torch_of_a_deleted_accelerator_array_names_it(routes: Routes) -> None:
    array = jax.device_put(np.arange(8, dtype=np.float32), ACCELERATOR)
    array.delete()
    with pytest.raises(tj.ConversionError, match=r"deleted or donated jax\.Array"):
        tj.to_torch(array, "cpu")  # before the fix: JAX's RuntimeError from the pinned route
    assert routes.to_host == 0


@pytest.mark.parametrize("non_blocking", [False, True])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_the_source_may_change_once_the_pieces_route_returns(
    routes: Routes, kind: str, non_blocking: bool
) -> None:
    # The pieces are copied out of the source before to_device returns, non_blocking or
    # not: the caller may refill its buffer at once (the GPU twin checks the plain route).
    expected = np.arange(3000, dtype=np.float32)
    source: Any = expected.copy() if kind == "numpy" else torch.from_numpy(expected.copy())
    moved = tj.to_device(source, "cpu:1", non_blocking=non_blocking)
    source[:] = -1
    assert routes.pieces == 1
    np.testing.assert_array_equal(np.asarray(moved), expected)


def test_threads_sending_at_once_share_the_pool_without_mixing_pieces(routes: Routes) -> None:
    # Every thread's pieces go through the one pool of pinned buffers: a buffer handed to
    # two transfers at once would put one thread's bytes into the other's array.
    def send(seed: int) -> bool:
        same = True
        for step in range(8):
            values = np.full(1000 + 7 * step, seed * 100 + step, np.int32)  # 4 pieces each
            if step % 2:
                moved = tj.to_device(values, "cpu:1")
            else:
                moved = tj.to_device(tj.to_device(values, "cpu:2"), "cpu")  # pieces, then D2H
            same &= np.asarray(moved).tobytes() == values.tobytes()
        return same

    with ThreadPoolExecutor(4) as threads:
        assert all(threads.map(send, range(4)))
    assert routes.pieces and routes.to_host  # (counted without a lock: not exact)
    for device in jax.devices("cpu")[1:3]:
        _check_pool_bounds(device)
