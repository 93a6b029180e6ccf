"""Host <-> device copies at the speed of pinned memory, and arrays assembled in pieces.

Measured on an H200 (``docs/benchmarks-gpu.md``): a device->host ``jax.device_put`` to a CPU
device runs at 0.8 GB/s, the same copy into the source device's ``pinned_host`` memory
at 52 GB/s, and the pinned result becomes a CPU array without another copy. A
host->device ``device_put`` from pageable NumPy runs at 7 GB/s, a copy into a reused
pinned buffer followed by a DMA from it at about 23 GB/s. This module owns those routes:

* ``device_put`` is ``jax.device_put`` for a list of arrays and one destination, with
  device->host copies through the source device's ``pinned_host`` memory and large
  pageable host->device copies sent in pieces through a small pool of pinned buffers
  (``PINNED_PIECES_FROM``), each piece's memcpy overlapping the previous piece's DMA;
* ``pin`` copies host data into a fresh ``pinned_host`` array with a parallel memcpy
  (``jax.device_put`` into pinned memory runs at 0.7-3.6 GB/s);
* ``send_in_pieces`` is that pieces route for any producer of bytes (``fill``): a host
  array, or a part of a checkpoint tensor read from its file straight into the pinned
  buffers (``Streamed``, placed by ``put_on_each`` onto every device that holds it), so
  the host never holds it whole;
* ``to_numpy`` is ``np.asarray`` of a single-device array over the device->host route.

This module owns the routes and the sends; it is the one face of the pinned route: the
checkpoint loaders only call it (``send_in_pieces`` with a ``fill`` that reads the file,
``in_flight`` for their capacity checks, the pool's ``take``/``give`` for their batch
buffers, and the piece names below). Two modules under it hold what the routes use, and
import nothing of it:

* ``pinned_memory``: pinned buffers and their pool (``POOL``: per device, at most
  ``POOL_BUFFERS`` buffers of a size and ``POOL_BYTES`` in all, dropped after
  ``IDLE_SECONDS`` unused). A piece travels in a pinned buffer of exactly its size
  (``device_put`` sends a buffer whole), so it moves its own bytes only;
* ``device_pieces``: ``pieces`` / ``zeros_on`` / ``write_piece`` / ``write_bytes`` /
  ``from_bits`` assemble a device array from pieces that tile it, without ever holding
  it whole on the host (also the checkpoint loader's staging).

Where a staging buffer cannot be allocated, the copy goes from pageable memory or takes
JAX's plain route (slower, never wrong); ``pin`` raises ``OutOfMemoryError`` with the fix.

The routes apply to devices whose arrays live outside host memory (GPU, TPU) and that
list a ``pinned_host`` memory kind. ``routes_through_pinned`` decides; tests treat a
second CPU device as such a device to exercise every route on a CPU-only machine.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import math
import os
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

import jax
import numpy as np

from . import pinned_memory, platforms
from .capacity import explained_oom
from .device_pieces import (
    INT32_LIMIT,
    Piece,
    byte_sized,
    carrier,
    carries,
    compile_writes,
    from_bits,
    piece_kinds,
    pieces,
    unpack,
    write_bytes,
    write_piece,
    zeros_on,
)
from .dtypes import is_prng_key
from .errors import OutOfMemoryError
from .pinned_memory import (
    PINNED,
    POOL,
    Buffer,
    empty_in,
    has_pinned_host,
    pinned_array,
    writable_bytes,
)

__all__ = [
    "ALIAS_BUDGET_BYTES",
    "PIECE_BYTES",
    "PINNED",
    "PINNED_PIECES_FROM",
    "PIN_BY_MEMCPY_FROM",
    "POOL",
    "Buffer",
    "Fill",
    "Piece",
    "PinnedMemoryWarning",
    "Streamed",
    "carrier",
    "carries",
    "compile_ahead",
    "compile_ahead_on",
    "copies_host_data",
    "device_put",
    "from_bits",
    "has_pinned_host",
    "in_flight",
    "parallel_copy",
    "pieces",
    "pin",
    "put_on_each",
    "routes_through_pinned",
    "send_in_pieces",
    "sends_in_pieces",
    "to_numpy",
    "unpack",
    "write_bytes",
    "write_piece",
    "zeros_on",
]

#: Bytes per piece of a host->device copy through pinned buffers. A piece's memcpy
#: (~40 GB/s) and DMA (~55 GB/s) take under a millisecond each, well above the ~50 µs
#: of dispatch per piece, and three pieces in flight hold under 100 MiB of pinned memory.
PIECE_BYTES = 32 * 2**20
#: Pageable host arrays from this size go to a device through pinned pieces. Below it a
#: plain ``jax.device_put`` costs no more than the route's fixed work (an allocation on
#: the device, two dispatches). Measured on an H200 (median of 11): 12 MiB, plain
#: 2.7 ms, pieces 3.0 ms; 16 MiB, plain 3.4 ms, pieces 2.4 ms.
PINNED_PIECES_FROM = 16 * 2**20
#: Host arrays from this size are pinned by a memcpy into memory allocated pinned. Below
#: it, the batched ``jax.device_put`` into pinned memory (0.7-3.6 GB/s: 70-350 µs for
#: 256 KiB) costs no more than the allocation's dispatch (~50 µs) and one call per array.
PIN_BY_MEMCPY_FROM = 256 * 2**10
#: Pinned bytes that device->host results may keep as their own memory. Past it, a result
#: is copied out of its pinned staging array into pageable memory (a memcpy, about 10
#: GB/s) and the staging array freed, so live results never fill XLA's pinned allocator
#: (64 GB by default) and push later copies onto the 1 GB/s route.
ALIAS_BUDGET_BYTES = 16 * 2**30
#: Copies into pinned memory are split over threads from this size (memcpy releases the GIL).
_PARALLEL_FROM = 16 * 2**20
#: Threads per copy. 1 GiB into pinned memory on the H200 machine's 16 cores (median of
#: 5): 4 threads 31 GB/s, 8 34, 12 44, 16 39.
_COPY_THREADS = max(1, min(12, os.cpu_count() or 1))


class PinnedMemoryWarning(UserWarning):
    """XLA's pinned host allocator was full: a device->host copy took JAX's slow route.

    The copy is right, at about a fiftieth of the pinned route's speed. Pinned memory is
    held by pinned arrays you keep (``tj.pin_memory``, ``memory_kind="pinned_host"``) and
    by other frameworks in the process; ``XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB`` raises
    XLA's cap (64 GB by default), set before JAX starts.

    Examples:
        >>> import warnings
        >>> import numpy as np
        >>> import torch2jax_device as tj
        >>> issubclass(tj.PinnedMemoryWarning, UserWarning)
        True
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("error", tj.PinnedMemoryWarning)  # slow copies fail
        ...     back = tj.to_device(np.arange(3.0, dtype=np.float32), "cpu")
        >>> back.tolist()
        [0.0, 1.0, 2.0]
    """


# ------------------------------------------------------------------ which route


def routes_through_pinned(device: jax.Device) -> bool:
    """Whether copies between ``device`` and the host go through pinned buffers here.

    True for accelerators with a ``pinned_host`` memory kind; false for CPU devices,
    whose memory already is host memory.
    """
    return device.platform != "cpu" and has_pinned_host(device)


def device_put(
    arrays: Sequence[Any], destination: Any, *, may_alias: bool | None = None
) -> list[Any]:
    """``jax.device_put(arrays, destination, may_alias=...)``, over the fast routes.

    ``destination`` is a ``jax.Device`` or a ``Sharding``. Arrays on one accelerator
    going to a CPU device's default memory travel through the accelerator's pinned host
    memory; host arrays (NumPy, or JAX arrays on a CPU device) of ``PINNED_PIECES_FROM``
    bytes or more going to one accelerator travel in pinned pieces; host arrays going to
    a device's ``pinned_host`` memory are copied there (``pin``), never aliased. The rest
    goes in one batched ``jax.device_put``. Results come in the order of ``arrays``.
    """
    target = _single_device(destination)
    pinned = _pinned_device(destination)
    routes: dict[jax.Device, bool] = {}  # routes_through_pinned, asked once a device

    def through_pinned(device: jax.Device) -> bool:
        if device not in routes:
            routes[device] = routes_through_pinned(device)
        return routes[device]

    # What each leaf can take, decided once for the call: a tree bound for a CPU device
    # may hold accelerator arrays (pinned D2H); one bound for an accelerator, large host
    # arrays (pinned pieces). Neither: every leaf goes in the batched put, unexamined.
    to_host_possible = (
        target is not None and target.platform == "cpu" and _any_routes_through_pinned()
    )
    pieces_possible = target is not None and through_pinned(target)
    out: list[Any] = [None] * len(arrays)
    sources = list(arrays)  # what the batched put is given (a copy, for small pinned ones)
    plain: list[int] = []
    to_host: list[int] = []
    to_device: list[int] = []
    for index, array in enumerate(arrays):
        if to_host_possible and _goes_to_host(array, target, through_pinned):
            to_host.append(index)
        elif pieces_possible and _goes_in_pieces(array, target):
            to_device.append(index)
        elif pinned is not None and _on_host(array):
            if array.nbytes >= PIN_BY_MEMCPY_FROM and byte_sized(np.dtype(array.dtype)):
                out[index] = pin(np.asarray(array), pinned)
            else:  # a copy of its own: JAX may alias NumPy data placed in host memory
                sources[index] = np.array(array) if isinstance(array, np.ndarray) else array
                plain.append(index)
        else:
            plain.append(index)
    if plain:
        placed = jax.device_put([sources[i] for i in plain], destination, may_alias=may_alias)
        for index, array in zip(plain, placed, strict=True):
            out[index] = array
    if to_host:
        assert target is not None
        for index, array in zip(
            to_host, _to_host([arrays[i] for i in to_host], target), strict=True
        ):
            out[index] = array
    for index in to_device:
        assert target is not None
        out[index] = _to_device_in_pieces(np.asarray(arrays[index]), target)
    return out


def _any_routes_through_pinned() -> bool:
    """Whether a device of a started backend routes through pinned memory: if none does
    (a CPU-only process), no array can take the pinned device->host route, and a tree's
    leaves need not be examined one by one (a microsecond each).

    Asked once per process (about 6 µs, a small batch's overhead otherwise), and again
    only if ``routes_through_pinned`` is another rule (tests replace it).
    """
    global _pinned_anywhere
    rule, answer = _pinned_anywhere
    if rule is not routes_through_pinned:
        answer = any(
            routes_through_pinned(device)
            for backend in platforms.jax_backends().values()
            for device in backend.local_devices()
        )
        _pinned_anywhere = (routes_through_pinned, answer)
    return answer


#: The rule ``_any_routes_through_pinned`` last asked, and its answer.
_pinned_anywhere: tuple[Any, bool] = (None, False)


def _single_device(destination: Any) -> jax.Device | None:
    """The one device of ``destination`` in its default memory kind, else ``None``."""
    if isinstance(destination, jax.Device):
        return destination
    if isinstance(destination, jax.sharding.SingleDeviceSharding):
        device = next(iter(destination.device_set))
        if destination == jax.sharding.SingleDeviceSharding(device):
            return device
    return None


def _pinned_device(destination: Any) -> jax.Device | None:
    """The one device of ``destination`` if it names its ``pinned_host`` memory."""
    if isinstance(destination, jax.sharding.SingleDeviceSharding):
        if destination.memory_kind == PINNED:
            device: jax.Device = next(iter(destination.device_set))
            return device
    return None


def copies_host_data(destination: Any) -> bool:
    """Whether ``device_put`` to ``destination`` copies NumPy data, never aliasing it.

    True for one device's ``pinned_host`` memory (``pin``, or a copy of a small array).
    """
    return _pinned_device(destination) is not None


def _on_host(array: Any) -> bool:
    """Whether ``array`` is NumPy data or a JAX array in a CPU device's own memory."""
    if isinstance(array, np.ndarray):
        return True
    if not isinstance(array, jax.Array) or len(array.sharding.device_set) != 1:
        return False
    device: jax.Device = next(iter(array.sharding.device_set))
    return device.platform == "cpu" and array.sharding.memory_kind in (None, "device")


def _goes_to_host(
    array: Any, target: jax.Device, through_pinned: Callable[[jax.Device], bool]
) -> bool:
    """Whether ``array``, on one accelerator (in any of its memories), goes to the CPU
    device ``target`` through pinned memory."""
    if not isinstance(array, jax.Array):
        return False
    devices = array.sharding.device_set
    if len(devices) != 1:
        return False
    (source,) = devices
    return source != target and through_pinned(source)


def _goes_in_pieces(array: Any, target: jax.Device) -> bool:
    """Whether host data ``array`` goes to ``target`` (an accelerator) in pinned pieces."""
    return (
        array.nbytes >= PINNED_PIECES_FROM
        and _on_host(array)
        and sends_in_pieces(target, np.dtype(array.dtype), array.nbytes)
    )


def sends_in_pieces(device: jax.Device, dtype: np.dtype[Any], nbytes: int) -> bool:
    """Whether ``nbytes`` of host data of ``dtype`` go to ``device`` in pinned pieces."""
    return routes_through_pinned(device) and nbytes >= PINNED_PIECES_FROM and carries(dtype)


class Streamed(NamedTuple):
    """Host data made on demand: piece by piece into staging buffers, or whole.

    A part of a checkpoint tensor is one: going to accelerators, its pieces are read from
    the file straight into pinned buffers (``fill``, see ``send_in_pieces``), so it is
    never whole on the host; going anywhere else, ``whole()`` reads it.
    """

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    fill: Fill
    whole: Callable[[], Any]  # all of it as host data (a NumPy array), for other routes

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def put_on_each(
    value: Any, destinations: Sequence[jax.sharding.Sharding], *, may_alias: bool | None = None
) -> list[jax.Array]:
    """``value`` (host data, a JAX array or ``Streamed``) copied onto each of ``destinations``.

    Host data (``Streamed`` included) whose destinations all take it in pinned pieces
    (``sends_in_pieces``) goes in pieces, each filled once for all of them; a
    ``Streamed`` value going anywhere else is made whole first. The rest takes
    ``device_put``'s routes, one destination at a time.
    """
    # A PRNG key array (no NumPy dtype, no bytes of its own) takes device_put's route.
    if isinstance(value, Streamed) or (_on_host(value) and not is_prng_key(value.dtype)):
        dtype = value.dtype if isinstance(value, Streamed) else np.dtype(value.dtype)
        devices = [
            device
            for device in map(_single_device, destinations)
            if device is not None and sends_in_pieces(device, dtype, value.nbytes)
        ]
        if devices and len(devices) == len(destinations):
            streamed = value if isinstance(value, Streamed) else _streamed(np.asarray(value))
            return send_in_pieces(streamed.shape, streamed.dtype, streamed.fill, devices)
    if isinstance(value, Streamed):
        value = value.whole()
    return [
        device_put([value], destination, may_alias=may_alias)[0] for destination in destinations
    ]


# ------------------------------------------------------------------ device -> host


def _to_host(arrays: list[jax.Array], target: jax.Device) -> list[jax.Array]:
    """Accelerator arrays as ordinary arrays on the CPU device ``target``, through pinned memory.

    The copy into the source's ``pinned_host`` memory is the fast DMA (52 GB/s on an
    H200, where ``jax.device_put`` to the CPU device runs at 0.9-1.3 GB/s); arrays already
    there skip it. The CPU array is then made over the pinned bytes (``_host_alias``)
    while the pinned memory results hold stays within ``ALIAS_BUDGET_BYTES``, else over a
    copy of them, as where they are the caller's: a caller's array can be deleted or
    donated, which frees its bytes whoever still points at them. Where the pinned
    allocator is full, the plain copy is used, with a ``PinnedMemoryWarning``.
    """
    staged = list(arrays)
    moving = [i for i, array in enumerate(arrays) if array.sharding.memory_kind != PINNED]
    pinned_kinds = [
        jax.sharding.SingleDeviceSharding(
            next(iter(arrays[i].sharding.device_set)), memory_kind=PINNED
        )
        for i in moving
    ]
    try:
        for index, array in zip(
            moving, jax.device_put([arrays[i] for i in moving], pinned_kinds), strict=True
        ):
            staged[index] = array
        jax.block_until_ready(staged)  # the CPU array reads these bytes directly
    except jax.errors.JaxRuntimeError as err:
        if "RESOURCE_EXHAUSTED" not in str(err):
            raise
        nbytes = sum(arrays[i].nbytes for i in moving)
        warnings.warn(
            f"copying {nbytes:,} bytes to {target} the slow way: XLA's pinned host memory is "
            "full. Drop pinned arrays you no longer need, or raise "
            "XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB before JAX starts.",
            PinnedMemoryWarning,
            stacklevel=2,
        )
        return list(jax.device_put(arrays, jax.sharding.SingleDeviceSharding(target)))
    ours = set(moving)
    return [_host_alias(array, target, share=i in ours) for i, array in enumerate(staged)]


class _Aliases:
    """The pinned bytes that device->host results keep as their memory, within budget."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = 0

    def hold(self, nbytes: int) -> bool:
        """Whether a result of ``nbytes`` may keep its pinned bytes (then counted until
        ``release``); ``False`` past ``ALIAS_BUDGET_BYTES``."""
        with self._lock:
            if self._held + nbytes > ALIAS_BUDGET_BYTES:
                return False
            self._held += nbytes
            return True

    def release(self, nbytes: int) -> None:
        with self._lock:
            self._held -= nbytes

    def held(self) -> int:
        """Pinned bytes that live results keep."""
        with self._lock:
            return self._held


ALIASES = _Aliases()


def _host_alias(pinned: jax.Array, target: jax.Device, share: bool) -> jax.Array:
    """The ``pinned_host`` array ``pinned`` as an ordinary array on the CPU device ``target``.

    ``jax.device_put(pinned, target)`` shares the pinned bytes too, but JAX (0.10 and
    0.11) types the result as host memory (``float32<host>[3]``), which jitted code
    refuses to mix with other CPU arrays ("memory_space of all inputs ... must be the
    same", seen on an H200); through a sharding it copies at 1.3 GB/s. A NumPy view of
    the bytes enters as an ordinary CPU array, shared where aligned (pinned buffers are);
    it keeps ``pinned`` alive, and its bytes count in ``ALIASES`` while it lives. Without
    ``share``, or past ``ALIAS_BUDGET_BYTES``, the view is copied first (a memcpy).
    Sub-byte dtypes (int4), whose bytes JAX may pack, are copied.
    """
    dtype = np.dtype(pinned.dtype)
    result: jax.Array
    if not byte_sized(dtype):
        result = jax.device_put(pinned, jax.sharding.SingleDeviceSharding(target))
    elif share and ALIASES.hold(pinned.nbytes):
        view = writable_bytes(pinned).view(dtype).reshape(pinned.shape)
        result = jax.device_put(view, target, may_alias=True)
        weakref.finalize(result, ALIASES.release, pinned.nbytes)
    else:
        view = writable_bytes(pinned).view(dtype).reshape(pinned.shape)
        result = jax.device_put(view.copy(), target, may_alias=True)
    return result


def to_numpy(array: jax.Array) -> np.ndarray[Any, Any]:
    """The value of the single-device ``array`` as NumPy, at the route's speed.

    From an accelerator it comes through the device's ``pinned_host`` memory (the fast
    DMA; ``np.asarray`` of a GPU array runs at 2 GB/s, this at the bus's speed); from a
    CPU device it is a read-only view of the array's memory, no copy.
    """
    (source,) = array.devices()
    if routes_through_pinned(source):
        (array,) = device_put([array], jax.local_devices(backend="cpu")[0])
    return np.asarray(array)


# ------------------------------------------------------------------ pinned buffers


def parallel_copy(destination: np.ndarray[Any, Any], source: np.ndarray[Any, Any]) -> None:
    """``np.copyto(destination, source)`` split over threads (NumPy releases the GIL)."""
    if destination.nbytes < _PARALLEL_FROM or _COPY_THREADS == 1 or destination.ndim == 0:
        np.copyto(destination, source)
        return
    if destination.flags.c_contiguous and source.flags.c_contiguous:
        destination, source = destination.reshape(-1), source.reshape(-1)
    rows = destination.shape[0]
    if rows < 2:
        np.copyto(destination, source)
        return
    step = -(-rows // _COPY_THREADS)
    bounds = [(start, min(start + step, rows)) for start in range(0, rows, step)]
    copies = [
        _copy_pool().submit(np.copyto, destination[start:stop], source[start:stop])
        for start, stop in bounds
    ]
    for copy in copies:
        copy.result()


@functools.cache
def _copy_pool() -> ThreadPoolExecutor:
    """Threads shared by every parallel copy (starting threads per copy costs ~0.5 ms)."""
    return ThreadPoolExecutor(_COPY_THREADS, thread_name_prefix="torch2jax_device-copy")


# ------------------------------------------------------------------ pin_memory


def pin(host: np.ndarray[Any, Any], device: jax.Device) -> jax.Array:
    """``host`` copied into a fresh array in ``device``'s ``pinned_host`` memory.

    The array is allocated there directly and filled by a parallel memcpy, so this runs
    at memory bandwidth; ``host`` may be non-contiguous, of any dtype JAX holds.

    Raises:
        OutOfMemoryError: XLA's pinned host allocator is full (the message gives the fix).
    """
    array = pinned_array(device, host.shape, np.dtype(host.dtype))
    if host.size:
        target = writable_bytes(array).view(host.dtype).reshape(host.shape)
        parallel_copy(target, host)
    return array


# ------------------------------------------------------------------ host -> device


def _to_device_in_pieces(host: np.ndarray[Any, Any], device: jax.Device) -> jax.Array:
    """``host`` on ``device``, sent in pinned pieces assembled there (``send_in_pieces``)."""
    streamed = _streamed(host)
    (array,) = send_in_pieces(streamed.shape, streamed.dtype, streamed.fill, [device])
    return array


def _streamed(host: np.ndarray[Any, Any]) -> Streamed:
    """``host`` as ``Streamed``: each piece copied out of it by a parallel memcpy."""
    if not host.flags.c_contiguous:
        host = np.ascontiguousarray(host)  # pieces are contiguous runs of the flat array
    flat = host.reshape(-1).view(np.uint8) if host.ndim else host.reshape(1).view(np.uint8)
    itemsize = host.dtype.itemsize

    def fill(piece: Piece, out: np.ndarray[Any, np.dtype[np.uint8]]) -> None:
        start = piece.first * itemsize
        parallel_copy(out, flat[start : start + piece.nbytes])

    return Streamed(host.shape, np.dtype(host.dtype), fill, lambda: host)


#: ``fill(piece, out)`` writes the ``piece.nbytes`` bytes of ``piece`` (its elements in C
#: order) into the uint8 buffer ``out``.
Fill = Callable[["Piece", np.ndarray[Any, np.dtype[np.uint8]]], None]


def send_in_pieces(
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    fill: Fill,
    devices: Sequence[jax.Device],
    *,
    piece_bytes: int | None = None,
) -> list[jax.Array]:
    """An array of ``shape`` and ``dtype`` on each of ``devices``, written piece by piece.

    The array is cut into ``pieces`` of at most ``piece_bytes`` (``PIECE_BYTES`` by
    default), all of one size. Each piece is filled once (``fill``) into a pooled pinned
    buffer of exactly its size and sent (asynchronously) to every device, each from a
    buffer in its own pinned memory (copies of the first): a piece moves its own bytes,
    nothing more. Filling the next piece overlaps those DMAs, and a buffer is reused once
    its transfer completed. So the host holds at most ``max(POOL_BUFFERS, len(devices))``
    pieces, whatever the array's size, and the caller may read the bytes from a file
    straight into them. Where XLA's pinned allocator is full, the remaining pieces go
    from pageable buffers (slower, the same result). ``dtype`` must be one that
    ``carries``. ``in_flight`` says what the pieces take on a device besides the array.

    Raises:
        OutOfMemoryError: a device has no room for the array (the message explains).
    """
    dtype = np.dtype(dtype)
    bits = carrier(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    per_piece = max(1, (piece_bytes or PIECE_BYTES) // dtype.itemsize)
    depth = _depth(len(devices))
    _await_compiled(tuple(shape), dtype, devices, piece_bytes)
    in_flight: collections.deque[_Sent] = collections.deque()
    wholes: list[jax.Array] = []
    pinned = True
    try:
        with explained_oom(devices[0], nbytes, f"a copy of {nbytes:,} bytes"):
            for piece in pieces(shape, dtype.itemsize, per_piece):
                if len(in_flight) >= depth:
                    in_flight.popleft().settle()
                sent = _Sent([], [])
                in_flight.append(sent)
                try:
                    for device in devices if pinned else ():
                        sent.buffers.append(POOL.take(device, piece.nbytes))
                except OutOfMemoryError:  # the pinned allocator is full: pageable pieces
                    pinned = False
                if pinned:
                    first = sent.buffers[0].view
                    fill(piece, first)
                    for buffer in sent.buffers[1:]:
                        parallel_copy(buffer.view, first)
                    raws: list[Any] = [buffer.array for buffer in sent.buffers]
                else:
                    pageable = np.empty(piece.nbytes, np.uint8)  # JAX may keep it: a fresh one
                    fill(piece, pageable)
                    raws = [pageable] * len(devices)
                targets = [jax.sharding.SingleDeviceSharding(device) for device in devices]
                sent.arrays.extend(jax.device_put(raws, targets))
                if piece.first == 0 and piece.last:  # one piece: it is the array
                    wholes = [unpack(part, piece.shape, bits) for part in sent.arrays]
                    break
                if not wholes:
                    wholes = [zeros_on(device, shape, bits) for device in devices]
                wholes = [
                    write_bytes(whole, part, piece)
                    for whole, part in zip(wholes, sent.arrays, strict=True)
                ]
            jax.block_until_ready(wholes)
    finally:
        while in_flight:
            in_flight.popleft().settle(quietly=True)
    return wholes if bits == dtype else [from_bits(whole, dtype) for whole in wholes]


def compile_ahead(
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    devices: Sequence[jax.Device],
    *,
    piece_bytes: int | None = None,
) -> None:
    """Start compiling, in a background thread, what ``send_in_pieces`` of an array of
    ``shape`` and ``dtype`` onto ``devices`` will run: its pinned buffers' allocation,
    and its unpack, or the zeros, the piece update and the bit cast of its pieces.

    Each new shape compiles these once per process (on the CPU, most of a first load's
    time); a loader that knows its shapes before reading (from a checkpoint's header)
    calls this first, so the compilations overlap its reads and transfers. The later
    call finds them in JAX's cache (``jit(...).lower(...).compile()`` fills it), after
    waiting for one still under way; a compilation that fails here is left to that call.
    """
    dtype = np.dtype(dtype)
    key = (tuple(shape), dtype, tuple(devices), piece_bytes or PIECE_BYTES)
    if not carries(dtype) or max(shape, default=0) >= INT32_LIMIT:
        return  # not sent as bytes; 64-bit offsets are compiled in their own context
    with _ahead_lock:
        if key not in _ahead:
            _ahead[key] = _compile_pool().submit(_compile, *key)


def compile_ahead_on(
    shape: tuple[int, ...], dtype: np.dtype[Any], sharding: jax.sharding.Sharding
) -> None:
    """``compile_ahead`` for an array of ``shape`` and ``dtype`` placed on ``sharding``
    part by part (``put_on_each``, each distinct part onto the devices that hold it),
    for the parts that go in pinned pieces."""
    dtype = np.dtype(dtype)
    holders: dict[tuple[tuple[int, int], ...], list[jax.Device]] = {}
    for device, index in sharding.addressable_devices_indices_map(shape).items():
        bounds = tuple(
            part.indices(size)[:2] if isinstance(part, slice) else (0, size)
            for part, size in zip(index or (), shape, strict=False)
        )
        holders.setdefault(bounds, []).append(device)
    for bounds, devices in holders.items():
        part = tuple(stop - start for start, stop in bounds) + tuple(shape[len(bounds) :])
        nbytes = math.prod(part) * dtype.itemsize
        if all(sends_in_pieces(device, dtype, nbytes) for device in devices):
            compile_ahead(part, dtype, devices)


def _compile(
    shape: tuple[int, ...], dtype: np.dtype[Any], devices: tuple[jax.Device, ...], piece_bytes: int
) -> None:
    """``compile_ahead``'s work, for the signatures ``send_in_pieces`` calls with."""
    kinds = piece_kinds(shape, dtype.itemsize, max(1, piece_bytes // dtype.itemsize))
    for device in devices:
        pinned = jax.sharding.SingleDeviceSharding(device, memory_kind=PINNED)
        for piece in kinds:
            empty_in(pinned).lower((piece.nbytes,), np.dtype(np.uint8)).compile()
        compile_writes(shape, dtype, kinds, device)


def _await_compiled(
    shape: tuple[int, ...],
    dtype: np.dtype[Any],
    devices: Sequence[jax.Device],
    piece_bytes: int | None,
) -> None:
    """Wait for ``compile_ahead``'s compilation of this send, if one was started."""
    with _ahead_lock:
        ahead = _ahead.get((shape, dtype, tuple(devices), piece_bytes or PIECE_BYTES))
    if ahead is not None:
        with contextlib.suppress(Exception):  # the call compiles, and raises, itself
            ahead.result()


#: ``compile_ahead``'s compilations, by what they are for.
_ahead: dict[tuple[Any, ...], Future[None]] = {}
_ahead_lock = threading.Lock()


@functools.cache
def _compile_pool() -> ThreadPoolExecutor:
    """Threads for ``compile_ahead`` (XLA compiles outside the GIL)."""
    return ThreadPoolExecutor(
        max(1, min(4, os.cpu_count() or 1)), thread_name_prefix="torch2jax_device-compile"
    )


def _depth(devices: int) -> int:
    """Pieces in flight at once when each goes to ``devices`` devices."""
    return max(1, pinned_memory.POOL_BUFFERS // devices)


def in_flight(
    shape: tuple[int, ...], dtype: np.dtype[Any], *, piece_bytes: int | None = None
) -> int:
    """The bytes ``send_in_pieces`` keeps on a device besides the array: its pieces in
    flight, each of its own size, ``POOL_BUFFERS`` at most (fewer if the array has fewer
    pieces; fewer still when several devices share them, which this bound does not count).

    Examples:
        >>> import numpy as np
        >>> from torch2jax_device._src.host_staging import in_flight
        >>> in_flight((10, 1000), np.dtype(np.float32), piece_bytes=16_000)  # 4 rows a piece
        48000
        >>> in_flight((1000,), np.dtype(np.float32), piece_bytes=16_000)  # one piece
        4000
    """
    dtype = np.dtype(dtype)
    per_piece = max(1, (piece_bytes or PIECE_BYTES) // dtype.itemsize)
    blocks = list(
        itertools.islice(
            pieces(tuple(shape), dtype.itemsize, per_piece), pinned_memory.POOL_BUFFERS
        )
    )
    return len(blocks) * blocks[0].nbytes


class _Sent(NamedTuple):
    """One piece on its way: the pinned buffers it is sent from, and the arrays sent."""

    buffers: list[Buffer]
    arrays: list[jax.Array]

    def settle(self, *, quietly: bool = False) -> None:
        """Wait for the transfers, then give the buffers back to the pool."""
        if quietly:  # unwinding from an error: the buffers go back whatever happened
            with contextlib.suppress(jax.errors.JaxRuntimeError):
                jax.block_until_ready(self.arrays)
        else:
            jax.block_until_ready(self.arrays)
        for buffer in self.buffers:
            POOL.give(next(iter(buffer.array.devices())), buffer)
