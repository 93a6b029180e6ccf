"""What torch's parameter groups hold beside a ``tj.optim`` optimizer's optax state.

An optax state holds each hyperparameter as float32 and has no place for the rest of
torch's group: the keys schedulers add (``initial_lr``, OneCycleLR's ``max_lr``...), the
keys a user or a loaded checkpoint gave a group, the kernel choices. Here they are kept
beside the optimizer, with each hyperparameter as the Python float last set, so a group
reads back torch's values exactly; :func:`torch_group` lays a group out as torch's own
optimizer does. The state dict (``optimizer_state``), the live ``param_groups``
(``param_group_view``) and the schedulers read and write them only through here.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from .checkpoints.messages import shown
from .checkpoints.module_state import placed_like
from .detect import import_torch
from .errors import ArgumentTypeError, ConversionError
from .optimizers import AdamState, RMSpropState, SGDState

__all__ = [
    "KERNEL_CHOICES", "KINDS", "SCHEDULER_KEYS", "exact", "given", "group_count",
    "group_extras", "groups_of", "hyperparameter", "initial_lr", "is_variable",
    "keep_loaded_groups", "learning_rate_variable", "own_keys", "read_state", "set_exact",
    "torch_group", "torch_options", "value_of",
]  # fmt: skip


# The torch optimizer each state is, and what it holds per parameter, by torch's key.
KINDS = {SGDState: "SGD", AdamState: "Adam", RMSpropState: "RMSprop"}


#: The keys torch's schedulers add to a parameter group, in the order they add them.
SCHEDULER_KEYS = ("initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum")
#: Each optimizer's such keys per group (``initial_lr``, which ``Scheduler(optimizer, ...,
#: last_epoch=N)`` needs to resume; OneCycleLR's phases' ends), as torch's group holds them.
_EXTRAS: weakref.WeakKeyDictionary[Any, list[dict[str, float]]] = weakref.WeakKeyDictionary()
#: Each optimizer's hyperparameters per group as the Python floats last set (a
#: checkpoint's group, a scheduler's step), by the optax state's name.
_EXACT: weakref.WeakKeyDictionary[Any, list[dict[str, float]]] = weakref.WeakKeyDictionary()
#: Each optimizer's groups' own keys as a loaded checkpoint's groups hold them (their
#: order, and keys torch keeps that are no hyperparameter), with several groups.
_GIVEN: weakref.WeakKeyDictionary[Any, list[dict[str, Any]]] = weakref.WeakKeyDictionary()


def group_count(optimizer: Any) -> int:
    """How many parameter groups ``optimizer`` has (1 without groups)."""
    groups = groups_of(optimizer)
    return 1 if groups is None else len(groups)


def groups_of(optimizer: Any) -> list[Any] | None:
    """The parameter groups ``optimizer``'s transformation was made with, or None."""
    init = getattr(getattr(optimizer, "tx", None), "init", None)
    groups: list[Any] | None = getattr(init, "torch_groups", None)
    return groups


def given(optimizer: Any, group: int) -> dict[str, Any]:
    """Group ``group``'s own keys, as the user (or a loaded checkpoint) gave them."""
    loaded = _GIVEN.get(optimizer)
    if loaded is not None:
        return loaded[group]
    groups = groups_of(optimizer)
    return {} if groups is None else dict(groups[group].given)


def own_keys(optimizer: Any) -> list[dict[str, Any]]:
    """Each group's own keys, as kept for ``optimizer`` (made from its groups at first)."""
    count = group_count(optimizer)
    return _GIVEN.setdefault(optimizer, [given(optimizer, group) for group in range(count)])


def group_extras(optimizer: Any, group: int = 0) -> dict[str, float]:
    """The keys schedulers added to ``optimizer``'s group ``group`` (torch's
    ``initial_lr``, ...), in torch's order; the dict itself, which a scheduler updates.
    A group given such a key (``{"params": ..., "initial_lr": 0.1}``) starts with it,
    as torch's ``setdefault`` keeps it."""
    every = _EXTRAS.setdefault(optimizer, [])
    while len(every) < group_count(optimizer):
        own = given(optimizer, len(every))
        every.append({key: float(own[key]) for key in SCHEDULER_KEYS if key in own})
    extras = every[group]
    ordered = {key: extras[key] for key in SCHEDULER_KEYS if key in extras}
    extras.clear()
    extras.update(ordered)
    return extras


def initial_lr(optimizer: Any, lr: float | None = None, group: int = 0) -> float | None:
    """torch's ``group.setdefault("initial_lr", group["lr"])``: the rate a scheduler made
    for ``optimizer`` starts from (a loaded checkpoint's, else ``lr``); with no ``lr``,
    the one kept, or None (torch's ``KeyError`` on resuming with ``last_epoch``)."""
    extras = group_extras(optimizer, group)
    if lr is None:
        return extras.get("initial_lr")
    return extras.setdefault("initial_lr", lr)


