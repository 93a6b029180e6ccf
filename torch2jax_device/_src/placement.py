"""``Tensor.to`` / ``Module.to`` for JAX: move arrays, trees and modules between devices.

Everything a mixed torch + JAX codebase passes to ``to_device()`` goes through one
path: the tree is flattened once (``._trees``), each leaf is made a JAX array
(torch tensors zero-copy through DLPack, NumPy on the host), dtypes are applied, and
every leaf that must move travels in **one** batched ``jax.device_put``. Leaves that
already sit committed on the target are returned as the very same objects, as
``x.to(x.device) is x`` in torch.
"""

from __future__ import annotations

import itertools
import operator
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NoReturn

import jax
import numpy as np

from . import dtypes, host_staging
from .detect import (
    is_nnx_module,
    is_torch_dtype,
    is_torch_module,
    is_torch_tensor,
    is_tracer,
    type_name,
)
from .device import Device, DeviceLike, resolve
from .distributed import transfer
from .errors import (
    ConversionError,
    DTypeError,
    EmptyTreeError,
    InvalidDeviceError,
    MemoryFormatError,
    MixedDeviceError,
    NoSuchAttributeError,
    Torch2JaxDeviceError,
    UnsupportedOperationError,
)
from .interop import host_array, to_jax
from .trees import flatten

__all__ = [
    "Parameter",
    "Placements",
    "as_sharding",
    "check_same_device",
    "device_of",
    "get_device",
    "parameters",
    "to_device",
]

_PYTHON_SCALARS = (bool, int, float, complex)
_CONTAINERS = (dict, list, tuple)
_ARRAY_PROTOCOLS = ("__jax_array__", "__array__", "__dlpack__", "__cuda_array_interface__")


class _Keep:
    """The ``.to(dtype)`` form: every array stays where it is."""


_KEEP = _Keep()


