"""Write a safetensors file atomically, byte for byte as ``safetensors.torch`` does."""

from __future__ import annotations

import json
import math
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .format import code_of, write_rank

__all__ = ["TensorSource", "write_file"]


@dataclass(frozen=True)
class TensorSource:
    """A tensor to write: its dtype and shape now, its bytes when ``fetch()`` is called."""

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    fetch: Callable[[], np.ndarray[Any, Any]]


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
    order = sorted(tensors, key=lambda name: (-write_rank(_code(tensors[name])), name))
    entries: dict[str, Any] = {} if metadata is None else {"__metadata__": dict(metadata)}
    offset = 0
    for name in order:
        source = tensors[name]
        nbytes = math.prod(source.shape) * source.dtype.itemsize
        entries[name] = {
            "dtype": _code(source),
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


def _code(source: TensorSource) -> str:
    code = code_of(source.dtype)
    assert code is not None  # sources are checked when they are made
    return code
