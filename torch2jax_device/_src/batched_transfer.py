"""The one batched transfer ``to_device`` makes, and what it needs to know of its target.

``device_put`` moves a list of NumPy or JAX arrays in one ``jax.device_put`` (through
``host_staging``'s pinned memory between a device and the host, through
``distributed.transfer`` across processes), copying a host buffer first where JAX's CPU
backend would otherwise read it after returning, and naming the leaf a sharding cannot
lay out. ``on_cpu``, ``into_host_memory`` and ``reads_caller_late`` say where a target
is and whether a transfer to it may read the caller's memory after it returned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from . import host_staging
from .distributed import transfer
from .errors import ConversionError, Torch2JaxDeviceError
from .interop import ALIGNMENT, aligned_empty

__all__ = ["aligned_copy", "device_put", "into_host_memory", "on_cpu", "reads_caller_late"]


def into_host_memory(target: jax.sharding.Sharding) -> bool:
    """A host memory kind, where JAX could alias NumPy buffers (``pin_memory`` copies)."""
    return target.memory_kind in ("pinned_host", "unpinned_host")


def device_put(
    arrays: list[Any], target: Any, *, copy: bool, path: Callable[[int], str]
) -> list[jax.Array]:
    """The one place ``to_device`` moves data: ``arrays`` in one batched transfer.

    ``arrays`` are NumPy or JAX arrays; ``path(i)`` names the leaf ``arrays[i]`` came
    from, for messages.
    """
    try:
        return _put(arrays, target, copy=copy, path=path)
    except (ValueError, IndexError) as error:
        if not isinstance(error, Torch2JaxDeviceError):
            _refuse_misfit(arrays, target, path, error)
        raise


def _refuse_misfit(
    arrays: list[Any], target: Any, path: Callable[[int], str], error: Exception
) -> None:
    """JAX refused a transfer: name the first leaf ``target`` cannot lay out, if one is why.

    A sharding splits axes its partition spec names, so a leaf of another rank (a 0-d
    one JAX answers with a bare ``IndexError``), or whose axis the mesh does not divide,
    cannot take it; JAX's own message names only the sharding.
    """
    for index, array in enumerate(arrays):
        shape = tuple(np.shape(array))
        try:
            target.check_compatible_aval(shape)
            target.shard_shape(shape)
        except (ValueError, IndexError) as misfit:
            reason = (
                str(misfit).rstrip(".")
                if isinstance(misfit, ValueError)
                else f"{target} splits an axis a {len(shape)}-d array lacks"
            )
            raise ConversionError(
                f"leaf {path(index)} of shape {shape} cannot be placed with this sharding "
                f"({reason}). Fix: give this leaf a sharding that fits it (PartitionSpec() "
                "replicates it), or pad the batch to a multiple of the mesh axis"
            ) from error


def _put(
    arrays: list[Any], target: Any, *, copy: bool, path: Callable[[int], str]
) -> list[jax.Array]:
    if transfer.crosses_processes(arrays, target):  # a mesh over several processes
        return transfer.device_put(arrays, target, copy=copy, path=path)
    if on_cpu(target) and not into_host_memory(target):
        arrays = [
            aligned_copy(array) if _copied_after_return(array, target) else array
            for array in arrays
        ]
    return host_staging.device_put(  # device<->host copies through pinned memory
        arrays, _destination(target, arrays), may_alias=False if copy else None
    )


def _copied_after_return(array: Any, target: jax.sharding.Sharding) -> bool:
    """Whether JAX's CPU backend would copy the NumPy ``array`` late, or share it in part.

    A CPU device keeps a dense NumPy buffer that starts ``ALIGNMENT``-aligned in place (the
    array shares it); it copies a strided one, or one under ``_COPIED_DURING_CALL_BELOW``
    bytes, before returning, and any other one *after* returning, in a worker thread
    (jax#37830), so a write to the source right after ``to_device(..., non_blocking=True)``
    could reach the result. Under a sharding the devices' pieces of a dense array start
    at different offsets: where one of them is misaligned the array is copied too, so the
    result shares all of the source or none of it.
    """
    if type(array) is not np.ndarray or not array.size:
        return False
    if len(target.device_set) == 1:
        return (
            array.nbytes >= _COPIED_DURING_CALL_BELOW
            and array.flags.c_contiguous
            and bool(array.ctypes.data % ALIGNMENT)
        )
    if not array.ndim:  # every device's piece is the whole (its index `()` gives a scalar)
        return bool(array.ctypes.data % ALIGNMENT)
    indices = target.addressable_devices_indices_map(array.shape).values()
    pieces = [array[index] for index in indices]
    return any(piece.flags.c_contiguous and piece.ctypes.data % ALIGNMENT for piece in pieces)


#: Host buffers of fewer bytes JAX's CPU backend copies during ``device_put`` (XLA's
#: ``kSmallDataTransferByteSize`` in ``xla/pjrt/cpu``: 100 KiB).
_COPIED_DURING_CALL_BELOW = 102_400


def aligned_copy(host: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A copy of ``host`` in fresh ``ALIGNMENT``-aligned memory, which a CPU device keeps in place.

    One copy over the host's threads, made before ``to_device`` returns: 64 MiB
    misaligned onto a CPU device is ready in 20-40 ms this way, and in 55-150 ms through
    JAX's own copy (medians and minimums of several runs on a loaded 2-core CPU).
    """
    copy: np.ndarray[Any, Any] = aligned_empty(host.nbytes).view(host.dtype).reshape(host.shape)
    host_staging.parallel_copy(copy, host)
    return copy


def reads_caller_late(target: jax.sharding.Sharding) -> bool:
    """Whether a transfer to ``target`` may read the caller's host memory after
    ``device_put`` returned: off the CPU, except into pinned memory, which host_staging
    copies into before returning."""
    return not on_cpu(target) and not host_staging.copies_host_data(target)


def on_cpu(target: jax.sharding.Sharding) -> bool:
    devices: set[jax.Device] = target.device_set
    return all(device.platform == "cpu" for device in devices)


def _destination(target: Any, arrays: list[Any]) -> Any:
    """What to give ``jax.device_put``: the Device where it means ``target``, else ``target``.

    ``jax.device_put`` takes a Device faster than the equivalent sharding, but a Device
    means its default memory kind: a memory-kind target (``pinned_host``) needs the
    sharding itself, and jax 0.10 fails to move an array out of another memory kind of
    the same device when given a Device ("Memory kind mismatch").
    """
    device = _plain_device(target)
    if device is None:
        return target
    kind, array_type = target.memory_kind, jax.Array  # locals: this loop is hot
    for array in arrays:  # a loop, not any(...): this runs for every small batch
        if isinstance(array, array_type) and array.sharding.memory_kind != kind:
            return target
    return device


def _plain_device(target: jax.sharding.Sharding) -> jax.Device | None:
    """The device ``target`` is, in its default memory kind; ``None`` for any other sharding.

    The last answer is kept: a loader asks for every batch with the same target, and
    building the sharding to compare with costs more than a small batch's bookkeeping.
    """
    global _last_plain
    last, device = _last_plain
    if target is last:
        return device
    device = None
    if isinstance(target, jax.sharding.SingleDeviceSharding):
        device = next(iter(target.device_set))
        if target != jax.sharding.SingleDeviceSharding(device):
            device = None
    _last_plain = (target, device)
    return device


_last_plain: tuple[Any, jax.Device | None] = (None, None)