def to_device(
    obj: Any,
    device: Any = None,
    dtype: Any = None,
    non_blocking: bool = False,
    copy: bool = False,
    *,
    memory_format: Any = None,
) -> Any:
    """Equivalent to `Tensor.to`.

    Move arrays, trees of arrays or a Flax NNX module to a device: ``x.to(device)``,
    ``model.to(device)``.

    Every array leaf (``jax.Array``, ``np.ndarray``, ``torch.Tensor``) comes back as a
    JAX array **committed** to the device, so jitted code runs there, as torch code
    runs where its tensors are. Containers keep their types (dict, ``OrderedDict``,
    ``defaultdict`` with its factory, list, tuple, namedtuple, dataclass,
    ``FrozenDict``, optax states, any registered pytree), and dicts keep their key
    order (``x, y = batch.values()`` unpacks as in torch; JAX's own functions sort
    dict keys); other leaves (strings,
    ``None``, Python numbers used as configuration) pass through unchanged. A bare
    Python number becomes a 0-d array. All transfers happen in one batched
    ``jax.device_put``. The input is never mutated, except a Flax NNX module, which
    moves in place and is returned, like ``Module.to``.

    As in torch, when nothing needs to change the very same object is returned and
    nothing is transferred; ``copy=True`` always gives fresh buffers, whatever the input
    (NumPy arrays JAX would alias on the CPU and torch tensors included) and whatever
    the form (``.to(dtype, copy=True)`` with an unchanged dtype too).

    Nothing comes back unchanged by accident: a torch module (move it within torch with
    ``module.to(device.torch_device)``, or pass its ``state_dict()``) or any other object
    that is not an array, number, container or module raises ``ConversionError``.

    The torch overloads work too, with their positional arguments:
    ``to_device(x, jnp.float16)`` and ``to_device(x, dtype=jnp.float16)`` are
    ``x.to(dtype)`` (arrays stay where they are; host data goes to the CPU device),
    ``to_device(x, other)`` is ``x.to(other)`` (other's device and dtype), and
    ``to_device(x, "cuda", torch.float16, True)``, ``to_device(x, torch.float16, False,
    True)`` and ``to_device(x, other, True)`` read ``non_blocking`` and ``copy`` where
    torch reads them.

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
        memory_format: A ``torch.memory_format``, taken for ported code and without
            effect: JAX arrays have no strides (XLA lays out each buffer itself, in
            channels-last order for GPU convolutions where that is faster), and the
            values are the same in every format, as in torch. ``torch.channels_last``
            (``channels_last_3d``) on a single array needs 4 (5) dimensions, as in torch.

    Returns:
        The same structure with array leaves on the device (the module itself for NNX).

    Raises:
        DeviceUnavailableError: the device does not exist here, or a leaf is a ``meta``
            tensor (it has no data).
        DTypeError: JAX does not know ``dtype``.
        MemoryFormatError: ``memory_format`` is not a ``torch.memory_format`` or ``None``,
            or is ``torch.channels_last`` and a single array is not 4-d
            (``channels_last_3d``: 5-d), as torch refuses them.
        ConversionError: a leaf cannot become a JAX array (a NumPy array of strings or
            objects; a sparse, quantized or nested tensor; an array-like JAX rejects), was
            deleted or donated, or is a torch module; or ``obj`` itself is not something
            to move. The message names the leaf path and the fix.

    Warns:
        DtypeNarrowingWarning: once per dtype, when int64 data, float64 tensors or an
            explicit float64 ``dtype`` become 32-bit; for NumPy float64 (NumPy's default)
            only when values overflow float32.

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
        >>> list(tj.to_device({"x": np.ones(2), "label": np.zeros(2)}, "cpu"))  # key order kept
        ['x', 'label']
        >>> tj.to_device(np.ones(2), jnp.float16, False, True).dtype  # non_blocking, copy
        dtype('float16')
    """
    if isinstance(dtype, bool) and (_is_array(device) or _is_dtype(device)):
        # torch's positional .to(dtype, non_blocking, copy) and .to(other, non_blocking, copy)
        dtype, non_blocking, copy = None, dtype, non_blocking or copy
    device, dtype = _torch_overloads(device, dtype)
    if memory_format is not None:
        _check_memory_format(obj, memory_format)
    if is_nnx_module(obj):
        return _move_module(obj, device, dtype, non_blocking=non_blocking, copy=copy)
    single = type(obj) not in _CONTAINERS and (_is_array(obj) or isinstance(obj, _PYTHON_SCALARS))
    flat = flatten(obj)
    if (
        not single
        and len(flat.leaves) == 1
        and flat.leaves[0] is obj
        and not any(hasattr(obj, protocol) for protocol in _ARRAY_PROTOCOLS)
    ):
        _refuse_root(obj)
    target = _target(device)
    if (
        dtype is None
        and not copy
        and target is not _KEEP
        and not _into_host_memory(target)
        and _plain_host_data(flat.leaves)
    ):
        # The feeding lane: host batches, nothing to cast or keep, one transfer.
        fresh = moved = _transfer(
            flat.leaves, target, copy=False, path=lambda index: _path(obj, index)
        )
    else:
        moved, fresh = _move(
            obj,
            flat.leaves,
            target,
            None if dtype is None else dtypes.canonical(dtypes.to_numpy_dtype(dtype)),
            cast_all=single,
            convert_scalars=single,
            copy=copy,
        )
    if not non_blocking:
        jax.block_until_ready(fresh)
    return flat.rebuild(moved)


def _plain_host_data(leaves: list[Any]) -> bool:
    """Whether every leaf is a NumPy array that JAX takes as it is (no conversion, no cast).

    Such a tree (a batch from a loader) goes to its device in one ``jax.device_put``
    without the per-leaf checks of ``_move``, which cost about as much as transferring
    a small batch (``benchmarks/bench_feeding.py``).
    """
    if not leaves:
        return False
    kept = _kept_dtypes[bool(getattr(jax.config, "jax_enable_x64"))]  # noqa: B009 (no stub)
    for leaf in leaves:  # a loop, not all(...): this runs for every small batch
        if type(leaf) is not np.ndarray:
            return False
        dtype = leaf.dtype
        if dtype not in kept:
            if not (
                dtype.isnative
                and dtypes.holds(dtype)
                and jax.dtypes.canonicalize_dtype(dtype) == dtype
            ):
                return False
            kept.add(dtype)
    return True


#: The dtypes JAX holds as they are, without and with x64 (filled as they are met).
_kept_dtypes: dict[bool, set[np.dtype[Any]]] = {False: set(), True: set()}


