"""The state of ``tj.optim``'s optimizers across frameworks: torch's ``state_dict()``.

``tj.optim.state_dict(optimizer, model)`` gives what ``torch_optimizer.state_dict()``
gives for the model's torch twin, and ``tj.optim.load_state_dict(optimizer, model,
saved)`` takes it back: state is keyed by the index of the parameter in
``twin.parameters()``, and each buffer has the twin's layout (a Linear's ``(out, in)``).
So a checkpoint ``{"model": ..., "optimizer": ...}`` written by either framework
resumes on the other.

What torch's parameter group holds and an optax state has no place for is kept beside
the optimizer: the keys schedulers add to the group (``initial_lr``, OneCycleLR's
``max_lr``...) and each hyperparameter as the Python float last set (the state holds
float32), so a state dict gives torch's values exactly.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .checkpoints.messages import shown
from .checkpoints.module_state import (
    from_torch_layout,
    in_torch_layout,
    parameter_entries,
    placed_like,
)
from .detect import import_torch, is_torch_tensor
from .errors import ConversionError, StateDictError
from .optimizers import AdamState, RMSpropState, SGDState

__all__ = ["hyperparameter", "load_state_dict", "state_dict"]


# The torch optimizer each state is, and what it holds per parameter, by torch's key.
_KINDS = {SGDState: "SGD", AdamState: "Adam", RMSpropState: "RMSprop"}


def _torch_keys(inner: Any, hyper: dict[str, float]) -> tuple[str, ...]:
    """The buffers torch's optimizer keeps per parameter, with these hyperparameters."""
    if isinstance(inner, SGDState):
        return ("momentum_buffer",) if hyper["momentum"] != 0 else ()
    if isinstance(inner, AdamState):
        amsgrad = inner.max_exp_avg_sq is not None
        return ("exp_avg", "exp_avg_sq", *(("max_exp_avg_sq",) if amsgrad else ()))
    optional = (("momentum_buffer", hyper["momentum"] > 0), ("grad_avg", hyper["centered"] > 0))
    return ("square_avg", *(key for key, kept in optional if kept))


def state_dict(optimizer: Any, model: Any) -> dict[str, Any]:
    """Equivalent to `torch.optim.Optimizer.state_dict`.

    What the torch twin's optimizer would return: ``{"state": {index: {...}},
    "param_groups": [{...}]}``, with CPU tensors in the twin's layouts, keyed by the
    parameter's index in ``twin.parameters()`` (the model's
    [`tj.parameters`][torch2jax_device.parameters] order), and one parameter group
    holding the current hyperparameters (the learning rate a scheduler set). So
    ``torch.save({"model": tj.state_dict(model, layout="torch"), "optimizer":
    tj.optim.state_dict(optimizer, model)}, path)`` is a checkpoint the torch
    original resumes from.

    Args:
        optimizer: An ``nnx.Optimizer`` over ``tj.optim.SGD``, ``Adam``, ``AdamW`` or
            ``RMSprop`` (``wrt=nnx.Param``).
        model: The Flax NNX model it optimizes (its twin's order and layouts).

    Returns:
        Torch's optimizer state dict, as torch's own ``state_dict()`` lays it out
        (the parameter group's keys are those of the installed torch's optimizer).

    Raises:
        ConversionError: ``optimizer`` is not an ``nnx.Optimizer`` over a
            ``tj.optim`` transformation (the message names the fix), or its state
            does not cover the model's parameters.

    Examples:
        >>> from flax import nnx
        >>> import torch
        >>> from torch2jax_device import optim
        >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        >>> optimizer = nnx.Optimizer(model, optim.SGD(lr=0.1, momentum=0.9), wrt=nnx.Param)
        >>> saved = optim.state_dict(optimizer, model)
        >>> saved["state"], saved["param_groups"][0]["momentum"], saved["param_groups"][0]["params"]
        ({}, 0.9, [0, 1])
        >>> twin = torch.nn.Linear(2, 3)
        >>> torch.optim.SGD(twin.parameters(), lr=0.5, momentum=0.9).load_state_dict(saved)
    """
    hyper, inner = _states(optimizer)
    entries = parameter_entries(model)
    torch = import_torch("tj.optim.state_dict")
    group = _torch_group(type(inner), hyper, _options(optimizer))
    del group["params"]  # last, as torch packs it
    group.update(group_extras(optimizer))  # what schedulers added (initial_lr, ...)
    group["params"] = list(range(len(entries)))
    state: dict[int, dict[str, Any]] = {}
    keys = _torch_keys(inner, hyper)
    steps = _flat(inner[0])
    buffers = {key: _flat(getattr(inner, key)) for key in keys}
    for index, entry in enumerate(entries):
        if entry.name not in steps:  # left out of the optimizer (wrt=): torch's frozen one
            continue
        step = float(_value(steps[entry.name]))
        if step == 0 or not keys:  # torch keeps no state for a parameter before its step
            continue
        state[index] = {}
        if not isinstance(inner, SGDState):
            state[index]["step"] = torch.tensor(step)
        for key, flat in buffers.items():
            state[index][key] = in_torch_layout(entry, _value(_own(flat, key, entry.name)))
    return {"state": state, "param_groups": [group]}


