"""torch / NumPy <-> JAX without copies where the memory allows (DLPack, aligned buffers).

JAX can alias a host buffer only when it is 64-byte aligned, dense and of a dtype JAX
keeps (not 64-bit without ``jax_enable_x64``); otherwise it copies, silently. Here the
copy is visible: ``tj.to_jax`` with ``strict=True`` raises instead of copying.
"""

from __future__ import annotations

import sys
from typing import Any

import jax
import numpy as np

from . import casting, dtypes, host_staging
from .detect import import_torch, is_torch_tensor, is_tracer, type_name
from .device import Device, DeviceLike, resolve
from .errors import ConversionError, DeviceUnavailableError, DTypeError
from .truth import truth

__all__ = ["ALIGNMENT", "aligned_empty", "host_array", "to_jax", "to_torch"]

#: JAX's CPU backend uses host memory in place only when it starts at this alignment.
ALIGNMENT = 64


def aligned_empty(nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """An uninitialized byte buffer whose first byte is ``ALIGNMENT``-aligned."""
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start : start + nbytes]


def to_jax(value: Any, device: DeviceLike | None = None, *, strict: bool = False) -> jax.Array:
    """Equivalent to `torch.from_numpy`.

    A torch tensor or NumPy array as a JAX array, sharing its memory where possible.

    The result lives where the data already is (a CPU tensor or NumPy array on the CPU
    device, a ``cuda:1`` tensor on ``cuda:1``), committed there, and aliases the input
    when the buffer allows: dense, 64-byte aligned on CPU, and of a dtype JAX keeps.
    Otherwise it is a copy. Tensors that require grad are detached; tensors with their
    conjugate or negative bit set are resolved first (a copy, as ``Tensor.numpy()``
    asks for), and big-endian NumPy arrays are converted to native byte order (a copy;
    ``torch.from_numpy`` refuses them). As with ``torch.from_numpy``, writing to the input
    later shows through the JAX array when it aliases.

    Args:
        value: A ``torch.Tensor``, ``np.ndarray`` (or NumPy scalar), ``jax.Array`` or
            `tj.Parameter`.
        device: Where the result must be; ``None`` keeps it where the data is.
            Moving to another device is a transfer, not a conversion copy.
        strict: Raise instead of silently copying during the conversion.

    Raises:
        ConversionError: ``strict`` and a copy would be needed (unaligned or strided
            buffer, 64-bit data without x64, a conjugate or negative bit, big-endian
            bytes), ``value`` is not an array, holds no numbers (strings, objects), is a
            sparse, quantized or nested tensor, a NumPy masked array (its mask would be
            lost), or is a tracer (inside ``jax.jit``).
        DeviceUnavailableError: a ``meta`` tensor (it has no data).

    Warns:
        DtypeNarrowingWarning: int64 (once per dtype), float64 tensors (once), NumPy
            float64 only where values overflow float32.

    Examples:
        >>> import numpy as np, torch
        >>> import torch2jax_device as tj
        >>> tensor = torch.arange(4.0)
        >>> array = tj.to_jax(tensor)
        >>> array.unsafe_buffer_pointer() == tensor.data_ptr()
        True
    """
    strict = truth("tj.to_jax()", "strict", strict)
    if is_torch_tensor(value):
        array = _from_torch(value, strict)
    elif isinstance(value, (np.ndarray, np.generic)):
        array = _from_numpy(numpy_data(value), strict)
    elif isinstance(value, jax.Array) and not is_tracer(value):
        array = value
    elif is_tracer(value):
        raise ConversionError(
            f"to_jax() got a tracer ({type(value).__name__}): inside jax.jit arrays are "
            "already JAX values without a device. Fix: use the value as it is."
        )
    elif hasattr(value, "__jax_array__") and not isinstance(value, type):
        array = to_jax(value.__jax_array__())
    else:
        raise ConversionError(
            f"to_jax() takes a torch.Tensor, np.ndarray or jax.Array, not "
            f"{type_name(value)}; for nested containers "
            "use tj.to_device"
        )
    if device is None:
        return array
    target = resolve(device)
    return array if array.devices() == {target} else jax.device_put(array, target)