def _into_host_memory(target: jax.sharding.Sharding) -> bool:
    """A host memory kind, where JAX could alias NumPy buffers (``pin_memory`` copies)."""
    return target.memory_kind in ("pinned_host", "unpinned_host")


def _transfer(
    arrays: list[Any], target: Any, *, copy: bool, path: Callable[[int], str]
) -> list[jax.Array]:
    """The one place ``to_device`` moves data: ``arrays`` in one batched transfer.

    ``arrays`` are NumPy or JAX arrays; ``path(i)`` names the leaf ``arrays[i]`` came
    from, for messages.
    """
    if transfer.crosses_processes(arrays, target):  # a mesh over several processes
        return transfer.device_put(arrays, target, copy=copy, path=path)
    return host_staging.device_put(  # device<->host copies through pinned memory
        arrays, _destination(target, arrays), may_alias=False if copy else None
    )


#: torch's memory formats: a rank they need (``None``: any), none of them an effect here.
_MEMORY_FORMATS = {
    "torch.preserve_format": None,
    "torch.contiguous_format": None,
    "torch.channels_last": 4,
    "torch.channels_last_3d": 5,
}


def _check_memory_format(obj: Any, memory_format: Any) -> None:
    """torch's checks of ``memory_format=``, which changes nothing here.

    JAX arrays have no strides: XLA chooses each buffer's layout itself (on GPUs,
    channels-last for convolutions where that is faster), so every format gives the same
    arrays, as torch gives the same values.
    """
    name = str(memory_format)
    if type(memory_format).__name__ != "memory_format" or name not in _MEMORY_FORMATS:
        raise MemoryFormatError(
            f"to_device(): memory_format must be a torch.memory_format (torch.channels_last, "
            f"torch.contiguous_format, torch.preserve_format) or None, not "
            f"{type_name(memory_format)} {memory_format!r}"
        )
    rank = _MEMORY_FORMATS[name]
    if rank is not None and _is_array(obj) and len(obj.shape) != rank:
        raise MemoryFormatError(
            f"required rank {rank} tensor to use {name.removeprefix('torch.')} format, got a "
            f"{len(obj.shape)}-d array (torch raises the same RuntimeError). Fix: pass "
            f"memory_format only for {rank}-d arrays (images), or drop it: JAX arrays have no "
            "strides, and XLA lays out every array itself"
        )


def _refuse_root(obj: Any) -> NoReturn:
    """``to_device`` of something that is neither an array, a number nor a container."""
    kind = type_name(obj)
    if is_torch_module(obj):
        raise ConversionError(
            f"to_device() got a torch module ({kind}): JAX cannot hold torch modules. Fix: "
            "move it within torch with module.to(device.torch_device), or bring its weights "
            "to JAX with tj.to_device(module.state_dict(), device)"
        )
    raise ConversionError(
        f"to_device() cannot move a {kind}: it is not an array, tensor, number, "
        "container of them, Flax NNX module or registered pytree. Fix: pass the arrays "
        "it holds, or register the class as a pytree (jax.tree_util.register_dataclass)"
    )


def _torch_overloads(device: Any, dtype: Any) -> tuple[Any, Any]:
    """Map ``.to(dtype)`` and ``.to(other)`` onto (device, dtype)."""
    if isinstance(device, _PLACES):  # the common case, first: a loader asks for every batch
        return device, dtype
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


