"""`torch.backends` look-alikes: `tj.backends.cuda` and `tj.backends.mps`.

`is_built` answers from the installed packages and never starts JAX; `is_available`
asks JAX (starting its backends). `tj.backends.cuda.matmul.allow_tf32` reads and writes
JAX's `jax_default_matmul_precision`.

Examples:
    >>> import torch2jax_device as tj
    >>> built = tj.backends.cuda.is_built()  # never starts JAX
    >>> tj.backends.mps.is_available() in (True, False)
    True
"""

from __future__ import annotations

import importlib.metadata
import sys
import types

import jax

from ._src import platforms as _platforms
from ._src import precision as _precision
from ._src import runtime as _runtime
from ._src.errors import ConfigError, NoSuchAttributeError

__all__ = ["cuda", "mps"]


#: torch >= 2.9's float32 precision names, as torch's matmul precision names
#: (``"none"``: no setting, JAX's default, as torch's ``"none"`` defers to its default).
_FP32_PRECISIONS = {"ieee": "highest", "tf32": "high", "none": None}


def _fp32_precision() -> str:
    if not _precision.matmul_precision_is_set():
        return "none"
    return "ieee" if _precision.matmul_precision() == "highest" else "tf32"


def _set_fp32_precision(where: str, value: object) -> None:
    if not isinstance(value, str) or value not in _FP32_PRECISIONS:  # a list is unhashable
        raise ConfigError(
            f"{where} must be 'ieee' (float32 throughout: torch's default numbers), 'tf32' "
            f"or 'none' (JAX's default: TF32 on GPUs that have it), got {value!r}; JAX's one "
            "setting covers every float32 matmul and convolution"
        )
    precision = _FP32_PRECISIONS[str(value)]
    if precision is None:
        jax.config.update("jax_default_matmul_precision", None)
    else:
        _precision.set_matmul_precision(precision)


def _installed(*distributions: str) -> bool:
    for name in distributions:
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return True
    return False


class _Matmul:
    """Equivalent to `torch.backends.cuda.matmul`: whether float32 matmuls may use TF32.

    Reached as `tj.backends.cuda.matmul`. `allow_tf32` reads and writes JAX's
    `jax_default_matmul_precision`, as torch's writes torch's float32 matmul precision:
    `True` is `"tensorfloat32"` (torch's `"high"`), `False` is `"highest"` (torch's
    default: float32 throughout).

    Note:
        torch's default is `False`; JAX's is to let a GPU of compute capability 8.0 or
        newer use TF32 (a relative error near 1e-4 where float32 gives 1e-6), so this
        reads `True` until set. Set `False` (or `tj.configure(matmul_precision="highest")`)
        for torch's numbers; `with jax.default_matmul_precision("highest"):` does it for a
        block. JAX's one setting also covers convolutions, which torch governs with
        `torch.backends.cudnn.allow_tf32`.

    Examples:
        >>> import jax
        >>> import torch2jax_device as tj
        >>> tj.backends.cuda.matmul.allow_tf32 = False  # torch's default numbers
        >>> jax.config.jax_default_matmul_precision
        'highest'
        >>> tj.backends.cuda.matmul.allow_tf32
        False
        >>> jax.config.update("jax_default_matmul_precision", None)  # JAX's default again
    """

    __slots__ = ()

    @property
    def allow_tf32(self) -> bool:
        """Whether float32 matmuls may use TensorFloat-32 (JAX's precision is not `"highest"`)."""
        return _precision.matmul_precision() != "highest"

    @allow_tf32.setter
    def allow_tf32(self, allowed: bool) -> None:
        if not isinstance(allowed, bool):
            raise ConfigError(
                f"allow_tf32 must be True or False, got {allowed!r} (torch: "
                "set_allow_tf32_cublas expects a bool)"
            )
        _precision.set_matmul_precision("high" if allowed else "highest")

    @property
    def fp32_precision(self) -> str:
        """torch >= 2.9's spelling: ``"ieee"`` (float32 throughout, JAX's ``"highest"``) or
        ``"tf32"``; reads and writes what ``allow_tf32`` does."""
        return _fp32_precision()

    @fp32_precision.setter
    def fp32_precision(self, value: str) -> None:
        _set_fp32_precision("tj.backends.cuda.matmul.fp32_precision", value)

    def __setattr__(self, name: str, value: object) -> None:
        if name not in ("allow_tf32", "fp32_precision"):
            raise NoSuchAttributeError(
                f"tj.backends.cuda.matmul has no setting {name!r}: only allow_tf32 and "
                "fp32_precision have a JAX meaning (jax_default_matmul_precision)"
            )
        object.__setattr__(self, name, value)


class _CudaBackend:
    """Equivalent to `torch.backends.cuda`.

    Reached as `tj.backends.cuda`: `is_built` and `matmul.allow_tf32` have a JAX meaning.

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

    matmul = _Matmul()

    def __getattr__(self, name: str) -> object:
        raise NoSuchAttributeError.unmapped("backends.cuda", name)

    def __setattr__(self, name: str, value: object) -> None:
        raise NoSuchAttributeError.unmapped("backends.cuda", name)


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

    def __getattr__(self, name: str) -> object:
        raise NoSuchAttributeError.unmapped("backends.mps", name)

    def __setattr__(self, name: str, value: object) -> None:
        raise NoSuchAttributeError.unmapped("backends.mps", name)


cuda = _CudaBackend()
mps = _MpsBackend()


def __getattr__(name: str) -> object:
    """``tj.backends.<name>`` for a ``torch.backends`` name this module does not map: the
    library's error, naming the torch name and the fix, instead of Python's."""
    raise NoSuchAttributeError.unmapped("backends", name)


class _Backends(types.ModuleType):
    """The module itself: ``tj.backends.fp32_precision`` is torch >= 2.9's global float32
    precision (``"ieee"`` or ``"tf32"``), and a setting it does not have is refused, not
    stored where nothing reads it."""

    @property
    def fp32_precision(self) -> str:
        return _fp32_precision()

    @fp32_precision.setter
    def fp32_precision(self, value: str) -> None:
        _set_fp32_precision("tj.backends.fp32_precision", value)

    def __setattr__(self, name: str, value: object) -> None:
        if name == "fp32_precision" or name.startswith("_") or name in self.__dict__:
            super().__setattr__(name, value)
            return
        raise NoSuchAttributeError.unmapped("backends", name)


sys.modules[__name__].__class__ = _Backends
