"""``tj.optim.lr_scheduler.ReduceLROnPlateau``: the rate cut when a metric stalls.

Unlike the other schedulers it steps on a metric (``step(val_loss)``), does not step
when made and sets no ``initial_lr``; its state dict is torch's, key for key.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

from .errors import ArgumentTypeError, ConfigError, StateDictError
from .optimizer_groups import exact, group_count, learning_rate_variable, set_exact
from .scheduler_epochs import deprecated_epoch

__all__ = ["ReduceLROnPlateau"]


class ReduceLROnPlateau:
    """Equivalent to `torch.optim.lr_scheduler.ReduceLROnPlateau`: the rate times
    ``factor`` once the metric given to ``step(metric)`` has not improved for
    ``patience`` epochs.

    As torch's, it does not step when made and sets no ``initial_lr``; its
    ``state_dict()`` is torch's, key for key, so either framework resumes the other's.

    Raises:
        ConfigError: ``factor >= 1``, an unknown ``mode`` or ``threshold_mode``, or a
            ``min_lr`` list of another length than the parameter groups (torch's
            ``ValueError``).

    Examples:
        >>> from flax import nnx
        >>> from torch2jax_device import optim
        >>> model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
        >>> optimizer = nnx.Optimizer(model, optim.SGD(lr=1.0), wrt=nnx.Param)
        >>> scheduler = optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=1)
        >>> for loss in (1.0, 1.0, 1.0):
        ...     scheduler.step(loss)
        >>> scheduler.get_last_lr()
        [0.1]
    """

    def __init__(
        self,
        optimizer: Any,
        mode: str = "min",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_lr: Any = 0,
        eps: float = 1e-8,
    ) -> None:
        if isinstance(factor, bool) or not isinstance(factor, (int, float)):
            raise ArgumentTypeError(f"factor must be a number, not {type(factor).__name__}")
        if factor >= 1.0:
            raise ConfigError(f"Factor should be < 1.0 (torch's ValueError), not {factor}")
        self.factor = factor
        self.optimizer = optimizer
        learning_rate_variable(optimizer)  # or the error naming an optimizer that holds its rate
        count = group_count(optimizer)
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != count:
                raise ConfigError(
                    f"expected {count} min_lrs, got {len(min_lr)} (torch's ValueError): one "
                    "per parameter group, or one number for all"
                )
            self.default_min_lr: Any = None
            self.min_lrs = list(min_lr)
        else:
            self.default_min_lr = min_lr
            self.min_lrs = [min_lr] * count
        self.patience, self.cooldown, self.eps = patience, cooldown, eps
        self.last_epoch = 0
        self._last_lr = [exact(optimizer, "learning_rate", group) for group in range(count)]
        self._init_is_better(mode, threshold, threshold_mode)
        self._reset()

    def _init_is_better(self, mode: str, threshold: float, threshold_mode: str) -> None:
        if not isinstance(mode, str) or mode not in ("min", "max"):
            raise ConfigError(
                f"mode {mode!r} is unknown (torch's ValueError). Fix: pass mode='min' (a loss) "
                "or mode='max' (an accuracy)"
            )
        if not isinstance(threshold_mode, str) or threshold_mode not in ("rel", "abs"):
            raise ConfigError(
                f"threshold mode {threshold_mode!r} is unknown (torch's ValueError). Fix: pass "
                "threshold_mode='rel' or 'abs'"
            )
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode

    def _reset(self) -> None:
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def _is_better(self, value: float, best: float) -> bool:
        if self.mode == "min" and self.threshold_mode == "rel":
            return value < best * (1.0 - self.threshold)
        if self.mode == "min":
            return value < best - self.threshold
        if self.threshold_mode == "rel":
            return value > best * (self.threshold + 1.0)
        return value > best + self.threshold

    def step(self, metrics: Any, epoch: int | None = None) -> None:
        """Equivalent to ``scheduler.step(metrics)``: one epoch's metric (a number, or a
        0-d JAX, NumPy or torch array). ``epoch``, deprecated in torch, sets the epoch
        number and warns, as torch's does."""
        try:
            current = float(metrics)
        except (TypeError, ValueError, RuntimeError) as error:  # torch's and NumPy's
            raise ArgumentTypeError(
                f"ReduceLROnPlateau.step(metrics): the metric must be one number (a float, or "
                f"a 0-d JAX, NumPy or torch array), not {type(metrics).__name__} "
                f"{metrics!r:.60} ({error}). Fix: pass the epoch's loss, e.g. float(loss)"
            ) from None
        if epoch is None:
            self.last_epoch += 1
        else:
            deprecated_epoch(epoch)
            self.last_epoch = epoch
        if self._is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0  # bad epochs in cooldown do not count, as in torch
        if self.num_bad_epochs > self.patience:
            for group, low in enumerate(self.min_lrs):
                old = exact(self.optimizer, "learning_rate", group)
                new = max(old * self.factor, low)
                if old - new > self.eps:
                    set_exact(self.optimizer, "learning_rate", new, group)
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [
            exact(self.optimizer, "learning_rate", group) for group in range(len(self.min_lrs))
        ]

    def get_last_lr(self) -> list[float]:
        """Equivalent to ``scheduler.get_last_lr()``."""
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """Equivalent to ``scheduler.state_dict()``: torch's keys, in torch's order."""
        return {name: copy.copy(getattr(self, name)) for name in _PLATEAU_STATE}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Equivalent to ``scheduler.load_state_dict(...)``, from torch's or this one's.

        Raises:
            StateDictError: ``state_dict`` is not a ReduceLROnPlateau's.
        """
        if not isinstance(state_dict, Mapping):
            raise StateDictError(
                f"a scheduler state dict is a dict (scheduler.state_dict()), not a "
                f"{type(state_dict).__name__}. Fix: pass the dict a scheduler's state_dict() "
                "returned (checkpoint['scheduler'])"
            )
        missing = [name for name in _PLATEAU_STATE if name not in state_dict]
        if missing:
            raise StateDictError(
                f"this is not a ReduceLROnPlateau state dict: it has no {missing} (it holds "
                f"{sorted(map(str, state_dict))[:8]}); make the scheduler the checkpoint was "
                "written with"
            )
        for name in _PLATEAU_STATE:
            setattr(self, name, copy.copy(state_dict[name]))
        self._init_is_better(self.mode, self.threshold, self.threshold_mode)


#: ReduceLROnPlateau's state, as torch's ``state_dict()`` lists it.
_PLATEAU_STATE = (
    "factor", "default_min_lr", "min_lrs", "patience", "cooldown", "eps", "last_epoch",
    "_last_lr", "mode_worse", "mode", "threshold", "threshold_mode", "best",
    "cooldown_counter", "num_bad_epochs",
)  # fmt: skip
