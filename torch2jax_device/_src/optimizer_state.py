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
from collections.abc import Iterator, Mapping, MutableMapping
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
from .errors import (
    ArgumentTypeError,
    ConversionError,
    MissingKeyError,
    StateDictError,
    UnsupportedOperationError,
)
from .optimizer_arguments import number as checked_number
from .optimizers import AdamState, RMSpropState, SGDState
from .param_groups import hyperparameter_names, membership

__all__ = ["ParamGroup", "hyperparameter", "load_state_dict", "param_groups", "state_dict"]


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
    holding the current hyperparameters (the learning rate a scheduler set). With
    parameter groups, one group each, in their order, whose parameters are numbered one
    group after the other (each in its list's order, or the model's where a predicate
    chose them), as torch numbers them; a parameter in no group is in none. So
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
    hypers, inner = _states(optimizer)
    entries = parameter_entries(model)
    torch = import_torch("tj.optim.state_dict")
    state: dict[int, dict[str, Any]] = {}
    groups: list[dict[str, Any]] = []
    steps = _flat(inner[0])
    start = 0
    for number, positions in enumerate(numbering(optimizer, entries)):
        hyper = hypers[number]
        group = _torch_group(type(inner), hyper, _options(optimizer), given(optimizer, number))
        del group["params"]  # last, as torch packs it
        group.update(group_extras(optimizer, number))  # what schedulers added (initial_lr, ...)
        group["params"] = list(range(start, start + len(positions)))
        groups.append(group)
        start += len(positions)
        keys = _torch_keys(inner, hyper)
        buffers = {key: _flat(getattr(inner, key)) for key in keys}
        for index, position in zip(group["params"], positions, strict=True):
            entry = entries[position]
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
    return {"state": state, "param_groups": groups}


def param_groups(optimizer: Any) -> list[ParamGroup]:
    """Equivalent to ``torch.optim.Optimizer.param_groups``: each group's keys, live.

    One [`ParamGroup`][torch2jax_device.optim.ParamGroup] per parameter group of an
    ``nnx.Optimizer`` over a ``tj.optim`` optimizer (one without groups), holding what
    torch's group holds but ``"params"``: ``lr``, the other hyperparameters, the
    scheduler's keys. Setting a key sets the optimizer's state, so the loop of a
    trainer that schedules its own rate ports unchanged:
    ``for group in optim.param_groups(optimizer): group["lr"] = lr``.

    Raises:
        ConversionError: ``optimizer`` is not an ``nnx.Optimizer`` over a ``tj.optim``
            transformation.

    Examples:
        >>> from flax import nnx
        >>> from torch2jax_device import optim
        >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        >>> tx = optim.AdamW([{"params": ["kernel"], "weight_decay": 0.1},
        ...                   {"params": ["bias"], "weight_decay": 0.0}], lr=6e-4)
        >>> optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
        >>> groups = optim.param_groups(optimizer)
        >>> [group["weight_decay"] for group in groups], groups[1]["lr"]
        ([0.1, 0.0], 0.0006)
        >>> for group in groups:
        ...     group["lr"] = 3e-4
        >>> optimizer.opt_state.hyperparams["learning_rate"][...].tolist()
        [0.0003000000142492354, 0.0003000000142492354]
    """
    _states(optimizer)  # or the error naming what to pass
    return [ParamGroup(optimizer, group) for group in range(group_count(optimizer))]


