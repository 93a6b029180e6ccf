"""Collectives and global batches with ranks that agree and ranks that do not, torch then tj.

Usage: ``torchrun --nproc_per_node=2 collectives_worker.py TIMEOUT_S``. Each rank first
reduces every dtype torch's gloo backend takes with every op, in torch (the oracle,
``TORCH`` line), then does the same with torch2jax_device and runs the mistakes a
data-parallel script can make with different values on different ranks (``TJ`` line):
each mistake's outcome is ``"ok"`` or the error's ``"ClassName: message"``, so the
test sees what every rank raised and that no rank hung (the job ends).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from ddp_problem import report

# The dtypes torch's gloo backend reduces (int16, uint16..64 and float8 it refuses).
DTYPES = (
    "bool", "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64",
    "complex64", "complex128",
)  # fmt: skip
OPS = ("sum", "product", "max", "min", "avg", "band", "bor", "bxor")


def local_tensor(rank: int, dtype: str) -> torch.Tensor:
    """Values that differ across the ranks, and overflow int8 and uint8 when summed."""
    if dtype == "bool":
        return (
            torch.tensor([True, False, True, False])
            if rank == 0
            else torch.tensor([True, True, False, False])
        )
    values = [100, 1, 3, 0] if rank == 0 else [100, 2, 5, 7]
    return torch.tensor(values).to(getattr(torch, dtype))


def described(array: Any) -> list[Any]:
    """``[dtype name, values]``, complex values as ``[real, imaginary]`` pairs."""
    values = np.asarray(array)
    if values.dtype.kind == "c":
        return [values.dtype.name, [[float(v.real), float(v.imag)] for v in values.tolist()]]
    return [values.dtype.name, np.asarray(values, np.float64).tolist()]


def torch_reductions() -> dict[str, Any]:
    import torch.distributed as tdist

    tdist.init_process_group("gloo")
    rank = tdist.get_rank()
    found: dict[str, Any] = {}
    for dtype in DTYPES:
        for op in OPS:
            tensor = local_tensor(rank, dtype)
            try:
                tdist.all_reduce(tensor, op=getattr(tdist.ReduceOp, op.upper()))
            except (RuntimeError, ValueError) as error:
                found[f"{dtype}/{op}"] = ["error", type(error).__name__]
                continue
            host = tensor.to(torch.float32) if dtype == "bfloat16" else tensor  # NumPy has none
            found[f"{dtype}/{op}"] = [dtype, described(host.numpy())[1]]
    tdist.destroy_process_group()
    return {"rank": rank, "reductions": found}


def outcome(call: Callable[[], object]) -> str:
    try:
        call()
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return "ok"


def tj_job(timeout_s: float) -> dict[str, Any]:
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    import torch2jax_device as tj
    from torch2jax_device import distributed as dist

    dist.init_process_group(backend="gloo", timeout=timeout_s)
    rank = dist.get_rank()
    reductions: dict[str, Any] = {}
    for dtype in DTYPES:
        for op in OPS:
            name = "mean" if op == "avg" else op
            try:
                reduced = dist.all_reduce(local_tensor(rank, dtype), op=name)
            except Exception as error:  # the test checks the type: the library's own
                reductions[f"{dtype}/{op}"] = ["error", type(error).__name__, str(error)]
                continue
            reductions[f"{dtype}/{op}"] = described(np.asarray(reduced))
    mesh = dist.init_device_mesh("cpu", (jax.device_count(),), mesh_dim_names=("data",))
    rows = NamedSharding(mesh, PartitionSpec("data"))

    def rows_of(count: int, value: float = 1.0) -> dict[str, Any]:
        return {"x": np.full((count, 3), value + rank, np.float32), "name": "batch"}

    def loop(batches: list[Any], *, background: bool | None = None, stop: int | None = None) -> Any:
        taken = []
        for index, batch in enumerate(tj.DeviceLoader(batches, rows, background=background)):
            taken.append(list(batch["x"].shape))
            if stop is not None and index + 1 == stop:
                break
        return taken

    def prefetched(batches: list[Any]) -> list[Any]:
        return [list(b["x"].shape) for b in tj.prefetch_to_device(batches, rows, size=2)]

    mine = 3 if rank == 0 else 2
    gathered = [dist.make_global_batch(rows_of(count), mesh)["x"] for count in (2, 1)]
    big = np.int64(2**40) if rank == 1 else np.int64(1)
    mistakes: dict[str, Callable[[], object]] = {
        "shape": lambda: dist.all_reduce({"n": np.ones(mine, np.float32)}),
        "dtype": lambda: dist.all_reduce({"n": np.ones(2, np.float32 if rank else np.int32)}),
        "tree": lambda: dist.all_reduce({"a": 1.0, **({"b": 2.0} if rank else {})}),
        "op": lambda: dist.all_reduce(np.ones(2, np.float32), op="max" if rank else "sum"),
        "call": (lambda: dist.barrier()) if rank else (lambda: dist.all_reduce(1.0)),
        "failed_here": lambda: dist.all_reduce(torch.tensor([big])),
        "after_mistakes": lambda: dist.all_reduce({"n": np.ones(2, np.float32)}),
        "global_uneven": lambda: dist.make_global_batch(rows_of(mine), mesh),
        "global_dtype": lambda: dist.make_global_batch(
            {"x": np.ones((2, 3), np.float32 if rank else np.float16)}, mesh
        ),
        "global_even": lambda: dist.make_global_batch(rows_of(2), mesh),
        "loader_short_last": lambda: loop([rows_of(4), rows_of(4 if rank == 0 else 2)]),
        "loader_more_batches": lambda: loop([rows_of(2)] * (3 if rank == 0 else 2)),
        "loader_background": lambda: loop([rows_of(2), rows_of(mine)], background=True),
        "prefetch_uneven": lambda: prefetched([rows_of(2), rows_of(2), rows_of(mine)]),
        "loader_even": lambda: loop([rows_of(2)] * 3, background=True),
        "loader_break": lambda: loop([rows_of(2)] * 5, stop=2),
        # rank 1's loader ends where rank 0 leaves its loop: the same batches were taken
        "loader_break_at_end": lambda: loop(
            [rows_of(2)] * (5 if rank == 0 else 2), stop=2 if rank == 0 else None
        ),
        # rank 0 leaves after 1 batch, rank 1 goes on: rank 1 alone would run a step
        "loader_left_early": lambda: loop([rows_of(2)] * 3, stop=1 if rank == 0 else None),
        "after_loaders": lambda: dist.all_reduce({"n": np.ones(2, np.float32)}),
        # each rank gathers another array to its host: rank 0 one of 4 rows, rank 1 of 2
        "gather_different": lambda: tj.to_device(gathered[rank], "cpu"),
        "after_gathers": lambda: dist.all_reduce({"n": np.ones(2, np.float32)}),
        # DDP(model): a replicated tree from each rank's own copy (seeded per rank)
        "replicas_differ": lambda: tj.to_device(
            {"w": np.full((2, 3), float(rank), np.float32)}, NamedSharding(mesh, PartitionSpec())
        ),
        "replicas_agree": lambda: tj.to_device(
            {"w": np.ones((2, 3), np.float32)}, NamedSharding(mesh, PartitionSpec())
        ),
        "after_replicas": lambda: dist.all_reduce({"n": np.ones(2, np.float32)}),
    }
    outcomes = {name: outcome(mistake) for name, mistake in mistakes.items()}
    shapes = {
        "global_even": list(dist.make_global_batch(rows_of(2), mesh)["x"].shape),
        "loader_even": loop([rows_of(2)] * 3),
    }
    dist.destroy_process_group()
    return {"rank": rank, "reductions": reductions, "outcomes": outcomes, "shapes": shapes}


if __name__ == "__main__":
    report(torch_reductions(), "TORCH ")
    report(tj_job(float(sys.argv[1])), "TJ ")
