"""The side-by-side harness: run a PyTorch idiom and its torch2jax_device port, compare.

Torch is the oracle: nothing here knows the expected answer. An :class:`Outcome` is
either a value or the exception raised; :func:`normalize` turns tensors, arrays and
devices of either framework into comparable plain data (placement as (type, index),
dtype name, values), and :func:`assert_same_outcome` demands that both sides
succeed with equal normalized values, or both fail, with the port's exception
belonging to torch2jax_device's hierarchy and to the builtin class torch raised.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

import torch2jax_device as tj
from torch2jax_device.porting import catalog


@dataclasses.dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None

    def describe(self) -> str:
        if self.error is not None:
            return f"raised {type(self.error).__name__}: {self.error}"
        return f"returned {normalize(self.value)!r}"


def run(fn: Callable[[], Any]) -> Outcome:
    try:
        return Outcome(value=fn())
    except Exception as error:
        return Outcome(error=error)


def run_snippet(code: str, namespace: dict[str, Any], result: str | None, label: str) -> Outcome:
    """Execute a catalog snippet; the outcome is ``namespace[result]`` or the exception."""

    def execute() -> Any:
        exec(compile(code, f"<{label}>", "exec"), namespace)
        return namespace[result] if result is not None else None

    return run(execute)


def run_idiom(idiom: catalog.Idiom) -> tuple[Outcome, Outcome]:
    """Run a catalog row's ``torch`` and ``tj`` snippets exactly as the guide prints them."""
    torch_outcome = run_snippet(idiom.torch, {"torch": torch}, idiom.result, f"{idiom.id}:torch")
    tj_namespace = {"tj": tj, "jax": jax, "jnp": jnp}
    tj_outcome = run_snippet(idiom.tj, tj_namespace, idiom.result, f"{idiom.id}:tj")
    return torch_outcome, tj_outcome


def placement(device: Any) -> tuple[str, int]:
    """(type, index) of where data lives; torch CPU tensors carry no index: it is 0."""
    if isinstance(device, jax.Device):
        device = tj.device(device)
    return (device.type, 0 if device.index is None else device.index)


def normalize(value: Any) -> Any:
    """Plain, comparable data for a value from either framework."""
    if isinstance(value, torch.Tensor):
        return (
            "array",
            placement(value.device),
            str(value.dtype).removeprefix("torch."),
            value.detach().cpu().tolist(),
        )
    if isinstance(value, jax.Array):
        return ("array", placement(value.device), str(value.dtype), np.asarray(value).tolist())
    if isinstance(value, (torch.device, tj.Device)):
        return ("device", value.type, value.index)
    if isinstance(value, jax.Device):
        device = tj.device(value)
        return ("device", device.type, device.index)
    if isinstance(value, (list, tuple)):
        return [normalize(item) for item in value]
    return value


# The builtin class a port's error must derive from, for each class torch raises.
# torch raises NotImplementedError (a RuntimeError) for device types it was built
# without (mps, xla); the port raises DeviceUnavailableError, a RuntimeError.
_EXPECTED_BASE: dict[type[BaseException], type[BaseException]] = {
    NotImplementedError: RuntimeError,
}


def expected_error_class(torch_error: BaseException) -> type[BaseException]:
    for torch_class in type(torch_error).__mro__:
        if torch_class in _EXPECTED_BASE:
            return _EXPECTED_BASE[torch_class]
        if torch_class.__module__ == "builtins":
            return torch_class
    return Exception


def assert_same_outcome(
    torch_outcome: Outcome,
    tj_outcome: Outcome,
    *,
    torch_source: Any = None,
    tj_source: Any = None,
) -> None:
    """Both succeed with equal normalized values, or both fail alike.

    With ``torch_source``/``tj_source`` (the inputs of a conversion), the results
    must also agree on whether they share memory with their input.
    """
    context = f"torch {torch_outcome.describe()}; torch2jax_device {tj_outcome.describe()}"
    if torch_outcome.error is None:
        assert tj_outcome.error is None, context
        assert normalize(tj_outcome.value) == normalize(torch_outcome.value), context
        if torch_source is not None or tj_source is not None:
            torch_aliases = aliases(torch_outcome.value, torch_source)
            tj_aliases = aliases(tj_outcome.value, tj_source)
            assert tj_aliases == torch_aliases, f"{context}; torch aliases: {torch_aliases}"
        return
    assert tj_outcome.error is not None, context
    assert isinstance(tj_outcome.error, tj.Torch2JaxDeviceError), context
    assert isinstance(tj_outcome.error, expected_error_class(torch_outcome.error)), context


def aliases(result: Any, source: Any) -> bool:
    """Whether ``result`` shares ``source``'s memory (for copy-or-alias comparisons)."""
    return _pointer(result) == _pointer(source)


def _pointer(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return int(value.data_ptr())
    if isinstance(value, jax.Array):
        return int(value.unsafe_buffer_pointer())
    if isinstance(value, np.ndarray):
        return int(value.__array_interface__["data"][0])
    raise TypeError(f"not an array: {type(value).__name__}")
