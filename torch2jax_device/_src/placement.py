"""``Tensor.to`` / ``Module.to`` for JAX: move arrays, trees and modules between devices.

Everything a mixed torch + JAX codebase passes to ``to_device()`` goes through one
path: the tree is flattened once (``._trees``), each leaf is made a JAX array
(torch tensors zero-copy through DLPack, NumPy on the host), dtypes are applied, and
every leaf that must move travels in **one** batched ``jax.device_put``. Leaves that
already sit committed on the target are returned as the very same objects, as
``x.to(x.device) is x`` in torch.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import numpy as np

from . import dtypes
from .detect import is_nnx_module, is_torch_dtype, is_torch_tensor, is_tracer
from .device import Device, DeviceLike, resolve
from .distributed import transfer
from .errors import (
    ConversionError,
    DTypeError,
    EmptyTreeError,
    InvalidDeviceError,
    MixedDeviceError,
)
from .interop import to_jax
from .trees import flatten

__all__ = ["as_sharding", "check_same_device", "device_of", "parameters", "to_device"]

_PYTHON_SCALARS = (bool, int, float, complex)
_ARRAY_PROTOCOLS = ("__jax_array__", "__array__", "__dlpack__", "__cuda_array_interface__")


class _Keep:
    """The ``.to(dtype)`` form: every array stays where it is."""


_KEEP = _Keep()


def to_device(
    obj: Any,
    device: Any = None,
    dtype: Any = None,
    *,
    non_blocking: bool = False,
    copy: bool = False,
) -> Any:
    """Move arrays, trees of arrays or a Flax NNX module to a device: ``x.to(device)``.

    Every array leaf (``jax.Array``, ``np.ndarray``, ``torch.Tensor``) comes back as a
    JAX array **committed** to the device, so jitted code runs there, as torch code
    runs where its tensors are. Containers keep their types (dict, ``OrderedDict``,
    ``defaultdict`` with its factory, list, tuple, namedtuple, dataclass,
    ``FrozenDict``, optax states, any registered pytree); other leaves (strings,
    ``None``, Python numbers used as configuration) pass through unchanged. A bare
    Python number becomes a 0-d array. All transfers happen in one batched
    ``jax.device_put``. The input is never mutated, except a Flax NNX module, which
    moves in place and is returned, like ``Module.to``.

    As in torch, when nothing needs to change the very same object is returned and
    nothing is transferred; ``copy=True`` always gives fresh buffers.

    The torch overloads work too: ``to_device(x, jnp.float16)`` and
    ``to_device(x, dtype=jnp.float16)`` are ``x.to(dtype)`` (arrays stay where they
    are; host data goes to the CPU device), ``to_device(x, other)`` is ``x.to(other)``
    (other's device and dtype).

    Args:
        obj: An array, tensor, Python number, container of them, or NNX module.
        device: Anything [`tj.device`][torch2jax_device.Device] accepts, a
            ``jax.sharding.Sharding`` (to split arrays over devices), a dtype (the ``.to(dtype)``
            form) or an array (the ``.to(other)`` form). ``None`` means the current default device
            ([`tj.get_default_device`][torch2jax_device.get_default_device]), unless only ``dtype``
            is given.
        dtype: A JAX/NumPy dtype, its name or a ``torch.dtype``. A single array is
            cast whatever its dtype; in a container or module only floating-point and
            complex leaves are cast, as ``Module.to`` does.
        non_blocking: Return at once, while transfers run (JAX transfers are
            asynchronous); ``False`` returns once the data is on the device.
        copy: Always copy, even when nothing else changes (``Tensor.to(copy=True)``).

    Returns:
        The same structure with array leaves on the device (the module itself for NNX).

    Raises:
        DeviceUnavailableError: the device does not exist here.
        DTypeError: JAX does not know ``dtype``.
        ConversionError: a leaf looks like an array but cannot be converted, or was
            deleted or donated; the message names the leaf path.

    Warns:
        DtypeNarrowingWarning: once per dtype, when 64-bit data becomes 32-bit.

    Note:
        Under ``jax.jit`` arrays are tracers without a device: ``to_device`` applies
        the dtype and leaves placement to JAX (placement inside ``jit`` follows the
        inputs' shardings).

    Examples:
        >>> import jax.numpy as jnp, numpy as np
        >>> import torch2jax_device as tj
        >>> batch = {"ids": np.arange(4, dtype=np.int32), "name": "train"}
        >>> moved = tj.to_device(batch, "cpu")
        >>> moved["ids"].device == tj.device("cpu"), moved["name"]
        (True, 'train')
        >>> tj.to_device(moved, "cpu")["ids"] is moved["ids"]
        True
    """
    device, dtype = _torch_overloads(device, dtype)
    if is_nnx_module(obj):
        return _move_module(obj, device, dtype, non_blocking=non_blocking, copy=copy)
    single = _is_array(obj) or isinstance(obj, _PYTHON_SCALARS)
    flat = flatten(obj)
    moved, fresh = _move(
        obj,
        flat.leaves,
        _target(device),
        None if dtype is None else dtypes.canonical(dtypes.to_numpy_dtype(dtype)),
        cast_all=single,
        convert_scalars=single,
        copy=copy,
    )
    if not non_blocking:
        jax.block_until_ready(fresh)
    return flat.rebuild(moved)


def _torch_overloads(device: Any, dtype: Any) -> tuple[Any, Any]:
    """Map ``.to(dtype)`` and ``.to(other)`` onto (device, dtype)."""
    if _is_array(device):
        other = device
        if dtype is None:
            dtype = other.dtype
        return (device_of(other) or _KEEP), dtype
    if dtype is None and device is not None and _is_dtype(device):
        return _KEEP, device
    if device is None and dtype is not None:
        return _KEEP, dtype
    return device, dtype


def _is_dtype(value: Any) -> bool:
    if is_torch_dtype(value) or isinstance(value, np.dtype):
        return True
    if isinstance(value, str):
        try:
            Device(value)
        except InvalidDeviceError:
            pass
        else:
            return False
    if isinstance(value, (str, type)):
        try:
            dtypes.to_numpy_dtype(value)
        except DTypeError:
            return False
        return True
    return False


def as_sharding(target: DeviceLike | jax.sharding.Sharding | None) -> jax.sharding.Sharding:
    """Where arrays sent to ``target`` end up: a sharding as it is, else the resolved device.

    ``None`` means the calling thread's default device.
    """
    if isinstance(target, jax.sharding.Sharding):
        return target
    return jax.sharding.SingleDeviceSharding(resolve(target))


def _target(device: Any) -> Any:
    """The sharding leaves must end up with, or ``_KEEP``."""
    return device if device is _KEEP else as_sharding(device)


def _is_array(value: Any) -> bool:
    return isinstance(value, (jax.Array, np.ndarray, np.generic)) or is_torch_tensor(value)


def _move(
    tree: Any,
    leaves: list[Any],
    target: Any,
    dtype: np.dtype[Any] | None,
    *,
    cast_all: bool,
    convert_scalars: bool,
    copy: bool,
) -> tuple[list[Any], list[jax.Array]]:
    """The new leaves, and the arrays made here (to wait for unless non_blocking)."""
    moved = list(leaves)
    fresh: list[jax.Array] = []
    pending: list[int] = []
    placing = target is not _KEEP
    # NumPy leaves join the batched transfer directly, except into host memory kinds,
    # where JAX could alias their buffers (pin_memory promises a copy).
    host_direct = placing and target.memory_kind not in ("pinned_host", "unpinned_host")
    array_type, tracer_type = jax.Array, jax.core.Tracer  # locals: this loop is hot
    for index, leaf in enumerate(leaves):
        if isinstance(leaf, array_type):
            if isinstance(leaf, tracer_type):
                moved[index] = _cast(leaf, dtype, cast_all)
                continue
            if leaf.is_deleted():
                raise ConversionError(
                    f"leaf {_path(tree, index)} is a deleted or donated jax.Array; "
                    "use the array the donating call returned"
                )
            array = leaf if dtype is None else _cast(leaf, dtype, cast_all)
        elif isinstance(leaf, (np.ndarray, np.generic)) and host_direct:
            # Host data joins the one batched transfer directly, cast on the host.
            moved[index] = _host_cast(np.asarray(leaf), dtype, cast_all)
            pending.append(index)
            continue
        elif isinstance(leaf, (np.ndarray, np.generic)) or is_torch_tensor(leaf):
            array = _cast(to_jax(leaf), dtype, cast_all)
        elif isinstance(leaf, _PYTHON_SCALARS):
            if not convert_scalars:
                continue
            array = _cast(jax.numpy.asarray(leaf), dtype, cast_all)
        elif any(hasattr(leaf, protocol) for protocol in _ARRAY_PROTOCOLS):
            array = _cast(_convert_array_like(tree, index, leaf), dtype, cast_all)
        else:
            continue
        if array is not leaf:
            moved[index] = array
            fresh.append(array)
        if placing and (copy or not (array.committed and array.sharding == target)):
            pending.append(index)
    if pending:
        arrays = [moved[index] for index in pending]
        if transfer.crosses_processes(arrays, target):  # a mesh over several processes
            placed = transfer.device_put(
                arrays, target, copy=copy, path=lambda i: _path(tree, pending[i])
            )
        else:
            placed = jax.device_put(
                arrays, _destination(target, arrays), may_alias=False if copy else None
            )
        for index, array in zip(pending, placed, strict=True):
            moved[index] = array
        fresh.extend(placed)
    return moved, fresh


def _destination(target: Any, arrays: list[Any]) -> Any:
    """What to give ``jax.device_put``: the Device where it means ``target``, else ``target``.

    ``jax.device_put`` takes a Device faster than the equivalent sharding, but a Device
    means its default memory kind: a memory-kind target (``pinned_host``) needs the
    sharding itself, and jax 0.10 fails to move an array out of another memory kind of
    the same device when given a Device ("Memory kind mismatch").
    """
    if not isinstance(target, jax.sharding.SingleDeviceSharding):
        return target
    device = next(iter(target.device_set))
    plain = jax.sharding.SingleDeviceSharding(device)  # the device's default memory kind
    if target != plain or any(
        isinstance(array, jax.Array) and array.sharding.memory_kind != plain.memory_kind
        for array in arrays
    ):
        return target
    return device


def _host_cast(
    host: np.ndarray[Any, Any], dtype: np.dtype[Any] | None, cast_all: bool
) -> np.ndarray[Any, Any]:
    """``host`` in the dtype it will have in JAX: requested, or narrowed without x64."""
    if dtype is not None and (cast_all or dtypes.is_inexact(host.dtype)):
        wanted = dtype  # an explicit cast: no narrowing to warn about
    else:
        wanted = dtypes.canonical(host.dtype)
    return host if host.dtype == wanted else host.astype(wanted)


def _cast(array: jax.Array, dtype: np.dtype[Any] | None, cast_all: bool) -> jax.Array:
    if dtype is None or array.dtype == dtype:
        return array
    if not cast_all and not dtypes.is_inexact(np.dtype(array.dtype)):
        return array
    return array.astype(dtype)


def _convert_array_like(tree: Any, index: int, leaf: Any) -> jax.Array:
    try:
        return jax.numpy.asarray(leaf)
    except Exception as err:
        raise ConversionError(
            f"leaf {_path(tree, index)} of type {type(leaf).__module__}."
            f"{type(leaf).__qualname__} looks like an array but JAX cannot convert it "
            f"({err}); convert it to a NumPy array first"
        ) from err


def _path(tree: Any, index: int) -> str:
    path = flatten(tree, with_paths=True).paths[index]
    return path or "<root>"


def _move_module(module: Any, device: Any, dtype: Any, *, non_blocking: bool, copy: bool) -> Any:
    nnx = sys.modules["flax.nnx"]
    if dtype is not None and not dtypes.is_inexact(dtypes.to_numpy_dtype(dtype)):
        raise DTypeError(
            f"Module.to only accepts floating point or complex dtypes, but got desired "
            f"dtype={dtype}; cast integer state explicitly with jax.tree.map"
        )
    state = nnx.state(module)
    nnx.update(module, to_device(state, device, dtype, non_blocking=non_blocking, copy=copy))
    return module


def _single_device(array: jax.Array, tree: Any, index: int) -> jax.Device:
    devices = array.devices()
    if len(devices) != 1:
        names = ", ".join(sorted(str(Device(d)) for d in devices))
        raise MixedDeviceError(
            f"leaf {_path(tree, index)} is sharded over {len(devices)} devices ({names}); "
            "a sharded array has no single device: use array.sharding, or gather it with "
            "tj.to_device(array, device)"
        )
    return next(iter(devices))


class _Placements:
    """Where the arrays of some trees live, and the first leaf seen at each place.

    A place is a torch-style ``Device``; torch's unindexed ``cpu`` and JAX's ``cpu:0``
    are one place. NumPy leaves only set ``host`` (host memory is reachable from
    every device); tracers only set ``traced``. Leaf paths are computed only for an
    error message.
    """

    def __init__(self, trees: list[Any], prefixes: list[str]) -> None:
        self.trees, self.prefixes = trees, prefixes
        self.traced = self.host = False
        seen: dict[Any, tuple[int, int]] = {}
        for position, tree in enumerate(trees):
            for index, leaf in enumerate(flatten(tree).leaves):
                if isinstance(leaf, jax.Array):
                    if is_tracer(leaf):
                        self.traced = True
                        continue
                    key: Any = _single_device(leaf, tree, index)
                elif is_torch_tensor(leaf):
                    key = Device(leaf.device)
                elif isinstance(leaf, np.ndarray):
                    self.host = True
                    continue
                else:
                    continue
                seen.setdefault(key, (position, index))
        self.devices: dict[Device, tuple[int, int]] = {}
        places: set[tuple[str, int]] = set()
        for key, where in seen.items():
            device = key if isinstance(key, Device) else Device(key)
            if (place := (device.type, device.index or 0)) not in places:
                places.add(place)
                self.devices[device] = where

    def _leaf_path(self, position: int, index: int) -> str:
        path = _path(self.trees[position], index).removeprefix("<root>")
        return self.prefixes[position] + path or "<root>"

    def mixed_error(self, what: str) -> MixedDeviceError:
        """torch's "same device" error naming every device and a leaf path on each."""
        devices = list(self.devices)
        where = "; ".join(
            f"{self._leaf_path(*place)} is on {device}" for device, place in self.devices.items()
        )
        return MixedDeviceError(
            f"Expected all tensors to be on the same device, but found at least two devices, "
            f"{devices[0]} and {devices[1]}! ({what}: {where}). Fix: move them to one device "
            "with tj.to_device(x, device)"
        )


def device_of(obj: Any) -> Device | None:
    """The device an array, tree or module lives on: ``tensor.device`` for JAX.

    ``device_of(model)`` answers ``next(model.parameters()).device`` for a whole NNX
    module, linen variables dict or pytree, after checking that every array agrees.
    NumPy arrays are host data: a tree of NumPy arrays only is on ``cpu``; mixed with
    device arrays they are ignored.

    Returns:
        The device (``cuda:1``; ``cpu`` for the CPU, as torch says, or ``cpu:N`` when
        several CPU devices are simulated). ``None`` under ``jax.jit`` (tracers have
        no device), so
        ``jnp.zeros(3, device=tj.device_of(x))`` works traced and untraced.

    Raises:
        MixedDeviceError: arrays on several devices (every device is named with a
            leaf path on it), or a sharded array (use ``array.sharding``).
        EmptyTreeError: no arrays at all.

    Examples:
        >>> import jax.numpy as jnp
        >>> import torch2jax_device as tj
        >>> tj.device_of({"w": tj.to_device(jnp.ones(2), "cpu")})
        device(type='cpu')
    """
    if is_nnx_module(obj):
        obj = sys.modules["flax.nnx"].state(obj)
    placements = _Placements([obj], [""])
    if placements.traced:
        return None
    if len(placements.devices) > 1:
        raise placements.mixed_error("arrays of this tree")
    if placements.devices:
        return next(iter(placements.devices))
    if placements.host:
        return Device("cpu")
    raise EmptyTreeError(
        f"device_of() found no arrays in {type(obj).__name__}: nothing to read a device "
        "from (torch: StopIteration from next(model.parameters()))"
    )


def check_same_device(*objs: Any) -> Device | None:
    """Raise torch's "same device" error if the arrays of ``objs`` are on several devices.

    The pre-flight check to run before a jitted call: where JAX would say
    ``Received incompatible devices for jitted computation``, this says which
    arguments are where. Tracers and NumPy arrays are ignored.

    Returns:
        The one device all arrays are on, or ``None`` if there are none.

    Raises:
        MixedDeviceError: with torch's message, every device and a leaf path on each.

    Examples:
        >>> import jax.numpy as jnp
        >>> import torch2jax_device as tj
        >>> tj.check_same_device(jnp.ones(2), {"b": jnp.zeros(1)}) == tj.device("cpu")
        True
    """
    placements = _Placements(list(objs), [f"args[{i}]" for i in range(len(objs))])
    if len(placements.devices) > 1:
        raise placements.mixed_error("arguments")
    return next(iter(placements.devices), None)


def parameters(model: Any) -> Iterator[Any]:
    """The parameter arrays of a model: ``model.parameters()`` for JAX.

    For a Flax NNX module, its ``nnx.Param`` variables; for a linen variables dict
    (``{"params": ..., "batch_stats": ...}``), the ``"params"`` collection; for any
    other pytree, every array leaf.

    Examples:
        >>> import jax.numpy as jnp
        >>> import torch2jax_device as tj
        >>> params = tj.to_device({"params": {"w": jnp.ones(2)}}, "cpu")
        >>> next(tj.parameters(params)).device == tj.device("cpu")
        True
    """
    if is_nnx_module(model):
        nnx = sys.modules["flax.nnx"]
        tree = nnx.state(model, nnx.Param)
    elif isinstance(model, Mapping) and "params" in model:
        tree = model["params"]
    else:
        tree = model
    return (leaf for leaf in flatten(tree).leaves if _is_array(leaf))
