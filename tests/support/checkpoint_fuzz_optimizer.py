"""The checkpoint fuzzer's optimizer draws: a torch optimizer's state dict saved, changed, loaded.

An :class:`OptimizerDraw` is a model of drawn layers (``checkpoint_fuzz_state``'s) and
its twin, a torch optimizer (SGD with momentum, Adam, AdamW, RMSprop, amsgrad in every
group or in one, fused in one) stepped on the twin, its ``state_dict()`` changed as
checkpoints go wrong (a parameter's state dropped, a buffer of another shape or dtype, a
group dropped) and written by ``torch.save`` or passed as it is. ``judge_optimizer``
loads it both ways: the oracle is ``optimizer.load_state_dict(torch.load(p))`` on a fresh twin's
optimizer, tj's ``tj.optim.load_state_dict(optimizer, model, tj.load(p))``; then each
side's ``state_dict()`` must match (groups, the state's keys, each buffer's dtype, shape
and bits), and tj's, loaded into a fresh torch optimizer, must come back from its
``state_dict()`` as tj wrote it. Where torch raises, tj must raise its own error naming
the fix; a buffer of another shape, which torch loads and fails on at the first step, tj
refuses at load (row ``optimizer-buffer-shape-checked``).
"""

from __future__ import annotations

import copy
import dataclasses
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flax import nnx

import torch2jax_device as tj
from tests.support import fuzz_runs
from tests.support.checkpoint_fuzz_oracle import Row
from tests.support.checkpoint_fuzz_state import Layer, Net, draw_layers, twin
from tests.support.fuzz_runs import Different, Explained
from torch2jax_device import optim

#: ``(torch.optim class, keywords)``: the optimizers and the state each keeps.
KINDS = {
    "SGD": ("SGD", {"lr": 0.1, "momentum": 0.9}),
    "Adam": ("Adam", {"lr": 0.01}),
    "Adam-amsgrad": ("Adam", {"lr": 0.01, "amsgrad": True}),
    "Adam-amsgrad-one-group": ("Adam", {"lr": 0.01}),
    "AdamW-amsgrad-one-group": ("AdamW", {"lr": 0.01, "amsgrad": True}),
    "Adam-fused-one-group": ("Adam", {"lr": 0.01}),
    "AdamW": ("AdamW", {"lr": 0.01, "weight_decay": 0.1}),
    "RMSprop": ("RMSprop", {"lr": 0.01, "momentum": 0.5, "centered": True}),
}
#: Keys of the first group alone, by kind: amsgrad in one group (torch keeps
#: max_exp_avg_sq for that group's parameters only), or out of one; fused in one.
FIRST_GROUP = {
    "Adam-amsgrad-one-group": {"amsgrad": True},
    "AdamW-amsgrad-one-group": {"amsgrad": False},
    "Adam-fused-one-group": {"fused": True},
}
CHANGES = ("drop-state", "shape", "dtype:float64", "dtype:bfloat16", "drop-group", "lr")

OPTIMIZER_DIFFERENCES = (
    Row(
        "optimizer-buffer-shape-checked",
        "an optimizer buffer of another shape than its parameter raises tj.StateDictError at "
        "load, where torch loads it and fails at the first step (or, in a fused group, "
        "steps on with it unchecked: torch 2.13's fused Adam reads a buffer of 3 for a "
        "parameter of 2)",
        "**An optimizer buffer of another shape is refused at load**",
    ),
)


@dataclasses.dataclass(frozen=True)
class OptimizerDraw:
    layers: tuple[Layer, ...]
    kind: str
    seed: int = 0
    steps: int = 1
    #: ``(change, parameter index)``.
    changes: tuple[tuple[str, int], ...] = ()
    through_file: bool = True

    def expression(self) -> str:
        """The draw as one line: what to rerun."""
        return fuzz_runs.expression(self)


class OptimizerFinding(fuzz_runs.Finding):
    @property
    def kind(self) -> tuple[str, ...]:
        return (self.aspect, self.draw.kind)


class OptimizerTally:
    def __init__(self) -> None:
        self.examples = 0
        self.refused = 0
        self.explained: dict[str, int] = {row.id: 0 for row in OPTIMIZER_DIFFERENCES}


