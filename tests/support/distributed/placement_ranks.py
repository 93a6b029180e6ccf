"""Both sides of ``tests/support/placement_worker.py`` in the same two processes.

Usage: ``placement_ranks.py`` under ``torch2jax-device run`` with 2 processes. Each rank
runs torch's side (gloo, the launcher's store), then the port's (JAX's coordinator
takes the port after the store), and prints a ``TORCH`` and a ``TJ`` line: one job, and
one import of torch per rank, for both.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ddp_problem import report

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/support
from placement_worker import tj_rank, torch_rank

if __name__ == "__main__":
    report(torch_rank(), "TORCH ")
    report(tj_rank(), "TJ ")
