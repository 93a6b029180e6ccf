"""Every decorator the package exports, on every kind of function.

``@tj.device(...)`` and ``@tj.strict_placement`` run a body inside a scope. A plain
function's body and each step of a generator's run inside it (the caller's code between
steps outside); an ``async`` function is refused with the fix, since its scope would stay
open across awaits for every other task. Each decorator comes with what its scope does
(``observe``: a value while inside, another outside), so a new decorator is a new row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import torch2jax_device as tj

CPUS = jax.devices("cpu")


def _default_device() -> Any:
    return jnp.zeros(1).device


def _guard_raises() -> str:
    """Whether an implicit device-to-device move raises here (strict placement's guard)."""
    committed = tj.to_device(jnp.ones(2), "cpu:1")
    try:
        committed + jnp.ones(2)  # uncommitted cpu:0 meets committed cpu:1
    except (tj.MixedDeviceError, jax.errors.JaxRuntimeError):  # JAX's until the scope ends
        return "raises"
    return "moves"


# name -> (decorator, observe(), value inside, value outside)
DECORATORS: dict[str, tuple[Callable[[Any], Any], Callable[[], Any], Any, Any]] = {
    "device": (tj.device("cpu:3"), _default_device, CPUS[3], CPUS[0]),
    "strict_placement_guard": (
        tj.strict_placement(transfer_guard=True),
        _guard_raises,
        "raises",
        "moves",
    ),
}


@pytest.mark.parametrize("name", list(DECORATORS))
def test_a_function_body_runs_inside(name: str) -> None:
    decorate, observe, inside, outside = DECORATORS[name]

    @decorate
    def body() -> Any:
        return observe()

    assert (body(), observe()) == (inside, outside)


@pytest.mark.parametrize("name", list(DECORATORS))
def test_each_step_of_a_generator_runs_inside_and_the_caller_between_outside(name: str) -> None:
    decorate, observe, inside, outside = DECORATORS[name]

    @decorate
    def steps() -> Any:
        sent = yield observe()
        try:
            yield sent, observe()
        except KeyError:
            yield observe()
        return "done"

    generator = steps()
    assert next(generator) == inside and observe() == outside
    assert generator.send("hello") == ("hello", inside)
    assert generator.throw(KeyError("handled")) == inside and observe() == outside
    with pytest.raises(StopIteration) as stop:
        next(generator)
    assert stop.value.value == "done" and observe() == outside
    closed = steps()
    next(closed)
    closed.close()
    assert observe() == outside


@pytest.mark.parametrize("name", list(DECORATORS))
def test_an_async_function_is_refused_with_the_fix(name: str) -> None:
    decorate = DECORATORS[name][0]

    async def fetch() -> None:
        pass

    async def stream() -> Any:
        yield 1

    for function in (fetch, stream):
        with pytest.raises(tj.ArgumentTypeError, match=r"async function.*Fix: use it as a `with`"):
            decorate(function)


def test_every_exported_decorator_has_a_row() -> None:
    """The package's decorators: a scope object that is also callable on a function."""
    scopes = {"device": tj.device("cpu"), "strict_placement_guard": tj.strict_placement()}
    assert set(scopes) == set(DECORATORS)
    for scope in scopes.values():
        assert hasattr(scope, "__enter__") and callable(scope)
