"""``Tensor.to(dtype)``'s values, whatever holds the data: NumPy, JAX or torch.

Two rules, each owned here:

**Cast first, narrow after.** JAX without ``jax_enable_x64`` holds no 64-bit data, and
narrows it on every entry (int64 becomes int32 by wrapping). A cast asked for is made
on the data as it is, before that narrowing, so ``int64 2**40 -> float32`` is
``1.0995e12`` as in torch, not the ``0.0`` that wrapping through int32 gives: NumPy data
is cast on the host (`cast_host`), torch tensors in torch (`cast_tensor`).

**torch's values where ml_dtypes and XLA differ** (`cast_host`, `cast_array`):

- ``float8_e4m3fn`` saturates: magnitudes above 448, infinities included, become ±448
  (ml_dtypes and XLA give NaN); NaN stays NaN.
- ``float8_e8m0fnu`` keeps the power of two of ``|x|`` (torch rounds the float32 bits'
  exponent, ties to even): ``0`` becomes ``2**-127`` and ``-4`` becomes ``4`` (ml_dtypes
  and XLA give NaN for both).
- A floating-point value becomes ``True`` when it is not zero, subnormals included
  (XLA's CPU flushes subnormals to zero first, giving ``False``); a complex one when
  either part is not zero.
- ``float8_e4m3fnuz`` and ``float8_e5m2fnuz`` have no -0: what rounds to zero is +0
  (XLA's CPU can give NaN for a negative subnormal).
- Complex to real keeps the real part and warns, once per call, as torch warns
  (`ComplexCastWarning`).

One difference stays, because torch has no rule for it: a float outside an integer
dtype's range (or NaN, or an infinity) cast to that dtype is undefined behaviour in
torch's C++ cast; torch's CPU wraps, XLA saturates, and either may change.
"""

from __future__ import annotations

import functools
import sys
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from . import dtypes
from .errors import DTypeError

__all__ = ["ComplexCastWarning", "cast_array", "cast_host", "cast_tensor"]


class ComplexCastWarning(UserWarning):
    """Complex data was cast to a real dtype: the imaginary part is gone.

    torch warns the same (``UserWarning: Casting complex values to real discards the
    imaginary part``).

    Examples:
        >>> import warnings
        >>> import numpy as np
        >>> import torch2jax_device as tj
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     real = tj.to_device(np.array([1 + 2j]), "cpu", np.float32)
        >>> real.tolist(), caught[0].category.__name__
        ([1.0], 'ComplexCastWarning')
    """


_E4M3FN = np.dtype(ml_dtypes.float8_e4m3fn)
#: float8 kinds without -0 (its bits are their NaN); torch rounds tiny negatives to +0.
_NO_NEGATIVE_ZERO = frozenset(
    np.dtype(kind) for kind in (ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz)
)
_E8M0FNU = np.dtype(ml_dtypes.float8_e8m0fnu)
#: float8_e4m3fn's largest finite magnitude, where torch saturates.
_E4M3FN_MAX = 448.0