def load_state_dict(optimizer: Any, model: Any, saved: Mapping[str, Any]) -> None:
    """Equivalent to `torch.optim.Optimizer.load_state_dict`.

    Puts a torch optimizer's state dict (``torch.load(path)["optimizer"]``, or one
    [`state_dict`][torch2jax_device.optim.state_dict] wrote) into an ``nnx.Optimizer``
    over ``tj.optim.SGD``, ``Adam``, ``AdamW`` or ``RMSprop``, in place. Buffers go to the
    parameter at the same index of the model's twin (``twin.parameters()`` order),
    transposed from the twin's layout and placed where the optimizer's state is; the
    parameter group's hyperparameters (the learning rate included) replace the
    optimizer's, as torch's ``load_state_dict`` replaces them. Tensors come from
    torch, NumPy or ``tj.load`` (JAX arrays).

    Args:
        optimizer: The ``nnx.Optimizer``.
        model: The NNX model it optimizes.
        saved: ``{"state": {...}, "param_groups": [...]}``.

    Raises:
        StateDictError: ``saved`` is not an optimizer state dict, has several
            parameter groups or another number of parameters than the model (torch's
            ``ValueError``), is another optimizer's (Adam's into SGD), or a buffer's
            shape differs from its parameter's (named). A ``RuntimeError`` and a
            `tj.CheckpointError`.
            A checkpoint written with ``amsgrad`` into an optimizer made without it
            (or the reverse) is refused naming the fix.
        ConversionError: ``optimizer`` is not an ``nnx.Optimizer`` over a
            ``tj.optim`` transformation.

    Examples:
        >>> from flax import nnx
        >>> import torch
        >>> from torch2jax_device import optim
        >>> twin = torch.nn.Linear(2, 3)
        >>> torch_optimizer = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
        >>> twin(torch.ones(1, 2)).sum().backward()
        >>> torch_optimizer.step()
        >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        >>> optimizer = nnx.Optimizer(model, optim.SGD(lr=0.5, momentum=0.5), wrt=nnx.Param)
        >>> optim.load_state_dict(optimizer, model, torch_optimizer.state_dict())
        >>> float(optimizer.opt_state.hyperparams["momentum"][...])
        0.8999999761581421
        >>> optimizer.opt_state.inner_state.momentum_buffer["kernel"][...].tolist()
        [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """
    _, inner = _states(optimizer)
    entries = parameter_entries(model)
    group, per_parameter = _checked(saved, type(inner), len(entries))
    options = _options(optimizer)
    if bool(group.get("amsgrad", False)) != bool(options.get("amsgrad", False)):
        raise StateDictError(
            f"the checkpoint's optimizer has amsgrad={bool(group.get('amsgrad'))} and this "
            f"one amsgrad={bool(options.get('amsgrad'))}: amsgrad shapes the state (its "
            f"max_exp_avg_sq), so build tj.optim.{_KINDS[type(inner)]}(..., "
            f"amsgrad={bool(group.get('amsgrad'))}) to resume it"
        )
    hyper = _hyperparameters(type(inner), group)
    for name, value in hyper.items():
        _set(optimizer.opt_state.hyperparams[name], value)
    options.update(
        (name, group[name]) for name in _KERNEL_CHOICES if name in options and name in group
    )
    # torch keeps the loaded group whole: its scheduler keys, its values as they are
    _EXTRAS[optimizer] = {key: float(group[key]) for key in _EXTRA_KEYS if key in group}
    _EXACT[optimizer] = {name: float(value) for name, value in hyper.items()}
    keys = _torch_keys(inner, hyper)
    flats = {key: _flat(getattr(inner, key)) for key in keys}
    steps = _flat(inner[0])
    loaded: list[tuple[Any, Any]] = []  # (variable, value): all checked first, then set
    counts: list[float] = []
    for index, entry in enumerate(entries):
        values = per_parameter.get(index) or {}
        if entry.name not in steps:
            if values:
                raise StateDictError(
                    f"the checkpoint has optimizer state for parameter {index} "
                    f"({shown(entry.torch_name or entry.name)}), which this optimizer does "
                    "not hold (its wrt= leaves it out): build nnx.Optimizer(model, tx, "
                    "wrt=nnx.Param) to resume it"
                )
            continue
        for key in keys:
            if values and values.get(key) is None:
                raise StateDictError(f"optimizer state of parameter {index} has no {key!r}")
            variable = _own(flats[key], key, entry.name)
            if not values:  # not stepped in the saved run: it starts afresh, as in torch
                loaded.append((variable, np.zeros(np.shape(_value(variable)), np.float32)))
                continue
            where = f"the optimizer state's {key} of parameter {index}"
            value = from_torch_layout(where, entry.torch_name or entry.name, values[key], entry)
            loaded.append((variable, value))
        counts.append(_saved_step(index, values, isinstance(inner, SGDState)))
        loaded.append((_own(steps, "step", entry.name), counts[-1]))
    for variable, value in loaded:
        _set(variable, value)
    most = 0.0 if isinstance(inner, SGDState) else max(counts, default=0.0)
    if most:  # updates so far, as optax and nnx count them (torch's SGD keeps no count)
        _set(optimizer.opt_state.count, int(most))
        if hasattr(optimizer, "step"):
            _set(optimizer.step, int(most))


