"""Torch's parameter groups for ``tj.optim``'s optimizers.

``torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay,
"weight_decay": 0.0}], lr=6e-4)`` ports as ``tj.optim.AdamW([{"params": lambda path, p:
p.ndim >= 2, "weight_decay": 0.1}, {"params": ..., "weight_decay": 0.0}], lr=6e-4)``:
each group's ``"params"`` selects parameters of the NNX model (a predicate or an nnx
filter over ``(path, variable)``, a list of paths, or a list of the parameters
``tj.parameters(model)`` yields) and its other keys override the defaults. Here: the
groups read from the constructor's argument (:func:`parsed`); which group each of a
model's parameters is in and its place there (:func:`membership`), the one rule the
optimizer's ``init``, ``state_dict`` and ``load_state_dict`` all follow; and how a step
reads it. With groups each hyperparameter in the optax state is one value per group,
and ``init`` notes ``[group, place]`` per parameter in the state (:func:`noted_groups`:
group -1 for a parameter in none, which does not train; place -1 where a predicate
chose it): a jitted step picks each parameter's hyperparameters (:func:`chosen`) and
keeps the state of one in no group (:func:`held`).
"""

from __future__ import annotations

import dataclasses
import re
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from .errors import ArgumentTypeError, ConfigError
from .optimizer_arguments import number as checked_number

__all__ = [
    "Group", "chosen", "held", "hyperparameter_names", "members", "membership", "noted_groups",
    "parsed", "plain_path", "refused_complex", "resolved",
]  # fmt: skip

#: A group's torch keys that are the optax state's hyperparameters, by the state's names.
_HYPERPARAMETERS = {
    "lr": ("learning_rate",),
    "momentum": ("momentum",),
    "dampening": ("dampening",),
    "weight_decay": ("weight_decay",),
    "eps": ("eps",),
    "alpha": ("alpha",),
    "betas": ("beta1", "beta2"),
    "nesterov": ("nesterov",),
    "maximize": ("maximize",),
    "centered": ("centered",),
    "decoupled_weight_decay": ("decoupled_weight_decay",),
    "amsgrad": ("amsgrad",),
    "fused": ("fused",),
}
#: Flags: stored as 0.0 or 1.0 in the state.
_FLAGS = ("nesterov", "maximize", "centered", "decoupled_weight_decay", "amsgrad", "fused")


@dataclasses.dataclass(frozen=True)
class Group:
    """One parameter group: what selects its parameters, and its own keys.

    ``select`` is a predicate over ``(path, variable)``, or a tuple of paths (tuples of
    path keys) and of weak references to arrays (matched by identity when the optimizer
    is made); ``given`` is the group's dict as the
    user wrote it, less ``"params"``, in its order (torch keeps it so, unknown keys
    included).
    """

    select: Callable[[tuple[Any, ...], Any], bool] | tuple[Any, ...]
    given: dict[str, Any]

    def overrides(self, function: str, names: Sequence[str]) -> dict[str, Any]:
        """The optax state's hyperparameters this group sets (``names``: the optimizer's)."""
        values: dict[str, Any] = {}
        for key, value in self.given.items():
            if key not in _HYPERPARAMETERS or _HYPERPARAMETERS[key][0] not in names:
                continue
            if key == "betas":
                if not (isinstance(value, (tuple, list)) and len(value) == 2):
                    raise ArgumentTypeError(
                        f"{function}: a group's betas must be a pair of floats such as "
                        f"(0.9, 0.999), not {value!r}"
                    )
                values.update(beta1=checked_number(function, "betas[0]", value[0]),
                              beta2=checked_number(function, "betas[1]", value[1]))  # fmt: skip
            elif key in _FLAGS:
                values[key] = float(bool(value))
            else:
                values[_HYPERPARAMETERS[key][0]] = checked_number(function, key, value)
        return values


def hyperparameter_names(key: str) -> tuple[str, ...]:
    """The optax state's names for torch's group key ``key`` (``()`` for another key)."""
    return _HYPERPARAMETERS.get(key, ())


def parsed(function: str, params: tuple[Any, ...]) -> list[Group] | None:
    """The groups of ``tj.optim.<function>(groups, ...)``, or None for no positional argument."""
    if not params:
        return None
    (groups, *rest) = params
    if rest or not _group_list(groups):
        raise ArgumentTypeError(
            f"tj.optim.{function}'s first argument (torch's params) is torch's list of "
            f"parameter groups ([{{'params': ..., 'weight_decay': 0.1}}, ...]) or nothing, "
            f"not {_shown(params)}. Fix: for one group pass the model to "
            f"nnx.Optimizer(model, tj.optim.{function}(lr=...), wrt=nnx.Param), which pairs "
            "the two"
        )
    if not groups:
        raise ConfigError(
            f"tj.optim.{function}: optimizer got an empty parameter list (torch's "
            "ValueError): give at least one group"
        )
    out = []
    for number, group in enumerate(groups):
        if "params" not in group:
            raise ArgumentTypeError(
                f"tj.optim.{function}: parameter group {number} has no 'params' (torch's "
                f"KeyError): it holds {sorted(map(str, group))}; add 'params': a predicate "
                "such as lambda path, p: p.ndim >= 2, an nnx filter, or a list of paths"
            )
        given = {key: value for key, value in group.items() if key != "params"}
        out.append(Group(_selector(function, number, group["params"]), given))
    return out