def _from_numpy(array: np.ndarray[Any, Any], strict: bool) -> jax.Array:
    cpu = jax.local_devices(backend="cpu")[0]
    array = host_array(array, strict)
    if not dtypes.transfers(array.dtype):
        raise ConversionError(dtypes.untransferable(array.dtype))
    if strict:
        _require_zero_copy(array.dtype, array.ctypes.data, array.flags.c_contiguous, "array")
        result: jax.Array = jax.device_put(array, cpu)
        if array.size and result.unsafe_buffer_pointer() != array.ctypes.data:
            raise ConversionError("strict=True: JAX copied the array although it is aliasable")
        return result
    placed: jax.Array = jax.device_put(dtypes.narrow_host(array), cpu)
    return placed


def numpy_data(value: Any) -> np.ndarray[Any, Any]:
    """``value`` (a NumPy array or scalar) as a plain ``ndarray``.

    Raises:
        ConversionError: ``value`` is a masked array (``np.ma``): its mask would be lost
            and the values under it moved as data. JAX refuses it too.
    """
    if isinstance(value, np.ma.MaskedArray):
        raise ConversionError(
            "a NumPy masked array (np.ma) would lose its mask: JAX and torch arrays have "
            "none, so the masked entries would move as data (JAX refuses it too). Fix: "
            "arr.filled(fill_value) for the values with the masked ones replaced, or "
            "np.ma.getdata(arr) to keep the raw values knowingly, with "
            "np.ma.getmaskarray(arr) as its own bool array"
        )
    return np.asarray(value)


def host_array(array: np.ndarray[Any, Any], strict: bool = False) -> np.ndarray[Any, Any]:
    """``array`` in a form JAX can take: native byte order, a dtype JAX holds.

    Raises:
        ConversionError: the dtype holds no numbers (strings, objects, records...), a
            masked array, or the bytes are big-endian and ``strict`` forbids the
            converting copy.
    """
    array = numpy_data(array)
    if not dtypes.holds(array.dtype):
        if array.dtype == jax.dtypes.float0:  # a structured dtype, but not records
            raise ConversionError(
                f"a float0 array (shape {array.shape}: the gradient jax.grad(..., "
                "allow_int=True) gives an integer input) holds no values, so neither JAX "
                "nor torch can hold it. Fix: use np.zeros(x.shape, np.int32) where zeros "
                "are meant, or leave it out (tj.to_device keeps it as it is in a tree)"
            )
        if _from_ml_dtypes(array.dtype):  # complex32, bcomplex32: pairs of halves
            raise ConversionError(dtypes.untransferable(array.dtype))
        raise ConversionError(
            f"a NumPy array of dtype {array.dtype} ({_KIND_NAMES.get(array.dtype.kind, 'records')})"
            " cannot become a JAX array: JAX arrays hold numbers and booleans only. Fix: "
            "keep it out of the data you move (it stays a NumPy array), or encode it as "
            "numbers first (e.g. token ids, or a label-to-index table)"
        )
    if array.dtype.isnative:
        return array
    if strict:
        raise ConversionError(
            f"strict=True: the array's bytes are big-endian ({array.dtype.str}), so JAX needs "
            "a copy in native byte order; convert it with "
            "array.astype(array.dtype.newbyteorder('=')) or pass strict=False"
        )
    return array.astype(array.dtype.newbyteorder("="))


_KIND_NAMES = {
    "U": "text",
    "S": "bytes",
    "O": "Python objects",
    "M": "dates",
    "m": "time deltas",
}


