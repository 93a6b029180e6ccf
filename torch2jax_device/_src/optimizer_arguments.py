"""Torch's optimizer arguments, checked as torch checks them.

What ``tj.optim.SGD`` / ``Adam`` / ``AdamW`` / ``RMSprop`` take by keyword: torch's
keywords (an unknown one named), each
hyperparameter's type and range (torch's ``ValueError`` where torch raises it, with
its wording), and the kernel choices that change no number.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from .errors import ArgumentTypeError, ConfigError, UnsupportedOperationError

__all__ = ["at_least_zero", "kernel_options", "number", "unexpected"]


def unexpected(function: str, unknown: Mapping[str, Any]) -> None:
    """A keyword torch's optimizer does not take (torch's ``TypeError``), named."""
    if unknown:
        name = next(iter(unknown))
        raise ArgumentTypeError(
            f"tj.optim.{function} got an unexpected keyword argument {name!r} (as torch's "
            f"{function}, which raises TypeError): it takes the keywords of "
            f"torch.optim.{function}; remove {name}={unknown[name]!r}"
        )


def number(function: str, name: str, value: Any) -> float:
    """``value`` as a float where torch takes it as a number (a bool, an int, a NumPy
    number); else the library's ``TypeError`` naming it."""
    if hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, numbers.Real):
        raise ArgumentTypeError(
            f"{function}: {name} is a {type(value).__name__} ({value!r}): tj.optim takes "
            f"hyperparameters as numbers. Torch takes a tensor {name} so a captured or "
            f"compiled step reads its current value; here every hyperparameter already "
            f"lives in the optax state, where a scheduler or tj.optim.param_groups sets it "
            f"between jitted steps. Fix: pass {name}=float(...)"
        )
    if not isinstance(value, numbers.Real):
        raise ArgumentTypeError(
            f"{function}: {name} must be a number, not {type(value).__name__} {value!r} "
            "(torch raises TypeError comparing it with 0)"
        )
    return float(value)


#: How torch's messages name each hyperparameter ("Invalid learning rate: -1").
_LABELS = {
    "lr": "learning rate",
    "eps": "epsilon value",
    "momentum": "momentum value",
    "weight_decay": "weight_decay value",
    "alpha": "alpha value",
}


def at_least_zero(function: str, name: str, value: Any, *, nan: bool = False) -> float:
    """``value`` as a float, refused where torch refuses it: below 0, and NaN unless
    ``nan`` (torch's SGD checks ``value < 0``, which NaN passes; the others
    ``not 0.0 <= value``, which it fails)."""
    checked = number(function, name, value)
    if checked < 0 or (math.isnan(checked) and not nan):
        raise ConfigError(
            f"Invalid {_LABELS[name]}: {value} (torch's ValueError): tj.optim.{function} "
            f"needs {name} >= 0"
        )
    return checked


def kernel_options(function: str, **options: Any) -> dict[str, Any]:
    """Torch's kernel choices (``foreach``, ``fused``, ``capturable``, ``differentiable``),
    which change no number here, checked as torch checks them and kept for the state
    dict's parameter group."""
    if options.get("fused"):
        for other in ("differentiable", "foreach"):
            if options.get(other):
                raise UnsupportedOperationError(
                    f"tj.optim.{function}: fused=True and {other}=True cannot be set together "
                    "(torch's RuntimeError); set one of them"
                )
    return {
        name: value if value is None or name in ("foreach", "fused") else bool(value)
        for name, value in options.items()
    }
