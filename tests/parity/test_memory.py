"""Memory and start-up idioms against torch on this machine."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import warnings

import jax.numpy as jnp
import pytest
import torch

import torch2jax_device as tj
from tests.support.deadlines import deadline

from .harness import assert_same_outcome, run


@pytest.mark.idiom("cuda-memory-summary")
def test_memory_summary() -> None:
    theirs, ours = run(torch.cuda.memory_summary), run(tj.cuda.memory_summary)
    if theirs.error is None:
        assert ours.error is None and isinstance(ours.value, str)
        return
    # torch's CPU build fails with an internal KeyError; the port says why instead.
    assert ours.error is not None and "CUDA is not available" in str(ours.error)


@pytest.mark.idiom("cuda-reset-peak")
def test_reset_peak_memory_stats() -> None:
    theirs = run(torch.cuda.reset_peak_memory_stats)
    ours = run(tj.cuda.reset_peak_memory_stats)
    if theirs.error is None:  # a GPU: both reset (a ported loop logging its peak runs on)
        assert ours.error is None, ours.describe()
        assert tj.cuda.max_memory_allocated() == tj.cuda.memory_allocated()
        return
    # torch's CPU build fails with an internal AttributeError; the port says why instead.
    assert isinstance(ours.error, tj.DeviceUnavailableError), ours.describe()


@pytest.mark.idiom("live-arrays")
def test_live_objects_are_found_in_both() -> None:
    tensors = [torch.full((3,), float(i)) for i in range(3)]
    arrays = [jnp.full((3,), float(i)) for i in range(3)]
    gc.collect()
    with warnings.catch_warnings():
        # Walking gc.get_objects() touches torch's deprecated reduce_op alias.
        warnings.simplefilter("ignore", FutureWarning)
        found_tensors = [o for o in gc.get_objects() if torch.is_tensor(o)]
    found_arrays = tj.live_arrays()
    assert all(any(t is f for f in found_tensors) for t in tensors)
    assert all(any(a is f for f in found_arrays) for a in arrays)


@pytest.mark.idiom("select-platforms")
def test_hiding_the_gpu_from_both() -> None:
    code = textwrap.dedent(
        """
        import json, os
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        import torch, torch2jax_device as tj
        tj.configure(platforms="cpu")
        print(json.dumps([torch.cuda.is_available(), tj.cuda.is_available(),
                          tj.available_backends(), str(tj.get_default_device())]))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env,
        timeout=deadline(120), check=True,
    )  # fmt: skip
    torch_sees_cuda, tj_sees_cuda, backends, default = json.loads(result.stdout.splitlines()[-1])
    assert torch_sees_cuda == tj_sees_cuda is False
    assert backends == ["cpu"] and default == "cpu"


@pytest.mark.parametrize("query", ["memory_allocated", "max_memory_allocated", "memory_stats"])
def test_queries_with_a_device_argument(query: str) -> None:
    theirs, ours = (
        run(lambda: getattr(torch.cuda, query)(0)),
        run(lambda: getattr(tj.cuda, query)(0)),
    )
    if torch.cuda.is_available():
        # Two allocators, two figures (tests/gpu/test_memory.py compares them): the same
        # kind of answer.
        assert theirs.error is None and ours.error is None, ours.describe()
        assert isinstance(ours.value, type(theirs.value)) or isinstance(ours.value, dict)
        return
    assert_same_outcome(theirs, ours)


@pytest.mark.parametrize("query", ["mem_get_info", "memory_summary", "reset_peak_memory_stats"])
def test_a_cpu_device_is_refused_with_torchs_error(query: str) -> None:
    theirs = run(lambda: getattr(torch.cuda, query)("cpu"))
    ours = run(lambda: getattr(tj.cuda, query)("cpu"))
    assert_same_outcome(theirs, ours)
    assert isinstance(ours.error, ValueError) and str(ours.error) == str(theirs.error)
