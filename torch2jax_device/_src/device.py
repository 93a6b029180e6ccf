"""The device model: torch-style device specs, parsed lazily, resolved to ``jax.Device``.

``tj.device`` is the class ``tj.Device``, as ``torch.device`` is a class. Parsing
follows PyTorch exactly (same accepted strings, same rejections, same messages) and
never touches JAX, so ``tj.device("cuda")`` works on a machine without a GPU. Only
resolution (``tj.resolve``, ``Device.jax_device``, entering the device as a context)
asks JAX for the concrete device, and fails there with ``tj.DeviceUnavailableError`` if
it does not exist.
"""

from __future__ import annotations

import builtins
import re
import sys
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeGuard, TypeVar, Union

import jax
import numpy as np

from . import context, platforms
from .detect import import_torch, is_torch_device, is_torch_tensor
from .errors import (
    DeviceTypeError,
    DeviceUnavailableError,
    InvalidDeviceError,
    NoSuchAttributeError,
)
from .scopes import around_each_step

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["Device", "DeviceLike", "for_platform", "is_index", "resolve"]

_F = TypeVar("_F", bound=Callable[..., Any])

#: Anything that names a device: a ``Device``, a string such as ``"cuda:1"``, an
#: accelerator index, a ``jax.Device`` or a ``torch.device``.
DeviceLike = Union["Device", str, int, jax.Device, Any]

# PyTorch's grammar (c10/core/Device.cpp): ([a-zA-Z_]+)(?::([1-9]\d*|0))?, ASCII only.
_DEVICE_STRING = re.compile(r"([A-Za-z_]+)(?::(0|[1-9][0-9]*))?")
# torch reads the index of a device string with std::stoi (a C int) and an index argument
# as a C long long; it refuses anything larger (and then wraps what it kept to 16 bits,
# which tj does not: it keeps the index as written).
_MAX_STRING_INDEX = 2**31 - 1
_MAX_INDEX = 2**63 - 1
_KNOWN_TYPES = platforms.device_types()
_JAX_ONLY_TYPES = _KNOWN_TYPES[len(platforms.TORCH_DEVICE_TYPES) :]


class _NoIndex:
    """Marks "no index argument given", which torch tells apart from ``index=None``."""

    def __repr__(self) -> str:
        return "<no index>"


_NO_INDEX: Any = _NoIndex()


