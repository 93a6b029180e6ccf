"""The optimizer fuzzer's draws: a torch training run, as plain data.

A :class:`Draw` is everything one example of ``tests/parity/test_optim_fuzz.py`` needs,
written as plain values (the optimizer's name and keywords, each parameter's shape and
dtype, the scheduler and its arguments, which steps a parameter sits out, where the
checkpoint crosses frameworks), so the same draw builds the torch run and the tj run
afresh, prints as one line, and shrinks by rewriting a field. ``draw(rng)`` makes one
from a seeded ``random.Random``; nothing here knows what torch answers
(``optim_fuzz_oracle`` asks it).

The space: ``torch.optim.SGD``/``Adam``/``AdamW``/``RMSprop`` with every keyword torch
takes (``foreach``/``fused``/``capturable``/``differentiable`` included, as torch's own
defaults or set), values inside and outside torch's ranges (negative, NaN, ``inf``,
betas at 1, integer betas, a string, a keyword the optimizer does not take); float32,
float64, bfloat16, float16 and complex64 parameters of several shapes, a ``Linear``
layer (whose layout differs between the frameworks), frozen parameters, parameters
without a gradient on some steps, several parameter groups with their own
hyperparameters (``amsgrad`` and ``fused`` included); a group's rate set by hand before
a step; a scheduler with its arguments; and a checkpoint at a random step, written by
either framework (in memory, or through ``torch.save`` and ``tj.load``), from which both
resume, the scheduler by ``load_state_dict`` or torch's ``last_epoch=``.
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Any

KINDS = ("SGD", "Adam", "AdamW", "RMSprop")

#: Each optimizer's keywords as torch 2.13 takes them (the oracle refuses the rest).
KEYWORDS = {
    "SGD": ("lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize", "foreach",
            "differentiable", "fused"),
    "Adam": ("lr", "betas", "eps", "weight_decay", "amsgrad", "foreach", "maximize",
             "capturable", "differentiable", "fused", "decoupled_weight_decay"),
    "AdamW": ("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize", "foreach",
              "capturable", "differentiable", "fused"),
    "RMSprop": ("lr", "alpha", "eps", "weight_decay", "momentum", "centered", "capturable",
                "foreach", "maximize", "differentiable"),
}  # fmt: skip

#: Keywords that change the numbers (the others choose torch's kernel).
NUMERIC = ("lr", "momentum", "dampening", "weight_decay", "betas", "eps", "alpha")

DTYPES = ("float32", "float32", "float32", "float64", "bfloat16", "float16", "complex64")

SCHEDULERS = (
    "StepLR", "MultiStepLR", "CosineAnnealingLR", "LinearLR", "LambdaLR", "ExponentialLR",
    "ConstantLR", "PolynomialLR", "ReduceLROnPlateau", "OneCycleLR",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One parameter of the model: its shape, dtype, and whether it is frozen."""

    shape: tuple[int, ...]
    dtype: str
    frozen: bool = False


