"""Memory statistics, ``empty_cache``, ``live_arrays`` and ``track_arrays``."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import torch2jax_device as tj
from tests.support.gpu_proxy import host_cpu
from torch2jax_device._src import memory as _memory

HAS_CUDA = tj.cuda.is_available()

# Keys JAX's GPU allocator reports (jaxlib's BFC allocator, via Device.memory_stats()).
GPU_STATS = {
    "num_allocs": 12,
    "bytes_in_use": 4096,
    "peak_bytes_in_use": 8192,
    "largest_alloc_size": 2048,
    "bytes_limit": 1 << 30,
    "bytes_reserved": 0,
    "peak_bytes_reserved": 0,
    "bytes_reservable_limit": -1,
    "largest_free_block_bytes": 1 << 29,
    "pool_bytes": 1 << 30,
    "peak_pool_bytes": 1 << 30,
}


def test_torch_style_keys_map_jax_figures() -> None:
    stats = _memory.torch_style_stats(GPU_STATS)
    assert stats["allocated_bytes.all.current"] == 4096
    assert stats["allocated_bytes.all.peak"] == 8192
    assert stats["reserved_bytes.all.current"] == 1 << 30  # pool_bytes before bytes_reserved
    assert stats["reserved_bytes.all.peak"] == 1 << 30
    # num_allocs counts every allocation made: torch's "allocated" count, not the live one.
    assert stats["allocation.all.allocated"] == 12 and "allocation.all.current" not in stats
    assert stats["jax.bytes_reservable_limit"] == -1
    assert all(f"jax.{key}" in stats for key in GPU_STATS)


def test_missing_or_negative_figures_are_left_out() -> None:
    stats = _memory.torch_style_stats({"bytes_in_use": 1, "pool_bytes": -1, "bytes_reserved": 7})
    assert stats["reserved_bytes.all.current"] == 7  # -1 means "unknown" in JAX
    assert "allocated_bytes.all.peak" not in stats


class FakeStats:
    """What Device.memory_stats() would say on a GPU, changed by the test as it goes."""

    def __init__(self, **figures: int) -> None:
        self.figures = dict(GPU_STATS, **figures)

    def __call__(self, device: jax.Device) -> dict[str, int]:
        return dict(self.figures)

    def use(self, in_use: int) -> None:
        self.figures["bytes_in_use"] = in_use
        self.figures["peak_bytes_in_use"] = max(self.figures["peak_bytes_in_use"], in_use)


@pytest.fixture
def cpu0() -> Iterator[jax.Device]:
    device = jax.local_devices(backend="cpu")[0]
    yield device
    _memory._MARKS.clear()  # no reset leaks into the next test


def test_a_preallocated_pool_reports_what_was_handed_out(
    monkeypatch: pytest.MonkeyPatch, cpu0: jax.Device
) -> None:
    # JAX's default: the whole pool (bytes_limit) taken at the first operation.
    monkeypatch.setattr(_memory, "raw_stats", FakeStats())
    stats = _memory.stats(cpu0)
    assert stats["reserved_bytes.all.current"] == stats["reserved_bytes.all.peak"] == 8192
    assert stats["jax.pool_bytes"] == 1 << 30  # the whole pool is still there, under JAX's name


def test_a_growing_pool_is_reserved_as_in_torch(
    monkeypatch: pytest.MonkeyPatch, cpu0: jax.Device
) -> None:
    # tj.configure(preallocate=False): the pool grows as needed, like torch's cache.
    monkeypatch.setattr(
        _memory, "raw_stats", FakeStats(pool_bytes=1 << 20, peak_pool_bytes=2 << 20)
    )
    stats = _memory.stats(cpu0)
    assert stats["reserved_bytes.all.current"] == 1 << 20
    assert stats["reserved_bytes.all.peak"] == 2 << 20


def test_a_reset_peak_starts_from_what_is_in_use(
    monkeypatch: pytest.MonkeyPatch, cpu0: jax.Device
) -> None:
    fake = FakeStats()  # 4096 in use, XLA's lifetime peak 8192
    monkeypatch.setattr(_memory, "raw_stats", fake)
    assert _memory.stats(cpu0)["allocated_bytes.all.peak"] == 8192
    _memory.reset_peaks(cpu0)
    assert _memory.stats(cpu0)["allocated_bytes.all.peak"] == 4096
    fake.use(6000)
    assert _memory.stats(cpu0)["allocated_bytes.all.peak"] == 6000  # seen by this call
    fake.use(5000)
    assert _memory.stats(cpu0)["allocated_bytes.all.peak"] == 6000  # the highest seen since
    fake.use(10_000)  # past XLA's old peak: XLA's own figure is exact again
    fake.use(3000)
    assert _memory.stats(cpu0)["allocated_bytes.all.peak"] == 10_000
    _memory.reset_peaks(cpu0)  # a second reset starts from XLA's new lifetime peak
    assert _memory.stats(cpu0)["allocated_bytes.all.peak"] == 3000
    fake.use(12_000)
    fake.use(3000)
    assert _memory.stats(cpu0)["allocated_bytes.all.peak"] == 12_000


def test_a_peak_between_two_calls_below_the_old_one_is_missed(
    monkeypatch: pytest.MonkeyPatch, cpu0: jax.Device
) -> None:
    # The documented limit: XLA's peak cannot be reset, so a peak no call saw, under the
    # peak before the reset, cannot be told.
    fake = FakeStats()
    monkeypatch.setattr(_memory, "raw_stats", fake)
    _memory.reset_peaks(cpu0)
    fake.use(7000)
    fake.use(4096)
    assert _memory.stats(cpu0)["allocated_bytes.all.peak"] == 4096


class FakeDriver:
    """The CUDA driver calls ``card_memory`` and ``card_total`` make, answering as libcuda."""

    def __init__(self, free: int, total: int, failing: str = "") -> None:
        self.free, self.total, self.failing = free, total, failing
        self.pushed = 0

    def _answer(self, name: str) -> int:
        return 1 if name == self.failing else 0  # CUDA_SUCCESS is 0

    def cuDeviceGet(self, handle: Any, ordinal: int) -> int:
        handle._obj.value = ordinal
        return self._answer("cuDeviceGet")

    def cuDeviceTotalMem_v2(self, total: Any, handle: Any) -> int:
        total._obj.value = self.total
        return self._answer("cuDeviceTotalMem_v2")

    def cuDevicePrimaryCtxRetain(self, context: Any, handle: Any) -> int:
        context._obj.value = 1234
        return self._answer("cuDevicePrimaryCtxRetain")

    def cuDevicePrimaryCtxRelease_v2(self, handle: Any) -> int:
        return 0

    def cuCtxPushCurrent_v2(self, context: Any) -> int:
        answer = self._answer("cuCtxPushCurrent_v2")
        self.pushed += answer == 0
        return answer

    def cuCtxPopCurrent_v2(self, context: Any) -> int:
        self.pushed -= 1
        return 0

    def cuMemGetInfo_v2(self, free: Any, total: Any) -> int:
        free._obj.value, total._obj.value = self.free, self.total
        return self._answer("cuMemGetInfo_v2")


def test_the_card_is_asked_of_the_driver(monkeypatch: pytest.MonkeyPatch, cpu0: jax.Device) -> None:
    driver = FakeDriver(free=100 << 30, total=140 << 30)
    monkeypatch.setattr(_memory, "_cuda_driver", lambda: driver)
    monkeypatch.setattr(_memory, "_cuda_ordinal", lambda device: 0)
    assert _memory.card_memory(cpu0) == (100 << 30, 140 << 30)
    assert _memory.card_total(cpu0) == 140 << 30
    assert driver.pushed == 0  # the context pushed is popped again


@pytest.mark.parametrize(
    "failing", ["cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxPushCurrent_v2", "cuMemGetInfo_v2"]
)
def test_a_failing_driver_call_gives_no_card_figure(
    monkeypatch: pytest.MonkeyPatch, cpu0: jax.Device, failing: str
) -> None:
    driver = FakeDriver(free=1, total=2, failing=failing)
    monkeypatch.setattr(_memory, "_cuda_driver", lambda: driver)
    monkeypatch.setattr(_memory, "_cuda_ordinal", lambda device: 0)
    assert _memory.card_memory(cpu0) is None
    assert driver.pushed == 0


def test_without_the_driver_the_pool_stands_in(
    monkeypatch: pytest.MonkeyPatch, cpu0: jax.Device
) -> None:
    monkeypatch.setattr(_memory, "_DRIVER_LIBRARY", "libcuda-that-does-not-exist.so.1")
    monkeypatch.setattr(_memory, "_driver_loaded", False)
    monkeypatch.setattr(_memory, "_cuda_ordinal", lambda device: 0)
    monkeypatch.setattr(_memory, "raw_stats", FakeStats())
    assert _memory.card_memory(cpu0) is None and _memory.card_total(cpu0) is None
    assert _memory.pool_memory(cpu0) == ((1 << 30) - 4096, 1 << 30)


def test_only_cuda_devices_are_asked_of_the_driver(cpu0: jax.Device) -> None:
    assert _memory.card_memory(cpu0) is None and _memory.card_total(cpu0) is None


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch, cpu0: jax.Device) -> FakeStats:
    """tj.cuda's memory calls against the CPU device, as if it were a GPU with GPU_STATS."""
    fake = FakeStats()
    monkeypatch.setattr(_memory, "raw_stats", fake)
    monkeypatch.setattr(tj.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tj.cuda, "_device", lambda device, kind_first=False: cpu0)
    return fake


