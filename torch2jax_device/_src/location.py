"""Where arrays are: ``tensor.device`` and ``next(model.parameters()).device`` for JAX.

The queries torch code asks about placement, answered without moving anything:
`device_of`, `get_device`, `check_same_device`, `parameters` and its `Parameter`
view, and `Placements`, the devices of every array of a tree (which strict placement
reads too). Moving data is ``placement``'s; it asks here where things are.
"""

from __future__ import annotations

import itertools
import operator
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NoReturn, TypeVar

import jax
import numpy as np

from . import dtypes
from .detect import (
    is_equinox_module,
    is_nnx_module,
    is_torch_module,
    is_torch_tensor,
    is_tracer,
)
from .device import Device
from .errors import (
    ArgumentTypeError,
    DimensionNameError,
    EmptyTreeError,
    InvalidIndexError,
    MixedDeviceError,
    NoSuchAttributeError,
    UnsupportedOperationError,
)
from .trees import flatten

_Item = TypeVar("_Item")

__all__ = [
    "Parameter",
    "Placements",
    "check_same_device",
    "device_of",
    "get_device",
    "in_torch_order",
    "is_array",
    "leaf_path",
    "own_leaves_first",
    "parameters",
]


def is_array(value: Any) -> bool:
    """An array of any framework, or a ``tj.Parameter``: what ``Tensor.to(other)`` takes."""
    return isinstance(value, (jax.Array, np.ndarray, np.generic, Parameter)) or is_torch_tensor(
        value
    )


def leaf_path(tree: Any, index: int, *, whole: Callable[[Any], bool] | None = None) -> str:
    """The path of the ``index``-th leaf of ``tree`` (``<root>`` for the tree itself),
    counting leaves as ``flatten(tree, whole=whole)`` does."""
    path = flatten(tree, with_paths=True, whole=whole).paths[index]
    return path or "<root>"


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
        f"leaf {leaf_path(tree, index)} is sharded over {len(local)} devices ({names}); "
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
        path = leaf_path(self.trees[position], index).removeprefix("<root>")
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
        ``jnp.zeros(3, device=tj.device_of(x))`` works traced and untraced. ``meta``
        for a model of ``jax.ShapeDtypeStruct`` leaves only (``nnx.eval_shape``), as
        torch answers for a model built on the meta device.

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
    if any(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in flatten(obj).leaves):
        return Device("meta")  # a model not yet built (nnx.eval_shape): torch's meta model
    raise EmptyTreeError(
        f"device_of() found no arrays in {type(obj).__name__}: nothing to read a device "
        "from (torch: StopIteration from next(model.parameters())). Fix: pass the model, "
        "array or tree of arrays whose device you want"
    )


def get_device(input: Any) -> int:  # torch's parameter name
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
    device = device_of(input)
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


