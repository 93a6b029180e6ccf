"""Values quoted in the checkpoint code's messages, each at a bounded length.

A checkpoint is data from anywhere: a tensor name, a shape or a dict key can be
megabytes long or nested a million lists deep, and an error message quoting it whole
would cost more than the load it refuses. ``shown`` is the one way this package quotes a
value: ``repr`` with the work and the length bounded, whatever the value. ``loading`` and
``slice_load`` are how the capacity errors name the load they refuse.
"""

from __future__ import annotations

import os
import reprlib
from typing import Any

__all__ = ["LIMIT", "clipped", "file_name", "loading", "shown", "slice_load"]

#: The longest quotation, in characters.
LIMIT = 120

_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = 8
_REPR.maxset = _REPR.maxfrozenset = _REPR.maxdeque = _REPR.maxarray = 8
_REPR.maxstring = _REPR.maxother = LIMIT
_REPR.maxlong = 40


def shown(value: Any, limit: int = LIMIT) -> str:
    """``repr(value)`` in at most ``limit`` characters, reading only as much as it shows.

    Examples:
        >>> from torch2jax_device._src.checkpoints.messages import shown
        >>> shown([[[[1]]], 2])
        '[[[[...]]], 2]'
        >>> len(shown("x" * 10**6)) <= 120, len(shown([[]] * 10**6)) <= 120
        (True, True)
    """
    try:
        text = _REPR.repr(value)
    except Exception:  # a huge int past Python's digit limit, a repr that fails
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clipped(text: str, limit: int = 8 * LIMIT) -> str:
    """Another library's message about a file, at most ``limit`` characters.

    Examples:
        >>> from torch2jax_device._src.checkpoints.messages import clipped
        >>> clipped("a" * 2000, 10)
        'aaaaaaa...'
    """
    return text if len(text) <= limit else text[: limit - 3] + "..."


def file_name(path: str | os.PathLike[str]) -> str:
    """A file as the library's messages about a load name it: its base name, quoted."""
    return shown(os.path.basename(os.fspath(path)))


def loading(count: int, path: str | os.PathLike[str] | None, described: str = "") -> str:
    """A load of ``count`` tensors from the file at ``path`` (or ``described``, a file
    object), as an ``OutOfMemoryError`` names it.

    Examples:
        >>> from torch2jax_device._src.checkpoints.messages import loading
        >>> loading(2, "/models/model.safetensors")
        "loading 2 tensor(s) of 'model.safetensors'"
    """
    return f"loading {count} tensor(s) of {described if path is None else file_name(path)}"


def slice_load(shape: tuple[int, ...], name: str, path: str | os.PathLike[str]) -> str:
    """A load of a selection of shape ``shape`` of tensor ``name``, as ``loading``.

    Examples:
        >>> from torch2jax_device._src.checkpoints.messages import slice_load
        >>> slice_load((2, 3), "w", "/models/model.safetensors")
        "a slice of shape [2, 3] of tensor 'w' of 'model.safetensors'"
    """
    return f"a slice of shape {shown(list(shape))} of tensor {shown(name)} of {file_name(path)}"
