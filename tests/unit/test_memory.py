"""Memory statistics, ``empty_cache``, ``live_arrays`` and ``track_arrays``."""

from __future__ import annotations

import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import torch2jax_device as tj
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
    assert stats["allocation.all.current"] == 12
    assert stats["jax.bytes_reservable_limit"] == -1
    assert all(f"jax.{key}" in stats for key in GPU_STATS)


def test_missing_or_negative_figures_are_left_out() -> None:
    stats = _memory.torch_style_stats({"bytes_in_use": 1, "pool_bytes": -1, "bytes_reserved": 7})
    assert stats["reserved_bytes.all.current"] == 7  # -1 means "unknown" in JAX
    assert "allocated_bytes.all.peak" not in stats


def test_cpu_devices_report_no_statistics() -> None:
    assert _memory.raw_stats(tj.resolve("cpu")) == {}


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-GPU behaviour")
def test_without_a_gpu_figures_are_zero_and_queries_raise() -> None:
    assert tj.cuda.memory_allocated() == tj.cuda.max_memory_reserved() == 0
    assert tj.cuda.memory_stats() == {}
    for query in (tj.cuda.mem_get_info, tj.cuda.memory_summary, tj.cuda.reset_peak_memory_stats):
        with pytest.raises(tj.DeviceUnavailableError, match="CUDA is not available"):
            query()


def test_empty_cache_keeps_referenced_arrays() -> None:
    kept = jnp.arange(4.0)
    tj.cuda.empty_cache()
    assert not kept.is_deleted() and float(kept.sum()) == 6.0


def test_live_arrays_cover_every_backend() -> None:
    x = jnp.ones(3)
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
        keep.append(jnp.zeros(10))
    assert report.device == tj.device("cpu") and report.nbytes == 40
    assert "left on cpu" in str(report)
