"""The harness itself: each comparison it makes can fail."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import torch2jax_device as tj

from .harness import Outcome, aliases, assert_same_outcome, normalize, run


def test_equal_placement_dtype_and_values_pass() -> None:
    with tj.device("cpu"):  # torch's default device is the CPU; JAX's, the accelerator
        ours = jnp.zeros(3)
    assert_same_outcome(Outcome(torch.zeros(3)), Outcome(ours))


@pytest.mark.parametrize(
    ("torch_value", "tj_value"),
    [
        (torch.zeros(3), jnp.ones(3)),  # values
        (torch.zeros(3, dtype=torch.int32), jnp.zeros(3)),  # dtype
        (torch.device("cuda", 1), tj.device("cuda", 0)),  # index
        (torch.device("cpu"), tj.device("cpu", 0)),  # unindexed vs indexed device
        (True, False),
    ],
)
def test_a_difference_fails(torch_value: object, tj_value: object) -> None:
    with pytest.raises(AssertionError):
        assert_same_outcome(Outcome(torch_value), Outcome(tj_value))


def test_success_against_failure_fails() -> None:
    error = tj.DeviceUnavailableError("missing")
    with pytest.raises(AssertionError):
        assert_same_outcome(Outcome(1), Outcome(error=error))
    with pytest.raises(AssertionError):
        assert_same_outcome(Outcome(error=RuntimeError("missing")), Outcome(1))


def test_error_outside_the_hierarchy_fails() -> None:
    with pytest.raises(AssertionError):
        assert_same_outcome(Outcome(error=RuntimeError("x")), Outcome(error=RuntimeError("x")))


def test_error_of_another_builtin_class_fails() -> None:
    with pytest.raises(AssertionError):
        assert_same_outcome(
            Outcome(error=TypeError("x")), Outcome(error=tj.InvalidDeviceError("x"))
        )


def test_not_implemented_in_torch_matches_a_runtime_error() -> None:
    assert_same_outcome(
        Outcome(error=NotImplementedError("no mps")),
        Outcome(error=tj.DeviceUnavailableError("no mps")),
    )


def test_array_placement_is_compared() -> None:
    assert normalize(jax.device_put(jnp.zeros(1), jax.devices("cpu")[0]))[1] == ("cpu", 0)
    assert normalize(torch.zeros(1))[1] == ("cpu", 0)


def test_aliasing_is_detected_and_compared() -> None:
    source = np.arange(4.0)
    shared = torch.from_numpy(source)
    copied = torch.tensor(source)
    assert aliases(shared, source)
    assert not aliases(copied, source)
    with pytest.raises(AssertionError):
        assert_same_outcome(Outcome(shared), Outcome(copied), torch_source=source, tj_source=source)


def test_run_captures_exceptions() -> None:
    outcome = run(lambda: tj.device("cuda:01"))
    assert isinstance(outcome.error, tj.InvalidDeviceError)
