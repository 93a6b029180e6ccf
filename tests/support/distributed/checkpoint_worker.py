"""Checkpoints loaded onto a mesh that spans a job of 2 processes x 2 CPU devices.

Usage: ``checkpoint_worker.py DIR TIMEOUT_S`` under a launcher with ``--cpu-devices 2``.
Each rank joins the job once, then loads ``DIR/sharded`` (``sharded_worker.py``: every
way a sharded load goes, and the bytes it reads) and ``DIR/mismatch``
(``mismatch_worker.py``: copies that disagree), and prints a ``SHARDED`` and a
``MISMATCH`` line. One job, and one import of torch and JAX per rank, serve both.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
from ddp_problem import report
from mismatch_worker import mismatched_loads
from sharded_worker import sharded_loads

from torch2jax_device import distributed as dist

if __name__ == "__main__":
    folder, timeout_s = Path(sys.argv[1]), float(sys.argv[2])
    dist.init_process_group(backend="gloo", timeout=timeout_s)
    mesh = dist.init_device_mesh("cpu", (jax.device_count(),), mesh_dim_names=("data",))
    report(sharded_loads(folder / "sharded", mesh), "SHARDED ")
    report(mismatched_loads(folder / "mismatch", mesh), "MISMATCH ")
    dist.destroy_process_group()
