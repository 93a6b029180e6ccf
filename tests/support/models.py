"""Small JAX models and their PyTorch twins, for the model-state tests (not a test module).

A twin has the same attribute names and computes the same function, so the JAX model's
state in the torch layout loads into it, and the twin's state loads into the model.
Equinox is optional: its models are built by functions that import it.

Weights are drawn with NumPy from the seed, not with ``jax.random``: JAX compiles its
random initialisers once per parameter shape, seconds of CPU per test process for
values no test depends on. Outputs go through one ``jit`` per model structure for the
same reason (op-by-op, every operation compiles on its own).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
import torch
from flax import nnx

TOKENS = np.array([[1, 2, 3, 4, 5], [5, 4, 3, 2, 1]])


def numpy_initializer(rng: np.random.Generator, scale: float = 1.0) -> Any:
    """A flax initializer that draws from ``rng``: a normal scaled by the fan-in."""

    def init(key: Any, shape: tuple[int, ...], dtype: Any = np.float32) -> Any:
        del key  # the values come from ``rng``; the key is only what flax hands over
        fan_in = max(1, int(np.prod(shape[:-1])))
        values = rng.standard_normal(shape) * (scale / np.sqrt(fan_in))
        return jax.numpy.asarray(values.astype(dtype))

    return init


class NnxNet(nnx.Module):
    """Every layer with a torch layout rule, in a list and a Sequential."""

    def __init__(self, seed: int) -> None:
        rngs = nnx.Rngs(seed, dropout=seed)
        draw = np.random.default_rng(seed)
        weights = {
            "kernel_init": numpy_initializer(draw),
            "bias_init": numpy_initializer(draw, 0.1),
        }
        self.embed = nnx.Embed(10, 4, embedding_init=numpy_initializer(draw), rngs=rngs)
        self.conv = nnx.Conv(4, 6, (3,), padding="VALID", **weights, rngs=rngs)
        self.layers = nnx.List(
            [nnx.Linear(6, 8, **weights, rngs=rngs), nnx.Linear(8, 8, **weights, rngs=rngs)]
        )
        self.bn = nnx.BatchNorm(8, use_running_average=True, rngs=rngs)
        self.norm = nnx.LayerNorm(8, epsilon=1e-5, rngs=rngs)
        self.rms = nnx.RMSNorm(8, epsilon=1e-5, rngs=rngs)
        self.group = nnx.GroupNorm(8, num_groups=2, epsilon=1e-5, rngs=rngs)
        self.head = nnx.Sequential(nnx.Linear(8, 3, **weights, rngs=rngs))
        self.drop = nnx.Dropout(0.1, rngs=rngs)
        self.temperature = nnx.Param(np.full((3,), 0.5 + seed, np.float32))
        # Running statistics that differ from a fresh torch BatchNorm's.
        self.bn.mean.set_value(jax.numpy.asarray(np.linspace(-1.0, 1.0, 8, dtype=np.float32)))
        self.bn.var.set_value(jax.numpy.asarray(np.linspace(0.5, 2.0, 8, dtype=np.float32)))

    def __call__(self, tokens: Any) -> Any:
        x = self.conv(self.embed(tokens)).mean(axis=1)  # (batch, length, channels)
        for layer in self.layers:
            x = jax.nn.relu(layer(x))
        x = self.group(self.rms(self.norm(self.bn(x))))
        return self.head(x) * self.temperature


class TorchTwin(torch.nn.Module):
    """``NnxNet`` in PyTorch: same names, same function (channels first for the conv)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.conv = torch.nn.Conv1d(4, 6, 3)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(6, 8), torch.nn.Linear(8, 8)])
        self.bn = torch.nn.BatchNorm1d(8)
        self.norm = torch.nn.LayerNorm(8)
        self.rms = torch.nn.RMSNorm(8, eps=1e-5)
        self.group = torch.nn.GroupNorm(2, 8)
        self.head = torch.nn.Sequential(torch.nn.Linear(8, 3))
        self.temperature = torch.nn.Parameter(torch.full((3,), 7.0))

    def forward(self, tokens: Any) -> Any:
        x = self.conv(self.embed(tokens).transpose(1, 2)).mean(dim=2)
        for layer in self.layers:
            x = torch.relu(layer(x))
        x = self.group(self.rms(self.norm(self.bn(x))))
        return self.head(x) * self.temperature


@nnx.jit
def _nnx_forward(model: NnxNet, tokens: Any) -> Any:
    return model(tokens)


def nnx_output(model: NnxNet) -> np.ndarray[Any, Any]:
    return np.asarray(_nnx_forward(model, jax.numpy.asarray(TOKENS)))


def twin_output(twin: TorchTwin) -> np.ndarray[Any, Any]:
    with torch.no_grad():
        output: np.ndarray[Any, Any] = twin.eval()(torch.from_numpy(TOKENS)).numpy()
    return output


INPUT = np.random.default_rng(0).standard_normal((4, 7)).astype(np.float32)


@functools.cache
def _equinox_net_class() -> Any:
    """One class for every ``equinox_net``, so one compiled forward serves them all."""
    import equinox as eqx

    class EquinoxNet(eqx.Module):
        conv: Any
        norm: Any
        mlp: Any

        def __init__(self, key: Any) -> None:
            conv_key, first, second = jax.random.split(key, 3)
            self.conv = eqx.nn.Conv1d(4, 6, 3, key=conv_key)
            self.norm = eqx.nn.LayerNorm(6)
            self.mlp = eqx.nn.Sequential(
                [
                    eqx.nn.Linear(6, 8, key=first),
                    eqx.nn.Lambda(jax.nn.relu),
                    eqx.nn.Linear(8, 3, key=second),
                ]
            )

        def __call__(self, x: Any) -> Any:
            return self.mlp(self.norm(self.conv(x).mean(axis=1)))

    return EquinoxNet


def equinox_net(seed: int) -> Any:
    """A conv, a LayerNorm and a Sequential MLP in Equinox (input: channels x length).

    Equinox draws its initial weights inside the constructor, so the structure is
    traced without running it and every weight is then drawn with NumPy from ``seed``.
    """
    import equinox as eqx

    net = _equinox_net_class()
    shapes = eqx.filter_eval_shape(lambda: net(jax.random.key(seed)))
    draw = np.random.default_rng(seed)

    def weight(leaf: Any) -> Any:
        if not isinstance(leaf, jax.ShapeDtypeStruct):
            return leaf
        return jax.numpy.asarray((draw.standard_normal(leaf.shape) * 0.5).astype(leaf.dtype))

    return jax.tree_util.tree_map(weight, shapes)


class EquinoxTwin(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 6, 3)
        self.norm = torch.nn.LayerNorm(6)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)
        )

    def forward(self, x: Any) -> Any:
        return self.mlp(self.norm(self.conv(x).mean(dim=-1)))


def _call(model: Any, x: Any) -> Any:
    return model(x)


def equinox_output(model: Any) -> np.ndarray[Any, Any]:
    import equinox as eqx

    return np.asarray(eqx.filter_jit(_call)(model, jax.numpy.asarray(INPUT)))


def equinox_twin_output(twin: EquinoxTwin) -> np.ndarray[Any, Any]:
    with torch.no_grad():
        output: np.ndarray[Any, Any] = twin(torch.from_numpy(INPUT)[None])[0].numpy()
    return output