class ParamGroup(MutableMapping[str, Any]):
    """One of torch's ``optimizer.param_groups``, read from and written to an
    ``nnx.Optimizer``'s state ([`param_groups`][torch2jax_device.optim.param_groups]).

    Reading gives torch's value (``group["betas"]`` a pair, a rate as set); writing a
    hyperparameter sets it in the optax state (float32), for the next step, jitted or
    not; a key of the user's own is kept, and written in the state dict, as torch keeps
    it. ``"params"`` is not held (the state dict numbers them:
    [`state_dict`][torch2jax_device.optim.state_dict]).

    Examples:
        >>> from flax import nnx
        >>> from torch2jax_device import optim
        >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        >>> tx = optim.Adam([{"params": ["kernel"]}, {"params": ["bias"], "name": "biases"}])
        >>> optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
        >>> group = optim.param_groups(optimizer)[1]
        >>> group["betas"] = (0.5, 0.99)
        >>> group["name"], group["betas"], optimizer.opt_state.hyperparams["beta1"][...].tolist()
        ('biases', (0.5, 0.99), [0.8999999761581421, 0.5])
    """

    def __init__(self, optimizer: Any, group: int) -> None:
        self._optimizer, self._group = optimizer, group

    def _current(self) -> dict[str, Any]:
        hypers, inner = _states(self._optimizer)
        own = given(self._optimizer, self._group)
        group = _torch_group(type(inner), hypers[self._group], _options(self._optimizer), own)
        del group["params"]
        group.update(group_extras(self._optimizer, self._group))
        return group

    def __getitem__(self, key: str) -> Any:
        if not isinstance(key, str):
            raise MissingKeyError(
                f"param_groups[{self._group}] has no key {type(key).__name__} {shown(key)}: "
                "a group's keys are str, as torch's. Fix: pass a key's name, e.g. "
                f"param_groups[{self._group}]['lr']"
            )
        if key == "params":
            raise UnsupportedOperationError(
                "tj.optim's param_groups hold no 'params' (the arrays live in the NNX "
                "model): the group's parameter indices are in tj.optim.state_dict("
                f"optimizer, model)['param_groups'][{self._group}]['params']"
            )
        current = self._current()
        if key not in current:
            raise MissingKeyError(
                f"param_groups[{self._group}] has no key {shown(key)}: it holds "
                f"{', '.join(map(repr, current))}. Fix: read one of those, or set the key "
                "first (group[key] = value), as torch's groups hold only what was set"
            )
        return current[key]

    def __setitem__(self, key: str, value: Any) -> None:
        where = f"param_groups[{self._group}][{shown(key)}] = ..."
        if not isinstance(key, str):
            raise ArgumentTypeError(
                f"{where}: a group's keys are str, as torch's, not {type(key).__name__}. "
                "Fix: name the key, e.g. group['lr'] = 0.01"
            )
        names = hyperparameter_names(key)
        hyperparams = self._optimizer.opt_state.hyperparams
        if names and all(name in hyperparams for name in names):
            values = _values(where, key, value, len(names))
            for name, one in zip(names, values, strict=True):
                set_exact(self._optimizer, name, checked_number(where, key, one), self._group)
        elif key in _EXTRA_KEYS:
            group_extras(self._optimizer, self._group)[key] = checked_number(where, key, value)
        elif key in (*_KERNEL_CHOICES, "amsgrad", "params") or key in self._current():
            raise UnsupportedOperationError(
                f"param_groups[{self._group}][{key!r}] is fixed when the optimizer is built "
                f"(it chooses torch's kernel or the state's shape): build it with {key}= "
                "instead"
            )
        else:  # the user's own key: torch keeps it in the group and its state dict
            _own_keys(self._optimizer)[self._group][key] = value

    def __delitem__(self, key: str) -> None:
        raise UnsupportedOperationError(
            f"param_groups[{self._group}][{key!r}] cannot be deleted: torch's optimizers "
            "need every key of a group"
        )

    def __iter__(self) -> Iterator[str]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())

    def __repr__(self) -> str:
        return f"ParamGroup({self._current()!r})"


def _values(where: str, key: str, value: Any, count: int) -> tuple[Any, ...]:
    """``value`` as the ``count`` numbers ``key`` sets: a pair for ``betas``."""
    if count == 1:
        return (value,)
    if (
        isinstance(value, (str, bytes))
        or not isinstance(value, (tuple, list))
        or (len(value) != count)
    ):
        raise ArgumentTypeError(
            f"{where}: {key} takes {count} numbers, not {type(value).__name__} "
            f"{shown(value)}. Fix: pass a tuple, e.g. group['betas'] = (0.9, 0.999)"
        )
    return tuple(value)


