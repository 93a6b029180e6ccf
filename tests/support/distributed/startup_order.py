"""PyTorch's start-up order: availability queries before ``init_process_group``.

Usage: ``startup_order.py MODE TIMEOUT_S`` under a launcher. Each rank prints one
``RESULT`` line.

* ``query-first``: ``tj.cuda.is_available()`` and ``tj.cuda.device_count()`` first, as
  PyTorch scripts do; then an ``init_process_group`` for another job (refused), then
  the script's own one, which confirms the job the query joined.
* ``torch-first``: ``torch.distributed`` runs the job (a torch DDP script using JAX on
  the side): the query must not start JAX's distributed runtime. Then each rank checks
  that the launcher's torch store outlives rank 0 (``store_outlives_rank0.py``) and
  prints a ``STORE`` line too.
"""

from __future__ import annotations

import os
import sys

import jax
from ddp_problem import report
from scenario import error_of

import torch2jax_device as tj
from torch2jax_device import distributed as dist


def query_first(timeout_s: float) -> None:
    available, count = tj.cuda.is_available(), tj.cuda.device_count()
    initialized = dist.is_initialized()
    other_job = error_of(
        lambda: dist.init_process_group(
            init_method=f"tcp://127.0.0.1:1?rank={os.environ['RANK']}&world_size=2"
        )
    )
    if not dist.is_initialized():  # the guard HF and Lightning write: it must still run
        dist.init_process_group(backend="gloo", timeout=timeout_s)
    rank = dist.get_rank()
    total = int(dist.all_reduce(rank + 1))
    twice = error_of(lambda: dist.init_process_group(backend="gloo"))
    report(
        {
            "rank": rank,
            "available": available,
            "count": count,
            "initialized_after_the_query": initialized,
            "initialized_after_init": dist.is_initialized(),
            "process_count": jax.process_count(),
            "other_job_error": other_job,
            "total": total,
            "twice_error": twice,
        }
    )
    dist.destroy_process_group()


def torch_first(timeout_s: float) -> None:
    import torch.distributed
    from store_outlives_rank0 import outlive_rank0

    torch.distributed.init_process_group(backend="gloo")
    available = tj.cuda.is_available()
    report(
        {
            "rank": torch.distributed.get_rank(),
            "available": available,
            "tj_initialized": dist.is_initialized(),
            "tj_rank_error": error_of(dist.get_rank),
            "process_count": jax.process_count(),
            "jax_distributed": jax.distributed.is_initialized(),
        }
    )
    torch.distributed.destroy_process_group()
    report(outlive_rank0(), "STORE ")


if __name__ == "__main__":
    {"query-first": query_first, "torch-first": torch_first}[sys.argv[1]](float(sys.argv[2]))
