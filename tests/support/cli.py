"""The ``torch2jax-device`` command run in this process, its output captured.

``doctor`` and ``devices`` read the environment from ``os.environ`` and start JAX in a
probe process with it, so they run here in any environment
(:func:`run_cli_in`) and only the probe is a process; :func:`one_probe_per_environment`
starts that process once for each environment a test module asks about.
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from torch2jax_device.cli import devices, main
from torch2jax_device.porting import scanner

# The variables JAX and XLA read: run_cli_in starts from an environment without them.
JAX_PREFIXES = ("JAX_", "XLA_")


def run_cli(*argv: str) -> tuple[int, str, str]:
    """``torch2jax-device ARGV...``: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        status = main(list(argv))
    finally:
        sys.stdout, sys.stderr = streams
    return status, out.getvalue(), err.getvalue()


def clean_environment() -> dict[str, str]:
    """This process's environment without the variables JAX and XLA read."""
    return {k: v for k, v in os.environ.items() if not k.startswith(JAX_PREFIXES)}


def run_cli_in(env: dict[str, str], *argv: str) -> tuple[int, str, str]:
    """``torch2jax-device ARGV...`` in this process, with ``os.environ`` set to
    :func:`clean_environment` plus ``env`` meanwhile."""
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith(JAX_PREFIXES):
                patch.delenv(name)
        for name, value in env.items():
            patch.setenv(name, value)
        return run_cli(*argv)


@contextlib.contextmanager
def one_probe_per_environment() -> Iterator[None]:
    """Meanwhile ``devices.probe`` starts one process per environment (and timeout) and
    hands each later caller in the same environment a copy of that report."""
    real = devices.probe
    reports: dict[tuple[float, frozenset[tuple[str, str]]], dict[str, Any]] = {}

    def probe(
        timeout: float = devices.PROBE_TIMEOUT_S, environment: dict[str, str] | None = None
    ) -> dict[str, Any]:
        key = (timeout, frozenset((os.environ if environment is None else environment).items()))
        if key not in reports:
            reports[key] = real(timeout, environment)
        return copy.deepcopy(reports[key])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(devices, "probe", probe)
        yield


def scan_text(source: str) -> list[scanner.Finding]:
    """``scan`` of the Python ``source`` (dedented), as the command reads a file."""
    return scanner.scan_source(textwrap.dedent(source))


def port_text(source: str) -> str:
    """``source`` (dedented) with every rewrite ``scan --diff`` makes applied."""
    source = textwrap.dedent(source)
    return scanner.apply_edits(source, scanner.scan_source(source))


def found_rules(source: str) -> list[tuple[int, str]]:
    """``(line, rule)`` of each finding of ``scan_text(source)`` but the start-up order."""
    return [(f.line, f.rule) for f in scan_text(source) if f.rule != "startup-order"]
