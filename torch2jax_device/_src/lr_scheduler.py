"""Torch's learning-rate schedulers over an ``nnx.Optimizer``: ``tj.optim.lr_scheduler``.

Each scheduler sets the optimizer's learning rate (``opt_state.hyperparams
["learning_rate"]``, which ``tj.optim``'s optimizers and any
``optax.inject_hyperparams`` optimizer hold) at each ``step()``, as torch's set each
``param_groups[i]["lr"]`` (one rate, and one ``base_lr``, per parameter group of a
``tj.optim`` optimizer made with torch's groups); its ``state_dict()`` is torch's, so a
torch scheduler
resumes from it and the reverse. Each step applies torch's own rule (``get_lr``: most
scale the optimizer's current rate), in double precision, so a rate set by hand, a
checkpoint's rate and a resume with ``last_epoch=`` go on as torch's do;
``as_schedule()`` gives torch's closed form as an optax schedule.
"""

from __future__ import annotations

import bisect
import collections
import math
import numbers
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

import jax.numpy as jnp

from .errors import (
    ArgumentTypeError,
    ConfigError,
    NoSuchAttributeError,
    StateDictError,
    UnsupportedOperationError,
)
from .optimizer_groups import (
    exact,
    group_count,
    group_extras,
    initial_lr,
    learning_rate_variable,
    set_exact,
)
from .plateau import ReduceLROnPlateau as ReduceLROnPlateau
from .scheduler_epochs import deprecated_epoch
from .truth import truth

__all__ = [
    "ConstantLR",
    "CosineAnnealingLR",
    "ExponentialLR",
    "LRScheduler",
    "LambdaLR",
    "LinearLR",
    "MultiStepLR",
    "OneCycleLR",
    "PolynomialLR",
    "ReduceLROnPlateau",
    "StepLR",
]


