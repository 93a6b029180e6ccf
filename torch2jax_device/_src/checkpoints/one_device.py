"""A safetensors file onto one device: the whole file, or tensor by tensor as it is opened.

Nothing goes through ``jnp.array``, so nothing is ever created on JAX's default device
first. On a CPU device a load is a memory map: every tensor that starts 64-byte aligned
in the file (all of them in files ``tj.save_file`` writes) becomes an array over the
mapped file, in O(1) time, and RAM grows only as pages are touched; other tensors are
read once into aligned host buffers the arrays use in place. On other devices the file
is read through a bounded staging area while earlier chunks transfer (``transfer``).

``Placement`` is what an open file needs from a target: ``OnDevice`` here, and
``sharded.OnMesh`` for a mesh, so ``tj.safe_open`` and ``TensorSlice`` serve both.
"""

from __future__ import annotations

import io
from typing import Any, Protocol

import jax

from .. import dtypes, host_staging
from ..device import DeviceLike
from ..errors import InvalidIndexError
from ..interop import ALIGNMENT
from .advanced_index import is_advanced
from .format import TensorBudget, TensorInfo
from .messages import slice_load
from .options import checked_staging, maps_file, resolve_target
from .reader import Reader
from .source import PathLike
from .transfer import STAGING_BYTES, place, room_for, sent, uses_host_memory

__all__ = ["OnDevice", "Placement", "TensorSlice", "load_file"]


def load_file(
    path: PathLike,
    device: DeviceLike | None = "cpu",
    *,
    backend: str = "mmap",
    staging_bytes: int = STAGING_BYTES,
    max_tensors: int | TensorBudget | None = None,
    progress: bool | None = None,
    opened: io.FileIO | None = None,
) -> dict[str, jax.Array]:
    """``tj.load_file`` onto one device: ``{name: array}`` in the file's (offset) order.

    ``max_tensors`` may be the ``TensorBudget`` of a load of several files; ``opened``
    the file already open (a shard of an index, ``tj.load``'s file), closed here.
    """
    target = resolve_target(device)
    mapped = maps_file(backend)
    with Reader(path, max_tensors=max_tensors, opened=opened) as reader:
        infos = list(reader.tensors.values())
        arrays = place(
            reader,
            infos,
            target,
            mapped=mapped,
            staging_bytes=checked_staging(staging_bytes),
            progress=progress,
        )
    return {info.name: arrays[info.name] for info in infos}


class Placement(Protocol):
    """Where an open file's tensors and selections go: one device, or a mesh."""

    def tensor(self, reader: Reader, info: TensorInfo) -> jax.Array:
        """The whole tensor ``info``, placed."""
        ...

    def selection(self, reader: Reader, info: TensorInfo, index: Any) -> jax.Array:
        """``tensor[index]`` for a basic index, placed."""
        ...


class OnDevice:
    """One device: tensors and contiguous aligned selections over the memory map on a CPU.

    Raises:
        DeviceUnavailableError: ``device`` does not exist here.
        InvalidDeviceError: ``backend`` is neither ``"mmap"`` nor ``"pread"``.
    """

    def __init__(self, device: DeviceLike | None, backend: str) -> None:
        self.device = resolve_target(device)
        self._mapped = maps_file(backend) and uses_host_memory(self.device)

    def tensor(self, reader: Reader, info: TensorInfo) -> jax.Array:
        placed = place(
            reader,
            [info],
            self.device,
            mapped=self._mapped,
            staging_bytes=STAGING_BYTES,
            progress=False,
        )
        return placed[info.name]

    def selection(self, reader: Reader, info: TensorInfo, index: Any) -> jax.Array:
        dtype = dtypes.canonical(info.dtype)
        mapped = self._mapped and dtype == info.dtype
        view = reader.mapped_selection(info, index) if mapped else None
        if view is not None and view.flags.c_contiguous and view.ctypes.data % ALIGNMENT == 0:
            array: jax.Array = jax.device_put(view, self.device)  # in place: nothing to fit
            return array
        shape = reader.selection_shape(info, index)
        what = slice_load(shape, info.name, reader.path)
        with room_for(self.device, [sent(self.device, shape, dtype)], what):
            host = dtypes.as_canonical(reader.read_selection(info, index))
            placed: list[jax.Array] = host_staging.device_put([host], self.device)
        return placed[0]


class TensorSlice:
    """One tensor of an open file, read on indexing: safetensors' ``PySafeSlice``.

    ``slice[index]`` takes a basic NumPy index (ints, slices with any step, ``...``,
    ``None``); opened with ``framework="pt"``, lists, arrays, tensors and bools too, by
    torch's rules (the whole tensor is read, as safetensors' ``"pt"`` slices read it).
    For a basic index on a CPU device, a contiguous selection that starts 64-byte aligned
    is an array over the memory-mapped file; otherwise only the bytes it selects are
    read: one read for a window such as ``[a:b]``, row by row for selections that are
    sparse at a coarse grain. Opened onto a mesh, the selection is placed as the rule says for its
    shape.

    Examples:
        >>> import os, tempfile
        >>> import numpy as np
        >>> import torch2jax_device as tj
        >>> path = os.path.join(tempfile.mkdtemp(), "tokens.safetensors")
        >>> tj.save_file({"tokens": np.arange(12, dtype=np.int32).reshape(3, 4)}, path)
        >>> with tj.safe_open(path, framework="flax") as f:
        ...     rows = f.get_slice("tokens")
        ...     rows.get_shape(), rows.get_dtype(), rows[1:, ::2].tolist()
        ([3, 4], 'I32', [[4, 6], [8, 10]])
    """

    def __init__(
        self, reader: Reader, info: TensorInfo, placement: Placement, *, torch_indexing: bool
    ) -> None:
        self._reader = reader
        self._info = info
        self._placement = placement
        self._torch_indexing = torch_indexing

    def get_shape(self) -> list[int]:
        """The tensor's shape, as a list (safetensors' convention)."""
        return list(self._info.shape)

    def get_dtype(self) -> str:
        """The tensor's safetensors dtype code, e.g. ``"BF16"``."""
        return self._info.code

    def __getitem__(self, index: Any) -> jax.Array:
        """``tensor[index]``, from the file onto the device.

        Raises:
            InvalidIndexError: out of range or a zero step (an ``IndexError`` /
                ``ValueError``, as NumPy and torch raise), or not a basic index where
                the file was not opened with ``framework="pt"``.
            OutOfMemoryError: the selection cannot fit the device's free memory (checked
                before reading, as ``tj.load_file`` checks), or the device ran out.
        """
        if not self._torch_indexing and is_advanced(index):
            name = self._info.name
            raise InvalidIndexError(
                f"get_slice({name!r})[{index!r:.80}]: with this framework get_slice takes "
                "ints, slices, ... and None, as safetensors' does (SafetensorError: only its "
                "'pt' slices take lists, arrays and bools, by torch's rules). Fix: open the "
                "file with framework='pt' for torch's indexing, or index the array "
                f"get_tensor({name!r}) returns"
            )
        return self._placement.selection(self._reader, self._info, index)
