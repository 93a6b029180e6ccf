"""The optimizer fuzzer's oracle: a drawn run through torch.optim and through tj.optim.

``judge(draw)`` builds the torch run and the tj run of one :class:`optim_fuzz.Draw`
(the same initial values, the same gradients at every step), runs them, and returns
every :class:`Finding`: a part of the answers that differs and that no row of
``DIFFERENCES`` explains. Compared after every step: the parameters (values and
dtype), the optimizer's state dict (per-parameter state keys, step counts exactly,
buffers' dtype and values, every parameter group's keys and values), and the
scheduler's state dict and last rates. At the checkpoint, whichever framework wrote it,
a fresh torch run and a fresh tj run both resume from it, and go on side by side; the
writer goes on too, beside the uninterrupted torch run. Keywords torch refuses must be
refused by tj with the library's own error, naming the value.

Tolerances are per dtype (``TOLERANCES``): each side rounds each operation in the
parameter's dtype in its own order.
"""

from __future__ import annotations

import copy
import io
import math
import tempfile
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from flax import nnx

import torch2jax_device as tj
from tests.support import fuzz_runs
from tests.support.fuzz_runs import Row
from tests.support.optim_fuzz import Draw, smaller
from torch2jax_device import optim

#: (rtol, atol) per parameter dtype, after at most six steps at a rate of at most 1/steps
#: (``atol`` grows with the rate times the steps, and with the array's largest entry: see
#: ``_close``). float64 is float32 here while JAX's x64 is off (the row
#: ``x64-narrowing``).
TOLERANCES = {
    "float32": (2e-5, 2e-6),
    "float64": (1e-4, 2e-5),  # float32 here, against torch's float64 (x64-narrowing)
    "complex64": (2e-5, 4e-6),  # |difference| of two parts
    "float16": (5e-3, 5e-3),
    "bfloat16": (4e-2, 4e-2),
}
#: A learning rate in a parameter group or a scheduler: torch's double, or as exact.
LR_TOLERANCE = 1e-9


DIFFERENCES = (
    Row(
        "x64-narrowing",
        "a float64 parameter is float32 in JAX without x64 (its state too)",
        "**float64 parameters**",
    ),
    Row(
        "infinite-rate",
        "with lr=inf, which entries end inf and which NaN depends on the order of the "
        "operations (torch applies AdamW's decay, then the step)",
        "",  # no training runs at an infinite rate
    ),
    Row(
        "ill-conditioned-low-precision",
        "float16/bfloat16 parameters under Adam with beta2=0 or RMSprop with alpha=0: "
        "the step divides by |g| of this step alone, and torch's kernels round "
        "intermediate products (alpha * param) that tj keeps in float32, so a gradient "
        "near 0 makes one rounding a large step",
        "Float16 and bfloat16 parameters keep their state",
    ),
    Row(
        "torch-fused-sgd-skipped-parameter",
        "torch's fused SGD with momentum raises TypeError at a step where a parameter "
        "with no momentum buffer yet has no gradient (torch 2.13); tj steps on",
        "",  # torch's failure, not a behaviour to port
    ),
)


class Finding(fuzz_runs.Finding):
    @property
    def kind(self) -> tuple[str, ...]:
        return (self.aspect, self.draw.kind)


class Tally:
    """What the rows explained, over a run."""

    def __init__(self) -> None:
        self.examples = 0
        self.refused = 0  # keywords torch refuses (tj must refuse alike)
        self.grouped = 0  # draws with several parameter groups
        self.explained: dict[str, int] = {row.id: 0 for row in DIFFERENCES}


#: Torch's errors whose class tj's must share (a ValueError caught as one stays caught);
#: the others are torch's accidents (an IndexError on a 1-tuple of betas): any error of
#: the library's does.
TORCH_CLASSES = (ValueError, TypeError, RuntimeError)


