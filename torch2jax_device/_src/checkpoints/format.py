"""The safetensors format: dtypes, and the checks every header must pass before a read.

A file is an 8-byte little-endian header length ``N``, ``N`` bytes of JSON, then the data
buffer. The JSON maps each tensor name to ``{"dtype", "shape", "data_offsets": [begin,
end]}`` (offsets into the buffer) plus an optional ``"__metadata__"`` of strings; tensors
are C-ordered, little-endian and tile the buffer without gaps or overlaps. The checks here
are safetensors' own (same header limit, same tiling rule), so a file this module accepts
loads with ``safetensors`` and the other way round (packed F4/F6 tensors aside), and every
failure is a ``CheckpointError`` naming the file and what is wrong with it.

Nothing here knows JAX.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any, BinaryIO

import ml_dtypes
import numpy as np

from ..errors import CheckpointError

__all__ = ["DTYPES", "MAX_HEADER_BYTES", "TensorInfo", "code_of", "read_header", "write_rank"]

#: safetensors refuses headers above 100 MB; so does this module, before reading them.
MAX_HEADER_BYTES = 100_000_000

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


def _invalid(path: str, problem: str) -> CheckpointError:
    return CheckpointError(f"{path!r} is not a valid safetensors file: {problem}")


def read_header(file: BinaryIO, path: str) -> tuple[dict[str, TensorInfo], dict[str, str] | None]:
    """The checked header of an open safetensors file: tensors by name, and metadata.

    Raises:
        CheckpointError: the header or the layout it describes is invalid; nothing is
            allocated for tensors before this returns.
    """
    size = os.fstat(file.fileno()).st_size
    if size < 8:
        raise _invalid(path, f"it is {size} bytes long, shorter than the 8-byte length field")
    file.seek(0)
    length = int.from_bytes(file.read(8), "little")
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
    raw = file.read(length)
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
        isinstance(metadata, dict) and all(isinstance(value, str) for value in metadata.values())
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


def code_of(dtype: np.dtype[Any]) -> str | None:
    """The safetensors dtype code of a NumPy dtype, or ``None`` if it has none."""
    return _CODES.get(dtype)


def write_rank(code: str) -> int:
    """Where a dtype sorts in safetensors' writer order (it writes higher ranks first)."""
    return _WRITE_RANK[code]