#: Devices and shardings: never a dtype or an array.
_PLACES = (jax.sharding.Sharding, jax.Device, Device)


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
    return isinstance(value, (jax.Array, np.ndarray, np.generic, Parameter)) or is_torch_tensor(
        value
    )


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
    # copy=True where nothing moves: arrays that may share the source's memory.
    in_place_copies: list[int] = []
    placing = target is not _KEEP
    # NumPy leaves join the batched transfer directly, except into host memory kinds,
    # where JAX could alias their buffers (pin_memory promises a copy).
    host_direct = placing and not _into_host_memory(target)
    # JAX aliases aligned NumPy buffers on CPU devices even with may_alias=False.
    host_copy = copy and placing and _on_cpu(target)
    array_type, tracer_type = jax.Array, jax.core.Tracer  # locals: this loop is hot
    for index, leaf in enumerate(leaves):
        shared = False  # the array may share the input's memory
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
            shared = array is leaf
        elif isinstance(leaf, (np.ndarray, np.generic)) and host_direct:
            # Host data joins the one batched transfer directly, cast on the host.
            host = _leaf_conversion(tree, index, host_array, np.asarray(leaf))
            cast = _host_cast(host, dtype, cast_all)
            moved[index] = cast.copy() if host_copy and np.may_share_memory(cast, leaf) else cast
            pending.append(index)
            continue
        elif isinstance(leaf, (np.ndarray, np.generic)) or is_torch_tensor(leaf):
            converted = _leaf_conversion(tree, index, to_jax, leaf)
            array = _cast(converted, dtype, cast_all)
            shared = array is converted
        elif isinstance(leaf, _PYTHON_SCALARS):
            if not convert_scalars:
                continue
            array = _cast(jax.numpy.asarray(leaf), dtype, cast_all)
        elif any(hasattr(leaf, protocol) for protocol in _ARRAY_PROTOCOLS):
            array = _cast(_convert_array_like(tree, index, leaf), dtype, cast_all)
        elif is_torch_module(leaf):
            raise ConversionError(
                f"leaf {_path(tree, index)} is a torch module "
                f"({type_name(leaf)}): JAX cannot hold torch "
                "modules. Fix: move it within torch (module.to(device.torch_device)) or put "
                "its state_dict() in the tree instead"
            )
        else:
            continue
        if array is not leaf:
            moved[index] = array
            fresh.append(array)
        if placing and (copy or not (array.committed and array.sharding == target)):
            pending.append(index)
        elif copy and shared:
            in_place_copies.append(index)
    if pending:
        placed = _transfer(
            [moved[index] for index in pending],
            target,
            copy=copy,
            path=lambda position: _path(tree, pending[position]),
        )
        for index, array in zip(pending, placed, strict=True):
            moved[index] = array
        fresh.extend(placed)
    if in_place_copies:
        arrays = [moved[index] for index in in_place_copies]
        copies = jax.device_put(arrays, [array.sharding for array in arrays], may_alias=False)
        for index, array in zip(in_place_copies, copies, strict=True):
            moved[index] = array
        fresh.extend(copies)
    return moved, fresh


def _on_cpu(target: jax.sharding.Sharding) -> bool:
    devices: set[jax.Device] = target.device_set
    return all(device.platform == "cpu" for device in devices)


def _leaf_conversion(tree: Any, index: int, convert: Callable[[Any], Any], leaf: Any) -> Any:
    """``convert(leaf)``, with the leaf path put in front of the library's errors."""
    try:
        return convert(leaf)
    except Torch2JaxDeviceError as err:
        raise type(err)(f"leaf {_path(tree, index)}: {err}") from err


def _destination(target: Any, arrays: list[Any]) -> Any:
    """What to give ``jax.device_put``: the Device where it means ``target``, else ``target``.

    ``jax.device_put`` takes a Device faster than the equivalent sharding, but a Device
    means its default memory kind: a memory-kind target (``pinned_host``) needs the
    sharding itself, and jax 0.10 fails to move an array out of another memory kind of
    the same device when given a Device ("Memory kind mismatch").
    """
    device = _plain_device(target)
    if device is None:
        return target
    for array in arrays:  # a loop, not any(...): this runs for every small batch
        if isinstance(array, jax.Array) and array.sharding.memory_kind != target.memory_kind:
            return target
    return device


def _plain_device(target: jax.sharding.Sharding) -> jax.Device | None:
    """The device ``target`` is, in its default memory kind; ``None`` for any other sharding.

    The last answer is kept: a loader asks for every batch with the same target, and
    building the sharding to compare with costs more than a small batch's bookkeeping.
    """
    global _last_plain
    last, device = _last_plain
    if target is last:
        return device
    device = None
    if isinstance(target, jax.sharding.SingleDeviceSharding):
        device = next(iter(target.device_set))
        if target != jax.sharding.SingleDeviceSharding(device):
            device = None
    _last_plain = (target, device)
    return device


_last_plain: tuple[Any, jax.Device | None] = (None, None)


