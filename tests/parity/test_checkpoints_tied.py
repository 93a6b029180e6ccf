"""Tied weights side by side with PyTorch: one array under several names.

torch lists a tied parameter (``b.weight = a.weight``), or a module registered twice,
under every name in ``state_dict()``, and its strict ``load_state_dict`` wants them all;
a ``torch.save`` of a tied model holds each name. ``tj.state_dict(model,
layout="torch")`` lists an NNX model's shared variable under each of its paths, and
``tj.load_state`` takes a twin's state holding them all (or, as a safetensors file saved
by ``safetensors.torch.save_model`` does, one of them). The oracle is the twin: the
same ties built in torch, its names, its strict load, its outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.torch
import torch
from flax import nnx

import torch2jax_device as tj

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def _shared_variable(rngs: nnx.Rngs) -> Any:
    class Tied(nnx.Module):
        def __init__(self) -> None:
            self.a = nnx.Linear(4, 4, rngs=rngs)
            self.b = nnx.Linear(4, 4, rngs=rngs)
            self.b.kernel = self.a.kernel

        def __call__(self, x: Any) -> Any:
            return self.b(self.a(x))

    return Tied()


def _shared_variable_twin() -> torch.nn.Module:
    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.b = torch.nn.Linear(4, 4)
            self.b.weight = self.a.weight

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x))

    return Tied()


def _shared_module(rngs: nnx.Rngs) -> Any:
    class Twice(nnx.Module):
        def __init__(self) -> None:
            self.a = nnx.Linear(4, 4, rngs=rngs)
            self.mid = nnx.Linear(4, 4, rngs=rngs)
            self.b = self.a

        def __call__(self, x: Any) -> Any:
            return self.b(self.mid(self.a(x)))

    return Twice()


def _shared_module_twin() -> torch.nn.Module:
    class Twice(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.mid = torch.nn.Linear(4, 4)
            self.b = self.a

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.mid(self.a(x)))

    return Twice()


def _tied_in_a_list(rngs: nnx.Rngs) -> Any:
    class Stack(nnx.Module):
        def __init__(self) -> None:
            self.layers = nnx.List([nnx.Linear(4, 4, rngs=rngs) for _ in range(3)])
            self.layers[2].kernel = self.layers[0].kernel

        def __call__(self, x: Any) -> Any:
            for layer in self.layers:
                x = layer(x)
            return x

    return Stack()


def _tied_in_a_list_twin() -> torch.nn.Module:
    class Stack(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])
            self.layers[2].weight = self.layers[0].weight

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = layer(x)
            return x

    return Stack()


def _tied_in_a_container(kind: str) -> Callable[[nnx.Rngs], Any]:
    """Two Linears in a container of ``kind``, the second's kernel the first's; a plain
    Python container holds them as data (``nnx.data``, or a module with
    ``pytree=False``), where the walk over the graph must step through it too."""

    def build(rngs: nnx.Rngs) -> Any:
        layers = [nnx.Linear(4, 4, rngs=rngs) for _ in range(2)]
        layers[1].kernel = layers[0].kernel
        if kind == "plain dict":
            return _PlainDict({"0": layers[0], "1": layers[1]})
        return _NoPytree(layers) if kind == "list, pytree=False" else _PlainList(layers)

    return build


class _PlainList(nnx.Module):
    layers: list[Any] = nnx.data()

    def __init__(self, layers: list[Any]) -> None:
        self.layers = layers

    def __call__(self, x: Any) -> Any:
        return self.layers[1](self.layers[0](x))


class _PlainDict(nnx.Module):
    layers: dict[str, Any] = nnx.data()

    def __init__(self, layers: dict[str, Any]) -> None:
        self.layers = layers

    def __call__(self, x: Any) -> Any:
        return self.layers["1"](self.layers["0"](x))


class _NoPytree(nnx.Module, pytree=False):
    def __init__(self, layers: list[Any]) -> None:
        self.layers = layers

    def __call__(self, x: Any) -> Any:
        return self.layers[1](self.layers[0](x))


def _tied_in_a_container_twin(kind: str) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        class Twin(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                layers = [torch.nn.Linear(4, 4) for _ in range(2)]
                layers[1].weight = layers[0].weight
                self.layers: Any = (
                    torch.nn.ModuleDict({"0": layers[0], "1": layers[1]})
                    if kind == "plain dict"
                    else torch.nn.ModuleList(layers)
                )

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                first, second = (
                    self.layers[k] for k in (("0", "1") if kind == "plain dict" else (0, 1))
                )
                return second(first(x))

        return Twin()

    return build


#: Each way to tie, built in NNX and in torch.
TIES: dict[str, tuple[Callable[[nnx.Rngs], Any], Callable[[], torch.nn.Module]]] = {
    "shared variable": (_shared_variable, _shared_variable_twin),
    "module registered twice": (_shared_module, _shared_module_twin),
    "tie inside a list": (_tied_in_a_list, _tied_in_a_list_twin),
    **{
        f"tie inside a {kind}": (_tied_in_a_container(kind), _tied_in_a_container_twin(kind))
        for kind in ("plain list", "plain dict", "list, pytree=False")
    },
}
X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)


def _outputs(
    model: Any, twin: torch.nn.Module
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    with torch.no_grad():
        theirs = twin(torch.from_numpy(X)).numpy()
    return np.asarray(model(jnp.asarray(X))), theirs


@pytest.mark.idiom("save-model-torch-twin")
@pytest.mark.parametrize("tie", sorted(TIES))
def test_the_torch_layout_lists_a_tie_under_every_name_and_the_twin_loads_it_strictly(
    tie: str,
) -> None:
    build, build_twin = TIES[tie]
    model, twin = build(nnx.Rngs(0)), build_twin()
    ours = tj.state_dict(model, layout="torch")
    theirs = twin.state_dict()
    assert list(ours) == list(theirs)  # every name, in torch's order
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in theirs.items()}
    result = twin.load_state_dict(ours, strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    np.testing.assert_allclose(*_outputs(model, twin), **TOLERANCE)


@pytest.mark.idiom("load-model-state")
@pytest.mark.parametrize("tie", sorted(TIES))
@pytest.mark.parametrize("source", ["state dict", "torch.save", "save_model", "tj.save_file"])
@pytest.mark.parametrize("device", [None, "auto"])  # "auto": a safetensors file read by plan
def test_a_tied_twins_state_loads_into_the_nnx_model(
    tie: str, source: str, device: str | None, tmp_path: Path
) -> None:
    build, build_twin = TIES[tie]
    twin = build_twin()
    state: Any = twin.state_dict()
    if source == "torch.save":
        state = tmp_path / "twin.pt"
        torch.save(twin.state_dict(), state)
    elif source == "save_model":  # keeps one name of each tie, as Hugging Face files do
        state = tmp_path / "twin.safetensors"
        safetensors.torch.save_model(twin, str(state))
        assert len(safetensors.torch.load_file(str(state))) < len(twin.state_dict())
    elif source == "tj.save_file":  # every name, each in full
        state = tmp_path / "every_name.safetensors"
        tj.save_file(dict(twin.state_dict()), state)
    model = tj.load_state(build(nnx.Rngs(1)), state, device=device)
    np.testing.assert_allclose(*_outputs(model, twin), **TOLERANCE)


@pytest.mark.idiom("load-model-state")
def test_a_tie_given_two_different_values_is_refused() -> None:
    """torch's load_state_dict copies each name into the one parameter: the last wins,
    silently. The NNX model has one array for both names, so tj refuses."""
    build, build_twin = TIES["shared variable"]
    state = build_twin().state_dict()
    state["b.weight"] = state["b.weight"] + 1  # no longer the same tensor
    model = build(nnx.Rngs(0))
    before = np.asarray(model.a.kernel[...])
    with pytest.raises(tj.StateDictError, match=r"'a.weight' and 'b.weight' are one tied array"):
        tj.load_state(model, state)
    np.testing.assert_array_equal(np.asarray(model.a.kernel[...]), before)  # unchanged


@pytest.mark.idiom("load-model-state")
def test_a_tie_held_under_no_name_is_missing() -> None:
    build, build_twin = TIES["shared variable"]
    state = build_twin().state_dict()
    del state["a.weight"], state["b.weight"]
    with pytest.raises(RuntimeError, match=r"Missing key\(s\).*a\.weight"):
        build_twin().load_state_dict(state)
    # Both layouts share the biases' names: either names the array as missing.
    with pytest.raises(tj.StateDictError, match=r"Missing key\(s\): 'a\.(weight|kernel)' \("):
        tj.load_state(build(nnx.Rngs(0)), state)