def _from_torch(tensor: Any, strict: bool) -> jax.Array:
    torch = sys.modules["torch"]
    tensor = _plain_tensor(tensor, strict)
    source = dtypes.to_numpy_dtype(tensor.dtype)
    if strict:
        dense = tensor.is_contiguous()
        pointer = tensor.data_ptr() if tensor.device.type == "cpu" else 0
        _require_zero_copy(source, pointer, dense, "tensor")
    elif dtypes.canonical(source) != source:
        narrower = dtypes.canonical(source)
        if not dtypes.is_inexact(source) and tensor.numel():
            dtypes.refuse_wrapping(_extremes(torch, tensor, source), narrower)
        wide, tensor = tensor, tensor.to(getattr(torch, narrower.name))
        if dtypes.is_inexact(source):
            dtypes.refuse_overflow(wide, tensor)
    if source.name.startswith("float8"):  # DLPack has no float8: carry the bits
        if tensor.device.type == "cpu":
            return _from_numpy(tensor.view(torch.uint8).numpy().view(source), strict)
        if strict:
            raise ConversionError(
                f"strict=True: a {source.name} tensor on {tensor.device} is copied, because "
                "DLPack has no float8 type; pass strict=False"
            )
        bits = jax.dlpack.from_dlpack(tensor.view(torch.uint8))
        converted: jax.Array = jax.lax.bitcast_convert_type(bits, source)
        return converted
    try:
        shared: jax.Array = jax.dlpack.from_dlpack(tensor, copy=False if strict else None)
    except (BufferError, ValueError, RuntimeError, TypeError) as err:
        if strict:
            raise ConversionError(f"JAX cannot alias this tensor without a copy: {err}") from err
        try:
            shared = jax.dlpack.from_dlpack(tensor.contiguous())
        except (BufferError, ValueError, RuntimeError, TypeError) as retry_err:
            if tensor.device.type != "cpu":
                fix = "move it to the CPU in torch first (tensor.cpu())"
            else:  # on the CPU it is the dtype (complex32: DLPack has none)
                like = "torch.complex64" if tensor.is_complex() else "torch.float32"
                fix = f"convert it in torch to a dtype JAX has (tensor.to({like}))"
            raise ConversionError(
                f"JAX cannot import a {tensor.dtype} tensor on {tensor.device} through DLPack "
                f"({retry_err}). Fix: {fix}"
            ) from retry_err
    return shared