class Different(Exception):
    """A part of the answers differs: the finding, raised from deep in a comparison."""

    def __init__(
        self, aspect: str, where: str, torch_: Any, ours: Any, row: str | None = None
    ) -> None:
        super().__init__(aspect)
        self.parts = (aspect, where, _short(torch_), _short(ours))
        self.row = row  # the row of DIFFERENCES that explains it, if one does


def _short(value: Any) -> str:
    return " ".join(repr(value).split())[:300]


# --- the two runs ----------------------------------------------------------------------------


def x64() -> bool:
    return bool(jax.config.read("jax_enable_x64"))


def _names(draw: Draw) -> list[str]:
    names = [f"p{i}" for i in range(len(draw.parameters))]
    return [*names, "layer.weight", "layer.bias"] if draw.linear else names


def _shapes(draw: Draw) -> list[tuple[int, ...]]:
    shapes = [parameter.shape for parameter in draw.parameters]
    return [*shapes, (2, 3), (2,)] if draw.linear else shapes


def _values(draw: Draw, salt: int) -> list[np.ndarray]:
    """Values for each parameter in torch's layout: the initial ones (``salt`` 0), or the
    gradients of step ``salt - 1``."""
    rng = np.random.default_rng([draw.seed, salt])
    out = []
    for position, shape in enumerate(_shapes(draw)):
        value = rng.standard_normal(shape)
        if draw.dtype(position) == "complex64":
            value = value + 1j * rng.standard_normal(shape)
        out.append(np.asarray(value))
    return out


def _gradients(draw: Draw, step: int) -> list[torch.Tensor]:
    """Step ``step``'s gradients, in each parameter's dtype: rounded once, by torch, so
    both sides get the same numbers."""
    return [
        torch.from_numpy(value).to(_torch_dtype(draw.dtype(position)))
        for position, value in enumerate(_values(draw, step + 1))
    ]


def _torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name)
    assert isinstance(dtype, torch.dtype)
    return dtype


def _jax_dtype(name: str) -> Any:
    return jnp.float32 if name == "float64" and not x64() else jnp.dtype(name)


class TorchModel(torch.nn.Module):  # type: ignore[misc]
    def __init__(self, draw: Draw) -> None:
        super().__init__()
        for position, parameter in enumerate(draw.parameters):
            tensor = torch.zeros(parameter.shape, dtype=_torch_dtype(parameter.dtype))
            setattr(self, f"p{position}", torch.nn.Parameter(tensor))
        if draw.linear:
            self.layer = torch.nn.Linear(3, 2)
        for position, tensor in enumerate(self.parameters()):
            tensor.requires_grad_(not draw.frozen(position))


class Model(nnx.Module):
    def __init__(self, draw: Draw) -> None:
        for position, parameter in enumerate(draw.parameters):
            value = jnp.zeros(parameter.shape, _jax_dtype(parameter.dtype))
            setattr(self, f"p{position}", nnx.Param(value))
        if draw.linear:
            self.layer = nnx.Linear(3, 2, rngs=nnx.Rngs(0))


def _epoch_ends(draw: Draw, scheduler: Any, step: int) -> None:
    """The scheduler's step after optimizer step ``step``, at an epoch's end (with the
    epoch's metric, drawn from a plateau-prone list, for ReduceLROnPlateau)."""
    if scheduler is None or (step + 1) % draw.per_epoch:
        return
    if draw.scheduler is not None and draw.scheduler[0] == "ReduceLROnPlateau":
        rng = np.random.default_rng([draw.seed, 10_000 + step])
        scheduler.step(float(rng.choice([1.0, 0.9, 0.9, 0.95, 1.2, 0.899])))
    else:
        scheduler.step()


class PowerDecay:
    """``LambdaLR``'s callable object (its attributes are in the state dict)."""

    def __init__(self) -> None:
        self.rate = 0.7

    def __call__(self, epoch: Any) -> Any:
        return self.rate**epoch


def _lambda(name: str) -> Callable[[Any], Any]:
    return PowerDecay() if name == "power" else (lambda epoch: 1 / (1 + 0.5 * epoch))


