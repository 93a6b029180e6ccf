"""``tj.optim.param_groups``: torch's ``optimizer.param_groups`` as live mappings.

Each :class:`ParamGroup` reads a group's keys from a ``tj.optim`` optimizer's state and
what is kept beside it (``optimizer_groups``), and writes a hyperparameter back into the
optax state, so a trainer's ``group["lr"] = lr`` ports unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

from .checkpoints.messages import shown
from .errors import ArgumentTypeError, MissingKeyError, UnsupportedOperationError
from .optimizer_arguments import number as checked_number
from .optimizer_groups import (
    KERNEL_CHOICES,
    SCHEDULER_KEYS,
    given,
    group_count,
    group_extras,
    own_keys,
    read_state,
    set_exact,
    torch_group,
    torch_options,
)
from .param_groups import hyperparameter_names

__all__ = ["ParamGroup", "param_groups"]


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
    read_state(optimizer)  # or the error naming what to pass
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
        hypers, inner = read_state(self._optimizer)
        own = given(self._optimizer, self._group)
        group = torch_group(type(inner), hypers[self._group], torch_options(self._optimizer), own)
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
        # amsgrad is in the state per group, but torch's step needs max_exp_avg_sq made
        # at the group's first step: it is fixed, as the kernel choices are
        fixed = key in (*KERNEL_CHOICES, "amsgrad", "params")
        if not fixed and names and all(name in hyperparams for name in names):
            values = _values(where, key, value, len(names))
            for name, one in zip(names, values, strict=True):
                set_exact(self._optimizer, name, checked_number(where, key, one), self._group)
        elif key in SCHEDULER_KEYS:
            group_extras(self._optimizer, self._group)[key] = checked_number(where, key, value)
        elif fixed or key in self._current():
            raise UnsupportedOperationError(
                f"param_groups[{self._group}][{key!r}] is fixed when the optimizer is built "
                f"(it chooses torch's kernel or the state's shape): build it with {key}= "
                "instead"
            )
        else:  # the user's own key: torch keeps it in the group and its state dict
            own_keys(self._optimizer)[self._group][key] = value

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