@dataclasses.dataclass(frozen=True)
class Draw:
    """One training run, both frameworks' sides built from it."""

    kind: str
    #: The optimizer's keywords, in the order given (the same to torch and to tj).
    keywords: tuple[tuple[str, Any], ...]
    parameters: tuple[Parameter, ...]
    #: A ``Linear(3, 2)`` after the parameters (torch's ``(out, in)`` weight).
    linear: bool = False
    #: Several parameter groups: (the parameter positions, in the order torch's group
    #: lists them, the group's own keywords). A position in no group does not train.
    groups: tuple[tuple[tuple[int, ...], tuple[tuple[str, Any], ...]], ...] | None = None
    #: How the port's groups select their parameters: "paths" (a list of paths, in the
    #: group's order), "predicate" (a function of the path) or "parameters" (the ones
    #: ``tj.parameters(model)`` yields; a frozen one, which the optimizer leaves out, by path).
    selector: str = "paths"
    #: (scheduler name, its keywords), or None.
    scheduler: tuple[str, tuple[tuple[str, Any], ...]] | None = None
    #: Optimizer steps per scheduler step.
    per_epoch: int = 1
    steps: int = 3
    #: The checkpoint is written after this many steps (by ``writer``) and both resume.
    switch: int = 1
    writer: str = "torch"  # "torch" or "tj"
    #: How the resumed scheduler catches up: "load_state_dict" or "last_epoch".
    resume: str = "load_state_dict"
    #: Through ``torch.save`` and ``tj.load`` (JAX arrays) rather than in memory.
    through_file: bool = False
    #: (step, parameter position): that parameter has no gradient at that step.
    silent: frozenset[tuple[int, int]] = frozenset()
    seed: int = 0
    #: (step, group, rate): before that step, the trainer sets that group's learning
    #: rate by hand (torch's ``optimizer.param_groups[group]["lr"] = rate``).
    by_hand: tuple[int, int, float] | None = None

    @property
    def positions(self) -> int:
        """How many parameters the model has (the Linear's two included)."""
        return len(self.parameters) + 2 * self.linear

    def dtype(self, position: int) -> str:
        return self.parameters[position].dtype if position < len(self.parameters) else "float32"

    def frozen(self, position: int) -> bool:
        return position < len(self.parameters) and self.parameters[position].frozen

    def numbered(self) -> list[int]:
        """The positions the torch optimizer holds, in the order it numbers them (its
        state dict's index): its groups' lists one after the other."""
        if self.groups is None:
            return list(range(self.positions))
        return [position for positions, _ in self.groups for position in positions]

    def expression(self) -> str:
        """The draw as one line: what to rerun."""
        fields = [
            f"{field.name}={getattr(self, field.name)!r}" for field in dataclasses.fields(self)
        ]
        return f"Draw({', '.join(fields)})"


# --- drawing ---------------------------------------------------------------------------------


def _rate(rng: random.Random) -> float:
    return rng.choice([1e-3, 0.01, 0.05, 0.1, 0.3, 1.0, 0.0])


def _fraction(rng: random.Random) -> float:
    return rng.choice([0.0, 0.5, 0.9, 0.99, 0.3])


def valid_keywords(kind: str, rng: random.Random) -> dict[str, Any]:
    """Keywords torch accepts for ``kind`` (each present or left to its default)."""
    drawn: dict[str, Any] = {"lr": _rate(rng)}
    if kind == "SGD":
        drawn["momentum"] = _fraction(rng)
        drawn["dampening"] = rng.choice([0.0, 0.0, 0.1, 0.5])
        drawn["weight_decay"] = rng.choice([0.0, 0.0, 1e-4, 0.1])
        drawn["nesterov"] = drawn["momentum"] > 0 and drawn["dampening"] == 0 and rng.random() < 0.5
    elif kind in ("Adam", "AdamW"):
        drawn["betas"] = (rng.choice([0.0, 0.5, 0.9]), rng.choice([0.0, 0.9, 0.999]))
        drawn["eps"] = rng.choice([1e-8, 1e-6, 1e-3])
        drawn["weight_decay"] = rng.choice([0.0, 0.0, 1e-2, 0.1])
        drawn["amsgrad"] = rng.random() < 0.3
        if kind == "Adam":
            drawn["decoupled_weight_decay"] = rng.random() < 0.2
    else:
        drawn["alpha"] = rng.choice([0.99, 0.9, 0.5, 0.0])
        drawn["eps"] = rng.choice([1e-8, 1e-6, 1e-2])
        drawn["weight_decay"] = rng.choice([0.0, 0.0, 1e-2])
        drawn["momentum"] = _fraction(rng)
        # centered with alpha 0 divides by the rounding of g*g - g*g: no oracle there
        drawn["centered"] = drawn["alpha"] > 0 and rng.random() < 0.4
    drawn["maximize"] = rng.random() < 0.2
    kernel = rng.choice(["default", "default", "foreach", "fused", "single"])
    if kernel == "foreach":
        drawn["foreach"] = True
    elif kernel == "single":
        drawn["foreach"] = False
    elif kernel == "fused" and "fused" in KEYWORDS[kind]:
        drawn["fused"] = True
    if rng.random() < 0.1:
        drawn["differentiable"] = False
    if "capturable" in KEYWORDS[kind] and rng.random() < 0.1:
        drawn["capturable"] = False
    # keep a random subset, in a random order: a keyword left out is torch's default
    names = [name for name in drawn if name == "lr" or rng.random() < 0.8]
    rng.shuffle(names)
    return {name: drawn[name] for name in names}


