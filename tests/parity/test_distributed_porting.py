"""DDP habits the port drops or replaces: ``mp.spawn``, the launcher's variables, other
collectives, ``.module`` and ``no_sync``. torch is the oracle.

The two-process jobs: torch's, started by ``mp.spawn`` on gloo; the port, started by
``torch2jax-device run`` called in this process (tests/support/fixtures/spawn_torch.py
and launched_tj.py; the console script's own process is tested with the launcher).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import torch2jax_device as tj
from tests.support.deadlines import deadline
from tests.support.distributed.launch import free_port, launch, results, worker_env

FIXTURES = Path(__file__).resolve().parents[1] / "support" / "fixtures"


def _job(*command: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, *command], capture_output=True, text=True, timeout=deadline(240),
        env=worker_env(OMP_NUM_THREADS="1"),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = results(done.stdout)
    assert len(found) == 2, done.stdout[-3000:] + done.stderr[-3000:]
    return found


@pytest.fixture(scope="module")
def spawned() -> list[dict[str, Any]]:
    return _job(str(FIXTURES / "spawn_torch.py"), str(free_port()))


@pytest.fixture(scope="module")
def launched() -> list[dict[str, Any]]:
    status, out, err = launch(
        "--nproc-per-node", "2", "--cpu-devices", "1", str(FIXTURES / "launched_tj.py")
    )
    assert status == 0, out[-3000:] + err[-3000:]
    return results(out, count=2)


@pytest.mark.idiom("mp-spawn")
def test_launched_workers_get_what_spawned_workers_got(
    spawned: list[dict[str, Any]], launched: list[dict[str, Any]]
) -> None:
    for field in ("rank", "local_rank", "world_size"):
        assert [r[field] for r in launched] == [r[field] for r in spawned], field


@pytest.mark.idiom("dist-env")
def test_the_launchers_variables_are_the_groups_answers(launched: list[dict[str, Any]]) -> None:
    for result in launched:
        assert result["rank"] == result["env_rank"]
        assert result["world_size"] == result["env_world_size"] == 2


@pytest.mark.idiom("dist-other")
def test_all_gather_gathers_the_same(
    spawned: list[dict[str, Any]], launched: list[dict[str, Any]]
) -> None:
    assert [r["gathered"] for r in launched] == [r["gathered"] for r in spawned]


RNG = np.random.default_rng(0)
WEIGHT = RNG.standard_normal((2, 3)).astype(np.float32)  # torch's (out, in)
BIAS = RNG.standard_normal(2).astype(np.float32)
BATCHES = [RNG.standard_normal((4, 3)).astype(np.float32) for _ in range(2)]


def _torch_layer() -> torch.nn.Linear:
    layer = torch.nn.Linear(3, 2)
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(WEIGHT))
        layer.bias.copy_(torch.from_numpy(BIAS))
    return layer


def _nnx_layer() -> nnx.Linear:
    layer = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    layer.kernel[...] = jnp.asarray(WEIGHT.T)
    layer.bias[...] = jnp.asarray(BIAS)
    return layer


@pytest.mark.idiom("ddp-module")
def test_the_wrapped_model_is_the_model() -> None:
    torch_layer = _torch_layer()
    wrapped = torch.nn.DataParallel(torch_layer)
    assert wrapped.module is torch_layer

    model = _nnx_layer()
    mesh = jax.make_mesh((jax.local_device_count(),), ("data",))
    tj.to_device(model, NamedSharding(mesh, P()))  # the DDP step: replicated, in place
    raw_model = model  # what `model.module` becomes: the guide row's line
    x = BATCHES[0]
    # With one GPU, DataParallel moves the layer to cuda:0 and answers there.
    theirs = wrapped(torch.from_numpy(x)).detach().cpu().numpy()
    np.testing.assert_allclose(np.asarray(raw_model(jnp.asarray(x))), theirs, rtol=1e-6)


@pytest.mark.idiom("ddp-no-sync")
def test_accumulated_gradients_are_the_sum_of_the_micro_steps() -> None:
    torch_layer = _torch_layer()
    for x in BATCHES:  # no_sync skips only the all-reduce: the sum is what accumulates
        torch_layer(torch.from_numpy(x)).pow(2).mean().backward()

    def loss_fn(params: dict[str, jax.Array], x: jax.Array) -> jax.Array:
        return jnp.mean((x @ params["kernel"] + params["bias"]) ** 2)

    params = {"kernel": jnp.asarray(WEIGHT.T), "bias": jnp.asarray(BIAS)}
    grads = jax.tree.map(jnp.zeros_like, params)
    for x in BATCHES:
        grads = jax.tree.map(jnp.add, grads, jax.grad(loss_fn)(params, jnp.asarray(x)))
    assert torch_layer.weight.grad is not None and torch_layer.bias.grad is not None
    np.testing.assert_allclose(
        np.asarray(grads["kernel"]).T, torch_layer.weight.grad.numpy(), rtol=1e-5
    )
    np.testing.assert_allclose(np.asarray(grads["bias"]), torch_layer.bias.grad.numpy(), rtol=1e-5)
