"""The ``torch2jax-device`` command run in this process, its output captured."""

from __future__ import annotations

import io
import sys

from torch2jax_device.cli import main


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
