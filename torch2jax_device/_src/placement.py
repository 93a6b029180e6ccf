"""``Tensor.to`` / ``Module.to`` for JAX: move arrays, trees and modules between devices.

Everything a mixed torch + JAX codebase passes to ``to_device()`` goes through one
path: the tree is flattened once (``._trees``), each leaf is made a JAX array
(torch tensors zero-copy through DLPack, NumPy on the host), dtypes are applied, and
every leaf that must move travels in **one** batched ``jax.device_put``. Leaves that
already sit committed on the target are returned as the very same objects, as
``x.to(x.device) is x`` in torch.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import jax
import numpy as np

from . import (
    array_names,
    batched_transfer,
    carried,
    casting,
    device_plan,
    dtypes,
    host_staging,
    to_forms,
)
from .detect import (
    is_equinox_module,
    is_nnx_module,
    is_torch_module,
    is_torch_tensor,
    type_name,
)
from .device import DeviceLike, resolve
from .errors import (
    ConversionError,
    DeviceUnavailableError,
    DTypeError,
    Torch2JaxDeviceError,
    UnsupportedOperationError,
)
from .interop import host_array, to_jax
from .location import is_array, leaf_path
from .trees import flatten

__all__ = ["as_sharding", "to_device"]

_PYTHON_SCALARS = (bool, int, float, complex)
#: Besides arrays, what ``to_device`` takes alone as ``Tensor.to`` (every dtype cast).
_SINGLES = (*_PYTHON_SCALARS, jax.ShapeDtypeStruct)
_CONTAINERS = (dict, list, tuple)
_ARRAY_PROTOCOLS = ("__jax_array__", "__array__", "__dlpack__", "__cuda_array_interface__")


_KEEP, _NOT_GIVEN = to_forms.KEEP, to_forms.NOT_GIVEN


def to_device(
    obj: Any,
    device: Any = None,
    dtype: Any = _NOT_GIVEN,  # None unless given: torch's parser tells the two apart
    non_blocking: Any = _NOT_GIVEN,  # a bool, False unless given
    copy: Any = _NOT_GIVEN,  # a bool, False unless given (a model refuses it given)
    *,
    memory_format: Any = _NOT_GIVEN,
    other: Any = _NOT_GIVEN,
    max_memory: Any = None,
) -> Any:
    """Equivalent to `Tensor.to`.

    Move arrays, trees of arrays or a Flax NNX module to a device: ``x.to(device)``,
    ``model.to(device)``.

    Every array leaf (``jax.Array``, ``np.ndarray``, ``torch.Tensor``) comes back as a
    JAX array **committed** to the device, so jitted code runs there, as torch code
    runs where its tensors are. Containers keep their types (dict, ``OrderedDict``,
    ``defaultdict`` with its factory, list, tuple, namedtuple, dataclass,
    ``FrozenDict``, optax states, any registered pytree; subclasses of dict, list
    and tuple and ``UserDict`` such as ``BatchEncoding`` come back as shallow copies of
    their own type), and dicts keep their key
    order (``x, y = batch.values()`` unpacks as in torch; JAX's own functions sort
    dict keys); NNX modules inside move in place and come back as the same objects,
    as ``Module.to`` moves a torch module inside a batch; other leaves (strings,
    ``None``, Python and NumPy numbers used as configuration, classes such as
    ``np.float32``) pass through unchanged, as a torch batch move leaves what has no
    ``.to``. A bare Python or NumPy number becomes a 0-d array. The tree's arrays move in
    one batched ``jax.device_put`` (an NNX module inside moves its state in its own). The input is
    never mutated, except a Flax NNX module, which moves in place and is returned, like
    ``Module.to``.

    As in torch, when nothing needs to change the very same object is returned and
    nothing is transferred; ``copy=True`` always gives fresh buffers, whatever the input
    (NumPy arrays JAX would alias on the CPU and torch tensors included) and whatever
    the form (``.to(dtype, copy=True)`` with an unchanged dtype too).

    Host data is read before ``to_device`` returns, ``non_blocking`` or not, as torch's
    copies from pageable memory are: writing to a NumPy array or tensor afterwards never
    changes the result, unless the result shares its memory. It does only on CPU devices:
    JAX keeps a dense NumPy array that starts 64-byte aligned in place (under a sharding,
    when every device's piece of it starts aligned), as ``torch.from_numpy`` and
    ``torch.as_tensor`` share memory, and a CPU tensor placed on ``cpu:0`` shares its
    memory, as ``t.to("cpu") is t``. Other arrays are copied before returning (from
    100 KiB on, a dense one that starts misaligned is copied here: JAX would copy it
    after returning); ``copy=True`` never shares.

    Gradients of integer inputs (``jax.grad(..., allow_int=True)``) are NumPy arrays of
    dtype ``float0``: they hold no values and no device can hold them, so such a leaf
    comes back as it is (a new one with ``copy=True``), as ``jax.device_put`` gives it
    back, and casting a lone one to another dtype raises ``DTypeError`` (in a tree only
    floating-point leaves are cast, so it stays).

    Nothing comes back unchanged by accident: a torch module (move it within torch with
    ``module.to(device.torch_device)``, or pass its ``state_dict()``) or any other object
    that is not an array, number, container or module raises ``ConversionError``.

    The torch overloads work too, with their positional arguments:
    ``to_device(x, jnp.float16)`` and ``to_device(x, dtype=jnp.float16)`` are
    ``x.to(dtype)`` (arrays stay where they are; host data goes to the CPU device),
    ``to_device(x, other)`` is ``x.to(other)`` (other's device and dtype), and
    ``to_device(x, "cuda", torch.float16, True)``, ``to_device(x, torch.float16, False,
    True)`` and ``to_device(x, other, True)`` read ``non_blocking`` and ``copy`` where
    torch reads them. Calls torch's ``.to`` refuses are refused too: flags that are not
    bools, a dtype after ``other``, a dtype's name as the device (``to_device(x,
    "float16")``: pass ``dtype="float16"``), and ``copy=True`` for a model.

    Casts give torch's values whatever holds the data (the rules are in
    ``_src/casting.py``): made before JAX narrows 64-bit data (int64 ``2**40`` to float32
    is ``1.0995e12``, not the ``0.0`` of wrapping through int32), ``float8_e4m3fn``
    saturating at ±448, subnormals ``True`` as bools, complex to real warning
    ``ComplexCastWarning``. A float outside an integer dtype's range cast to it is
    undefined in torch, and may differ.

    Args:
        obj: An array, tensor, Python number, container of them, or NNX module.
        device: Anything [`tj.device`][torch2jax_device.Device] accepts, a
            ``jax.sharding.Sharding`` (to split arrays over devices), a dtype (the
            ``.to(dtype)`` form; a dtype object, not its name, as in torch) or an array (the
            ``.to(other)`` form). ``None`` means the current default device
            ([`tj.get_default_device`][torch2jax_device.get_default_device]), unless ``dtype``
            or ``memory_format`` is given (``x.to(dtype)``, ``x.to(memory_format=...)``: arrays
            stay where they are).
        dtype: A JAX/NumPy dtype, its name or a ``torch.dtype``. A single array is
            cast whatever its dtype; in a container or module only floating-point and
            complex leaves are cast, as ``Module.to`` does.
        non_blocking: Return at once, while transfers run (JAX transfers are
            asynchronous); ``False`` returns once the data is on the device.
        copy: Always copy, even when nothing else changes (``Tensor.to(copy=True)``).
            ``False`` unless given; not for a model (``Module.to`` takes none, ``True``
            or ``False``).
        memory_format: A ``torch.memory_format``, taken for ported code and without
            effect: JAX arrays have no strides (XLA lays out each buffer itself, in
            channels-last order for GPU convolutions where that is faster), and the
            values are the same in every format, as in torch. ``torch.channels_last``
            (``channels_last_3d``) on a single array needs 4 (5) dimensions, as in torch.
        other: Refused, as torch refuses ``x.to(other=y)``: pass ``other`` positionally.
        max_memory: The budgets of ``device="auto"`` (Accelerate's ``device_map="auto"``,
            not torch's): ``{"cuda:0": "20GiB", "cpu": "100GiB"}``. With ``"auto"`` or a
            [`tj.DeviceMap`][torch2jax_device.DeviceMap], each array goes where the plan
            says (see `tj.DeviceMap.plan`: a model's arrays by its state dict's names and
            order, a tree's by dotted key paths), each place's in one transfer; an NNX
            module's RNG state goes to the plan's execution device. A plan that cannot
            place every array is refused before anything moves.

    Returns:
        The same structure with array leaves on the device (the module itself for NNX).

    Raises:
        DeviceUnavailableError: the device does not exist here, or a leaf is a ``meta``
            tensor or a ``jax.ShapeDtypeStruct`` (``jax.eval_shape``): it has no data.
        DTypeError: JAX does not know ``dtype``; it would cast a lone ``float0`` or PRNG
            key array; or a model (NNX, Equinox) is given a dtype that is not
            floating-point or complex (``Module.to`` refuses those).
        MemoryFormatError: ``memory_format`` is not a ``torch.memory_format`` or ``None``,
            or is ``torch.channels_last`` and a single array (or number) is not 4-d
            (``channels_last_3d``: 5-d), as torch refuses them.
        ConversionError: a leaf cannot become a JAX array (a NumPy array of strings or
            objects; a sparse, quantized or nested tensor; an array-like JAX rejects), was
            deleted or donated, or is a torch module; or ``obj`` itself is not something
            to move. The message names the leaf path and the fix.
        ArgumentTypeError: a call torch's ``.to`` refuses with ``TypeError``:
            ``non_blocking`` or ``copy`` not a bool (``None``, ``1``, ``"yes"``), or a dtype
            after ``other`` (``to_device(x, other, dtype)``), or ``other=`` as a keyword.
        InvalidDeviceError: ``device`` is a dtype's name (``"float16"``), which torch's
            ``.to`` refuses as an invalid device string.
        ConfigError, OutOfMemoryError, CheckpointError: with ``"auto"`` or a ``DeviceMap``,
            a plan that cannot be made or misses an array (see `tj.DeviceMap.plan`).
        UnsupportedOperationError: ``copy`` given at all (``True`` or ``False``) for an
            NNX or Equinox model (torch's ``Module.to`` raises ``RuntimeError``: it takes
            no ``copy``).

    Warns:
        DtypeNarrowingWarning: once per dtype, when int64 data, float64 tensors or an
            explicit float64 ``dtype`` become 32-bit; for NumPy float64 (NumPy's default)
            only when values overflow float32.
        ComplexCastWarning: complex data cast to a real dtype (the imaginary part is
            dropped), as torch warns.

    Note:
        Under ``jax.jit`` arrays are tracers without a device: ``to_device`` applies
        the dtype and leaves placement to JAX (placement inside ``jit`` follows the
        inputs' shardings).

    Examples:
        >>> import jax, jax.numpy as jnp, numpy as np
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
        >>> grads = jax.grad(lambda p: p["w"] @ p["ids"], allow_int=True)(
        ...     {"w": jnp.ones(2), "ids": jnp.arange(2)})
        >>> moved = tj.to_device(grads, "cpu")
        >>> moved["w"].device == tj.device("cpu"), moved["ids"].dtype == jax.dtypes.float0
        (True, True)

        A model bigger than the GPU, placed by a plan (here the host's budget only; on a
        GPU machine ``max_memory={"cuda:0": "20GiB", "cpu": "100GiB"}``):

        >>> params = {"embed": np.ones((4, 2), np.float32), "head": np.ones(2, np.float32)}
        >>> placed = tj.to_device(params, "auto", max_memory={"cpu": "1GiB"})
        >>> placed["embed"].sharding.memory_kind, list(placed)
        ('device', ['embed', 'head'])
    """
    if memory_format is not _NOT_GIVEN:
        to_forms.check_memory_format_kind(memory_format)  # torch's parser, first
    device, dtype, non_blocking, copy, copy_given = to_forms.read_call(
        device, dtype, non_blocking, copy, other
    )
    if memory_format is not _NOT_GIVEN:
        if device is None:  # torch's .to(memory_format=...): the device stays
            device = _KEEP
        if memory_format is not None:
            to_forms.check_memory_format(obj, memory_format)
    if copy_given and (is_nnx_module(obj) or is_equinox_module(obj)):
        raise UnsupportedOperationError(
            f"to_device({type_name(obj)}, copy={copy}): Module.to does not accept copy, "
            "True or False (torch raises RuntimeError: .to() does not accept copy argument), "
            "and an NNX model moves in place. Fix: drop copy; to move a copy, copy the model "
            "first (nnx.clone(model); for Equinox, jax.tree.map(jnp.copy, model))"
        )
    planned = max_memory is not None or device_plan.asks_for_plan(device)  # device_map="auto"
    if is_nnx_module(obj) and not planned:
        return _move_module(obj, device, dtype, non_blocking=non_blocking, copy=copy)
    if is_nnx_module(obj) or is_equinox_module(obj):
        _check_model_dtype(dtype)
    single = type(obj) not in _CONTAINERS and (is_array(obj) or isinstance(obj, _SINGLES))
    flat = flatten(obj, whole=is_nnx_module)  # NNX modules inside move in place, as the root
    lone = not single and len(flat.leaves) == 1 and flat.leaves[0] is obj
    if lone and not _array_like(obj) and not is_nnx_module(obj):
        _refuse_root(obj)
    if planned:
        return _move_by_plan(obj, device, max_memory, dtype, single, non_blocking, copy)
    target = _target(device)
    if (
        dtype is None
        and not copy
        and target is not _KEEP
        and not batched_transfer.into_host_memory(target)
        and _plain_host_data(flat.leaves)
    ):
        # The feeding lane: host batches, nothing to cast or keep, one transfer.
        fresh = moved = batched_transfer.device_put(
            flat.leaves, target, copy=False, path=lambda index: _leaf_path(obj, index)
        )
        reading = moved if batched_transfer.reads_caller_late(target) else []
    else:
        moved, fresh, reading = _move(
            obj,
            flat.leaves,
            target,
            _requested(dtype),
            cast_all=single,
            convert_scalars=single,
            copy=copy,
            non_blocking=non_blocking,
        )
    if not non_blocking:
        jax.block_until_ready(fresh)
    elif reading:  # the caller's memory is read before returning, as torch's pageable copies
        jax.block_until_ready(reading)
    return flat.rebuild(moved)


def _requested(dtype: Any) -> np.dtype[Any] | None:
    """The dtype asked for, as NumPy's; warns (once per dtype) where JAX will narrow it.

    Casts are made to this dtype before narrowing (`casting`), so int64 data cast to
    float32 never wraps through int32.
    """
    if dtype is None:
        return None
    requested = dtypes.array_dtype(dtype)
    dtypes.canonical(requested)  # the narrowing warning, said where the dtype was asked for
    return requested


def _leaf_path(tree: Any, index: int) -> str:
    """The path of ``to_device``'s leaf ``index`` (NNX modules are leaves there)."""
    return leaf_path(tree, index, whole=is_nnx_module)


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
                and dtypes.transfers(dtype)
                and jax.dtypes.canonicalize_dtype(dtype) == dtype
            ):
                return False
            kept.add(dtype)
    return True


#: The dtypes JAX holds as they are, without and with x64 (filled as they are met).
_kept_dtypes: dict[bool, set[np.dtype[Any]]] = {False: set(), True: set()}


def _abstract(path: str, leaf: jax.ShapeDtypeStruct) -> DeviceUnavailableError:
    """The error for a shape without data (``jax.eval_shape``, ``nnx.eval_shape``): JAX's
    meta tensor, which ``Module.to`` refuses to move as torch refuses a meta module."""
    return DeviceUnavailableError(
        f"leaf {path} is a jax.ShapeDtypeStruct (shape {leaf.shape}, {leaf.dtype}): a shape "
        "without data, as a meta tensor is, so it cannot be moved (torch: 'Cannot copy out "
        "of meta tensor'). Fix: build the model or arrays for real on the device (with "
        "tj.device(device): model = Model(rngs=nnx.Rngs(0)), or jnp.zeros(leaf.shape, "
        "leaf.dtype)), then load the weights, as module.to_empty() does in torch"
    )


def _cast_abstract(
    leaf: jax.ShapeDtypeStruct, dtype: np.dtype[Any] | None, cast_all: bool
) -> jax.ShapeDtypeStruct:
    """``meta_tensor.to(dtype)``: the same shape with the dtype ``_cast`` would give it."""
    if dtype is None or not (cast_all or dtypes.is_inexact(leaf.dtype)):
        return leaf
    narrowed = dtypes.canonical(dtype)
    if leaf.dtype == narrowed:
        return leaf
    return jax.ShapeDtypeStruct(leaf.shape, narrowed, sharding=leaf.sharding)


def _refuse_root(obj: Any) -> NoReturn:
    """``to_device`` of something that is neither an array, a number nor a container."""
    kind = (
        f"class ({obj.__module__}.{obj.__qualname__})" if isinstance(obj, type) else type_name(obj)
    )
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


def _move(
    tree: Any,
    leaves: list[Any],
    target: Any,
    dtype: np.dtype[Any] | None,
    *,
    cast_all: bool,
    convert_scalars: bool,
    copy: bool,
    non_blocking: bool,
) -> tuple[list[Any], list[jax.Array], list[jax.Array]]:
    """The new leaves, the arrays made here (to wait for unless non_blocking), and those
    whose transfer may still read the caller's memory (to wait for in any case)."""
    moved = list(leaves)
    fresh: list[jax.Array] = []
    pending: list[int] = []
    reads_caller: set[int] = set()  # pending leaves whose transfer reads the caller's memory
    # copy=True where nothing moves: arrays that may share the source's memory.
    in_place_copies: list[int] = []
    placing = target is not _KEEP
    # NumPy leaves join the batched transfer directly, except into host memory kinds
    # where JAX could alias their buffers (pin_memory promises a copy); host_staging
    # copies them into one device's pinned memory itself, at memory bandwidth.
    host_direct = placing and (
        not batched_transfer.into_host_memory(target) or host_staging.copies_host_data(target)
    )
    # JAX aliases aligned NumPy buffers on CPU devices even with may_alias=False.
    host_copy = copy and placing and batched_transfer.on_cpu(target)
    host_read_later = placing and batched_transfer.reads_caller_late(target)
    array_type, tracer_type = jax.Array, jax.core.Tracer  # locals: this loop is hot
    for index, leaf in enumerate(leaves):
        shared = False  # the array may share the input's memory
        given_array = False  # the leaf is a jax.Array (its memory is never the caller's)
        if isinstance(leaf, array_type):
            given_array = True
            if isinstance(leaf, tracer_type):
                moved[index] = _cast(leaf, dtype, cast_all)
                continue
            if leaf.is_deleted():
                raise ConversionError(
                    f"leaf {_leaf_path(tree, index)} is a deleted or donated jax.Array; "
                    "use the array the donating call returned"
                )
            array = leaf if dtype is None else _cast(leaf, dtype, cast_all)
            shared = array is leaf
        elif isinstance(leaf, (np.ndarray, np.generic)) and leaf.dtype == _FLOAT0:
            moved[index] = _float0(tree, index, leaf, dtype if cast_all else None, copy)
            continue
        elif isinstance(leaf, np.generic) and not convert_scalars:
            continue  # a number in a batch, as a Python number is (torch's moves leave both)
        elif isinstance(leaf, (np.ndarray, np.generic)):
            # Host data is cast on the host, before JAX narrows it (one path for every form).
            host = _leaf_conversion(tree, index, host_array, leaf)
            cast = _leaf_conversion(tree, index, _host_cast, host, dtype, cast_all)
            if not dtypes.transfers(cast.dtype):
                raise ConversionError(
                    f"leaf {_leaf_path(tree, index)}: {dtypes.untransferable(cast.dtype)}"
                )
            shared = np.may_share_memory(cast, leaf)
            if host_direct:  # joins the one batched transfer directly
                moved[index] = batched_transfer.aligned_copy(cast) if host_copy and shared else cast
                if host_read_later and shared:
                    reads_caller.add(index)
                pending.append(index)
                continue
            array = _leaf_conversion(tree, index, to_jax, cast)  # on the CPU device
        elif is_torch_tensor(leaf):
            source = leaf
            if dtype is not None and (cast_all or leaf.is_floating_point() or leaf.is_complex()):
                source = casting.cast_tensor(leaf, dtype)  # torch's own cast, before narrowing
            converted = _leaf_conversion(tree, index, to_jax, source)
            array = _cast(converted, dtype, cast_all)
            shared = array is converted and source is leaf
        elif is_nnx_module(leaf):  # moved in place and kept, as Module.to inside a batch
            _move_module(leaf, target, dtype, non_blocking=non_blocking, copy=copy)
            continue
        elif isinstance(leaf, _PYTHON_SCALARS):
            if not convert_scalars:
                continue
            array = _cast(_number_array(tree, index, leaf, dtype), dtype, cast_all)
        elif _array_like(leaf):
            array = _cast(_convert_array_like(tree, index, leaf), dtype, cast_all)
        elif isinstance(leaf, jax.ShapeDtypeStruct):  # JAX's meta tensor: a dtype, no data
            if placing:
                raise _abstract(_leaf_path(tree, index), leaf)
            moved[index] = _cast_abstract(leaf, dtype, cast_all)
            continue
        elif is_torch_module(leaf):
            raise ConversionError(
                f"leaf {_leaf_path(tree, index)} is a torch module "
                f"({type_name(leaf)}): JAX cannot hold torch "
                "modules. Fix: move it within torch (module.to(device.torch_device)) or put "
                "its state_dict() in the tree instead"
            )
        else:
            carried.refuse_uncarried(leaf, functools.partial(_leaf_path, tree, index))
            continue
        if array is not leaf:
            moved[index] = array
            fresh.append(array)
        if placing and (copy or not (array.committed and array.sharding == target)):
            pending.append(index)
            if shared and not given_array:  # over a tensor's memory
                reads_caller.add(index)
        elif copy and shared:
            in_place_copies.append(index)
    if pending:
        placed = batched_transfer.device_put(
            [moved[index] for index in pending],
            target,
            copy=copy,
            path=lambda position: _leaf_path(tree, pending[position]),
        )
        for index, array in zip(pending, placed, strict=True):
            moved[index] = array
        fresh.extend(placed)
    reading = [moved[index] for index in reads_caller]
    if in_place_copies:
        arrays = [moved[index] for index in in_place_copies]
        copies = jax.device_put(arrays, [array.sharding for array in arrays], may_alias=False)
        for index, array in zip(in_place_copies, copies, strict=True):
            moved[index] = array
        fresh.extend(copies)
    return moved, fresh, reading


#: The dtype of the gradient of an integer input (``jax.grad(..., allow_int=True)``).
_FLOAT0 = np.dtype(jax.dtypes.float0)


def _float0(
    tree: Any, index: int, leaf: Any, dtype: np.dtype[Any] | None, copy: bool
) -> np.ndarray[Any, Any] | np.generic:
    """A float0 leaf, as ``jax.device_put`` gives it back: NumPy float0 data, on no device.

    float0 holds no values (0 bytes an element) and JAX arrays cannot have it, so nothing
    moves; ``copy=True`` gives a new one. Casting it to another dtype is refused.
    """
    if dtype is not None and dtype != _FLOAT0:
        raise DTypeError(
            f"leaf {_leaf_path(tree, index)} is a float0 array (the gradient "
            "jax.grad(..., allow_int=True) gives an integer input): it holds no values, so it "
            f"cannot become {dtype}. Fix: use np.zeros(x.shape, {dtype}) where zeros are meant, "
            "or pass the whole tree: a dtype casts only a tree's floating-point leaves"
        )
    kept: np.ndarray[Any, Any] | np.generic = leaf.copy() if copy else leaf
    return kept


def _leaf_conversion(
    tree: Any, index: int, convert: Callable[..., Any], leaf: Any, *arguments: Any
) -> Any:
    """``convert(leaf, *arguments)``, with the leaf path put in front of the library's errors."""
    try:
        return convert(leaf, *arguments)
    except Torch2JaxDeviceError as err:
        raise type(err)(f"leaf {_leaf_path(tree, index)}: {err}") from err


def _host_cast(
    host: np.ndarray[Any, Any], dtype: np.dtype[Any] | None, cast_all: bool
) -> np.ndarray[Any, Any]:
    """``host`` in the dtype it will have in JAX: cast as torch casts it, then narrowed
    without x64."""
    if dtype is not None and (cast_all or dtypes.is_inexact(host.dtype)):
        return casting.cast_host(host, dtype)
    return dtypes.narrow_host(host)


def _cast(array: jax.Array, dtype: np.dtype[Any] | None, cast_all: bool) -> jax.Array:
    if dtype is None:
        return array
    if not cast_all and not dtypes.is_inexact(array.dtype):  # PRNG keys are not inexact
        return array
    if dtypes.is_prng_key(array.dtype):
        raise DTypeError(
            f"a JAX PRNG key array ({array.dtype}) holds no numbers, so it cannot become "
            f"{dtype}. Fix: cast its bits, jax.random.key_data(key).astype(...), or pass the "
            "whole tree: a dtype casts only a tree's floating-point leaves, and keys stay keys"
        )
    if isinstance(array, jax.core.Tracer) or array.committed:
        return casting.cast_array(array, dtype)
    # An uncommitted array (made under `with tj.device(...)`) is cast where it is: JAX
    # would run the cast on its default device (the GPU) and the result would land there,
    # where torch's x.to(dtype) keeps the device.
    with jax.default_device(next(iter(array.devices()))):
        return casting.cast_array(array, dtype)


def _number_array(tree: Any, index: int, number: Any, dtype: np.dtype[Any] | None) -> jax.Array:
    """A bare Python number as ``torch.tensor(number).to(dtype)`` makes it: on the host CPU
    (torch's tensor is a CPU tensor, and tj's host data goes to the CPU device), whatever
    JAX's default device is.

    JAX's own 0-d array where the number fits (weak-typed, so it promotes as torch's 0-d
    tensors do); an int that needs int64 is cast from int64 to ``dtype`` as torch casts
    it, and without a ``dtype`` it needs x64, which the error says.
    """
    host_cpu = jax.local_devices(backend="cpu")[0]
    try:
        with jax.default_device(host_cpu):
            return jax.numpy.asarray(number)
    except OverflowError:
        pass
    try:
        host = np.asarray(number, np.int64)  # torch's dtype for a Python int
    except OverflowError:
        raise ConversionError(
            f"leaf {_leaf_path(tree, index)}: the Python int {number} does not fit int64 "
            "(torch raises ValueError: Overflow when unpacking long long). Fix: pass it as "
            "a float, or keep it out of the arrays"
        ) from None
    if dtype is None:
        raise ConversionError(
            f"leaf {_leaf_path(tree, index)}: the Python int {number} needs int64 (torch's "
            "dtype for it), which JAX has only with jax_enable_x64. Fix: call "
            "jax.config.update('jax_enable_x64', True) before creating arrays, or pass the "
            "dtype it should have (to_device(number, device, jnp.float32))"
        )
    placed: jax.Array = jax.device_put(casting.cast_host(host, dtype), host_cpu)
    return placed


def _array_like(value: Any) -> bool:
    """An object offering an array protocol (``__array__``, DLPack...), which JAX converts.

    A class is never one, though its instances are: ``np.float32``, ``ml_dtypes.bfloat16``
    or ``torch.Tensor`` held in a batch as configuration (``{"x": x, "dtype": np.float32}``)
    is passed through, as a torch batch move passes it.
    """
    return not isinstance(value, type) and any(
        hasattr(value, protocol) for protocol in _ARRAY_PROTOCOLS
    )


def _convert_array_like(tree: Any, index: int, leaf: Any) -> jax.Array:
    try:
        return jax.numpy.asarray(leaf)
    except Exception as err:
        raise ConversionError(
            f"leaf {_leaf_path(tree, index)} of type {type_name(leaf)} looks like an array but "
            f"JAX cannot convert it ({err}); convert it to a NumPy array first"
        ) from err


def _move_module(module: Any, device: Any, dtype: Any, *, non_blocking: bool, copy: bool) -> Any:
    nnx = sys.modules["flax.nnx"]
    _check_model_dtype(dtype)
    state = nnx.state(module)
    nnx.update(module, to_device(state, device, dtype, non_blocking=non_blocking, copy=copy))
    return module


def _check_model_dtype(dtype: Any) -> None:
    """A model (NNX or Equinox) is cast to floating-point or complex dtypes only, as torch's
    ``Module.to`` refuses others."""
    if dtype is not None and not dtypes.is_inexact(dtypes.to_numpy_dtype(dtype)):
        raise DTypeError(
            f"Module.to only accepts floating point or complex dtypes, but got desired "
            f"dtype={dtype}; cast integer state explicitly with jax.tree.map"
        )


def _move_by_plan(
    obj: Any, device: Any, max_memory: Any, dtype: Any, single: bool, non_blocking: bool, copy: bool
) -> Any:
    """``to_device(obj, "auto" | plan, max_memory=)``: names and order are
    ``array_names``', the plan ``device_plan``'s; each place gets its arrays in one
    ``to_device``, and what no plan places (RNG state) goes to the execution device."""
    named = array_names.NamedArrays(obj)  # a lone array or number: one, named ""
    for name, leaf in named.arrays.items():
        if isinstance(leaf, jax.ShapeDtypeStruct):
            raise _abstract(name or "<root>", leaf)
    plan = device_plan.plan_for(
        lambda: device_plan.shapes_of(named.arrays, dtype, cast_all=single),
        device,
        device_map=None,
        max_memory=max_memory,
    )
    moved: dict[str, Any] = {}
    for place, names in plan.grouped(named.arrays).items():
        # One object under several names (a tied weight) is counted once by the plan:
        # it is moved once, and every name of it gets the same array.
        distinct = {id(named.arrays[name]): named.arrays[name] for name in names}
        arrays = list(distinct.values())
        if single:  # cast whatever its dtype, as Tensor.to casts one array
            placed = [to_device(arrays[0], place.sharding, dtype, non_blocking, copy)]
        else:
            placed = to_device(arrays, place.sharding, dtype, non_blocking, copy)
        same = dict(zip(distinct, placed, strict=True))
        moved.update((name, same[id(named.arrays[name])]) for name in names)
    rest = to_device(named.unplanned, plan.execution_device, non_blocking=non_blocking)
    return named.rebuild(moved, rest)
