"""Strict placement on 4 simulated CPU devices, side by side with torch's device errors.

torch's CPU build has one CPU device, but it enforces the same rule between the CPU and
its ``meta`` device: an operation on a CPU tensor and a meta tensor raises a
``RuntimeError``, except for 0-d CPU tensors, which torch treats as numbers. Here
``cpu:1`` plays the accelerator and NumPy data the host; the rule and the error class
must be torch's, the message torch's CUDA message.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import torch2jax_device as tj
from tests.parity.harness import assert_same_outcome, run

TORCH_MESSAGE = r"^Expected all tensors to be on the same device, but found at least two devices"


@pytest.fixture(autouse=True)
def _guard_off_afterwards() -> Any:
    yield
    tj.set_strict_placement(False)


def on(device: str, values: Any = (1.0, 2.0, 3.0)) -> jax.Array:
    return tj.to_device(jnp.asarray(values, jnp.float32), device)


@tj.strict_placement
def step(params: Any, batch: Any) -> jax.Array:
    return (params["w"] * batch).sum()


# torch: "accelerator" tensors on meta, host tensors on the CPU; tj: cpu:1 and NumPy.
RULE_CASES: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
    "same device": (
        lambda: torch.ones(3, device="meta") * torch.ones(3, device="meta"),
        lambda: step({"w": on("cpu:1")}, on("cpu:1")),
    ),
    "host batch": (
        lambda: torch.ones(3, device="meta") * torch.ones(3),
        lambda: step({"w": on("cpu:1")}, np.ones(3, np.float32)),
    ),
    "host torch batch": (
        lambda: torch.ones(3, device="meta") * torch.ones(3),
        lambda: step({"w": on("cpu:1")}, torch.ones(3)),
    ),
    "0-d host value": (
        lambda: torch.ones(3, device="meta") * torch.tensor(2.0),
        lambda: step({"w": on("cpu:1")}, np.float32(2.0)),
    ),
    "0-d host array": (
        lambda: torch.ones(3, device="meta") * torch.tensor(2.0),
        lambda: step({"w": on("cpu:1")}, np.array(2.0, np.float32)),
    ),
    "python number": (
        lambda: torch.ones(3, device="meta") * 2.0,
        lambda: step({"w": on("cpu:1")}, 2.0),
    ),
    "0-dim CPU tensor": (
        lambda: torch.ones(3, device="meta") * torch.tensor(2.0),
        lambda: tj.strict_placement(lambda w, s: w * float(s))(on("cpu:1"), torch.tensor(2.0)),
    ),
    # JAX moves an uncommitted scalar where the committed arrays are, as torch a 0-dim one.
    "uncommitted 0-d array": (
        lambda: torch.ones(3, device="meta") * torch.tensor(2.0),
        lambda: step({"w": on("cpu:1")}, jnp.float32(2.0)),
    ),
    "1-dim CPU tensor": (
        lambda: torch.ones(3, device="meta") * torch.ones(1),
        lambda: step({"w": on("cpu:1")}, torch.ones(1)),
    ),
}


@pytest.mark.idiom("strict-placement")
@pytest.mark.parametrize("case", list(RULE_CASES))
def test_the_rule_is_torchs(case: str) -> None:
    theirs, ours = RULE_CASES[case]
    torch_outcome, tj_outcome = run(theirs), run(ours)
    # torch's meta results have no values to compare: compare success or the error.
    if torch_outcome.error is None:
        assert tj_outcome.error is None, tj_outcome.describe()
    else:
        assert_same_outcome(torch_outcome, tj_outcome)


@pytest.mark.idiom("strict-placement")
def test_the_error_is_torchs_message_with_paths_line_and_fix() -> None:
    with pytest.raises(tj.MixedDeviceError, match=TORCH_MESSAGE + r", cpu:1 and cpu!") as caught:
        step({"w": on("cpu:1")}, np.ones(3, np.float32))
    message = str(caught.value)
    assert "args[0]['w'] is on cpu:1; args[1] is on cpu" in message
    assert "arguments of step, called at " in message and "test_placement_strict.py:" in message
    assert 'step({"w": on("cpu:1")}, np.ones(3, np.float32))' in message  # the line itself
    assert "Fix: move the data explicitly first, e.g. batch = tj.to_device(batch" in message
    # JAX itself would have moved the batch silently:
    assert float(step.__wrapped__({"w": on("cpu:1")}, np.ones(3, np.float32))) == 6.0


@pytest.mark.idiom("strict-placement")
def test_modules_and_uncommitted_arrays_in_the_arguments_count() -> None:
    model = tj.to_device(nnx.Linear(3, 1, rngs=nnx.Rngs(0)), "cpu:2")

    @tj.strict_placement()
    def forward(model: nnx.Linear, x: jax.Array) -> jax.Array:
        return model(x)

    assert forward(model, on("cpu:2")[None]).shape == (1, 1)
    with pytest.raises(tj.MixedDeviceError, match=r"cpu:2 and cpu:0!.*args\[1\] is on cpu:0"):
        forward(model, jnp.ones((1, 3)))  # uncommitted, on the default device: JAX would move it
    torch_model = torch.nn.Linear(3, 1)
    with pytest.raises(tj.MixedDeviceError, match="cpu:2 and cpu!"):
        tj.strict_placement(lambda m, t: None)(model, torch_model)


@pytest.mark.idiom("strict-placement")
def test_devices_meeting_in_a_block_raise_torchs_error_with_the_line() -> None:
    with pytest.raises(tj.MixedDeviceError, match=TORCH_MESSAGE + r", cpu:0 and cpu:2!") as caught:
        with tj.strict_placement():
            on("cpu:0") + on("cpu:2")  # committed to two devices: JAX raises its own error
    assert "met at " in str(caught.value) and 'on("cpu:0") + on("cpu:2")' in str(caught.value)
    assert isinstance(caught.value.__cause__, ValueError)  # JAX's, kept as the cause
    assert "Received incompatible devices" in str(caught.value.__cause__)


@pytest.mark.idiom("strict-placement")
def test_the_transfer_guard_catches_what_jax_moves_silently() -> None:
    with tj.device("cpu:3"):
        loose = jnp.ones(5)  # uncommitted on cpu:3; shapes unique to this test (see below)
    with tj.strict_placement():
        assert float((on("cpu:0", np.ones(5)) * loose).sum()) == 5.0  # the guard is opt-in
    with pytest.raises(tj.MixedDeviceError, match=TORCH_MESSAGE + r", cpu:0 and cpu:3!"):
        with tj.strict_placement(transfer_guard=True):
            on("cpu:0", np.ones(5)) + loose
    with tj.strict_placement(transfer_guard=True):
        moved = tj.to_device(loose, "cpu:0") + on("cpu:0", np.ones(5))  # explicit: allowed
        moved = jax.device_put(moved, tj.resolve("cpu:1"))
    assert moved.devices() == {tj.resolve("cpu:1")}
    assert (on("cpu:0", np.ones(5)) + loose).devices() == {tj.resolve("cpu:0")}  # guard gone


def test_the_guard_misses_calls_that_already_ran_without_it() -> None:
    # JAX (0.10.2) skips the device-to-device check for a jitted call (operators included)
    # that already ran with the same input placements while the guard was off: turn
    # strict placement on before the code first runs (documented).
    with tj.device("cpu:3"):
        loose = jnp.ones(7)
    assert (on("cpu:0", np.ones(7)) + loose).devices() == {tj.resolve("cpu:0")}
    with tj.strict_placement(transfer_guard=True):
        assert (on("cpu:0", np.ones(7)) + loose).devices() == {tj.resolve("cpu:0")}


def test_the_guards_false_positives_say_what_happened() -> None:
    with pytest.raises(tj.MixedDeviceError, match=r"JAX moved an array it made itself.*jax#25396"):
        with tj.strict_placement(transfer_guard=True):
            jnp.zeros(3, device=tj.resolve("cpu:2"))  # built on the default device first
    with tj.strict_placement(transfer_guard=True), tj.device("cpu:2"):
        assert jnp.zeros(3).devices() == {tj.resolve("cpu:2")}  # the documented way around


def test_other_errors_leave_the_block_unchanged() -> None:
    with pytest.raises(TypeError, match="incompatible shapes") as caught:
        with tj.strict_placement(transfer_guard=True):
            on("cpu:0") + on("cpu:0", (1.0, 2.0))
    assert not isinstance(caught.value, tj.Torch2JaxDeviceError)


@pytest.mark.idiom("strict-placement-process")
def test_the_process_wide_switch_covers_every_thread() -> None:
    with tj.device("cpu:3"):
        loose = jnp.ones(6)
    tj.set_strict_placement(True)
    errors: list[BaseException] = []

    def elsewhere() -> None:
        try:
            on("cpu:0", np.ones(6)) + loose
        except Exception as error:
            errors.append(error)

    worker = threading.Thread(target=elsewhere)
    worker.start()
    worker.join()
    assert len(errors) == 1 and "Disallowed device-to-device transfer" in str(errors[0])
    assert isinstance(errors[0], RuntimeError)  # JAX's own, outside strict blocks
    with pytest.raises(tj.MixedDeviceError, match=TORCH_MESSAGE):
        tj.strict_placement(lambda: on("cpu:0", np.ones(6)) - loose)()
    assert tj.to_device(loose, "cpu:0").devices() == {tj.resolve("cpu:0")}  # explicit: fine
    tj.set_strict_placement(False)
    assert (on("cpu:0", np.ones(6)) + loose).devices() == {tj.resolve("cpu:0")}


def test_arrays_on_the_cpu_warn_only_when_the_default_is_an_accelerator() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tj.device("cpu:1"):  # a CPU default: running on the CPU is expected
            assert float(step({"w": on("cpu:1")}, on("cpu:1"))) == 14.0