def draw_optimizer(rng: random.Random) -> OptimizerDraw:
    layers = draw_layers(rng)
    count = len(list(twin(layers).parameters()))
    changes = tuple(
        (rng.choice(CHANGES), rng.randrange(count)) for _ in range(rng.choice([0, 1, 1, 2]))
    )
    return OptimizerDraw(
        layers=layers,
        kind=rng.choice(tuple(KINDS)),
        seed=rng.randrange(2**16),
        steps=rng.choice([0, 1, 2]),
        changes=changes,
        through_file=rng.random() < 0.7,
    )


def smaller_optimizer(draw_: OptimizerDraw) -> list[OptimizerDraw]:
    replace = dataclasses.replace
    candidates = [
        replace(draw_, changes=draw_.changes[:i] + draw_.changes[i + 1 :])
        for i in range(len(draw_.changes))
    ]
    for name, default in (("seed", 0), ("steps", 1), ("through_file", True)):
        if getattr(draw_, name) != default:
            candidates.append(replace(draw_, **{name: default}))
    return candidates


# --- the two sides ---------------------------------------------------------------------------


def _torch_optimizer(draw_: OptimizerDraw, module: torch.nn.Module) -> torch.optim.Optimizer:
    name, keywords = KINDS[draw_.kind]
    parameters = list(module.parameters())
    half = len(parameters) // 2 or 1  # two groups where there are two parameters
    groups = [
        {"params": parameters[:half], **FIRST_GROUP.get(draw_.kind, {})},
        {"params": parameters[half:], "lr": 0.002},
    ]
    groups = [group for group in groups if group["params"]]
    optimizer: torch.optim.Optimizer = getattr(torch.optim, name)(groups, **keywords)
    return optimizer


def _trained_state(draw_: OptimizerDraw) -> tuple[dict[str, Any], dict[str, Any]]:
    """The twin's weights and its optimizer's state dict after ``draw_.steps`` steps."""
    torch.manual_seed(draw_.seed)
    module = twin(draw_.layers)
    for value in module.state_dict().values():
        if value.is_floating_point():
            value.copy_(torch.randn(value.shape))
    optimizer = _torch_optimizer(draw_, module)
    for _ in range(draw_.steps):
        for parameter in module.parameters():
            parameter.grad = torch.randn(parameter.shape)
        optimizer.step()
    return module.state_dict(), optimizer.state_dict()


def _changed(draw_: OptimizerDraw, saved: dict[str, Any]) -> dict[str, Any]:
    saved = copy.deepcopy(saved)
    for change, index in draw_.changes:
        state = saved["state"].get(index)
        if change == "drop-state":
            saved["state"].pop(index, None)
        elif change == "drop-group":
            if len(saved["param_groups"]) > 1:
                saved["param_groups"].pop()
        elif change == "lr":
            saved["param_groups"][0]["lr"] = 0.5
        elif state is not None:
            buffer = next((name for name in state if name != "step"), None)
            if buffer is None:
                continue
            if change == "shape":
                state[buffer] = torch.ones(state[buffer].numel() + 1)
            else:
                dtype = getattr(torch, change.removeprefix("dtype:"))
                state[buffer] = state[buffer].to(dtype)
    return saved


def _through(draw_: OptimizerDraw, saved: dict[str, Any]) -> tuple[Any, Any]:
    """The state dict as torch reads it back, and as tj does."""
    if not draw_.through_file:
        return copy.deepcopy(saved), copy.deepcopy(saved)
    with tempfile.TemporaryDirectory(prefix="ckptfuzz-optim-") as folder:
        path = Path(folder) / "optimizer.pt"
        torch.save(saved, path)
        return torch.load(path, weights_only=True), tj.load(path, map_location="cpu")


def _tj_optimizer(draw_: OptimizerDraw, model: Net) -> nnx.Optimizer:
    """The port, its groups listing the twin's parameter names as torch's list them."""
    name, keywords = KINDS[draw_.kind]
    names = list(dict(twin(draw_.layers).named_parameters()))
    half = len(names) // 2 or 1
    groups = [
        {"params": names[:half], **FIRST_GROUP.get(draw_.kind, {})},
        {"params": names[half:], "lr": 0.002},
    ]
    groups = [group for group in groups if group["params"]]
    return nnx.Optimizer(model, getattr(optim, name)(groups, **keywords), wrt=nnx.Param)


# --- judging ---------------------------------------------------------------------------------


