"""Read tensors of a checked safetensors file: in place from a memory map, or into buffers.

Two ways to a tensor's bytes. ``mapped`` gives a read-only NumPy view of the tensor in a
private (copy-on-write) memory map of the file, as ``safetensors.torch`` maps it:
nothing is read until the memory is touched, a write through another view (a torch
tensor from ``tj.to_torch``) changes a private copy of the page and never the file, and
JAX's CPU
backend uses such a view in place when it starts 64-byte aligned. ``read_into`` and
``read_selection`` copy bytes from the file (``readinto``) into buffers the caller owns,
so nothing larger than the bytes asked for is ever read or allocated, whatever the
header claims. Nothing here knows JAX.
"""

from __future__ import annotations

import functools
import io
import math
import mmap
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import ArgumentTypeError, CheckpointError, ConversionError, InvalidIndexError
from ..interop import aligned_empty
from . import messages
from .advanced_index import Gather, is_advanced
from .format import TensorBudget, TensorInfo, read_header
from .paths import open_regular

__all__ = ["CHUNK_BYTES", "Reader"]

#: Reads are issued in chunks of this size (progress updates, narrowing scratch space).
CHUNK_BYTES = 16 * 2**20
#: A sparse selection is read row by row once rows are at least this far apart.
_ROW_READ_BYTES = 64 * 2**10
#: Threads that read the chunks of one large read at once: the page cache (or an NVMe
#: drive) feeds several, where one thread's copy out of it tops out near 10 GB/s.
_READ_THREADS = max(1, min(4, os.cpu_count() or 1))
# Positional reads leave the file offset alone, so threads need no lock to read.
_PREAD = hasattr(os, "preadv")


@functools.cache
def _read_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(_READ_THREADS, thread_name_prefix="torch2jax_device-read")


def _ignore(count: int) -> None:
    pass


