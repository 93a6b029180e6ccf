"""64-bit values ``all_reduce`` holds in 32 bits: a value or total past 32 bits is refused.

Without ``jax_enable_x64`` JAX holds int64 as int32, and ``all_reduce`` reduces in the
dtype it holds. Each rank's count may fit 32 bits while their sum does not (1.5e9 tokens
on each of 2 ranks): XLA's int32 sum wraps, to -1294967296, where torch's int64 sum is
3000000000. So for a sum or product of a leaf that was 64-bit before JAX narrowed it,
every rank's values are gathered and reduced exactly on the host (Python's integers),
and a total outside the held dtype raises on every rank instead of wrapping. float64
likewise: a value or a total past float32's largest would be inf.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..detect import is_torch_tensor
from ..errors import DistributedError

__all__ = ["check_fits", "check_in_range", "describe", "original_dtype"]

#: The reductions whose result can leave the range of values that each fit it.
CHECKED = frozenset({"sum", "product"})


def original_dtype(leaf: Any) -> np.dtype[Any] | None:
    """The 64-bit dtype (int64, uint64, float64) ``leaf`` had before JAX narrowed it, or
    ``None``.

    A Python int is torch's int64 (``torch.tensor(3)``), as NumPy's default int is; a
    Python float is torch's float32 (its default dtype), so not narrowed.
    """
    if jax.config.values.get("jax_enable_x64"):
        return None
    if is_torch_tensor(leaf):
        name = str(leaf.dtype).removeprefix("torch.")
        dtype = np.dtype(name) if name in ("int64", "uint64", "float64") else None
    elif isinstance(leaf, np.ndarray | np.generic) or (
        isinstance(leaf, int) and not isinstance(leaf, bool)
    ):
        dtype = np.asarray(leaf).dtype
    else:
        return None
    return dtype if dtype is not None and dtype.kind in "iuf" and dtype.itemsize == 8 else None


def check_fits(leaf: Any, path: str, original: np.dtype[Any] | None) -> None:
    """Raise where a float64 ``leaf`` holds a finite value float32 cannot (it would be inf)."""
    if original is None or original.kind != "f":
        return
    values = np.asarray(leaf.detach().cpu().numpy() if is_torch_tensor(leaf) else leaf)
    finite = np.abs(values[np.isfinite(values)])
    limit = np.finfo(np.float32).max
    if finite.size and finite.max() > limit:
        raise DistributedError(
            f"all_reduce: leaf {path or '<root>'} is float64 and holds {finite.max():g}, "
            f"beyond float32's largest value ({limit:g}), which JAX holds it in (jax_enable_x64 "
            "is off): it would become inf. Fix: jax.config.update('jax_enable_x64', True) at "
            "the start of the script, or scale the value down before reducing it."
        )


def check_in_range(
    op: str, path: str, per_process: jax.Array, held: np.dtype[Any], original: np.dtype[Any]
) -> None:
    """Raise where ``op`` over every process's rows of ``per_process`` leaves ``held``'s range.

    Every rank calls it for the same leaves (the agreement compares the original dtypes),
    so the gather it runs is matched on every rank, and every rank raises alike. An inf or
    NaN a rank brought is its own (torch's sum keeps it too), not an overflow.
    """
    sharding = per_process.sharding
    assert isinstance(sharding, NamedSharding)  # all_reduce's stack over the process mesh
    mesh = sharding.mesh
    rows = np.asarray(_gathered(mesh)(per_process).addressable_data(0))
    if held.kind == "f":
        wide = rows.astype(np.float64)
        with np.errstate(over="ignore"):
            exact = wide.sum(axis=0) if op == "sum" else np.prod(wide, axis=0)
        brought = np.all(np.isfinite(wide), axis=0)
        limit = float(np.finfo(held).max)
        outside = [
            float(v) for v, ok in zip(np.ravel(exact), np.ravel(brought), strict=True)
            if ok and not abs(v) <= limit
        ]  # fmt: skip
        bounds = f"[-{limit:g}, {limit:g}]"
    else:
        exact = (
            rows.astype(object).sum(axis=0) if op == "sum" else np.prod(rows.astype(object), axis=0)
        )
        info = np.iinfo(held)
        outside = [int(v) for v in np.ravel(exact) if not info.min <= v <= info.max]
        bounds = f"[{info.min}, {info.max}]"
    if not outside:
        return
    total = f"{outside[0]:g}" if held.kind == "f" else str(outside[0])
    result = "overflows to inf" if held.kind == "f" else "wraps"
    raise DistributedError(
        f"all_reduce(op={op!r}): leaf {path or '<root>'} was {original.name}, which JAX holds "
        f"as {held.name} (jax_enable_x64 is off), and the {op} over every rank is {total}, "
        f"outside {held.name}'s range {bounds}: torch's {original.name} {op} would hold it, "
        f"the {held.name} one {result}. Fix: jax.config.update('jax_enable_x64', True) at the "
        "start of the script, or reduce the leaf in a wider form (integers as floating "
        "point, exact below 2**24; floating point scaled down)."
    )


@functools.cache
def _gathered(mesh: Mesh) -> Any:
    replicated = NamedSharding(mesh, PartitionSpec())
    return jax.jit(lambda array: array, out_shardings=replicated)


def describe(dtype: Any, original: np.dtype[Any] | None) -> Any:
    """The dtype a leaf is compared by across ranks: its original 64-bit one where JAX
    narrowed it, so that ranks check (and gather) the same leaves."""
    return original if original is not None else dtype
