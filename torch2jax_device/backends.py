"""`torch.backends` look-alikes: `tj.backends.cuda` and `tj.backends.mps`.

`is_built` answers from the installed packages and never starts JAX; `is_available`
asks JAX (starting its backends).

Examples:
    >>> import torch2jax_device as tj
    >>> built = tj.backends.cuda.is_built()  # never starts JAX
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
    """Equivalent to `torch.backends.cuda`.

    Reached as `tj.backends.cuda`; only `is_built` has a JAX meaning.

    Examples:
        >>> import torch2jax_device as tj
        >>> tj.backends.cuda.is_built() in (True, False)
        True
    """

    @staticmethod
    def is_built() -> bool:
        """Equivalent to `torch.backends.cuda.is_built`.

        Whether a CUDA plugin for JAX is installed (`jax[cuda12]` / `jax[cuda13]`). Never
        starts JAX.

        Note:
            Like torch's, it says nothing about whether a GPU is present; see
            [`tj.cuda.is_available`][torch2jax_device.cuda.is_available]. torch answers for the
            torch build, this for the JAX install.

        Examples:
            >>> import torch2jax_device as tj
            >>> if tj.backends.cuda.is_built():
            ...     assert tj.cuda.is_available() in (True, False)  # built, GPU or not
        """
        return _installed(*_platforms.by_name("cuda").plugins)


class _MpsBackend:
    """Equivalent to `torch.backends.mps`: Apple GPUs, served in JAX by the jax-metal plugin.

    Reached as `tj.backends.mps`.

    Examples:
        >>> import torch2jax_device as tj
        >>> tj.backends.mps.is_available() in (True, False)
        True
    """

    @staticmethod
    def is_built() -> bool:
        """Equivalent to `torch.backends.mps.is_built`.

        Whether the jax-metal plugin is installed. Never starts JAX.

        Examples:
            >>> import torch2jax_device as tj
            >>> tj.backends.mps.is_built() in (True, False)
            True
        """
        return _installed(*_platforms.by_name("METAL").plugins)

    @staticmethod
    def is_available() -> bool:
        """Equivalent to `torch.backends.mps.is_available`.

        Whether JAX can use an Apple GPU in this process. Never raises.

        Note:
            JAX calls the platform `METAL`; its devices are `mps` devices here, as in torch.

        Examples:
            >>> import torch2jax_device as tj
            >>> device = tj.device("mps" if tj.backends.mps.is_available() else "cpu")
        """
        return bool(_runtime.quiet_local_devices("METAL"))


cuda = _CudaBackend()
mps = _MpsBackend()