def load_state_dict(optimizer: Any, model: Any, state_dict: Mapping[str, Any]) -> None:
    """Equivalent to `torch.optim.Optimizer.load_state_dict`.

    Puts a torch optimizer's state dict (``torch.load(path)["optimizer"]``, or one
    [`state_dict`][torch2jax_device.optim.state_dict] wrote) into an ``nnx.Optimizer``
    over ``tj.optim.SGD``, ``Adam``, ``AdamW`` or ``RMSprop``, in place. Buffers go to the
    parameter at the same index of the model's twin (``twin.parameters()`` order),
    transposed from the twin's layout and placed where the optimizer's state is; the
    parameter group's hyperparameters (the learning rate included) replace the
    optimizer's, as torch's ``load_state_dict`` replaces them. With parameter groups,
    the checkpoint's groups are matched by position, each group's parameters in the
    order [`state_dict`][torch2jax_device.optim.state_dict] numbers them. Tensors come
    from torch, NumPy or ``tj.load`` (JAX arrays).

    Args:
        optimizer: The ``nnx.Optimizer``.
        model: The NNX model it optimizes.
        state_dict: ``{"state": {...}, "param_groups": [...]}`` (torch's keyword name).

    Raises:
        StateDictError: ``state_dict`` is not an optimizer state dict, has another number
            of parameter groups than the optimizer or a group of another size (torch's
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
    order = numbering(optimizer, entries)
    groups, per_parameter = _checked(state_dict, type(inner), [len(part) for part in order])
    options = _options(optimizer)
    for group in groups:
        if bool(group.get("amsgrad", False)) != bool(options.get("amsgrad", False)):
            raise StateDictError(
                f"the checkpoint's optimizer has amsgrad={bool(group.get('amsgrad'))} and "
                f"this one amsgrad={bool(options.get('amsgrad'))}: amsgrad shapes the state "
                f"(its max_exp_avg_sq). Fix: build tj.optim.{_KINDS[type(inner)]}(..., "
                f"amsgrad={bool(group.get('amsgrad'))}) to resume it"
            )
    hypers = [_hyperparameters(type(inner), group) for group in groups]
    steps = _flat(inner[0])
    loaded: list[tuple[Any, Any]] = []  # (variable, value): all checked first, then set
    counts: list[float] = []
    for hyper, positions, saved_part in zip(hypers, order, per_parameter, strict=True):
        keys = _torch_keys(inner, hyper)
        flats = {key: _flat(getattr(inner, key)) for key in keys}
        for position, values in zip(positions, saved_part, strict=True):
            entry = entries[position]
            if entry.name not in steps:
                if values:
                    raise StateDictError(
                        f"the checkpoint has optimizer state for parameter {position} "
                        f"({shown(entry.torch_name or entry.name)}), which this optimizer "
                        "does not hold (its wrt= leaves it out). Fix: build "
                        "nnx.Optimizer(model, tx, wrt=nnx.Param) to resume it"
                    )
                continue
            for key in keys:
                if values and values.get(key) is None:
                    raise StateDictError(
                        f"optimizer state of parameter {position} has no {key!r}. Fix: load "
                        "the state dict the same kind of optimizer wrote, with the same "
                        "options (momentum, centered, amsgrad)"
                    )
                variable = _own(flats[key], key, entry.name)
                if not values:  # not stepped in the saved run: it starts afresh, as in torch
                    loaded.append((variable, np.zeros(np.shape(_value(variable)), np.float32)))
                    continue
                where = f"the optimizer state's {key} of parameter {position}"
                name = entry.torch_name or entry.name
                value = from_torch_layout(
                    where, name, values[key], entry, torch_does=_TORCH_STEP_FAILS
                )
                loaded.append((variable, value))
            counts.append(_saved_step(position, values, isinstance(inner, SGDState)))
            loaded.append((_own(steps, "step", entry.name), counts[-1]))
    for variable, value in loaded:
        _set(variable, value)
    # torch keeps the loaded groups whole: their scheduler keys, their values as they are
    _EXACT[optimizer] = [{} for _ in groups]
    for number, (group, hyper) in enumerate(zip(groups, hypers, strict=True)):
        for name, value in hyper.items():
            set_exact(optimizer, name, value, number)
        extras = group_extras(optimizer, number)
        extras.clear()
        extras.update((key, float(group[key])) for key in _EXTRA_KEYS if key in group)
    if len(order) == 1:
        options.update(
            (name, groups[0][name])
            for name in _KERNEL_CHOICES
            if name in options and name in groups[0]
        )
    else:
        _GIVEN[optimizer] = [
            {key: value for key, value in group.items() if key not in ("params", *_EXTRA_KEYS)}
            for group in groups
        ]
    most = 0.0 if isinstance(inner, SGDState) else max(counts, default=0.0)
    if most:  # updates so far, as optax and nnx count them (torch's SGD keeps no count)
        _set(optimizer.opt_state.count, int(most))
        if hasattr(optimizer, "step"):
            _set(optimizer.step, int(most))


def numbering(optimizer: Any, entries: list[Any]) -> list[list[int]]:
    """Each parameter group's parameters, as positions in ``entries`` (the model's
    [`tj.parameters`][torch2jax_device.parameters] order), in the order torch numbers
    them: a group's list's order, or the model's where a predicate chose them. A
    parameter in no group is in none (torch's optimizer does not hold it).

    The parameters the optimizer trains are in the group its state notes; one left out
    of ``wrt=`` (torch's frozen one) is in the group whose path or predicate selects it.
    """
    groups = _groups(optimizer)
    if groups is None:
        return [list(range(len(entries)))]
    pairs = [(tuple(entry.path), entry.variable) for entry in entries]
    found = membership(groups, pairs, arrays=False)
    noted = _flat(getattr(optimizer.opt_state.inner_state, "group", None) or {})
    parts: list[list[tuple[int, int]]] = [[] for _ in groups]
    for position, entry in enumerate(entries):
        member = noted.get(entry.name)
        number, place = (
            found.get(tuple(entry.path), (-1, -1))
            if member is None
            else (int(value) for value in np.asarray(_value(member))[:2])
        )
        if number >= 0:
            parts[number].append((place, position))
    return [[position for _, position in sorted(part)] for part in parts]


def _saved_step(index: int, values: Mapping[str, Any], sgd: bool) -> float:
    """Parameter ``index``'s step in a torch state dict: SGD keeps none (a buffer means
    it stepped), Adam and RMSprop keep it per parameter."""
    if not values:
        return 0.0
    if sgd:
        return 1.0
    if "step" not in values:
        raise StateDictError(
            f"optimizer state of parameter {index} has no 'step'. Fix: load the state dict "
            "the same kind of optimizer wrote"
        )
    step = float(np.asarray(_host(values["step"])))
    if not (step >= 0 and step.is_integer()):
        raise StateDictError(
            f"optimizer state of parameter {index} has step {step}: a count of updates "
            "(0, 1, 2, ...) is expected. Fix: load the state dict torch's optimizer.state_dict() "
            "wrote, unchanged"
        )
    return step


#: What torch does with an optimizer buffer of another shape than its parameter.
_TORCH_STEP_FAILS = "torch loads it, and its first step fails"


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
    groups = _groups(optimizer)
    return 1 if groups is None else len(groups)


def _groups(optimizer: Any) -> list[Any] | None:
    """The parameter groups ``optimizer``'s transformation was made with, or None."""
    init = getattr(getattr(optimizer, "tx", None), "init", None)
    groups: list[Any] | None = getattr(init, "torch_groups", None)
    return groups


def given(optimizer: Any, group: int) -> dict[str, Any]:
    """Group ``group``'s own keys, as the user (or a loaded checkpoint) gave them."""
    loaded = _GIVEN.get(optimizer)
    if loaded is not None:
        return loaded[group]
    groups = _groups(optimizer)
    return {} if groups is None else dict(groups[group].given)


def _own_keys(optimizer: Any) -> list[dict[str, Any]]:
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
        every.append({key: float(own[key]) for key in _EXTRA_KEYS if key in own})
    extras = every[group]
    ordered = {key: extras[key] for key in _EXTRA_KEYS if key in extras}
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
    held = np.asarray(_value(variable), np.float32)
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
    hyperparams = getattr(getattr(optimizer, "opt_state", None), "hyperparams", None)
    variable = hyperparams.get("learning_rate") if isinstance(hyperparams, Mapping) else None
    if variable is None or not hasattr(variable, "set_value"):
        raise ArgumentTypeError(
            f"a scheduler sets the learning rate of an nnx.Optimizer whose state holds it "
            f"(tj.optim.SGD/Adam/AdamW, or optax.inject_hyperparams(optax.sgd)(learning_rate"
            f"=...)), not of a {type(optimizer).__name__}"
        )
    return variable


def _states(optimizer: Any) -> tuple[list[dict[str, float]], Any]:
    """The hyperparameters (as floats) of each group and the inner state of a
    ``tj.optim`` optimizer."""
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
    hypers = [
        {name: exact(optimizer, name, group) for name in opt_state.hyperparams}
        for group in range(group_count(optimizer))
    ]
    return hypers, inner


#: Torch's kernel choices: in the parameter group, changing no number.
_KERNEL_CHOICES = ("foreach", "fused", "capturable", "differentiable")


def _options(optimizer: Any) -> dict[str, Any]:
    """The torch options a ``tj.optim`` transformation keeps beside its state (its kernel
    choices and ``amsgrad``), as ``_with_params`` left them on its ``init``."""
    init = getattr(getattr(optimizer, "tx", None), "init", None)
    options: dict[str, Any] = getattr(init, "torch_options", {})
    return options


def _torch_group(
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


def _checked(
    saved: Any, kind: type, sizes: list[int]
) -> tuple[list[Mapping[str, Any]], list[list[Mapping[str, Any]]]]:
    """The parameter groups of ``saved`` (as many as ``sizes``, each of its size) and,
    per group, each of its parameters' state (``{}`` for none), checked as torch checks."""
    if not (isinstance(saved, Mapping) and {"state", "param_groups"} <= set(saved)):
        keys = list(saved)[:6] if isinstance(saved, Mapping) else type(saved).__name__
        raise StateDictError(
            f"an optimizer state dict has 'state' and 'param_groups' (torch's "
            f"optimizer.state_dict()), this holds {shown(keys)}. Fix: for a whole "
            "checkpoint, pass the entry that holds the optimizer's, e.g. "
            "checkpoint['optimizer']"
        )
    groups = list(saved["param_groups"])
    if len(groups) != len(sizes):
        raise StateDictError(
            f"loaded state dict has a different number of parameter groups (torch's "
            f"ValueError): {len(groups)} saved, this optimizer has {len(sizes)}. Fix: build "
            f"it with the checkpoint's groups (tj.optim.<Optimizer>([{{'params': ...}}, ...]), "
            "in the same order)"
        )
    for number, (group, size) in enumerate(zip(groups, sizes, strict=True)):
        if len(group["params"]) != size:
            raise StateDictError(
                f"loaded state dict contains a parameter group that doesn't match the size "
                f"of optimizer's group (torch's ValueError): group {number} has "
                f"{len(group['params'])} parameters saved and {size} here. Fix: build the "
                "optimizer with the checkpoint's groups, each listing the same parameters in "
                "the same order"
            )
    saved_kind = "Adam" if "betas" in groups[0] else "RMSprop" if "alpha" in groups[0] else "SGD"
    if saved_kind != _KINDS[kind]:
        raise StateDictError(
            f"this is a torch {saved_kind} state dict and the optimizer is tj.optim."
            f"{_KINDS[kind]}. Fix: build the optimizer the checkpoint was written by "
            f"(tj.optim.{saved_kind})"
        )
    state = saved["state"]
    return groups, [[state.get(index) or {} for index in group["params"]] for group in groups]


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
        value = np.asarray(_value(leaf), np.float32)
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
