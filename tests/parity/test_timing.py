"""Streams, events and profiling: torch's CUDA handles against JAX's synchronous views.

Nothing here measures speed: each test checks that the JAX pattern the guide gives
computes what the torch pattern computes, and waits for it.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

RNG = np.random.default_rng(0)
DATA = RNG.standard_normal((64, 64)).astype(np.float32)


def _torch_work(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ x).sum(0)


@jax.jit
def _jax_work(x: jax.Array) -> jax.Array:
    # torch computes float32 matmuls in full float32 by default (allow_tf32=False); JAX on
    # an Ampere-or-newer GPU uses TF32 unless asked for "highest" (the precision row).
    with jax.default_matmul_precision("highest"):
        return jnp.tanh(x @ x).sum(0)


@pytest.mark.idiom("cuda-event-timing")
def test_timing_waits_for_the_result() -> None:
    x = torch.from_numpy(DATA)
    if torch.cuda.is_available():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        theirs = _torch_work(x.cuda()).cpu()
        end.record()
        torch.cuda.synchronize()
        assert start.elapsed_time(end) >= 0
    else:
        with pytest.raises(RuntimeError):  # torch's CPU build has no CUDA events
            torch.cuda.Event(enable_timing=True)
        theirs = _torch_work(x)
    _jax_work(jnp.asarray(DATA))  # compile first, as the guide says
    start_s = time.perf_counter()
    ours = jax.block_until_ready(_jax_work(jnp.asarray(DATA)))
    ms = (time.perf_counter() - start_s) * 1000
    assert ours.is_ready() and ms >= 0
    np.testing.assert_allclose(np.asarray(ours), theirs.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.idiom("cuda-stream")
def test_work_on_a_side_stream_computes_the_same() -> None:
    x = torch.from_numpy(DATA)
    stream = torch.cuda.Stream() if torch.cuda.is_available() else None
    with torch.cuda.stream(stream):  # None: torch's no-op stream context on the CPU
        theirs = _torch_work(x.cuda() if stream is not None else x).cpu()
    ours = _jax_work(jnp.asarray(DATA))
    np.testing.assert_allclose(np.asarray(ours), theirs.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.idiom("profiler")
def test_a_profiled_block_computes_the_same_and_leaves_a_trace(tmp_path: Path) -> None:
    activities = [torch.profiler.ProfilerActivity.CPU]
    with warnings.catch_warnings():
        # torch's own profiler warns about its CUDA set-up on GPU machines (torch 2.11);
        # what is compared here is the values and the trace, not torch's warnings.
        warnings.simplefilter("ignore")
        with torch.profiler.profile(activities=activities) as prof:
            theirs = _torch_work(torch.from_numpy(DATA))
    with jax.profiler.trace(str(tmp_path)), jax.profiler.TraceAnnotation("step"):
        ours = jax.block_until_ready(_jax_work(jnp.asarray(DATA)))
    np.testing.assert_allclose(np.asarray(ours), theirs.numpy(), rtol=1e-4, atol=1e-4)
    assert prof.key_averages()
    assert any(path.suffix == ".pb" for path in tmp_path.rglob("*"))
