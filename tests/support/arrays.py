"""Test values whose every byte pattern is checked: no two neighbours alike, no zeros run."""

from __future__ import annotations

from typing import Any

import numpy as np


def patterned(shape: tuple[int, ...], dtype: Any) -> np.ndarray[Any, Any]:
    """Values of ``shape`` and ``dtype`` that a misplaced piece or byte cannot match.

    One-byte types (``uint8``, ``bool``'s storage, the float8 types) get a
    multiplicative-hash byte sequence viewed as ``dtype``; wider types get small integers
    (exact in every float type, negative ones too) cast to ``dtype``.
    """
    count = int(np.prod(shape))
    if np.dtype(dtype).itemsize == 1:
        raw = (np.arange(count, dtype=np.uint64) * 2654435761 % 251).astype(np.uint8)
        return raw.view(dtype).reshape(shape)
    return (np.arange(count) % 97 - 40).astype(np.float32).astype(dtype).reshape(shape)
