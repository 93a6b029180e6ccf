"""Tests of a framework that is not installed skip, unless the run requires it.

``TORCH2JAX_DEVICE_TEST_REQUIRE`` (comma-separated) names frameworks that must be
importable; ``scripts/test.sh`` requires torch, flax, equinox and hypothesis, so a broken
install fails the run. Elsewhere (a Python whose torch build is not installed, as on the
jax 0.11 compatibility check in CONTRIBUTING.md) a test module, test or docstring
example that imports one of ``OPTIONAL_FRAMEWORKS`` when it is missing skips, with the
reason, instead of stopping the collection. ``tests/conftest.py`` loads this plugin; a
run of the package's doctests alone loads it with ``-p tests.support.optional_frameworks``.
"""

from __future__ import annotations

import doctest
import importlib.util
import os
import re
from collections.abc import Generator

import pytest

REQUIRE_ENV = "TORCH2JAX_DEVICE_TEST_REQUIRE"
# The frameworks a test may need that the library does not.
OPTIONAL_FRAMEWORKS = ("torch", "flax", "equinox", "hypothesis", "optax", "accelerate")
MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")


def required_frameworks() -> list[str]:
    return [name.strip() for name in os.environ.get(REQUIRE_ENV, "").split(",") if name.strip()]


def needs(framework: str) -> None:
    """For a test whose child processes import ``framework``: raises
    ``ModuleNotFoundError`` (the test skips, or fails where it is required) when it is not
    installed, without importing it here."""
    if importlib.util.find_spec(framework) is None:
        raise ModuleNotFoundError(f"No module named {framework!r}", name=framework)


def skipped_for_missing(module: str | None) -> str | None:
    """The skip reason when ``module`` belongs to an optional framework that is not
    required; ``None`` otherwise (the missing module then fails the test)."""
    framework = (module or "").split(".")[0]
    if framework not in OPTIONAL_FRAMEWORKS or framework in required_frameworks():
        return None
    return f"{framework} is not installed (and {REQUIRE_ENV} does not require it)"


def missing_module(error: BaseException | None) -> str | None:
    """The module whose import failed, where ``error`` is (or was raised from) a
    ``ModuleNotFoundError``: the bare import's, or the library's ``MissingFrameworkError``
    (a ``ModuleNotFoundError`` without a name, raised from the import's)."""
    while isinstance(error, ModuleNotFoundError):
        if error.name:
            return error.name
        error = error.__cause__
    return None


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """A test module that imports a missing optional framework skips, with the reason."""
    report = yield
    missing = MISSING_MODULE.search(str(report.longrepr)) if report.failed else None
    reason = skipped_for_missing(missing.group(1)) if missing else None
    if reason is not None and isinstance(collector, pytest.Module):
        report.outcome = "skipped"
        report.longrepr = (str(collector.path), 0, f"Skipped: {reason}")
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A test (or a docstring's example) that imports a missing optional framework as it
    runs skips, with the reason."""
    report = yield
    error = call.excinfo.value if call.excinfo is not None else None
    if isinstance(error, doctest.UnexpectedException):  # a docstring's example raised
        error = error.exc_info[1]
    reason = skipped_for_missing(missing_module(error))
    if reason is not None and report.failed:
        path, line, _ = item.location
        report.outcome = "skipped"
        report.longrepr = (path, (line or 0) + 1, f"Skipped: {reason}")
    return report
