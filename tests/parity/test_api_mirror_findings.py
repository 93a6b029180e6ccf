"""What the mirrored-API oracle (``test_api_mirror.py``) found, one test per fix.

Each took torch's spelling with Python's own ``TypeError`` or ignored it before its fix;
the oracle finds the class again for any new callable, these pin the cases.
"""

from __future__ import annotations

import datetime
import inspect

import jax
import jax.numpy as jnp
import pytest
import torch
from flax import nnx

import torch2jax_device as tj
from torch2jax_device import distributed as dist
from torch2jax_device import optim
from torch2jax_device._src.distributed import process_group


def _not_initialized(call: object) -> None:
    with pytest.raises(tj.DistributedError, match="has not been initialized"):
        call()  # type: ignore[operator]


def test_distributed_calls_take_torchs_default_group_and_async_op() -> None:
    # torch's spellings reach the not-initialized error both frameworks raise
    _not_initialized(lambda: dist.all_reduce(tensor=torch.ones(2), group=None, async_op=False))
    _not_initialized(
        lambda: dist.all_reduce(torch.ones(2), torch.distributed.ReduceOp.SUM, None, False)
    )
    _not_initialized(lambda: dist.barrier(None, False, [0], datetime.timedelta(seconds=5)))
    _not_initialized(lambda: dist.get_rank(group=None))
    _not_initialized(lambda: dist.get_world_size(None))
    _not_initialized(lambda: dist.destroy_process_group(group=None))


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: dist.all_reduce(torch.ones(2), async_op=True), r"async_op=True.*Fix: drop"),
        (lambda: dist.barrier(async_op=True), r"async_op=True.*Fix: drop"),
        (lambda: dist.all_reduce(torch.ones(2), group=object()), r"group=.*Fix: drop group="),
        (lambda: dist.get_rank(group="subgroup"), r"group='subgroup'.*Fix: drop group="),
        (lambda: dist.barrier(device_ids="cuda:0"), r"device_ids='cuda:0'.*list of device"),
        (lambda: dist.init_process_group(store=object()), r"store=.*Fix: drop store="),
        (lambda: dist.init_process_group(group_name="g"), r"group_name='g'.*Fix: drop"),
        (lambda: dist.init_process_group(pg_options=object()), r"pg_options=.*Fix: drop"),
        (
            lambda: dist.init_device_mesh("cpu", (1,), backend_override={0: "gloo"}),
            "backend_override",
        ),
    ],
    ids=[
        "all_reduce-async",
        "barrier-async",
        "all_reduce-group",
        "get_rank-group",
        "barrier-device_ids",
        "store",
        "group_name",
        "pg_options",
        "backend_override",
    ],
)
def test_torch_arguments_without_a_jax_meaning_are_refused_by_name(
    call: object, named: str
) -> None:
    with pytest.raises(tj.DistributedError, match=named):
        call()  # type: ignore[operator]
    assert not dist.is_initialized()


def test_init_process_group_takes_torchs_positional_order() -> None:
    torchs = inspect.signature(torch.distributed.init_process_group).bind(
        "gloo", None, None, -1, -1, None, "", None, "cpu"
    )
    tjs = inspect.signature(dist.init_process_group).bind(
        "gloo", None, None, -1, -1, None, "", None, "cpu"
    )
    assert tjs.arguments["device_id"] == torchs.arguments["device_id"] == "cpu"


def test_init_device_mesh_takes_backend_override_none() -> None:
    count = len(jax.devices("cpu"))
    mesh = dist.init_device_mesh("cpu", (count,), mesh_dim_names=("data",), backend_override=None)
    assert dict(mesh.shape) == {"data": count}


def test_barrier_timeout_bounds_its_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}
    monkeypatch.setattr(process_group, "synchronize", lambda what, **kw: seen.update(kw, what=what))
    dist.barrier(timeout=datetime.timedelta(seconds=7))
    dist_default = dict(seen)
    dist.barrier()
    assert dist_default == {"what": "barrier", "timeout_s": 7.0}
    assert seen == {"what": "barrier", "timeout_s": None}  # None: the group's own


def test_get_local_rank_takes_fallback_rank_as_get_node_local_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert dist.get_local_rank(fallback_rank=3) == torch.distributed.get_node_local_rank(
        fallback_rank=3
    )
    assert dist.get_local_rank(2) == 2
    with pytest.raises(RuntimeError):  # as torch's, without a fallback
        dist.get_local_rank()
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert dist.get_local_rank(fallback_rank=3) == torch.distributed.get_node_local_rank(3) == 1


def _torch_group(optimizer: torch.optim.Optimizer) -> dict[str, object]:
    group = dict(optimizer.param_groups[0])
    del group["params"]
    return group


def _tj_group(transformation: object) -> dict[str, object]:
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    return dict(optim.param_groups(nnx.Optimizer(model, transformation, wrt=nnx.Param))[0])


@pytest.mark.parametrize(
    ("name", "positional"),
    [("SGD", (0.5, 0.9, 0.0, 0.1, True)), ("Adam", (0.5, (0.8, 0.99), 1e-6, 0.1, True)),
     ("AdamW", (0.5, (0.8, 0.99), 1e-6, 0.1, True)), ("RMSprop", (0.5, 0.9, 1e-6, 0.1, 0.9, True))],
)  # fmt: skip
def test_optimizers_take_torchs_positional_hyperparameters(name: str, positional: tuple) -> None:
    torchs = getattr(torch.optim, name)([torch.nn.Parameter(torch.zeros(2))], *positional)
    tjs = getattr(optim, name)([{"params": nnx.Param}], *positional)
    assert _tj_group(tjs) == _torch_group(torchs)