def _scheduler_arguments(draw: Draw) -> dict[str, Any]:
    """The scheduler's arguments; with groups, a list argument has one value per group
    (each its own: the first group's value scaled), and ``LambdaLR`` one function per
    group (alternating the two)."""
    assert draw.scheduler is not None
    arguments = dict(draw.scheduler[1])
    groups = 1 if draw.groups is None else len(draw.groups)
    if "lr_lambda" in arguments:
        names = ("power", "inverse") if arguments["lr_lambda"] == "power" else ("inverse", "power")
        arguments["lr_lambda"] = (
            _lambda(names[0]) if groups == 1 else [_lambda(names[i % 2]) for i in range(groups)]
        )
    for name in ("min_lr", "max_lr"):
        if isinstance(arguments.get(name), list):
            arguments[name] = [arguments[name][0] * 0.5**i for i in range(groups)]
    return arguments


def _groups(draw: Draw, parameters: list[Any]) -> Any:
    if draw.groups is None:
        return parameters
    return [
        {"params": [parameters[i] for i in positions], **dict(overrides)}
        for positions, overrides in draw.groups
    ]


def _paths(draw: Draw) -> list[str]:
    """Each position's path in the NNX model."""
    names = [f"p{i}" for i in range(len(draw.parameters))]
    return [*names, "layer.kernel", "layer.bias"] if draw.linear else names


def _tj_groups(draw: Draw, model: Any) -> tuple[Any, ...]:
    """The port's groups (as the positional argument), selecting as ``draw.selector`` says."""
    if draw.groups is None:
        return ()
    paths = _paths(draw)
    parameters = list(tj.parameters(model))
    groups = []
    for positions, overrides in draw.groups:
        select: Any
        if draw.selector == "predicate":
            chosen = {paths[i] for i in positions}
            select = lambda path, _, chosen=chosen: ".".join(map(str, path)) in chosen  # noqa: E731
        elif draw.selector == "parameters":  # one the optimizer leaves out: by its path
            select = [paths[i] if draw.frozen(i) else parameters[i] for i in positions]
        else:
            select = [paths[i] for i in positions]
        groups.append({"params": select, **dict(overrides)})
    return (groups,)


def _resumed(
    draw: Draw, schedulers: Any, optimizer: Any, checkpoint: Any, load: Callable[[], Any]
) -> Any:
    """The scheduler, made as a trainer makes it, and the optimizer's state loaded (by
    ``load``) as that trainer loads it: ``load_state_dict`` resumes make the scheduler
    first (torch's advice: made after, it sets the rate again), ``last_epoch`` ones load
    the optimizer first (the scheduler reads its ``initial_lr``)."""
    if draw.scheduler is None:
        if checkpoint is not None:
            load()
        return None
    kind = getattr(schedulers, draw.scheduler[0])
    arguments = _scheduler_arguments(draw)
    if checkpoint is None:
        return kind(optimizer, **arguments)
    if draw.resume == "last_epoch" and draw.scheduler[0] != "ReduceLROnPlateau":
        load()
        return kind(optimizer, **arguments, last_epoch=checkpoint["scheduler"]["last_epoch"] - 1)
    scheduler = kind(optimizer, **arguments)
    load()
    scheduler.load_state_dict(checkpoint["scheduler"])
    return scheduler