def _saved_step(index: int, values: Mapping[str, Any], sgd: bool) -> float:
    """Parameter ``index``'s step in a torch state dict: SGD keeps none (a buffer means
    it stepped), Adam and RMSprop keep it per parameter."""
    if not values:
        return 0.0
    if sgd:
        return 1.0
    if "step" not in values:
        raise StateDictError(f"optimizer state of parameter {index} has no 'step'")
    step = float(np.asarray(_host(values["step"])))
    if not (step >= 0 and step.is_integer()):
        raise StateDictError(
            f"optimizer state of parameter {index} has step {step}: a count of updates "
            "(0, 1, 2, ...) is expected"
        )
    return step


def _own(flat: Mapping[str, Any], key: str, name: str) -> Any:
    """The optimizer state's ``key`` for parameter ``name``, or the library's error."""
    if name not in flat:
        raise ConversionError(
            f"the optimizer's state has no {key} for {name!r}: build "
            "nnx.Optimizer(model, tx, wrt=nnx.Param) over this model"
        )
    return flat[name]


#: The keys torch's schedulers add to a parameter group, in the order they add them.
_EXTRA_KEYS = ("initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum")
#: Each optimizer's such keys (``initial_lr``, which ``Scheduler(optimizer, ...,
#: last_epoch=N)`` needs to resume; OneCycleLR's phases' ends), as torch's group holds them.
_EXTRAS: weakref.WeakKeyDictionary[Any, dict[str, float]] = weakref.WeakKeyDictionary()
#: Each optimizer's hyperparameters as the Python floats last set (a checkpoint's group,
#: a scheduler's step), by the optax state's name.
_EXACT: weakref.WeakKeyDictionary[Any, dict[str, float]] = weakref.WeakKeyDictionary()


def group_extras(optimizer: Any) -> dict[str, float]:
    """The keys schedulers added to ``optimizer``'s group (torch's ``initial_lr``, ...),
    in torch's order; the dict itself, which a scheduler updates."""
    extras = _EXTRAS.setdefault(optimizer, {})
    ordered = {key: extras[key] for key in _EXTRA_KEYS if key in extras}
    extras.clear()
    extras.update(ordered)
    return extras


def initial_lr(optimizer: Any, lr: float | None = None) -> float | None:
    """torch's ``group.setdefault("initial_lr", group["lr"])``: the rate a scheduler made
    for ``optimizer`` starts from (a loaded checkpoint's, else ``lr``); with no ``lr``,
    the one kept, or None (torch's ``KeyError`` on resuming with ``last_epoch``)."""
    extras = group_extras(optimizer)
    if lr is None:
        return extras.get("initial_lr")
    return extras.setdefault("initial_lr", lr)


