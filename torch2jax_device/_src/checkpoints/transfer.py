"""Tensors of an open safetensors file onto a device: in place, or through bounded staging.

Each tensor takes one of two routes:

* **In place.** Where ``jax.device_put`` keeps an aligned host buffer as the array's
  memory (JAX's CPU backend), a tensor that starts 64-byte aligned in the file and keeps
  its dtype becomes an array over a private memory map of the file: no read and no
  copy, whatever its size; pages come from disk when first touched.
* **Staged.** Every other tensor is read (``readinto``) into host buffers by a background
  thread while this thread hands the previous buffer to ``jax.device_put``, so disk
  reads overlap transfers. Where the device keeps host buffers, each buffer is fresh and
  becomes the arrays' memory: one read of the file, nothing else. Where it copies them
  (GPU, TPU), at most ``staging_bytes`` of buffers exist, each reused once its transfer
  has completed, and a tensor larger than one buffer goes in pieces, each written into
  the array on the device (``dynamic_update_slice`` on a donated buffer): host memory
  stays at the budget, not the file size. Where the device has pinned host memory (a
  GPU), the buffers are pinned, taken from and returned to ``host_staging``'s pool, and
  every tensor of ``host_staging.PINNED_PIECES_FROM`` bytes or more (or larger than a
  buffer) is handed to ``host_staging.send_in_pieces``, which reads its pieces straight
  into pinned buffers of each piece's size, at most a third of the budget, and sends
  them as raw bytes (the DMA at the bus's speed): a piece moves its own bytes, nothing
  more. Pieces, pools and sends are ``host_staging``'s; this module only calls it.

Before reading, a load is checked against the device's free memory where the device
reports a limit (``capacity.check_fits``: a GPU; the CPU reports none) and refused with
``OutOfMemoryError`` if it cannot fit; an allocation failure midway becomes the same
error. What a device must have free is
``need``: every array it receives, plus the largest staging one of them keeps on it while
it arrives (its pieces in flight, each ``Arrival``'s ``staging``). ``room_for`` is that
rule for the loads that read their bytes themselves (``tj.safe_open``'s slices, ``send``),
and ``room_on_each`` for loads spread over several devices (a mesh: each device's
shards); ``sent`` says what an array sent over ``host_staging``'s routes keeps in flight.

Narrowing (64-bit tensors without ``jax_enable_x64``) happens while reading, chunk by
chunk, with one ``reader.CHUNK_BYTES`` scratch buffer besides the staging buffers.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import math
import os
import queue
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from .. import dtypes, host_staging
from ..capacity import check_fits, explained_oom_on
from ..errors import OutOfMemoryError
from ..host_staging import (
    POOL,
    Buffer,
    Piece,
    carrier,
    carries,
    from_bits,
    pieces,
    write_piece,
    zeros_on,
)
from ..interop import ALIGNMENT, aligned_empty
from ..run_ahead import run_ahead
from .format import TensorInfo
from .messages import loading
from .progress import Progress
from .reader import Reader

__all__ = [
    "STAGING_BYTES",
    "Arrival",
    "need",
    "place",
    "room_for",
    "room_on_each",
    "send",
    "sent",
    "uses_host_memory",
]

#: Host memory for staging transfers to devices that copy, unless a load says otherwise.
STAGING_BYTES = 256 * 2**20
# Staging buffers: one being read, one read and waiting, one being transferred.
_BUFFERS = 3


@functools.cache
def uses_host_memory(device: jax.Device) -> bool:
    """Whether ``jax.device_put`` onto ``device`` keeps an aligned host buffer as the array.

    True on JAX's CPU backend (any CPU device), false where arrays live in device memory.
    """
    probe = aligned_empty(ALIGNMENT)
    return _shares(jax.device_put(probe, device), probe)


def place(
    reader: Reader,
    infos: Sequence[TensorInfo],
    target: jax.Device,
    *,
    mapped: bool,
    staging_bytes: int,
    progress: bool | None,
) -> dict[str, jax.Array]:
    """Every tensor of ``infos`` as an array committed to ``target``, by name.

    ``mapped`` allows the in-place route; otherwise (and for tensors it cannot take)
    tensors are staged, with ``staging_bytes`` the host budget on devices that copy.
    ``progress`` is ``Progress``'s switch for the bar of the staged bytes. Every array
    returned is ready: its transfer has completed.
    """
    in_place = uses_host_memory(target)
    views: dict[str, np.ndarray[Any, Any]] = {}
    staged: list[tuple[TensorInfo, np.dtype[Any]]] = []
    for info in infos:
        dtype = dtypes.canonical(info.dtype)
        view = reader.mapped(info) if mapped and in_place and dtype == info.dtype else None
        if view is not None and view.ctypes.data % ALIGNMENT == 0:
            views[info.name] = view
        else:
            staged.append((info, dtype))
    arrays = dict(zip(views, jax.device_put(list(views.values()), target), strict=True))
    if not staged:
        return arrays
    staging = _Staging(reader, target, in_place, staging_bytes, staged)
    what = loading(len(staged), reader.path)
    total = sum(info.nbytes for info, _ in staged)
    with room_for(target, staging.arrivals(), what):
        with Progress(f"Loading {os.path.basename(reader.path)}", total, progress) as bar:
            arrays.update(staging.run(bar.advance))
    return arrays


def send(arrays: list[jax.Array], target: jax.Device, what: str) -> list[jax.Array]:
    """Host ``arrays`` (already read) onto ``target``, large ones through pinned pieces.

    Refused with ``OutOfMemoryError`` before any transfer if they cannot fit the device's
    free memory, and a device allocation failure midway becomes that error too; ``what``
    names the load in the message.
    """
    arrivals = [sent(target, array.shape, array.dtype) for array in arrays]
    with room_for(target, arrivals, what):
        return host_staging.device_put(arrays, target)


class Arrival(NamedTuple):
    """One array arriving on a device: its bytes, and the staging bytes that are on the
    device too while it arrives (its pieces in flight, before they are written into it)."""

    nbytes: int
    staging: int = 0


def need(arrivals: Iterable[Arrival]) -> int:
    """The device memory arrays arriving one after another take at their peak.

    All of them, plus the largest staging any one keeps on the device while it arrives:
    the one rule every capacity check of a load applies, on one device or on a mesh.

    Examples:
        >>> from torch2jax_device._src.checkpoints.transfer import Arrival, need
        >>> need([Arrival(100, staging=64), Arrival(30), Arrival(200, staging=96)])
        426
    """
    arrivals = list(arrivals)
    return sum(arrival.nbytes for arrival in arrivals) + max(
        (arrival.staging for arrival in arrivals), default=0
    )


def sent(device: jax.Device, shape: tuple[int, ...], dtype: Any) -> Arrival:
    """Host data of ``shape`` and ``dtype`` arriving on ``device`` over ``host_staging``'s
    routes (``device_put``, ``put_on_each``).

    Sent in pinned pieces (``host_staging.sends_in_pieces``), it has its pieces in flight
    on the device besides itself (``host_staging.in_flight``); sent whole, nothing else.
    """
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if not host_staging.sends_in_pieces(device, dtype, nbytes):
        return Arrival(nbytes)
    return Arrival(nbytes, host_staging.in_flight(tuple(shape), dtype))


@contextlib.contextmanager
def room_for(target: jax.Device, arrivals: Sequence[Arrival], what: str) -> Iterator[None]:
    """A load of ``arrivals`` onto ``target``, checked before the block reads or sends a byte.

    Refused with ``OutOfMemoryError`` if their ``need`` cannot fit the device's free
    memory (``capacity.check_fits``); a device allocation failure inside the block becomes
    the same error. ``what`` names the load in the message.
    """
    with room_on_each({target: arrivals}, what):
        yield


@contextlib.contextmanager
def room_on_each(arrivals: Mapping[jax.Device, Sequence[Arrival]], what: str) -> Iterator[None]:
    """``room_for`` a load spread over devices: ``arrivals[device]`` onto each.

    Every device is checked before the block starts, in order; the first that cannot
    fit its ``need`` refuses the load, named in the message.
    """
    needs = {device: need(each) for device, each in arrivals.items()}
    for device, nbytes in needs.items():
        check_fits(device, nbytes, what)
    with explained_oom_on(needs, what):
        yield


class _Batch(NamedTuple):
    """Whole tensors read into one buffer, each at an aligned offset."""

    tensors: list[tuple[TensorInfo, np.dtype[Any], int]]  # info, dtype, offset
    nbytes: int


class _Piece(NamedTuple):
    """A block of a tensor too big for one staging buffer: contiguous in the file."""

    info: TensorInfo
    dtype: np.dtype[Any]
    block: Piece

    @property
    def nbytes(self) -> int:
        return self.block.nbytes


class _Streamed(NamedTuple):
    """A tensor that goes to the device in pinned pieces read straight into them
    (``host_staging.send_in_pieces``): never read into a staging buffer here."""

    info: TensorInfo
    dtype: np.dtype[Any]

    @property
    def nbytes(self) -> int:
        return math.prod(self.info.shape) * self.dtype.itemsize


class _Staging:
    """Reads staged tensors into buffers in a thread and sends them to the device; hands
    the tensors that go in pinned pieces to ``host_staging``, which reads and sends them."""

    def __init__(
        self,
        reader: Reader,
        target: jax.Device,
        in_place: bool,
        staging_bytes: int,
        staged: Sequence[tuple[TensorInfo, np.dtype[Any]]],
    ) -> None:
        self._reader = reader
        self._target = target
        self._in_place = in_place
        self._staged = staged
        needed = sum(_round_up(math.prod(info.shape) * dtype.itemsize) for info, dtype in staged)
        chunk = max(ALIGNMENT, _round_up(staging_bytes // _BUFFERS))
        self._chunk = min(chunk, max(ALIGNMENT, needed))  # no bigger than the load
        # Where the device has pinned host memory, staging buffers are pinned (the DMA
        # then runs at the bus's speed); by their address, the pinned buffer of a view.
        self._pins = not in_place and host_staging.routes_through_pinned(target)
        # Tensors in pieces there are read piece by piece into pinned buffers of the
        # piece's size (host_staging's pieces route), at most a third of the budget each.
        self._streams = self._pins
        self._piece_bytes = min(self._chunk, host_staging.PIECE_BYTES)
        self._pinned: dict[int, Buffer] = {}
        # A token per buffer that may exist: the buffer itself, or None to allocate one.
        self._free: queue.SimpleQueue[np.ndarray[Any, np.dtype[np.uint8]] | None]
        self._free = queue.SimpleQueue()
        for _ in range(_BUFFERS):
            self._free.put(None)
        self._advance: Callable[[int], None] = lambda count: None

    def arrivals(self) -> list[Arrival]:
        """Each staged tensor on the device, with the pieces it has there at a time besides
        itself: those ``host_staging`` keeps in flight, or one (``_send`` waits for each
        piece's write)."""
        return [self._arrival(info, dtype) for info, dtype in self._staged]

    def _arrival(self, info: TensorInfo, dtype: np.dtype[Any]) -> Arrival:
        nbytes = math.prod(info.shape) * dtype.itemsize
        if self._streamed(nbytes, dtype):
            shape = tuple(info.shape)
            return Arrival(
                nbytes, host_staging.in_flight(shape, dtype, piece_bytes=self._piece_bytes)
            )
        if self._in_pieces(nbytes, dtype):
            return Arrival(nbytes, next(self._pieces(info, dtype)).nbytes)
        return Arrival(nbytes)

    def _pieces(self, info: TensorInfo, dtype: np.dtype[Any]) -> Iterator[Piece]:
        """The pieces of a tensor read into staging buffers: up to a buffer each."""
        return pieces(tuple(info.shape), dtype.itemsize, self._chunk // dtype.itemsize)

    def run(self, advance: Callable[[int], None]) -> dict[str, jax.Array]:
        """Every staged tensor on the device; ``advance(count)`` after each read."""
        self._advance = advance
        arrays: dict[str, jax.Array] = {}
        assembling: dict[str, jax.Array] = {}
        in_flight: collections.deque[tuple[np.ndarray[Any, Any], list[jax.Array]]]
        in_flight = collections.deque()
        streamed = {
            (tuple(info.shape), dtype): None
            for info, dtype in self._staged
            if self._streamed(math.prod(info.shape) * dtype.itemsize, dtype)
        }
        for shape, dtype in streamed:  # each new shape's compilations, while reading
            host_staging.compile_ahead(shape, dtype, [self._target], piece_bytes=self._piece_bytes)
        reads = run_ahead(self._items(), self._read, 1)
        try:
            for item, buffer in reads:
                if isinstance(item, _Streamed):
                    arrays[item.info.name] = self._stream(item)
                    continue
                assert buffer is not None  # every other item was read into one
                in_flight.append((buffer, self._send(item, buffer, arrays, assembling)))
                while len(in_flight) > 1:
                    self._release(*in_flight.popleft())
            while in_flight:
                self._release(*in_flight.popleft())
            for pinned in self._pinned.values():  # every transfer from them is complete
                POOL.give(self._target, pinned)
        finally:
            for _ in range(_BUFFERS):  # a reader waiting for a buffer must not block the close
                self._free.put(None)
            reads.close()
        return arrays

    def _in_pieces(self, nbytes: int, dtype: np.dtype[Any]) -> bool:
        """Whether a tensor of ``nbytes`` goes in pieces: larger than a buffer, or large
        enough for pinned pieces where the buffers are pinned (``PINNED_PIECES_FROM``)."""
        if self._in_place:
            return False
        pinned = self._pins and nbytes >= host_staging.PINNED_PIECES_FROM and carries(dtype)
        return nbytes > self._chunk or pinned

    def _streamed(self, nbytes: int, dtype: np.dtype[Any]) -> bool:
        """Whether a tensor goes in pieces through ``host_staging`` (as raw bytes: a dtype
        that ``carries``), read there straight into pinned buffers of the piece's size."""
        return self._streams and carries(dtype) and self._in_pieces(nbytes, dtype)

    def _stream(self, item: _Streamed) -> jax.Array:
        """``item`` on the device, read piece by piece into ``host_staging``'s buffers."""
        info, dtype = item.info, item.dtype

        def fill(piece: Piece, out: np.ndarray[Any, np.dtype[np.uint8]]) -> None:
            self._reader.read_into(info, dtype, out, piece.first, self._advance)

        (array,) = host_staging.send_in_pieces(
            tuple(info.shape), dtype, fill, [self._target], piece_bytes=self._piece_bytes
        )
        return array

    def _items(self) -> Iterator[_Batch | _Piece | _Streamed]:
        batch: list[tuple[TensorInfo, np.dtype[Any], int]] = []
        size = 0
        for info, dtype in self._staged:
            nbytes = math.prod(info.shape) * dtype.itemsize
            if batch and (size + nbytes > self._chunk or nbytes > self._chunk):
                yield _Batch(batch, size)
                batch, size = [], 0
            if self._streamed(nbytes, dtype):
                yield _Streamed(info, dtype)
                continue
            if self._in_pieces(nbytes, dtype):
                for block in self._pieces(info, dtype):
                    yield _Piece(info, dtype, block)
                continue
            batch.append((info, dtype, size))
            size += _round_up(nbytes)
        if batch:
            yield _Batch(batch, size)

    def _read(
        self, item: _Batch | _Piece | _Streamed
    ) -> tuple[_Batch | _Piece | _Streamed, np.ndarray[Any, Any] | None]:
        """In the reading thread: a free buffer, filled with ``item``'s bytes (none for a
        ``_Streamed`` tensor, whose pieces ``_stream`` reads)."""
        if isinstance(item, _Streamed):
            return item, None
        buffer = self._free.get()
        if buffer is None or len(buffer) < item.nbytes:
            buffer = self._allocate(item.nbytes if self._in_place else self._chunk)
        if isinstance(item, _Piece):
            self._reader.read_into(
                item.info, item.dtype, buffer[: item.nbytes], item.block.first, self._advance
            )
        else:
            for info, dtype, offset in item.tensors:
                nbytes = math.prod(info.shape) * dtype.itemsize
                self._reader.read_into(
                    info, dtype, buffer[offset : offset + nbytes], advance=self._advance
                )
        return item, buffer

    def _allocate(self, nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
        """A staging buffer: pinned where the device has pinned memory and room is left."""
        if self._pins:
            try:
                pinned = POOL.take(self._target, nbytes)
            except OutOfMemoryError:  # XLA's pinned allocator is full: pageable memory
                self._pins = False
            else:
                self._pinned[pinned.view.ctypes.data] = pinned
                return pinned.view
        return aligned_empty(nbytes)

    def _send(
        self,
        item: _Batch | _Piece,
        buffer: np.ndarray[Any, Any],
        arrays: dict[str, jax.Array],
        assembling: dict[str, jax.Array],
    ) -> list[jax.Array]:
        """Start the transfer of ``item``; the arrays that read ``buffer``."""
        if isinstance(item, _Batch):
            hosts = [
                buffer[offset : offset + math.prod(info.shape) * dtype.itemsize]
                .view(dtype)
                .reshape(info.shape)
                for info, dtype, offset in item.tensors
            ]
            placed: list[jax.Array] = jax.device_put(hosts, self._target)
            arrays.update(zip([info.name for info, _, _ in item.tensors], placed, strict=True))
            return placed
        name = item.info.name
        bits = carrier(item.dtype)
        # The piece's own bytes, typed: never the rest of the buffer.
        part = jax.device_put(
            buffer[: item.nbytes].view(bits).reshape(item.block.shape), self._target
        )
        whole = assembling.pop(name, None)
        if whole is None:
            whole = zeros_on(self._target, tuple(item.info.shape), bits)
        whole = write_piece(whole, part, item.block)
        # One piece at a time on the device: once it is written into the tensor, nothing
        # reads its host buffer or keeps its device copy any more.
        jax.block_until_ready(whole)
        if item.block.last:
            arrays[name] = whole if bits == item.dtype else from_bits(whole, item.dtype)
        else:
            assembling[name] = whole
        return []

    def _release(self, buffer: np.ndarray[Any, Any], arrays: list[jax.Array]) -> None:
        """Wait for the transfers from ``buffer``; free it, unless arrays now own it."""
        jax.block_until_ready(arrays)
        owned = any(_shares(array, buffer) for array in arrays)
        if owned:  # the arrays' memory now: never back to the pool
            self._pinned.pop(buffer.ctypes.data, None)
        self._free.put(None if owned else buffer)


def _shares(array: jax.Array, buffer: np.ndarray[Any, Any]) -> bool:
    """Whether ``array``'s memory lies inside the host buffer ``buffer``."""
    try:
        pointer = array.unsafe_buffer_pointer()
    except (jax.errors.JaxRuntimeError, NotImplementedError):  # no host-visible pointer
        return False
    return bool(buffer.ctypes.data <= pointer < buffer.ctypes.data + max(buffer.nbytes, 1))


def _round_up(nbytes: int) -> int:
    return -(-nbytes // ALIGNMENT) * ALIGNMENT
