"""Two processes load checkpoints that disagree: each must fail with the library's error.

``mismatched_loads(DIR, mesh)``, called by ``checkpoint_worker.py`` in each rank of a job
of 2 processes x 2 CPU devices. Each rank writes its own copy of a checkpoint in
``DIR``, where ``w`` has shape (4, 6) on rank 0 and (8, 6) on rank 1 (and ``b`` float32
on rank 0, float16 on rank 1, in a second file, and ``v`` of one shape whose values
differ, in a third; one element of the middle row or of the end differs in two more),
then loads them onto one mesh every way a sharded load can go. It returns this rank's
facts: the message of each load's error, or ``None`` where it loaded, plus one load
where the files agree and one each rank makes alone.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import torch
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import torch2jax_device as tj
from torch2jax_device import distributed as dist


def outcome(load: Callable[[], Any]) -> str | None:
    try:
        load()
    except tj.CheckpointError as err:
        return str(err)
    return None


def failure(load: Callable[[], Any]) -> str | None:
    """The error ``load`` raised, as ``Type: message``; ``None`` where it loaded."""
    try:
        load()
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    return None


def failing_first(mine: Path, mesh: Mesh, rank: int) -> dict[str, str | None]:
    """Loads rank 1 fails before the processes compare them (its file missing, its index
    naming a missing shard, its checkpoint truncated), rank 0's copy being fine: rank 0
    must fail at once naming rank 1's error, not wait out the agreement's timeout."""
    rule = tj.ShardingRule(mesh, {"w": P("data", None)})
    tj.save_file({"w": np.ones((4, 6), np.float32)}, mine / "first.safetensors")
    (mine / "first.safetensors.index.json").write_text(
        '{"weight_map": {"w": "%s.safetensors"}}' % ("first" if rank == 0 else "nowhere")
    )
    torch.save({"model": {"w": torch.ones(4, 6)}}, mine / "first.pt")
    if rank == 1:
        (mine / "first.pt").write_bytes((mine / "first.pt").read_bytes()[:100])
    dist.barrier()
    return {
        "load_file": failure(
            lambda: tj.load_file(
                mine / f"{'first' if rank == 0 else 'absent'}.safetensors", device=rule
            )
        ),
        "index": failure(lambda: tj.load_file(mine / "first.safetensors.index.json", device=mesh)),
        "torch": failure(lambda: tj.load(mine / "first.pt", map_location=rule)),
    }


def mismatched_loads(folder: Path, mesh: Mesh) -> dict[str, Any]:
    """This rank's outcome of every load of its own, disagreeing, copy in ``folder``."""
    rank = dist.get_rank()
    rule = tj.ShardingRule(mesh, {"w": P("data", None)})
    rows = 4 * (rank + 1)
    mine = folder / f"rank{rank}"
    mine.mkdir()
    same = np.arange(24, dtype=np.float32).reshape(4, 6)
    tj.save_file({"w": np.ones((rows, 6), np.float32), "same": same}, mine / "w.safetensors")
    dtype = np.float32 if rank == 0 else np.float16
    tj.save_file({"b": np.ones(8, dtype)}, mine / "b.safetensors")
    torch.save({"model": {"w": torch.ones(rows, 6)}}, mine / "w.pt")
    tj.save_file({"w": same}, mine / "agree.safetensors")
    # The same shapes, other values: a copy of another step's checkpoint. Only the middle
    # row's first element differs in "row", only the last element in "end".
    values = {"v": same + rank, "same": same}
    tj.save_file(values, mine / "values.safetensors")
    row, end = same.copy(), same.copy()
    row[2, 0] += rank
    end[-1, -1] += rank
    tj.save_file({"row": row}, mine / "row.safetensors")
    tj.save_file({"end": end}, mine / "end.safetensors")
    torch.save({"model": {"v": torch.from_numpy(values["v"])}}, mine / "values.pt")
    (mine / "values.safetensors.index.json").write_text(
        '{"weight_map": {"same": "values.safetensors", "v": "values.safetensors"}}'
    )
    dist.barrier()

    def open_and_get(name: str = "w.safetensors", tensor: str = "w") -> Any:
        with tj.safe_open(mine / name, device=rule) as file:
            return file.get_tensor(tensor)

    def open_and_slice() -> Any:
        with tj.safe_open(mine / "values.safetensors", device=rule) as file:
            return file.get_slice("v")[0:4]

    vrule = tj.ShardingRule(mesh, {"v": P("data", None)})

    agreed = tj.load_file(mine / "agree.safetensors", device=rule)["w"]
    # A load one process makes alone (its own devices) asks nobody: it must not wait.
    index = mine / "model.safetensors.index.json"
    index.write_text('{"weight_map": {"w": "w.safetensors", "same": "w.safetensors"}}')
    local_mesh = jax.sharding.Mesh(np.array(jax.local_devices()), ("local",))
    alone = None
    if rank == 0:
        alone = list(tj.load_file(index))
    else:
        alone = list(tj.load_file(mine / "w.safetensors", device=local_mesh))
    dist.barrier()
    return {
        "rank": rank,
        "load_file": outcome(lambda: tj.load_file(mine / "w.safetensors", device=rule)),
        "dtype": outcome(lambda: tj.load_file(mine / "b.safetensors", device=mesh)),
        "torch": outcome(lambda: tj.load(mine / "w.pt", map_location=rule)),
        "safe_open": outcome(open_and_get),
        "values": {
            "load_file": outcome(lambda: tj.load_file(mine / "values.safetensors", device=vrule)),
            "index": outcome(
                lambda: tj.load_file(mine / "values.safetensors.index.json", device=mesh)
            ),
            "torch": outcome(lambda: tj.load(mine / "values.pt", map_location=vrule)),
            "safe_open": outcome(lambda: open_and_get("values.safetensors", "v")),
            "get_slice": outcome(open_and_slice),
            "row": outcome(lambda: tj.load_file(mine / "row.safetensors", device=mesh)),
            "end": outcome(lambda: tj.load_file(mine / "end.safetensors", device=mesh)),
        },
        "failing_first": failing_first(mine, mesh, rank),
        "agreed_sum": float(jax.jit(lambda w: w.sum())(agreed)),
        "alone": alone,
    }
