"""Dtypes from any framework, and the int64 -> int32 narrowing JAX does without x64.

JAX without ``jax_enable_x64`` turns 64-bit data into 32-bit data on every entry
(``device_put``, ``jnp.asarray``, DLPack), silently and with a copy. PyTorch users'
default integer dtype is int64, so token ids and indices narrow all the time; this
module makes that visible once per dtype, with the fix.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes  # noqa: F401 - registers bfloat16 and the float8 kinds with NumPy
import numpy as np

from .detect import is_torch_dtype
from .errors import ConversionError, DTypeError

__all__ = [
    "ComparableDtype",
    "DtypeNarrowingWarning",
    "array_dtype",
    "caller_stacklevel",
    "cannot_hold",
    "canonical",
    "comparable",
    "holds",
    "is_inexact",
    "is_prng_key",
    "narrow_host",
    "refuse_wrapping",
    "to_numpy_dtype",
    "transfers",
    "untransferable",
]


class DtypeNarrowingWarning(UserWarning):
    """64-bit data became 32-bit because ``jax_enable_x64`` is off.

    Warned once per dtype, at the line that handed the data to JAX, with what changes
    (range for integers; precision and range for floats) and the fix.

    Examples:
        >>> import warnings
        >>> import numpy as np
        >>> import torch2jax_device as tj
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", tj.DtypeNarrowingWarning)  # known and fine
        ...     tokens = tj.to_jax(np.arange(3, dtype=np.int64))
        >>> tokens.dtype
        dtype('int32')
    """


_warned: set[str] = set()


class ComparableDtype:
    """A NumPy dtype that also equals the ``torch.dtype`` of its name: ``tj.Parameter.dtype``.

    Ported code compares a parameter's dtype with torch's (``if p.dtype ==
    torch.float16:``), as ``p.device == torch.device("cpu")`` compares devices; a NumPy
    dtype never equals a ``torch.dtype``, so such a branch would flip silently. It is
    the array's dtype otherwise: it equals NumPy and JAX dtypes and their names, hashes
    as the dtype, has its attributes (``itemsize``, ``kind``, ``name``), and NumPy and
    JAX take it wherever they take a dtype (``jnp.zeros(3, p.dtype)``, ``x.astype(p.dtype)``).
    ``.dtype`` is the plain ``np.dtype``. torch is never imported.

    Examples:
        >>> import jax.numpy as jnp, numpy as np, torch
        >>> from torch2jax_device._src.dtypes import ComparableDtype
        >>> dtype = ComparableDtype(jnp.float32)
        >>> dtype == torch.float32, torch.float16 == dtype, dtype == jnp.float32, dtype == "float32"
        (True, False, True, True)
        >>> jnp.zeros(2, dtype).dtype, dtype.itemsize
        (dtype('float32'), 4)
    """

    __slots__ = ("_dtype",)
    _dtype: np.dtype[Any]

    def __init__(self, dtype: Any) -> None:
        object.__setattr__(self, "_dtype", np.dtype(dtype))

    @property
    def dtype(self) -> np.dtype[Any]:
        """The NumPy dtype itself (what ``np.dtype(...)`` and JAX read)."""
        return self._dtype

    def __eq__(self, other: object) -> bool:
        if is_torch_dtype(other):
            return bool(str(other).removeprefix("torch.") == self._dtype.name)
        if isinstance(other, ComparableDtype):
            return bool(self._dtype == other._dtype)
        try:
            return bool(self._dtype == other)
        except TypeError:
            return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(self._dtype)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._dtype, name)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a dtype is immutable: cannot set {name!r}")

    def __repr__(self) -> str:
        return repr(self._dtype)

    def __str__(self) -> str:
        return str(self._dtype)

    def __reduce__(self) -> tuple[type[ComparableDtype], tuple[np.dtype[Any]]]:
        return (ComparableDtype, (self._dtype,))


def comparable(dtype: Any) -> Any:
    """``dtype`` as a `ComparableDtype` (equal to torch's dtype of its name); a dtype
    NumPy does not know (a PRNG key's) as it is."""
    return dtype if is_prng_key(dtype) else ComparableDtype(dtype)


#: torch's dtype aliases that NumPy does not know by name (``torch.cfloat``'s name);
#: the ones NumPy knows (``"half"``, ``"double"``, ``"cdouble"``) are NumPy's.
_TORCH_ONLY_NAMES = {"cfloat": "complex64", "bit": "uint1"}


def to_numpy_dtype(dtype: Any) -> np.dtype[Any]:
    """The NumPy dtype for a JAX/NumPy dtype, a dtype name or a ``torch.dtype``.

    Raises:
        DTypeError: JAX does not know the dtype; the message names it.
    """
    name = str(dtype).removeprefix("torch.") if is_torch_dtype(dtype) else dtype
    if isinstance(name, str) and name in _TORCH_ONLY_NAMES:
        name = _TORCH_ONLY_NAMES[name]
    if isinstance(dtype, str) and name in ("chalf", "complex32"):  # torch's name for it
        raise DTypeError(
            f"dtype {dtype!r} is torch's complex32 (pairs of float16), which JAX does not "
            "have: use complex64 (torch.cfloat)"
        )
    try:
        return np.dtype(jnp.dtype(name))
    except (TypeError, ValueError) as err:
        raise DTypeError(
            f"unknown dtype {dtype!r}: JAX dtypes are NumPy dtypes plus bfloat16 and the "
            "float8 kinds; pass e.g. jnp.float32, 'bfloat16' or torch.float16"
        ) from err


def array_dtype(dtype: Any) -> np.dtype[Any]:
    """`to_numpy_dtype` for a dtype JAX arrays must take (``to_device(..., dtype=)``).

    Raises:
        DTypeError: JAX does not know the dtype, or knows it but cannot hold data of it
            (`transfers`); the message names it and the fix.
    """
    result = to_numpy_dtype(dtype)
    if not transfers(result):
        asked = "" if isinstance(dtype, (str, np.dtype)) else f" (asked for {dtype!r:.60})"
        raise DTypeError(f"dtype {result.name!r}{asked} {cannot_hold(result)}")
    return result


def untransferable(dtype: np.dtype[Any]) -> str:
    """The message for NumPy data of a ``dtype`` JAX cannot hold (see `cannot_hold`)."""
    return f"a NumPy array of dtype {dtype} {cannot_hold(dtype)}"


def cannot_hold(dtype: np.dtype[Any]) -> str:
    """Why JAX arrays cannot hold ``dtype`` data, and the fix (after "dtype X ...")."""
    return (
        f"cannot be held by JAX {jax.__version__} arrays: JAX has no such dtype, or names it "
        "but its runtime cannot transfer its data (long double and complex256; ml_dtypes' "
        "float6 and complex kinds, for example). Fix: "
        "cast it on the host first (array.astype(np.float32), or ml_dtypes.float8_e4m3fn / "
        "float4_e2m1fn for a small float; tj.to_device(x, device, dtype) casts it there), "
        "or keep it out of the data you move"
    )


def canonical(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype JAX will actually use for ``dtype``; warns once per narrowed dtype.

    For data whose 64-bit dtype was chosen (torch tensors, checkpoint tensors, an
    explicit ``dtype=``). NumPy arrays go through `narrow_host`, which does not
    warn for NumPy's default float64.
    """
    result = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    if result != dtype and dtype.name not in _warned:
        _warned.add(dtype.name)
        _warn_narrowing(dtype, result, _consequence(dtype, result))
    return result


def as_canonical(host: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``host`` in the dtype `canonical` gives (a copy only if that narrows it)."""
    dtype = canonical(host.dtype)
    if dtype == host.dtype:
        return host
    if not is_inexact(dtype):
        refuse_wrapping(host, dtype)
        return host.astype(dtype)
    with np.errstate(over="ignore"):  # refused below, with its fix
        narrowed = host.astype(dtype)
    refuse_overflow(host, narrowed)
    return narrowed


def narrow_host(host: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A NumPy array in the dtype JAX will use, warning only where values change surprisingly.

    64-bit integers warn once per dtype, as in `canonical` (torch's default
    integer dtype is int64; values outside the 32-bit range wrap). float64 and
    complex128 are NumPy's defaults and JAX always narrows them, so they do not warn:
    the precision loss every float64 -> float32 cast has is said in the docs, not on
    every array. A narrowing that would turn finite values into infinities is refused
    (`refuse_overflow`), as a wrapping one is.
    """
    wanted = np.dtype(jax.dtypes.canonicalize_dtype(host.dtype))
    if wanted == host.dtype:
        return host
    if not is_inexact(host.dtype):
        refuse_wrapping(host, wanted)
        return host.astype(canonical(host.dtype))
    with np.errstate(over="ignore"):  # refused below, with its fix
        narrowed = host.astype(wanted)
    refuse_overflow(host, narrowed)
    return narrowed


def refuse_overflow(wide: Any, narrowed: Any) -> None:
    """Refuse floating-point data that narrowing (JAX's dtype without x64) made infinite.

    ``wide`` and ``narrowed`` are the same values before and after the narrowing cast,
    NumPy arrays or torch tensors. A finite value past float32's largest (``1e300``)
    would become ``inf`` where torch keeps it, as a 64-bit integer would wrap
    (`refuse_wrapping`); infinities already in the data are not news. A narrow dtype
    asked for by name (``tj.to_device(x, device, jnp.float32)``) casts as torch does,
    ``inf`` included, and never reaches here with a wider source.

    Raises:
        ConversionError: the first such value, named, with the fix.
    """
    xp = np if isinstance(narrowed, np.ndarray | np.generic) else sys.modules["torch"]
    made = xp.isinf(narrowed) & ~xp.isinf(wide)
    if not made.any():
        return
    value = wide[made].reshape(-1)[0].item()
    source, target = _dtype_name(wide.dtype), _dtype_name(narrowed.dtype)
    largest = float(np.finfo(np.float32).max)
    raise ConversionError(
        f"the {source} value {value!r} does not fit {target}, which JAX holds while "
        f"jax_enable_x64 is off: it would become inf (torch keeps it). Fix: call "
        "jax.config.update('jax_enable_x64', True) before creating arrays, bring the "
        f"values into float32's range first (np.clip(x, -{largest:.4e}, {largest:.4e})), "
        f"or ask for {target} by name (tj.to_device(x, device, dtype)), which casts as "
        "torch does, inf included"
    )


def _dtype_name(dtype: Any) -> str:
    """``float64`` for NumPy's ``float64`` and torch's ``torch.float64`` alike."""
    return str(dtype).removeprefix("torch.")


def refuse_wrapping(values: np.ndarray[Any, Any], narrower: np.dtype[Any]) -> None:
    """Refuse 64-bit integers that ``narrower`` (JAX's dtype without x64) cannot hold.

    Narrowing would wrap them (``2**40 + 5`` becomes ``5``) where torch keeps them: a
    hashed id or a byte offset would silently name another row. The once-per-dtype
    `DtypeNarrowingWarning` says what can happen; this says that it would, every time.

    Raises:
        ConversionError: a value outside ``narrower``'s range, named, with the fix.
    """
    if not values.size:
        return
    info = np.iinfo(narrower)
    low, high = values.min(), values.max()
    if info.min <= low and high <= info.max:
        return
    outside = low if low < info.min else high
    raise ConversionError(
        f"the {values.dtype.name} value {outside} does not fit {narrower.name}, which JAX "
        f"holds while jax_enable_x64 is off: it would wrap to "
        f"{np.array(outside).astype(narrower)} (torch keeps it). Fix: call "
        "jax.config.update('jax_enable_x64', True) before creating arrays, or bring the "
        f"values into [{info.min}, {info.max}] first"
    )


def _consequence(dtype: np.dtype[Any], result: np.dtype[Any]) -> str:
    """What narrowing ``dtype`` to ``result`` does to the values."""
    if is_inexact(dtype):
        info = np.finfo(result)
        return (
            f"precision drops to about {info.precision} significant digits (values past "
            f"{float(info.max):.1e}, which would become inf, are refused)"
        )
    info_int = np.iinfo(result)
    return f"values outside [{info_int.min}, {info_int.max}] wrap around"


def _warn_narrowing(dtype: np.dtype[Any], result: np.dtype[Any], consequence: str) -> None:
    warnings.warn(
        f"{dtype.name} data becomes {result.name} in JAX because jax_enable_x64 is off: "
        f"{consequence}. To keep 64-bit data, call jax.config.update('jax_enable_x64', True) "
        "before creating arrays.",
        DtypeNarrowingWarning,
        stacklevel=caller_stacklevel(),
    )


def holds(dtype: np.dtype[Any]) -> bool:
    """Whether JAX arrays can hold this NumPy dtype: numbers and booleans, ml_dtypes' kinds.

    Strings, bytes, objects, dates and structured records cannot become JAX arrays. Of
    ml_dtypes' kinds, some cannot be transferred as they are (`transfers`).
    """
    if dtype.kind in "biufc":
        return True
    return dtype.kind == "V" and dtype.fields is None and dtype.type.__module__ == "ml_dtypes"


def transfers(dtype: np.dtype[Any]) -> bool:
    """Whether this JAX moves NumPy data of ``dtype`` onto a device as it is.

    JAX names every ml_dtypes kind (``jnp.dtype`` and ``jnp.float6_e2m3fn`` exist), but
    its runtime refuses some (jax 0.10: ``Unknown NumPy dtype`` for float6, ``TypeError``
    for complex32), and which ones changes between versions; so for those kinds one
    element is moved to the CPU once per dtype and the answer kept. The refusal comes
    while JAX reads the host array, so the CPU answers for every device, and a move to
    the CPU never starts a GPU for the question.
    """
    wide = dtype.itemsize > (16 if dtype.kind == "c" else 8)  # long double, complex256
    return (dtype.kind in "biufc" and not wide) or _moves_one_element(dtype)


@functools.cache
def _moves_one_element(dtype: np.dtype[Any]) -> bool:
    try:
        host: jax.Device | None = jax.local_devices(backend="cpu")[0]
    except RuntimeError:  # no CPU backend (JAX_PLATFORMS without cpu): the default device
        host = None
    try:
        jax.block_until_ready(jax.device_put(np.zeros(1, dtype), host))
    except (TypeError, jax.errors.JaxRuntimeError):  # "Unknown NumPy dtype", complex32
        return False
    return True


def is_inexact(dtype: Any) -> bool:
    """Floating point or complex, including bfloat16 and float8 (what ``Module.to`` casts).

    A PRNG key dtype (``key<fry>``, which NumPy cannot interpret) is not.
    """
    return bool(jnp.issubdtype(dtype, jnp.inexact))


def is_prng_key(dtype: Any) -> bool:
    """A typed PRNG key array's dtype (``jax.random.key``): no numbers, no NumPy dtype."""
    return bool(jnp.issubdtype(dtype, jax.dtypes.prng_key))


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside this package."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and os.path.dirname(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level
