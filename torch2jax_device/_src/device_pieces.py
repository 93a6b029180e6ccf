"""An array assembled on a device from pieces, never held whole on the host.

``pieces`` cuts an array into blocks contiguous in its flat (C-order) layout, each of
at most a given number of elements; ``zeros_on`` makes the array on its device and
``write_piece`` / ``write_bytes`` write each block into it in place (the array is
donated), a block that travelled as raw bytes being unpacked on the device
(``unpack``). Floats travel as their bits (``carrier``) and are cast back at the end
(``from_bits``), so every bit arrives unchanged. ``host_staging`` sends the pieces
through pinned memory; the checkpoint loaders call it.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
from collections.abc import Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "INT32_LIMIT",
    "Piece",
    "byte_sized",
    "carrier",
    "carries",
    "compile_writes",
    "from_bits",
    "piece_kinds",
    "pieces",
    "unpack",
    "write_bytes",
    "write_piece",
    "zeros_on",
]

#: Offsets along one axis from this size need 64-bit indices on the device.
INT32_LIMIT = 2**31


def byte_sized(dtype: np.dtype[Any]) -> bool:
    """Whether JAX stores ``dtype`` as NumPy does, whole bytes per element (not int4)."""
    return bool(jax.dtypes.itemsize_bits(dtype) == 8 * dtype.itemsize)


class Piece(NamedTuple):
    """A block of an array, contiguous in its flat (C-order) layout."""

    first: int  # flat index of its first element
    shape: tuple[int, ...]
    starts: tuple[int, ...]  # where it goes in the array
    last: bool
    nbytes: int


def pieces(shape: tuple[int, ...], itemsize: int, per_piece: int) -> Iterator[Piece]:
    """An array of ``shape`` as blocks of at most ``per_piece`` elements, each element in one.

    A block spans whole trailing dimensions: ``(1, ..., 1, rows, *shape[k + 1:])``, all
    with the same ``rows`` but the last along axis ``k``, which holds the rows left (the
    device compiles one update per block shape: two at most). A 0-d array is one block
    of shape ``()``; an array without elements, one block of its own shape.
    """
    if not shape:
        yield Piece(0, (), (), True, itemsize)
        return
    if not math.prod(shape):
        yield Piece(0, shape, (0,) * len(shape), True, 0)
        return
    axis = 0
    while math.prod(shape[axis + 1 :]) > per_piece:
        axis += 1
    inner = math.prod(shape[axis + 1 :])
    rows = max(1, min(shape[axis], per_piece // inner))
    strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
    outers = list(itertools.product(*(range(n) for n in shape[:axis])))
    for number, outer in enumerate(outers):
        for start in range(0, shape[axis], rows):
            own = min(rows, shape[axis] - start)
            corner = (*outer, start) + (0,) * (len(shape) - axis - 1)
            yield Piece(
                sum(i * s for i, s in zip(corner, strides, strict=True)),
                (1,) * axis + (own,) + shape[axis + 1 :],
                corner,
                number == len(outers) - 1 and start + own == shape[axis],
                own * inner * itemsize,
            )


def piece_kinds(shape: tuple[int, ...], itemsize: int, per_piece: int) -> list[Piece]:
    """The first piece of each shape ``pieces`` cuts (one, or two where the last is shorter)."""
    kinds: dict[tuple[int, ...], Piece] = {}
    for piece in pieces(shape, itemsize, per_piece):
        kinds.setdefault(piece.shape, piece)
    return list(kinds.values())


def compile_writes(
    shape: tuple[int, ...], dtype: np.dtype[Any], kinds: list[Piece], device: jax.Device
) -> None:
    """Compile what assembling an array of ``shape`` and ``dtype`` on ``device`` from raw
    pieces of ``kinds`` (``piece_kinds``) runs: the unpack of a lone piece, or the zeros
    and each kind's update, and the cast from the carrier's bits."""
    bits = carrier(dtype)
    on_device = jax.sharding.SingleDeviceSharding(device)
    whole = jax.ShapeDtypeStruct(shape, bits, sharding=on_device)
    index_type = jax.dtypes.canonicalize_dtype(np.int64)  # as _starts makes them
    for piece in kinds:
        raw = jax.ShapeDtypeStruct((piece.nbytes,), np.uint8, sharding=on_device)
        if piece.first == 0 and piece.last:
            unpack.lower(raw, piece.shape, bits).compile()
            continue
        _zeros_in(on_device).lower(shape, bits).compile()
        starts = jax.ShapeDtypeStruct((len(shape),), index_type, sharding=on_device)
        _write_bytes_at.lower(whole, raw, piece.shape, starts).compile()
    if bits != dtype:
        from_bits.lower(whole, dtype).compile()


def carrier(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype pieces of ``dtype`` travel in: floats as their bits, others as they are.

    Updating a bfloat16 array on the CPU rounds through float32 and quiets NaN payloads;
    unsigned integers of the same width carry every bit unchanged.
    """
    if dtype.kind in "fV":  # NumPy floats, and ml_dtypes' (bfloat16, float8_*)
        return np.dtype(f"u{dtype.itemsize}")
    return dtype


