"""``torch.backends`` look-alikes: ``tj.backends.mps`` and ``tj.backends.cuda``.

``is_built`` answers from the installed packages and never starts JAX;
``is_available`` asks JAX (starting its backends).

Examples:
    >>> import torch2jax_device as tj
    >>> tj.backends.mps.is_available() in (True, False)
    True
"""

from __future__ import annotations

import importlib.metadata

from ._src import platforms as _platforms
from ._src import runtime as _runtime

__all__ = ["cuda", "mps"]


def _installed(*distributions: str) -> bool:
    for name in distributions:
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return True
    return False


class _CudaBackend:
    """``torch.backends.cuda``."""

    @staticmethod
    def is_built() -> bool:
        """Whether a CUDA plugin for JAX is installed (``jax[cuda12]`` / ``jax[cuda13]``).

        Like torch's, it says nothing about whether a GPU is present; see
        [`tj.cuda.is_available`][torch2jax_device.cuda.is_available].
        """
        return _installed(*_platforms.by_name("cuda").plugins)


class _MpsBackend:
    """``torch.backends.mps``: Apple GPUs, served in JAX by the jax-metal plugin."""

    @staticmethod
    def is_built() -> bool:
        """Whether the jax-metal plugin is installed."""
        return _installed(*_platforms.by_name("METAL").plugins)

    @staticmethod
    def is_available() -> bool:
        """Whether JAX can use an Apple GPU here. Never raises."""
        return bool(_runtime.quiet_local_devices("METAL"))


cuda = _CudaBackend()
mps = _MpsBackend()
