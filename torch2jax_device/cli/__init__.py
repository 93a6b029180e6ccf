"""The ``torch2jax-device`` command line.

``torch2jax-device devices [--json]`` lists every JAX backend and device this
process can use, with the torch-style name of each (``cuda:0``), its JAX identity
and its memory kinds.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import _devices

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torch2jax-device",
        description="PyTorch device idioms on JAX: inspect what JAX sees on this machine.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    devices = commands.add_parser(
        "devices",
        help="list every JAX backend and device, with torch-style names",
        description=(
            "List every backend JAX can use here (not only the default one, unlike "
            "jax.devices()), and each device's torch-style name. Respects JAX_PLATFORMS."
        ),
    )
    devices.add_argument("--json", action="store_true", help="print JSON instead of a table")
    devices.set_defaults(run=_devices.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    args = _parser().parse_args(argv)
    status: int = args.run(args, sys.stdout, sys.stderr)
    return status
