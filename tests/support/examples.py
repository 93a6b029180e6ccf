"""Run the scripts of ``examples/`` as a user would, in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, *args: str) -> str:
    """Run ``examples/<name>`` and return what it printed; fail if it fails."""
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return result.stdout