def exact(optimizer: Any, name: str, group: int = 0) -> float:
    """Hyperparameter ``name`` of ``optimizer``'s group ``group`` as torch's group holds
    it: the Python float last set (by a checkpoint, a scheduler, or the constructor)
    while the state still holds its float32, else the state's value as
    [`hyperparameter`][torch2jax_device.optim.hyperparameter] gives it."""
    variable = optimizer.opt_state.hyperparams[name]
    held = np.asarray(value_of(variable), np.float32)
    held = held[group] if held.ndim else held
    init = getattr(getattr(optimizer, "tx", None), "init", None)
    made = getattr(init, "torch_values", [{}])
    for values in (_EXACT.get(optimizer, [{}]), made):
        value = values[group].get(name) if group < len(values) else None
        if isinstance(value, (int, float)) and np.float32(value) == held:
            return float(value)
    return hyperparameter(held)


def set_exact(optimizer: Any, name: str, value: float, group: int = 0) -> None:
    """Set hyperparameter ``name`` of ``optimizer``'s group ``group`` to ``value``
    (float32 in the state, where it is) and keep ``value`` as torch's group would hold it."""
    variable = optimizer.opt_state.hyperparams[name]
    current = variable.get_value()
    if np.ndim(current):
        values = np.array(current, np.float32)
        values[group] = value
        variable.set_value(placed_like(values, current, f"the {name}"))
    else:
        variable.set_value(placed_like(value, current, f"the {name}"))
    every = _EXACT.setdefault(optimizer, [])
    while len(every) <= group:
        every.append({})
    every[group][name] = float(value)


def learning_rate_variable(optimizer: Any) -> Any:
    """The variable holding ``optimizer``'s learning rate, or the error naming the fix."""
    opt_state = getattr(optimizer, "opt_state", None)
    hyperparams = getattr(opt_state, "hyperparams", None)
    variable = hyperparams.get("learning_rate") if isinstance(hyperparams, Mapping) else None
    if variable is not None and hasattr(variable, "set_value"):
        return variable
    if isinstance(opt_state, tuple) and any(
        isinstance(getattr(part, "hyperparams", None), Mapping) for part in opt_state
    ):
        raise ArgumentTypeError(
            "a scheduler sets the learning rate of a tj.optim optimizer handed to "
            "nnx.Optimizer alone, not one inside an optax.chain (chained after "
            "optax.clip_by_global_norm, say). Fix: pass tj.optim.X alone and clip in the "
            "step, as clip_grad_norm_ does before optimizer.step(): grads = "
            "optax.clip_by_global_norm(max_norm).update(grads, optax.EmptyState())[0]"
        )
    held = type(opt_state).__name__ if opt_state is not None else "no optax state"
    raise ArgumentTypeError(
        "a scheduler sets the learning rate of an nnx.Optimizer whose state holds it "
        "(tj.optim.SGD/Adam/AdamW, or optax.inject_hyperparams(optax.sgd)(learning_rate"
        f"=...)); this {type(optimizer).__name__}'s state is a {held} with no learning "
        "rate to set. Fix: build it as nnx.Optimizer(model, tj.optim.Adam(lr=...), "
        "wrt=nnx.Param)"
    )


def read_state(optimizer: Any) -> tuple[list[dict[str, float]], Any]:
    """The hyperparameters (as floats) of each group and the inner state of a
    ``tj.optim`` optimizer."""
    opt_state = getattr(optimizer, "opt_state", None)
    inner = getattr(opt_state, "inner_state", None)
    if opt_state is None or type(inner) not in KINDS:
        held = type(opt_state if inner is None else inner).__name__
        raise ConversionError(
            f"expected an nnx.Optimizer over tj.optim.SGD, Adam, AdamW or RMSprop, not a "
            f"{type(optimizer).__name__} holding {held}: build it as nnx.Optimizer(model, "
            "tj.optim.SGD(lr=..., momentum=...), wrt=nnx.Param), whose state holds "
            "torch's buffers and hyperparameters"
        )
    hypers = [
        {name: exact(optimizer, name, group) for name in opt_state.hyperparams}
        for group in range(group_count(optimizer))
    ]
    return hypers, inner


#: Torch's kernel choices: in the parameter group, changing no number.
KERNEL_CHOICES = ("foreach", "fused", "capturable", "differentiable")


def torch_options(optimizer: Any) -> dict[str, Any]:
    """The torch options a ``tj.optim`` transformation keeps beside its state (its kernel
    choices), as ``_with_params`` left them on its ``init``."""
    init = getattr(getattr(optimizer, "tx", None), "init", None)
    options: dict[str, Any] = getattr(init, "torch_options", {})
    return options


