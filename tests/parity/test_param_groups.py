"""Several parameter groups, side by side with torch.optim.

The oracle is torch. A nanoGPT-style ``configure_optimizers`` (weight decay for the
parameters of two or more dimensions, none for biases and norms, fused AdamW) and its
port train a tiny transformer block from the same weights on the same batches, with
nanoGPT's own rate schedule set through ``param_groups``; every step's loss must be
torch's. A checkpoint written by torch mid-run resumes the port, and the port's resumes
torch, each ending where the uninterrupted run does. Then what torch refuses, the port
refuses, with the library's error naming the fix.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
import torch.nn.functional as F
from flax import nnx

import torch2jax_device as tj
from torch2jax_device import optim

VOCAB, WIDTH, BATCH, LENGTH = 11, 8, 4, 5
STEPS, RESUMED_AT = 6, 3
LOSS_TOLERANCE = {"rtol": 2e-5, "atol": 1e-6}
#: The state holds float32 hyperparameters: 1 - beta2 is float32's (torch's a double's).
STATE_TOLERANCE = {"rtol": 2e-5, "atol": 2e-6}


class TorchBlock(torch.nn.Module):
    """nanoGPT's shape, small: an embedding, a norm, an MLP with biases, a bias-free head."""

    def __init__(self) -> None:
        super().__init__()
        self.wte = torch.nn.Embedding(VOCAB, WIDTH)
        self.ln = torch.nn.LayerNorm(WIDTH)
        self.fc = torch.nn.Linear(WIDTH, 2 * WIDTH)
        self.proj = torch.nn.Linear(2 * WIDTH, WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx)
        x = x + self.proj(F.gelu(self.fc(self.ln(x))))
        logits = self.head(x)
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


