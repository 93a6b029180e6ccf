"""torch's ``Tensor.to`` call forms, read into ``to_device``'s (device, dtype, flags).

``x.to(device, dtype, non_blocking, copy)``, ``x.to(dtype, non_blocking, copy)``,
``x.to(other, non_blocking, copy)`` and ``memory_format=``: what each argument means in
each form. Calls torch refuses (a flag that is not a bool, a dtype after ``other``, a
dtype's name where the device goes) are refused here too, with the library's errors, so
that ported code torch would stop is not silently taken.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from . import dtypes
from .detect import is_torch_dtype, type_name
from .device import Device
from .errors import ArgumentTypeError, DTypeError, InvalidDeviceError, MemoryFormatError
from .location import device_of, is_array

__all__ = ["KEEP", "NOT_GIVEN", "check_memory_format", "check_memory_format_kind", "read_call"]


class _Keep:
    """The ``.to(dtype)`` form: every array stays where it is."""


KEEP = _Keep()


class _NotGiven:
    """No ``memory_format=`` argument (``memory_format=None`` is torch's keep-everything form)."""

    def __repr__(self) -> str:
        return "not given"


NOT_GIVEN = _NotGiven()

#: Devices and shardings: never a dtype or an array.
_PLACES = (jax.sharding.Sharding, jax.Device, Device)


def read_call(
    device: Any, dtype: Any, non_blocking: Any, copy: Any, other: Any = NOT_GIVEN
) -> tuple[Any, Any, bool, bool, bool]:
    """``to_device``'s arguments as (device or ``KEEP``, dtype, non_blocking, copy, and
    whether a ``copy`` was given at all, which a model refuses as torch's ``Module.to``
    does).

    ``dtype``, ``non_blocking`` and ``copy`` are ``NOT_GIVEN`` where the call left them
    out: torch's parser tells ``x.to(torch.float16, None)`` (refused) from
    ``x.to(torch.float16)``, and so must this. ``other`` is the ``other=`` keyword, which
    torch refuses (``other`` is positional).

    Raises:
        ArgumentTypeError: a call torch's ``.to`` refuses with ``TypeError``: ``non_blocking``
            or ``copy`` not a bool, a dtype after ``other`` (``x.to(other, dtype)``), a bool
            where a device's dtype goes (``x.to("cpu", False)``), or ``other=`` as a keyword.
        DTypeError: a ``dtype`` that is no dtype, before the device is read (torch's
            parser refuses the call first).
        InvalidDeviceError: a dtype name where the device goes (``x.to("float16")``), which
            torch refuses as an invalid device string.
    """
    if other is not NOT_GIVEN:
        raise ArgumentTypeError(
            "to_device(x, other=...): torch's .to() takes other only as its first argument "
            "(x.to(other=y) raises TypeError). Fix: tj.to_device(x, other)"
        )
    copy_given = copy is not NOT_GIVEN
    copy = False if copy is NOT_GIVEN else copy
    if is_array(device) or _is_dtype(device):  # .to(dtype, non_blocking, copy), .to(other, ...)
        # Given, to_device's dtype and non_blocking slots hold torch's positional
        # non_blocking and copy here; without the dtype slot, non_blocking is the keyword.
        torch_non_blocking: Any = dtype
        if dtype is NOT_GIVEN:
            torch_non_blocking = False if non_blocking is NOT_GIVEN else non_blocking
        elif dtype is not None and not isinstance(dtype, bool):
            if is_array(device):
                raise ArgumentTypeError(
                    f"to_device(x, other, {dtype!r}): torch's .to(other, ...) takes no dtype "
                    "(the result has other's dtype and device; its next argument is "
                    "non_blocking), and raises TypeError. Fix: tj.to_device(x, "
                    "tj.device_of(other), dtype)"
                )
            raise ArgumentTypeError(
                f"to_device(x, {device!r}, {dtype!r}): after a dtype, torch's .to(dtype, "
                "non_blocking, copy) takes the flags (bools), and raises TypeError. Fix: "
                "tj.to_device(x, device, dtype) to place and cast, or tj.to_device(x, dtype)"
            )
        else:
            copy_given = copy_given or non_blocking is not NOT_GIVEN
            copy = _flag_or(False if non_blocking is NOT_GIVEN else non_blocking, copy)
        _check_flags(torch_non_blocking, copy)  # None as non_blocking is refused here
        flags = bool(torch_non_blocking), bool(copy), copy_given
        if is_array(device):
            return (device_of(device) or KEEP), device.dtype, *flags
        return KEEP, device, *flags
    dtype = None if dtype is NOT_GIVEN else dtype
    non_blocking = False if non_blocking is NOT_GIVEN else non_blocking
    _check_flags(non_blocking, copy)  # torch's parser refuses bad flags first
    if isinstance(dtype, bool):
        raise ArgumentTypeError(
            f"to_device(x, {device!r}, {dtype!r}): a bool where the dtype goes (torch's "
            f".to(device, dtype, non_blocking, copy) raises TypeError). Fix: "
            f"tj.to_device(x, {device!r}, non_blocking={dtype!r}) or pass a dtype"
        )
    if dtype is not None:
        dtypes.to_numpy_dtype(dtype)  # DTypeError for what is no dtype, as torch's parser
    if isinstance(device, str):
        _refuse_dtype_name(device)
    if device is None and dtype is not None:
        return KEEP, dtype, non_blocking, copy, copy_given
    return device, dtype, non_blocking, copy, copy_given


def _flag_or(non_blocking: Any, copy: Any) -> Any:
    """The third positional argument of ``.to(dtype, non_blocking, copy)``: ``copy``
    (``to_device``'s ``non_blocking`` slot), or the ``copy=`` keyword when it is not given."""
    if type(copy) is not bool:
        return copy  # refused by _check_flags, named as copy, with the value in its message
    if type(non_blocking) is not bool:
        return non_blocking  # refused by _check_flags with the value in its message
    return non_blocking or copy


def _check_flags(non_blocking: Any, copy: Any) -> None:
    for name, value in (("non_blocking", non_blocking), ("copy", copy)):
        if type(value) is not bool:
            raise ArgumentTypeError(
                f"to_device(): {name} must be a bool, not {type_name(value)} {value!r} "
                f"(torch's .to() raises TypeError). Fix: pass {name}=True or {name}=False"
            )


def _refuse_dtype_name(device: str) -> None:
    """A dtype's name in the device's place (``x.to("float16")``), which torch refuses."""
    try:
        Device(device)
    except InvalidDeviceError:
        pass
    else:
        return
    try:
        dtypes.to_numpy_dtype(device)
    except DTypeError:
        return  # neither: Device() says what is wrong with the device string
    raise InvalidDeviceError(
        f"Invalid device string: {device!r} is a dtype's name, not a device (torch's "
        f".to({device!r}) raises the same RuntimeError). Fix: tj.to_device(x, "
        f"dtype={device!r}), or pass the dtype itself (jnp.{device}, torch.{device})"
    )


def _is_dtype(value: Any) -> bool:
    """A dtype object or class where the device goes (``x.to(torch.float16)``); names
    are never dtypes there (torch reads a string as a device)."""
    if is_torch_dtype(value) or isinstance(value, np.dtype):
        return True
    if isinstance(value, type):
        try:
            dtypes.to_numpy_dtype(value)
        except DTypeError:
            return False
        return True
    return False


#: Python numbers, which ``to_device`` takes alone as 0-d arrays.
_NUMBERS = (bool, int, float, complex)

#: torch's memory formats: a rank they need (``None``: any), none of them an effect here.
_MEMORY_FORMATS = {
    "torch.preserve_format": None,
    "torch.contiguous_format": None,
    "torch.channels_last": 4,
    "torch.channels_last_3d": 5,
}


def check_memory_format_kind(memory_format: Any) -> None:
    """A ``memory_format`` that is none of torch's, refused as torch's parser refuses it:
    before anything else of the call is read."""
    if memory_format is None:
        return
    if type(memory_format).__name__ != "memory_format" or str(memory_format) not in _MEMORY_FORMATS:
        raise MemoryFormatError(
            f"to_device(): memory_format must be a torch.memory_format (torch.channels_last, "
            f"torch.contiguous_format, torch.preserve_format) or None, not "
            f"{type_name(memory_format)} {memory_format!r}"
        )


def check_memory_format(obj: Any, memory_format: Any) -> None:
    """torch's checks of ``memory_format=``, which changes nothing here.

    JAX arrays have no strides: XLA chooses each buffer's layout itself (on GPUs,
    channels-last for convolutions where that is faster), so every format gives the same
    arrays, as torch gives the same values.
    """
    check_memory_format_kind(memory_format)
    name = str(memory_format)
    rank = _MEMORY_FORMATS[name]
    single = is_array(obj) or type(obj) in _NUMBERS  # a bare number is a 0-d array
    if rank is not None and single and np.ndim(obj) != rank:
        raise MemoryFormatError(
            f"required rank {rank} tensor to use {name.removeprefix('torch.')} format, got a "
            f"{np.ndim(obj)}-d array (torch raises the same RuntimeError). Fix: pass "
            f"memory_format only for {rank}-d arrays (images), or drop it: JAX arrays have no "
            "strides, and XLA lays out every array itself"
        )