def torch_group(
    kind: type, hyper: dict[str, float], options: Mapping[str, Any], own: Mapping[str, Any]
) -> dict[str, Any]:
    """The parameter group torch's own optimizer of ``kind`` has with ``hyper``: torch's
    keys in torch's order, from a torch optimizer made with the kernel choices alone and
    the group's ``own`` keys (so a value torch's constructor would refuse, such as a rate
    a scheduler took a hair below 0, is written as it is, as torch's own group holds
    it, and a group's keys come first, in their order, as in torch's)."""
    torch = import_torch("tj.optim.state_dict")
    values: dict[str, Any] = {"lr": hyper["learning_rate"]}
    if kind is SGDState:
        maker = torch.optim.SGD
        values.update(
            momentum=hyper["momentum"], dampening=hyper["dampening"],
            weight_decay=hyper["weight_decay"], nesterov=bool(hyper["nesterov"]),
        )  # fmt: skip
    elif kind is AdamState:
        maker = torch.optim.Adam
        values.update(
            betas=(hyper["beta1"], hyper["beta2"]), eps=hyper["eps"],
            weight_decay=hyper["weight_decay"],
            decoupled_weight_decay=bool(hyper["decoupled_weight_decay"]),
            amsgrad=bool(hyper["amsgrad"]),
        )  # fmt: skip
    else:
        maker = torch.optim.RMSprop
        values.update(
            alpha=hyper["alpha"], eps=hyper["eps"], weight_decay=hyper["weight_decay"],
            momentum=hyper["momentum"], centered=bool(hyper["centered"]),
        )  # fmt: skip
    values["maximize"] = bool(hyper.get("maximize", 0.0))
    made = maker([{"params": [torch.zeros(1)], **own}], **options)
    group: dict[str, Any] = made.state_dict()["param_groups"][0]
    group.update(values)
    return group


def is_variable(value: Any) -> bool:
    return hasattr(value, "get_value") and hasattr(value, "set_value")


def hyperparameter(leaf: Any) -> float:
    """A hyperparameter of an optax state as the Python float it was set from.

    The state holds float32 (``0.1`` as ``0.10000000149``); torch's param groups hold
    Python floats. The shortest decimal that is the same float32 is the one given.

    Raises:
        ArgumentTypeError: ``leaf`` holds one value per parameter group (an optimizer
            made with torch's groups): read one group's, ``leaf[i]``, or
            ``tj.optim.param_groups(optimizer)[i]["lr"]``; or is no number at all.

    Examples:
        >>> import jax.numpy as jnp
        >>> from torch2jax_device import optim
        >>> float(jnp.float32(0.1)), optim.hyperparameter(jnp.float32(0.1))
        (0.10000000149011612, 0.1)
    """
    try:
        value = np.asarray(value_of(leaf), np.float32)
    except (TypeError, ValueError):
        value = np.empty((0, 0), np.float32)
    if value.ndim > 1 or value.size == 0:
        raise ArgumentTypeError(
            f"tj.optim.hyperparameter(): {type(leaf).__name__} {shown(leaf)} is no "
            "hyperparameter leaf (a number held in the optax state). Fix: pass a "
            "hyperparameter leaf of an optax state (optimizer.opt_state.hyperparams['lr'])"
        )
    if value.ndim:
        raise ArgumentTypeError(
            f"this hyperparameter ({type(leaf).__name__}) holds one value per parameter "
            f"group ({value.tolist()}). Fix: read one group's, hyperparameter(leaf[i]), or "
            "tj.optim.param_groups(optimizer)[i]['lr'] (torch's param_groups[i]['lr'])"
        )
    return float(str(value))


def value_of(leaf: Any) -> Any:
    return leaf.get_value() if is_variable(leaf) else leaf


def keep_loaded_groups(
    optimizer: Any, groups: list[Mapping[str, Any]], hypers: list[dict[str, float]]
) -> None:
    """Keep a loaded checkpoint's ``groups`` whole, as torch's ``load_state_dict`` does:
    their hyperparameters as given (``hypers``, by the state's names), their scheduler
    keys, and their kernel choices (one group) or own keys (several)."""
    _EXACT[optimizer] = [{} for _ in groups]
    for number, (group, hyper) in enumerate(zip(groups, hypers, strict=True)):
        for name, value in hyper.items():
            set_exact(optimizer, name, value, number)
        extras = group_extras(optimizer, number)
        extras.clear()
        extras.update((key, float(group[key])) for key in SCHEDULER_KEYS if key in group)
    if len(groups) == 1:
        options = torch_options(optimizer)
        options.update(
            (name, groups[0][name])
            for name in KERNEL_CHOICES
            if name in options and name in groups[0]
        )
    else:
        _GIVEN[optimizer] = [
            {key: value for key, value in group.items() if key not in ("params", *SCHEDULER_KEYS)}
            for group in groups
        ]
