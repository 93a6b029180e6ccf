"""Jobs that tests in several modules assert on, each run once per pytest process.

``functools.cache`` stands in for a session-scoped fixture shared across modules:
``scripts/test.sh`` runs the modules that share a job in one pytest process, so the
first test that asks runs it and the others read its output; a module run alone runs
the job itself. Each returns the launcher's exit status, stdout and stderr (cached as
they are, so a failed job fails every test that reads it without running again).
"""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path

import numpy as np

import torch2jax_device as tj
from tests.support.deadlines import deadline
from tests.support.distributed.launch import SCRIPTS, launch

# The sharded checkpoint's big tensor: 16 MiB of float32, split by rows over 4 devices.
BIG_ROWS, BIG_COLUMNS = 2048, 2048
# JAX timeout inside the checkpoint job: generous, and grown with the machine's load.
CHECKPOINT_LIMIT_S = deadline(60)


@functools.cache
def torch_first_job() -> tuple[int, str, str]:
    """``startup_order.py torch-first`` under ``torch2jax-device run``, 2 processes.

    torch.distributed runs the job and JAX is only asked (``RESULT`` lines); then the
    launcher's torch store outlives rank 0 (``STORE`` lines).
    """
    return launch("--nproc-per-node", "2", str(SCRIPTS / "startup_order.py"), "torch-first", "30")


def sharded_tensors() -> dict[str, np.ndarray]:
    """The tensors of the checkpoint the sharded loads read (the same on every call)."""
    rng = np.random.default_rng(0)
    return {
        "big.weight": rng.standard_normal((BIG_ROWS, BIG_COLUMNS), np.float32),
        "big.bias": rng.standard_normal(BIG_COLUMNS, np.float32),
        "columns": rng.standard_normal((64, 32), np.float32),
        "step": np.array(3, np.int32),
    }


@functools.cache
def checkpoint_job() -> tuple[int, str, str]:
    """``checkpoint_worker.py`` under ``torch2jax-device run``, 2 processes x 2 CPU devices.

    Each rank prints a ``SHARDED`` line (loads of ``sharded_tensors()`` from a
    safetensors file, a PyTorch checkpoint and a two-file index) and a ``MISMATCH`` line
    (loads of copies that disagree between the ranks).
    """
    with tempfile.TemporaryDirectory(prefix="checkpoint-job-") as temporary:
        folder = Path(temporary)
        _write_sharded(folder / "sharded")
        (folder / "mismatch").mkdir()  # each rank writes its own copy there
        return launch(
            "--nproc-per-node", "2", "--cpu-devices", "2", str(SCRIPTS / "checkpoint_worker.py"),
            str(folder), str(CHECKPOINT_LIMIT_S),
        )  # fmt: skip


def _write_sharded(folder: Path) -> None:
    """``sharded_tensors()`` as safetensors, as a PyTorch checkpoint and split over two files."""
    import torch

    folder.mkdir()
    tensors = sharded_tensors()
    tj.save_file(tensors, folder / "model.safetensors")
    tj.save_file({"warm.weight": np.ones((8, 4), np.float32)}, folder / "warm-up.safetensors")
    state = {name: torch.from_numpy(array) for name, array in tensors.items()}
    torch.save({"model": state, "step": 7}, folder / "model.pt")
    split = folder / "split"
    split.mkdir()
    tj.save_file({"big.weight": tensors["big.weight"]}, split / "part-1.safetensors")
    rest = {name: array for name, array in tensors.items() if name != "big.weight"}
    tj.save_file(rest, split / "part-2.safetensors")
    weight_map = {"big.weight": "part-1.safetensors", **dict.fromkeys(rest, "part-2.safetensors")}
    (split / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