class TorchRun:
    """The torch side: a model, ``torch.optim.<kind>`` and the scheduler."""

    def __init__(self, draw: Draw, checkpoint: Any = None) -> None:
        self.draw = draw
        self.model = TorchModel(draw)
        with torch.no_grad():
            for tensor, value in zip(self.model.parameters(), _values(draw, 0), strict=True):
                tensor.copy_(torch.from_numpy(np.asarray(value)))
        parameters = list(self.model.parameters())
        self.optimizer = getattr(torch.optim, draw.kind)(
            _groups(draw, parameters), **dict(draw.keywords)
        )
        if checkpoint is not None:
            self.model.load_state_dict(checkpoint["model"])
        self.scheduler = _resumed(
            draw,
            torch.optim.lr_scheduler,
            self.optimizer,
            checkpoint,
            lambda: self.optimizer.load_state_dict(checkpoint["optimizer"]),
        )

    def step(self, step: int) -> None:
        for position, (tensor, gradient) in enumerate(
            zip(self.model.parameters(), _gradients(self.draw, step), strict=True)
        ):
            silent = self.draw.frozen(position) or (step, position) in self.draw.silent
            tensor.grad = None if silent else gradient
        if self.draw.by_hand is not None and self.draw.by_hand[0] == step:
            _, group, rate = self.draw.by_hand
            self.optimizer.param_groups[group % len(self.draw.groups or [0])]["lr"] = rate
        self.optimizer.step()
        _epoch_ends(self.draw, self.scheduler, step)

    def checkpoint(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
        }

    def parameters(self) -> dict[str, torch.Tensor]:
        return dict(self.model.state_dict())


def _trained(draw: Draw) -> Any:
    frozen = {f"p{i}" for i, parameter in enumerate(draw.parameters) if parameter.frozen}
    return lambda path, value: isinstance(value, nnx.Param) and str(path[0]) not in frozen


class TjRun:
    """The tj side: the NNX model, ``nnx.Optimizer`` over ``tj.optim.<kind>``, the scheduler."""

    def __init__(self, draw: Draw, weights: dict[str, Any], checkpoint: Any = None) -> None:
        self.draw = draw
        self.model = tj.load_state(Model(draw), weights)
        transformation = getattr(optim, draw.kind)(
            *_tj_groups(draw, self.model), **dict(draw.keywords)
        )
        self.optimizer = nnx.Optimizer(self.model, transformation, wrt=_trained(draw))
        self.scheduler = _resumed(
            draw,
            optim.lr_scheduler,
            self.optimizer,
            checkpoint,
            lambda: optim.load_state_dict(self.optimizer, self.model, checkpoint["optimizer"]),
        )

    def step(self, step: int) -> None:
        names = _names(self.draw)
        gradients = dict(zip(names, _gradients(self.draw, step), strict=True))
        holder = tj.load_state(Model(self.draw), gradients)
        if self.draw.by_hand is not None and self.draw.by_hand[0] == step:
            _, group, rate = self.draw.by_hand
            optim.param_groups(self.optimizer)[group % len(self.draw.groups or [0])]["lr"] = rate
        self.optimizer.update(self.model, nnx.state(holder, nnx.Param))
        _epoch_ends(self.draw, self.scheduler, step)

    def checkpoint(self) -> dict[str, Any]:
        return {
            "model": tj.state_dict(self.model, layout="torch"),
            "optimizer": optim.state_dict(self.optimizer, self.model),
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
        }

    def parameters(self) -> dict[str, Any]:
        return tj.state_dict(self.model, layout="torch")


# --- comparing -------------------------------------------------------------------------------


