"""Deadlines that grow with the machine's load, and say so when one is hit.

A deadline in a test is a hang detector, never a performance claim: a process that
should end, a thread that should finish, a rendezvous that should form. On a quiet
2-core machine running the suite's own groups side by side (a load of about 4 per
core), ``deadline(120)`` is 120 s; on a busier one it grows with the load it sees when
asked, and ``TORCH2JAX_DEVICE_TEST_DEADLINE_SCALE`` multiplies it further (``4`` gives
four times as long). Every wait in the tests goes through ``deadline``
(``tests/project/test_wall_clock.py`` finds those that do not).

A test that runs past its deadline fails as ``DeadlineHit`` (or JAX's, torch's or
subprocess's own timeout error, raised with a scaled deadline), and the plugin below
marks it ``DEADLINE HIT`` in pytest's summary, with the deadline, the load and how to
re-run it with more time, so ``scripts/test.sh`` can tell a deadline from a failure::

    >>> deadline(10) >= 10
    True
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable
from typing import Any

import pytest

__all__ = [
    "MARK",
    "SCALE_ENV",
    "DeadlineHit",
    "deadline",
    "finished",
    "load_per_core",
    "waited",
]

SCALE_ENV = "TORCH2JAX_DEVICE_TEST_DEADLINE_SCALE"
MARK = "DEADLINE HIT"
#: The load per core under which deadlines keep their stated length: the suite's own
#: ten groups on the 2-core machine (scripts/test.sh) run at about this.
QUIET_LOAD_PER_CORE = 4.0


class DeadlineHit(AssertionError):
    """A wait in a test ran past its (scaled) deadline: a hang, or a very busy machine."""


def load_per_core() -> float:
    """The machine's 1-minute load average per core (0 where the OS has none)."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        return 0.0


def _scale() -> float:
    raw = os.environ.get(SCALE_ENV, "1")
    try:
        scale = float(raw)
    except ValueError:
        raise ValueError(f"{SCALE_ENV}={raw!r}: give a number, such as 4") from None
    if not scale > 0:
        raise ValueError(f"{SCALE_ENV}={raw!r}: give a number above 0, such as 4")
    return scale


def deadline(seconds: float) -> float:
    """``seconds`` grown with the load seen now and ``TORCH2JAX_DEVICE_TEST_DEADLINE_SCALE``."""
    return seconds * max(1.0, load_per_core() / QUIET_LOAD_PER_CORE) * _scale()


def finished(thread: threading.Thread, seconds: float) -> None:
    """Join ``thread``; ``DeadlineHit`` if it is still running after ``deadline(seconds)``."""
    limit = deadline(seconds)
    thread.join(limit)
    if thread.is_alive():
        raise DeadlineHit(f"{MARK}: thread {thread.name} still running after {limit:.0f} s")


def waited(event: threading.Event | Callable[[float], Any], seconds: float, what: str) -> None:
    """Wait for ``event`` (or call a ``wait(timeout)``); ``DeadlineHit`` naming ``what``
    if it has not happened within ``deadline(seconds)``."""
    limit = deadline(seconds)
    wait = event.wait if isinstance(event, threading.Event) else event
    if not wait(limit):
        raise DeadlineHit(f"{MARK}: {what} did not happen within {limit:.0f} s")


# ------------------------------------------------------------------ the pytest plugin

_HIT = (DeadlineHit, subprocess.TimeoutExpired, TimeoutError)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if call.excinfo is not None and call.excinfo.errisinstance(_HIT):
        report.user_properties.append(("deadline", True))
        report.sections.append(
            (
                MARK,
                f"{item.nodeid} ran past a deadline (load per core {load_per_core():.1f}, "
                f"{SCALE_ENV}={os.environ.get(SCALE_ENV, '1')}): a hang, or a machine too "
                f"busy for it. Re-run it with more time: {SCALE_ENV}=4 "
                f"./scripts/test.sh {item.nodeid}",
            )
        )
    return report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    hits = [
        report.nodeid
        for kind in ("failed", "error")
        for report in terminalreporter.stats.get(kind, [])
        if ("deadline", True) in getattr(report, "user_properties", ())
    ]
    for nodeid in hits:
        terminalreporter.write_line(f"{MARK}: {nodeid}")
