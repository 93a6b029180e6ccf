"""torch's rendezvous store outlives rank 0, as it does under torchrun.

``outlive_rank0()``, at the end of a job's workers under a launcher (which then exit):
rank 0 leaves a key in the store the launcher hosts (``MASTER_ADDR:MASTER_PORT``) and
returns; rank 1 waits until rank 0's process is gone, then still reads and writes the
store. Where rank 0 hosts the store itself (a plain ``env://`` launch), rank 1's reads
fail: the store died with it. Called by ``torchrun_worker.py`` and by
``startup_order.py torch-first`` (under ``torch2jax-device run``).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from torch.distributed import TCPStore  # type: ignore[attr-defined]


def gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie the launcher has not reaped counts)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")


def outlive_rank0() -> dict[str, Any]:
    """This rank's part; rank 0's process must end soon after it returns."""
    rank = int(os.environ["RANK"])
    store = TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
        timeout=timedelta(seconds=60),
    )
    result = {"rank": rank, "agent_store": os.environ.get("TORCHELASTIC_USE_AGENT_STORE")}
    if rank == 0:
        store.set("rank0-pid", str(os.getpid()))
    else:
        pid = int(store.get("rank0-pid"))
        deadline = time.monotonic() + 60
        while not gone(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        result["rank0_gone"] = gone(pid)
        store.set("after-rank0", "still here")
        result["read_after_rank0"] = store.get("after-rank0").decode()
    return result
