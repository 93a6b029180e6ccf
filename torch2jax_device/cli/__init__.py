"""The ``torch2jax-device`` command line.

* ``devices [--json]``: every JAX backend and device, with torch-style names.
* ``doctor [--json]``: versions, devices, memory, where new data goes, and the
  environment traps with their fixes.
* ``scan PATH... [--format text|json] [--diff]``: the PyTorch device idioms in
  Python sources, line by line, with what each becomes.
* ``run --nproc-per-node N script.py [args]``: launch a multi-process job like
  torchrun (no torch needed).
* ``--version``: the installed version.

Each command lives in its own module, which registers itself with ``add_parser``.
A process loads only the module of the command its line names when that command imports
no JAX (``scan``, ``run``: they start without it); ``devices``, ``doctor`` and a line
that names no command (``--help``, ``--version``, a misspelt one) load every command.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from types import ModuleType

from .. import __version__
from .._src import prepare_jax

__all__ = ["main"]


def _commands(argv: Sequence[str]) -> list[ModuleType]:
    """The modules of the commands to register: only the one ``argv`` names when it
    imports no JAX (``scan``, ``run``), else every command, in the order ``--help`` lists
    them, JAX imported first with the environment checked."""
    named = argv[0] if argv else ""
    if named == "scan":
        from . import scan

        return [scan]
    if named == "run":
        from . import run

        return [run]
    prepare_jax()
    from . import devices, doctor, run, scan

    return [devices, doctor, scan, run]


def _parser(commands_to_register: list[ModuleType]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torch2jax-device",
        description=(
            "PyTorch device idioms on JAX: inspect what JAX sees on this machine, port "
            "scripts and launch multi-process jobs."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in commands_to_register:
        command.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    words = sys.argv[1:] if argv is None else list(argv)
    args = _parser(_commands(words)).parse_args(words)
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:  # started with it closed (`>&-`): Python's None
            setattr(sys, name, open(os.devnull, "w"))  # the process's own, never closed
    try:
        status: int = args.run(args, sys.stdout, sys.stderr)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped reading (``scan . | head``): stop quietly, as Unix tools do.
        _discard_stdout()
        return 128 + signal.SIGPIPE
    return status


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so Python's final flush of it raises nothing."""
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a non-file object
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, descriptor)
    os.close(null)
