"""The safetensors format: dtypes, and the checks every header must pass before a read.

A file is an 8-byte little-endian header length ``N``, ``N`` bytes of JSON, then the data
buffer. The JSON maps each tensor name to ``{"dtype", "shape", "data_offsets": [begin,
end]}`` (offsets into the buffer) plus an optional ``"__metadata__"`` of strings; tensors
are C-ordered, little-endian and tile the buffer without gaps or overlaps. The checks here
are safetensors' own (same header limit, same tiling rule), so a file this module accepts
loads with ``safetensors`` and the other way round (packed F4/F6 tensors aside, and files
of more tiny tensors than ``tensor_limit`` allows), and every failure is a
``CheckpointError`` naming the file and what is wrong with it.

Nothing here knows JAX.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any, BinaryIO, NamedTuple

import ml_dtypes
import numpy as np

from ..errors import CheckpointError
from .messages import shown

__all__ = [
    "DTYPES",
    "MAX_HEADER_BYTES",
    "MAX_METADATA_BYTES",
    "MAX_METADATA_ENTRIES",
    "MAX_RANK",
    "TensorBudget",
    "TensorInfo",
    "code_of",
    "read_header",
    "tensor_limit",
    "write_rank",
]

#: safetensors refuses headers above 100 MB; so does this module, before reading them.
MAX_HEADER_BYTES = 100_000_000
#: The most ``__metadata__`` entries a header may hold, and the most bytes of text (keys
#: and values together) they may take: each entry costs about 15 times its text in
#: Python objects, and real files hold a handful (``{"format": "pt"}``).
MAX_METADATA_ENTRIES = 65_536
MAX_METADATA_BYTES = 16 * 2**20
#: JSON values (strings and numbers, keys included) a tensor's entry may hold: its name,
#: three keys, its dtype, a size per dimension and two offsets.
_VALUES_PER_TENSOR = 8 + 64
#: The most dimensions a NumPy array (and so a tensor read here) can have.
MAX_RANK = 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32
#: Without ``max_tensors=``, a file may hold one tensor per this many bytes of its size...
BYTES_PER_TENSOR = 4096
#: ... and at least this many tensors, whatever its size.
MIN_TENSOR_LIMIT = 16_384
# NumPy's (and JAX's) bound on a dimension, and on an array's size in bytes.
_MAX_SIZE = 2**63 - 1

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
# A JSON string (skipped whole, whatever it holds), or the start of an array or object.
_STRING_OR_CONTAINER = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[{]')
# A JSON string, or what separates values (a comma or a colon).
_STRING_OR_SEPARATOR = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[,:]')


class TensorInfo(NamedTuple):
    """Where one tensor's bytes are in the file, and how to read them."""

    name: str
    code: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    start: int  # absolute file offset
    nbytes: int