def cast_host(host: np.ndarray[Any, Any], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """``host`` (native byte order, a dtype JAX holds) as torch casts it to ``dtype``,
    then narrowed to the dtype JAX will hold (`dtypes.narrow_host`).

    ``dtype`` is the one asked for, 64-bit or not: the cast is made before narrowing.
    """
    if host.dtype == dtype:
        return dtypes.narrow_host(host)
    with np.errstate(all="ignore"):  # overflow to inf is the cast's value, as in torch
        cast = _torch_values(host, dtype, np)
    return dtypes.narrow_host(cast)


def cast_array(array: jax.Array, dtype: np.dtype[Any]) -> jax.Array:
    """A JAX array as torch casts it to ``dtype`` (narrowed: JAX holds no 64-bit data
    without x64). Works on tracers too."""
    wanted = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    if array.dtype == wanted:
        return array
    _refuse_what_xla_cannot_cast(array, wanted)
    if wanted != dtype and dtype.kind in "iu" and dtypes.is_inexact(array.dtype):
        return _wrapped_integers(array, wanted)
    result: jax.Array = _torch_values(array, wanted, jnp)
    return result


def _refuse_what_xla_cannot_cast(array: jax.Array, wanted: np.dtype[Any]) -> None:
    """``DTypeError`` where this JAX holds a sub-byte float (float6, float4) that its
    compiler for the array's device cannot cast (jax 0.11.2's CPU compiler fails "Invalid
    bitcast i6 to i8"): asked of the installed JAX once per pair and platform, never read
    from its version. NumPy data is cast on the host and never comes here."""
    if isinstance(array, jax.core.Tracer):
        return
    narrow = [d for d in (np.dtype(array.dtype), wanted) if jax.dtypes.itemsize_bits(d) < 8]
    if not narrow or not jax.numpy.issubdtype(narrow[0], jax.numpy.floating):
        return
    device = next(iter(array.devices()))
    if _xla_casts(np.dtype(array.dtype), wanted, device):
        return
    raise DTypeError(
        f"JAX {jax.__version__} holds {array.dtype} arrays, but its compiler for "
        f"{device.platform} cannot cast them to {wanted}. Fix: cast on the host, "
        f"tj.to_device(np.asarray(x).astype(np.{wanted.name}), device), or keep such data "
        "in NumPy until it is cast"
    )


@functools.cache
def _xla_casts(source: np.dtype[Any], wanted: np.dtype[Any], device: jax.Device) -> bool:
    """Whether XLA casts ``source`` to ``wanted`` on ``device``: one element, tried."""
    try:
        probe = jax.device_put(np.zeros(1, source), device)
        jax.block_until_ready(probe.astype(wanted))
    except Exception:  # whatever the compiler raises means no
        return False
    return True


def _wrapped_integers(array: jax.Array, wanted: np.dtype[Any]) -> jax.Array:
    """Floats cast to int64 (uint64) as torch casts them, then narrowed to 32 bits as
    JAX narrows int64 data: the low 32 bits, so ``2.0**32 + 5`` becomes ``5``.

    JAX has no 64-bit integers to cast to without x64 (casting straight to int32 would
    saturate); the remainder modulo ``2**32`` of a float32 integer is exact.
    """
    real = jnp.real(array) if jnp.iscomplexobj(array) else array
    if jnp.iscomplexobj(array):
        _warn_complex(array.dtype, wanted)
    whole = jnp.trunc(real.astype(np.float32))
    low = jnp.fmod(whole, 2.0**32)  # in (-2**32, 2**32), exactly
    if wanted.kind == "i":  # into [-2**31, 2**31): exact, as the magnitude shrinks
        low = jnp.where(low >= 2.0**31, low - 2.0**32, low)
        low = jnp.where(low < -(2.0**31), low + 2.0**32, low)
    else:  # a negative float cast to an unsigned dtype is undefined in torch
        low = jnp.where(low < 0, low + 2.0**32, low)
    result: jax.Array = low.astype(wanted)
    return result


def cast_tensor(tensor: Any, dtype: np.dtype[Any]) -> Any:
    """A torch tensor cast by torch itself to ``dtype``, where torch has that dtype.

    torch's own cast is torch's values by definition, and it runs where the tensor is
    (a GPU tensor is cast on its GPU). Where torch has no such dtype (ml_dtypes' float8
    and 4-bit kinds) a 64-bit integer tensor becomes float32 in torch first, so the
    narrowing JAX does cannot wrap it through int32; `cast_array` then finishes the cast.
    Tensors torch cannot cast as plain data (meta, quantized, sparse, nested) come back
    as they are, for the conversion to refuse with its own message.
    """
    torch = sys.modules["torch"]
    target = getattr(torch, dtype.name, None)
    if tensor.dtype == target or not _plain(torch, tensor):
        return tensor
    tensor = tensor.detach()
    real_part = tensor.is_complex() and dtype.kind not in "cb"  # torch's bool takes both parts
    if real_part:
        _warn_complex(tensor.dtype, dtype)
        tensor = tensor.real  # a view: copied below, as torch's cast copies
    if isinstance(target, torch.dtype) and computes(torch, target):
        return tensor.to(target, copy=real_part)
    wide_integer = not tensor.is_floating_point() and tensor.element_size() == 8
    if wide_integer and dtypes.is_inexact(dtype):
        return tensor.to(torch.float32)
    return tensor.clone() if real_part else tensor


def _plain(torch: Any, tensor: Any) -> bool:
    """A tensor of numbers in memory: not meta, quantized, nested or sparse."""
    return not (
        tensor.is_meta or tensor.is_quantized or tensor.is_nested or tensor.layout != torch.strided
    )


@functools.cache
def computes(torch: Any, dtype: Any) -> bool:
    """Whether torch can make a tensor of ``dtype`` (asked of torch once per dtype).

    torch's sub-byte dtypes (``torch.int4``, ``torch.uint2``) are placeholders without
    operations.
    """
    try:
        torch.zeros(1).to(dtype)
    except (NotImplementedError, RuntimeError, TypeError):
        return False
    return True


def _torch_values(values: Any, dtype: np.dtype[Any], xp: Any) -> Any:
    """``values`` (NumPy with ``xp=np``, JAX with ``xp=jnp``) cast as torch casts them."""
    source = np.dtype(values.dtype)
    if source == _E8M0FNU:  # powers of two, 2**-127 and NaN: exactly float32's
        values, source = _e8m0fnu_as_float32(values, xp), np.dtype(np.float32)
        if dtype == source:
            return values
    if dtype == np.bool_ and dtypes.is_inexact(source):
        if source.kind == "c":  # torch: either part (no warning)
            return _nonzero(xp.real(values), xp) | _nonzero(xp.imag(values), xp)
        return _nonzero(values, xp)
    if source.kind == "c" and dtype.kind != "c":
        _warn_complex(source, dtype)
        values = xp.real(values)
        source = np.dtype(values.dtype)
    if dtype in _NO_NEGATIVE_ZERO and dtypes.is_inexact(source):
        # What rounds to zero is +0 (their -0 bits are NaN); XLA's CPU can give NaN for a
        # negative subnormal, which it flushes to -0 first.
        tiny = float(ml_dtypes.finfo(dtype).smallest_subnormal) / 2
        values = xp.where(xp.abs(values) <= tiny, xp.zeros((), values.dtype), values)
    if dtype == _E4M3FN:
        as_float = values.astype(np.float32)
        return xp.clip(as_float, -_E4M3FN_MAX, _E4M3FN_MAX).astype(dtype)
    if dtype == _E8M0FNU:
        return _e8m0fnu(values.astype(np.float32), xp)
    if xp is np:
        return _numpy_astype(values, dtype)
    if source.itemsize == 1 and dtype.itemsize == 1 and dtypes.is_inexact(dtype):
        # Between 8-bit floats through float32, which holds each exactly: XLA's CPU
        # compiler, unoptimized, drops the sign of what underflows (fnuz -> e5m2 gave +0
        # where torch, and optimized XLA, give -0).
        values = values.astype(np.float32)
    return values.astype(dtype)


def _numpy_astype(host: np.ndarray[Any, Any], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """``host.astype(dtype)``, through float32 where ml_dtypes has no direct cast
    (float8 to float8_e8m0fnu, for example)."""
    try:
        return host.astype(dtype)
    except TypeError:
        return host.astype(np.float32).astype(dtype)


def _nonzero(values: Any, xp: Any) -> Any:
    """Which floating-point values are not zero, read from their bits (XLA's CPU flushes
    subnormals to zero in comparisons; torch does not).

    Zero is the all-zero bits, and -0 too where the format has it (the ``fnuz`` kinds
    use those bits for NaN).
    """
    dtype = np.dtype(values.dtype)
    width = dtype.itemsize * 8
    unsigned = np.dtype(f"uint{width}")
    bits = values.view(unsigned) if xp is np else jax.lax.bitcast_convert_type(values, unsigned)
    if dtype.name.endswith("fnuz"):
        return bits != 0
    magnitude_bits = unsigned.type((1 << (width - 1)) - 1)
    return (bits & magnitude_bits) != 0


def _e8m0fnu_as_float32(values: Any, xp: Any) -> Any:
    """float8_e8m0fnu values as float32, from their bits: ``2**(e - 127)``, the exponent
    ``e`` 0 being float32's subnormal ``2**-127`` (which XLA's CPU flushes to zero when
    it converts) and 255 NaN."""
    exponent = (
        values.view(np.uint8) if xp is np else jax.lax.bitcast_convert_type(values, np.uint8)
    ).astype(np.uint32)
    bits = xp.where(
        exponent == 0,
        np.uint32(0x00400000),
        xp.where(exponent == 0xFF, np.uint32(0x7FC00000), exponent << 23),
    ).astype(np.uint32)
    return bits.view(np.float32) if xp is np else jax.lax.bitcast_convert_type(bits, np.float32)


def _e8m0fnu(single: Any, xp: Any) -> Any:
    """float32 ``single`` as torch makes float8_e8m0fnu of it (``c10::Float8_e8m0fnu``).

    The result's bits are the float32 exponent field, rounded to nearest with ties to
    even on the mantissa (the implicit bit is the least significant one); the sign is
    ignored, NaN and the infinities become NaN (``0xFF``).
    """
    bits = single.view(np.uint32) if xp is np else jax.lax.bitcast_convert_type(single, np.uint32)
    exponent = (bits >> 23) & 0xFF
    guard = (bits & 0x400000) != 0
    rest = (bits & 0x3FFFFF) != 0  # the round and sticky bits
    lowest = exponent > 0  # the implicit mantissa bit: 1 for normal numbers
    round_up = guard & (rest | lowest)
    rounded = xp.where(exponent == 0xFF, exponent, exponent + round_up.astype(np.uint32))
    byte = rounded.astype(np.uint8)
    return byte.view(_E8M0FNU) if xp is np else jax.lax.bitcast_convert_type(byte, _E8M0FNU)


def _warn_complex(source: Any, dtype: np.dtype[Any]) -> None:
    warnings.warn(
        f"Casting complex values to real discards the imaginary part ({source} to "
        f"{dtype}; torch warns the same). Fix: cast x.real (or abs(x)) where that is meant, "
        "or a complex dtype to keep both parts",
        ComplexCastWarning,
        stacklevel=dtypes.caller_stacklevel(),
    )