def parameters(model: Any, recurse: bool = True) -> Iterator[Any]:
    """Equivalent to `Module.parameters`.

    The parameters of a model: ``model.parameters()`` for JAX.

    For a Flax NNX module, its ``nnx.Param`` variables; for a linen variables dict
    (``{"params": ..., "batch_stats": ...}``), the ``"params"`` collection; for an
    Equinox module or any other pytree, every array leaf. Each comes as a
    `tj.Parameter`: its ``.device`` is a torch-style
    device (``.type``, ``.index``, ``str``, ``==`` with ``torch.device``), and it is
    still an array in JAX code (``.data`` is the ``jax.Array`` itself). A torch module's
    parameters are its own (``model.parameters()``), so mixed code can ask either kind.
    ``recurse=False`` gives the model's own parameters only (its attributes', not its
    layers'), as torch's does.

    Raises:
        ArgumentTypeError: ``recurse`` is not a bool.

    Examples:
        >>> import jax.numpy as jnp
        >>> import torch2jax_device as tj
        >>> params = tj.to_device({"params": {"w": jnp.ones(2)}}, "cpu")
        >>> weight = next(tj.parameters(params))
        >>> weight.device, weight.device.type, str(weight.device)
        (device(type='cpu'), 'cpu', 'cpu')
        >>> float((weight * 2).sum())
        4.0
        >>> len(list(tj.parameters({"w": jnp.ones(2), "layer": {"b": jnp.ones(2)}}, recurse=False)))
        1
    """
    if not isinstance(recurse, bool):
        raise ArgumentTypeError(
            f"parameters(): recurse must be True (every parameter, the layers' too) or False "
            f"(the model's own), not {type(recurse).__name__} {recurse!r}"
        )
    if is_torch_module(model):
        return iter(model.parameters(recurse=recurse))

    def own(path: Any) -> bool:
        return recurse or len(path) == 1

    if is_nnx_module(model):
        nnx = sys.modules["flax.nnx"]
        pairs = in_torch_order(model, nnx.to_flat_state(nnx.state(model, nnx.Param)))
        values = (variable.get_value() for path, variable in pairs if own(path))
        return (Parameter(value) for value in values if _parameter_like(value))
    if is_equinox_module(model):
        pairs = own_leaves_first(
            jax.tree_util.tree_flatten_with_path(model)[0], path=operator.itemgetter(0)
        )
        return (Parameter(leaf) for path, leaf in pairs if own(path) and _parameter_like(leaf))
    if isinstance(model, Mapping) and "params" in model:
        tree = model["params"]
    else:
        tree = model
    if recurse:  # arrays: a Parameter is a pytree of its array
        return (Parameter(leaf) for leaf in flatten(tree).leaves if _parameter_like(leaf))
    children = (  # a dict's own values, in its order (its keys may not sort)
        tree.values()
        if isinstance(tree, Mapping)
        else jax.tree_util.tree_leaves(tree, is_leaf=lambda node: node is not tree)
    )
    return (Parameter(child) for child in children if _parameter_like(child))


def _parameter_like(value: Any) -> bool:
    """An array, or a ``jax.ShapeDtypeStruct`` (``nnx.eval_shape``): JAX's meta tensor, a
    parameter of a model not yet built, as torch lists a meta model's parameters."""
    return is_array(value) or isinstance(value, jax.ShapeDtypeStruct)


def in_torch_order(module: Any, pairs: Iterable[tuple[tuple[Any, ...], Any]]) -> list[Any]:
    """An NNX module's ``(path, variable)`` pairs in the order torch lists its twin's.

    ``nnx.state`` sorts names (``bias`` before ``kernel``, ``alpha`` before ``zeta``,
    a module's own variables among its layers). A torch module lists, module by module,
    its parameters, then its buffers, then its submodules, each kind in the order it
    was assigned (``weight`` before ``bias``): ``model.parameters()`` and
    ``model.state_dict()`` both follow it. Here ``nnx.Param`` variables are parameters
    and other variables buffers; a name whose place cannot be found keeps its
    ``nnx.state`` place after the others.

    Examples:
        >>> from flax import nnx
        >>> import jax.numpy as jnp
        >>> import torch2jax_device as tj
        >>> class Net(nnx.Module):
        ...     def __init__(self):
        ...         self.zeta = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
        ...         self.scale = nnx.Param(jnp.ones(2))
        >>> [path for path, _ in nnx.to_flat_state(nnx.state(Net()))]
        [('scale',), ('zeta', 'bias'), ('zeta', 'kernel')]
        >>> from torch2jax_device._src.location import in_torch_order
        >>> [path for path, _ in in_torch_order(Net(), nnx.to_flat_state(nnx.state(Net())))]
        [('scale',), ('zeta', 'kernel'), ('zeta', 'bias')]
    """
    nnx = sys.modules["flax.nnx"]
    nodes = dict(nnx.iter_graph(module))

    def torch_place(pair: tuple[tuple[Any, ...], Any]) -> list[tuple[int, int]]:
        path, variable = pair
        place = []
        for depth, name in enumerate(path):
            child = variable if depth == len(path) - 1 else nodes.get(path[: depth + 1])
            kind = 2  # a layer, after the module's own parameters (0) and buffers (1)
            if isinstance(child, nnx.Variable):
                kind = 0 if isinstance(child, nnx.Param) else 1
            place.append((kind, _assignment_position(nodes.get(path[:depth]), name)))
        return place

    return sorted(pairs, key=torch_place)  # stable: unplaced names keep nnx's order


