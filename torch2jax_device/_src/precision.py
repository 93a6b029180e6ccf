"""float32 matmul precision: torch's names for JAX's ``jax_default_matmul_precision``.

torch computes float32 matmuls in float32 by default (`torch.backends.cuda.matmul.allow_tf32
= False`, `torch.get_float32_matmul_precision() == "highest"`). JAX's default lets a GPU of
compute capability 8.0 or newer (Ampere, Hopper, ...) use TensorFloat-32 for float32 matmuls
and convolutions: on an H200, `a @ a` for a 1024 x 1024 float32 `a` has a relative error of
2.8e-4 against float64 under JAX's default, 1.2e-6 under torch's, 4.6e-7 under JAX's
`"highest"` (measured 2026-11-26, jax 0.11.2, torch 2.11).

torch's three levels and JAX's setting, both ways:

==============  ======================================  ==================================
torch           meaning (torch)                         ``jax_default_matmul_precision``
==============  ======================================  ==================================
``"highest"``   float32 throughout (torch's default)    ``"highest"`` (= ``"float32"``)
``"high"``      TF32 allowed (``allow_tf32 = True``)    ``"tensorfloat32"`` (= ``"high"``)
``"medium"``    bfloat16 allowed                        ``"bfloat16"`` (= ``"default"``)
==============  ======================================  ==================================

JAX's unset default (``None``) is its fastest precision, read back as ``"medium"``. One JAX
setting covers matmuls and convolutions, where torch has a second switch for cuDNN
convolutions (`torch.backends.cudnn.allow_tf32`, `True` by default).
"""

from __future__ import annotations

import jax
from jax._src import config as jax_config

from .errors import ConfigError

__all__ = ["TORCH_PRECISIONS", "jax_precision", "matmul_precision", "set_matmul_precision"]

#: torch's names, with the value of ``jax_default_matmul_precision`` each is written as.
TORCH_PRECISIONS: dict[str, str] = {
    "highest": "highest",
    "high": "tensorfloat32",
    "medium": "bfloat16",
}
# jax_default_matmul_precision -> torch's name; None (unset) is JAX's fastest.
_FROM_JAX: dict[str | None, str] = {
    None: "medium",
    "default": "medium",
    "bfloat16": "medium",
    "high": "high",
    "tensorfloat32": "high",
    "bfloat16_3x": "high",
    "highest": "highest",
    "float32": "highest",
    "tf32_tf32_f32": "high",
    "tf32_tf32_f32_x3": "high",
    "f32_f32_f32": "highest",
    "f64_f64_f64": "highest",
}


def jax_precision(precision: object, setting: str = "matmul_precision") -> str:
    """The ``jax_default_matmul_precision`` value of torch's ``precision`` name.

    Raises:
        ConfigError: not one of torch's names (torch warns and ignores it; a port that
            silently kept JAX's default would compute differently).
    """
    if not isinstance(precision, str) or precision not in TORCH_PRECISIONS:
        raise ConfigError(
            f"{setting} must be one of 'highest', 'high' or 'medium' (torch's names), got "
            f"{precision!r}: 'highest' gives torch's default float32 matmuls"
        )
    return TORCH_PRECISIONS[precision]


def set_matmul_precision(precision: str) -> None:
    """Write torch's ``precision`` name into JAX's ``jax_default_matmul_precision``."""
    jax.config.update("jax_default_matmul_precision", jax_precision(precision))


def matmul_precision_is_set() -> bool:
    """Whether JAX's float32 matmul precision was set (this thread's, contexts included),
    or is JAX's default (which lets GPUs with TensorFloat-32 use it)."""
    return jax_config.default_matmul_precision.value is not None


def matmul_precision() -> str:
    """torch's name for the float32 matmul precision JAX uses now (this thread's).

    Examples:
        >>> import jax
        >>> from torch2jax_device._src.precision import matmul_precision
        >>> with jax.default_matmul_precision("highest"):
        ...     matmul_precision()
        'highest'
    """
    value = jax_config.default_matmul_precision.value  # this thread's, contexts included
    return _FROM_JAX.get(None if value is None else str(value).lower(), "medium")