#: Values outside what torch takes (or at its edges), by keyword.
EDGES: dict[str, list[Any]] = {
    "lr": [-0.1, math.nan, math.inf, "0.1", None, 0],
    "momentum": [-0.5, math.nan, 1.5],
    "dampening": [-0.5, 1.0],
    "weight_decay": [-1e-2, math.nan],
    "eps": [-1e-8, math.nan, 0.0],
    "alpha": [-0.1, 1.5, math.nan],
    "betas": [
        (1.0, 0.999),
        (0.9, 1.0),
        (-0.1, 0.9),
        (0, 0.9),
        (0.9,),
        (0.5, math.nan),
        [0.9, 0.99],
    ],
    "nesterov": [True],
    "fused": [True],
    "foreach": [True],
}


def invalid_keywords(kind: str, rng: random.Random) -> dict[str, Any]:
    """``valid_keywords`` with one value at an edge, or a keyword ``kind`` does not take."""
    keywords = valid_keywords(kind, rng)
    choice = rng.random()
    if choice < 0.15:
        other = rng.choice([name for name in ("betas", "alpha", "nesterov", "centered",
                                              "fused", "amsgrad", "dampening")
                            if name not in KEYWORDS[kind]])  # fmt: skip
        keywords[other] = EDGES.get(other, [True])[0]
    elif choice < 0.25:  # fused and foreach both, or nesterov with dampening
        keywords.update({"fused": True, "foreach": True} if "fused" in KEYWORDS[kind]
                        else {"foreach": True, "maximize": True})  # fmt: skip
    else:
        name = rng.choice([name for name in EDGES if name in KEYWORDS[kind]])
        keywords[name] = rng.choice(EDGES[name])
        if name == "nesterov":
            keywords.update(momentum=rng.choice([0.0, 0.9]), dampening=rng.choice([0.0, 0.1]))
    return keywords