def _extremes(torch: Any, tensor: Any, source: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """An integer tensor's least and greatest values, computed where it is, in ``source``.

    torch has no min/max for uint64: read as int64, a value past 2**63 is negative, and
    both ends go back to uint64 on the host."""
    if source != np.uint64:
        low, high = torch.aminmax(tensor)
        return np.array([low.item(), high.item()], source)
    low, high = torch.aminmax(tensor.view(torch.int64))
    return np.array([low.item(), high.item()], np.int64).view(source)


#: The fix for torch's tensor subclasses that hold no data of their own, by class name.
_SUBCLASS_FIXES = {
    "FakeTensor": "it is a fake tensor (FakeTensorMode, torch.compile or torch.export "
    "tracing): it has shapes, no values. Convert real tensors, outside the tracing",
    "FunctionalTensor": "it is a functionalization wrapper (torch.compile tracing): "
    "convert real tensors, outside the tracing",
    "MaskedTensor": "convert its parts: tensor.get_data() and tensor.get_mask() (a bool "
    "array), or tensor.to_tensor(fill_value)",
    "DTensor": "gather it first: tensor.full_tensor() (or tensor.to_local() for this rank's part)",
}


def check_data_tensor(tensor: Any) -> None:
    """Refuse a torch tensor subclass that wraps other data (``__torch_dispatch__``):
    its memory is not its values (a fake tensor's is nothing at all), so reading it
    through DLPack or its storage would give other numbers.

    Raises:
        ConversionError: a wrapper subclass, named, with the fix.
    """
    torch = sys.modules["torch"]
    kind = type(tensor)
    if getattr(kind, "__torch_dispatch__", None) is torch.Tensor.__torch_dispatch__:
        return
    fix = _SUBCLASS_FIXES.get(
        kind.__name__,
        "convert the plain tensor it wraps (its class's own accessor), or torch.Tensor "
        "data made from it in torch",
    )
    raise ConversionError(
        f"a {kind.__module__}.{kind.__qualname__} (a torch tensor subclass that wraps other "
        f"data) cannot become a JAX array: its memory is not its values. Fix: {fix}"
    )


def _plain_tensor(tensor: Any, strict: bool) -> Any:
    """A dense, strided tensor without lazy bits or autograd, or a teaching error."""
    check_data_tensor(tensor)
    if tensor.is_meta:
        raise DeviceUnavailableError(
            f"a meta tensor (shape {tuple(tensor.shape)}, {tensor.dtype}) has no data, and JAX "
            "has no meta device. Fix: materialize it in torch first "
            "(module.to_empty(device='cpu'), then load the weights), or describe shapes "
            "with jax.ShapeDtypeStruct / jax.eval_shape"
        )
    if tensor.is_quantized:
        raise ConversionError(
            f"a quantized tensor ({tensor.dtype}) has no JAX dtype. Fix: convert it with "
            "tensor.dequantize() first"
        )
    if tensor.is_nested:
        raise ConversionError(
            "a nested (ragged) tensor has no JAX equivalent. Fix: pad it with "
            "tensor.to_padded_tensor(0.0), or convert its parts (tensor.unbind())"
        )
    if tensor.layout != sys.modules["torch"].strided:
        raise ConversionError(
            f"a sparse tensor ({tensor.layout}) cannot cross to JAX through DLPack. Fix: "
            "tensor.to_dense() first (or build a jax.experimental.sparse array from its "
            "indices and values)"
        )
    if tensor.requires_grad:
        tensor = tensor.detach()
    # DLPack refuses the conjugate bit and ignores the negative bit (wrong signs).
    for bit, is_set, resolve_bit in (
        ("conjugate", tensor.is_conj(), "resolve_conj"),
        ("negative", tensor.is_neg(), "resolve_neg"),
    ):
        if not is_set:
            continue
        if strict:
            raise ConversionError(
                f"strict=True: the tensor has its {bit} bit set (a lazy view), so JAX needs "
                f"a copy with the values resolved; call tensor.{resolve_bit}() or pass "
                "strict=False"
            )
        tensor = getattr(tensor, resolve_bit)()
    return tensor


def _require_zero_copy(dtype: np.dtype[Any], pointer: int, dense: bool, what: str) -> None:
    narrowed = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    if narrowed != dtype:
        raise ConversionError(
            f"strict=True: the {dtype.name} {what} would be copied to {narrowed.name} because "
            "jax_enable_x64 is off; enable it with jax.config.update('jax_enable_x64', True) "
            "or pass strict=False"
        )
    if not dense:
        raise ConversionError(
            f"strict=True: the {what} is not contiguous, so JAX would copy it; call "
            ".contiguous() / np.ascontiguousarray first or pass strict=False"
        )
    if pointer % ALIGNMENT:
        raise ConversionError(
            f"strict=True: the {what}'s buffer starts {pointer % ALIGNMENT} bytes past a "
            f"{ALIGNMENT}-byte boundary, and JAX's CPU backend only aliases aligned "
            "buffers; allocate it aligned or pass strict=False"
        )


def to_torch(
    array: Any, device: DeviceLike | None = None, *, dtype: Any = None, copy: bool = False
) -> Any:
    """Equivalent to `torch.from_dlpack` or `torch.utils.dlpack.from_dlpack`.

    A JAX array as a ``torch.Tensor`` sharing its memory, through DLPack.

    Needs torch. NumPy arrays go through ``torch.from_numpy`` and tensors pass through.

    The tensor shares the array's memory, as ``torch.from_dlpack``'s does: an in-place
    torch op on it (``t.add_(1)``, ``t /= 255``, a torch optimizer's step) changes the
    JAX array too, which JAX assumes never changes (a jitted function may have taken it
    as a constant; other trees may hold it). Treat the tensor as read-only, or pass
    ``copy=True`` for a tensor of its own.

    The tensor has the array's dtype, and JAX without ``jax_enable_x64`` (its default)
    has no 64-bit types: int64 labels that went through JAX come back as **int32**, and
    torch's losses refuse them (``expected target dtype to be Long``; ``nll_loss``,
    ``cross_entropy`` and ``one_hot`` need int64). Ask for the dtype torch needs with
    ``dtype=torch.int64`` (or call ``.long()`` on the tensor): a copy, as the cast is in
    torch.

    Args:
        array: A single-device ``jax.Array`` (or `tj.Parameter`,
            ``np.ndarray``, NumPy scalar, ``torch.Tensor``).
        device: Where the tensor must be (``"cuda:0"``, a ``tj.device``, ...);
            ``None`` keeps it where the data is.
        dtype: The tensor's dtype (a ``torch.dtype``, a JAX/NumPy dtype or its name);
            ``None`` keeps the array's. Any dtype torch has, int64 and float64 included,
            whatever ``jax_enable_x64`` says.
        copy: Return a tensor with its own memory (``Tensor.to(..., copy=True)``), for
            code that writes to it in place.

    Raises:
        ConversionError: ``array`` is sharded over several devices, is a tracer, was
            deleted or donated, or is not an array torch can take.
        DTypeError: torch has no such dtype.
        MissingFrameworkError: torch is not installed.

    Examples:
        >>> import jax.numpy as jnp, torch
        >>> import torch2jax_device as tj
        >>> tj.to_torch(jnp.arange(3)).tolist()
        [0, 1, 2]
        >>> labels = jnp.array([0, 2, 1])  # int32: without x64, JAX has no int64
        >>> tj.to_torch(labels).dtype, tj.to_torch(labels, dtype=torch.int64).dtype
        (torch.int32, torch.int64)
        >>> images = jnp.full(2, 255.0)
        >>> own = tj.to_torch(images, copy=True)
        >>> own /= 255  # in place: the JAX array is untouched
        >>> own.tolist(), images.tolist()
        ([1.0, 1.0], [255.0, 255.0])
    """
    torch = import_torch("tj.to_torch()")
    copy = truth("tj.to_torch()", "copy", copy)
    if not isinstance(array, jax.Array) and hasattr(array, "__jax_array__"):
        array = array.__jax_array__()
    if is_torch_tensor(array):
        tensor = array
    elif isinstance(array, (np.ndarray, np.generic)):
        tensor = _torch_from_numpy(torch, host_array(np.asarray(array)))
    elif is_tracer(array):
        raise ConversionError(
            "to_torch() got a tracer: inside jax.jit arrays have no data yet. Fix: return "
            "the array from the jitted function and convert the result, or call torch "
            "through jax.pure_callback"
        )
    elif isinstance(array, jax.Array):
        if array.is_deleted():
            raise ConversionError(
                f"to_torch() got a deleted or donated jax.Array ({array.dtype}"
                f"{list(array.shape)}); convert the array the donating call returned"
            )
        if dtypes.is_prng_key(array.dtype):
            raise ConversionError(
                f"to_torch() got a JAX PRNG key array ({array.dtype}{list(array.shape)}): it "
                "holds no numbers and torch has no key tensors. Fix: convert its bits, "
                "tj.to_torch(jax.random.key_data(key)), and rebuild it in JAX with "
                "jax.random.wrap_key_data"
            )
        if len(array.devices()) != 1:
            raise ConversionError(
                f"to_torch() needs a single-device array; this one is sharded over "
                f"{len(array.devices())} devices. Gather it first with "
                "tj.to_device(array, 'cpu')"
            )
        (source,) = array.devices()
        to_cpu = device is not None and Device(device).type == "cpu"
        if to_cpu and host_staging.routes_through_pinned(source):
            (array,) = host_staging.device_put([array], resolve(device))  # at pinned speed
        tensor = _torch_from_jax(array)
    else:
        raise ConversionError(
            f"to_torch() cannot convert {type_name(array)}: "
            "it takes a jax.Array, a NumPy array or a torch.Tensor. Fix: pass one of them "
            "(for a container of arrays, tj.to_device(tree, 'cpu') then convert each leaf)"
        )
    target = None if device is None else Device(device).torch_device
    if dtype is None and target is None and not copy:
        return tensor
    wanted = None if dtype is None else _torch_dtype(torch, dtype)
    try:
        return tensor.to(target, wanted, copy=copy)
    except (AssertionError, RuntimeError) as err:
        here = tensor.device
        if target is None or (target.type == here.type and target.index in (None, here.index)):
            raise  # not about the device
        raise DeviceUnavailableError(
            f"to_torch(): torch cannot place the tensor on {target} in this process "
            f"({type(err).__name__}: {str(err).splitlines()[0]}). Fix: pass a device torch "
            "has here (torch.cuda.is_available(), torch.backends.mps.is_available()), e.g. "
            "'cpu'; torch and JAX are installed separately, each with its own GPU support"
        ) from err


def _torch_dtype(torch: Any, dtype: Any) -> Any:
    """The ``torch.dtype`` for any dtype spelling the library takes."""
    if isinstance(dtype, torch.dtype):
        return dtype
    name = dtypes.to_numpy_dtype(dtype).name
    found = getattr(torch, name, None)
    if not isinstance(found, torch.dtype):
        raise DTypeError(
            f"torch has no dtype {name!r} (asked for {dtype!r:.60}). Fix: pass a torch "
            "dtype (torch.float32) or a NumPy one torch has (np.int64)"
        )
    return found


def _torch_from_numpy(torch: Any, array: np.ndarray[Any, Any]) -> Any:
    """``torch.from_numpy``, sharing the memory, for the dtypes ml_dtypes adds too."""
    if any(stride < 0 for stride in array.strides):
        raise ConversionError(
            f"to_torch() got a NumPy array with negative strides {array.strides} (a reversed "
            "view), which a torch tensor cannot share (torch.from_numpy raises ValueError "
            "too). Fix: pass np.ascontiguousarray(array), a copy"
        )
    if not _from_ml_dtypes(array.dtype):  # NumPy's own dtypes
        return torch.from_numpy(array)
    # bfloat16 and the float8 kinds (ml_dtypes): torch.from_numpy refuses them, so
    # share the bytes as unsigned integers of the same width and view them as the dtype.
    twin = _torch_twin(torch, array.dtype)
    bits = array.view(np.dtype(f"u{array.dtype.itemsize}"))
    return torch.from_numpy(bits).view(twin)


def _torch_twin(torch: Any, dtype: np.dtype[Any]) -> Any:
    """torch's dtype of ``dtype``'s name, or the error that torch has none that computes.

    torch's sub-byte dtypes (``torch.int4``, ``torch.uint2``) are placeholders without
    operations, and some of ml_dtypes' float8 kinds have no torch counterpart.
    """
    found = getattr(torch, dtype.name, None)
    if isinstance(found, torch.dtype) and casting.computes(torch, found):
        return found
    wider = "jnp.float32" if "float" in dtype.name else f"jnp.{dtype.name.rstrip('0123456789')}8"
    raise ConversionError(
        f"to_torch(): torch has no {dtype.name} tensors that compute "
        f"({'a placeholder dtype without operations' if found is not None else 'no such dtype'}"
        f" in torch {torch.__version__}). Fix: cast first, e.g. array.astype({wider})"
    )


def _from_ml_dtypes(dtype: np.dtype[Any]) -> bool:
    """bfloat16, the float8 kinds, int4...: NumPy dtypes that ml_dtypes adds."""
    return dtype.type.__module__ == "ml_dtypes"


def _torch_from_jax(array: jax.Array) -> Any:
    torch = sys.modules["torch"]
    from torch.utils.dlpack import from_dlpack

    dtype = np.dtype(array.dtype)
    if _from_ml_dtypes(dtype) and dtype.name != "bfloat16":
        # float8 crosses DLPack (shared) where both sides know it (torch 2.13 with
        # JAX 0.10 do); where one does not, carry the bits (a copy). int4 never does.
        try:
            return from_dlpack(array)
        except (BufferError, RuntimeError, TypeError, ValueError):
            twin = _torch_twin(torch, dtype)
        bits = jax.lax.bitcast_convert_type(array, np.dtype(f"u{dtype.itemsize}"))
        return from_dlpack(bits).view(twin)
    return from_dlpack(array)