def exact(optimizer: Any, name: str) -> float:
    """Hyperparameter ``name`` of ``optimizer`` as torch's group holds it: the Python
    float last set (by a checkpoint, a scheduler, or the constructor) while the state
    still holds its float32, else the state's value as
    [`hyperparameter`][torch2jax_device.optim.hyperparameter] gives it."""
    variable = optimizer.opt_state.hyperparams[name]
    held = np.float32(_value(variable))
    init = getattr(getattr(optimizer, "tx", None), "init", None)
    for values in (_EXACT.get(optimizer, {}), getattr(init, "torch_values", {})):
        value = values.get(name)
        if isinstance(value, (int, float)) and np.float32(value) == held:
            return float(value)
    return hyperparameter(variable)


def set_exact(optimizer: Any, name: str, value: float) -> None:
    """Set hyperparameter ``name`` of ``optimizer`` to ``value`` (float32 in the state,
    where it is) and keep ``value`` as torch's group would hold it."""
    variable = optimizer.opt_state.hyperparams[name]
    variable.set_value(placed_like(value, variable.get_value(), f"the {name}"))
    _EXACT.setdefault(optimizer, {})[name] = float(value)


def _states(optimizer: Any) -> tuple[dict[str, float], Any]:
    """The hyperparameters (as floats) and the inner state of a ``tj.optim`` optimizer."""
    opt_state = getattr(optimizer, "opt_state", None)
    inner = getattr(opt_state, "inner_state", None)
    if opt_state is None or type(inner) not in _KINDS:
        held = type(opt_state if inner is None else inner).__name__
        raise ConversionError(
            f"expected an nnx.Optimizer over tj.optim.SGD, Adam, AdamW or RMSprop, not a "
            f"{type(optimizer).__name__} holding {held}: build it as nnx.Optimizer(model, "
            "tj.optim.SGD(lr=..., momentum=...), wrt=nnx.Param), whose state holds "
            "torch's buffers and hyperparameters"
        )
    hyper = {name: exact(optimizer, name) for name in opt_state.hyperparams}
    return hyper, inner


#: Torch's kernel choices: in the parameter group, changing no number.
_KERNEL_CHOICES = ("foreach", "fused", "capturable", "differentiable")


def _options(optimizer: Any) -> dict[str, Any]:
    """The torch options a ``tj.optim`` transformation keeps beside its state (its kernel
    choices and ``amsgrad``), as ``_with_params`` left them on its ``init``."""
    init = getattr(getattr(optimizer, "tx", None), "init", None)
    options: dict[str, Any] = getattr(init, "torch_options", {})
    return options


def _torch_group(kind: type, hyper: dict[str, float], options: Mapping[str, Any]) -> dict[str, Any]:
    """The parameter group torch's own optimizer of ``kind`` has with ``hyper``: torch's
    keys in torch's order, from a torch optimizer made with the kernel choices alone (so
    a value torch's constructor would refuse, such as a rate a scheduler took a hair
    below 0, is written as it is, as torch's own group holds it)."""
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
        )  # fmt: skip
    else:
        maker = torch.optim.RMSprop
        values.update(
            alpha=hyper["alpha"], eps=hyper["eps"], weight_decay=hyper["weight_decay"],
            momentum=hyper["momentum"], centered=bool(hyper["centered"]),
        )  # fmt: skip
    values["maximize"] = bool(hyper.get("maximize", 0.0))
    group: dict[str, Any] = maker([torch.zeros(1)], **options).state_dict()["param_groups"][0]
    group.update(values)
    return group


