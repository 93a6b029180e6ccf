"""64-bit integers ``all_reduce`` holds in 32 bits: a total that leaves 32 bits is refused.

Without ``jax_enable_x64`` JAX holds int64 as int32, and ``all_reduce`` reduces in the
dtype it holds. Each rank's count may fit 32 bits while their sum does not (1.5e9 tokens
on each of 2 ranks): XLA's int32 sum wraps, to -1294967296, where torch's int64 sum is
3000000000. So for a sum or product of a leaf that was 64-bit before JAX narrowed it,
every rank's values are gathered and reduced exactly on the host (Python's integers),
and a total outside the held dtype raises on every rank instead of wrapping.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..detect import is_torch_tensor
from ..errors import DistributedError

__all__ = ["check_in_range", "describe", "original_dtype"]

#: The reductions whose result can leave the range of values that each fit it.
CHECKED = frozenset({"sum", "product"})


def original_dtype(leaf: Any) -> np.dtype[Any] | None:
    """The 64-bit integer dtype ``leaf`` had before JAX narrowed it, or ``None``.

    A Python int is torch's int64 (``torch.tensor(3)``), as NumPy's default int is.
    """
    if jax.config.values.get("jax_enable_x64"):
        return None
    if is_torch_tensor(leaf):
        name = str(leaf.dtype).removeprefix("torch.")
        dtype = np.dtype(name) if name in ("int64", "uint64") else None
    elif isinstance(leaf, int | np.integer | np.ndarray) and not isinstance(leaf, bool):
        dtype = np.asarray(leaf).dtype
    else:
        return None
    return dtype if dtype is not None and dtype.kind in "iu" and dtype.itemsize == 8 else None


def check_in_range(
    op: str, path: str, per_process: jax.Array, held: np.dtype[Any], original: np.dtype[Any]
) -> None:
    """Raise where ``op`` over every process's rows of ``per_process`` leaves ``held``'s range.

    Every rank calls it for the same leaves (the agreement compares the original dtypes),
    so the gather it runs is matched on every rank, and every rank raises alike.
    """
    mesh = per_process.sharding.mesh
    rows = np.asarray(_gathered(mesh)(per_process).addressable_data(0)).astype(object)
    exact = rows.sum(axis=0) if op == "sum" else np.prod(rows, axis=0)
    info = np.iinfo(held)
    outside = [int(value) for value in np.ravel(exact) if not info.min <= value <= info.max]
    if not outside:
        return
    raise DistributedError(
        f"all_reduce(op={op!r}): leaf {path or '<root>'} was {original.name}, which JAX holds "
        f"as {held.name} (jax_enable_x64 is off), and the {op} over every rank is "
        f"{outside[0]}, outside {held.name}'s range [{info.min}, {info.max}]: torch's "
        f"{original.name} {op} would hold it, an {held.name} one wraps. Fix: "
        "jax.config.update('jax_enable_x64', True) at the start of the script, or reduce "
        "the leaf as floating point (np.float32(count); exact below 2**24)."
    )


@functools.cache
def _gathered(mesh: Mesh) -> Any:
    replicated = NamedSharding(mesh, PartitionSpec())
    return jax.jit(lambda array: array, out_shardings=replicated)


def describe(dtype: Any, original: np.dtype[Any] | None) -> Any:
    """The dtype a leaf is compared by across ranks: its original 64-bit one where JAX
    narrowed it, so that ranks check (and gather) the same leaves."""
    return original if original is not None else dtype