def tensor_limit(file_size: int) -> int:
    """How many tensors a file of ``file_size`` bytes may hold without ``max_tensors=``.

    Each tensor costs host memory beyond its bytes (its header entry while parsing,
    6 to 10 KiB as a JAX array), so a file of many tiny tensors could claim many times
    its size: 1.4 million one-byte tensors in a 98 MB file would need about 8 GB. One
    tensor per ``BYTES_PER_TENSOR`` of file, and at least ``MIN_TENSOR_LIMIT``, keeps
    that cost within about 1.5 times the file size, or 100 MB for small files.
    """
    return max(MIN_TENSOR_LIMIT, file_size // BYTES_PER_TENSOR)


class TensorBudget:
    """How many tensors one load may still read, across every file it reads.

    ``max_tensors`` caps the tensors of the whole load (an index of shards, a PyTorch
    checkpoint, a sharded load), not of each file; without it the cap is
    ``tensor_limit`` of the ``total_bytes`` of all the load's files together. For the
    message, ``what`` names those files when there are several (``"the 20 files of
    'model.safetensors.index.json'"``) and ``verb`` the call whose ``max_tensors=``
    raises the cap.

    Raises:
        CheckpointError: ``max_tensors`` is not a non-negative int or ``None``.
    """

    def __init__(
        self, max_tensors: int | None, total_bytes: int, *, what: str = "", verb: str = ""
    ) -> None:
        if max_tensors is not None and (type(max_tensors) is not int or max_tensors < 0):
            raise CheckpointError(
                f"max_tensors={shown(max_tensors)}: give the most tensors to read as a "
                "non-negative int, or None for the default limit"
            )
        self.limit = tensor_limit(total_bytes) if max_tensors is None else max_tensors
        self._default = max_tensors is None
        self._total_bytes = total_bytes
        self._what = what
        self._verb = verb
        self._files = 0
        self.used = 0

    @property
    def left(self) -> int:
        """The tensors the load may still read."""
        return self.limit - self.used

    def spend(self, count: int, name: str) -> None:
        """Count the ``count`` tensors of ``name`` (a file, as messages quote it).

        Raises:
            CheckpointError: the load would read more than its cap.
        """
        if count > self.left:
            raise self.refusal(name, f"{count:,}")
        self.used += count
        self._files += 1

    def refusal(self, name: str, count: str, why: str = "") -> CheckpointError:
        """The error for ``name`` holding ``count`` tensors (``why``: how we know)."""
        before = (
            f" after {self.used:,} in the files this load read before it" if self._files else ""
        )
        if self._default:
            source = (
                f"the {self._total_bytes:,} bytes of {self._what}"
                if self._what
                else f"a {self._total_bytes:,}-byte file"
            )
            cap = (
                f"{self.limit:,} is the most read by default from {source} (one tensor per "
                f"{BYTES_PER_TENSOR:,} bytes, at least {MIN_TENSOR_LIMIT:,}), because each "
                "tensor costs kilobytes of host memory and millions of tiny ones could "
                "exhaust RAM"
            )
        else:
            cap = f"max_tensors={self.limit:,} allows no more"
        where = f" to {self._verb}" if self._verb else ""
        return CheckpointError(
            f"{name} holds {count} tensors{before}{why}; {cap}. If you trust the file, pass a "
            f"larger max_tensors={where} to read it"
        )


#: What to do about a file that is not valid safetensors (a problem that names no fix of its own).
_DAMAGED_FIX = (
    "Fix: copy or download the file again (a copy cut short or changed on its way reads like "
    "this: its size and checksum should match the source's), or save it again"
)


def _invalid(path: str, problem: str) -> CheckpointError:
    fix = "" if "Fix:" in problem else f". {_DAMAGED_FIX}"
    return CheckpointError(f"{path!r} is not a valid safetensors file: {problem}{fix}")


def read_header(
    file: BinaryIO, path: str, max_tensors: int | TensorBudget | None = None
) -> tuple[dict[str, TensorInfo], dict[str, str] | None]:
    """The checked header of an open safetensors file: tensors by name, and metadata.

    The tensors are in the file's order: by data offset, as ``safetensors.torch.load_file``
    and ``safe_open(...).offset_keys()`` give them.

    ``max_tensors`` caps the number of tensors (``None``: ``tensor_limit`` of the
    file's size), or is the ``TensorBudget`` of a load of several files, which the
    file's tensors are counted against; parsing stops as soon as the header describes
    more than allowed.

    Raises:
        CheckpointError: the header or the layout it describes is invalid, or it holds
            more tensors than allowed; nothing is allocated for tensors before this
            returns.
    """
    size = os.fstat(file.fileno()).st_size
    budget = (
        max_tensors if isinstance(max_tensors, TensorBudget) else TensorBudget(max_tensors, size)
    )
    if size < 8:
        raise _invalid(path, f"it is {size} bytes long, shorter than the 8-byte length field")
    limit = budget.left
    file.seek(0)
    first = file.read(8)
    length = int.from_bytes(first, "little")
    if first.lstrip()[:1] == b"{" and length > MAX_HEADER_BYTES:  # text: JSON, not a length
        raise _invalid(
            path,
            "it is a JSON text, such as an index of shards (model.safetensors.index.json). "
            "Fix: load an index with tj.load_file(path) or tj.load(path), which read its "
            "shards, or open each shard file on its own",
        )
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
    header = _parse(_text(file.read(length), path), path, limit, budget)
    if not isinstance(header, dict):
        raise _invalid(path, f"the header is a JSON {type(header).__name__}, not an object")
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(value, str) for value in metadata.values())
    ):
        raise _invalid(path, "'__metadata__' must map strings to strings")
    if metadata is not None:
        check_metadata(metadata, lambda problem: _invalid(path, problem))
    budget.spend(len(header), repr(path))
    data_start = 8 + length
    tensors = [_tensor_info(path, name, entry, data_start) for name, entry in header.items()]
    # The file's order, as safetensors gives it: by data offset (empty tensors sharing
    # an offset in the header's order, where safetensors leaves theirs unspecified).
    tensors.sort(key=lambda info: (info.start, info.nbytes))
    expected = data_start
    previous = "the header"
    for info in tensors:
        if info.start != expected:
            where = "overlaps" if info.start < expected else "leaves a gap after"
            raise _invalid(
                path,
                f"tensor {shown(info.name)} starts at data offset {info.start - data_start}, "
                f"which {where} {previous} (ends at {expected - data_start})",
            )
        expected += info.nbytes
        previous = f"tensor {shown(info.name)}"
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