def own_leaves_first(items: list[_Item], *, path: Callable[[_Item], Any]) -> list[_Item]:
    """Pytree leaves (in field order) in torch's order: each module's own arrays, then its
    inner modules', as a torch twin lists parameters before submodules (Equinox).

    ``path(item)`` is the item's key path (``jax.tree_util.tree_flatten_with_path``).
    """
    first_seen: dict[tuple[Any, ...], int] = {}
    for item in items:
        keys = tuple(path(item))
        for depth in range(1, len(keys) + 1):
            first_seen.setdefault(keys[:depth], len(first_seen))

    def torch_place(item: _Item) -> list[tuple[bool, int]]:
        keys = tuple(path(item))
        return [(depth < len(keys), first_seen[keys[:depth]]) for depth in range(1, len(keys) + 1)]

    return sorted(items, key=torch_place)


def _assignment_position(parent: Any, name: Any) -> int:
    """Where ``name`` was assigned in ``parent`` (a module, list or dict); last if unknown.

    An NNX module's ``__dict__`` is in assignment order only as built: ``nnx.clone``,
    ``nnx.merge``, ``nnx.jit`` and pytree maps rebuild it sorted. Its ``_pytree__nodes``
    (Flax's record of each attribute it was assigned, in that order, static metadata
    that every transformation carries over) keeps the order, so it is read first.
    """
    if isinstance(parent, (list, tuple)) and isinstance(name, int):
        return name
    assigned = getattr(parent, "_pytree__nodes", None)
    if isinstance(assigned, Mapping):
        names = list(assigned)
    elif isinstance(parent, Mapping):
        names = list(parent)
    else:
        names = list(getattr(parent, "__dict__", ()))
    for candidate in (name, str(name)):
        if candidate in names:
            return names.index(candidate)
    return sys.maxsize


