"""Default devices: ``with tj.device(...)`` / ``tj.set_default_device`` against torch's."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import pytest
import torch

import torch2jax_device as tj

from .harness import assert_same_outcome, run

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
    def torch_side() -> torch.Tensor:
        torch.set_default_device("meta")
        torch.set_default_device(None)
        return torch.zeros(1)

    def tj_side() -> Any:
        tj.set_default_device("cpu:0")
        tj.set_default_device(None)
        return jnp.zeros(1)

    assert_same_outcome(run(torch_side), run(tj_side))
