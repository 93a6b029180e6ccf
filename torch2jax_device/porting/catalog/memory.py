"""Catalog rows, section "Memory": torch.cuda's memory statistics and cache.

The figures come from two different allocators (torch's and XLA's), so the side-by-side
suite compares success and failure here (``result`` unset); ``tests/gpu/test_memory.py``
compares the figures themselves on a GPU.
"""

from __future__ import annotations

from ..idiom import Idiom

SECTION = "Memory"

ROWS: tuple[Idiom, ...] = (
    Idiom(
        id="cuda-memory-allocated",
        section=SECTION,
        title="Bytes in use",
        torch="allocated = torch.cuda.memory_allocated()",
        jax='allocated = jax.local_devices(backend="cuda")[0].memory_stats()["bytes_in_use"]',
        tj="allocated = tj.cuda.memory_allocated()",
        torch_api=("torch.cuda.memory_allocated",),
        tj_api=("tj.cuda.memory_allocated",),
        rewrite="rename",
    ),
    Idiom(
        id="cuda-max-memory-allocated",
        section=SECTION,
        title="Peak bytes in use",
        torch="peak = torch.cuda.max_memory_allocated()",
        jax='peak = jax.local_devices(backend="cuda")[0].memory_stats()["peak_bytes_in_use"]',
        tj="peak = tj.cuda.max_memory_allocated()",
        notes=(
            "Since the last `reset_peak_memory_stats()`: exact once XLA's lifetime peak "
            "grows past the one at the reset, else the highest figure a memory call saw."
        ),
        torch_api=("torch.cuda.max_memory_allocated",),
        tj_api=("tj.cuda.max_memory_allocated",),
        rewrite="rename",
    ),
    Idiom(
        id="cuda-memory-reserved",
        section=SECTION,
        title="Bytes held by the allocator",
        torch="reserved = torch.cuda.memory_reserved()",
        jax='reserved = jax.local_devices(backend="cuda")[0].memory_stats()["pool_bytes"]',
        tj="reserved = tj.cuda.memory_reserved()",
        notes=(
            "Growing as needed (`tj.configure(preallocate=False)`), JAX's pool, as torch's "
            "cache; preallocated (JAX's default), the part of the pool ever handed out "
            '(`peak_bytes_in_use`): the whole pool is `memory_stats()["jax.pool_bytes"]`.'
        ),
        torch_api=("torch.cuda.memory_reserved",),
        tj_api=("tj.cuda.memory_reserved",),
        rewrite="rename",
    ),
    Idiom(
        id="cuda-max-memory-reserved",
        section=SECTION,
        title="Peak bytes held by the allocator",
        torch="peak = torch.cuda.max_memory_reserved()",
        jax='peak = jax.local_devices(backend="cuda")[0].memory_stats()["peak_pool_bytes"]',
        tj="peak = tj.cuda.max_memory_reserved()",
        torch_api=("torch.cuda.max_memory_reserved",),
        tj_api=("tj.cuda.max_memory_reserved",),
        rewrite="rename",
    ),
    Idiom(
        id="cuda-memory-stats",
        section=SECTION,
        title="All allocator statistics",
        torch="stats = torch.cuda.memory_stats()",
        jax='stats = jax.local_devices(backend="cuda")[0].memory_stats()',
        tj="stats = tj.cuda.memory_stats()",
        notes="torch's key names for what JAX reports, then JAX's own as `jax.<key>`.",
        torch_api=("torch.cuda.memory_stats",),
        tj_api=("tj.cuda.memory_stats",),
        rewrite="rename",
    ),
    Idiom(
        id="cuda-mem-get-info",
        section=SECTION,
        title="Free and total GPU memory",
        torch="free, total = torch.cuda.mem_get_info()",
        jax=(
            'stats = jax.local_devices(backend="cuda")[0].memory_stats()\n'
            'free = stats["bytes_limit"] - stats["bytes_in_use"]'
        ),
        tj="free, total = tj.cuda.mem_get_info()",
        notes=(
            "The card, from the CUDA driver as in torch (memory JAX preallocated counts as "
            "used); JAX's pool (`bytes_limit`) when `libcuda.so.1` cannot be loaded."
        ),
        torch_api=("torch.cuda.mem_get_info",),
        tj_api=("tj.cuda.mem_get_info",),
        rewrite="rename",
    ),
    Idiom(
        id="cuda-memory-summary",
        section=SECTION,
        title="Readable memory report",
        torch="print(torch.cuda.memory_summary())",
        jax='print(jax.local_devices(backend="cuda")[0].memory_stats())',
        tj="print(tj.cuda.memory_summary())",
        runs=False,
        torch_api=("torch.cuda.memory_summary",),
        tj_api=("tj.cuda.memory_summary",),
        rewrite="rename",
    ),
    Idiom(
        id="cuda-reset-peak",
        section=SECTION,
        title="Reset the peak counters",
        torch="torch.cuda.reset_peak_memory_stats()",
        jax="# impossible: peak_bytes_in_use lasts for the process",
        tj="tj.cuda.reset_peak_memory_stats()",
        notes=(
            "XLA's own peak cannot be reset: the library records it and tracks the peak "
            "since (see `max_memory_allocated`)."
        ),
        runs=False,
        torch_api=("torch.cuda.reset_peak_memory_stats",),
        tj_api=("tj.cuda.reset_peak_memory_stats",),
        rewrite="rename",
    ),
    Idiom(
        id="cuda-empty-cache",
        section=SECTION,
        title="Release cached memory",
        torch="torch.cuda.empty_cache()",
        jax="gc.collect(); jax.clear_caches()",
        tj="tj.cuda.empty_cache()",
        notes=(
            "Drops unreachable arrays and compiled programs; the BFC pool stays reserved. "
            "Only `tj.configure(allocator='platform')` returns memory to the driver."
        ),
        torch_api=("torch.cuda.empty_cache",),
        tj_api=("tj.cuda.empty_cache",),
        rewrite="rename",
    ),
    Idiom(
        id="live-arrays",
        section=SECTION,
        title="What is still alive (leak hunting)",
        torch="tensors = [o for o in gc.get_objects() if torch.is_tensor(o)]",
        jax="arrays = jax.live_arrays()  # default backend only",
        tj="arrays = tj.live_arrays()  # or: with tj.track_arrays(device) as report: ...",
        notes="`tj.track_arrays` reports what a block left alive on a device, with bytes.",
        runs=False,
    ),
)
