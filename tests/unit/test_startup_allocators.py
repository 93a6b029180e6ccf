"""The allocators ``tj.configure`` and ``doctor`` accept are the ones this jaxlib accepts.

jaxlib 0.11 added ``XLA_PYTHON_CLIENT_ALLOCATOR=address``; the library asks jaxlib which
names it takes rather than assuming a version. No torch here: this file runs on every
Python the library supports (CONTRIBUTING.md's jax 0.11 check has no torch).
"""

from __future__ import annotations

import os

import pytest
from jaxlib import xla_client

from torch2jax_device._src.allocators import accepted_allocators, allocator_problem

CANDIDATES = ("default", "platform", "bfc", "cuda_async", "vmm", "address", "cuda-async", "BFC")


def jaxlib_accepts(name: str, monkeypatch: pytest.MonkeyPatch) -> bool:
    """The oracle: jaxlib's own GPU plugin options, built with the variable set."""
    with monkeypatch.context() as patch:
        for variable in ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION"):
            patch.delenv(variable, raising=False)
        patch.setenv("XLA_PYTHON_CLIENT_ALLOCATOR", name)
        try:
            xla_client.generate_pjrt_gpu_plugin_options()
        except ValueError as error:
            assert "XLA_PYTHON_CLIENT_ALLOCATOR" in str(error)
            return False
    return True


@pytest.mark.parametrize("name", CANDIDATES)
def test_an_allocator_is_accepted_exactly_when_jaxlib_accepts_it(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    accepted = jaxlib_accepts(name.lower(), monkeypatch)
    assert (name.lower() in accepted_allocators()) == accepted
    problem = allocator_problem(name, "XLA_PYTHON_CLIENT_ALLOCATOR")
    if name in accepted_allocators():
        assert problem is None
    else:
        assert problem is not None
        assert f"unknown allocator {name!r}; JAX accepts default, platform, bfc" in problem


def test_asking_jaxlib_leaves_the_environment_alone() -> None:
    before = dict(os.environ)
    accepted_allocators.cache_clear()
    assert accepted_allocators()[:5] == ("default", "platform", "bfc", "cuda_async", "vmm")
    assert dict(os.environ) == before
