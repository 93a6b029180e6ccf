"""A trainer's multi-process moves on a mesh of 2 processes x 2 CPU devices.

Usage: ``trainer_worker.py DIR TIMEOUT_S`` under ``torch2jax-device run --cpu-devices 2``.
Each rank prints one ``TRAINER`` line with what it saw of:

* ``tj.DeviceLoader`` over a multi-process sharding, fed this rank's rows (a
  ``DistributedSampler`` shard), with and without pinned staging, beside
  ``make_global_batch`` of the same rows (the oracle);
* ``tj.state_dict(model, layout="torch")`` of a model replicated over every process's
  devices (``DDP(model)``), and of one whose kernel is split over them;
* ``tj.load_state(ddp_model, tj.load(path, map_location="cpu"))`` of a torch twin's
  state dict rank 0 saved.

A call that fails reports its exception's type and message instead of its result.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import torch
from ddp_problem import report
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

import torch2jax_device as tj
from torch2jax_device import distributed as dist

ROWS_PER_RANK = 4


class Net(nnx.Module):
    def __init__(self, seed: int) -> None:
        rngs = nnx.Rngs(seed)
        self.fc = nnx.Linear(3, 4, rngs=rngs)
        self.bn = nnx.BatchNorm(4, rngs=rngs)


class Twin(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 4)
        self.bn = torch.nn.BatchNorm1d(4)


def attempt(call: Callable[[], Any]) -> Any:
    """``call()``'s result, or ``{"error": type, "message": ...}`` if it raised."""
    try:
        return call()
    except Exception as error:  # reported, for the test to judge
        traceback.print_exc()
        return {"error": type(error).__name__, "message": str(error)}


def gathered(array: jax.Array) -> list[Any]:
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(array, tiled=True)).tolist()


def feeding(mesh: Any, rank: int) -> dict[str, Any]:
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    rows = np.arange(2 * ROWS_PER_RANK * 3, dtype=np.float32).reshape(-1, 3)
    mine = rows[rank::2]  # DistributedSampler(shuffle=False): rows rank, rank + 2, ...
    batches = [{"x": mine, "y": torch.from_numpy(mine[:, 0].copy()), "name": "first"}]
    oracle = dist.make_global_batch(batches[0], mesh)

    def loaded(pin_memory: bool) -> dict[str, Any]:
        (batch,) = list(tj.DeviceLoader(batches, sharding, pin_memory=pin_memory))
        return {
            "name": batch["name"],
            "shape": list(batch["x"].shape),
            "values": gathered(batch["x"]),
            "y": gathered(batch["y"]),
            "spec": str(batch["x"].sharding.spec),
        }

    return {
        "oracle": {"name": oracle["name"], "shape": list(oracle["x"].shape),
                   "values": gathered(oracle["x"]),
                   "y": gathered(oracle["y"]), "spec": str(oracle["x"].sharding.spec)},
        "loader": attempt(lambda: loaded(False)),
        "pinned": attempt(lambda: loaded(True)),
        "prefetch": attempt(
            lambda: gathered(next(iter(tj.prefetch_to_device([mine], sharding)))),
        ),
    }  # fmt: skip


def saving(mesh: Any) -> dict[str, Any]:
    reference = {name: t.tolist() for name, t in tj.state_dict(Net(0), layout="torch").items()}
    replicated = tj.to_device(Net(0), NamedSharding(mesh, PartitionSpec()))
    split = Net(0)
    split.fc.kernel.set_value(
        jax.device_put(split.fc.kernel[...], NamedSharding(mesh, PartitionSpec(None, "data")))
    )

    def torch_layout(model: Any) -> Any:
        state = tj.state_dict(model, layout="torch")
        return {"equal": {name: t.tolist() == reference[name] for name, t in state.items()},
                "names": list(state)}  # fmt: skip

    return {
        "replicated": attempt(lambda: torch_layout(replicated)),
        "split": attempt(lambda: torch_layout(split)),
        "reference_names": list(reference),
    }


def loading(mesh: Any, folder: Path, rank: int) -> dict[str, Any]:
    path = folder / "twin.pt"
    if rank == 0:
        torch.manual_seed(7)
        twin = Twin()
        with torch.no_grad():
            twin.bn.running_mean.uniform_()
        torch.save(twin.state_dict(), path)
    dist.barrier()
    state = tj.load(path, map_location="cpu")
    expected = {name: tensor.numpy() for name, tensor in torch.load(path).items()}
    replicated = NamedSharding(mesh, PartitionSpec())
    model = tj.to_device(Net(1), replicated)

    def loaded() -> dict[str, Any]:
        tj.load_state(model, state)
        ours = tj.state_dict(model, layout="torch")
        return {
            "equal": {
                name: bool(np.array_equal(t.numpy(), expected[name])) for name, t in ours.items()
            },
            "specs": sorted({str(v.sharding.spec) for v in tj.state_dict(model).values()}),
            "addressable": all(v.is_fully_addressable for v in tj.state_dict(model).values()),
        }  # fmt: skip

    return {"ddp": attempt(loaded)}


if __name__ == "__main__":
    folder, timeout_s = Path(sys.argv[1]), float(sys.argv[2])
    dist.init_process_group(backend="gloo", timeout=timeout_s)
    rank = dist.get_rank()
    mesh = dist.init_device_mesh("cpu", (jax.device_count(),), mesh_dim_names=("data",))
    result = {"rank": rank, "feeding": feeding(mesh, rank), "saving": saving(mesh)}
    result["loading"] = loading(mesh, folder, rank)
    report(result, "TRAINER ")
    dist.destroy_process_group()