def test_a_training_loop_logs_its_peak_per_epoch(fake_gpu: FakeStats) -> None:
    peaks = []
    for epoch_peak in (6000, 5000, 9000):
        tj.cuda.reset_peak_memory_stats()
        fake_gpu.use(epoch_peak)
        peaks.append(tj.cuda.max_memory_allocated())
        fake_gpu.use(4096)
    assert peaks == [6000, 5000, 9000]
    assert tj.cuda.memory_allocated() == 4096
    assert tj.cuda.memory_reserved() == tj.cuda.max_memory_reserved() == 9000
    assert "allocated_bytes.all.peak" in tj.cuda.memory_summary()


def test_mem_get_info_falls_back_to_the_pool(
    fake_gpu: FakeStats, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_memory, "card_memory", lambda device: None)
    assert tj.cuda.mem_get_info() == ((1 << 30) - 4096, 1 << 30)
    monkeypatch.setattr(_memory, "card_memory", lambda device: (5, 10))
    assert tj.cuda.mem_get_info() == (5, 10)


def test_monitoring_never_raises_without_figures(
    fake_gpu: FakeStats, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_memory, "raw_stats", lambda device: {})
    tj.cuda.reset_peak_memory_stats()
    assert tj.cuda.memory_allocated() == tj.cuda.max_memory_allocated() == 0
    assert tj.cuda.memory_reserved() == tj.cuda.max_memory_reserved() == 0
    assert tj.cuda.memory_stats() == {}