def _scheduler(rng: random.Random) -> tuple[str, tuple[tuple[str, Any], ...]] | None:
    name = rng.choice((None, None, *SCHEDULERS))
    if name is None:
        return None
    arguments: dict[str, Any]
    if name == "StepLR":
        arguments = {"step_size": rng.randint(1, 3), "gamma": rng.choice([0.1, 0.5, 0.9])}
    elif name == "MultiStepLR":
        milestones = sorted(rng.randint(1, 6) for _ in range(rng.randint(1, 3)))
        arguments = {"milestones": milestones, "gamma": rng.choice([0.1, 0.5])}
    elif name == "CosineAnnealingLR":
        arguments = {"T_max": rng.randint(1, 6), "eta_min": rng.choice([0.0, 1e-4, 0.01])}
    elif name == "LinearLR":
        arguments = {
            "start_factor": rng.choice([0.1, 1 / 3, 0.5, 1.0]),
            "end_factor": rng.choice([1.0, 0.5, 0.0]),
            "total_iters": rng.randint(1, 5),
        }
    elif name == "ExponentialLR":
        arguments = {"gamma": rng.choice([0.5, 0.9, 0.99])}
    elif name == "ConstantLR":
        arguments = {"factor": rng.choice([0.0, 0.25, 0.5, 1.0]), "total_iters": rng.randint(0, 4)}
    elif name == "PolynomialLR":
        arguments = {"total_iters": rng.randint(1, 5), "power": rng.choice([0.5, 1.0, 2.0])}
    elif name == "ReduceLROnPlateau":  # stepped with a drawn metric
        arguments = {
            "mode": rng.choice(["min", "max"]),
            "factor": rng.choice([0.1, 0.5]),
            "patience": rng.randint(0, 2),
            "threshold": rng.choice([1e-4, 0.05]),
            "threshold_mode": rng.choice(["rel", "abs"]),
            "cooldown": rng.randint(0, 1),
            "min_lr": rng.choice([0, 1e-3, [0.02]]),
        }
    elif name == "OneCycleLR":
        arguments = {
            "max_lr": rng.choice([0.1, 1.0, [0.5]]),
            "total_steps": rng.randint(2, 10),
            "pct_start": rng.choice([0.3, 0.5, 0.25]),
            "anneal_strategy": rng.choice(["cos", "linear"]),
            "cycle_momentum": rng.random() < 0.6,
            "div_factor": rng.choice([25.0, 10.0]),
            "final_div_factor": rng.choice([1e4, 100.0]),
            "three_phase": rng.random() < 0.3,
        }
    else:
        arguments = {"lr_lambda": rng.choice(["power", "inverse"])}  # built by the oracle
    return name, tuple(arguments.items())


def _shape(rng: random.Random) -> tuple[int, ...]:
    return rng.choice([(), (1,), (3,), (2, 3), (4, 1), (2, 1, 2)])


def draw(rng: random.Random) -> Draw:
    """One run from ``rng``: an optimizer, a model, a schedule and a checkpoint."""
    kind = rng.choice(KINDS)
    invalid = rng.random() < 0.2
    keywords = invalid_keywords(kind, rng) if invalid else valid_keywords(kind, rng)
    count = rng.randint(1, 4)
    parameters = tuple(
        Parameter(_shape(rng), rng.choice(DTYPES), frozen=rng.random() < 0.1) for _ in range(count)
    )
    linear = rng.random() < 0.4
    positions = count + 2 * linear
    groups, selector = None, "paths"
    if positions > 1 and rng.random() < 0.3:
        groups, selector, parameters = _groups(kind, keywords, rng, positions, parameters)
    steps = rng.randint(1, 6)
    switch = rng.randint(0, steps)
    writer = rng.choice(["torch", "tj"])
    silent: set[tuple[int, int]] = set()
    if writer == "torch" and rng.random() < 0.4:  # torch alone runs the steps before it
        for step in range(switch):
            silent.update((step, p) for p in range(positions) if rng.random() < 0.3)
    return Draw(
        kind=kind,
        keywords=tuple(keywords.items()),
        parameters=parameters,
        linear=linear,
        groups=groups,
        selector=selector,
        scheduler=_scheduler(rng),
        per_epoch=rng.choice([1, 1, 2]),
        steps=steps,
        switch=switch,
        writer=writer,
        resume=rng.choice(["load_state_dict", "load_state_dict", "last_epoch"]),
        through_file=rng.random() < 0.3,
        silent=frozenset(silent),
        seed=rng.randrange(2**31),
        by_hand=(
            (rng.randrange(steps), rng.randrange(len(groups or [0])), _rate(rng) or 0.02)
            if rng.random() < 0.2
            else None
        ),
    )


