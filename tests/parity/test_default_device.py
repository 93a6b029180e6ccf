"""Default devices: ``with tj.device(...)`` / ``tj.set_default_device`` against torch's."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from typing import Any

import jax
import jax.numpy as jnp
import pytest
import torch

import torch2jax_device as tj
from tests.support import gpu_proxy
from tests.support.deadlines import deadline

from .harness import assert_same_outcome, normalize, run

DEVICES = ["cpu", "cpu:0", "cuda", "cuda:1", "meta"]


def _torch_in_context(spec: str) -> torch.Tensor:
    with torch.device(spec):
        return torch.arange(3.0)


def _tj_in_context(spec: str) -> Any:
    with tj.device(spec):
        return jnp.arange(3.0)


@pytest.mark.idiom("default-device-context")
@pytest.mark.parametrize("spec", [s for s in DEVICES if s != "meta"])
def test_context(spec: str) -> None:
    assert_same_outcome(run(lambda: _torch_in_context(spec)), run(lambda: _tj_in_context(spec)))


@pytest.mark.idiom("default-device-missing")
def test_meta_is_a_documented_difference() -> None:
    assert run(lambda: _torch_in_context("meta")).value.device.type == "meta"
    with pytest.raises(tj.DeviceUnavailableError, match="eval_shape"):
        _tj_in_context("meta")


@pytest.mark.idiom("default-device-set")
@pytest.mark.parametrize("spec", [s for s in DEVICES if s != "meta"])
def test_setter(spec: str) -> None:
    def torch_side() -> torch.Tensor:
        torch.set_default_device(spec)
        return torch.ones(2)

    def tj_side() -> Any:
        tj.set_default_device(spec)
        return jnp.ones(2)

    assert_same_outcome(run(torch_side), run(tj_side))


@pytest.mark.idiom("default-device-get")
@pytest.mark.parametrize("spec", ["cpu", "cuda"])
def test_getter_reports_where_arrays_land(spec: str) -> None:
    def torch_side() -> tuple[torch.device, torch.device]:
        with torch.device(spec):
            return torch.get_default_device(), torch.empty(0).device

    def tj_side() -> tuple[tj.Device, tj.Device]:
        with tj.device(spec):
            return tj.get_default_device(), tj.device(jnp.empty(0).device)

    theirs, ours = run(torch_side), run(tj_side)
    if theirs.error is not None:
        assert_same_outcome(theirs, ours)
        return
    assert ours.error is None, ours.describe()
    # Both report the device new arrays land on; torch CPU tensors carry no index.
    assert ours.value[0] == ours.value[1]
    assert ours.value[0].type == theirs.value[0].type


def test_getter_without_a_default_is_jax_default() -> None:
    assert tj.get_default_device() == tj.device(jnp.zeros(1).device)


def test_setter_none_restores_the_default() -> None:
    """``None`` goes back to each framework's own default, which differ on purpose: torch's
    is the CPU, tj's is JAX's, the accelerator when there is one (known-differences: "Unset
    means JAX's default"); ``set_default_device("cpu")`` asks for torch's habit."""

    def torch_side() -> torch.Tensor:
        torch.set_default_device("meta")
        torch.set_default_device(None)
        return torch.zeros(1)

    jax_default = jnp.zeros(1).device  # JAX's own default (a GPU there is one: cuda:0)

    def tj_side() -> Any:
        tj.set_default_device("cpu:0")
        tj.set_default_device(None)
        return jnp.zeros(1)

    theirs, ours = run(torch_side), run(tj_side)
    assert theirs.error is None and ours.error is None
    assert theirs.value.device == torch.device("cpu")
    assert ours.value.device == jax_default
    assert normalize(ours.value)[2:] == normalize(theirs.value)[2:]  # dtype and values

    def torch_habit() -> Any:
        tj.set_default_device("cpu")
        try:
            return jnp.zeros(1)
        finally:
            tj.set_default_device(None)

    assert_same_outcome(theirs, run(torch_habit))  # the CPU, as torch, when asked


# torch's setter inside a block, every combination, in a fresh process: one of them
# leaves a device mode on torch's stack that set_default_device(None) cannot remove.
_INSIDE_A_BLOCK = textwrap.dedent(
    """
    import itertools, json, torch
    results = {}
    for before, block, inner in itertools.product([None, "cpu", "meta"], ["cpu", "meta"],
                                                  ["cpu", "meta", None]):
        torch.set_default_device(before)
        try:
            with torch.device(block):
                torch.set_default_device(inner)
                inside = torch.zeros(1).device.type
            outcome = [inside, torch.zeros(1).device.type]
        except AssertionError:
            outcome = "AssertionError"
        while torch._C._len_torch_function_stack():  # clean up, whatever was left
            torch._C._pop_torch_function_stack()
        torch.set_default_device(None)
        results[repr((before, block, inner))] = outcome
    print(json.dumps(results))
    """
)


def test_torchs_setter_inside_a_block_is_what_the_docs_say() -> None:
    """Pins torch's behaviour that known-differences describes (tj's own, deferring the
    setting to the block's end, is tested in tests/multidevice/test_devices.py)."""
    result = subprocess.run(
        [sys.executable, "-c", _INSIDE_A_BLOCK],
        capture_output=True, text=True, timeout=deadline(120), check=True,
    )  # fmt: skip
    outcomes = json.loads(result.stdout.splitlines()[-1])
    assert len(outcomes) == 18
    for key, outcome in outcomes.items():
        before, block, inner = ast.literal_eval(key)
        if before is not None:  # a default set before the block: torch's mode stack refuses
            assert outcome == "AssertionError", key
        elif inner is not None:  # applied at once inside the block, dropped when it ends
            assert outcome == [inner, "cpu"], key
        else:  # no effect inside; the block's device stays in effect after it ends
            assert outcome == [block, block], key


def test_the_proxy_mode_is_a_gpu_machines_placement() -> None:
    """``TORCH2JAX_DEVICE_TEST_PROXY=1`` (tests/support/gpu_proxy.py) stands a second CPU
    device in for the GPU: JAX's default is off the CPU torch uses, ``tj.device("cpu")``
    is the host's first CPU device, and torch's tensors alias there, as on a GPU machine."""
    if not gpu_proxy.requested():
        pytest.skip(f"the proxy mode's own check: run with {gpu_proxy.PROXY_ENV}=1")
    host = jax.local_devices(backend="cpu")[0]
    assert not gpu_proxy.jax_default_is_torch_cpu()
    assert jnp.zeros(1).device != host and tj.get_default_device() != gpu_proxy.host_cpu()
    assert tj.resolve("cpu") == host == gpu_proxy.host_cpu().jax_device
    tensor = torch.arange(64.0)
    shared = tj.to_jax(tensor)
    assert shared.device == host and shared.unsafe_buffer_pointer() == tensor.data_ptr()
    moved = tj.to_device(shared)  # onto the stand-in accelerator: a copy
    assert moved.device == jnp.zeros(1).device
    assert moved.unsafe_buffer_pointer() != tensor.data_ptr()