def _group_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(g, Mapping) for g in value)


def _shown(params: tuple[Any, ...]) -> str:
    first = params[0]
    return f"a {type(first).__name__}" + (f" and {len(params) - 1} more" if len(params) > 1 else "")


def _selector(function: str, number: int, params: Any) -> Any:
    """A group's ``"params"`` as a predicate over ``(path, variable)`` or a tuple of
    paths and arrays."""
    if isinstance(params, str):
        raise ArgumentTypeError(
            f"tj.optim.{function}: parameter group {number}'s params is the string "
            f"{params!r}: give a list of paths ([{params!r}]) or a filter "
            f"(nnx.PathContains({params!r}))"
        )
    if isinstance(params, (list, tuple)):
        return tuple(_path_or_array(function, number, item) for item in params)
    nnx = _nnx()
    try:
        predicate: Callable[[tuple[Any, ...], Any], bool] = nnx.filterlib.to_predicate(params)
    except TypeError as error:
        raise ArgumentTypeError(
            f"tj.optim.{function}: parameter group {number}'s params is a "
            f"{type(params).__name__}: give a predicate over (path, parameter), an nnx "
            "filter, a list of paths or a list of tj.parameters(model)'s parameters"
        ) from error
    return predicate


def _path_or_array(function: str, number: int, item: Any) -> Any:
    if isinstance(item, str):  # "layers.0.kernel", "layers[0].kernel", torch's "0.weight"
        parts = re.findall(r"[^.\[\]]+", item)
        return tuple(int(part) if part.isdigit() else part for part in parts)
    if isinstance(item, tuple):
        return tuple(item)
    array = getattr(item, "data", item)
    if hasattr(array, "shape") and hasattr(array, "dtype"):
        return weakref.ref(array)  # matched once, at init: the transformation keeps no copy
    raise ArgumentTypeError(
        f"tj.optim.{function}: parameter group {number}'s params holds a "
        f"{type(item).__name__} {item!r}: list paths ('layer.kernel') or the parameters "
        "tj.parameters(model) yields"
    )


def membership(
    groups: Sequence[Group], pairs: Sequence[tuple[tuple[Any, ...], Any]], *, arrays: bool = True
) -> dict[tuple[Any, ...], tuple[int, int]]:
    """Each parameter's group and place in that group's list, by path.

    ``pairs``: ``(path, variable)`` of the parameters, each path a tuple of plain keys
    (:func:`plain_path`). The place is the position in the
    group's list of paths (torch numbers a group's parameters in its list's order), or
    -1 where a predicate selects (then the model's order counts). ``arrays``: match the
    groups' arrays by identity (at ``init``, where the arrays are those the optimizer
    trains, and a path may name one it leaves out); else ``pairs`` are all the model's
    parameters, every listed path must be one, and arrays are left to the state.

    Raises:
        ConfigError: a parameter is in two groups (torch's ``ValueError``), a group
            lists an array that is none of ``pairs``' (with ``arrays``), or a path that
            is none of the model's (without).
    """
    found: dict[tuple[Any, ...], tuple[int, int]] = {}
    known = {path for path, _ in pairs}
    by_identity = {id(_array(variable)): path for path, variable in pairs}
    for number, group in enumerate(groups):
        chosen: list[tuple[tuple[Any, ...], int]] = []
        if callable(group.select):
            chosen = [(path, -1) for path, variable in pairs if group.select(path, variable)]
        else:
            for place, item in enumerate(group.select):
                if isinstance(item, tuple):
                    path = resolved(item, known, number)
                    if path is not None:
                        chosen.append((path, place))
                    elif not arrays:
                        raise ConfigError(
                            f"parameter group {number} lists {'.'.join(map(str, item))!r}, "
                            f"which is no parameter of the model (its paths are "
                            f"{['.'.join(map(str, path)) for path, _ in pairs][:8]}). Fix: "
                            "list the NNX paths tj.state_dict(model) names, or the torch "
                            "twin's names tj.state_dict(model, layout='torch') gives"
                        )
                elif arrays:
                    array = item()
                    if array is None or id(array) not in by_identity:
                        shown = "gone" if array is None else f"of shape {tuple(array.shape)}"
                        raise ConfigError(
                            f"parameter group {number} lists a parameter ({shown}) that is "
                            "none of the model's parameters this optimizer trains (a "
                            "parameter left out of wrt=, another model's, or one the model "
                            "has replaced since the list was made): name it by its path "
                            "('layer.kernel') or select it with a predicate"
                        )
                    chosen.append((by_identity[id(array)], place))
        for path, place in chosen:
            if path in found:
                raise ConfigError(
                    f"some parameters appear in more than one parameter group (torch's "
                    f"ValueError): {'.'.join(map(str, path))} is in groups "
                    f"{found[path][0]} and {number}; make the groups' params disjoint"
                )
            found[path] = (number, place)
    return found


