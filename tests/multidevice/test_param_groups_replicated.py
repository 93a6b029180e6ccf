"""tj.optim's parameter groups over a model replicated on 4 simulated CPU devices.

With groups, the optax state holds each hyperparameter as one value per group and each
parameter's group beside its buffers: they are placed with the parameters too, so a
jitted step over a replicated model (``DDP(model)`` in one process) takes them, and
matches the same step on one device.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import torch2jax_device as tj
from torch2jax_device import optim


@nnx.jit
def _step(model: nnx.Linear, optimizer: nnx.Optimizer, x: jax.Array) -> None:
    grads = nnx.grad(lambda m: jnp.mean(m(x) ** 2))(model)
    optimizer.update(model, grads)


def _trained(sharding: Any, flags: dict[str, bool]) -> tuple[nnx.Linear, nnx.Optimizer]:
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    if sharding is not None:
        tj.to_device(model, sharding)
    tx = optim.AdamW(
        [{"params": ["kernel"], "weight_decay": 0.1, **flags}, {"params": ["bias"], "lr": 0.05}],
        lr=0.01,
    )
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    scheduler = optim.lr_scheduler.LambdaLR(optimizer, [lambda e: 0.5**e, lambda e: 1.0])
    x = jnp.arange(24, dtype=jnp.float32).reshape(8, 3) / 10
    if sharding is not None:
        x = jax.device_put(x, NamedSharding(sharding.mesh, PartitionSpec("data")))
    for _ in range(3):
        _step(model, optimizer, x)
        scheduler.step()
    return model, optimizer


#: A group's own amsgrad / fused are per-group flags of the optax state, replicated as
#: the other hyperparameters are.
FLAGS = ({}, {"amsgrad": True}, {"amsgrad": True, "fused": True})


@functools.cache
def _replicated_and_alone(flags: int) -> tuple[tuple[nnx.Linear, nnx.Optimizer], ...]:
    mesh = Mesh(np.array(jax.devices()), ("data",))
    drawn = FLAGS[flags]
    return _trained(NamedSharding(mesh, PartitionSpec()), drawn), _trained(None, drawn)


@pytest.mark.parametrize("flags", range(len(FLAGS)), ids=["plain", "amsgrad", "fused"])
def test_groups_over_a_replicated_model_step_as_on_one_device(flags: int) -> None:
    (model, optimizer), (alone, _) = _replicated_and_alone(flags)
    for leaf in jax.tree.leaves(nnx.state(optimizer)):
        assert leaf.sharding.device_set == set(jax.devices()), leaf
    np.testing.assert_allclose(model.kernel[...], alone.kernel[...], rtol=1e-6)
    np.testing.assert_allclose(model.bias[...], alone.bias[...], rtol=1e-6)


def test_groups_over_a_replicated_model_read_the_rates_of_one_device() -> None:
    (_, optimizer), (_, alone_optimizer) = _replicated_and_alone(0)
    # param_groups reads as torch's groups read, through torch: skips where it is missing
    rates = [[group["lr"] for group in optim.param_groups(o)] for o in (optimizer, alone_optimizer)]
    assert rates == [[0.00125, 0.05]] * 2