def _array_device(array: Any) -> Device | None:
    """``tensor.device`` for one array: torch-style, ``None`` for a tracer."""
    if is_tracer(array):
        return None
    if isinstance(array, jax.Array):
        return Device(_single_device(array, array, 0))
    if is_torch_tensor(array):
        return Device(array.device)
    if isinstance(array, jax.ShapeDtypeStruct):  # a shape without data: torch's meta tensor
        return Device("meta")
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
    is the array; ``numel()`` counts elements (``sum(p.numel() for p in ...)``). ``size``
    answers both languages: read as a value it is JAX's ``Array.size``, the element count
    (an ``int``); called, it is torch's ``Tensor.size``: ``p.size()`` is the shape (a
    tuple, equal to the ``torch.Size`` torch gives), ``p.size(dim)`` one length, negative
    ``dim`` counting from the end, and a ``dim`` out of range raises ``IndexError``
    ([`tj.InvalidIndexError`][torch2jax_device.InvalidIndexError]) as in torch. Everything
    else is the array's own: ``shape``, ``dtype`` (equal to torch's dtype of the same name
    too), ``sharding``, methods, operators.

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
        >>> p.size, p.size(), p.size(-1)  # JAX's element count; torch's shape and length
        (6, (2, 3), 3)
        >>> jax.jit(lambda w: w.sum())(p)
        Array(6., dtype=float32)
        >>> tj.Parameter().size()  # torch.nn.Parameter(): empty, float32
        (0,)

    Args:
        data: The array (``None``: an empty float32 array, as torch's).
        requires_grad: Only ``True``: what JAX differentiates is chosen where the
            gradient is taken (``nnx.grad``, ``nnx.Optimizer(..., wrt=)``); ``False`` is
            refused naming those fixes.

    Raises:
        UnsupportedOperationError: ``requires_grad`` other than ``True``.
    """

    __slots__ = ("_array",)
    _array: Any

    def __init__(self, data: Any = None, requires_grad: bool = True) -> None:
        if requires_grad is not True:
            raise UnsupportedOperationError(
                f"tj.Parameter(..., requires_grad={requires_grad!r}): a JAX array has no "
                "requires_grad; what is differentiated is what jax.grad / nnx.grad is "
                "asked for. Fix: leave the array out of the gradient (nnx.Variable instead "
                "of nnx.Param, or nnx.Optimizer(..., wrt=) a filter that excludes it), or "
                "jax.lax.stop_gradient(x) where it is used"
            )
        if data is None:  # torch.nn.Parameter(): an empty float32 tensor
            data = jax.numpy.zeros((0,), jax.numpy.float32)
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

    @property
    def dtype(self) -> Any:
        """The array's dtype, which also equals torch's dtype of its name
        (``p.dtype == torch.float16``), as ``.device`` equals a ``torch.device``."""
        return dtypes.comparable(self._array.dtype)

    def dim(self) -> int:
        """The number of dimensions (``Tensor.dim``; ``p.ndim`` too)."""
        return int(self._array.ndim)

    def view(self, *shape: Any) -> Any:
        """``Tensor.view``: ``p.view(-1)`` and ``p.view(2, 3)`` reshape (a JAX array is
        immutable, so the reshaped array shares nothing that could change), and
        ``p.view(dtype)`` reinterprets the bits, as both torch and JAX do.

        Examples:
            >>> import jax.numpy as jnp
            >>> import torch2jax_device as tj
            >>> p = next(tj.parameters({"w": jnp.arange(6.0)}))
            >>> p.view(2, 3).shape, p.view(-1).shape, p.view(jnp.int32).dtype
            ((2, 3), (6,), dtype('int32'))
        """
        try:
            if len(shape) == 1 and not isinstance(shape[0], (int, tuple, list)):
                return self._array.view(shape[0])  # a dtype
            return self._array.reshape(*shape)
        except (TypeError, ValueError) as error:  # NumPy's and JAX's refusals
            shown = ", ".join(f"{one!r:.40}" for one in shape)
            raise ArgumentTypeError(
                f"view({shown}) of a {list(self._array.shape)} parameter: {error}. Fix: pass "
                "a shape whose sizes multiply to the element count (-1 for one of them), or "
                "a dtype of the same width"
            ) from None

    def element_size(self) -> int:
        """Bytes per element (``Tensor.element_size``)."""
        return int(np.dtype(self._array.dtype).itemsize)

    def is_floating_point(self) -> bool:
        """Whether the dtype is a floating-point one (``Tensor.is_floating_point``;
        complex is not)."""
        return bool(jax.numpy.issubdtype(self._array.dtype, jax.numpy.floating))

    def is_complex(self) -> bool:
        """Whether the dtype is complex (``Tensor.is_complex``)."""
        return bool(jax.numpy.issubdtype(self._array.dtype, jax.numpy.complexfloating))

    @property
    def size(self) -> ParameterSize:
        """The element count (``Array.size``), callable as torch's ``Tensor.size([dim])``."""
        return ParameterSize(tuple(self._array.shape))

    def tree_flatten_with_keys(self) -> tuple[tuple[tuple[Any, Any]], None]:
        return ((jax.tree_util.GetAttrKey("data"), self._array),), None

    @classmethod
    def tree_unflatten(cls, aux: None, children: tuple[Any, ...]) -> Parameter:
        view = object.__new__(cls)  # any leaf, None included (JAX's placeholders)
        object.__setattr__(view, "_array", _unwrap(children[0]))
        return view

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
            if name in _TORCH_METHODS:
                raise NoSuchAttributeError(
                    f"tj.Parameter has no attribute {name!r} (torch's Tensor.{name}): JAX "
                    f"arrays have no such method. Fix: {_TORCH_METHODS[name]}"
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
        try:
            return self._array[index]
        except (TypeError, IndexError, ValueError, OverflowError) as error:  # JAX's refusals
            raise InvalidIndexError(
                f"parameter[{index!r:.60}] of shape {list(self._array.shape)}: {error}. Fix: "
                "index with ints, slices, ..., None, or an integer or boolean array"
            ) from None

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


class ParameterSize(int):
    """``Parameter.size``: JAX's element count, an ``int``, and torch's ``size()`` when called.

    JAX code reads ``p.size`` as ``Array.size`` (``sum(p.size for p in ...)``) and torch
    code calls ``p.size()`` / ``p.size(dim)``; both work on the same value.

    Examples:
        >>> import jax.numpy as jnp
        >>> import torch2jax_device as tj
        >>> size = tj.Parameter(jnp.ones((2, 3))).size
        >>> size + 0, size(), size(0)
        (6, (2, 3), 2)
    """

    _shape: tuple[int, ...]

    def __new__(cls, shape: tuple[int, ...]) -> ParameterSize:
        count = super().__new__(cls, int(np.prod(shape, dtype=np.int64)))
        count._shape = shape
        return count

    def __call__(self, dim: Any = None) -> Any:
        """``Tensor.size(dim)``: the shape without ``dim``, else the length along it.

        Raises:
            ArgumentTypeError: ``dim`` is not an int (torch raises ``TypeError``);
                ``DimensionNameError``, also a ``RuntimeError``, for a ``str`` (a name).
            InvalidIndexError: ``dim`` is out of range (torch raises ``IndexError``).
        """
        if dim is None:
            return self._shape
        if isinstance(dim, str):
            raise DimensionNameError(
                f"size(): argument 'dim' must be int, not str; {dim!r} is a dimension name in "
                "torch, and tj.Parameter has no named dimensions: pass an axis number "
                "(negative counts from the end), or nothing for the whole shape"
            )
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
            raise ArgumentTypeError(
                f"size(): argument 'dim' must be int, not {type(dim).__name__}; pass an axis "
                "number (negative counts from the end), or nothing for the whole shape"
            )
        rank = len(self._shape)
        if rank == 0:
            raise InvalidIndexError(
                f"Dimension specified as {dim} but tensor has no dimensions; a 0-d array's "
                "size() is ()"
            )
        if not -rank <= dim < rank:
            raise InvalidIndexError(
                f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], "
                f"but got {dim})"
            )
        return self._shape[dim]

    def __reduce__(self) -> tuple[type[ParameterSize], tuple[tuple[int, ...]]]:
        return (ParameterSize, (self._shape,))


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


#: torch's other Tensor methods ported code calls on a parameter, and the JAX spelling.
_TORCH_METHODS = {
    "abs": "jnp.abs(p)",
    "new_zeros": "jnp.zeros(shape, p.dtype, device=p.device.jax_device)",
    "new_ones": "jnp.ones(shape, p.dtype, device=p.device.jax_device)",
    "new_full": "jnp.full(shape, value, p.dtype, device=p.device.jax_device)",
    "new_empty": "jnp.empty(shape, p.dtype, device=p.device.jax_device)",
    "new_tensor": "jnp.asarray(data, p.dtype, device=p.device.jax_device)",
    "detach": "p.data (gradients come from jax.grad, not from the array), or "
    "jax.lax.stop_gradient(p) inside a function jax.grad differentiates",
    "numpy": "np.asarray(p) (tj.to_device(p, 'cpu') first for a GPU array)",
    "data_ptr": "p.data.unsafe_buffer_pointer()",
    "norm": "jnp.linalg.norm(p)",
    "pow": "p ** exponent, or jnp.power(p, exponent)",
    "float": "p.astype(jnp.float32), or tj.to_device(p, dtype=jnp.float32)",
    "half": "p.astype(jnp.float16)",
    "bfloat16": "p.astype(jnp.bfloat16)",
    "double": "p.astype(jnp.float64) (with jax_enable_x64; float32 without)",
    "long": "p.astype(jnp.int32) (int64 with jax_enable_x64)",
    "int": "p.astype(jnp.int32)",
    "bool": "p.astype(bool)",
    "type": "p.dtype, or p.astype(dtype) to cast",
    "contiguous": "p itself (JAX arrays have no strides to make contiguous)",
    "is_contiguous": "True (JAX arrays have no strides)",
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
