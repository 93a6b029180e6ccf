"""Torch's placement discipline on demand: data moves only where the program says so.

PyTorch never moves a tensor behind your back: an operation on tensors of two devices
raises ``Expected all tensors to be on the same device``, and a CPU tensor never lands
on the GPU by itself. JAX moves data implicitly: host data passed to a jitted function
goes to its device, an uncommitted array follows a committed one to another device, and
inputs committed to the CPU keep a jitted step on the CPU of a GPU machine
(emfdavid/insitubatch#88). ``strict_placement`` brings torch's rule back where asked.

JAX's own mechanism, the transfer guard, cannot carry the rule alone (jax 0.10.2): its
host-to-device guard also fires for every Python scalar (``x + 1``), ``jnp.zeros``, index
constants and random seeds (jax#16002, #18436, #26425), so it is never used here; its
device-to-device guard catches uncommitted arrays meeting, but also fires for JAX's own
moves (``jnp.zeros(n, device=d)`` for a non-default ``d``, built on the default device
first, jax#25396; indexing a sharded array), so it is opt-in (``transfer_guard=True``).
The dependable part is checking what enters a function: that is what a decorated
function does.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any, TypeVar, overload

import jax

from . import context, platforms
from .detect import is_nnx_module, is_torch_module
from .device import Device
from .errors import MixedDeviceError
from .location import Placements
from .scopes import around_each_step
from .truth import truth

__all__ = [
    "CpuComputationWarning",
    "StrictPlacement",
    "set_strict_placement",
    "strict_placement",
]

_F = TypeVar("_F", bound=Callable[..., Any])

_FIX = (
    "Fix: move the data explicitly first, e.g. batch = tj.to_device(batch, device) "
    "(explicit moves, tj.to_device and jax.device_put, are allowed under strict placement)"
)


class CpuComputationWarning(UserWarning):
    """A computation runs on the CPU although the default device is an accelerator.

    JAX runs a jitted function where its committed inputs are: arrays committed to the
    CPU (``jnp.from_dlpack`` of host data, ``tj.to_device(x, "cpu")``) keep it on the
    CPU of a GPU machine, silently and slowly.

    Examples:
        Raised by functions decorated with
        [`tj.strict_placement`][torch2jax_device.strict_placement]; to make it an error:

        >>> import warnings
        >>> import torch2jax_device as tj
        >>> warnings.simplefilter("error", tj.CpuComputationWarning)
        >>> warnings.resetwarnings()
    """


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.guards: list[Any] = []  # JAX transfer-guard contexts entered, innermost last


_thread = _ThreadState()
_LIBRARIES = tuple(
    os.path.dirname(os.path.abspath(module.__file__ or ""))
    for module in (jax, sys.modules["jaxlib"], sys.modules[__package__.rpartition(".")[0]])
)


class StrictPlacement:
    """A strict-placement scope: a context manager, and a decorator for functions.

    Made by [`tj.strict_placement`][torch2jax_device.strict_placement].

    Examples:
        >>> import jax.numpy as jnp
        >>> import torch2jax_device as tj
        >>> with tj.strict_placement() as scope:
        ...     total = jnp.ones(3) + tj.to_device(jnp.ones(3), "cpu")
        >>> isinstance(scope, tj.StrictPlacement), float(total.sum())
        (True, 6.0)
    """

    def __init__(self, *, transfer_guard: bool = False) -> None:
        self.transfer_guard = truth("tj.strict_placement()", "transfer_guard", transfer_guard)

    def __enter__(self) -> StrictPlacement:
        if self.transfer_guard:
            guard = jax.transfer_guard_device_to_device("disallow")
            guard.__enter__()
            _thread.guards.append(guard)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.transfer_guard:
            _thread.guards.pop().__exit__(None, None, None)
        if exc is not None:
            error = _torch_style(exc)
            if error is not None:
                raise error from exc

    def __call__(self, func: _F) -> _F:
        """``func`` checked on every call; its body runs in this scope (a generator's,
        step by step; an ``async`` function is refused)."""

        def check(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            # Frames: check <- around_each_step's wrapper <- the caller.
            _check_arguments(func, args, kwargs, sys._getframe(2))

        return around_each_step(func, lambda: self, "@tj.strict_placement", check)


@overload
def strict_placement(func: _F, /) -> _F: ...
@overload
def strict_placement(*, transfer_guard: bool = False) -> StrictPlacement: ...
def strict_placement(
    func: Callable[..., Any] | None = None, /, *, transfer_guard: bool = False
) -> Any:
    """Torch's placement discipline: implicit transfers raise torch's "same device" error.

    Used as a decorator (``@tj.strict_placement`` or ``@tj.strict_placement()``), on a
    training step for example, each call first checks its arguments as torch checks
    the operands of an operation: every array (JAX arrays, torch tensors, NumPy arrays,
    the state of NNX and torch modules in the arguments) must be on one device, where
    host data (NumPy, CPU tensors) is on ``cpu``. Python numbers, 0-d host values and
    uncommitted 0-d JAX arrays are exempt, as torch exempts 0-d CPU tensors. Otherwise
    it raises
    [`tj.MixedDeviceError`][torch2jax_device.MixedDeviceError] with torch's message
    (``Expected all tensors to be on the same device, but found at least two devices,
    cuda:0 and cpu!``), the argument path on each device, the line of the call and the
    fix. It warns ([`tj.CpuComputationWarning`][torch2jax_device.CpuComputationWarning])
    when arrays committed to the CPU would run the call on the CPU although the
    default device is an accelerator.

    Used as a context manager (``with tj.strict_placement():``) or around a decorated
    function's body, JAX's errors about devices meeting that leave the block become
    ``MixedDeviceError`` with torch's message and the line that moved the data:
    arrays committed to two devices (JAX's ``Received incompatible devices``) and, with
    ``transfer_guard=True``, uncommitted arrays that JAX would move silently to another
    device (JAX's device-to-device transfer guard). Explicit moves stay allowed:
    [`tj.to_device`][torch2jax_device.to_device] and ``jax.device_put``.

    Equivalent to PyTorch's behaviour everywhere; see
    [`tj.set_strict_placement`][torch2jax_device.set_strict_placement] for the
    process-wide switch.

    Args:
        func: The function to decorate (the bare ``@tj.strict_placement`` form).
        transfer_guard: Also turn on JAX's device-to-device transfer guard inside the
            scope (this thread). It catches uncommitted arrays meeting arrays on another
            device, and also fires for moves JAX makes itself: creating an array with
            ``device=`` other than the default device (create it under
            ``with tj.device(d):`` instead) and indexing a sharded array.

    Returns:
        The decorated function, or a [`StrictPlacement`][torch2jax_device.StrictPlacement]
        scope (a context manager and decorator).

    Note:
        Host data inside the block is not checked: JAX's host-to-device guard cannot
        tell a NumPy batch from the Python scalar of ``x + 1`` (jax#16002, #18436), so
        host data is checked where it enters a decorated function.

    Examples:
        >>> import jax, jax.numpy as jnp, numpy as np
        >>> import torch2jax_device as tj
        >>> @tj.strict_placement
        ... def step(params, batch):
        ...     return (params["w"] * batch).sum()
        >>> params = {"w": tj.to_device(jnp.ones(3), "cpu")}
        >>> float(step(params, tj.to_device(np.ones(3, np.float32), "cpu")))
        3.0
    """
    scope = StrictPlacement(transfer_guard=transfer_guard)
    return scope if func is None else scope(func)


def set_strict_placement(enabled: bool) -> None:
    """Turn JAX's device-to-device transfer guard on or off for the whole process.

    The process-wide half of [`tj.strict_placement`][torch2jax_device.strict_placement]:
    in every thread (loader threads included), an uncommitted array that JAX would
    move silently to the device of the arrays it meets makes the operation fail. Where
    the error leaves a ``tj.strict_placement`` block or decorated function it is
    [`tj.MixedDeviceError`][torch2jax_device.MixedDeviceError] with torch's message and
    the line; elsewhere it is JAX's own ``JaxRuntimeError`` ("Disallowed device-to-device
    transfer", a ``RuntimeError``) at that line. Explicit moves stay allowed. JAX's own
    moves are refused too (``jnp.zeros(n, device=d)`` for a non-default ``d``, indexing
    a sharded array): see ``transfer_guard`` in ``tj.strict_placement``.

    Args:
        enabled: ``True`` to refuse implicit device-to-device transfers, ``False`` to
            allow them again (JAX's default).

    Examples:
        >>> import torch2jax_device as tj
        >>> tj.set_strict_placement(True)
        >>> tj.set_strict_placement(False)
    """
    enabled = truth("tj.set_strict_placement()", "enabled", enabled)
    jax.config.update("jax_transfer_guard_device_to_device", "disallow" if enabled else "allow")


def _check_arguments(
    func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], caller: FrameType
) -> None:
    """torch's rule on a call's arguments, and the CPU-fallback warning."""
    trees = [_arrays_of(arg) for arg in args] + [_arrays_of(arg) for arg in kwargs.values()]
    prefixes = [f"args[{i}]" for i in range(len(args))] + [f"{name}=" for name in kwargs]
    placements = Placements(trees, prefixes, host_is_cpu=True)
    if len(placements.devices) > 1:
        raise placements.mixed_error(_where(func, caller), _FIX)
    if placements.committed_platforms != {"cpu"}:  # no CPU fallback to warn about
        return
    default = context.default_target() or platforms.jax_default_device()
    if pins_to_cpu(placements.committed_platforms, default.platform):
        where = _where(func, caller)
        warnings.warn(
            f"{func.__qualname__} runs on the CPU although the default device is "
            f"{Device(default)}: its arrays are committed to the CPU, and JAX runs a "
            f"computation where its committed inputs are ({where}). Fix: move them to "
            f"the accelerator with tj.to_device(x, '{Device(default)}')",
            CpuComputationWarning,
            stacklevel=3,
        )


def _where(func: Callable[..., Any], caller: FrameType) -> str:
    """The call, for messages: built only when one is raised (it reads the source line)."""
    return f"arguments of {func.__qualname__}, called at {_describe(caller)}"


def pins_to_cpu(input_platforms: set[str], default_platform: str) -> bool:
    """Whether committed inputs on ``input_platforms`` keep a computation off the accelerator."""
    return input_platforms == {"cpu"} and default_platform != "cpu"


def _arrays_of(value: Any) -> Any:
    """What holds the arrays of an argument: a module's state, or the value itself."""
    if is_nnx_module(value):
        return sys.modules["flax.nnx"].state(value)
    if is_torch_module(value):
        return list(value.state_dict(keep_vars=True).values())
    return value


# JAX 0.10's messages: "... with device ids [0] on platform CPU and argument y ... with
# device ids [1] on platform CPU"; "Disallowed device-to-device transfer: aval=...,
# sharding=SingleDeviceSharding(device=CpuDevice(id=1), ...), dst_sharding=...(id=0)...".
# A device id alone names no device: ids repeat across backends (GPU 0 and CPU 0), so
# each is read with its platform ("CPU", "GPU") or its class ("CpuDevice", "CudaDevice").
_INCOMPATIBLE = "Received incompatible devices for jitted computation"
_DEVICE_IDS = re.compile(r"device ids \[([0-9, ]+)\] on platform (\w+)")
_DISALLOWED_D2D = "Disallowed device-to-device transfer"
_SOURCE = re.compile(r"(?<![a-z_])sharding=\w+\(device=(\w+)\(id=(\d+)")
_DESTINATION = re.compile(r"dst_sharding=\w+\(device=(\w+)\(id=(\d+)")


def _torch_style(exc: BaseException) -> MixedDeviceError | None:
    """torch's error for JAX's "devices meet" errors; ``None`` for anything else."""
    message = str(exc)
    where = _describe_traceback(exc.__traceback__)
    if isinstance(exc, ValueError) and _INCOMPATIBLE in message:
        named = [
            (platform, int(ids.split(",")[0])) for ids, platform in _DEVICE_IDS.findall(message)
        ]
        return _same_device_error(named, f"arrays committed to different devices met at {where}")
    if isinstance(exc, RuntimeError) and _DISALLOWED_D2D in message:
        source, destination = _SOURCE.search(message), _DESTINATION.search(message)
        if source is None or destination is None:
            return MixedDeviceError(
                f"JAX moved an array it made itself to another device at {where} ({message}). "
                "Strict placement's transfer guard cannot tell this from an implicit move: "
                "jnp creation functions given device= other than the default device build "
                "the array on the default device first (jax#25396), and indexing a sharded "
                "array moves index constants. Fix: create the array under "
                "`with tj.device(d):`, or run this code without transfer_guard=True"
            )
        named = [
            (destination.group(1), int(destination.group(2))),
            (source.group(1), int(source.group(2))),
        ]
        return _same_device_error(
            named, f"an uncommitted array on the second device would have moved at {where}"
        )
    return None


def _same_device_error(named: list[tuple[str, int]], what: str) -> MixedDeviceError:
    """torch's message for the devices JAX's message names as (platform or class, id)."""
    devices = _local_devices()
    names = [_name(kind, device_id, devices) for kind, device_id in named[:2]]
    while len(names) < 2:
        names.append("another device")
    return MixedDeviceError(
        f"Expected all tensors to be on the same device, but found at least two devices, "
        f"{names[0]} and {names[1]}! ({what}). {_FIX}"
    )


def _local_devices() -> list[tuple[jax.Device, Device]]:
    """Every device of this process, of every backend, with its torch-style name."""
    return [
        (device, Device(device))
        for platform in platforms.jax_backends()
        for device in platforms.local_devices(platform)
    ]


def _name(kind: str, device_id: int, devices: list[tuple[jax.Device, Device]]) -> str:
    """The torch-style name of the device a JAX message calls ``kind`` and ``device_id``.

    ``kind`` is a platform as JAX's messages spell it (``CPU``, ``GPU``) or a device's
    class (``CpuDevice``, ``CudaDevice``); a device of another process has no local name.
    """
    kind = kind.lower()
    for device, named in devices:
        if device.id == device_id and kind in (
            device.platform,
            repr(device).partition("(")[0].lower(),
        ):
            return str(named)
    return f"JAX device id {device_id} ({kind})"


def _describe_traceback(traceback: TracebackType | None) -> str:
    """The deepest frame of the traceback in the user's code: where the data moved."""
    found = "an unknown line"
    while traceback is not None:
        if not _in_libraries(traceback.tb_frame):
            found = _describe(traceback.tb_frame, traceback.tb_lineno)
        traceback = traceback.tb_next
    return found


def _in_libraries(frame: FrameType) -> bool:
    return os.path.abspath(frame.f_code.co_filename).startswith(_LIBRARIES)


def _describe(frame: FrameType, line: int | None = None) -> str:
    """``file.py:12 (in step): y = x + other``."""
    line = frame.f_lineno if line is None else line
    filename = frame.f_code.co_filename
    source = linecache.getline(filename, line).strip()
    return f"{filename}:{line} (in {frame.f_code.co_name})" + (f": {source}" if source else "")
