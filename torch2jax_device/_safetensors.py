"""The safetensors format: check a file, read its tensors into aligned host memory, write one.

A file is an 8-byte little-endian header length ``N``, ``N`` bytes of JSON, then the data
buffer. The JSON maps each tensor name to ``{"dtype", "shape", "data_offsets": [begin,
end]}`` (offsets into the buffer) plus an optional ``"__metadata__"`` of strings; tensors
are C-ordered, little-endian and tile the buffer without gaps or overlaps. The checks here
are safetensors' own (same header limit, same tiling rule), so a file this module accepts
loads with ``safetensors`` and the other way round (packed F4/F6 tensors aside), and every
failure is a :class:`CheckpointError` naming the file and what is wrong with it.

Nothing here knows JAX. Reads go straight from the file into 64-byte-aligned NumPy
buffers, the alignment JAX's CPU backend needs to use host memory in place, and nothing
larger than the tensors asked for is ever allocated, whatever the header claims.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from ._errors import CheckpointError, InvalidIndexError

__all__ = [
    "ALIGNMENT",
    "DTYPES",
    "CheckpointError",
    "InvalidIndexError",
    "Reader",
    "TensorInfo",
    "TensorSource",
    "aligned_empty",
    "code_of",
    "write_file",
]

#: JAX's CPU backend aliases host memory only at this alignment (see ``_interop``).
ALIGNMENT = 64
#: safetensors refuses headers above 100 MB; so does this module, before reading them.
MAX_HEADER_BYTES = 100_000_000
#: Reads are issued in chunks of this size (progress updates, narrowing scratch space).
CHUNK_BYTES = 64 * 2**20
#: A sparse selection is read row by row once rows are at least this far apart.
_ROW_READ_BYTES = 64 * 2**10

#: Every safetensors dtype NumPy can hold (with ml_dtypes), in safetensors' own order,
#: which its writer sorts by (descending) and this module's writer too.
DTYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype(np.uint8),
    "I8": np.dtype(np.int8),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E8M0": np.dtype(ml_dtypes.float8_e8m0fnu),
    "F8_E4M3FNUZ": np.dtype(ml_dtypes.float8_e4m3fnuz),
    "F8_E5M2FNUZ": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "I16": np.dtype(np.int16),
    "U16": np.dtype(np.uint16),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "I32": np.dtype(np.int32),
    "U32": np.dtype(np.uint32),
    "F32": np.dtype(np.float32),
    "C64": np.dtype(np.complex64),
    "F64": np.dtype(np.float64),
    "I64": np.dtype(np.int64),
    "U64": np.dtype(np.uint64),
}
_CODES = {dtype: code for code, dtype in DTYPES.items()}
_WRITE_RANK = {code: rank for rank, code in enumerate(DTYPES)}
# Several values per byte, packed in a layout no framework agrees on yet.
_PACKED = ("F4", "F6_E2M3", "F6_E3M2")


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor's bytes are in the file, and how to read them."""

    name: str
    code: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    start: int  # absolute file offset
    nbytes: int


@dataclass(frozen=True)
class TensorSource:
    """A tensor to write: its dtype and shape now, its bytes when ``fetch()`` is called."""

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    fetch: Callable[[], np.ndarray[Any, Any]]


def aligned_empty(nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """An uninitialized byte buffer whose first byte is ``ALIGNMENT``-aligned."""
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start : start + nbytes]


def _invalid(path: str, problem: str) -> CheckpointError:
    return CheckpointError(f"{path!r} is not a valid safetensors file: {problem}")


