"""torch / NumPy <-> JAX without copies where the memory allows (DLPack, aligned buffers).

JAX can alias a host buffer only when it is 64-byte aligned, dense and of a dtype JAX
keeps (not 64-bit without ``jax_enable_x64``); otherwise it copies, silently. Here the
copy is visible: ``tj.to_jax`` with ``strict=True`` raises instead of copying.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from . import dtypes, platforms
from .detect import is_torch_tensor, is_tracer
from .device import Device, DeviceLike, resolve
from .errors import ConversionError, DeviceUnavailableError

__all__ = ["ALIGNMENT", "aligned_empty", "to_jax", "to_torch"]

#: JAX's CPU backend uses host memory in place only when it starts at this alignment.
ALIGNMENT = 64


def aligned_empty(nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """An uninitialized byte buffer whose first byte is ``ALIGNMENT``-aligned."""
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start : start + nbytes]


def to_jax(value: Any, device: DeviceLike | None = None, *, strict: bool = False) -> jax.Array:
    """A torch tensor or NumPy array as a JAX array, sharing its memory where possible.

    The result lives where the data already is (a CPU tensor or NumPy array on the CPU
    device, a ``cuda:1`` tensor on ``cuda:1``), committed there, and aliases the input
    when the buffer allows: dense, 64-byte aligned on CPU, and of a dtype JAX keeps.
    Otherwise it is a copy. Tensors that require grad are detached. As with
    ``torch.from_numpy``, writing to the input later shows through the JAX array.

    Args:
        value: A ``torch.Tensor``, ``np.ndarray`` (or NumPy scalar) or ``jax.Array``.
        device: Where the result must be; ``None`` keeps it where the data is.
            Moving to another device is a transfer, not a conversion copy.
        strict: Raise instead of silently copying during the conversion.

    Raises:
        ConversionError: ``strict`` and a copy would be needed (unaligned or strided
            buffer, 64-bit data without x64), or ``value`` is not an array.

    Warns:
        DtypeNarrowingWarning: once per dtype, when int64/float64 becomes 32-bit.

    Examples:
        >>> import numpy as np, torch
        >>> import torch2jax_device as tj
        >>> tensor = torch.arange(4.0)
        >>> array = tj.to_jax(tensor)
        >>> array.unsafe_buffer_pointer() == tensor.data_ptr()
        True
    """
    if is_torch_tensor(value):
        array = _from_torch(value, strict)
    elif isinstance(value, (np.ndarray, np.generic)):
        array = _from_numpy(np.asarray(value), strict)
    elif isinstance(value, jax.Array) and not is_tracer(value):
        array = value
    else:
        raise ConversionError(
            f"to_jax() takes a torch.Tensor, np.ndarray or jax.Array, not "
            f"{type(value).__name__}; for nested containers use tj.to_device"
        )
    if device is None:
        return array
    target = resolve(device)
    return array if array.devices() == {target} else jax.device_put(array, target)


def _from_numpy(array: np.ndarray[Any, Any], strict: bool) -> jax.Array:
    cpu = jax.local_devices(backend="cpu")[0]
    if strict:
        _require_zero_copy(array.dtype, array.ctypes.data, array.flags.c_contiguous, "array")
        result: jax.Array = jax.device_put(array, cpu)
        if array.size and result.unsafe_buffer_pointer() != array.ctypes.data:
            raise ConversionError("strict=True: JAX copied the array although it is aliasable")
        return result
    narrowed = dtypes.canonical(array.dtype)
    placed: jax.Array = jax.device_put(
        array if narrowed == array.dtype else array.astype(narrowed), cpu
    )
    return placed


def _from_torch(tensor: Any, strict: bool) -> jax.Array:
    import torch

    if tensor.requires_grad:
        tensor = tensor.detach()
    source = dtypes.to_numpy_dtype(tensor.dtype)
    if strict:
        dense = tensor.is_contiguous()
        pointer = tensor.data_ptr() if tensor.device.type == "cpu" else 0
        _require_zero_copy(source, pointer, dense, "tensor")
    elif dtypes.canonical(source) != source:
        tensor = tensor.to(getattr(torch, dtypes.canonical(source).name))
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
    except (BufferError, ValueError, RuntimeError) as err:
        if strict:
            raise ConversionError(f"JAX cannot alias this tensor without a copy: {err}") from err
        shared = jax.dlpack.from_dlpack(tensor.contiguous())
    return shared


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


def to_torch(array: Any, device: DeviceLike | None = None) -> Any:
    """A JAX array as a ``torch.Tensor`` sharing its memory (``torch.from_dlpack``).

    Needs torch. NumPy arrays go through ``torch.from_numpy`` and tensors pass through.

    Args:
        array: A single-device ``jax.Array`` (or ``np.ndarray`` / ``torch.Tensor``).
        device: Where the tensor must be (``"cuda:0"``, a ``tj.device``, ...);
            ``None`` keeps it where the data is.

    Raises:
        ConversionError: ``array`` is sharded over several devices or is a tracer.

    Examples:
        >>> import jax.numpy as jnp
        >>> import torch2jax_device as tj
        >>> tj.to_torch(jnp.arange(3)).tolist()
        [0, 1, 2]
    """
    import torch

    if is_torch_tensor(array):
        tensor = array
    elif isinstance(array, np.ndarray):
        tensor = torch.from_numpy(array)
    elif isinstance(array, jax.Array) and not is_tracer(array):
        if len(array.devices()) != 1:
            raise ConversionError(
                f"to_torch() needs a single-device array; this one is sharded over "
                f"{len(array.devices())} devices. Gather it first with "
                "jax.device_put(array, tj.resolve('cpu'))"
            )
        tensor = _torch_from_jax(array)
    else:
        raise ConversionError(f"to_torch() cannot convert {type(array).__name__}")
    if device is None:
        return tensor
    return tensor.to(torch_device(Device(device)))


def torch_device(device: Device) -> Any:
    """The ``torch.device`` for the same hardware as ``device`` (needs torch).

    Raises:
        DeviceUnavailableError: torch has no device type for this platform (TPU).
    """
    import torch

    torch_type = platforms.torch_type_of(device.type)
    if torch_type is None:
        raise DeviceUnavailableError(
            f"torch has no device type for {device}: PyTorch cannot place tensors on it "
            "(a TPU needs torch_xla). Fix: keep this data in JAX, or move it to the CPU "
            "for torch with tj.to_torch(x, 'cpu')"
        )
    if device.index is None:
        return torch.device(torch_type)
    return torch.device(torch_type, device.index)


def _torch_from_jax(array: jax.Array) -> Any:
    import torch
    from torch.utils.dlpack import from_dlpack

    dtype = np.dtype(array.dtype)
    if dtype.name.startswith("float8"):
        bits = jax.lax.bitcast_convert_type(array, np.uint8)
        return from_dlpack(bits).view(getattr(torch, dtype.name))
    return from_dlpack(array)
