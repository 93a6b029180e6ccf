"""Read tensors of a checked safetensors file into 64-byte-aligned host memory.

Reads go straight from the file into aligned NumPy buffers, the alignment JAX's CPU
backend needs to use host memory in place, and nothing larger than the tensors asked for
is ever allocated, whatever the header claims. Nothing here knows JAX.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ..errors import CheckpointError, InvalidIndexError
from ..interop import ALIGNMENT, aligned_empty
from .format import TensorInfo, read_header

__all__ = ["CHUNK_BYTES", "Reader"]

#: Reads are issued in chunks of this size (progress updates, narrowing scratch space).
CHUNK_BYTES = 64 * 2**20
#: A sparse selection is read row by row once rows are at least this far apart.
_ROW_READ_BYTES = 64 * 2**10


class Reader:
    """An open safetensors file with a checked header; reads tensors into host memory.

    Reads are thread-safe. Use it as a context manager, or call ``close``.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._file = open(self.path, "rb", buffering=0)  # closed by close()
        self._lock = threading.Lock()
        try:
            self.tensors, self.metadata = read_header(self._file, self.path)
        except BaseException:
            self._file.close()
            raise

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file; later reads raise ``CheckpointError``."""
        self._file.close()

    def info(self, name: str) -> TensorInfo:
        """The tensor called ``name``."""
        try:
            return self.tensors[name]
        except KeyError:
            names = sorted(self.tensors)
            shown = ", ".join(repr(n) for n in names[:5]) + (", ..." if len(names) > 5 else "")
            raise CheckpointError(
                f"{self.path!r} has no tensor {name!r}; it has {len(names)}: {shown or 'none'}"
            ) from None

    def read_groups(
        self,
        infos: Sequence[TensorInfo],
        cast: Callable[[np.dtype[Any]], np.dtype[Any]],
        group_bytes: int,
        advance: Callable[[int], None],
    ) -> Iterator[list[tuple[str, np.ndarray[Any, Any]]]]:
        """Read ``infos`` into aligned host arrays, one fresh buffer per group of tensors.

        Each group holds tensors totalling about ``group_bytes``, each starting on an
        ``ALIGNMENT`` boundary of the group's buffer; a group is yielded as soon as it is
        read, so the caller can start transferring it while the next one is read, and a
        buffer is freed once nothing refers to its arrays. ``cast`` gives the dtype each
        tensor must end up in (JAX narrows 64-bit types without x64); narrowing happens
        chunk by chunk, so no full-size copy of the file's dtype is ever made.
        ``advance(n)`` is called after every ``n`` bytes read.
        """
        for group in _split(infos, cast, group_bytes):
            sizes = [cast(info.dtype).itemsize * math.prod(info.shape) for info in group]
            slots = [_round_up(size) for size in sizes]
            buffer = aligned_empty(sum(slots))
            arrays, offset = [], 0
            for info, size, slot in zip(group, sizes, slots, strict=True):
                target = buffer[offset : offset + size]
                self._read_tensor_into(info, cast(info.dtype), target, advance)
                arrays.append((info.name, target.view(cast(info.dtype)).reshape(info.shape)))
                offset += slot
            yield arrays

    def read_tensor(
        self, info: TensorInfo, cast: Callable[[np.dtype[Any]], np.dtype[Any]]
    ) -> np.ndarray[Any, Any]:
        """One whole tensor, in the dtype ``cast`` gives, in its own aligned buffer."""
        dtype = cast(info.dtype)
        target = aligned_empty(dtype.itemsize * math.prod(info.shape))
        self._read_tensor_into(info, dtype, target, lambda count: None)
        return target.view(dtype).reshape(info.shape)

    def read_selection(self, info: TensorInfo, index: Any) -> np.ndarray[Any, Any]:
        """``tensor[index]`` for a basic NumPy index, reading only the bytes it selects.

        The result is a fresh aligned array. Rows further apart than a few pages are read
        one by one, denser selections in one read of the bytes they span.

        Raises:
            InvalidIndexError: ``index`` is out of range, has a zero step, or is not a
                basic index (ints, slices, ``...``, ``None``).
        """
        # NumPy does the index arithmetic on a view that claims the tensor's shape over a
        # one-element buffer: basic indexing only computes a pointer and strides, never
        # touches memory, so the view's pointer tells where in the file the selection is.
        anchor = np.zeros(1, info.dtype)
        whole = np.lib.stride_tricks.as_strided(
            anchor, info.shape, _c_strides(info.shape, info.dtype.itemsize), writeable=False
        )
        basic = _basic_index(index, info.name)
        try:
            view = whole[basic]
        except (IndexError, ValueError) as err:
            raise InvalidIndexError(
                f"get_slice({info.name!r})[{index!r}] on shape {list(info.shape)}: {err}"
            ) from None
        out: np.ndarray[Any, Any] = aligned_empty(view.nbytes).view(info.dtype)
        out = out.reshape(view.shape)
        self._gather(view, info.start - anchor.ctypes.data, out)
        return out

    def _gather(self, view: np.ndarray[Any, Any], shift: int, out: np.ndarray[Any, Any]) -> None:
        """Fill ``out`` with the file bytes ``view`` points at (address + shift = offset)."""
        if view.size == 0:
            return
        reaches = [(n - 1) * s for n, s in zip(view.shape, view.strides, strict=True)]
        low = view.ctypes.data + sum(r for r in reaches if r < 0)
        high = view.ctypes.data + view.itemsize + sum(r for r in reaches if r > 0)
        if view.flags.c_contiguous:
            self._read_into(low + shift, out.reshape(-1).view(np.uint8))
            return
        span = high - low
        if span > 2 * view.nbytes and abs(view.strides[0]) >= _ROW_READ_BYTES:
            for row in range(view.shape[0]):
                part = slice(row, row + 1) if view.ndim == 1 else row
                self._gather(view[part], shift, out[part])
            return
        scratch = aligned_empty(span).view(view.dtype)
        self._read_into(low + shift, scratch.view(np.uint8))
        first = (view.ctypes.data - low) // view.itemsize
        np.copyto(out, np.lib.stride_tricks.as_strided(scratch[first:], view.shape, view.strides))

    def _read_tensor_into(
        self,
        info: TensorInfo,
        dtype: np.dtype[Any],
        target: np.ndarray[Any, np.dtype[np.uint8]],
        advance: Callable[[int], None],
    ) -> None:
        if dtype == info.dtype:
            for begin in range(0, info.nbytes, CHUNK_BYTES):
                end = min(begin + CHUNK_BYTES, info.nbytes)
                self._read_into(info.start + begin, target[begin:end])
                advance(end - begin)
            return
        ratio = info.dtype.itemsize // dtype.itemsize
        scratch = aligned_empty(min(CHUNK_BYTES, info.nbytes))
        for begin in range(0, info.nbytes, CHUNK_BYTES):
            end = min(begin + CHUNK_BYTES, info.nbytes)
            self._read_into(info.start + begin, scratch[: end - begin])
            narrowed = target[begin // ratio : end // ratio].view(dtype)
            np.copyto(narrowed, scratch[: end - begin].view(info.dtype), casting="unsafe")
            advance(end - begin)

    def _read_into(self, offset: int, out: np.ndarray[Any, np.dtype[np.uint8]]) -> None:
        view = out.data
        with self._lock:
            if self._file.closed:
                raise CheckpointError(f"{self.path!r} was closed; reopen it to read tensors")
            self._file.seek(offset)
            while view:
                count = self._file.readinto(view)
                if not count:
                    raise CheckpointError(
                        f"{self.path!r} ended at byte {self._file.tell()} while reading byte "
                        f"{offset + len(out) - len(view)}: it was truncated after it was opened"
                    )
                view = view[count:]


def _round_up(nbytes: int) -> int:
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


def _split(
    infos: Sequence[TensorInfo],
    cast: Callable[[np.dtype[Any]], np.dtype[Any]],
    group_bytes: int,
) -> Iterator[list[TensorInfo]]:
    group: list[TensorInfo] = []
    size = 0
    for info in infos:
        slot = _round_up(cast(info.dtype).itemsize * math.prod(info.shape))
        if group and size + slot > group_bytes:
            yield group
            group, size = [], 0
        group.append(info)
        size += slot
    if group:
        yield group


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _basic_index(index: Any, name: str) -> tuple[Any, ...]:
    """``index`` as a tuple that makes NumPy return a view: basic, ending in ``...``.

    Advanced indexing, and a scalar result (all dimensions indexed by ints), would make
    NumPy read the memory the view points at; a trailing ``...`` keeps a 0-d view.
    """
    items = index if isinstance(index, tuple) else (index,)
    for item in items:
        if item is Ellipsis or item is None or _is_integer(item):
            continue
        if isinstance(item, slice) and all(
            part is None or _is_integer(part) for part in (item.start, item.stop, item.step)
        ):
            continue
        raise InvalidIndexError(
            f"get_slice({name!r})[...] takes ints, slices, ... and None, not "
            f"{type(item).__name__}; for fancy indexing, index the array it returns"
        )
    return items if any(item is Ellipsis for item in items) else (*items, Ellipsis)


def _is_integer(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