#: Torch's names for NNX layers' variables: a twin's ``fc.weight`` is ``fc.kernel``, ...
_TORCH_NAMES = {
    "weight": ("kernel", "embedding", "scale"),
    "running_mean": ("mean",),
    "running_var": ("var",),
}


def resolved(
    path: tuple[Any, ...], known: set[tuple[Any, ...]], number: int
) -> tuple[Any, ...] | None:
    """The parameter of ``known`` that ``path`` names: its NNX path, or the torch twin's
    name for it (``fc.weight`` for ``fc.kernel``, ``0.weight`` for an ``nnx.Sequential``'s
    ``layers.0.kernel``); ``None`` for none.

    Raises:
        ConfigError: a torch name that fits two of the model's parameters.
    """
    if path in known:
        return path
    leaves = _TORCH_NAMES.get(path[-1], ()) if path and isinstance(path[-1], str) else ()
    renamed = [(*path[:-1], leaf) for leaf in leaves] or [path]
    spelled = renamed + [
        (*candidate[:i], "layers", *candidate[i:])
        for candidate in renamed
        for i, key in enumerate(candidate)
        if isinstance(key, int)
    ]
    matches = [candidate for candidate in dict.fromkeys(spelled) if candidate in known]
    if len(matches) > 1:
        raise ConfigError(
            f"parameter group {number} lists {'.'.join(map(str, path))!r}, a torch name that "
            f"fits {len(matches)} of the model's parameters "
            f"({', '.join('.'.join(map(str, match)) for match in matches)}). Fix: list the "
            "one you mean by its NNX path"
        )
    return matches[0] if matches else None


def plain_path(keys: Sequence[Any]) -> tuple[Any, ...]:
    """A pytree path (``DictKey('layer')``, ...) as nnx filters see it: ``('layer', ...)``."""
    return tuple(_plain(key) for key in keys)


def _plain(key: Any) -> Any:
    for attribute in ("key", "name", "idx"):
        if hasattr(key, attribute):
            return getattr(key, attribute)
    return key


def noted_groups(groups: list[Group], params: Any, *, marked: Sequence[bool] = ()) -> Any:
    """``[group, place]`` (int32) per parameter of ``params``, a tree like theirs: what
    an optimizer's ``init`` notes in its state (see :func:`membership`).

    ``marked``: per group, whether it is fused. A complex parameter in a fused group is
    noted ``[group, place, 1]``, a mark its shape shows to a jitted step, which refuses
    it as torch's first step does (:func:`refused_complex`); one in no group torch never
    sees.
    """
    pairs = jax.tree_util.tree_flatten_with_path(params, is_leaf=_is_variable)[0]
    found = membership(groups, [(plain_path(keys), leaf) for keys, leaf in pairs])
    places = []
    for keys, leaf in pairs:
        note: tuple[int, ...] = found.get(plain_path(keys), (-1, -1))
        if note[0] >= 0 and marked and marked[note[0]] and jnp.iscomplexobj(_array(leaf)):
            note = (*note, 1)
        places.append(jnp.asarray(note, jnp.int32))
    return jax.tree.unflatten(jax.tree.structure(params), places)


def refused_complex(params: Any, noted: Any, fused: bool) -> bool:
    """Whether a step meets a complex parameter a fused group trains (torch's
    ``RuntimeError``): without groups, any where the optimizer is ``fused``; with groups,
    one noted with the mark (:func:`noted_groups`)."""
    if noted is None:
        return fused and any(jnp.iscomplexobj(leaf) for leaf in jax.tree.leaves(params))
    return any(jnp.shape(note)[0] == 3 for note in jax.tree.leaves(noted))


def _is_variable(value: Any) -> bool:
    return hasattr(value, "get_value") and hasattr(value, "set_value")


def chosen(member: Any, *hyperparameters: Any) -> tuple[Any, ...]:
    """The hyperparameters of the group of a parameter whose ``group`` is ``member``."""
    if member is None:
        return hyperparameters
    index = jnp.maximum(member[0], 0)
    return tuple(value[index] for value in hyperparameters)


def held(member: Any, new: Any, old: Any) -> Any:
    """``new``, or ``old`` for a parameter in no group (it does not train, as in torch)."""
    if member is None or new is None:
        return new
    return jnp.where(member[0] >= 0, new, old)


def members(state: Any, like: Any) -> Any:
    """Each parameter's ``group`` in ``state``, or a None per parameter without groups."""
    group = state.group
    return jax.tree.map(lambda _: None, like) if group is None else group


def _array(variable: Any) -> Any:
    return variable.get_value() if hasattr(variable, "get_value") else variable


def _nnx() -> Any:
    from flax import nnx

    return nnx