class _TooManyObjectsError(ValueError):
    pass


def _text(raw: bytes, path: str) -> str:
    """The header as text (its bytes are freed once this returns: one copy at a time)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _invalid(path, f"the header is not UTF-8 text ({err})") from None


def _containers_over(text: str, cap: int) -> bool:
    """Whether the JSON ``text`` opens more than ``cap`` arrays and objects.

    Brackets inside strings do not count. Work stops at the first container over the
    cap, so a header of millions of ``[]`` is refused in milliseconds.
    """
    if text.count("[") + text.count("{") <= cap:  # strings can only add to this count
        return False
    count = 0
    for match in _STRING_OR_CONTAINER.finditer(text):
        if match.end() - match.start() == 1:  # a bracket (a string is at least 2 long)
            count += 1
            if count > cap:
                return True
    return False


def _parse(text: str, path: str, limit: int, budget: TensorBudget) -> Any:
    """The header's JSON, parsed; refused before parsing if it opens more arrays and
    objects than ``limit`` tensor entries have, and as soon as it holds more entries.

    Every value costs Python memory, and an empty array or object costs dozens of bytes
    for 2 bytes of text: counting every container first (each tensor has three: its
    entry, its shape and its data_offsets) bounds what the parse can allocate to a small
    multiple of the header's size (numbers and strings cost about what their text does).
    """
    # Each tensor opens three (its entry, shape and data_offsets), the header and its
    # __metadata__ one each. Up to one tensor over the limit passes, so that such a file
    # is refused below with its exact count.
    cap = 3 * (limit + 1) + 2
    if _containers_over(text, cap):
        why = (
            f" (or is not a safetensors file): its header opens more than {cap:,} JSON "
            "arrays and objects, three per tensor"
        )
        raise budget.refusal(repr(path), f"more than {limit:,}", why)
    values = _VALUES_PER_TENSOR * (limit + 1) + 2 * MAX_METADATA_ENTRIES
    if _values_over(text, values):
        why = (
            f" (or is not a safetensors file): its header holds more than {values:,} JSON "
            f"strings and numbers, at most {_VALUES_PER_TENSOR} per tensor and "
            f"{2 * MAX_METADATA_ENTRIES:,} in '__metadata__'"
        )
        raise budget.refusal(repr(path), f"more than {limit:,}", why)
    objects = 0

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal objects
        objects += 1
        if objects > limit + 2:  # the tensors, plus the header itself and __metadata__
            raise _TooManyObjectsError
        result = dict(pairs)
        if len(result) != len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    raise _DuplicateKeyError(key)
                seen.add(key)
        return result

    try:
        return json.loads(text, object_pairs_hook=unique_keys)
    except _DuplicateKeyError as err:
        raise _invalid(path, f"the header names {shown(err.args[0])} twice") from None
    except _TooManyObjectsError:
        raise budget.refusal(repr(path), f"more than {limit:,}") from None
    except (ValueError, RecursionError) as err:
        raise _invalid(path, f"the header is not valid JSON ({err})") from None


def check_metadata(metadata: dict[str, str], error: Any) -> None:
    """Refuse ``__metadata__`` over ``MAX_METADATA_ENTRIES`` or ``MAX_METADATA_BYTES``;
    ``error(problem)`` makes the exception."""
    if len(metadata) > MAX_METADATA_ENTRIES:
        raise error(
            f"'__metadata__' holds {len(metadata):,} entries, more than the "
            f"{MAX_METADATA_ENTRIES:,} allowed (each costs about 15 times its text in memory)"
        )
    size = sum(len(key.encode("utf-8", "surrogatepass")) for key in metadata) + sum(
        len(value.encode("utf-8", "surrogatepass")) for value in metadata.values()
    )
    if size > MAX_METADATA_BYTES:
        raise error(
            f"'__metadata__' holds {size:,} bytes of text, more than the "
            f"{MAX_METADATA_BYTES:,} allowed; keep large data in tensors"
        )


def _values_over(text: str, cap: int) -> bool:
    """Whether the JSON ``text`` holds more than about ``cap`` values (strings and
    numbers): its commas and colons outside strings, each separating one more."""
    if text.count(",") + text.count(":") <= cap:  # strings can only add to this count
        return False
    count = 0
    for match in _STRING_OR_SEPARATOR.finditer(text):
        if match.end() - match.start() == 1:
            count += 1
            if count > cap:
                return True
    return False


def _is_count(value: Any) -> bool:
    return type(value) is int and 0 <= value <= _MAX_SIZE


def _tensor_info(path: str, name: str, entry: Any, data_start: int) -> TensorInfo:
    if not isinstance(entry, dict):
        raise _invalid(path, f"the entry of tensor {shown(name)} is not a JSON object")
    code, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(code, str):
        raise _invalid(path, f"the dtype of tensor {shown(name)} is {shown(code)}, not a string")
    if code in _PACKED:
        raise CheckpointError(
            f"{path!r}: tensor {shown(name)} has dtype {code}, which packs several values per "
            "byte; torch2jax_device does not read packed sub-byte dtypes yet"
        )
    if code not in DTYPES:
        raise _invalid(
            path,
            f"tensor {shown(name)} has unknown dtype {shown(code)} (known: {', '.join(DTYPES)})",
        )
    if not (isinstance(shape, list) and all(_is_count(n) for n in shape)):
        raise _invalid(path, f"the shape of {shown(name)} is {shown(shape)}, not a list of sizes")
    if len(shape) > MAX_RANK:
        raise _invalid(
            path,
            f"tensor {shown(name)} has {len(shape)} dimensions, more than the {MAX_RANK} "
            "an array can have",
        )
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_count, offsets))):
        raise _invalid(
            path, f"the data_offsets of {shown(name)} are {shown(offsets)}, not [begin, end]"
        )
    dtype = DTYPES[code]
    begin, end = offsets
    needed = math.prod(shape) * dtype.itemsize
    if end - begin != needed:
        raise _invalid(
            path,
            f"tensor {shown(name)} has data_offsets [{begin}, {end}] ({end - begin} bytes) but "
            f"dtype {code} and shape {shown(shape)} need {shown(needed)} bytes",
        )
    if math.prod(n for n in shape if n) * dtype.itemsize > _MAX_SIZE:  # empty, with huge sides
        raise _invalid(
            path,
            f"tensor {shown(name)} has shape {shown(shape)}, too large for an array even when "
            "empty",
        )
    return TensorInfo(name, code, dtype, tuple(shape), data_start + begin, needed)


def code_of(dtype: np.dtype[Any]) -> str | None:
    """The safetensors dtype code of a NumPy dtype, or ``None`` if it has none."""
    return _CODES.get(dtype)


def write_rank(code: str) -> int:
    """Where a dtype sorts in safetensors' writer order (it writes higher ranks first)."""
    return _WRITE_RANK[code]