class LRScheduler:
    """Equivalent to `torch.optim.lr_scheduler.LRScheduler`: the base of the schedulers.

    Constructing one steps it once, as torch's do, and ``step()`` moves to the next
    epoch. ``base_lrs`` is each parameter group's ``initial_lr``: its learning rate
    when the first scheduler was made for it, or the one a loaded checkpoint holds;
    ``get_last_lr()`` gives one rate per group. A
    ``last_epoch`` other than -1 resumes as torch's does: the optimizer's state dict
    (with its ``initial_lr``) is loaded first, and the first step goes to epoch
    ``last_epoch + 1`` by the scheduler's own rule.
    """

    #: The scheduler's own arguments, in its torch state dict.
    _arguments: tuple[str, ...] = ()

    def __init__(self, optimizer: Any, last_epoch: int = -1) -> None:
        _last_epoch(last_epoch)
        self.optimizer = optimizer
        learning_rate_variable(optimizer)  # or the error naming an optimizer that holds its rate
        groups = range(group_count(optimizer))
        if last_epoch == -1:
            bases = [initial_lr(optimizer, exact(optimizer, "learning_rate", g), g) for g in groups]
        else:
            bases = [initial_lr(optimizer, group=g) for g in groups]
        if None in bases:
            raise ConfigError(
                f"param 'initial_lr' is not specified in param_groups[{bases.index(None)}] "
                f"when resuming "
                f"scheduler with last_epoch >= 0 (torch's KeyError; last_epoch="
                f"{last_epoch}): load the checkpoint's optimizer state first "
                "(tj.optim.load_state_dict(optimizer, model, checkpoint['optimizer'])), "
                "or make the scheduler with last_epoch=-1 and load its own state dict"
            )
        self.base_lrs: list[float] = [float(base) for base in bases if base is not None]
        self.last_epoch = last_epoch
        self._step_count = 0
        self._is_initial = True
        self.step()
        self._is_initial = False

    def lr_at(self, epoch: Any, base_lr: Any) -> Any:
        """The learning rate at ``epoch`` (torch's closed form); NumPy/JAX values work."""
        raise UnsupportedOperationError(
            f"{type(self).__name__} defines no learning rate rule: LRScheduler is the base "
            "class (torch's raises NotImplementedError here too). Fix: use a scheduler "
            "(StepLR, LambdaLR, ...) or subclass it and define lr_at(epoch, base_lr)"
        )

    def next_lr(self, lr: float, base_lr: float, group: int = 0) -> float:
        """The rate for epoch ``self.last_epoch`` from the current ``lr`` of parameter
        group ``group`` (torch's ``get_lr``, which most schedulers write as a change of
        the current rate)."""
        return float(self.lr_at(self.last_epoch, base_lr))

    def step(self, epoch: int | None = None) -> None:
        """Equivalent to ``scheduler.step()``: the next epoch's rate, set on the optimizer.

        ``step(epoch)``, deprecated in torch, is torch's too: it warns as torch does, moves
        to ``epoch`` and takes the rate there by the closed form.
        """
        self._step_count += 1
        if epoch is None:
            self.last_epoch += 1
        else:
            deprecated_epoch(epoch)
            self.last_epoch = epoch
        closed_form = epoch is not None and type(self).lr_at is not LRScheduler.lr_at
        self._last_lr = [
            float(self.lr_at(epoch, base))
            if closed_form
            else float(self.next_lr(exact(self.optimizer, "learning_rate", group), base, group))
            for group, base in enumerate(self.base_lrs)
        ]
        for group, lr in enumerate(self._last_lr):
            set_exact(self.optimizer, "learning_rate", lr, group)

    def get_last_lr(self) -> list[float]:
        """Equivalent to ``scheduler.get_last_lr()``."""
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """Equivalent to ``scheduler.state_dict()``: what torch's holds, key for key."""
        state = {name: _copied(getattr(self, name)) for name in self._arguments}
        state.update(
            base_lrs=list(self.base_lrs), last_epoch=self.last_epoch,
            _step_count=self._step_count, _is_initial=False,
            _get_lr_called_within_step=False, _last_lr=list(self._last_lr),
        )  # fmt: skip
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Equivalent to ``scheduler.load_state_dict(...)``, from torch's or this one's.

        As torch's, it sets the scheduler's position and arguments, not the optimizer's
        learning rate: that comes back with the optimizer's own state dict
        ([`tj.optim.load_state_dict`][torch2jax_device.optim.load_state_dict]).

        Raises:
            StateDictError: ``state_dict`` is another scheduler's (its arguments are
                missing), or not a scheduler's.
        """
        if not isinstance(state_dict, Mapping):
            raise StateDictError(
                f"a scheduler state dict is a dict (scheduler.state_dict()), not a "
                f"{type(state_dict).__name__}. Fix: pass the dict a scheduler's state_dict() "
                "returned (checkpoint['scheduler'])"
            )
        missing = [
            name for name in (*self._arguments, "base_lrs", "last_epoch") if name not in state_dict
        ]
        if missing:
            raise StateDictError(
                f"this is not a {type(self).__name__} state dict: it has no {missing} "
                f"(it holds {sorted(map(str, state_dict))[:8]}); make the scheduler the "
                "checkpoint was written with"
            )
        for name in self._arguments:
            setattr(self, name, _copied(state_dict[name]))
        self.base_lrs = [float(lr) for lr in state_dict["base_lrs"]]
        self.last_epoch = int(state_dict["last_epoch"])
        self._step_count = int(state_dict.get("_step_count", self.last_epoch + 1))
        self._last_lr = [float(lr) for lr in state_dict.get("_last_lr", self.base_lrs)]

    def as_schedule(self, steps_per_epoch: int = 1) -> Callable[[Any], Any]:
        """This scheduler's rates as an optax schedule: ``count -> lr``.

        The rate for optimizer step ``count`` is the one at epoch
        ``count // steps_per_epoch`` (a scheduler stepped once per epoch); it works
        under ``jax.jit``. For ``optax.sgd(learning_rate=scheduler.as_schedule(n))``.
        """
        if (
            isinstance(steps_per_epoch, bool)
            or not isinstance(steps_per_epoch, int)
            or steps_per_epoch < 1
        ):
            raise ArgumentTypeError(
                f"steps_per_epoch must be a positive int, not {steps_per_epoch!r}"
            )
        base = self.base_lrs[0]
        return lambda count: self.lr_at(count // steps_per_epoch, base)


class StepLR(LRScheduler):
    """Equivalent to `torch.optim.lr_scheduler.StepLR`: ``lr * gamma ** (epoch // step_size)``.

    Examples:
        >>> from flax import nnx
        >>> from torch2jax_device import optim
        >>> model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
        >>> optimizer = nnx.Optimizer(model, optim.SGD(lr=0.1), wrt=nnx.Param)
        >>> scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        >>> for epoch in range(4):
        ...     print(epoch, scheduler.get_last_lr())
        ...     scheduler.step()
        0 [0.1]
        1 [0.1]
        2 [0.05]
        3 [0.05]
    """

    _arguments = ("step_size", "gamma")

    def __init__(
        self, optimizer: Any, step_size: int, gamma: float = 0.1, last_epoch: int = -1
    ) -> None:
        self.step_size, self.gamma = _positive_int("step_size", step_size), _number("gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: Any, base_lr: Any) -> Any:
        return base_lr * self.gamma ** (epoch // self.step_size)

    def next_lr(self, lr: float, base_lr: float, group: int = 0) -> float:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return lr
        return lr * self.gamma


class MultiStepLR(LRScheduler):
    """Equivalent to `torch.optim.lr_scheduler.MultiStepLR`: ``gamma`` once per milestone passed.

    Examples:
        >>> from flax import nnx
        >>> from torch2jax_device import optim
        >>> model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
        >>> optimizer = nnx.Optimizer(model, optim.SGD(lr=1.0), wrt=nnx.Param)
        >>> scheduler = optim.lr_scheduler.MultiStepLR(optimizer, milestones=[1, 3], gamma=0.5)
        >>> rates = []
        >>> for epoch in range(4):
        ...     rates.append(scheduler.get_last_lr()[0])
        ...     scheduler.step()
        >>> rates
        [1.0, 0.5, 0.5, 0.25]
    """

    _arguments = ("milestones", "gamma")

    def __init__(
        self, optimizer: Any, milestones: Iterable[int], gamma: float = 0.1, last_epoch: int = -1
    ) -> None:
        try:
            epochs = [] if isinstance(milestones, (str, bytes)) else list(milestones)
        except Exception:
            epochs = []
        if not epochs and not isinstance(milestones, (list, tuple)):
            raise ArgumentTypeError(
                f"milestones must be a list of epochs, e.g. [30, 80], not "
                f"{type(milestones).__name__} {milestones!r}"
            )
        for epoch in epochs:
            if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
                raise ArgumentTypeError(
                    f"milestones must be non-negative int epochs, e.g. [30, 80]; "
                    f"milestones={milestones!r:.60} holds {epoch!r:.40}"
                )
        self.milestones = collections.Counter(epochs)
        self.gamma = _number("gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: Any, base_lr: Any) -> Any:
        passed = sorted(self.milestones.elements())
        if isinstance(epoch, int):
            return base_lr * self.gamma ** bisect.bisect_right(passed, epoch)
        count = jnp.searchsorted(jnp.asarray(passed), epoch, side="right")
        return base_lr * self.gamma**count

    def next_lr(self, lr: float, base_lr: float, group: int = 0) -> float:
        if self.last_epoch not in self.milestones:
            return lr
        return lr * self.gamma ** self.milestones[self.last_epoch]


class CosineAnnealingLR(LRScheduler):
    """Equivalent to `torch.optim.lr_scheduler.CosineAnnealingLR`.

    ``eta_min + (lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2`` (torch's closed
    form; torch's own steps reach it recursively, which agrees to rounding).
    """

    _arguments = ("T_max", "eta_min")

    def __init__(
        self, optimizer: Any, T_max: int, eta_min: float = 0.0, last_epoch: int = -1
    ) -> None:
        self.T_max, self.eta_min = _positive_int("T_max", T_max), _number("eta_min", eta_min)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: Any, base_lr: Any) -> Any:
        cosine = (
            math.cos(math.pi * epoch / self.T_max)
            if isinstance(epoch, int)
            else jnp.cos(jnp.pi * epoch / self.T_max)
        )
        return self.eta_min + (base_lr - self.eta_min) * (1 + cosine) / 2

    def next_lr(self, lr: float, base_lr: float, group: int = 0) -> float:
        epoch, period, low = self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return lr
        if self._step_count == 1 and epoch > 0:
            return float(self.lr_at(epoch, base_lr))
        if (epoch - 1 - period) % (2 * period) == 0:
            return lr + (base_lr - low) * (1 - math.cos(math.pi / period)) / 2
        ratio = (1 + math.cos(math.pi * epoch / period)) / (
            1 + math.cos(math.pi * (epoch - 1) / period)
        )
        return ratio * (lr - low) + low


class LinearLR(LRScheduler):
    """Equivalent to `torch.optim.lr_scheduler.LinearLR`: linear warm-up (or decay).

    The factor goes from ``start_factor`` to ``end_factor`` over ``total_iters`` epochs
    (or steps, if stepped per batch), then stays.
    """

    _arguments = ("start_factor", "end_factor", "total_iters")

    def __init__(
        self,
        optimizer: Any,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ) -> None:
        if (
            not 0 < _number("start_factor", start_factor) <= 1
            or not 0 <= _number("end_factor", end_factor) <= 1
        ):
            raise ConfigError(
                "Starting multiplicative factor expected to be greater than 0 and less or "
                "equal to 1, and the ending one between 0 and 1 (torch's check): got "
                f"start_factor={start_factor!r}, end_factor={end_factor!r}"
            )
        self.start_factor, self.end_factor = float(start_factor), float(end_factor)
        self.total_iters = _positive_int("total_iters", total_iters)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: Any, base_lr: Any) -> Any:
        done = (
            min(epoch, self.total_iters)
            if isinstance(epoch, int)
            else jnp.minimum(epoch, self.total_iters)
        )
        factor = self.start_factor + (self.end_factor - self.start_factor) * done / self.total_iters
        return base_lr * factor

    def next_lr(self, lr: float, base_lr: float, group: int = 0) -> float:
        start, end, total = self.start_factor, self.end_factor, self.total_iters
        if self.last_epoch == 0:
            return lr * start
        if self._is_initial or self.last_epoch > total:
            return lr
        return lr * (1.0 + (end - start) / (total * start + (self.last_epoch - 1) * (end - start)))


class LambdaLR(LRScheduler):
    """Equivalent to `torch.optim.lr_scheduler.LambdaLR`: ``lr * lr_lambda(epoch)``.

    ``lr_lambda`` is one function for every parameter group, or a list of one per
    group (torch's ``ValueError``, a `tj.ConfigError`, for another length). As
    torch's, ``state_dict()`` holds a callable object's attributes (``vars``) and
    nothing of a plain function, which the resumed scheduler must be given again.
    ``as_schedule()`` calls ``lr_lambda`` with a traced count: write it with
    arithmetic (``lambda epoch: 0.95 ** epoch``), not Python branches.

    Examples:
        >>> from flax import nnx
        >>> from torch2jax_device import optim
        >>> model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
        >>> optimizer = nnx.Optimizer(model, optim.SGD(lr=1.0), wrt=nnx.Param)
        >>> scheduler = optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 0.5**epoch)
        >>> scheduler.step()
        >>> scheduler.get_last_lr(), scheduler.state_dict()["lr_lambdas"]
        ([0.5], [None])
    """

    def __init__(self, optimizer: Any, lr_lambda: Any, last_epoch: int = -1) -> None:
        count = group_count(optimizer)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != count:
                raise ConfigError(
                    f"Expected {count} lr_lambdas, but got {len(lr_lambda)} (torch's "
                    f"ValueError): give one function per parameter group, or one for all"
                )
            lambdas = list(lr_lambda)
        else:
            lambdas = [lr_lambda] * count
        for function in lambdas:
            if not callable(function):
                raise ArgumentTypeError(
                    f"lr_lambda must be callable, not {type(function).__name__}"
                )
        self.lr_lambdas = lambdas
        super().__init__(optimizer, last_epoch)

    @property
    def lr_lambda(self) -> Any:
        """The first group's function (the only one without parameter groups)."""
        return self.lr_lambdas[0]

    def lr_at(self, epoch: Any, base_lr: Any) -> Any:
        return base_lr * self.lr_lambdas[0](epoch)

    def next_lr(self, lr: float, base_lr: float, group: int = 0) -> float:
        factor = self.lr_lambdas[group](self.last_epoch)
        if not isinstance(factor, numbers.Real) and getattr(factor, "shape", None) != ():
            raise ConfigError(
                f"lr_lambda returned {type(factor).__name__} {factor!r} for epoch "
                f"{self.last_epoch}: it must return the factor that multiplies the initial "
                "rate (a number), as torch's LambdaLR multiplies by it"
            )
        return float(base_lr * factor)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["lr_lambdas"] = [
            None if isinstance(function, types.FunctionType) else dict(vars(function))
            for function in self.lr_lambdas
        ]
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        super().load_state_dict(state_dict)
        lambdas = state_dict.get("lr_lambdas") or []
        for function, saved in zip(self.lr_lambdas, lambdas, strict=False):
            if saved is not None:
                vars(function).update(saved)


class ExponentialLR(LRScheduler):
    """Equivalent to `torch.optim.lr_scheduler.ExponentialLR`: ``lr * gamma ** epoch``.

    Examples:
        >>> from flax import nnx
        >>> from torch2jax_device import optim
        >>> model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
        >>> optimizer = nnx.Optimizer(model, optim.SGD(lr=1.0), wrt=nnx.Param)
        >>> scheduler = optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.5)
        >>> scheduler.step()
        >>> scheduler.get_last_lr()
        [0.5]
    """

    _arguments = ("gamma",)

    def __init__(self, optimizer: Any, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = _number("gamma", gamma)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: Any, base_lr: Any) -> Any:
        return base_lr * self.gamma**epoch

    def next_lr(self, lr: float, base_lr: float, group: int = 0) -> float:
        return lr if self._is_initial else lr * self.gamma


class ConstantLR(LRScheduler):
    """Equivalent to `torch.optim.lr_scheduler.ConstantLR`: ``lr * factor`` for the first
    ``total_iters`` epochs, then ``lr``.

    Examples:
        >>> from flax import nnx
        >>> from torch2jax_device import optim
        >>> model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
        >>> optimizer = nnx.Optimizer(model, optim.SGD(lr=1.0), wrt=nnx.Param)
        >>> scheduler = optim.lr_scheduler.ConstantLR(optimizer, factor=0.5, total_iters=1)
        >>> rates = [scheduler.get_last_lr()[0]]
        >>> scheduler.step()
        >>> rates + scheduler.get_last_lr()
        [0.5, 1.0]
    """

    _arguments = ("factor", "total_iters")

    def __init__(
        self,
        optimizer: Any,
        factor: float = 1.0 / 3,
        total_iters: int = 5,
        last_epoch: int = -1,
    ) -> None:
        if not 0 <= _number("factor", factor) <= 1:
            raise ConfigError(
                f"Constant multiplicative factor expected to be between 0 and 1 (torch's "
                f"ValueError), not {factor}"
            )
        self.factor, self.total_iters = float(factor), _positive_int("total_iters", total_iters)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: Any, base_lr: Any) -> Any:
        return base_lr * (self.factor + (epoch >= self.total_iters) * (1 - self.factor))

    def next_lr(self, lr: float, base_lr: float, group: int = 0) -> float:
        if self.last_epoch == 0:
            return lr * self.factor
        if self.last_epoch != self.total_iters:
            return lr
        if self.factor == 0:
            raise ConfigError(
                f"ConstantLR(factor=0) cannot undo its factor at epoch {self.total_iters} "
                "(total_iters): torch divides the rate by it there and raises "
                "ZeroDivisionError. Fix: a factor above 0"
            )
        return lr * (1.0 / self.factor)


class PolynomialLR(LRScheduler):
    """Equivalent to `torch.optim.lr_scheduler.PolynomialLR`: ``lr * (1 - epoch /
    total_iters) ** power`` until ``total_iters``, then 0.

    Examples:
        >>> from flax import nnx
        >>> from torch2jax_device import optim
        >>> model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
        >>> optimizer = nnx.Optimizer(model, optim.SGD(lr=1.0), wrt=nnx.Param)
        >>> scheduler = optim.lr_scheduler.PolynomialLR(optimizer, total_iters=4, power=2.0)
        >>> scheduler.step()
        >>> scheduler.get_last_lr()
        [0.5625]
    """

    _arguments = ("total_iters", "power")

    def __init__(
        self, optimizer: Any, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1
    ) -> None:
        self.total_iters = _positive_int("total_iters", total_iters)
        self.power = _number("power", power)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, epoch: Any, base_lr: Any) -> Any:
        done = (
            min(epoch, self.total_iters)
            if isinstance(epoch, int)
            else jnp.minimum(epoch, self.total_iters)
        )
        return base_lr * (1.0 - done / self.total_iters) ** self.power

    def next_lr(self, lr: float, base_lr: float, group: int = 0) -> float:
        if self._is_initial or self.last_epoch > self.total_iters:
            return lr
        epoch, total = self.last_epoch, self.total_iters
        return lr * float(((1.0 - epoch / total) / (1.0 - (epoch - 1) / total)) ** self.power)


class OneCycleLR(LRScheduler):
    """Equivalent to `torch.optim.lr_scheduler.OneCycleLR`: the 1cycle policy, stepped
    once per batch.

    As torch's, it writes ``initial_lr``, ``max_lr`` and ``min_lr`` (and, cycling the
    momentum, ``max_momentum`` and ``base_momentum``) into the optimizer's parameter
    group, which [`tj.optim.state_dict`][torch2jax_device.optim.state_dict] gives, and
    cycles ``momentum`` (SGD, RMSprop) or ``betas[0]`` (Adam, AdamW) against the rate.
    ``max_lr``, ``max_momentum`` and ``base_momentum`` are a number for every parameter
    group or a list of one per group, as torch's.

    Raises:
        ConfigError: where torch raises ``ValueError``: no ``total_steps`` (nor
            ``epochs`` and ``steps_per_epoch``), a ``pct_start`` outside ``[0, 1]`` or
            not a float, an unknown ``anneal_strategy``, cycling the momentum of an
            optimizer without one, stepping past ``total_steps``, or a list of another
            length than the parameter groups.

    Examples:
        >>> from flax import nnx
        >>> from torch2jax_device import optim
        >>> model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
        >>> optimizer = nnx.Optimizer(model, optim.SGD(lr=0.1, momentum=0.9), wrt=nnx.Param)
        >>> scheduler = optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1.0, total_steps=4)
        >>> rates = []
        >>> for _ in range(3):
        ...     rates.append(round(scheduler.get_last_lr()[0], 4))
        ...     scheduler.step()
        >>> rates
        [0.04, 0.8117, 0.2831]
    """

    def __init__(
        self,
        optimizer: Any,
        max_lr: Any,
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum: Any = 0.85,
        max_momentum: Any = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ) -> None:
        _last_epoch(last_epoch)
        learning_rate_variable(optimizer)
        self.total_steps = _total_steps(total_steps, epochs, steps_per_epoch)
        if not isinstance(pct_start, float) or not 0 <= pct_start <= 1:
            raise ConfigError(
                f"Expected float between 0 and 1 pct_start, but got {pct_start!r} (torch's "
                "ValueError)"
            )
        if not isinstance(anneal_strategy, str) or anneal_strategy not in ("cos", "linear"):
            raise ConfigError(
                f"anneal_strategy must be one of 'cos' or 'linear', instead got "
                f"{anneal_strategy!r} (torch's ValueError)"
            )
        three_phase = truth("OneCycleLR", "three_phase", three_phase)
        cycle_momentum = truth("OneCycleLR", "cycle_momentum", cycle_momentum)
        for name, factor in (("div_factor", div_factor), ("final_div_factor", final_div_factor)):
            if _number(name, factor) == 0:
                raise ConfigError(
                    f"{name}=0: OneCycleLR divides the rate by it (torch raises "
                    f"ZeroDivisionError). Fix: give a positive {name}, such as the default"
                )
        ends: tuple[float, ...] = (float(pct_start * self.total_steps) - 1, self.total_steps - 1)
        if three_phase:
            ends = (ends[0], float(2 * pct_start * self.total_steps) - 2, ends[1])
        self._schedule_phases: list[dict[str, Any]] = [
            {"end_step": end, "start_lr": lrs[0], "end_lr": lrs[1],
             "start_momentum": momenta[0], "end_momentum": momenta[1]}
            for end, lrs, momenta in zip(ends, *_PHASES[three_phase], strict=True)
        ]  # fmt: skip
        self._anneal_func_type = anneal_strategy
        count = group_count(optimizer)
        tops = _per_group("max_lr", max_lr, count)
        if last_epoch == -1:
            for group, top in enumerate(tops):
                extras = group_extras(optimizer, group)
                extras.update(initial_lr=top / div_factor, max_lr=top)
                extras["min_lr"] = extras["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        self._arguments = ("total_steps", "_schedule_phases", "_anneal_func_type",
                           "cycle_momentum")  # fmt: skip
        if cycle_momentum:
            hyperparams = optimizer.opt_state.hyperparams
            if "momentum" not in hyperparams and "beta1" not in hyperparams:
                raise ConfigError(
                    "optimizer must support momentum or beta1 with `cycle_momentum` option "
                    "enabled (torch's ValueError): pass cycle_momentum=False"
                )
            self.use_beta1 = "beta1" in hyperparams
            self._arguments = (*self._arguments, "use_beta1")
            if last_epoch == -1:
                highs = _per_group("max_momentum", max_momentum, count)
                lows = _per_group("base_momentum", base_momentum, count)
                for group, (high, low) in enumerate(zip(highs, lows, strict=True)):
                    set_exact(optimizer, self._momentum_name, high, group)
                    group_extras(optimizer, group).update(max_momentum=high, base_momentum=low)
        super().__init__(optimizer, last_epoch)

    @property
    def _momentum_name(self) -> str:
        return "beta1" if self.use_beta1 else "momentum"

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def next_lr(self, lr: float, base_lr: float, group: int = 0) -> float:
        step = self.last_epoch
        if step > self.total_steps:
            raise ConfigError(
                f"Tried to step {step} times. The specified number of total steps is "
                f"{self.total_steps} (torch's ValueError): make the scheduler with "
                "total_steps covering every scheduler.step()"
            )
        extras = group_extras(self.optimizer, group)
        start = 0.0
        for number, phase in enumerate(self._schedule_phases):
            end = phase["end_step"]
            if step <= end or number == len(self._schedule_phases) - 1:
                if end == start:
                    raise ConfigError(
                        f"OneCycleLR's phase {number} has no steps (total_steps="
                        f"{self.total_steps}): torch divides by its length and raises "
                        "ZeroDivisionError. Fix: more total_steps, or another pct_start"
                    )
                pct = (step - start) / (end - start)
                if self.cycle_momentum:
                    momentum = self._anneal(
                        extras[phase["start_momentum"]], extras[phase["end_momentum"]], pct
                    )
                    set_exact(self.optimizer, self._momentum_name, momentum, group)
                return self._anneal(extras[phase["start_lr"]], extras[phase["end_lr"]], pct)
            start = end
        raise AssertionError("unreachable: the last phase takes every step")


#: OneCycleLR's phases: each one's (start, end) rate and momentum, by group key.
_PHASES = {
    False: (
        (("initial_lr", "max_lr"), ("max_lr", "min_lr")),
        (("max_momentum", "base_momentum"), ("base_momentum", "max_momentum")),
    ),
    True: (
        (("initial_lr", "max_lr"), ("max_lr", "initial_lr"), ("initial_lr", "min_lr")),
        (("max_momentum", "base_momentum"), ("base_momentum", "max_momentum"),
         ("max_momentum", "max_momentum")),
    ),
}  # fmt: skip


def _total_steps(total_steps: Any, epochs: Any, steps_per_epoch: Any) -> int:
    """OneCycleLR's step count, checked as torch checks it."""
    if total_steps is not None:
        if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps <= 0:
            raise ConfigError(
                f"Expected positive integer total_steps, but got {total_steps} (torch's ValueError)"
            )
        return total_steps
    if epochs is None or steps_per_epoch is None:
        raise ConfigError(
            "You must define either total_steps OR (epochs AND steps_per_epoch) (torch's "
            "ValueError)"
        )
    for name, value in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(
                f"Expected positive integer {name}, but got {value} (torch's ValueError)"
            )
    return int(epochs * steps_per_epoch)


def _per_group(name: str, value: Any, count: int) -> list[float]:
    """A per-group value: a number for every group, or a list of one per group."""
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise ConfigError(
                f"expected {count} values for {name}, got {len(value)} ({name}={value!r}; "
                f"torch's ValueError): give one per parameter group, or one number for all"
            )
        return [_number(name, one) for one in value]
    return [_number(name, value)] * count


#: torch.optim.lr_scheduler's schedulers with no port here.
_UNPORTED = frozenset({
    "ChainedScheduler", "CosineAnnealingWarmRestarts", "CyclicLR", "MultiplicativeLR",
    "SequentialLR", "SWALR",
})  # fmt: skip


def __getattr__(name: str) -> NoReturn:
    """A torch scheduler not ported here: the library's error naming what is."""
    if name not in _UNPORTED:
        raise NoSuchAttributeError.unmapped("optim.lr_scheduler", name)
    raise NoSuchAttributeError(
        f"tj.optim.lr_scheduler has no {name!r} (torch.optim.lr_scheduler.{name}): the "
        f"ported schedulers are {', '.join(sorted(__all__))}. Fix: write its rate as "
        "LambdaLR(optimizer, lambda epoch: ...) (its state dict crosses to torch's "
        "LambdaLR, not to this one), or use an optax schedule"
    )


def _copied(value: Any) -> Any:
    return collections.Counter(value) if isinstance(value, collections.Counter) else value


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentTypeError(f"{name} must be a number, not {type(value).__name__} {value!r}")
    return float(value)


def _last_epoch(last_epoch: Any) -> None:
    if isinstance(last_epoch, bool) or not isinstance(last_epoch, int):
        raise ArgumentTypeError(f"last_epoch must be an int, not {last_epoch!r}")


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ArgumentTypeError(f"{name} must be a non-negative int, not {value!r}")
    return value
