"""``scheduler.step(epoch)``: torch's deprecated form, kept working as torch keeps it."""

from __future__ import annotations

import warnings
from typing import Any

from .errors import ArgumentTypeError

#: torch's warning for ``scheduler.step(epoch)`` (torch.optim.lr_scheduler's own words).
EPOCH_DEPRECATION_WARNING = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being deprecated "
    "where possible. Please use `scheduler.step()` to step the scheduler. During the "
    "deprecation, if epoch is different from None, the closed form is used instead of the "
    "new chainable form, where available. Please open an issue if you are unable to "
    "replicate your use case: https://github.com/pytorch/pytorch/issues/new/choose."
)


def deprecated_epoch(epoch: Any) -> None:
    """``step(epoch)``: an int, with torch's deprecation warning."""
    if isinstance(epoch, bool) or not isinstance(epoch, int):
        raise ArgumentTypeError(f"step(epoch=...): epoch must be an int, not {epoch!r}")
    warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=3)