class Device:
    """Equivalent to `torch.device`.

    A torch-style device: a type (``"cuda"``, ``"cpu"``, ...) and an optional index.

    ``tj.device`` is this class, as ``torch.device`` is a class. It accepts what
    ``torch.device`` accepts and rejects what it rejects, plus the JAX platform names
    ``gpu``, ``tpu`` and ``rocm``, a ``jax.Device`` and a ``torch.device`` (torch is
    never imported for this). Construction never starts JAX; ``jax_device``
    resolves the device on this machine.

    The index is a GPU's CUDA ordinal (``local_hardware_id``), as in torch, so a
    process that owns only GPU 3 still calls it ``cuda:3``; other devices count this
    process's devices of one platform in ``jax.local_devices(backend=...)`` order. It is
    never JAX's global ``Device.id``. An unindexed device means the platform's current
    device (see [`tj.cuda.set_device`][torch2jax_device.cuda.set_device]), which is its
    lowest index until something sets it.

    A ``jax.Device`` becomes ``cuda:N``, ``tpu:N``, ... by its position; the CPU is
    ``cpu`` without an index, as torch reports CPU tensors, unless the process has
    several CPU devices (``JAX_NUM_CPU_DEVICES``), which are ``cpu:N``.

    A ``Device`` is immutable and hashable. Two ``Device`` objects are equal when type
    and index are (so ``device("cuda") != device("cuda:0")``, as in torch); a ``Device``
    equals a ``torch.device`` with the same type and index and a ``jax.Device`` it
    resolves to, so ``next(tj.parameters(model)).device == device`` works in ported
    code. It hashes as the equal ``torch.device`` does, so a dict or set keyed by torch
    devices finds it (``{p.device for p in ...}`` mixing both is one device). A
    ``jax.Device`` it equals hashes as JAX's: key a dict by ``device.jax_device`` when
    its keys are JAX's.

    It is neither a ``torch.device`` nor a ``jax.Device``: torch APIs take
    ``device.torch_device`` (``torch.zeros(3, device=device.torch_device)``,
    ``torch_module.to(device.torch_device)``), JAX APIs take ``device.jax_device``
    (``jax.device_put(x, device.jax_device)``), and torch2jax_device takes the device itself.
    As with ``torch.device``, it never equals a string: compare ``device.type``.

    Used in a ``with`` statement (or as a decorator) it is the default device for
    new JAX arrays, like ``with torch.device(...)``; see
    [`tj.set_default_device`][torch2jax_device.set_default_device].

    Examples:
        >>> import torch2jax_device as tj
        >>> tj.device("cuda:1")
        device(type='cuda', index=1)
        >>> tj.device("cuda", 1) == tj.device("cuda:1")
        True
        >>> str(tj.device("cpu"))
        'cpu'
        >>> import jax.numpy as jnp
        >>> with tj.device("cpu"):
        ...     x = jnp.zeros(3)
        >>> x.device == tj.device("cpu")
        True
    """

    __slots__ = ("_index", "_type")
    _type: str
    _index: int | None

    def __new__(cls, type: DeviceLike, index: int | None = _NO_INDEX) -> Device:
        """``tj.device(type, index)``: parse a device spec, exactly as ``torch.device`` does.

        Args:
            type: A device string (``"cuda:1"``), a device type when ``index`` is given,
                an int meaning that index of the current accelerator, a ``jax.Device``,
                a ``torch.device`` or a ``Device``.
            index: The device index when ``type`` has none.

        Raises:
            InvalidDeviceError: a malformed string or negative index (torch: RuntimeError).
            DeviceTypeError: an argument of the wrong Python type (torch: TypeError).
            DeviceUnavailableError: an int was given and there is no accelerator.
        """
        if index is not _NO_INDEX:
            return _from_type_and_index(type, index)
        if isinstance(type, Device):
            return type
        if isinstance(type, (str, bytes)):  # torch's argument parser takes bytes as a string
            return _parse(type)
        if is_index(type):
            return _from_accelerator_index(type)
        if isinstance(type, jax.Device):
            return _from_jax(type)
        if is_torch_device(type):
            return _from_type_and_index(type.type, type.index)
        _wrong_type("type", type)

    @classmethod
    def _make(cls, type: str, index: int | None) -> Device:
        self = object.__new__(cls)
        object.__setattr__(self, "_type", type)
        object.__setattr__(self, "_index", index)
        return self

    @property
    def type(self) -> str:
        """The device type, e.g. ``"cuda"``."""
        return self._type

    @property
    def index(self) -> int | None:
        """The device index, or ``None`` for "the current device of this type"."""
        return self._index

    @property
    def jax_device(self) -> jax.Device:
        """The concrete ``jax.Device`` this names on this machine (see
        [`tj.resolve`][torch2jax_device.resolve]): what JAX APIs take.

        ``jax.device_put(x, device.jax_device)``, ``jnp.zeros(3, device=device.jax_device)``.
        """
        return self._resolve()

    @property
    def torch_device(self) -> Any:
        """The ``torch.device`` for the same hardware: what torch APIs take (needs torch).

        ``torch.zeros(3, device=device.torch_device)``, ``tensor.to(device.torch_device)``,
        ``torch_module.to(device.torch_device)``. Never starts JAX; ``gpu`` and ``rocm``
        become ``cuda`` (PyTorch's name for every GPU).

        Raises:
            DeviceUnavailableError: torch has no device type for this platform (TPU).
            MissingFrameworkError: torch is not installed.

        Examples:
            >>> import torch, torch2jax_device as tj
            >>> device = tj.device("cuda:1")
            >>> device.torch_device
            device(type='cuda', index=1)
            >>> torch.zeros(2, device=tj.device("cpu").torch_device).device
            device(type='cpu')
        """
        torch_type = platforms.torch_type_of(self._type)
        if torch_type is None:
            raise DeviceUnavailableError(
                f"torch has no device type for {self}: PyTorch cannot place tensors on it "
                "(a TPU needs torch_xla). Fix: keep this data in JAX, or move it to the CPU "
                "for torch with tj.to_torch(x, 'cpu')"
            )
        torch = import_torch(f"tj.device({str(self)!r}).torch_device")
        return torch.device(torch_type, self._index)

    def __str__(self) -> str:
        return self._type if self._index is None else f"{self._type}:{self._index}"

    def __repr__(self) -> str:
        if self._index is None:
            return f"device(type='{self._type}')"
        return f"device(type='{self._type}', index={self._index})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Device):
            return (self._type, self._index) == (other._type, other._index)
        if isinstance(other, jax.Device):
            try:
                return bool(self._resolve() == other)
            except DeviceUnavailableError:
                return False
        if is_torch_device(other):
            return (self._type, self._index) == (other.type, other.index)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        # torch's own hash, so that an equal torch.device finds the same dict entry and
        # set member. (A jax.Device it equals hashes as JAX's: key by one kind.)
        number = platforms.TORCH_DEVICE_TYPE_NUMBERS.get(self._type)
        if number is None:
            return hash((self._type, self._index))
        index = -1 if self._index is None else self._index
        return number << 16 | index & 0xFF

    if not TYPE_CHECKING:  # for type checkers a Device has only the attributes it defines

        def __getattr__(self, name: str) -> NoReturn:
            # Only reached for attributes a Device lacks: JAX reading a jax.Device or
            # Sharding attribute (``_is_concrete``, ``platform``...) from a tj.device passed
            # to a JAX API, or ported JAX code calling ``device.platform``.
            if name.startswith("__"):
                raise AttributeError(name)
            raise NoSuchAttributeError(
                f"tj.device({str(self)!r}) has no attribute {name!r}: it is a torch-style device, "
                "not a jax.Device or Sharding, so JAX APIs cannot take it directly. Fix: pass "
                "device.jax_device to JAX (jax.device_put(x, device.jax_device), "
                "jnp.zeros(3, device=device.jax_device)) and device.torch_device to torch, or "
                "move data with tj.to_device(x, device)."
            )

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"tj.device is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"tj.device is immutable: cannot delete {name!r}")

    def __reduce__(self) -> tuple[builtins.type[Device], tuple[str, int | None]]:
        return (Device, (self._type, self._index))

    def __enter__(self) -> Device:
        context.push_default(self._resolve(), self)
        return self

    def __exit__(
        self,
        exc_type: builtins.type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        context.pop_default()

    def __call__(self, func: _F) -> _F:
        """Run ``func`` with this device as the default device (decorator form).

        A generator function runs each step (each ``next``, ``send`` and ``throw``) with
        it, and its caller's code between steps without it. An ``async`` function is
        refused: the default would hold across its awaits, in every other task.

        Raises:
            ArgumentTypeError: ``func`` is an ``async def`` function.

        Examples:
            >>> import jax.numpy as jnp
            >>> import torch2jax_device as tj
            >>> @tj.device("cpu")
            ... def batches():
            ...     yield jnp.zeros(2)
            >>> tj.device_of(next(batches()))
            device(type='cpu')
        """
        return around_each_step(func, lambda: self, f"@tj.device({str(self)!r})")

    def _resolve(self) -> jax.Device:
        """The one resolver: every spec becomes a ``jax.Device`` here and nowhere else."""
        if self._type == "meta":
            raise DeviceUnavailableError(
                f"Device '{self}' has no JAX equivalent. Fix: "
                f"{platforms.missing_platform_hint('meta')}."
            )
        platform, by_index = _serving_platform(self._type)
        if not by_index:
            raise DeviceUnavailableError(
                f"Device '{self}' is not available: JAX has no "
                f"{' or '.join(platforms.platforms_for_type(self._type)) or self._type} "
                f"backend on this machine (it has: {_inventory()}). "
                f"Fix: {platforms.missing_platform_hint(self._type)}."
            )
        index = self._index
        if index is None:
            current = context.current_index(platform)
            index = min(by_index) if current is None else current
        if platform == "cpu" and list(by_index) == [0]:
            # torch has one CPU device and ignores a CPU index ("cpu:1" is the CPU); so does
            # a process with one. Simulated CPU devices (JAX_NUM_CPU_DEVICES) are told apart.
            return by_index[0]
        if index not in by_index:
            raise DeviceUnavailableError(
                f"Device '{self._type}:{index}' does not exist: JAX sees {len(by_index)} "
                f"{platform} device(s) in this process ({_span(self._type, by_index)}). "
                "Fix: use one of those indices"
                + (
                    ", or simulate more CPU devices with JAX_NUM_CPU_DEVICES=N set "
                    "before JAX starts"
                    if platform == "cpu"
                    else ""
                )
                + "."
            )
        return by_index[index]


def resolve(spec: DeviceLike | None = None) -> jax.Device:
    """The concrete ``jax.Device`` a spec names on this machine.

    ``None`` means the current default device (see
    [`tj.get_default_device`][torch2jax_device.get_default_device]). Starts JAX's
    backends if they are not running yet.

    Raises:
        DeviceUnavailableError: the platform or the index does not exist here; the
            message lists what does and how to get the missing device.

    Examples:
        >>> import torch2jax_device as tj
        >>> tj.resolve("cpu:0")
        CpuDevice(id=0)
        >>> tj.resolve("cpu") == tj.device("cpu")
        True
    """
    if spec is None:
        target = context.default_target()
        return target if target is not None else platforms.jax_default_device()
    if isinstance(spec, jax.Device):
        return spec
    return Device(spec)._resolve()


def for_platform(platform: str, spec: DeviceLike | None, what: str) -> Device:
    """The device a ``torch.cuda``-style ``device`` argument names on ``platform``.

    ``None`` is the current device, an int an index, anything else must name a device of
    ``platform`` (torch raises ``ValueError`` for a CPU device given to a ``torch.cuda`` function,
    and so does this, through [`InvalidDeviceError`][torch2jax_device.InvalidDeviceError]). Resolve
    the result with [`Device.jax_device`][torch2jax_device.Device.jax_device].
    """
    device_type = platforms.device_type_of(platform)
    if spec is None:
        return Device._make(device_type, None)
    if isinstance(spec, int) and not isinstance(spec, bool):
        if spec < 0:
            raise InvalidDeviceError(_negative_index(spec))
        return Device._make(device_type, spec)
    named = Device(spec)
    if platform not in platforms.platforms_for_type(named.type):
        raise InvalidDeviceError(f"Expected a {what} device, but got: {named}")
    return named


# torch's messages for a device string it cannot read, then how to write one.
_SPELLING_FIX = "Fix: write a device type and an optional index, as 'cpu', 'cuda' or 'cuda:0'"


def _parse(spec: str | bytes) -> Device:
    text = _decoded(spec)
    if not text:
        raise InvalidDeviceError(f"Device string must not be empty. {_SPELLING_FIX}")
    match = _DEVICE_STRING.fullmatch(text)
    if match is None:
        raise InvalidDeviceError(f"Invalid device string: '{_shortened(text)}'. {_SPELLING_FIX}")
    device_type, index_text = match.groups()
    # Digits are counted before int() reads them: Python refuses over 4300 digits.
    if index_text is not None and (
        len(index_text) > len(str(_MAX_STRING_INDEX)) or int(index_text) > _MAX_STRING_INDEX
    ):
        raise InvalidDeviceError(
            f"Could not parse device index '{_shortened(index_text)}' in device string "
            f"'{_shortened(text)}': the largest index a device string can hold is "
            f"{_MAX_STRING_INDEX} (2**31 - 1)"
        )
    if device_type not in _KNOWN_TYPES:
        raise InvalidDeviceError(
            f"Expected one of {', '.join(platforms.TORCH_DEVICE_TYPES)} device type (or a "
            f"JAX platform: {', '.join(_JAX_ONLY_TYPES)}) at start of device "
            f"string: {device_type}"
        )
    if device_type == "mkldnn":  # torch's warning, word for word
        warnings.warn(
            "'mkldnn' is no longer used as device type. So torch.device('mkldnn') will be "
            "deprecated and removed in the future. Please use other valid device types "
            "instead.",
            UserWarning,
            stacklevel=3,
        )
    return Device._make(device_type, None if index_text is None else int(index_text))


def _from_type_and_index(device_type: object, index: object) -> Device:
    if not isinstance(device_type, (str, bytes)):
        _wrong_type("type", device_type)
    if _is_integer_scalar_tensor(index):  # torch reads a 0-d integer tensor as its value
        index = int(index)
    if index is not None and not is_index(index):
        _wrong_type("index", index)
    number = None if index is None else _checked_index(index)
    parsed = _parse(device_type)
    if parsed.index is not None:
        raise InvalidDeviceError(
            "type (string) must not include an index because index was passed "
            f"explicitly: {_shortened(_decoded(device_type))}"
        )
    return Device._make(parsed.type, number)


def _is_integer_scalar_tensor(value: object) -> TypeGuard[Any]:
    """A 0-d torch tensor of an integer dtype: ``torch.device("cuda", torch.tensor(1))``."""
    return (
        is_torch_tensor(value)
        and value.ndim == 0
        and not value.dtype.is_floating_point
        and not value.dtype.is_complex
        and value.dtype is not sys.modules["torch"].bool
    )


def _from_accelerator_index(index: Any) -> Device:
    number = _checked_index(index)
    for platform in platforms.ACCELERATORS:
        if platforms.local_devices(platform):
            return Device._make(platforms.device_type_of(platform), number)
    raise DeviceUnavailableError(
        f"Cannot access accelerator device when none is available: tj.device({number}) "
        f"means index {number} of the current accelerator, and JAX has none here (it has: "
        f"{_inventory()}). Fix: name the device, e.g. tj.device('cpu'), or "
        f"{platforms.missing_platform_hint('cuda')}."
    )


def is_index(value: object) -> bool:
    """Whether torch takes ``value`` as a device index: an int or a NumPy integer, no bool."""
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, np.integer)