def carries(dtype: np.dtype[Any]) -> bool:
    """Whether pieces of ``dtype`` can be sent as raw bytes and reassembled on a device.

    Not sub-byte dtypes (int4, float4): JAX packs them on a device, NumPy does not.
    """
    return byte_sized(dtype) and carrier(dtype).kind in "ui"


def zeros_on(device: jax.Device, shape: tuple[int, ...], dtype: np.dtype[Any]) -> jax.Array:
    """Zeros computed on ``device`` and committed to it, with no host value to transfer.

    Committed, so that the pieces written into them compile one update per shape: an
    uncommitted array (``jnp.zeros`` under ``jax.default_device``) and the committed one
    the first write returns are two signatures to ``jax.jit``, two compilations.
    """
    made: jax.Array = _zeros_in(jax.sharding.SingleDeviceSharding(device))(shape, dtype)
    return made


@functools.cache
def _zeros_in(sharding: jax.sharding.Sharding) -> Any:
    """A jitted ``(shape, dtype) -> zeros`` made directly in ``sharding``."""
    return jax.jit(jnp.zeros, static_argnums=(0, 1), out_shardings=sharding)


@functools.partial(jax.jit, donate_argnums=0)
def _write_at(whole: jax.Array, part: jax.Array, starts: jax.Array) -> jax.Array:
    return jax.lax.dynamic_update_slice(whole, part, [starts[i] for i in range(whole.ndim)])


def _wide(whole: jax.Array) -> Any:
    """The context offsets into ``whole`` need: 64-bit where an axis reaches 2**31."""
    wide = max(whole.shape, default=0) >= INT32_LIMIT
    return jax.enable_x64(True) if wide else contextlib.nullcontext()


def _starts(piece: Piece, whole: jax.Array) -> jax.Array:
    """``piece.starts`` on ``whole``'s device, in 64 bits where x64 is on (see ``_wide``)."""
    index_type = jax.dtypes.canonicalize_dtype(np.int64)  # int32 unless x64 is on
    starts: jax.Array = jax.device_put(np.array(piece.starts, index_type), whole.sharding)
    return starts


def write_piece(whole: jax.Array, part: jax.Array, piece: Piece) -> jax.Array:
    """``whole`` with ``part`` (of ``piece.shape``) written at ``piece.starts``, in place.

    ``whole`` is donated. Axes of 2**31 elements or more take 64-bit offsets.
    """
    with _wide(whole):
        return _write_at(whole, part, _starts(piece, whole))  # type: ignore[no-any-return]


@functools.partial(jax.jit, static_argnums=(1, 2))
def unpack(raw: jax.Array, shape: tuple[int, ...], dtype: np.dtype[Any]) -> jax.Array:
    """The first bytes of the uint8 ``raw`` as an array of ``shape`` and integer ``dtype``."""
    itemsize = np.dtype(dtype).itemsize
    data = raw[: math.prod(shape) * itemsize]
    if itemsize > 1:
        data = data.reshape(-1, itemsize)
    return jax.lax.bitcast_convert_type(data, dtype).reshape(shape)


@functools.partial(jax.jit, static_argnums=2, donate_argnums=0)
def _write_bytes_at(
    whole: jax.Array, raw: jax.Array, shape: tuple[int, ...], starts: jax.Array
) -> jax.Array:
    part = unpack(raw, shape, whole.dtype)
    return jax.lax.dynamic_update_slice(whole, part, [starts[i] for i in range(whole.ndim)])


def write_bytes(whole: jax.Array, raw: jax.Array, piece: Piece) -> jax.Array:
    """``write_piece`` of a piece that arrived as raw bytes (a uint8 buffer at least as big)."""
    with _wide(whole):
        starts = _starts(piece, whole)
        return _write_bytes_at(whole, raw, piece.shape, starts)  # type: ignore[no-any-return]


#: The bits of ``bits`` as an array of ``dtype``, in place (``bits`` is donated).
from_bits = jax.jit(jax.lax.bitcast_convert_type, static_argnums=1, donate_argnums=0)
