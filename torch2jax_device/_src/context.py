"""Per-thread device state: each platform's current index and the default-device stack.

Both are per thread, as in torch (CUDA's current device, ``torch.set_default_device``):
a new thread starts with no current index and JAX's process default.

* The current index is what ``tj.cuda.set_device`` sets and an unindexed device
  (``tj.device("cuda")``) resolves to. Unset (``None``) means the platform's lowest
  local index, a rule the resolver (``.device``) applies: a process that owns only
  GPU 3 starts, and stays, on GPU 3.
* The default device is what ``with tj.device(d):`` and ``tj.set_default_device``
  change, applied through JAX's own thread-local ``jax.default_device`` so that every
  JAX array created without a placement lands there.

This module holds ``jax.Device`` objects and ints (and, opaque to it, the spec each
default was named by) and imports nothing else of the package: the device model builds
on it, never the other way round.
"""

from __future__ import annotations

import threading
from typing import Any

import jax

__all__ = [
    "current_index",
    "default_name",
    "default_target",
    "pop_default",
    "push_default",
    "set_base_default",
    "set_current_index",
]


class _Frame:
    """One default device in effect, with the JAX context that applies it."""

    __slots__ = ("jax_context", "named", "target")

    def __init__(self, target: jax.Device, named: object) -> None:
        self.target = target
        self.named = named  # the spec as the caller wrote it (get_default_device reads it)
        self.jax_context: Any = jax.default_device(target)
        self.jax_context.__enter__()

    def close(self) -> None:
        self.jax_context.__exit__(None, None, None)


_NOTHING_PENDING: Any = object()


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.indices: dict[str, int] = {}
        self.base: _Frame | None = None
        self.stack: list[_Frame] = []
        # What set_base_default asked for while a context was open (a device and its
        # spec, or None for "unset"): applied when the last context exits.
        self.pending: tuple[jax.Device | None, object] = _NOTHING_PENDING


_state = _ThreadState()


def current_index(platform: str) -> int | None:
    """This thread's current index for ``platform``; ``None`` when never set."""
    return _state.indices.get(platform)


def set_current_index(platform: str, index: int | None) -> int | None:
    """Set (or with ``None``, unset) this thread's current index; return the previous one.

    Restoring the returned value undoes the change exactly, unset included.
    """
    previous = _state.indices.get(platform)
    if index is None:
        _state.indices.pop(platform, None)
    else:
        _state.indices[platform] = index
    return previous


def push_default(target: jax.Device, named: object = None) -> None:
    """Make ``target`` (named ``named``) the default until ``pop_default`` (``with
    tj.device(...)``)."""
    _state.stack.append(_Frame(target, named))


def pop_default() -> None:
    """Undo the latest ``push_default`` in this thread."""
    _state.stack.pop().close()
    if not _state.stack and _state.pending is not _NOTHING_PENDING:
        pending, _state.pending = _state.pending, _NOTHING_PENDING
        _replace_base(*pending)


def set_base_default(target: jax.Device | None, named: object = None) -> None:
    """The default outside any ``with`` block (``None``: JAX's own), named ``named``.

    Inside a block it takes effect when the last block exits, as in torch.
    """
    if _state.stack:
        _state.pending = (target, named)
    else:
        _replace_base(target, named)


def default_target() -> jax.Device | None:
    """The default device this thread set, or ``None`` for JAX's own default."""
    frame = _state.stack[-1] if _state.stack else _state.base
    return None if frame is None else frame.target


def default_name() -> object:
    """The spec the default in effect was named by (``None`` when none is set)."""
    frame = _state.stack[-1] if _state.stack else _state.base
    return None if frame is None else frame.named


def _replace_base(target: jax.Device | None, named: object) -> None:
    if _state.base is not None:
        _state.base.close()
    _state.base = None if target is None else _Frame(target, named)