class Reader:
    """An open safetensors file with a checked header; reads tensors into host memory.

    Reads are thread-safe. Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._file = open(self.path, "rb", buffering=0)  # closed by close()
        self._lock = threading.Lock()
        try:
            self.tensors, self.metadata = self._read_header()
        except BaseException:
            self._file.close()
            raise

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file; later reads raise :class:`CheckpointError`."""
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

    def _read_header(self) -> tuple[dict[str, TensorInfo], dict[str, str] | None]:
        path = self.path
        size = os.fstat(self._file.fileno()).st_size
        if size < 8:
            raise _invalid(path, f"it is {size} bytes long, shorter than the 8-byte length field")
        self._file.seek(0)
        length = int.from_bytes(self._file.read(8), "little")
        if length > MAX_HEADER_BYTES:
            raise _invalid(
                path, f"the header length field says {length} bytes, above safetensors' limit"
            )
        if 8 + length > size:
            raise _invalid(
                path,
                f"the header length field says {length} bytes but only {size - 8} follow: the "
                "file is truncated or not a safetensors file",
            )
        raw = self._file.read(length)
        try:
            header = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
        except UnicodeDecodeError as err:
            raise _invalid(path, f"the header is not UTF-8 text ({err})") from None
        except _DuplicateKeyError as err:
            raise _invalid(path, f"the header names {err.args[0]!r} twice") from None
        except (ValueError, RecursionError) as err:
            raise _invalid(path, f"the header is not valid JSON ({err})") from None
        if not isinstance(header, dict):
            raise _invalid(path, f"the header is a JSON {type(header).__name__}, not an object")
        metadata = header.pop("__metadata__", None)
        if metadata is not None and not (
            isinstance(metadata, dict)
            and all(isinstance(value, str) for value in metadata.values())
        ):
            raise _invalid(path, "'__metadata__' must map strings to strings")
        data_start = 8 + length
        tensors = [_tensor_info(path, name, entry, data_start) for name, entry in header.items()]
        expected = data_start
        previous = "the header"
        for info in sorted(tensors, key=lambda info: (info.start, info.nbytes)):
            if info.start != expected:
                where = "overlaps" if info.start < expected else "leaves a gap after"
                raise _invalid(
                    path,
                    f"tensor {info.name!r} starts at data offset {info.start - data_start}, "
                    f"which {where} {previous} (ends at {expected - data_start})",
                )
            expected += info.nbytes
            previous = f"tensor {info.name!r}"
        if expected != size:
            raise _invalid(
                path,
                f"the tensors cover {expected - data_start} data bytes but the file holds "
                f"{size - data_start}: it is "
                + ("truncated" if expected > size else "followed by bytes no tensor owns"),
            )
        return {info.name: info for info in tensors}, metadata


class _DuplicateKeyError(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKeyError(key)
            seen.add(key)
    return result


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _tensor_info(path: str, name: str, entry: Any, data_start: int) -> TensorInfo:
    if not isinstance(entry, dict):
        raise _invalid(path, f"the entry of tensor {name!r} is not a JSON object")
    code, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if code in _PACKED:
        raise CheckpointError(
            f"{path!r}: tensor {name!r} has dtype {code}, which packs several values per "
            "byte; torch2jax_device does not read packed sub-byte dtypes yet"
        )
    if code not in DTYPES:
        raise _invalid(
            path, f"tensor {name!r} has unknown dtype {code!r} (known: {', '.join(DTYPES)})"
        )
    if not (isinstance(shape, list) and all(_is_count(n) for n in shape)):
        raise _invalid(path, f"the shape of {name!r} is {shape!r}, not a list of sizes")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_count, offsets))):
        raise _invalid(path, f"the data_offsets of {name!r} are {offsets!r}, not [begin, end]")
    begin, end = offsets
    dtype = DTYPES[code]
    needed = math.prod(shape) * dtype.itemsize
    if end - begin != needed:
        raise _invalid(
            path,
            f"tensor {name!r} has data_offsets [{begin}, {end}] ({end - begin} bytes) but "
            f"dtype {code} and shape {shape} need {needed} bytes",
        )
    return TensorInfo(name, code, dtype, tuple(shape), data_start + begin, needed)


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


def code_of(dtype: np.dtype[Any]) -> str | None:
    """The safetensors dtype code of a NumPy dtype, or ``None`` if it has none."""
    return _CODES.get(dtype)


def write_file(
    path: str | os.PathLike[str],
    tensors: Mapping[str, TensorSource],
    metadata: Mapping[str, str] | None,
) -> None:
    """Write a safetensors file atomically: a temporary file in the same directory, renamed.

    Tensors are laid out as safetensors lays them out (dtype rank, then name), so the
    bytes are those ``safetensors.torch.save_file`` writes. Each tensor is fetched just
    before its bytes are written, so host memory holds one tensor at a time. The file
    is flushed to disk before the rename: the final name shows the old file or the
    complete new one, never a partial write, even across a crash.
    """
    order = sorted(tensors, key=lambda name: (-_WRITE_RANK[_CODES[tensors[name].dtype]], name))
    entries: dict[str, Any] = {} if metadata is None else {"__metadata__": dict(metadata)}
    offset = 0
    for name in order:
        source = tensors[name]
        nbytes = math.prod(source.shape) * source.dtype.itemsize
        entries[name] = {
            "dtype": _CODES[source.dtype],
            "shape": list(source.shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    header = json.dumps(entries, separators=(",", ":"), ensure_ascii=False).encode()
    header += b" " * (-len(header) % 8)
    final = os.fspath(path)
    directory, base = os.path.split(os.path.abspath(final))
    temporary = os.path.join(directory, f".{base}.{secrets.token_hex(6)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with open(descriptor, "wb") as file:
            file.write(len(header).to_bytes(8, "little"))
            file.write(header)
            for name in order:
                array = tensors[name].fetch()
                file.write(array.reshape(-1).view(np.uint8).data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, final)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    _sync_directory(directory)


def _sync_directory(directory: str) -> None:
    """Make the rename itself durable (POSIX); a no-op where directories cannot be opened."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