class Block(nnx.Module):
    """The NNX port of ``TorchBlock``."""

    def __init__(self) -> None:
        rngs = nnx.Rngs(0)
        self.wte = nnx.Embed(VOCAB, WIDTH, rngs=rngs)
        self.ln = nnx.LayerNorm(WIDTH, epsilon=1e-5, rngs=rngs)
        self.fc = nnx.Linear(WIDTH, 2 * WIDTH, rngs=rngs)
        self.proj = nnx.Linear(2 * WIDTH, WIDTH, rngs=rngs)
        self.head = nnx.Linear(WIDTH, VOCAB, use_bias=False, rngs=rngs)

    def __call__(self, idx: jax.Array, targets: jax.Array) -> jax.Array:
        x = self.wte(idx)
        x = x + self.proj(jax.nn.gelu(self.fc(self.ln(x)), approximate=False))
        logits = self.head(x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def torch_configure_optimizers(
    model: TorchBlock, weight_decay: float, learning_rate: float, betas: tuple[float, float]
) -> torch.optim.AdamW:
    """nanoGPT's ``GPT.configure_optimizers``, as it is written there."""
    param_dict = {pn: p for pn, p in model.named_parameters() if p.requires_grad}
    decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
    nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
    optim_groups = [
        {"params": decay_params, "weight_decay": weight_decay},
        {"params": nodecay_params, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, fused=True)


def configure_optimizers(
    model: Block, weight_decay: float, learning_rate: float, betas: tuple[float, float]
) -> nnx.Optimizer:
    """The port, line for line: the groups select the model's parameters, and
    ``nnx.Optimizer`` pairs the transformation with the model."""
    decay_params = [p for p in tj.parameters(model) if p.ndim >= 2]
    nodecay_params = [p for p in tj.parameters(model) if p.ndim < 2]
    optim_groups = [
        {"params": decay_params, "weight_decay": weight_decay},
        {"params": nodecay_params, "weight_decay": 0.0},
    ]
    tx = optim.AdamW(optim_groups, lr=learning_rate, betas=betas, fused=True)
    return nnx.Optimizer(model, tx, wrt=nnx.Param)


def get_lr(it: int, learning_rate: float = 6e-3, warmup: int = 2, decay: int = 6) -> float:
    """nanoGPT's schedule: linear warm-up, then cosine decay to a tenth."""
    if it < warmup:
        return learning_rate * (it + 1) / (warmup + 1)
    ratio = (it - warmup) / (decay - warmup)
    return learning_rate / 10 + 0.5 * (1.0 + math.cos(math.pi * ratio)) * learning_rate * 0.9


def batches() -> Iterator[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    while True:
        yield (
            rng.integers(0, VOCAB, (BATCH, LENGTH)),
            rng.integers(0, VOCAB, (BATCH, LENGTH)),
        )


ARGUMENTS = {"weight_decay": 0.1, "learning_rate": 6e-3, "betas": (0.9, 0.95)}


class TorchTrainer:
    def __init__(self, weights: dict[str, Any] | None = None) -> None:
        torch.manual_seed(0)
        self.model = TorchBlock()
        if weights is not None:
            self.model.load_state_dict(weights)
        self.optimizer = torch_configure_optimizers(self.model, **ARGUMENTS)

    def step(self, it: int, x: np.ndarray, y: np.ndarray) -> float:
        for param_group in self.optimizer.param_groups:
            param_group["lr"] = get_lr(it)
        loss = self.model(torch.from_numpy(x), torch.from_numpy(y))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def checkpoint(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}


@nnx.jit
def _train_step(model: Block, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array) -> jax.Array:
    loss, grads = nnx.value_and_grad(lambda model: model(x, y))(model)
    optimizer.update(model, grads)
    return loss


class PortTrainer:
    def __init__(self, weights: dict[str, Any]) -> None:
        self.model = tj.load_state(Block(), weights)
        self.optimizer = configure_optimizers(self.model, **ARGUMENTS)

    def step(self, it: int, x: np.ndarray, y: np.ndarray) -> float:
        for param_group in optim.param_groups(self.optimizer):
            param_group["lr"] = get_lr(it)
        return float(_train_step(self.model, self.optimizer, jnp.asarray(x), jnp.asarray(y)))

    def checkpoint(self) -> dict[str, Any]:
        return {
            "model": tj.state_dict(self.model, layout="torch"),
            "optimizer": optim.state_dict(self.optimizer, self.model),
        }


def _run(trainer: Any, start: int, stop: int) -> list[float]:
    data = batches()
    steps = [next(data) for _ in range(stop)]
    return [trainer.step(it, *steps[it]) for it in range(start, stop)]


@pytest.fixture(scope="module")
def reference() -> tuple[dict[str, Any], list[float]]:
    """The torch run, uninterrupted: its initial weights and every step's loss."""
    trainer = TorchTrainer()
    weights = {name: tensor.clone() for name, tensor in trainer.model.state_dict().items()}
    return weights, _run(trainer, 0, STEPS)


def _saved(checkpoint: dict[str, Any], tmp_path: Path, reader: Any) -> dict[str, Any]:
    path = tmp_path / "ckpt.pt"
    torch.save(checkpoint, path)
    return dict(reader(path))


def test_the_groups_are_torchs(reference: tuple[dict[str, Any], list[float]]) -> None:
    weights, _ = reference
    theirs = TorchTrainer(weights).optimizer.state_dict()["param_groups"]
    ours = optim.state_dict(PortTrainer(weights).optimizer, Block())["param_groups"]
    assert ours == theirs  # keys, order, values, and each group's parameter numbers


def test_the_port_trains_as_torch_step_by_step(
    reference: tuple[dict[str, Any], list[float]],
) -> None:
    weights, losses = reference
    port = PortTrainer(weights)
    np.testing.assert_allclose(_run(port, 0, STEPS), losses, **LOSS_TOLERANCE)
    theirs = TorchTrainer(weights)
    _run(theirs, 0, STEPS)
    for name, tensor in theirs.model.state_dict().items():
        np.testing.assert_allclose(
            np.asarray(tj.state_dict(port.model, layout="torch")[name]), tensor.numpy(),
            rtol=2e-5, atol=2e-6, err_msg=name,
        )  # fmt: skip


def test_a_torch_checkpoint_resumes_the_port(
    reference: tuple[dict[str, Any], list[float]], tmp_path: Path
) -> None:
    weights, losses = reference
    theirs = TorchTrainer(weights)
    _run(theirs, 0, RESUMED_AT)
    checkpoint = _saved(theirs.checkpoint(), tmp_path, lambda p: tj.load(p, map_location="cpu"))
    port = PortTrainer(checkpoint["model"])
    optim.load_state_dict(port.optimizer, port.model, checkpoint["optimizer"])
    resumed = _run(port, RESUMED_AT, STEPS)
    np.testing.assert_allclose(resumed, losses[RESUMED_AT:], **LOSS_TOLERANCE)


def test_the_ports_checkpoint_resumes_torch(
    reference: tuple[dict[str, Any], list[float]], tmp_path: Path
) -> None:
    weights, losses = reference
    port = PortTrainer(weights)
    _run(port, 0, RESUMED_AT)
    checkpoint = _saved(port.checkpoint(), tmp_path, torch.load)
    theirs = TorchTrainer(checkpoint["model"])
    theirs.optimizer.load_state_dict(checkpoint["optimizer"])
    resumed = _run(theirs, RESUMED_AT, STEPS)
    np.testing.assert_allclose(resumed, losses[RESUMED_AT:], **LOSS_TOLERANCE)


# --- selecting parameters, and what is refused --------------------------------------------


def _model() -> Block:
    return Block()


def _groups_of(tx: Any, model: Block) -> list[list[int]]:
    saved = optim.state_dict(nnx.Optimizer(model, tx, wrt=nnx.Param), model)
    return [group["params"] for group in saved["param_groups"]]


def test_a_predicate_a_filter_paths_and_parameters_select_alike() -> None:
    model = _model()
    matrices = [p for p in tj.parameters(model) if p.ndim >= 2]
    vectors = [p for p in tj.parameters(model) if p.ndim < 2]
    by_list = optim.SGD([{"params": matrices}, {"params": vectors}], lr=0.1)
    by_predicate = optim.SGD(
        [{"params": lambda path, p: p.ndim >= 2}, {"params": lambda path, p: p.ndim < 2}],
        lr=0.1,
    )
    by_paths = optim.SGD(
        [
            {"params": ["wte.embedding", "fc.kernel", "proj.kernel", "head.kernel"]},
            {"params": [("ln", "scale"), ("ln", "bias"), "fc.bias", "proj.bias"]},
        ],
        lr=0.1,
    )
    by_filter = optim.SGD(
        [
            {"params": nnx.Not(nnx.Any(nnx.PathContains("bias"), nnx.PathContains("ln")))},
            {"params": nnx.Any(nnx.PathContains("bias"), nnx.PathContains("ln"))},
        ],
        lr=0.1,
    )
    twin = TorchBlock()
    torch_groups = torch_configure_optimizers(twin, **ARGUMENTS).state_dict()["param_groups"]
    expected = [group["params"] for group in torch_groups]
    for tx in (by_list, by_predicate, by_paths, by_filter):
        assert _groups_of(tx, model) == expected


def test_a_groups_list_order_numbers_its_parameters_as_torchs() -> None:
    twin = TorchBlock()
    torch_optimizer = torch.optim.SGD(
        [{"params": [twin.head.weight, twin.wte.weight]}, {"params": [twin.fc.bias]}], lr=0.1
    )
    model = tj.load_state(_model(), twin.state_dict())
    tx = optim.SGD([{"params": ["head.kernel", "wte.embedding"]}, {"params": ["fc.bias"]}], lr=0.1)
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    for tensor in twin.parameters():
        tensor.grad = torch.ones_like(tensor)
    torch_optimizer.step()
    grads = jax.tree.map(jnp.ones_like, nnx.state(model, nnx.Param))
    optimizer.update(model, grads)
    assert (
        optim.state_dict(optimizer, model)["param_groups"]
        == (torch_optimizer.state_dict()["param_groups"])
    )
    # a parameter no group lists does not train, as in torch
    ours = tj.state_dict(model, layout="torch")
    for name, tensor in twin.state_dict().items():
        np.testing.assert_allclose(np.asarray(ours[name]), tensor.numpy(), rtol=1e-6, err_msg=name)


def test_a_parameter_in_two_groups_is_refused_as_torch_does() -> None:
    twin = TorchBlock()
    with pytest.raises(ValueError, match="more than one parameter group"):
        torch.optim.SGD([{"params": [twin.fc.bias]}, {"params": [twin.fc.bias]}], lr=0.1)
    tx = optim.SGD([{"params": ["fc.bias"]}, {"params": lambda path, p: p.ndim == 1}], lr=0.1)
    with pytest.raises(tj.ConfigError, match=r"more than one parameter group.*fc\.bias.*0 and 1"):
        nnx.Optimizer(_model(), tx, wrt=nnx.Param)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        (([],), tj.ConfigError, "empty parameter list"),
        (([{"lr": 0.1}],), tj.ArgumentTypeError, "group 0 has no 'params'"),
        (([{"params": "bias"}],), tj.ArgumentTypeError, r"nnx.PathContains\('bias'\)"),
        (([{"params": [object()]}],), tj.ArgumentTypeError, "list paths"),
        (([jnp.ones(2)],), tj.ArgumentTypeError, "list of parameter groups"),
        (([{"params": ["fc.bias"], "lr": "0.1"}],), tj.ArgumentTypeError, "lr must be a number"),
    ],
)
def test_a_group_torch_or_the_port_cannot_take_is_named(
    arguments: tuple[Any, ...], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        optim.SGD(*arguments, lr=0.1)


#: bfloat16 parameters: fused (one float32 computation per step) and torch's other
#: kernels (each operation rounded to bfloat16) differ here; one bfloat16 step apart.
BFLOAT16_TOLERANCE = {"rtol": 2**-7, "atol": 2**-7}


def _bfloat16_run(kind: str, groups: Any, **keywords: Any) -> tuple[np.ndarray, ...]:
    """The port's Linear of bfloat16 after 4 steps of fixed gradients."""
    model = nnx.Linear(3, 2, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    arguments = () if groups is None else (groups,)
    optimizer = nnx.Optimizer(model, getattr(optim, kind)(*arguments, **keywords), wrt=nnx.Param)
    for kernel, bias in _bfloat16_gradients():
        grads = nnx.grad(
            lambda m, k=kernel, b=bias: jnp.sum(m.kernel[...] * k) + jnp.sum(m.bias[...] * b)
        )(model)
        optimizer.update(model, grads)
    return tuple(np.asarray(leaf[...], np.float32) for leaf in (model.kernel, model.bias))


def _bfloat16_gradients() -> list[tuple[jax.Array, jax.Array]]:
    rng = np.random.default_rng(0)
    return [
        (jnp.asarray(rng.standard_normal((3, 2)), jnp.bfloat16),
         jnp.asarray(rng.standard_normal(2), jnp.bfloat16))
        for _ in range(4)
    ]  # fmt: skip


@pytest.mark.parametrize("kind", ["SGD", "Adam", "AdamW"])
def test_fused_is_honoured_per_group_as_torch_does(kind: str) -> None:
    """Torch reads fused per group: the fused group's step is computed in float32, the
    other's rounded at each operation. The port steps each group as torch does (within
    a bfloat16 step), each exactly as the port's whole optimizer of that kind, and its
    state dict holds torch's groups."""
    keywords: dict[str, Any] = {"lr": 0.1, **({"momentum": 0.9} if kind == "SGD" else {})}
    twin = torch.nn.Linear(3, 2).to(torch.bfloat16)
    model = nnx.Linear(3, 2, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    with torch.no_grad():
        twin.weight.copy_(torch.from_numpy(np.asarray(model.kernel[...], np.float32).T))
        twin.bias.copy_(torch.from_numpy(np.asarray(model.bias[...], np.float32)))
    theirs = getattr(torch.optim, kind)(
        [{"params": [twin.weight], "fused": True}, {"params": [twin.bias]}], **keywords
    )
    for kernel, bias in _bfloat16_gradients():
        weight = np.ascontiguousarray(np.asarray(kernel, np.float32).T)  # as autograd's
        twin.weight.grad = torch.from_numpy(weight).to(torch.bfloat16)
        twin.bias.grad = torch.from_numpy(np.asarray(bias, np.float32)).to(torch.bfloat16)
        theirs.step()
    groups = [{"params": ["kernel"], "fused": True}, {"params": ["bias"]}]
    kernel, bias = _bfloat16_run(kind, groups, **keywords)
    np.testing.assert_allclose(kernel.T, twin.weight.detach().float().numpy(), **BFLOAT16_TOLERANCE)
    np.testing.assert_allclose(bias, twin.bias.detach().float().numpy(), **BFLOAT16_TOLERANCE)
    assert np.array_equal(kernel, _bfloat16_run(kind, None, fused=True, **keywords)[0])
    assert np.array_equal(bias, _bfloat16_run(kind, None, **keywords)[1])
    model = nnx.Linear(3, 2, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, getattr(optim, kind)(groups, **keywords), wrt=nnx.Param)
    ours = optim.state_dict(optimizer, model)["param_groups"]
    assert ours == [{**group, "params": [index]}
                    for index, group in enumerate(theirs.state_dict()["param_groups"])]  # fmt: skip
    assert [list(group) for group in ours] == [
        list(group) for group in theirs.state_dict()["param_groups"]
    ]


@pytest.mark.parametrize("grouped", [True, False], ids=["a-group", "no-groups"])
def test_a_loaded_checkpoints_fused_group_rounds_as_fused(grouped: bool) -> None:
    """Torch's load_state_dict takes the checkpoint's groups, fused included: a port
    made without fused, loaded from a fused torch optimizer's state dict, steps as one
    made fused does, and writes torch's groups."""
    twin = torch.nn.Linear(3, 2).to(torch.bfloat16)
    torch_groups = (
        [{"params": [twin.weight], "fused": True}, {"params": [twin.bias]}]
        if grouped
        else [{"params": [twin.weight, twin.bias], "fused": True}]
    )
    saved = torch.optim.Adam(torch_groups, lr=0.1).state_dict()  # the groups alone

    def stepped(fused: bool | None) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
        model = nnx.Linear(3, 2, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
        groups = [{"params": ["kernel"], "fused": fused}, {"params": ["bias"]}]
        tx = optim.Adam(groups, lr=0.5) if grouped else optim.Adam(lr=0.5, fused=fused)
        optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
        optim.load_state_dict(optimizer, model, saved)
        for kernel, bias in _bfloat16_gradients():
            grads = nnx.grad(
                lambda m, k=kernel, b=bias: jnp.sum(m.kernel[...] * k) + jnp.sum(m.bias[...] * b)
            )(model)
            optimizer.update(model, grads)
        written = optim.state_dict(optimizer, model)["param_groups"]
        return np.asarray(model.kernel[...], np.float32), np.asarray(model.bias[...]), written

    loaded, made = stepped(None), stepped(True)
    assert np.array_equal(loaded[0], made[0]) and np.array_equal(loaded[1], made[1])
    assert loaded[0].tobytes() != _bfloat16_run("Adam", None, lr=0.1)[0].tobytes()
    assert loaded[2] == saved["param_groups"]


@pytest.mark.parametrize(
    ("groups", "fused"),
    [
        pytest.param(({}, {"fused": True}), None, id="the-other-group-fused"),
        pytest.param(({"fused": False}, {}), True, id="the-group-not-fused"),
    ],
)
def test_a_complex_parameter_in_a_group_that_is_not_fused_steps(
    groups: tuple[dict[str, Any], dict[str, Any]], fused: bool | None
) -> None:
    """Torch refuses a complex parameter in a fused group only (the optimizer's fused
    is the default a group may override)."""
    real = torch.nn.Parameter(torch.ones(2))
    wave = torch.nn.Parameter(torch.ones(2, dtype=torch.complex64))
    theirs = torch.optim.Adam(
        [{"params": [wave], **groups[0]}, {"params": [real], **groups[1]}], lr=0.1, fused=fused
    )
    real.grad, wave.grad = torch.ones(2), torch.ones(2, dtype=torch.complex64)
    theirs.step()  # the oracle: taken
    model = Complex()
    tx = optim.Adam(
        [{"params": ["wave"], **groups[0]}, {"params": ["real"], **groups[1]}], lr=0.1, fused=fused
    )
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    optimizer.update(model, jax.tree.map(jnp.ones_like, nnx.state(model, nnx.Param)))
    np.testing.assert_allclose(np.asarray(model.wave[...]), wave.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(model.real[...]), real.detach().numpy(), rtol=1e-6)


@pytest.mark.parametrize("kind", ["Adam", "AdamW"])
def test_a_fused_and_differentiable_group_is_refused_naming_it(kind: str) -> None:
    """Torch's Adam refuses a group that is fused and differentiable at its first step;
    the port refuses it when made, naming the group and the fix."""
    real = torch.nn.Parameter(torch.ones(2))
    theirs = getattr(torch.optim, kind)(
        [{"params": [real], "fused": True}], lr=0.1, differentiable=True
    )
    real.grad = torch.ones(2)
    with pytest.raises(RuntimeError, match="fused=True does not support differentiable"):
        theirs.step()  # the oracle
    with pytest.raises(
        tj.UnsupportedOperationError,
        match=r"parameter group 1 is fused and differentiable.*Fix: set one of them in group 1",
    ):
        getattr(optim, kind)(
            [{"params": ["bias"]}, {"params": ["kernel"], "fused": True}],
            lr=0.1, differentiable=True,
        )  # fmt: skip


#: Where amsgrad is set: (the optimizer's keyword, each group's own key or None).
AMSGRAD_PLACES = {
    "first-group": (False, (True, None)),
    "second-group": (False, (None, True)),
    "all-but-one": (True, (None, False)),
    "no-group": (False, (False, None)),
}


def _amsgrad_groups(
    params: list[Any], keys: tuple[bool | None, ...], **extra: Any
) -> list[dict[str, Any]]:
    groups = [{"params": [param], **extra} for param in params]
    for group, key in zip(groups, keys, strict=True):
        if key is not None:
            group["amsgrad"] = key
    return groups


def _same_state_dicts(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert ours["param_groups"] == theirs["param_groups"]
    assert [list(group) for group in ours["param_groups"]] == [
        list(group) for group in theirs["param_groups"]
    ]  # torch's key order, a group's own keys first
    assert {index: list(state) for index, state in ours["state"].items()} == {
        index: list(state) for index, state in theirs["state"].items()
    }
    for index, values in theirs["state"].items():
        for key, tensor in values.items():
            np.testing.assert_allclose(
                ours["state"][index][key].numpy(), tensor.numpy(), **STATE_TOLERANCE,
                err_msg=f"state[{index}][{key!r}]",
            )  # fmt: skip


@pytest.mark.parametrize("kind", ["Adam", "AdamW"])
@pytest.mark.parametrize("place", list(AMSGRAD_PLACES))
def test_amsgrad_is_honoured_per_group_as_torch_does(kind: str, place: str) -> None:
    """Torch reads amsgrad per group: an amsgrad group divides by the largest second
    moment and keeps max_exp_avg_sq, the others not. The port steps each group as torch
    does, writes torch's state dict, and loads torch's into an optimizer whose groups
    set amsgrad elsewhere (torch's load_state_dict takes the checkpoint's groups)."""
    whole, keys = AMSGRAD_PLACES[place]
    twin = torch.nn.Linear(3, 2)
    model = tj.load_state(nnx.Linear(3, 2, rngs=nnx.Rngs(0)), twin.state_dict())
    theirs = getattr(torch.optim, kind)(
        _amsgrad_groups([twin.weight, twin.bias], keys), lr=0.1, amsgrad=whole
    )
    tx = getattr(optim, kind)(_amsgrad_groups(["weight", "bias"], keys), lr=0.1, amsgrad=whole)
    ours = nnx.Optimizer(model, tx, wrt=nnx.Param)
    rng = np.random.default_rng(0)
    for _ in range(4):  # gradients that shrink and grow: the peak differs from the square
        scale = rng.choice([0.1, 3.0])
        theirs.zero_grad()
        for parameter in (twin.weight, twin.bias):
            parameter.grad = torch.from_numpy(
                (scale * rng.standard_normal(parameter.shape)).astype(np.float32)
            )
        kernel, bias = jnp.asarray(twin.weight.grad.numpy().T), jnp.asarray(twin.bias.grad.numpy())
        grads = nnx.grad(  # exactly the gradients torch is given
            lambda m, k=kernel, b=bias: jnp.sum(m.kernel[...] * k) + jnp.sum(m.bias[...] * b)
        )(model)
        theirs.step()
        ours.update(model, grads)
        state = tj.state_dict(model, layout="torch")
        for name, tensor in twin.state_dict().items():
            np.testing.assert_allclose(state[name].numpy(), tensor.numpy(), **STATE_TOLERANCE)
        _same_state_dicts(optim.state_dict(ours, model), theirs.state_dict())
    # both ways, into optimizers whose groups set amsgrad otherwise
    saved = theirs.state_dict()
    other = torch.nn.Linear(3, 2)
    fresh_theirs = getattr(torch.optim, kind)(
        _amsgrad_groups([other.weight, other.bias], (True, True)), lr=0.5
    )
    fresh_theirs.load_state_dict(optim.state_dict(ours, model))
    _same_state_dicts(optim.state_dict(ours, model), fresh_theirs.state_dict())
    fresh = nnx.Optimizer(
        model,
        getattr(optim, kind)(_amsgrad_groups(["weight", "bias"], (True, True)), lr=0.5),
        wrt=nnx.Param,
    )
    optim.load_state_dict(fresh, model, saved)
    _same_state_dicts(optim.state_dict(fresh, model), saved)


def test_an_amsgrad_group_needs_an_optimizer_that_keeps_the_peak() -> None:
    """A checkpoint with amsgrad in one group only, into a port that has no amsgrad
    group (so no max_exp_avg_sq in its state), is refused naming the group and the fix;
    torch would add the buffer, as the port cannot once the optimizer is made."""
    twin = torch.nn.Linear(3, 2)
    theirs = torch.optim.Adam(_amsgrad_groups([twin.weight, twin.bias], (None, True)), lr=0.1)
    model = tj.load_state(nnx.Linear(3, 2, rngs=nnx.Rngs(0)), twin.state_dict())
    ours = nnx.Optimizer(
        model, optim.Adam(_amsgrad_groups(["weight", "bias"], (None, None)), lr=0.1),
        wrt=nnx.Param,
    )  # fmt: skip
    with pytest.raises(
        tj.StateDictError,
        match=r"parameter group 1 has amsgrad=True.*Fix: .*amsgrad=True\) to resume it, or "
        r"with parameter groups give group 1 'amsgrad': True",
    ):
        optim.load_state_dict(ours, model, theirs.state_dict())


def test_a_groups_amsgrad_is_fixed_once_the_optimizer_is_made() -> None:
    model = _model()
    tx = optim.Adam([{"params": ["fc.bias"], "amsgrad": True}, {"params": ["ln.bias"]}])
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    groups = optim.param_groups(optimizer)
    assert [group["amsgrad"] for group in groups] == [True, False]
    with pytest.raises(tj.UnsupportedOperationError, match=r"param_groups\[1\]\['amsgrad'\].*"
                       r"build it with amsgrad="):  # fmt: skip
        groups[1]["amsgrad"] = True


def test_a_parameter_or_path_the_model_lacks_is_named() -> None:
    other = nnx.Linear(2, 2, rngs=nnx.Rngs(1))
    tx = optim.SGD([{"params": list(tj.parameters(other))}], lr=0.1)
    with pytest.raises(tj.ConfigError, match="none of the model's parameters"):
        nnx.Optimizer(_model(), tx, wrt=nnx.Param)
    model = _model()
    optimizer = nnx.Optimizer(model, optim.SGD([{"params": ["fc.kernal"]}], lr=0.1), wrt=nnx.Param)
    with pytest.raises(tj.ConfigError, match=r"'fc.kernal', which is no parameter.*Fix: "):
        optim.state_dict(optimizer, model)


def _named_groups(twin: TorchBlock, names: list[list[str]]) -> list[dict[str, Any]]:
    parameters = dict(twin.named_parameters())
    return [{"params": [parameters[name] for name in group]} for group in names]


@pytest.mark.parametrize(
    "spelling",
    ["torch", "nnx", "nnx-brackets"],
)
def test_a_group_lists_torchs_dotted_names_or_nnx_paths(spelling: str) -> None:
    """Groups listing the twin's names (``fc.weight``), NNX paths (``fc.kernel``) or NNX
    attribute spellings select what torch's groups of those parameters hold: the state
    dicts' groups are torch's, parameter for parameter."""
    names = [["fc.weight", "head.weight", "wte.weight"], ["ln.weight", "fc.bias"]]
    nnx_names = {"fc.weight": "fc.kernel", "head.weight": "head.kernel",
                 "wte.weight": "wte.embedding", "ln.weight": "ln.scale"}  # fmt: skip
    listed = [
        [name if spelling == "torch" else nnx_names.get(name, name) for name in group]
        for group in names
    ]
    twin = TorchBlock()
    theirs = torch.optim.SGD(_named_groups(twin, names), lr=0.1)
    model = _model()
    tx = optim.SGD([{"params": group} for group in listed], lr=0.1)
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    assert optim.state_dict(optimizer, model)["param_groups"] == theirs.state_dict()["param_groups"]


def test_a_sequentials_paths_take_torchs_numbered_names() -> None:
    """An ``nnx.Sequential``'s ``layers.0.kernel`` is its twin's ``0.weight``: either
    spelling, or ``layers[0].kernel``, lists it."""
    twin = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 2))
    theirs = torch.optim.SGD([{"params": [twin[1].weight, twin[0].bias]}], lr=0.1)
    for spelled in (["1.weight", "0.bias"], ["layers.1.kernel", "layers[0].bias"]):
        model = nnx.Sequential(
            nnx.Linear(2, 3, rngs=nnx.Rngs(0)), nnx.Linear(3, 2, rngs=nnx.Rngs(1))
        )
        optimizer = nnx.Optimizer(model, optim.SGD([{"params": spelled}], lr=0.1), wrt=nnx.Param)
        ours = optim.state_dict(optimizer, model)["param_groups"]
        assert ours == theirs.state_dict()["param_groups"], spelled


def test_a_group_of_another_size_is_refused_as_torch_does() -> None:
    twin = TorchBlock()
    saved = torch.optim.SGD(
        [{"params": [twin.fc.weight]}, {"params": [twin.fc.bias, twin.head.weight]}], lr=0.1
    ).state_dict()
    with pytest.raises(ValueError, match="doesn't match the size of optimizer's group"):
        torch.optim.SGD(
            [{"params": [twin.fc.weight, twin.fc.bias]}, {"params": [twin.head.weight]}], lr=0.1
        ).load_state_dict(saved)  # the oracle
    model = _model()
    tx = optim.SGD([{"params": ["fc.kernel", "fc.bias"]}, {"params": ["head.kernel"]}], lr=0.1)
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    with pytest.raises(tj.StateDictError, match="group 0 has 1 parameters saved and 2 here"):
        optim.load_state_dict(optimizer, model, saved)


def test_param_groups_read_and_write_each_group() -> None:
    model = _model()
    tx = optim.SGD(
        [{"params": ["fc.kernel"], "lr": 0.5, "name": "fc"}, {"params": ["fc.bias"]}],
        lr=0.1,
        momentum=0.9,
    )
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    first, second = optim.param_groups(optimizer)
    assert (first["lr"], second["lr"], first["name"], second["momentum"]) == (0.5, 0.1, "fc", 0.9)
    second["momentum"] = 0.5
    second["note"] = "kept"
    groups = optim.state_dict(optimizer, model)["param_groups"]
    assert (groups[1]["momentum"], groups[1]["note"], groups[0]["name"]) == (0.5, "kept", "fc")
    assert list(groups[0])[:2] == ["lr", "name"]  # the group's own keys first, as torch's
    with pytest.raises(tj.UnsupportedOperationError, match="no 'params'"):
        first["params"]
    with pytest.raises(tj.UnsupportedOperationError, match="build it with foreach="):
        first["foreach"] = True


def test_the_schedulers_take_one_value_per_group() -> None:
    model = _model()
    tx = optim.SGD([{"params": ["fc.kernel"]}, {"params": ["fc.bias"], "lr": 1.0}], lr=0.1)
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    scheduler = optim.lr_scheduler.LambdaLR(optimizer, [lambda e: 0.5**e, lambda e: 1.0])
    scheduler.step()
    assert scheduler.get_last_lr() == [0.05, 1.0]
    assert [group["lr"] for group in optim.param_groups(optimizer)] == [0.05, 1.0]
    with pytest.raises(tj.ConfigError, match="Expected 2 lr_lambdas, but got 1"):
        optim.lr_scheduler.LambdaLR(optimizer, [lambda e: 1.0])
    with pytest.raises(tj.ConfigError, match="expected 2 values for max_lr, got 3"):
        optim.lr_scheduler.OneCycleLR(optimizer, max_lr=[1.0, 1.0, 1.0], total_steps=4)
    with pytest.raises(tj.ConfigError, match="expected 2 min_lrs, got 1"):
        optim.lr_scheduler.ReduceLROnPlateau(optimizer, min_lr=[0.1])


def test_a_tensor_hyperparameter_is_refused_naming_the_fix() -> None:
    """Torch takes ``lr=torch.tensor(0.01)`` (for captured steps); the port keeps every
    hyperparameter in the optax state already, and asks for the number."""
    torch.optim.Adam([torch.nn.Parameter(torch.ones(1))], lr=torch.tensor(0.01))  # taken
    with pytest.raises(tj.ArgumentTypeError, match=r"lr is a Tensor.*Fix: pass lr=float"):
        optim.Adam(lr=torch.tensor(0.01))
    with pytest.raises(tj.ArgumentTypeError, match=r"betas\[0\] is a Array"):
        optim.Adam(lr=0.1, betas=(jnp.float32(0.9), jnp.float32(0.99)))


def test_a_groups_hyperparameter_is_read_one_group_at_a_time() -> None:
    model = _model()
    tx = optim.SGD([{"params": ["fc.kernel"]}, {"params": ["fc.bias"], "lr": 0.5}], lr=0.1)
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    rates = optimizer.opt_state.hyperparams["learning_rate"]
    assert optim.hyperparameter(rates[...][1]) == 0.5
    with pytest.raises(tj.ArgumentTypeError, match=r"one value per parameter group.*\[i\]"):
        optim.hyperparameter(rates)


def test_a_groups_own_initial_lr_is_the_schedulers_base_as_in_torch() -> None:
    twin = TorchBlock()
    theirs = torch.optim.SGD(
        [{"params": [twin.fc.weight], "initial_lr": 0.4}, {"params": [twin.fc.bias]}], lr=0.1
    )
    with pytest.raises(KeyError, match=r"not specified in param_groups\[1\]"):  # the oracle
        torch.optim.lr_scheduler.StepLR(theirs, step_size=1, gamma=0.5, last_epoch=0)
    model = _model()
    tx = optim.SGD([{"params": ["fc.kernel"], "initial_lr": 0.4}, {"params": ["fc.bias"]}], lr=0.1)
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    with pytest.raises(tj.ConfigError, match=r"'initial_lr' is not specified in param_groups\[1\]"):
        optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5, last_epoch=0)
    theirs.param_groups[1]["initial_lr"] = 0.2
    optim.param_groups(optimizer)[1]["initial_lr"] = 0.2
    torch_scheduler = torch.optim.lr_scheduler.StepLR(theirs, step_size=1, gamma=0.5, last_epoch=0)
    scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5, last_epoch=0)
    assert scheduler.state_dict()["base_lrs"] == torch_scheduler.state_dict()["base_lrs"]
    assert scheduler.get_last_lr() == torch_scheduler.get_last_lr()
    assert (
        optim.state_dict(optimizer, model)["param_groups"] == (theirs.state_dict()["param_groups"])
    )


class Complex(nnx.Module):
    def __init__(self) -> None:
        self.real = nnx.Param(jnp.ones(2))
        self.wave = nnx.Param(jnp.ones(2, jnp.complex64))


def test_fused_refuses_a_complex_parameter_a_group_holds_at_its_first_step() -> None:
    real = torch.nn.Parameter(torch.ones(2))
    wave = torch.nn.Parameter(torch.ones(2, dtype=torch.complex64))
    theirs = torch.optim.Adam([{"params": [real]}, {"params": [wave]}], lr=0.1, fused=True)
    real.grad, wave.grad = torch.ones(2), torch.ones(2, dtype=torch.complex64)
    with pytest.raises(RuntimeError, match="floating point"):
        theirs.step()  # the oracle
    model = Complex()
    tx = optim.Adam([{"params": ["real"]}, {"params": ["wave"]}], lr=0.1, fused=True)
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)  # made: torch's is too
    grads = jax.tree.map(jnp.ones_like, nnx.state(model, nnx.Param))
    with pytest.raises(tj.UnsupportedOperationError, match="a parameter is complex"):
        optimizer.update(model, grads)
    alone = Complex()  # in no group, it is never stepped: neither refuses
    tx = optim.Adam([{"params": ["real"]}], lr=0.1, fused=True)
    optimizer = nnx.Optimizer(alone, tx, wrt=nnx.Param)
    optimizer.update(alone, grads)
    assert alone.wave[...].tolist() == [1 + 0j, 1 + 0j]


@pytest.mark.parametrize("saved_fused", [True, None])
def test_a_loaded_checkpoints_fused_decides_whether_a_complex_parameter_steps(
    saved_fused: bool | None,
) -> None:
    """Torch's load_state_dict takes the checkpoint's groups: a complex parameter's group
    fused there makes torch's next step raise, one not fused there steps, whatever the
    optimizer was made with. The port refuses or steps alike."""
    real = torch.nn.Parameter(torch.ones(2))
    wave = torch.nn.Parameter(torch.ones(2, dtype=torch.complex64))
    saved = torch.optim.Adam(
        [{"params": [real]}, {"params": [wave], "fused": saved_fused}], lr=0.1
    ).state_dict()
    theirs = torch.optim.Adam(
        [{"params": [real]}, {"params": [wave], "fused": not saved_fused}], lr=0.1
    )
    theirs.load_state_dict(saved)
    real.grad, wave.grad = torch.ones(2), torch.ones(2, dtype=torch.complex64)
    model = Complex()
    tx = optim.Adam([{"params": ["real"]}, {"params": ["wave"], "fused": not saved_fused}])
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    optim.load_state_dict(optimizer, model, saved)
    grads = jax.tree.map(jnp.ones_like, nnx.state(model, nnx.Param))
    if saved_fused:
        with pytest.raises(RuntimeError, match="floating point"):
            theirs.step()  # the oracle
        with pytest.raises(tj.UnsupportedOperationError, match="a parameter is complex"):
            optimizer.update(model, grads)
    else:
        theirs.step()  # the oracle: taken
        optimizer.update(model, grads)
        np.testing.assert_allclose(np.asarray(model.wave[...]), wave.detach().numpy(), rtol=1e-6)


def test_listed_parameters_are_matched_when_the_optimizer_is_made() -> None:
    """A list of parameters is matched to the model's arrays once (the transformation
    holds no copy of them): one the model replaced since is named."""
    model = _model()
    listed = [p for p in tj.parameters(model) if p.ndim >= 2]
    tx = optim.AdamW([{"params": listed}], lr=0.1)
    tj.load_state(model, tj.state_dict(_model()))  # new arrays in the model
    with pytest.raises(tj.ConfigError, match="replaced since the list was made"):
        nnx.Optimizer(model, tx, wrt=nnx.Param)


@pytest.mark.parametrize("selects", ["an empty list", "a predicate choosing none"])
def test_a_group_that_selects_nothing_is_taken_as_torch_takes_an_empty_group(
    selects: str,
) -> None:
    """Torch takes ``{"params": []}`` (only an empty list of groups raises): the port
    takes a group selecting nothing, and both state dicts agree and load each other."""
    twin = TorchBlock()
    theirs = torch.optim.Adam([{"params": [twin.fc.bias]}, {"params": [], "lr": 0.5}], lr=0.1)
    empty: Any = [] if selects == "an empty list" else (lambda path, p: False)
    groups = [{"params": ["fc.bias"]}, {"params": empty, "lr": 0.5}]
    model = _model()
    optimizer = nnx.Optimizer(model, optim.Adam(groups, lr=0.1), wrt=nnx.Param)
    assert optim.state_dict(optimizer, model) == theirs.state_dict()
    optim.load_state_dict(optimizer, model, theirs.state_dict())
    theirs.load_state_dict(optim.state_dict(optimizer, model))


def test_a_scheduler_over_a_chained_optimizer_names_the_fix_that_matches_torch() -> None:
    """torch clips with clip_grad_norm_ beside its optimizer; chaining the clip before a
    tj.optim optimizer hides its learning rate from a scheduler, which says so and gives
    the fix, and the fix steps as torch's clip_grad_norm_ + StepLR do."""
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    chained = nnx.Optimizer(
        model, optax.chain(optax.clip_by_global_norm(0.5), optim.Adam(lr=0.1)), wrt=nnx.Param
    )
    with pytest.raises(tj.ArgumentTypeError, match=r"not one inside an optax.chain.*Fix: pass"):
        optim.lr_scheduler.StepLR(chained, 1, gamma=0.5)
    twin = torch.nn.Linear(3, 2)
    with torch.no_grad():
        twin.weight.copy_(torch.from_numpy(np.asarray(model.kernel[...]).T.copy()))
        twin.bias.copy_(torch.from_numpy(np.asarray(model.bias[...]).copy()))
    torch_optimizer = torch.optim.Adam(twin.parameters(), lr=0.1)
    torch_scheduler = torch.optim.lr_scheduler.StepLR(torch_optimizer, 1, gamma=0.5)
    optimizer = nnx.Optimizer(model, optim.Adam(lr=0.1), wrt=nnx.Param)
    scheduler = optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    for _ in range(3):
        loss = (twin(torch.from_numpy(x)) ** 2).mean()
        torch_optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(twin.parameters(), 0.5)
        torch_optimizer.step()
        torch_scheduler.step()
        grads = nnx.grad(lambda m: jnp.mean(m(jnp.asarray(x)) ** 2))(model)
        grads = optax.clip_by_global_norm(0.5).update(grads, optax.EmptyState())[0]
        optimizer.update(model, grads)
        scheduler.step()
    np.testing.assert_allclose(model.kernel[...], twin.weight.detach().numpy().T, rtol=1e-5)
    np.testing.assert_allclose(model.bias[...], twin.bias.detach().numpy(), rtol=1e-5)
    assert scheduler.get_last_lr() == torch_scheduler.get_last_lr()
