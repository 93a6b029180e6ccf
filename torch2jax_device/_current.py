"""The current device index of each platform (what ``torch.cuda.set_device`` sets).

Like CUDA's current device, it is per thread: a new thread starts at index 0. An
unindexed device (``tj.device("cuda")``) resolves to its platform's current index.
"""

from __future__ import annotations

import threading

__all__ = ["current_index", "set_current_index"]

_local = threading.local()


def _indices() -> dict[str, int]:
    indices: dict[str, int] | None = getattr(_local, "indices", None)
    if indices is None:
        indices = _local.indices = {}
    return indices


def current_index(platform: str, default: int = 0) -> int:
    """This thread's current index for ``platform`` (``default`` unless set)."""
    return _indices().get(platform, default)


def set_current_index(platform: str, index: int) -> int:
    """Set this thread's current index for ``platform``; return the previous one."""
    indices = _indices()
    previous = indices.get(platform, 0)
    indices[platform] = index
    return previous
