"""``--cpu-durations=N``: the N tests that cost the most CPU, their subprocesses included.

``--durations`` reports wall time, which on a loaded machine (``scripts/test.sh`` runs
its groups side by side on two cores) says more about the neighbours than about the
test. This reports what a test costs the machine: the CPU time of the pytest process
during the test plus that of every process it started and waited for (their children
too, once waited for), from ``getrusage``::

    .venv/bin/python -m pytest -m slow tests/cli --cpu-durations=20
"""

from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest

_COSTS = pytest.StashKey[list[tuple[float, float, str]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("terminal reporting").addoption(
        "--cpu-durations",
        type=int,
        default=0,
        metavar="N",
        help="show the N tests that cost the most CPU, subprocesses included (0: off)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_COSTS] = []


def _cpu_seconds() -> tuple[float, float]:
    """(this process, its waited-for descendants): user plus system CPU seconds."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    if not item.config.getoption("cpu_durations"):
        yield
        return
    own, children = _cpu_seconds()
    yield
    own_after, children_after = _cpu_seconds()
    item.config.stash[_COSTS].append((own_after - own, children_after - children, item.nodeid))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    count = terminalreporter.config.getoption("cpu_durations")
    costs = terminalreporter.config.stash[_COSTS]
    if not count or not costs:
        return
    own = sum(cost[0] for cost in costs)
    children = sum(cost[1] for cost in costs)
    terminalreporter.write_sep("=", f"{count} most CPU-costly tests")
    for test_own, test_children, nodeid in sorted(costs, key=lambda c: -(c[0] + c[1]))[:count]:
        terminalreporter.write_line(
            f"{test_own + test_children:7.2f}s cpu ({test_own:6.2f}s here, "
            f"{test_children:6.2f}s in subprocesses)  {nodeid}"
        )
    terminalreporter.write_line(
        f"{len(costs)} tests: {own + children:.1f}s cpu ({own:.1f}s here, "
        f"{children:.1f}s in subprocesses)"
    )