def _host_cast(
    host: np.ndarray[Any, Any], dtype: np.dtype[Any] | None, cast_all: bool
) -> np.ndarray[Any, Any]:
    """``host`` in the dtype it will have in JAX: requested, or narrowed without x64."""
    if dtype is not None and (cast_all or dtypes.is_inexact(host.dtype)):
        return host if host.dtype == dtype else host.astype(dtype)  # explicit: no warning
    return dtypes.narrow_host(host)


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
            f"leaf {_path(tree, index)} of type {type_name(leaf)} looks like an array but "
            f"JAX cannot convert it ({err}); convert it to a NumPy array first"
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
    """The one device ``array`` lives on, seen from this process.

    An array spanning several processes with one device in this one (DDP's replicated
    parameters, a data-parallel batch) is on that device, as torch reports
    ``cuda:LOCAL_RANK`` for a DDP model's parameters.
    """
    devices = array.devices()
    if len(devices) == 1:
        return next(iter(devices))
    local = array.sharding.addressable_devices
    if len(local) == 1 and not array.is_fully_addressable:
        return next(iter(local))
    names = ", ".join(sorted(str(Device(d)) for d in local))
    raise MixedDeviceError(
        f"leaf {_path(tree, index)} is sharded over {len(local)} devices ({names}); "
        "a sharded array has no single device: use array.sharding, or gather it with "
        "tj.to_device(array, device)"
    )


def _is_scalar_host(leaf: Any) -> bool:
    """A NumPy scalar or 0-d array: a number, as torch treats 0-d CPU tensors."""
    return isinstance(leaf, np.generic) or (isinstance(leaf, np.ndarray) and leaf.ndim == 0)


class Placements:
    """Where the arrays of some trees live, and the first leaf seen at each place.

    A place is a torch-style ``Device``; torch's unindexed ``cpu`` and JAX's ``cpu:0``
    are one place. NumPy leaves only set ``host`` (host memory is reachable from
    every device), or with ``host_is_cpu`` are placed on ``cpu`` as torch places CPU
    tensors; tracers only set ``traced``. ``committed_platforms`` are the JAX platforms
    of committed arrays (where a jitted call of them runs). Leaf paths are computed only
    for an error message.

    Scalars meet every device, as torch lets a 0-dim CPU tensor take part in an
    operation on a CUDA tensor: 0-dim CPU tensors, 0-d host values and uncommitted 0-d
    JAX arrays (which JAX moves to where the committed arrays are: optax's step
    ``count`` before the first update) count only where nothing else has a place.
    """

    def __init__(self, trees: list[Any], prefixes: list[str], *, host_is_cpu: bool = False) -> None:
        self.trees, self.prefixes = trees, prefixes
        self.traced = self.host = False
        self.committed_platforms: set[str] = set()
        seen: dict[Any, tuple[int, int]] = {}
        scalars: dict[Any, tuple[int, int]] = {}  # places of values that meet every device
        for position, tree in enumerate(trees):
            for index, leaf in enumerate(flatten(tree).leaves):  # a Parameter flattens
                places = seen
                if isinstance(leaf, jax.Array):
                    if is_tracer(leaf):
                        self.traced = True
                        continue
                    key: Any = _single_device(leaf, tree, index)
                    if leaf.committed:
                        self.committed_platforms.add(key.platform)
                    elif leaf.ndim == 0:
                        places = scalars
                elif is_torch_tensor(leaf):
                    key = Device(leaf.device)
                    if leaf.device.type == "cpu" and leaf.ndim == 0:
                        places = scalars
                elif isinstance(leaf, (np.ndarray, np.generic)):
                    self.host = True
                    if not host_is_cpu:
                        continue
                    key = Device("cpu")
                    if _is_scalar_host(leaf):
                        places = scalars
                else:
                    continue
                places.setdefault(key, (position, index))
        if not seen:
            # Scalars alone: where the first one is (they never disagree among themselves).
            seen = dict(itertools.islice(scalars.items(), 1))
        self.devices: dict[Device, tuple[int, int]] = {}
        known: set[tuple[str, int]] = set()
        for key, where in seen.items():
            device = key if isinstance(key, Device) else Device(key)
            if (place := (device.type, device.index or 0)) not in known:
                known.add(place)
                self.devices[device] = where

    def _leaf_path(self, position: int, index: int) -> str:
        path = _path(self.trees[position], index).removeprefix("<root>")
        return self.prefixes[position] + path or "<root>"

    def mixed_error(self, what: str, fix: str = "") -> MixedDeviceError:
        """torch's "same device" error naming every device and a leaf path on each."""
        devices = list(self.devices)
        where = "; ".join(
            f"{self._leaf_path(*place)} is on {device}" for device, place in self.devices.items()
        )
        return MixedDeviceError(
            f"Expected all tensors to be on the same device, but found at least two devices, "
            f"{devices[0]} and {devices[1]}! ({what}: {where}). "
            + (fix or "Fix: move them to one device with tj.to_device(x, device)")
        )


