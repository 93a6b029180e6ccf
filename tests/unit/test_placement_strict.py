"""Strict placement in one process with one CPU device: what passes, and its switches."""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import torch2jax_device as tj
from torch2jax_device._src.strict import pins_to_cpu


def test_one_device_and_host_data_is_torchs_cpu_world() -> None:
    @tj.strict_placement
    def step(params: dict[str, Any], batch: Any) -> jax.Array:
        return (params["w"] * jnp.asarray(batch)).sum()

    params = tj.to_device({"w": jnp.ones(3)}, "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about on a CPU-only machine
        assert float(step(params, np.ones(3, np.float32))) == 3.0
        assert float(step(params, torch.ones(3))) == 3.0
        assert float(step(params, batch=jnp.ones(3))) == 3.0
    assert step.__name__ == "step" and step.__wrapped__ is not None  # functools.wraps


def test_decorator_forms_and_scope_object() -> None:
    scope = tj.strict_placement(transfer_guard=True)
    assert isinstance(scope, tj.StrictPlacement) and scope.transfer_guard
    assert tj.strict_placement()(lambda: 1)() == 1
    with scope as entered:
        assert entered is scope
        with scope:  # nests, and restores what it changed
            assert jax.config.jax_transfer_guard_device_to_device == "disallow"
        assert jax.config.jax_transfer_guard_device_to_device == "disallow"


def test_process_wide_switch_sets_and_clears_jaxs_guard() -> None:
    assert jax.config.jax_transfer_guard_device_to_device in (None, "allow")
    tj.set_strict_placement(True)
    try:
        assert jax.config.jax_transfer_guard_device_to_device == "disallow"
        assert float(tj.to_device(np.ones(2, np.float32), "cpu").sum()) == 2.0
    finally:
        tj.set_strict_placement(False)
    assert jax.config.jax_transfer_guard_device_to_device == "allow"


@pytest.mark.parametrize(
    ("inputs", "default", "expected"),
    [
        ({"cpu"}, "gpu", True),  # insitubatch#88: committed host data, GPU default
        ({"cpu"}, "tpu", True),
        ({"cpu", "gpu"}, "gpu", False),  # JAX raises for these itself
        ({"gpu"}, "gpu", False),
        ({"cpu"}, "cpu", False),  # a CPU machine runs on the CPU
        (set(), "gpu", False),  # uncommitted inputs follow the default device
    ],
)
def test_when_committed_inputs_pin_a_computation_to_the_cpu(
    inputs: set[str], default: str, expected: bool
) -> None:
    assert pins_to_cpu(inputs, default) is expected


def test_errors_that_are_not_about_devices_pass_through() -> None:
    with pytest.raises(ZeroDivisionError):
        with tj.strict_placement():
            1 / 0  # noqa: B018