def _checked_index(index: Any) -> int:
    """``index`` as an int, within the range torch accepts for an index argument."""
    number = int(index)
    if number < 0 and number >= -_MAX_INDEX - 1:
        raise InvalidDeviceError(_negative_index(number))
    if not -_MAX_INDEX - 1 <= number <= _MAX_INDEX:
        raise InvalidDeviceError(
            f"Device index {_integer_text(number)} is out of range: torch reads an index "
            f"as a 64-bit integer, so it must be between 0 and {_MAX_INDEX} (2**63 - 1)"
        )
    return number


def _decoded(spec: str | bytes) -> str:
    if isinstance(spec, str):
        return spec
    try:
        return spec.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidDeviceError(
            f"Device string {_shortened(repr(spec))} is not UTF-8 ({error.reason} at byte "
            f"{error.start}); torch decodes bytes as UTF-8 too. {_SPELLING_FIX}"
        ) from None


def _negative_index(number: int) -> str:
    """torch's message for a negative index, then the index given and the fix."""
    return (
        f"Device index must not be negative, got {number}. Fix: give an index from 0, "
        "or no index for the current device ('cuda', tj.device('cuda'))"
    )


def _integer_text(number: int) -> str:
    """``number`` in decimal, or its size when Python would refuse to print it."""
    if number.bit_length() <= 256:
        return str(number)
    sign = "a negative" if number < 0 else "an"
    return f"({sign} integer of {number.bit_length()} bits)"


