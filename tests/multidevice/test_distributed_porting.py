"""DataParallel and SyncBatchNorm, ported to one process driving 4 devices with a mesh.

torch (one CPU process) is the oracle: ``DataParallel`` computes what the module
computes on the whole batch, and ``SyncBatchNorm`` normalizes with the whole batch's
statistics; the port splits the batch over the mesh and must give the same numbers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import torch2jax_device as tj

RNG = np.random.default_rng(0)
BATCH = RNG.standard_normal((8, 3)).astype(np.float32) * 3 + 1
WEIGHT = RNG.standard_normal((2, 3)).astype(np.float32)
BIAS = RNG.standard_normal(2).astype(np.float32)


def _mesh() -> jax.sharding.Mesh:
    return jax.make_mesh((jax.local_device_count(),), ("data",))


@pytest.mark.idiom("dist-data-parallel")
def test_one_process_every_device() -> None:
    layer = torch.nn.Linear(3, 2)
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(WEIGHT))
        layer.bias.copy_(torch.from_numpy(BIAS))
    theirs = torch.nn.DataParallel(layer)(torch.from_numpy(BATCH)).detach().numpy()

    mesh = _mesh()
    params = jax.device_put(
        {"kernel": jnp.asarray(WEIGHT.T), "bias": jnp.asarray(BIAS)}, NamedSharding(mesh, P())
    )
    forward = jax.jit(lambda p, x: x @ p["kernel"] + p["bias"])
    ours = forward(params, tj.to_device(BATCH, NamedSharding(mesh, P("data"))))
    assert len(ours.sharding.device_set) == jax.local_device_count() == 4
    np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.idiom("sync-batchnorm")
def test_batch_statistics_over_the_whole_sharded_batch() -> None:
    norm = torch.nn.BatchNorm1d(3)
    sync = torch.nn.SyncBatchNorm.convert_sync_batchnorm(torch.nn.Sequential(norm))
    assert isinstance(sync[0], torch.nn.SyncBatchNorm)
    theirs = norm.train()(torch.from_numpy(BATCH)).detach().numpy()  # one process: the batch

    model = nnx.BatchNorm(3, momentum=0.9, epsilon=norm.eps, rngs=nnx.Rngs(0))
    batch = tj.to_device(BATCH, NamedSharding(_mesh(), P("data")))

    @nnx.jit
    def normalize(model: nnx.BatchNorm, x: jax.Array) -> jax.Array:
        return model(x)

    ours = normalize(model, batch)
    assert len(ours.sharding.device_set) == 4  # each device holds 2 rows
    np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-5, atol=1e-5)