def test_optimizers_take_torchs_params_keyword() -> None:
    torchs = torch.optim.SGD(params=[torch.nn.Parameter(torch.zeros(2))], lr=0.5)
    assert _tj_group(optim.SGD(params=[{"params": nnx.Param}], lr=0.5)) == _torch_group(torchs)
    # maximize and the rest are keyword-only, as torch's: Python's TypeError in both
    with pytest.raises(TypeError, match="positional arguments"):
        torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], 0.1, 0.0, 0.0, 0.0, False, True)
    with pytest.raises(TypeError, match="positional arguments"):
        optim.SGD(None, 0.1, 0.0, 0.0, 0.0, False, True)


def test_optimizer_load_state_dict_takes_torchs_state_dict_keyword() -> None:
    twin = torch.nn.Linear(2, 3)
    torch_optimizer = torch.optim.SGD(twin.parameters(), lr=0.25, momentum=0.5)
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optim.SGD(lr=0.1, momentum=0.9), wrt=nnx.Param)
    optim.load_state_dict(optimizer, model, state_dict=torch_optimizer.state_dict())
    assert optim.param_groups(optimizer)[0]["lr"] == 0.25


def test_the_base_scheduler_raises_the_librarys_not_implemented_error() -> None:
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optim.SGD(lr=0.1), wrt=nnx.Param)
    with pytest.raises(NotImplementedError):  # torch's class
        torch.optim.lr_scheduler.LRScheduler(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))]))
    with pytest.raises(tj.UnsupportedOperationError, match="Fix: use a scheduler"):
        optim.lr_scheduler.LRScheduler(optimizer)


def test_get_device_takes_torchs_input_keyword() -> None:
    assert tj.get_device(input=torch.ones(2)) == torch.get_device(input=torch.ones(2)) == -1


def test_parameter_takes_torchs_defaults_and_refuses_requires_grad_false() -> None:
    empty, torchs = tj.Parameter(), torch.nn.Parameter()
    assert (empty.size(), str(empty.dtype)) == (tuple(torchs.size()), "float32")
    assert tj.Parameter(jnp.ones(2), requires_grad=True).numel() == 2
    with pytest.raises(tj.UnsupportedOperationError, match=r"requires_grad=False.*Fix:"):
        tj.Parameter(jnp.ones(2), requires_grad=False)


def test_parameter_unflattens_any_leaf() -> None:
    """JAX rebuilds pytrees with placeholder leaves; None must not become an empty array."""
    structure = jax.tree.structure(tj.Parameter(jnp.ones(2)))
    assert jax.tree.unflatten(structure, [None]).data is None


_SCHEDULERS = {
    "StepLR": {"step_size": 2},
    "MultiStepLR": {"milestones": [1, 3]},
    "ConstantLR": {"factor": 0.5, "total_iters": 2},
    "LinearLR": {"start_factor": 0.5, "total_iters": 3},
    "ExponentialLR": {"gamma": 0.5},
    "CosineAnnealingLR": {"T_max": 4, "eta_min": 0.01},
    "PolynomialLR": {"total_iters": 4, "power": 2.0},
    "LambdaLR": {"lr_lambda": lambda epoch: 0.5**epoch},
    "OneCycleLR": {"max_lr": 1.0, "total_steps": 10},
}


@pytest.mark.parametrize("name", list(_SCHEDULERS))
def test_scheduler_step_takes_torchs_deprecated_epoch(name: str) -> None:
    """``scheduler.step(epoch)``: the epoch set, the closed form where torch has one, and
    torch's deprecation warning."""
    epochs = [1, 3, 2, 6, 7]
    torch_optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1, momentum=0.9)
    torchs = getattr(torch.optim.lr_scheduler, name)(torch_optimizer, **_SCHEDULERS[name])
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optim.SGD(lr=0.1, momentum=0.9), wrt=nnx.Param)
    tjs = getattr(optim.lr_scheduler, name)(optimizer, **_SCHEDULERS[name])
    torch_rates, tj_rates = [], []
    for epoch in epochs:
        torch_optimizer.step()
        with pytest.warns(UserWarning, match="epoch parameter in `scheduler.step"):
            torchs.step(epoch)
        with pytest.warns(UserWarning, match="epoch parameter in `scheduler.step"):
            tjs.step(epoch)
        torch_rates += torchs.get_last_lr()
        tj_rates += tjs.get_last_lr()
    assert tjs.last_epoch == torchs.last_epoch == epochs[-1]
    assert tj_rates == pytest.approx(torch_rates, rel=1e-6)


def test_plateau_step_takes_torchs_deprecated_epoch() -> None:
    torch_optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    torchs = torch.optim.lr_scheduler.ReduceLROnPlateau(torch_optimizer, patience=0)
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optim.SGD(lr=0.1), wrt=nnx.Param)
    tjs = optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0)
    for scheduler in (torchs, tjs):
        scheduler.step(1.0)
        with pytest.warns(UserWarning, match="epoch parameter"):
            scheduler.step(2.0, epoch=5)
        scheduler.step(3.0)
    assert tjs.last_epoch == torchs.last_epoch == 6
    assert tjs.get_last_lr() == pytest.approx(torchs.get_last_lr())
    with pytest.raises(tj.ArgumentTypeError, match="epoch must be an int"):
        tjs.step(1.0, epoch=2.5)
