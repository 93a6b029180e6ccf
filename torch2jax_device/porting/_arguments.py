"""The porting tools' entry points check what they are given, once, at the boundary.

``scan_source``, ``scan_sources``, ``scan_files``, ``apply_edits``, ``read_python`` and
``SourceFile`` take text, paths, mappings and sequences; anything else is refused with
[`tj.ArgumentTypeError`][torch2jax_device.ArgumentTypeError], naming the call, the
argument, the value and what to pass, before it reaches the parser or the file system
(where it would be Python's ``AttributeError`` or ``TypeError``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from .._src.errors import ArgumentTypeError

__all__ = ["iterable", "mapping", "path", "refused", "size", "text"]


def refused(where: str, name: str, value: object, wanted: str) -> ArgumentTypeError:
    """The error for ``where``'s ``name`` given ``value``, which is not ``wanted``."""
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return ArgumentTypeError(
        f"{where}: {name}={shown} ({type(value).__name__}) is not {wanted}. Fix: pass {wanted}"
    )


def text(where: str, name: str, value: Any) -> str:
    """``value`` if it is a ``str`` (Python source, or a path as the scanner names it)."""
    if not isinstance(value, str):
        raise refused(where, name, value, "a str")
    return value


def path(where: str, name: str, value: Any) -> str | os.PathLike[str]:
    """``value`` if it is a path: a ``str`` or an ``os.PathLike`` of one."""
    if isinstance(value, str) or (
        isinstance(value, os.PathLike) and isinstance(os.fspath(value), str)
    ):
        return value
    raise refused(where, name, value, "a path (a str or a pathlib.Path)")


def size(where: str, name: str, value: Any) -> int:
    """``value`` if it is a whole number of bytes, zero or more (``bool`` is not one)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise refused(where, name, value, "a number of bytes (an int, 0 or more)")


def mapping(where: str, name: str, value: Any, wanted: str) -> Mapping[Any, Any]:
    """``value`` if it is a mapping (``wanted`` says of what)."""
    if isinstance(value, Mapping):
        return value
    raise refused(where, name, value, wanted)


def iterable(where: str, name: str, value: Any, wanted: str) -> list[Any]:
    """The items of ``value`` if it can be iterated and is not text (``wanted`` says of
    what): a closed file, or anything whose iteration fails, is refused."""
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        try:
            return list(value)
        except Exception:  # a closed file's ValueError, a generator's own error ...
            pass
    raise refused(where, name, value, wanted)