class Reader:
    """An open safetensors file with a checked header; gives tensors as views or reads them.

    Reads are thread-safe. Use it as a context manager, or call ``close``. Views from
    ``mapped`` stay valid after ``close``: the mapping lives as long as any view of it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_tensors: int | TensorBudget | None = None,
        opened: io.FileIO | None = None,
    ) -> None:
        """Open ``path`` (``paths.open_regular``: once, a file checked on its handle), or
        read ``opened``, the file already open under that name, which ``close`` closes."""
        self.path = os.fspath(path)
        # Closed by close().
        self._file = opened if opened is not None else open_regular(self.path, "cannot read")
        self._lock = threading.Condition()
        self._reads = 0  # reads in progress; close() waits for them
        self._mapping: mmap.mmap | None = None
        self._unmappable = False
        try:
            self.tensors, self.metadata = read_header(self._file, self.path, max_tensors)
        except BaseException:
            self._file.close()
            raise

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file; later reads raise ``CheckpointError``, earlier views stay valid."""
        with self._lock:
            self._lock.wait_for(lambda: not self._reads)
            self._file.close()
            if self._mapping is not None:
                try:
                    self._mapping.close()
                except BufferError:
                    pass  # views of it are alive; it is unmapped when the last one goes
                self._mapping = None

    def info(self, name: str) -> TensorInfo:
        """The tensor called ``name``.

        Raises:
            ArgumentTypeError: ``name`` is not a string (a ``TypeError``, as safetensors
                raises).
            CheckpointError: the file has no such tensor.
        """
        if not isinstance(name, str):
            raise ArgumentTypeError(
                f"tensor names are strings, not {type(name).__name__} ({messages.shown(name)}): "
                f"ask {self.path!r} for one of its keys() (safetensors raises TypeError too)"
            )
        try:
            return self.tensors[name]
        except KeyError:
            names = sorted(self.tensors)
            shown = ", ".join(repr(n) for n in names[:5]) + (", ..." if len(names) > 5 else "")
            raise CheckpointError(
                f"{self.path!r} has no tensor {name!r}; it has {len(names)}: {shown or 'none'}"
            ) from None

    def mapped(self, info: TensorInfo) -> np.ndarray[Any, Any] | None:
        """The tensor as a read-only view of a private memory map of the file, or ``None``.

        ``None`` where the file cannot be mapped. Nothing is read: pages come from the
        file (or the page cache) when first touched; a page written through another view
        of the memory becomes a private copy (copy-on-write), and the file never changes.
        The view keeps the mapping alive. It shows the file as it is when touched: if the
        file is rewritten in place meanwhile, the view shows the new bytes, and touching
        a page that a truncation removed kills the process with ``SIGBUS``.
        """
        with self._lock:
            self._check_open()
            if self._mapping is None and not self._unmappable:
                try:
                    self._mapping = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_COPY)
                except (OSError, ValueError):  # pipes, some network file systems
                    self._unmappable = True
            mapping = self._mapping
        if mapping is None:
            return None
        if info.start + info.nbytes > len(mapping):
            raise self._truncated(len(mapping), info.start + info.nbytes)
        if not info.nbytes:
            empty: np.ndarray[Any, Any] = np.zeros(info.shape, info.dtype)
            empty.flags.writeable = False
            return empty
        view = np.frombuffer(mapping, np.uint8, info.nbytes, info.start)
        view.flags.writeable = False  # NumPy code must not write to the checkpoint's pages
        return view.view(info.dtype).reshape(info.shape)

    def mapped_selection(self, info: TensorInfo, index: Any) -> np.ndarray[Any, Any] | None:
        """``tensor[index]`` as a view of the memory map (see ``mapped``), or ``None``.

        Raises:
            InvalidIndexError: as ``read_selection``.
        """
        if is_advanced(index):
            return None  # a gather: read whole, never a view
        basic = _basic_index(index, info.name)
        whole = self.mapped(info)
        return None if whole is None else _select(whole, basic, index, info)

    def selection_shape(self, info: TensorInfo, index: Any) -> tuple[int, ...]:
        """The shape of ``tensor[index]``, reading nothing.

        Raises:
            InvalidIndexError: as ``read_selection``.
        """
        if is_advanced(index):
            return Gather(info.shape, index, info.name).shape
        view, _ = self._selected(info, index)
        shape: tuple[int, ...] = view.shape
        return shape

    def read_tensor(self, info: TensorInfo, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
        """The whole tensor in ``dtype`` (see ``read_into``), in a fresh aligned array."""
        out = aligned_empty(math.prod(info.shape) * dtype.itemsize)
        self.read_into(info, dtype, out)
        return out.view(dtype).reshape(info.shape)

    def read_into(
        self,
        info: TensorInfo,
        dtype: np.dtype[Any],
        out: np.ndarray[Any, np.dtype[np.uint8]],
        first: int = 0,
        advance: Callable[[int], None] = _ignore,
    ) -> None:
        """Fill the byte buffer ``out`` with elements of ``info``, from flat index ``first``.

        ``out`` holds ``len(out) // dtype.itemsize`` elements in ``dtype``: the file's
        dtype, or a narrower one (JAX narrows 64-bit types without x64), converted chunk
        by chunk so no full-size copy in the file's dtype is ever made. ``advance(n)`` is
        called after every ``n`` bytes read from the file.
        """
        start = info.start + first * info.dtype.itemsize
        if dtype == info.dtype:
            self._read_span(start, out, advance)
            return
        wide = len(out) // dtype.itemsize * info.dtype.itemsize
        ratio = info.dtype.itemsize // dtype.itemsize
        scratch = aligned_empty(min(CHUNK_BYTES, wide))
        for begin in range(0, wide, CHUNK_BYTES):
            end = min(begin + CHUNK_BYTES, wide)
            self._read_into(start + begin, scratch[: end - begin])
            narrowed = out[begin // ratio : end // ratio].view(dtype)
            wide_values = scratch[: end - begin].view(info.dtype)
            try:
                if not dtypes.is_inexact(dtype):
                    dtypes.refuse_wrapping(wide_values, dtype)
                with np.errstate(over="ignore"):  # refused just below, with its fix
                    np.copyto(narrowed, wide_values, casting="unsafe")
                if dtypes.is_inexact(dtype):
                    dtypes.refuse_overflow(wide_values, narrowed)
            except ConversionError as error:
                raise ConversionError(f"{self.path!r}: tensor {info.name!r}: {error}") from None
            advance(end - begin)

    def read_selection(self, info: TensorInfo, index: Any) -> np.ndarray[Any, Any]:
        """``tensor[index]``, reading only the bytes a basic index selects.

        The result is a fresh aligned array. Rows further apart than a few pages are read
        one by one, denser selections in one read of the bytes they span. An index with
        lists, arrays, tensors or bools in it reads the whole tensor and picks from it by
        torch's rules, as safetensors does (``advanced_index``).

        Raises:
            InvalidIndexError: ``index`` is out of range or has a zero step.
        """
        if is_advanced(index):
            gather = Gather(info.shape, index, info.name)
            picked = gather(self.read_tensor(info, info.dtype))
            fresh: np.ndarray[Any, Any] = aligned_empty(picked.nbytes).view(info.dtype)
            fresh = fresh.reshape(picked.shape)
            fresh[...] = picked
            return fresh
        view, shift = self._selected(info, index)
        out: np.ndarray[Any, Any] = aligned_empty(view.nbytes).view(info.dtype)
        out = out.reshape(view.shape)
        self._gather(view, shift, out)
        return out

    def read_selection_into(
        self, info: TensorInfo, index: Any, out: np.ndarray[Any, np.dtype[np.uint8]]
    ) -> None:
        """``read_selection`` into the byte buffer ``out``, which holds exactly its bytes.

        The selection's elements go in C order, in the file's dtype.

        Raises:
            InvalidIndexError: as ``read_selection``.
        """
        view, shift = self._selected(info, index)
        assert out.nbytes == view.nbytes, (out.nbytes, view.nbytes)
        self._gather(view, shift, out.view(info.dtype).reshape(view.shape))

    def _selected(self, info: TensorInfo, index: Any) -> tuple[np.ndarray[Any, Any], int]:
        """A view that points where ``tensor[index]`` is, and the shift from address to offset.

        NumPy does the index arithmetic on a view that claims the tensor's shape over a
        one-element buffer: basic indexing only computes a pointer and strides, never
        touches memory, so the view's pointer tells where in the file the selection is
        (address + shift = offset).
        """
        basic = _basic_index(index, info.name)
        anchor = np.zeros(1, info.dtype)
        whole = _as_strided(anchor, info.shape, _c_strides(info.shape, info.dtype.itemsize))
        return _select(whole, basic, index, info), info.start - anchor.ctypes.data

    def _gather(self, view: np.ndarray[Any, Any], shift: int, out: np.ndarray[Any, Any]) -> None:
        """Fill ``out`` with the file bytes ``view`` points at (address + shift = offset)."""
        if view.size == 0:
            return
        reaches = [(n - 1) * s for n, s in zip(view.shape, view.strides, strict=True)]
        low = view.ctypes.data + sum(r for r in reaches if r < 0)
        high = view.ctypes.data + view.itemsize + sum(r for r in reaches if r > 0)
        if view.flags.c_contiguous:
            self._read_span(low + shift, out.reshape(-1).view(np.uint8))
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
        np.copyto(out, _as_strided(scratch[first:], view.shape, view.strides))

    def _read_span(
        self,
        offset: int,
        out: np.ndarray[Any, np.dtype[np.uint8]],
        advance: Callable[[int], None] = _ignore,
    ) -> None:
        """Fill ``out`` with the file's bytes from ``offset``, large spans in parallel chunks."""
        spans = [(b, min(b + CHUNK_BYTES, len(out))) for b in range(0, len(out), CHUNK_BYTES)]
        if len(spans) > 1 and _PREAD and _READ_THREADS > 1:  # chunks read at once
            reads = [
                _read_pool().submit(self._read_into, offset + begin, out[begin:end])
                for begin, end in spans
            ]
            try:
                for (begin, end), read in zip(spans, reads, strict=True):
                    read.result()
                    advance(end - begin)
            finally:
                for read in reads:  # none may still write into out once this returns
                    read.cancel() or read.exception()
            return
        for begin, end in spans:
            self._read_into(offset + begin, out[begin:end])
            advance(end - begin)

    def _check_open(self) -> None:
        if self._file.closed:
            raise CheckpointError(f"{self.path!r} was closed; reopen it to read tensors")

    def _truncated(self, size: int, needed: int) -> CheckpointError:
        return CheckpointError(
            f"{self.path!r} ended at byte {size} while reading byte {needed - 1}: it was "
            "truncated after it was opened"
        )

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """Count a read in progress, so that ``close`` waits for it."""
        with self._lock:
            self._check_open()
            self._reads += 1
        try:
            yield
        finally:
            with self._lock:
                self._reads -= 1
                self._lock.notify_all()

    def _read_into(self, offset: int, out: np.ndarray[Any, np.dtype[np.uint8]]) -> None:
        view = out.data
        if not _PREAD:
            with self._lock:
                self._check_open()
                self._file.seek(offset)
                while view:
                    count = self._file.readinto(view)
                    if not count:
                        raise self._truncated(self._file.tell(), offset + len(out) - len(view) + 1)
                    view = view[count:]
            return
        with self._reading():
            position = offset
            while view:
                count = os.preadv(self._file.fileno(), [view], position)
                if not count:
                    raise self._truncated(position, position + 1)
                view = view[count:]
                position += count


def _as_strided(
    base: np.ndarray[Any, Any], shape: tuple[int, ...], strides: tuple[int, ...]
) -> np.ndarray[Any, Any]:
    """A read-only view of ``base``'s memory with ``shape`` and ``strides``, of its dtype.

    Made over a raw (void) view of the same item size: NumPy's ``as_strided`` rebuilds the
    array from its ``__array_interface__``, whose type string it cannot read back for
    some ml_dtypes kinds (float8_e5m2's is ``'<f1'``: "data type '<f1' not understood").
    """
    bits = base.view(np.dtype(f"V{base.dtype.itemsize}"))
    view = np.lib.stride_tricks.as_strided(bits, shape, strides, writeable=False)
    return view.view(base.dtype)


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _select(
    whole: np.ndarray[Any, Any], basic: tuple[Any, ...], index: Any, info: TensorInfo
) -> np.ndarray[Any, Any]:
    """``whole[basic]``, with NumPy's index errors as ``InvalidIndexError``."""
    try:
        selected: np.ndarray[Any, Any] = whole[basic]
    except (IndexError, ValueError) as err:
        raise InvalidIndexError(
            f"get_slice({info.name!r})[{index!r}] on shape {list(info.shape)}: {err}"
        ) from None
    return selected


def _basic_index(index: Any, name: str) -> tuple[Any, ...]:
    """``index`` (basic: see ``advanced_index.is_advanced``) as a tuple that makes NumPy
    return a view, ending in ``...``.

    A scalar result (all dimensions indexed by ints) would make NumPy read the memory
    the view points at; a trailing ``...`` keeps a 0-d view. A bare empty list selects
    nothing along the first axis, as safetensors' ``get_slice`` reads it (``[0:0]``).
    """
    if isinstance(index, list) and not index:
        index = slice(0, 0)
    items = index if isinstance(index, tuple) else (index,)
    for item in items:
        if item is Ellipsis or item is None or _is_integer(item):
            continue
        if isinstance(item, slice) and all(
            part is None or _is_integer(part) for part in (item.start, item.stop, item.step)
        ):
            continue
        raise InvalidIndexError(
            f"get_slice({name!r})[...] takes ints, slices, ... and None (and, opened with "
            f"framework='pt', lists, arrays, tensors and bools, by torch's rules), not "
            f"{type(item).__name__}. Fix: index with those, or index the array get_tensor "
            "returns"
        )
    return items if any(item is Ellipsis for item in items) else (*items, Ellipsis)


def _is_integer(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
