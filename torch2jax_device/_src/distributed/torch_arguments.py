"""torch.distributed's arguments that JAX's one job has no use for: taken at torch's
defaults, refused otherwise with the fix.

A ported line keeps torch's keywords (``group=None``, ``async_op=False``, ``store=``...).
At their defaults they mean what tj does anyway; any other value asks for something JAX's
multi-process runtime does not have (a second process group, a handle to wait on, a
torch store), so it is refused by name instead of being ignored.
"""

from __future__ import annotations

from typing import Any

from ..errors import DistributedError
from ..truth import truth

_ONE_GROUP = (
    "tj.distributed has one process group, every process of the job (torch's default "
    "group, group=None). Fix: drop group=; to work on part of the devices, shard over "
    "a sub-mesh (jax.sharding.Mesh of those devices) inside a jitted function"
)


def default_group(function: str, group: Any) -> None:
    """``group=None`` (torch's default group) is tj's only one."""
    if group is not None:
        raise DistributedError(f"{function}(group={group!r}): {_ONE_GROUP}.")


def synchronous(function: str, async_op: Any) -> None:
    """``async_op=False``; ``True`` asks for a handle to wait on, which tj has none of."""
    if not truth(f"tj.distributed.{function}()", "async_op", async_op):
        return
    raise DistributedError(
        f"{function}(async_op={async_op!r}): tj returns the result, not a handle to "
        "wait on. Fix: drop async_op=True (JAX already dispatches device work "
        "asynchronously; jax.block_until_ready(result) waits for it) and use the "
        "returned value where torch's work.wait() was"
    )


def at_default(function: str, name: str, value: Any, default: Any, fix: str) -> None:
    """A torch parameter tj takes only at torch's default."""
    if value is default or (default is not None and _equal(value, default)):
        return
    raise DistributedError(f"{function}({name}={value!r}): {fix}.")


def device_ids(function: str, ids: Any) -> None:
    """``barrier``'s ``device_ids``: checked as torch checks them (a list of indices);
    tj's barrier runs at JAX's coordination service, on no device, so they choose none."""
    if ids is None:
        return
    if not isinstance(ids, list) or not all(
        isinstance(index, int) and not isinstance(index, bool) for index in ids
    ):
        raise DistributedError(
            f"{function}(device_ids={ids!r}): device_ids must be a list of device indices, "
            "as torch's barrier takes them (e.g. [local_rank]); tj's barrier waits at "
            "JAX's coordination service and uses no device, so it may also be dropped"
        )


def _equal(value: Any, default: Any) -> bool:
    """``value == default`` where that has one truth value (an array's has none)."""
    try:
        return bool(value == default)
    except Exception:  # NumPy's ValueError, torch's RuntimeError, JAX's ...
        return False