def _groups(
    kind: str,
    keywords: dict[str, Any],
    rng: random.Random,
    positions: int,
    parameters: tuple[Parameter, ...],
) -> tuple[Any, str, tuple[Parameter, ...]]:
    """Two or three groups over the positions (each listing its parameters in a drawn
    order), at times one position in no group and one group frozen; how the port
    selects them; and the parameters (the frozen group's frozen)."""
    order = list(range(positions))
    rng.shuffle(order)
    count = rng.randint(2, min(3, positions))
    cuts = sorted(rng.sample(range(1, positions), count - 1))
    parts = [order[start:end] for start, end in zip([0, *cuts], [*cuts, positions], strict=True)]
    if len(parts[-1]) > 1 and rng.random() < 0.2:
        parts[-1] = parts[-1][:-1]  # a parameter no group lists: torch does not train it
    selector = rng.choice(["paths", "predicate", "parameters"])
    if selector == "predicate" or rng.random() < 0.5:  # a predicate takes the model's order
        parts = [sorted(part) for part in parts]
    if rng.random() < 0.2:  # a frozen group (torch's requires_grad_(False))
        frozen = set(rng.choice(parts))
        parameters = tuple(
            dataclasses.replace(parameter, frozen=parameter.frozen or i in frozen)
            for i, parameter in enumerate(parameters)
        )
    groups = tuple(
        (tuple(part), tuple(_group_overrides(kind, keywords, rng).items())) for part in parts
    )
    return groups, selector, parameters


def _group_overrides(kind: str, keywords: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A group's own keys: hyperparameters and flags torch takes per group (amsgrad, which
    decides whether the group's state keeps max_exp_avg_sq, and fused, how its step
    rounds, included), and at times a key of the user's own (torch keeps it in the group
    and its state dict)."""
    valid = valid_keywords(kind, rng)
    per_group = (*NUMERIC, "maximize", "nesterov", "centered", "decoupled_weight_decay")
    own = {name: valid[name] for name in valid if name in per_group and rng.random() < 0.5}
    for flag in ("amsgrad", "fused"):  # the group's own, either way
        if flag in KEYWORDS[kind] and rng.random() < 0.4:
            own[flag] = rng.random() < 0.5
    effective = {"alpha": 0.99, **keywords, **own}
    if effective.get("centered") and effective["alpha"] == 0:  # as valid_keywords: no oracle
        own["centered"] = False
    if rng.random() < 0.15:
        own["name"] = rng.choice(["decay", "no_decay", "head"])
    return own


def smaller(draw_: Draw) -> list[Draw]:
    """Draws one step simpler than ``draw_`` (for shrinking a finding)."""
    replace = dataclasses.replace
    candidates = [
        replace(draw_, keywords=draw_.keywords[:i] + draw_.keywords[i + 1 :])
        for i, (name, _) in enumerate(draw_.keywords)
        if name != "lr"
    ]
    if draw_.scheduler is not None:
        candidates.append(replace(draw_, scheduler=None))
    if draw_.groups is not None:
        candidates.append(replace(draw_, groups=None))
    if draw_.silent:
        candidates.append(replace(draw_, silent=frozenset()))
    if draw_.linear:
        candidates.append(replace(draw_, linear=False, groups=None, silent=frozenset()))
    if len(draw_.parameters) > 1:
        candidates.extend(
            replace(
                draw_, parameters=draw_.parameters[:i] + draw_.parameters[i + 1 :],
                groups=None, silent=frozenset(),
            )
            for i in range(len(draw_.parameters))
        )  # fmt: skip
    if draw_.steps > max(1, draw_.switch):
        candidates.append(replace(draw_, steps=draw_.steps - 1))
    if draw_.switch > 0:
        candidates.append(
            replace(
                draw_, switch=draw_.switch - 1, steps=draw_.steps - 1 or 1,
                silent=frozenset(s for s in draw_.silent if s[0] < draw_.switch - 1),
            )
        )  # fmt: skip
    if draw_.by_hand is not None:
        candidates.append(replace(draw_, by_hand=None))
    if draw_.through_file:
        candidates.append(replace(draw_, through_file=False))
    if draw_.per_epoch > 1:
        candidates.append(replace(draw_, per_epoch=1))
    return [candidate for candidate in candidates if candidate != draw_]
