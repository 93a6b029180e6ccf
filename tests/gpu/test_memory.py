"""tj.cuda's memory figures beside torch.cuda's on a real GPU (issue 22, item 4).

Both frameworks share the card in this process: the card's figures (total, free) must
agree, and each allocator's own figures must move as torch's do when each allocates
the same bytes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

import torch2jax_device as tj

GIB = 2**30


def test_total_memory_is_the_card_as_torch_says() -> None:
    for index in range(torch.cuda.device_count()):
        theirs = torch.cuda.get_device_properties(index).total_memory
        assert tj.cuda.get_device_properties(index).total_memory == theirs
        assert tj.cuda.mem_get_info(index)[1] == torch.cuda.mem_get_info(index)[1]


def test_free_memory_is_the_cards_free_memory() -> None:
    x = jnp.ones(1)  # JAX's pool is taken
    theirs, ours = torch.cuda.mem_get_info(), tj.cuda.mem_get_info()
    # Read a moment apart, by two callers of cudaMemGetInfo: within 64 MiB of each other.
    assert abs(ours[0] - theirs[0]) < 64 * 2**20, (ours, theirs)
    del x


def test_figures_move_as_torchs_when_each_allocates_a_gib() -> None:
    tj.cuda.reset_peak_memory_stats()
    torch.cuda.reset_peak_memory_stats()
    before = tj.cuda.memory_allocated(), torch.cuda.memory_allocated()
    ours = jax.device_put(jnp.zeros(GIB // 4, jnp.float32), tj.resolve("cuda"))
    theirs = torch.zeros(GIB // 4, dtype=torch.float32, device="cuda")
    ours.block_until_ready()
    grown = tj.cuda.memory_allocated() - before[0], torch.cuda.memory_allocated() - before[1]
    assert grown[0] >= GIB and grown[1] >= GIB
    assert tj.cuda.max_memory_allocated() >= tj.cuda.memory_allocated()
    assert tj.cuda.memory_reserved() >= GIB  # what the allocator handed out, not the pool
    assert tj.cuda.memory_reserved() < tj.cuda.memory_stats()["jax.bytes_limit"] or (
        tj.cuda.memory_stats()["jax.pool_bytes"] < tj.cuda.memory_stats()["jax.bytes_limit"]
    )
    del ours, theirs


def test_a_reset_peak_forgets_an_earlier_peak_as_torchs_does() -> None:
    big = jax.device_put(jnp.zeros(GIB // 4, jnp.float32), tj.resolve("cuda"))
    big.block_until_ready()
    peak_with_big = tj.cuda.max_memory_allocated()
    big.delete()  # freed now, not whenever the garbage collector runs
    tj.cuda.synchronize()
    assert tj.cuda.memory_allocated() < peak_with_big
    tj.cuda.reset_peak_memory_stats()
    small = jax.device_put(jnp.zeros(1024, jnp.float32), tj.resolve("cuda"))
    small.block_until_ready()
    assert tj.cuda.max_memory_allocated() < peak_with_big
    assert tj.cuda.max_memory_allocated() >= tj.cuda.memory_allocated()


def test_monitoring_calls_all_answer() -> None:
    tj.cuda.reset_peak_memory_stats()
    stats = tj.cuda.memory_stats()
    assert stats["allocated_bytes.all.peak"] >= stats["allocated_bytes.all.current"]
    assert "reserved_bytes.all.current" in stats
    assert tj.cuda.memory_summary().startswith("JAX memory summary")
