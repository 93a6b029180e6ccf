"""Every dtype JAX holds through every multi-process entry point (run under the launcher).

For each dtype (every NumPy/ml_dtypes kind JAX takes, and PRNG keys of each
implementation), rank r brings its own rows and a copy of one shared value, and each
entry point runs on them: replicate over the job (``DDP(model)``), split a whole value
over it, ``make_global_batch``, a ``DeviceLoader`` over the mesh, gathering a global
array to this process's CPU, ``all_reduce``. The oracle is the values brought: every
answer must hold exactly their bits (keys by their key data), or the call must raise the
library's own error on every rank. Each rank prints one ``DTYPES`` line.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any

import jax
import ml_dtypes  # noqa: F401 - registers the narrow float and int kinds with NumPy
import numpy as np
import torch
from jax.sharding import NamedSharding, PartitionSpec

import torch2jax_device as tj
from torch2jax_device import distributed as dist

ROWS, COLUMNS = 2, 3
NUMBERS = [
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "float16", "bfloat16",
    "float32", "complex64", "int2", "uint2", "int4", "uint4", "float4_e2m1fn",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
    "float8_e4m3b11fnuz", "float8_e8m0fnu",
]  # fmt: skip
KEYS = ["threefry2x32", "rbg", "unsafe_rbg"]


def values(kind: str, seed: int, rows: int) -> Any:
    """``rows`` rows of ``kind`` drawn from ``seed`` (keys: a batch of keys)."""
    if kind in KEYS:
        return jax.random.split(jax.random.key(seed, impl=kind), rows)
    numbers = np.arange(rows * COLUMNS).reshape(rows, COLUMNS) % 2 + seed % 2
    return numbers.astype(np.dtype(kind))


def bits(array: Any) -> list[Any]:
    """What must arrive: a key's data, a number's bytes, as a comparable list."""
    if jax.dtypes.issubdtype(getattr(array, "dtype", None), jax.dtypes.prng_key):
        array = jax.random.key_data(array)
    host = np.asarray(array)
    return [str(host.dtype), list(host.shape), host.tobytes().hex()]


def local_rows(array: jax.Array) -> Any:
    """This process's rows of a global array split over the job, in order."""
    key = jax.dtypes.issubdtype(array.dtype, jax.dtypes.prng_key)
    data = jax.random.key_data(array) if key else array
    shards = sorted(data.addressable_shards, key=lambda shard: shard.index[0].start or 0)
    rows = np.concatenate([np.asarray(shard.data) for shard in shards])
    return jax.random.wrap_key_data(rows, impl=jax.random.key_impl(array)) if key else rows


def outcome(call: Callable[[], Any], expected: Any) -> str:
    try:
        answer = call()
    except Exception as err:  # the library's own error, or not: the test says
        return f"raised {type(err).__module__}.{type(err).__name__}: {str(err)[:200]}"
    if bits(answer) != bits(expected):
        return f"wrong: {bits(answer)[:2]} where {bits(expected)[:2]} was brought"
    return "ok"


def sweep(kind: str, rank: int, world_size: int, mesh: Any) -> dict[str, str]:
    replicated = NamedSharding(mesh, PartitionSpec())
    split = NamedSharding(mesh, PartitionSpec("data"))
    shared = values(kind, 7, ROWS)
    mine = values(kind, rank, ROWS)
    everyone = np.concatenate if kind not in KEYS else jax.numpy.concatenate
    whole = everyone([values(kind, r, ROWS) for r in range(world_size)])
    found = {
        "replicate": outcome(
            lambda: tj.to_device({"v": shared}, replicated)["v"].addressable_data(0), shared
        ),
        "split": outcome(lambda: local_rows(tj.to_device(whole, split)), mine),
        "make_global_batch": outcome(
            lambda: local_rows(dist.make_global_batch({"v": mine}, mesh)["v"]), mine
        ),
        "DeviceLoader": outcome(
            lambda: next(local_rows(b["v"]) for b in tj.DeviceLoader([{"v": mine}], split)), mine
        ),
        "gather": outcome(
            lambda: tj.to_device(dist.make_global_batch({"v": mine}, mesh)["v"], "cpu"), whole
        ),
        "all_reduce-max": outcome(lambda: dist.all_reduce({"v": shared}, op="max")["v"], shared),
    }
    dist.barrier()  # every rank still in step after each dtype
    return found


# Leaf forms of a global batch: (its rows, or its value for a 0-d leaf) per rank.
FORMS: dict[str, Callable[[int], Any]] = {
    "rows-per-rank": lambda rank: np.arange(6, dtype=np.float32).reshape(2, 3) + rank,
    "vector-per-rank": lambda rank: np.arange(2, dtype=np.int32) + rank,
    "0-d-same": lambda rank: np.float32(3.0),
    "0-d-per-rank": lambda rank: np.int32(2 - rank),  # a per-rank count: no one value
    "python-int-per-rank": lambda rank: 2 - rank,
    "python-float-same": lambda rank: 0.5,
}