def device_of(obj: Any) -> Device | None:
    """Equivalent to `Tensor.device`.

    The device an array, tree or module lives on: ``tensor.device`` for JAX.

    ``device_of(model)`` answers ``next(model.parameters()).device`` for a whole NNX
    module, Equinox module, linen variables dict, pytree or torch module, after checking
    that every array agrees. NumPy arrays (and NumPy scalars) are host data: a tree of
    NumPy data only is on ``cpu``; mixed with device arrays they are ignored, as are 0-dim
    CPU tensors and uncommitted 0-d JAX arrays (torch lets a 0-dim CPU tensor meet any
    device; optax's step count starts uncommitted). In a
    multi-process job, an array with one device in this process (replicated over the
    job, as DDP keeps parameters) is on that device, as torch says ``cuda:LOCAL_RANK``.

    Returns:
        The device (``cuda:1``; ``cpu`` for the CPU, as torch says, or ``cpu:N`` when
        several CPU devices are simulated), indexed as torch indexes it (never JAX's
        global ``Device.id``). ``None`` under ``jax.jit`` (tracers have no device), so
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
    elif is_torch_module(obj):
        obj = list(obj.state_dict(keep_vars=True).values())
    placements = Placements([obj], [""])
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


def get_device(obj: Any) -> int:
    """Equivalent to `torch.get_device`.

    The device's index, ``-1`` on the CPU: ``tensor.get_device()`` for JAX.
    ``tj.device_of(x).index`` is ``None`` on the CPU, as ``torch.device("cpu").index``
    is, so ported checks such as ``if x.get_device() == -1:`` or ``x.get_device() >= 0``
    need this function to keep their meaning. Every CPU device answers ``-1`` (torch has
    one), an accelerator its torch index (``cuda:1`` is ``1``).

    Raises:
        UnsupportedOperationError: under ``jax.jit``, where arrays have no device
            (torch's traced code has one): read it outside the jitted function.
        MixedDeviceError: arrays on several devices (see `tj.device_of`).
        EmptyTreeError: no arrays at all.

    Examples:
        >>> import jax.numpy as jnp
        >>> import torch2jax_device as tj
        >>> tj.get_device(tj.to_device(jnp.ones(2), "cpu"))
        -1
    """
    device = device_of(obj)
    if device is None:
        raise UnsupportedOperationError(
            "get_device() has no answer under jax.jit: traced arrays have no device. "
            "Fix: read it outside the jitted function (or drop the check: jit runs where "
            "its arguments are)"
        )
    return -1 if device.type == "cpu" or device.index is None else device.index


def check_same_device(*objs: Any) -> Device | None:
    """Raise torch's "same device" error if the arrays of ``objs`` are on several devices.

    The pre-flight check to run before a jitted call: where JAX would say
    ``Received incompatible devices for jitted computation``, this says which
    arguments are where. Tracers and NumPy arrays are ignored (see
    `tj.strict_placement` for torch's stricter
    rule, under which host data counts as ``cpu``). As in torch, a 0-dim CPU tensor
    meets any device, and so does an uncommitted 0-d JAX array (JAX moves it where the
    committed arrays are).

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
    placements = Placements(list(objs), [f"args[{i}]" for i in range(len(objs))])
    if len(placements.devices) > 1:
        raise placements.mixed_error("arguments")
    return next(iter(placements.devices), None)


def parameters(model: Any) -> Iterator[Any]:
    """Equivalent to `Module.parameters`.

    The parameters of a model: ``model.parameters()`` for JAX.

    For a Flax NNX module, its ``nnx.Param`` variables; for a linen variables dict
    (``{"params": ..., "batch_stats": ...}``), the ``"params"`` collection; for an
    Equinox module or any other pytree, every array leaf. Each comes as a
    `tj.Parameter`: its ``.device`` is a torch-style
    device (``.type``, ``.index``, ``str``, ``==`` with ``torch.device``), and it is
    still an array in JAX code (``.data`` is the ``jax.Array`` itself). A torch module's
    parameters are its own (``model.parameters()``), so mixed code can ask either kind.

    Examples:
        >>> import jax.numpy as jnp
        >>> import torch2jax_device as tj
        >>> params = tj.to_device({"params": {"w": jnp.ones(2)}}, "cpu")
        >>> weight = next(tj.parameters(params))
        >>> weight.device, weight.device.type, str(weight.device)
        (device(type='cpu'), 'cpu', 'cpu')
        >>> float((weight * 2).sum())
        4.0
    """
    if is_torch_module(model):
        return iter(model.parameters())
    if is_nnx_module(model):
        nnx = sys.modules["flax.nnx"]
        tree = nnx.state(model, nnx.Param)
    elif isinstance(model, Mapping) and "params" in model:
        tree = model["params"]
    else:
        tree = model
    return (
        Parameter(leaf)
        for leaf in flatten(tree).leaves  # arrays: a Parameter is a pytree of its array
        if _is_array(leaf)
    )


def _array_device(array: Any) -> Device | None:
    """``tensor.device`` for one array: torch-style, ``None`` for a tracer."""
    if is_tracer(array):
        return None
    if isinstance(array, jax.Array):
        return Device(_single_device(array, array, 0))
    if is_torch_tensor(array):
        return Device(array.device)
    return Device("cpu")  # NumPy: host data


def _unwrap(value: Any) -> Any:
    return value.data if isinstance(value, Parameter) else value


@jax.tree_util.register_pytree_with_keys_class
class Parameter:
    """A model's array as ported torch code sees it: what ``next(tj.parameters(model))`` is.

    Equivalent to the ``torch.nn.Parameter`` that ``model.parameters()`` yields, for
    the parts ported code reads: ``.device`` is a torch-style
    [`tj.device`][torch2jax_device.Device] (``.type``, ``.index``, ``str(...) == "cpu"``,
    ``==`` with ``torch.device`` and ``tj.device``), never a bare ``jax.Device``; ``.data``
    is the array; ``numel()`` counts elements (``sum(p.numel() for p in ...)``). Everything
    else is the array's own: ``shape``, ``dtype``, ``sharding``, methods, operators.

    It stays an array in JAX code: ``jnp`` functions, ``jax.jit`` / ``jax.grad``
    arguments, ``jax.device_put`` and ``jax.tree.map`` take it (it is a pytree holding the
    array, and implements ``__jax_array__``, ``__array__`` and DLPack), and
    ``tj.to_device`` / ``tj.to_jax`` / ``tj.to_torch`` accept it.

    Note:
        ``isinstance(p, jax.Array)`` is false, ``jax.lax`` primitives need ``p.data``, and
        results of operations are plain ``jax.Array`` objects (with a ``jax.Device``
        ``.device``); pytree functions return ``Parameter`` objects. The view is
        read-only: JAX arrays are immutable and have no ``requires_grad`` or ``.grad``
        (gradients come from ``jax.grad`` / ``nnx.grad``). Under ``jax.jit``, ``.device``
        is ``None``, as [`tj.device_of`][torch2jax_device.device_of] says.

    Examples:
        >>> import jax, jax.numpy as jnp, torch
        >>> import torch2jax_device as tj
        >>> p = tj.Parameter(tj.to_device(jnp.ones((2, 3)), "cpu"))
        >>> p.device == torch.device("cpu"), p.device.index, p.numel()
        (True, None, 6)
        >>> jax.jit(lambda w: w.sum())(p)
        Array(6., dtype=float32)
    """

    __slots__ = ("_array",)
    _array: Any

    def __init__(self, data: Any) -> None:
        object.__setattr__(self, "_array", _unwrap(data))

    @property
    def data(self) -> Any:
        """The array itself (a ``jax.Array``, or a tracer under ``jax.jit``)."""
        return self._array

    @property
    def device(self) -> Device | None:
        """Where the array is, torch-style; ``None`` under ``jax.jit``.

        Raises:
            MixedDeviceError: the array is sharded over several devices of this process.
        """
        return _array_device(self._array)

    def numel(self) -> int:
        """The number of elements (``Tensor.numel``)."""
        return int(np.prod(self._array.shape, dtype=np.int64))

    def tree_flatten_with_keys(self) -> tuple[tuple[tuple[Any, Any]], None]:
        return ((jax.tree_util.GetAttrKey("data"), self._array),), None

    @classmethod
    def tree_unflatten(cls, aux: None, children: tuple[Any, ...]) -> Parameter:
        return cls(children[0])

    def __jax_array__(self) -> Any:
        return self._array

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
        return np.asarray(self._array, dtype=dtype)

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self._array.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> Any:
        return self._array.__dlpack_device__()

    def __repr__(self) -> str:
        return f"Parameter({self._array!r})"

    def __reduce__(self) -> tuple[type[Parameter], tuple[Any]]:
        return (Parameter, (self._array,))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return getattr(self._array, name)
        except AttributeError:
            if name in _PLACEMENT_METHODS:
                raise NoSuchAttributeError(
                    f"tj.Parameter has no attribute {name!r}: JAX arrays do not move or report "
                    f"their device through methods. Fix: {_PLACEMENT_METHODS[name]}"
                ) from None
            raise NoSuchAttributeError(
                f"tj.Parameter has no attribute {name!r}, and neither has the "
                f"{type(self._array).__name__} it holds. JAX arrays have no requires_grad, "
                "grad or in-place methods: gradients come from jax.grad / nnx.grad, "
                "freezing from the optimizer (nnx.Optimizer(model, tx, wrt=...), "
                "optax.masked), and p.data is the array itself"
            ) from None

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise NoSuchAttributeError(
            f"cannot set {name!r}: tj.Parameter is a read-only view of an immutable JAX "
            "array. Fix: change the model instead (for NNX, model.layer.kernel.value = "
            "new_array; for a pytree, build a new one with jax.tree.map)"
        )

    __hash__ = None  # type: ignore[assignment]  # arrays are unhashable

    def __len__(self) -> int:
        return len(self._array)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._array)

    def __getitem__(self, index: Any) -> Any:
        return self._array[index]

    def __bool__(self) -> bool:
        return bool(self._array)

    def __int__(self) -> int:
        return int(self._array)

    def __float__(self) -> float:
        return float(self._array)

    def __complex__(self) -> complex:
        return complex(self._array)

    def __index__(self) -> int:
        return operator.index(self._array)

    def __format__(self, spec: str) -> str:
        return format(self._array, spec)