def _checked(
    saved: Any, kind: type, count: int
) -> tuple[Mapping[str, Any], Mapping[int, Mapping[str, Any]]]:
    """The one parameter group and the per-parameter state of ``saved``, checked."""
    if not (isinstance(saved, Mapping) and {"state", "param_groups"} <= set(saved)):
        keys = list(saved)[:6] if isinstance(saved, Mapping) else type(saved).__name__
        raise StateDictError(
            f"an optimizer state dict has 'state' and 'param_groups' (torch's "
            f"optimizer.state_dict()), this holds {shown(keys)}; for a whole checkpoint, "
            "pass the entry that holds the optimizer's, e.g. checkpoint['optimizer']"
        )
    groups = saved["param_groups"]
    if len(groups) != 1:
        raise StateDictError(
            f"the optimizer state dict has {len(groups)} parameter groups; tj.optim "
            "optimizers hold one. Give each group its own optax transformation "
            "(optax.multi_transform) and load each group's state into it"
        )
    (group,) = groups
    if len(group["params"]) != count:
        raise StateDictError(
            f"loaded state dict contains a parameter group that doesn't match the size of "
            f"optimizer's group: {len(group['params'])} parameters saved, the model has "
            f"{count} (torch raises ValueError here)"
        )
    saved_kind = "Adam" if "betas" in group else "RMSprop" if "alpha" in group else "SGD"
    if saved_kind != _KINDS[kind]:
        raise StateDictError(
            f"this is a torch {saved_kind} state dict and the optimizer is tj.optim."
            f"{_KINDS[kind]}: build the optimizer the checkpoint was written by "
            f"(tj.optim.{saved_kind})"
        )
    order = {torch_index: position for position, torch_index in enumerate(group["params"])}
    state = saved["state"]
    return group, {order[index]: values for index, values in state.items() if index in order}


def _hyperparameters(kind: type, group: Mapping[str, Any]) -> dict[str, float]:
    if kind is SGDState:
        return {
            "learning_rate": group["lr"], "momentum": group["momentum"],
            "dampening": group["dampening"], "weight_decay": group["weight_decay"],
            "nesterov": float(group["nesterov"]), "maximize": float(group.get("maximize", False)),
        }  # fmt: skip
    if kind is RMSpropState:
        return {
            "learning_rate": group["lr"], "alpha": group["alpha"], "eps": group["eps"],
            "weight_decay": group["weight_decay"], "momentum": group["momentum"],
            "centered": float(group["centered"]), "maximize": float(group.get("maximize", False)),
        }  # fmt: skip
    return {
        "learning_rate": group["lr"], "beta1": group["betas"][0], "beta2": group["betas"][1],
        "eps": group["eps"], "weight_decay": group["weight_decay"],
        "decoupled_weight_decay": float(group.get("decoupled_weight_decay", False)),
        "maximize": float(group.get("maximize", False)),
    }  # fmt: skip


def _flat(tree: Any) -> dict[str, Any]:
    """A state tree's variables (or arrays) by dotted path, the names ``Entry`` has."""
    nnx = sys.modules["flax.nnx"]
    if isinstance(tree, nnx.State):
        return {".".join(map(str, path)): leaf for path, leaf in nnx.to_flat_state(tree)}
    pairs = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_variable)[0]
    return {".".join(_key(key) for key in path): leaf for path, leaf in pairs}


def _key(key: Any) -> str:
    for attribute in ("name", "key", "idx"):
        if hasattr(key, attribute):
            return str(getattr(key, attribute))
    return str(key)


def _is_variable(value: Any) -> bool:
    return hasattr(value, "get_value") and hasattr(value, "set_value")


def hyperparameter(leaf: Any) -> float:
    """A hyperparameter of an optax state as the Python float it was set from.

    The state holds float32 (``0.1`` as ``0.10000000149``); torch's param groups hold
    Python floats. The shortest decimal that is the same float32 is the one given.

    Examples:
        >>> import jax.numpy as jnp
        >>> from torch2jax_device import optim
        >>> float(jnp.float32(0.1)), optim.hyperparameter(jnp.float32(0.1))
        (0.10000000149011612, 0.1)
    """
    return float(str(np.float32(_value(leaf))))


def _value(leaf: Any) -> Any:
    return leaf.get_value() if _is_variable(leaf) else leaf


def _host(value: Any) -> Any:
    return value.detach().cpu().numpy() if is_torch_tensor(value) else value


def _set(variable: Any, value: Any) -> None:
    """``variable``'s value replaced by ``value``, in its dtype and where it is."""
    if not _is_variable(variable):
        raise ConversionError(
            "the optimizer's state cannot be changed in place: pass the nnx.Optimizer "
            "itself (its state is held in variables)"
        )
    current = variable.get_value()
    if isinstance(current, jax.Array) and not current.committed:
        # Left uncommitted (nnx's step, optax's count): a jitted step places it beside the
        # parameters, on every process's devices; committing it here would pin it to one.
        variable.set_value(jnp.asarray(np.asarray(_host(value), current.dtype)))
        return
    variable.set_value(placed_like(_host(value), current, "the optimizer state"))
