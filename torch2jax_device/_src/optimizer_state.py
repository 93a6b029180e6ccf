"""The state of ``tj.optim``'s optimizers across frameworks: torch's ``state_dict()``.

``tj.optim.state_dict(optimizer, model)`` gives what ``torch_optimizer.state_dict()``
gives for the model's torch twin, and ``tj.optim.load_state_dict(optimizer, model,
saved)`` takes it back: state is keyed by the index of the parameter in
``twin.parameters()``, and each buffer has the twin's layout (a Linear's ``(out, in)``).
So a checkpoint ``{"model": ..., "optimizer": ...}`` written by either framework
resumes on the other.

The parameter groups' keys an optax state has no place for (the schedulers' keys, each
hyperparameter as the Python float last set) are kept by ``optimizer_groups``, which
also lays out each group as torch's own optimizer does; here the per-parameter state is
numbered, laid out and checked as torch's.
"""

from __future__ import annotations

import sys
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
from .optimizer_groups import (
    KINDS,
    given,
    group_extras,
    groups_of,
    is_variable,
    keep_loaded_groups,
    read_state,
    torch_group,
    torch_options,
    value_of,
)
from .optimizers import AdamState, RMSpropState, SGDState
from .param_groups import membership

__all__ = ["load_state_dict", "numbering", "state_dict"]


def _torch_keys(inner: Any, hyper: dict[str, float]) -> tuple[str, ...]:
    """The buffers torch's optimizer keeps per parameter, with these hyperparameters."""
    if isinstance(inner, SGDState):
        return ("momentum_buffer",) if hyper["momentum"] != 0 else ()
    if isinstance(inner, AdamState):  # torch keeps max_exp_avg_sq in amsgrad groups only
        amsgrad = inner.max_exp_avg_sq is not None and hyper["amsgrad"] > 0
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
    hypers, inner = read_state(optimizer)
    entries = parameter_entries(model)
    torch = import_torch("tj.optim.state_dict")
    state: dict[int, dict[str, Any]] = {}
    groups: list[dict[str, Any]] = []
    steps = _flat(inner[0])
    start = 0
    for number, positions in enumerate(numbering(optimizer, entries)):
        hyper = hypers[number]
        group = torch_group(type(inner), hyper, torch_options(optimizer), given(optimizer, number))
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
            step = float(value_of(steps[entry.name]))
            if step == 0 or not keys:  # torch keeps no state for a parameter before its step
                continue
            state[index] = {}
            if not isinstance(inner, SGDState):
                state[index]["step"] = torch.tensor(step)
            for key, flat in buffers.items():
                state[index][key] = in_torch_layout(entry, value_of(_own(flat, key, entry.name)))
    return {"state": state, "param_groups": groups}


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
            A checkpoint whose group has ``amsgrad`` into an optimizer that keeps no
            ``max_exp_avg_sq`` (no group made with ``amsgrad``) is refused naming the
            group and the fix; otherwise each group's ``amsgrad`` is the checkpoint's,
            as torch's ``load_state_dict`` replaces it.
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
    _, inner = read_state(optimizer)
    entries = parameter_entries(model)
    order = numbering(optimizer, entries)
    groups, per_parameter = _checked(state_dict, type(inner), [len(part) for part in order])
    for number, group in enumerate(groups):
        if type(inner) is AdamState and group.get("amsgrad") and inner.max_exp_avg_sq is None:
            raise StateDictError(
                f"the checkpoint's parameter group {number} has amsgrad=True and this "
                "optimizer keeps no max_exp_avg_sq (none of its groups has amsgrad): amsgrad "
                f"shapes the state. Fix: build tj.optim.{KINDS[type(inner)]}(..., "
                "amsgrad=True) to resume it, or with parameter groups give group "
                f"{number} 'amsgrad': True"
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
                    loaded.append((variable, np.zeros(np.shape(value_of(variable)), np.float32)))
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
    keep_loaded_groups(optimizer, groups, hypers)
    if getattr(inner, "group", None) is not None:
        _mark_fused(inner, [bool(group.get("fused")) for group in groups])
    most = 0.0 if isinstance(inner, SGDState) else max(counts, default=0.0)
    if most:  # updates so far, as optax and nnx count them (torch's SGD keeps no count)
        _set(optimizer.opt_state.count, int(most))
        if hasattr(optimizer, "step"):
            _set(optimizer.step, int(most))


def _mark_fused(inner: Any, fused: list[bool]) -> None:
    """Each complex parameter's group note marked where its group is now ``fused`` (the
    loaded checkpoint's groups say), unmarked where not, so a step refuses it as torch's
    first step after ``load_state_dict`` does (``param_groups.noted_groups``)."""
    buffers = _flat(inner[1])  # each parameter's first buffer, in its dtype
    for name, variable in _flat(inner.group).items():
        note = np.asarray(value_of(variable))
        marked = note[0] >= 0 and fused[note[0]] and jnp.iscomplexobj(value_of(buffers[name]))
        new = np.asarray([*note[:2], *([1] if marked else [])], np.int32)
        if new.shape != note.shape:
            variable.set_value(placed_like(new, value_of(variable), "a parameter's group"))


def numbering(optimizer: Any, entries: list[Any]) -> list[list[int]]:
    """Each parameter group's parameters, as positions in ``entries`` (the model's
    [`tj.parameters`][torch2jax_device.parameters] order), in the order torch numbers
    them: a group's list's order, or the model's where a predicate chose them. A
    parameter in no group is in none (torch's optimizer does not hold it).

    The parameters the optimizer trains are in the group its state notes; one left out
    of ``wrt=`` (torch's frozen one) is in the group whose path or predicate selects it.
    """
    groups = groups_of(optimizer)
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
            else (int(value) for value in np.asarray(value_of(member))[:2])
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
    if saved_kind != KINDS[kind]:
        raise StateDictError(
            f"this is a torch {saved_kind} state dict and the optimizer is tj.optim."
            f"{KINDS[kind]}. Fix: build the optimizer the checkpoint was written by "
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
            "fused": float(bool(group.get("fused"))),
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
        "amsgrad": float(bool(group.get("amsgrad", False))),
        "fused": float(bool(group.get("fused"))),
    }  # fmt: skip


def _flat(tree: Any) -> dict[str, Any]:
    """A state tree's variables (or arrays) by dotted path, the names ``Entry`` has."""
    nnx = sys.modules["flax.nnx"]
    if isinstance(tree, nnx.State):
        return {".".join(map(str, path)): leaf for path, leaf in nnx.to_flat_state(tree)}
    pairs = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_variable)[0]
    return {".".join(_key(key) for key in path): leaf for path, leaf in pairs}


def _key(key: Any) -> str:
    for attribute in ("name", "key", "idx"):
        if hasattr(key, attribute):
            return str(getattr(key, attribute))
    return str(key)


def _host(value: Any) -> Any:
    return value.detach().cpu().numpy() if is_torch_tensor(value) else value


def _set(variable: Any, value: Any) -> None:
    """``variable``'s value replaced by ``value``, in its dtype and where it is."""
    if not is_variable(variable):
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
