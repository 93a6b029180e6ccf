"""Three comparisons in one torchrun job of 2 processes, one after the other.

Usage: ``torchrun --nproc_per_node=2 torchrun_worker.py``. Each rank runs torch's
data-parallel job (``torch_worker.py``, the oracle), then the same job ported
(``tj_worker.py``: JAX's coordinator takes the port after torchrun's store), then checks
that torchrun's store outlives rank 0 (``store_outlives_rank0.py``). One torchrun and
one torch import per rank serve the three. Each rank prints a ``TORCH``, a ``TJ`` and a
``STORE`` line.
"""

from __future__ import annotations

import tj_worker
import torch_worker
from ddp_problem import report
from store_outlives_rank0 import outlive_rank0

if __name__ == "__main__":
    report(torch_worker.job(), "TORCH ")
    report(tj_worker.job(), "TJ ")
    report(outlive_rank0(), "STORE ")