def _torch_steps_after(optimizer: torch.optim.Optimizer, module: torch.nn.Module) -> bool:
    """Whether torch's optimizer, loaded, takes a step (a wrong buffer fails there)."""
    for parameter in module.parameters():
        parameter.grad = torch.ones(parameter.shape)
    try:
        optimizer.step()
    except Exception:
        return False
    return True


def _judge(draw_: OptimizerDraw, tally: OptimizerTally | None) -> None:
    weights, saved = _trained_state(draw_)
    theirs_saved, ours_saved = _through(draw_, _changed(draw_, saved))
    module = twin(draw_.layers)
    module.load_state_dict(weights)
    theirs = _torch_optimizer(draw_, module)
    theirs_error: BaseException | None = None
    try:
        theirs.load_state_dict(theirs_saved)
    except Exception as error:
        theirs_error = error
    model = tj.load_state(Net(draw_.layers, rngs=nnx.Rngs(0)), weights)
    ours = _tj_optimizer(draw_, model)
    ours_error: BaseException | None = None
    try:
        optim.load_state_dict(ours, model, ours_saved)
    except Exception as error:
        ours_error = error
    if ours_error is not None:
        if not isinstance(ours_error, tj.Torch2JaxDeviceError):
            raise Different("error: not the library's", "load_state_dict", theirs_error, ours_error)
        if "Fix" not in str(ours_error):
            raise Different("error: names no fix", "load_state_dict", theirs_error, ours_error)
    if theirs_error is not None:
        if ours_error is None:
            raise Different("error: tj takes what torch refuses", "load", theirs_error, "")
        if tally is not None:
            tally.refused += 1
        return
    if ours_error is not None:
        shape = any(change == "shape" for change, _ in draw_.changes)
        if shape and isinstance(ours_error, tj.StateDictError):
            fused = any(group.get("fused") for group in theirs.param_groups)
            if not _torch_steps_after(theirs, module) or fused:
                raise Explained("optimizer-buffer-shape-checked")
        raise Different("error: tj refuses", "load_state_dict", "loaded", ours_error)
    written = optim.state_dict(ours, model)
    _compare(theirs.state_dict(), written)
    # the other way: tj's state dict into a fresh torch optimizer, which must then write
    # it back as tj wrote it (torch's state_dict() the oracle)
    back = _torch_optimizer(draw_, module)
    try:
        back.load_state_dict(copy.deepcopy(written))
    except Exception as error:
        raise Different("error: torch refuses tj's", "load_state_dict", error, "") from None
    _compare(back.state_dict(), written, "into torch: ")


def _compare(theirs: dict[str, Any], ours: dict[str, Any], way: str = "") -> None:
    if theirs["param_groups"] != ours["param_groups"]:
        raise Different(
            f"{way}param_groups", "param_groups", theirs["param_groups"], ours["param_groups"]
        )
    if list(theirs["state"]) != list(ours["state"]):
        raise Different(f"{way}state keys", "state", list(theirs["state"]), list(ours["state"]))
    for index, values in theirs["state"].items():
        mine = ours["state"][index]
        if list(values) != list(mine):
            raise Different(f"{way}buffers", f"state[{index}]", list(values), list(mine))
        for name, value in values.items():
            got = mine[name]
            where = f"state[{index}][{name!r}]"
            if not isinstance(got, torch.Tensor) or got.dtype != value.dtype:
                raise Different(f"{way}dtype", where, value.dtype, getattr(got, "dtype", type(got)))
            if got.shape != value.shape:
                raise Different(f"{way}shape", where, tuple(value.shape), tuple(got.shape))
            if not np.array_equal(got.float().numpy(), value.float().numpy(), equal_nan=True):
                raise Different(f"{way}values", where, value.tolist(), got.tolist())


def judge_optimizer(
    draw_: OptimizerDraw, tally: OptimizerTally | None = None
) -> list[OptimizerFinding]:
    """The differences between torch's ``optimizer.load_state_dict`` and
    ``tj.optim.load_state_dict`` on ``draw_`` that no row explains."""
    return fuzz_runs.outcome(draw_, _judge, tally, OptimizerFinding)


def shrink_optimizer(finding: OptimizerFinding, budget: int = 30) -> OptimizerFinding:
    return fuzz_runs.shrink(finding, judge_optimizer, smaller_optimizer, budget)


__all__ = [
    "OPTIMIZER_DIFFERENCES", "OptimizerDraw", "draw_optimizer", "judge_optimizer",
    "shrink_optimizer",
]  # fmt: skip
