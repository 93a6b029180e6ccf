"""A clock that moves only when a test moves it, and the timers that run on it.

No test may depend on whether a real timer fires within a wall-clock window: on a busy
machine it is a coin toss (issue 37: the pinned pool's 10-second idle timer released
buffers between a load and its assert). Code that waits on time takes a clock and a
schedule; its tests give it a ``ManualClock``::

    clock = ManualClock()
    pool = pinned_memory._Pool(clock=clock, schedule=clock.schedule)
    clock.advance(9.9)   # nothing due yet
    clock.advance(0.1)   # the idle timer runs now, in this thread
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["ManualClock"]


@dataclass(order=True)
class _Pending:
    due_s: float
    number: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """Seconds that pass only through ``advance``; callbacks run when their time comes."""

    def __init__(self) -> None:
        self.now_s = 0.0
        self._pending: list[_Pending] = []
        self._numbers = itertools.count()

    def __call__(self) -> float:
        return self.now_s

    def schedule(self, delay_s: float, callback: Callable[[], None]) -> _Pending:
        """Run ``callback`` once ``delay_s`` seconds have been advanced; cancellable."""
        pending = _Pending(self.now_s + delay_s, next(self._numbers), callback)
        self._pending.append(pending)
        return pending

    def pending(self) -> int:
        """How many scheduled callbacks are still to run."""
        return sum(not pending.cancelled for pending in self._pending)

    def advance(self, seconds: float) -> None:
        """Move the clock on, running every callback that falls due on the way, in order
        (a callback may schedule another, which runs too if it falls due in time)."""
        end_s = self.now_s + seconds
        while True:
            due = sorted(p for p in self._pending if not p.cancelled and p.due_s <= end_s)
            if not due:
                break
            first = due[0]
            self._pending.remove(first)
            self.now_s = first.due_s
            first.callback()
        self._pending = [p for p in self._pending if not p.cancelled]
        self.now_s = end_s