#: torch's placement methods of a Parameter, and what ported code calls instead.
_PLACEMENT_METHODS = {
    "is_cuda": 'tj.device_of(p).type == "cuda" (p.device.type == "cuda")',
    "get_device": (
        "tj.device_of(p).index (p.device.index); it is None on the CPU, where torch's "
        "get_device() gives -1"
    ),
    "cpu": 'tj.to_device(p, "cpu"), which returns a new array (JAX arrays never move in place)',
    "cuda": 'tj.to_device(p, "cuda"), which returns a new array (JAX arrays never move in place)',
    "to": "tj.to_device(p, device, dtype), or tj.to_device(model, device) for the whole model",
}


def _binary(name: str) -> Callable[[Parameter, Any], Any]:
    def method(self: Parameter, other: Any) -> Any:
        return getattr(self._array, name)(_unwrap(other))

    method.__name__ = name
    return method


def _unary(name: str) -> Callable[[Parameter], Any]:
    def method(self: Parameter) -> Any:
        return getattr(self._array, name)()

    method.__name__ = name
    return method


for _name in (
    "add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "divmod", "pow",
    "lshift", "rshift", "and", "xor", "or",
):  # fmt: skip
    for _form in (f"__{_name}__", f"__r{_name}__"):
        setattr(Parameter, _form, _binary(_form))
for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    setattr(Parameter, f"__{_name}__", _binary(f"__{_name}__"))
for _name in ("neg", "pos", "abs", "invert"):
    setattr(Parameter, f"__{_name}__", _unary(f"__{_name}__"))