def test_cpu_devices_report_no_statistics() -> None:
    assert _memory.raw_stats(tj.resolve("cpu")) == {}


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-GPU behaviour")
def test_without_a_gpu_figures_are_zero_and_queries_raise() -> None:
    assert tj.cuda.memory_allocated() == tj.cuda.max_memory_reserved() == 0
    assert tj.cuda.memory_stats() == {}
    for query in (tj.cuda.mem_get_info, tj.cuda.memory_summary, tj.cuda.reset_peak_memory_stats):
        with pytest.raises(tj.DeviceUnavailableError, match="CUDA is not available"):
            query()
        # The kind of device is checked first, with torch's ValueError and message.
        with pytest.raises(tj.InvalidDeviceError, match=r"^Expected a cuda device, but got: cpu$"):
            query("cpu")


def test_empty_cache_keeps_referenced_arrays() -> None:
    kept = jnp.arange(4.0)
    tj.cuda.empty_cache()
    assert not kept.is_deleted() and float(kept.sum()) == 6.0


def test_live_arrays_cover_every_backend() -> None:
    x = tj.to_device(jnp.ones(3), "cpu")  # JAX's default device may be a GPU
    assert any(a is x for a in tj.live_arrays())
    assert any(a is x for a in tj.live_arrays("cpu"))
    with pytest.raises(tj.DeviceUnavailableError):
        tj.live_arrays("cuda:5")


def test_track_arrays_reports_what_a_block_left_alive() -> None:
    existing = jnp.ones(8)
    cache: list[jax.Array] = []
    with tj.track_arrays() as report:
        cache.append(jnp.zeros((16, 16)))
        cache.append(tj.to_device(np.ones(4, np.float32), "cpu"))
        temporary = jnp.ones(1000) * 2
        del temporary
        gc.collect()
        _ = existing + 0  # a new array, dropped at once when reassigned below
        _ = None
    gc.collect()
    assert sorted(a.shape for a in report.arrays) == [(4,), (16, 16)]
    assert report.nbytes == 16 * 16 * 4 + 4 * 4
    text = str(report)
    assert text.startswith("2 array(s), 1040 bytes left on all devices")
    assert "float32[16, 16] on cpu" in text


def test_track_arrays_on_a_device() -> None:
    keep = []
    with tj.track_arrays("cpu") as report:
        keep.append(jnp.zeros(10, device=tj.resolve("cpu")))  # JAX's default may be a GPU
    assert report.device == host_cpu() and report.nbytes == 40
    assert "left on cpu" in str(report)