def _array(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.dtype in (torch.bfloat16, torch.float16):
            value = value.float()
        value = value.numpy()
    array: np.ndarray = np.asarray(value)
    return array


def _dtype_name(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return str(value.dtype).removeprefix("torch.")
    return str(np.asarray(value).dtype)


def _same_dtype(where: str, theirs: Any, ours: Any) -> None:
    expected, got = _dtype_name(theirs), _dtype_name(ours)
    if expected == got or (expected == "float64" and got == "float32" and not x64()):
        return
    raise Different("dtype", where, expected, got)


def _reach(draw: Draw) -> float:
    """How far the run's parameters can move, in units of the tolerances' (1)."""
    rates = [value for name, value in draw.keywords if name == "lr"]
    for _, overrides in draw.groups or ():
        rates.extend(value for name, value in overrides if name == "lr")
    if draw.by_hand is not None:  # a rate set by hand moves parameters as far
        rates.append(draw.by_hand[2])
    numbers = [rate for rate in rates if isinstance(rate, (int, float))] or [1e-3]
    rate = max(numbers)
    return max(1.0, rate * draw.steps) if math.isfinite(rate) else 1.0


def _close(where: str, theirs: Any, ours: Any, dtype: str, draw: Draw) -> None:
    _same_dtype(where, theirs, ours)
    expected, got = _array(theirs), _array(ours)
    if expected.shape != got.shape:
        raise Different("shape", where, expected.shape, got.shape)
    rtol, atol = TOLERANCES[dtype]
    # absolute: as far as the rate moves parameters, and (a value that cancelled to
    # near 0 keeps its operands' rounding) relative to the array's largest entry
    finite = np.abs(expected[np.isfinite(expected)])
    atol = atol * _reach(draw) + rtol * float(finite.max(initial=0.0))
    if not np.allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True):
        raise Different("values", where, expected.tolist(), got.tolist(), _row(draw, dtype))


def _row(draw: Draw, dtype: str) -> str | None:
    """The row that explains values differing on ``draw`` (a parameter of ``dtype``)."""
    keywords = dict(draw.keywords)
    if keywords.get("lr") == math.inf:
        return "infinite-rate"
    settings = [keywords] + [{**keywords, **dict(own)} for _, own in draw.groups or ()]
    flat = any(
        (draw.kind.startswith("Adam") and group.get("betas", (0.9, 0.999))[1] == 0)
        or (draw.kind == "RMSprop" and group.get("alpha", 0.99) == 0)
        for group in settings
    )
    return "ill-conditioned-low-precision" if flat and dtype in ("bfloat16", "float16") else None


def _same_number(where: str, theirs: Any, ours: Any) -> None:
    numbers = (int, float)
    if (
        isinstance(theirs, numbers)
        and isinstance(ours, numbers)
        and not isinstance(theirs, bool)
        and not isinstance(ours, bool)
    ):
        if (
            theirs == ours
            or math.isclose(theirs, ours, rel_tol=LR_TOLERANCE)
            or (math.isnan(theirs) and math.isnan(ours))
        ):
            return
    elif type(theirs) is type(ours) and theirs == ours:
        return
    raise Different("hyperparameter", where, theirs, ours)


def compare_parameters(draw: Draw, theirs: dict[str, Any], ours: dict[str, Any]) -> None:
    if list(theirs) != list(ours):
        raise Different("parameter names", "model", list(theirs), list(ours))
    for position, (name, tensor) in enumerate(theirs.items()):
        _close(f"parameter {name}", tensor, ours[name], draw.dtype(position), draw)


def compare_optimizer_states(draw: Draw, theirs: dict[str, Any], ours: dict[str, Any]) -> None:
    if list(theirs) != list(ours):
        raise Different("optimizer state dict keys", "<root>", list(theirs), list(ours))
    if sorted(theirs["state"]) != sorted(ours["state"]):
        raise Different(
            "stepped parameters", "state", sorted(theirs["state"]), sorted(ours["state"])
        )
    numbered = draw.numbered()
    for index, values in theirs["state"].items():
        mine = ours["state"][index]
        if sorted(values) != sorted(mine):
            raise Different("state keys", f"state[{index}]", sorted(values), sorted(mine))
        for key, value in values.items():
            where = f"state[{index}][{key!r}]"
            if key == "step":
                _same_dtype(where, value, mine[key])
                if float(value) != float(mine[key]):
                    raise Different("step", where, float(value), float(mine[key]))
            else:
                _close(where, value, mine[key], draw.dtype(numbered[index]), draw)
    groups, my_groups = theirs["param_groups"], ours["param_groups"]
    if len(groups) != len(my_groups):
        raise Different("parameter groups", "param_groups", len(groups), len(my_groups))
    for number, (group, mine) in enumerate(zip(groups, my_groups, strict=True)):
        if list(group) != list(mine):
            raise Different("group keys", f"param_groups[{number}]", list(group), list(mine))
        for key, value in group.items():
            where = f"param_groups[{number}][{key!r}]"
            if isinstance(value, tuple):
                if not isinstance(mine[key], tuple) or len(value) != len(mine[key]):
                    raise Different("hyperparameter", where, value, mine[key])
                for part, my_part in zip(value, mine[key], strict=True):
                    _same_number(where, part, my_part)
            elif key == "params":
                if value != mine[key]:
                    raise Different("group params", where, value, mine[key])
            else:
                _same_number(where, value, mine[key])


def compare_schedulers(theirs: Any, ours: Any) -> None:
    if theirs is None:
        return
    mine = ours.state_dict()
    expected = theirs.state_dict()
    if sorted(expected) != sorted(mine):
        raise Different("scheduler state keys", "scheduler", sorted(expected), sorted(mine))
    for key, value in expected.items():
        where = f"scheduler[{key!r}]"
        if isinstance(value, list) and value and isinstance(value[0], float):
            if len(value) != len(mine[key]):
                raise Different("scheduler", where, value, mine[key])
            for part, my_part in zip(value, mine[key], strict=True):
                _same_number(where, part, my_part)
        elif isinstance(value, float):
            _same_number(where, value, mine[key])
        elif value != mine[key] or type(value) is not type(mine[key]):
            raise Different("scheduler", where, value, mine[key])


def compare(torch_run: TorchRun, tj_run: TjRun, *, state: bool = True) -> None:
    draw = torch_run.draw
    compare_parameters(draw, torch_run.parameters(), tj_run.parameters())
    if state:
        compare_optimizer_states(
            draw, torch_run.optimizer.state_dict(), optim.state_dict(tj_run.optimizer, tj_run.model)
        )
        compare_schedulers(torch_run.scheduler, tj_run.scheduler)


# --- one example ---------------------------------------------------------------------------


def _crossed(checkpoint: dict[str, Any], draw: Draw) -> tuple[dict[str, Any], dict[str, Any]]:
    """The checkpoint as torch reads it and as the port reads it."""
    if not draw.through_file:
        return copy.deepcopy(checkpoint), copy.deepcopy(checkpoint)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "checkpoint.pt"
        torch.save(checkpoint, path)
        buffer = io.BytesIO(path.read_bytes())
        return torch.load(buffer, weights_only=False), tj.load(path, map_location="cpu")


def _refusal(draw: Draw, tally: Tally | None) -> Iterator[Finding]:
    """Keywords torch refuses: tj refuses them too, with its own error naming the value."""
    theirs = _attempt(
        lambda: getattr(torch.optim, draw.kind)(
            [torch.nn.Parameter(torch.zeros(2))], **dict(draw.keywords)
        )
    )
    ours = _attempt(lambda: getattr(optim, draw.kind)(**dict(draw.keywords)))
    if theirs is None:
        if ours is not None:
            yield Finding(
                draw,
                "error: tj refuses what torch takes",
                "constructor",
                "accepted",
                f"{type(ours).__name__}: {ours}",
            )
        return
    if tally is not None:
        tally.refused += 1
    if ours is None:
        yield Finding(
            draw,
            "error: tj takes what torch refuses",
            "constructor",
            f"{type(theirs).__name__}: {theirs}",
            "accepted",
        )
    elif not isinstance(ours, tj.Torch2JaxDeviceError):
        yield Finding(
            draw,
            "error: not the library's",
            "constructor",
            f"{type(theirs).__name__}: {theirs}",
            f"{type(ours).__name__}: {ours}",
        )
    elif isinstance(theirs, TORCH_CLASSES) and not isinstance(ours, type(theirs)):
        yield Finding(
            draw,
            "error: another class",
            "constructor",
            f"{type(theirs).__name__}: {theirs}",
            f"{type(ours).__name__}: {ours}",
        )
    else:
        yield Finding(draw, "refused", "", "", "")  # refused alike: ends the example


def _attempt(function: Callable[[], Any]) -> BaseException | None:
    try:
        function()
    except Exception as error:
        return error
    return None


def judge(draw: Draw, tally: Tally | None = None) -> list[Finding]:
    """The differences between torch and tj on ``draw`` that no row explains."""
    if tally is not None and draw.groups is not None:
        tally.grouped += 1
    refusals = list(_refusal(draw, tally))
    if refusals:
        return [finding for finding in refusals if finding.aspect != "refused"]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch's scheduler-order advice
            _run(draw, tally)
    except Different as different:
        if different.row is not None:
            if tally is not None:
                tally.explained[different.row] += 1
            return []
        return [Finding(draw, *different.parts)]
    except Exception as error:  # a crash on either side is a finding, named
        where = traceback.extract_tb(error.__traceback__)[-1]
        return [
            Finding(
                draw,
                f"crash: {type(error).__name__}",
                f"{where.filename}:{where.lineno}",
                "",
                str(error)[:300],
            )
        ]
    return []


def _run(draw: Draw, tally: Tally | None) -> None:
    if _refused_at_a_step(draw, tally):
        return
    reference = TorchRun(draw)  # the uninterrupted torch run
    port = TjRun(draw, reference.parameters()) if draw.writer == "tj" else None
    if port is not None:
        compare(reference, port)
    for step in range(draw.switch):
        reference.step(step)
        if port is not None:
            port.step(step)
            compare(reference, port)
    written = reference.checkpoint() if port is None else port.checkpoint()
    for_torch, for_tj = _crossed(written, draw)
    torch_resumed = TorchRun(draw, for_torch)
    tj_resumed = TjRun(draw, for_tj["model"], for_tj)
    compare(torch_resumed, tj_resumed)
    for step in range(draw.switch, draw.steps):
        for run in (reference, port, torch_resumed, tj_resumed):
            if run is not None:
                run.step(step)
        compare(torch_resumed, tj_resumed)
        if draw.scheduler is None or draw.resume == "load_state_dict":
            # (torch's own resume with last_epoch= scales the rate once more at times)
            compare_parameters(draw, reference.parameters(), torch_resumed.parameters())
        if port is not None:
            compare(reference, port)


def _fused_somewhere(draw: Draw) -> bool:
    """Whether a group of ``draw``'s optimizer is fused (its own key, else the keyword)."""
    fused = dict(draw.keywords).get("fused")
    if draw.groups is None:
        return bool(fused)
    return any(dict(own).get("fused", fused) for _, own in draw.groups)


def _refused_at_a_step(draw: Draw, tally: Tally | None) -> bool:
    """Whether torch refuses the run at a step (``fused`` with a complex parameter):
    then tj must refuse it too, at the latest at its first step, with its own error."""

    def torch_run() -> None:
        probe = TorchRun(draw)
        for step in range(draw.steps):
            probe.step(step)

    theirs = _attempt(torch_run)
    if theirs is None:
        return False

    def ours_run() -> None:
        run = TjRun(draw, TorchModel(draw).state_dict())
        for step in range(draw.steps):
            run.step(step)

    ours = _attempt(ours_run)
    if (
        draw.kind == "SGD" and _fused_somewhere(draw) and draw.silent
        and isinstance(theirs, TypeError) and ours is None
    ):  # fmt: skip
        if tally is not None:
            tally.explained["torch-fused-sgd-skipped-parameter"] += 1
        return True
    if not isinstance(ours, tj.Torch2JaxDeviceError):
        raise Different(
            "error at a step",
            "run",
            f"{type(theirs).__name__}: {theirs}",
            "accepted" if ours is None else f"{type(ours).__name__}: {ours}",
        )
    if tally is not None:
        tally.refused += 1
    return True


def shrink(finding: Finding, budget: int = 30) -> Finding:
    """A smaller draw showing the same kind of difference."""
    return fuzz_runs.shrink(finding, judge, smaller, budget)