def global_views(rank: int, mesh: Any) -> dict[str, str]:
    """What each rank holds of the global batch each form builds, by each entry point:
    the whole global value, read back on this rank (every rank must hold the same), or
    the error raised."""
    split = NamedSharding(mesh, PartitionSpec("data"))
    rows = np.zeros((2, 1), np.float32)  # the batch's rows, beside the leaf
    views = {}
    for form, make in FORMS.items():
        for entry, build in (
            ("make_global_batch", lambda b: dist.make_global_batch(b, mesh)),
            ("DeviceLoader", lambda b: next(iter(tj.DeviceLoader([b], split)))),
            # x.to(device) in a DDP loop, ported onto the mesh: one value split, not rows
            ("to_device", lambda b: tj.to_device(b, split)),
        ):
            batch = {"rows": rows, "leaf": make(rank)}
            views[f"{form}/{entry}"] = _view(lambda: build(batch)["leaf"])  # noqa: B023
    return views


def _view(build: Callable[[], Any]) -> str:
    try:
        leaf = build()
        if not isinstance(leaf, jax.Array):  # a number in a batch stays one, as in torch
            return f"kept the number {leaf!r}"
        whole = np.asarray(tj.to_device(leaf, "cpu"))
    except Exception as err:
        return f"raised {type(err).__module__}.{type(err).__name__}"
    return f"holds {whole.tolist()}"


# Integer metrics all_reduce sums as torch's in-place all_reduce does: (the value rank r
# brings, torch's dtype for it). A count that fits 32 bits on each rank may not in total.
TOTALS: dict[str, Callable[[int], Any]] = {
    "torch-int64-small": lambda rank: torch.tensor(rank + 2),
    "torch-int64-large": lambda rank: torch.tensor(1_500_000_000 + rank),
    "numpy-int64-large": lambda rank: np.int64(1_500_000_000 + rank),
    "python-int-large": lambda rank: 1_500_000_000 + rank,
    "numpy-int32-large": lambda rank: np.int32(1_500_000_000 + rank),  # torch wraps int32 too
    "torch-int8-large": lambda rank: torch.tensor(100 + rank, dtype=torch.int8),
    "torch-float64-large": lambda rank: torch.tensor(2e38 + rank, dtype=torch.float64),
    "numpy-float64-huge": lambda rank: np.float64(1e300),  # past float32 on each rank
}


def torchs_total(values: list[Any], op: str) -> float:
    """torch's in-place all_reduce of these values: exact in their dtype's width, wrapped
    (integers), or in float64."""
    dtype = np.dtype(str(torch.as_tensor(values[0]).dtype).removeprefix("torch."))
    if dtype.kind == "f":
        floats = [float(value) for value in values]
        return {"sum": math.fsum, "product": math.prod, "max": max}[op](floats)
    numbers = [int(value) for value in values]
    exact = {"sum": sum, "product": math.prod, "max": max}[op](numbers)
    return int(np.array(exact % 2 ** (8 * dtype.itemsize)).astype(np.uint64).astype(dtype))


def totals(rank: int, world_size: int) -> dict[str, str]:
    """Each metric reduced: torch's total, or the library's refusal (never another number)."""
    found = {}
    for name, make in TOTALS.items():
        for op in ("sum", "product", "max"):
            expected = torchs_total([make(r) for r in range(world_size)], op)
            found[f"{name}/{op}"] = _total(lambda: dist.all_reduce(make(rank), op=op), expected)  # noqa: B023
    return found


def _total(call: Callable[[], Any], expected: float) -> str:
    """torch's total (floats within float32's rounding), or what came instead."""
    try:
        got = float(call())
    except Exception as err:
        return f"raised {type(err).__module__}.{type(err).__name__}"
    same = got == expected or math.isclose(got, expected, rel_tol=1e-6)
    return "torch's" if same else f"{got} where torch's is {expected}"


def main() -> None:
    dist.init_process_group(backend="gloo", timeout=float(sys.argv[1]))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    mesh = dist.init_device_mesh("cpu", (jax.device_count(),), mesh_dim_names=("data",))
    found = {kind: sweep(kind, rank, world_size, mesh) for kind in NUMBERS + KEYS}
    views = global_views(rank, mesh)
    sums = totals(rank, world_size)
    report = {"rank": rank, "found": found, "views": views, "totals": sums}
    print("DTYPES " + json.dumps(report), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