def _shortened(text: str, limit: int = 80) -> str:
    """``text``, cut in the middle when longer than ``limit`` characters."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}...{text[-half:]} ({len(text)} characters)"


def _from_jax(device: jax.Device) -> Device:
    platform = platforms.platform_of(device)
    index = platforms.device_index(device)
    if index is None:
        raise DeviceUnavailableError(
            f"{device!r} belongs to JAX process {device.process_index}, not to this one: "
            "torch-style devices name this process's devices only. Fix: use "
            "jax.local_devices() to pick a device of this process."
        )
    if platform == "cpu" and len(platforms.local_devices(platform)) == 1:
        # torch's CPU is one unindexed device; so is JAX's unless more are simulated.
        return Device._make("cpu", None)
    return Device._make(platforms.device_type_of(platform), index)


def _serving_platform(device_type: str) -> tuple[str, dict[int, jax.Device]]:
    """The first platform serving ``device_type``, with its devices by torch-style index."""
    candidates = platforms.platforms_for_type(device_type)
    for platform in candidates:
        by_index = platforms.device_indices(platform)
        if by_index:
            return platform, by_index
    return (candidates[0] if candidates else device_type), {}


def _span(device_type: str, by_index: dict[int, jax.Device]) -> str:
    indices = sorted(by_index)
    if len(indices) > 1 and indices == list(range(indices[0], indices[-1] + 1)):
        return f"{device_type}:{indices[0]} to {device_type}:{indices[-1]}"
    return ", ".join(f"{device_type}:{index}" for index in indices)


def _inventory() -> str:
    """What this process has, e.g. ``"cpu (4 devices)"``."""
    parts = []
    for platform in platforms.available_platforms():
        count = len(platforms.local_devices(platform))
        parts.append(f"{platform} ({count} device{'s' if count != 1 else ''})")
    return ", ".join(parts) or "no devices"


def _wrong_type(argument: str, value: object) -> NoReturn:
    value_type = builtins.type(value)
    name = (
        value_type.__qualname__
        if value_type.__module__ == "builtins"
        else f"{value_type.__module__.split('.')[0]}.{value_type.__qualname__}"
    )
    raise DeviceTypeError(
        f"device(): argument '{argument}' must be "
        f"{'str' if argument == 'type' else 'int'}"
        f"{', int, jax.Device or torch.device' if argument == 'type' else ''}, "
        f"not {name}"
    )
