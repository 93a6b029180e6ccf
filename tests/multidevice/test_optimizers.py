"""tj.optim over a model replicated on 4 simulated CPU devices (``DDP(model)`` in one process).

Torch keeps an optimizer's state with its parameters; optax makes its scalars (the
step count, injected hyperparameters) on the default device, and a jitted step that
mixes them with replicated parameters is refused. tj.optim's optimizers place them
beside the parameters; the step then matches the same step on one device.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import torch2jax_device as tj
from torch2jax_device import optim

OPTIMIZERS = {
    "sgd": lambda: optim.SGD(lr=0.1, momentum=0.9),
    "adamw": lambda: optim.AdamW(lr=0.01),
    "rmsprop": lambda: optim.RMSprop(lr=0.01, momentum=0.5),
}


@nnx.jit
def _step(model: nnx.Linear, optimizer: nnx.Optimizer, x: jax.Array) -> None:
    grads = nnx.grad(lambda m: jnp.mean(m(x) ** 2))(model)
    optimizer.update(model, grads)


def _trained(name: str, sharding: Any) -> tuple[nnx.Linear, nnx.Optimizer]:
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    if sharding is not None:
        tj.to_device(model, sharding)
    optimizer = nnx.Optimizer(model, OPTIMIZERS[name](), wrt=nnx.Param)
    scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    x = jnp.arange(24, dtype=jnp.float32).reshape(8, 3) / 10
    if sharding is not None:
        x = jax.device_put(x, NamedSharding(sharding.mesh, PartitionSpec("data")))
    for _ in range(3):
        _step(model, optimizer, x)
        scheduler.step()
    return model, optimizer


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_replicated_model_steps_as_on_one_device(name: str) -> None:
    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated = NamedSharding(mesh, PartitionSpec())
    model, optimizer = _trained(name, replicated)
    alone, alone_optimizer = _trained(name, None)
    for leaf in jax.tree.leaves(nnx.state(optimizer)):
        assert leaf.sharding.device_set == set(mesh.devices.flat), leaf
    np.testing.assert_allclose(model.kernel[...], alone.kernel[...], rtol=1e-6)
    pytest.importorskip("torch")  # the state dicts are torch's, of torch tensors
    ours = optim.state_dict(optimizer, model)
    theirs = optim.state_dict(alone_optimizer, alone)
    assert ours["param_groups"] == theirs["param_groups"]
    for index, values in theirs["state"].items():
        for key, tensor in values.items():
            np.testing.assert_allclose(ours["state"][index][key], tensor, rtol=1e-6)
