"""A model's state by readable names: ``model.state_dict()`` and ``load_state_dict`` for JAX.

Flax NNX modules and Equinox modules hold their arrays in attributes; here they become
a flat ``{"layers.0.kernel": array}`` dict (what ``tj.save_file`` writes) and go back
into a model in one call. The ``"torch"`` layout gives the names and layouts a PyTorch
twin of the model has (``layers.0.weight``, ``(out, in)``), so
``twin.load_state_dict(...)`` takes it; loading accepts either layout. Neither flax nor
equinox is imported here: a model can only exist if its framework was.
"""

from __future__ import annotations

import collections
import dataclasses
import operator
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import jax
import numpy as np
from jax.sharding import SingleDeviceSharding

from .. import casting, host_staging
from ..array_names import state_variables
from ..detect import (
    import_torch,
    is_equinox_module,
    is_nnx_module,
    is_nnx_state,
    is_torch_tensor,
    is_tracer,
)
from ..distributed import transfer
from ..errors import ArgumentTypeError, CheckpointError, ConversionError, StateDictError
from ..interop import to_jax, to_torch
from ..location import in_torch_order, own_leaves_first
from ..platforms import platform_of
from .device_map import DeviceMap, file_tensors, load_for_model, model_plan, reads_straight
from .messages import shown
from .options import check_state_dict_options, refuse_torch_options
from .state_names import SIZE_FIX, layout_of
from .torch_load import load

__all__ = ["Layout", "load_state", "named_arrays", "state_dict"]

#: ``"jax"``: the model's own names and layouts; ``"torch"``: a PyTorch twin's.
Layout = Literal["jax", "torch"]

# Flax NNX layers: variable name -> (the torch twin's name, how the torch layout
# permutes the axes: None keeps them). A Linear kernel is (in, out), torch's weight
# (out, in); a Conv kernel (*window, in, out), torch's weight (out, in, *window).
_MATRIX = "matrix"
_CONV = "conv"
_NNX_LAYERS: dict[str, dict[str, tuple[str, str | None]]] = {
    "Linear": {"kernel": ("weight", _MATRIX), "bias": ("bias", None)},
    "Conv": {"kernel": ("weight", _CONV), "bias": ("bias", None)},
    "Embed": {"embedding": ("weight", None)},
    "LayerNorm": {"scale": ("weight", None), "bias": ("bias", None)},
    "RMSNorm": {"scale": ("weight", None)},
    "GroupNorm": {"scale": ("weight", None), "bias": ("bias", None)},
    "BatchNorm": {
        "scale": ("weight", None),
        "bias": ("bias", None),
        "mean": ("running_mean", None),
        "var": ("running_var", None),
    },
}
# What a torch twin's state dict holds that the JAX model has no variable for, per
# layer: BatchNorm counts its batches (torch fills it in when a state dict lacks it).
_TORCH_ONLY = {"BatchNorm": ("num_batches_tracked",)}
# Equinox layers already use torch's names and (out, in, ...) layouts, except these.
_EQUINOX_REFUSED = {
    "ConvTranspose": "its weight is (out, in, *window) where torch's is (in, out, *window)",
    "BatchNorm": "its running statistics live in an eqx.nn.State, not in the module",
}


@dataclasses.dataclass
class Entry:
    """One array of a model: its names in both layouts, and where it is held.

    An NNX array is held by ``variable``; an Equinox one is leaf ``leaf_index`` of the
    module's pytree.
    """

    name: str
    value: Any
    variable: Any = None
    path: tuple[Any, ...] = ()  # an NNX variable's path in the module
    leaf_index: int = -1
    torch_name: str | None = None  # None: no torch layout, for the reason in ``no_torch``
    no_torch: str = ""
    permutation: tuple[int, ...] | None = None  # how the torch layout orders the axes
    reshape: tuple[int, ...] | None = None  # the torch layout's shape, when it differs
    torch_extras: tuple[str, ...] = ()  # what the twin's layer also holds (num_batches_tracked)
    # The same variable under its other paths (a tied weight): the twin lists each name.
    aliases: list[Entry] = dataclasses.field(default_factory=list)

    def torch_names(self) -> list[str]:
        """Every name the twin lists this array under: its own, then its ties'."""
        names = [self.torch_name] if self.torch_name is not None else []
        return names + [alias.torch_name for alias in self.aliases if alias.torch_name]

    def torch_shape(self) -> tuple[int, ...]:
        """The shape of this array in the torch twin's layout."""
        if self.reshape is not None:
            return self.reshape
        shape = tuple(self.value.shape)
        return shape if self.permutation is None else tuple(shape[i] for i in self.permutation)


def named_arrays(obj: Any) -> Any:
    """``obj``'s state by name if it is a model or an NNX ``State``, else ``obj`` itself.

    What [`tj.save_file`][torch2jax_device.save_file] writes when given a model.
    """
    if _is_model(obj) or is_nnx_state(obj):
        return state_dict(obj)
    return obj


def state_dict(
    model: Any,
    *,
    destination: dict[str, Any] | None = None,
    prefix: str = "",
    keep_vars: bool = False,
    layout: Layout = "jax",
) -> dict[str, Any]:
    """Equivalent to `torch.nn.Module.state_dict`.

    A Flax NNX or Equinox model's arrays by readable name. Names join attribute names
    and indices with dots, as torch's do: ``layers.0.kernel`` for
    ``model.layers[0].kernel``.

    With ``layout="torch"`` the result is what a PyTorch twin of the model returns from
    its own ``state_dict()``: an ``OrderedDict`` of CPU ``torch.Tensor`` copies, with
    torch's names and layouts, so ``twin.load_state_dict(...)`` and
    ``torch.save(..., "model.pt")`` take it. The twin's attributes must be named like
    the model's (``nn.ModuleList`` for a list, ``nn.Sequential`` for ``nnx.Sequential``).
    For NNX, ``Linear``, ``Conv``, ``Embed``, ``LayerNorm``, ``RMSNorm``, ``GroupNorm``
    and ``BatchNorm`` map onto their torch namesakes (``kernel`` -> ``weight``
    transposed to ``(out, in)``; ``scale`` -> ``weight``; ``mean``/``var`` ->
    ``running_mean``/``running_var``); variables of your own modules keep their names
    and layouts. [`tj.save_file`][torch2jax_device.save_file] writes the ``"jax"``
    layout when given a model. Arrays on a GPU come to the CPU through the GPU's pinned
    host memory, at the bus's speed. A model over the devices of several processes
    gives every process the whole state: a replicated array (``DDP(model)``'s) is read
    from this process's devices, a split one is gathered from every process, so that
    every process must call it then (as FSDP's full state dict needs every rank).

    Note:
        What is in it: for an NNX module, every ``nnx.Variable`` holding an array
        (``Param``, ``BatchStat``, your own kinds), except RNG state (JAX key arrays,
        which torch's state dict has no counterpart for) and sown ``Intermediate``
        values. A variable shared by several modules (a tied weight) appears once,
        under its first name (as ``nnx.state`` lists it), in the ``"jax"`` layout, and
        under every name in the ``"torch"`` layout, as torch lists a tied parameter
        (the same tensor under each name where their layouts agree). Both layouts list
        an NNX module's arrays in the order its twin's ``state_dict()`` does (module by
        module: parameters, then other variables, then layers, each as assigned;
        ``kernel`` before ``bias``), where
        ``nnx.state`` sorts the names. An ``nnx.State`` gives the same arrays in its
        own order, in the ``"jax"`` layout only. An abstract model
        (``nnx.eval_shape``) gives ``jax.ShapeDtypeStruct`` values, and in the
        ``"torch"`` layout tensors on torch's ``meta`` device, as a twin built there
        does. For
        an Equinox module, every array leaf (``eqx.is_array``). The ``"jax"`` layout
        holds the model's own arrays; the ``"torch"`` one copies.

    Args:
        model: A Flax NNX module (or its ``nnx.State``) or an Equinox module.
        destination: As torch's: a dict to fill (and return) rather than a new one.
        prefix: As torch's: put before every name (``"encoder."``).
        keep_vars: Taken as torch takes it, and changes nothing: the values are arrays
            either way (torch's ``keep_vars=True`` gives ``nn.Parameter`` objects in
            place of detached tensors; JAX arrays carry no autograd to detach).
        layout: ``"jax"`` (the model's names, its arrays as they are) or ``"torch"``.

    Returns:
        ``{name: jax.Array}`` for ``"jax"``; ``OrderedDict[str, torch.Tensor]`` for
        ``"torch"``; ``destination`` itself, filled, when given.

    Raises:
        ConversionError: ``model`` is not a model, two arrays would get one name, or
            ``layout="torch"`` meets a Flax or Equinox layer with no torch counterpart
            (named, with the reason), or is asked of an ``nnx.State``.

    Examples:
        >>> from flax import nnx
        >>> import torch
        >>> import torch2jax_device as tj
        >>> model = nnx.Sequential(nnx.Linear(3, 4, rngs=nnx.Rngs(0)), nnx.relu)
        >>> {name: array.shape for name, array in tj.state_dict(model).items()}
        {'layers.0.kernel': (3, 4), 'layers.0.bias': (4,)}
        >>> twin = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())
        >>> twin.load_state_dict(tj.state_dict(model, layout="torch"))
        <All keys matched successfully>
        >>> out = {}
        >>> tj.state_dict(model, destination=out, prefix="encoder.") is out, list(out)
        (True, ['encoder.layers.0.kernel', 'encoder.layers.0.bias'])
    """
    check_state_dict_options(destination, prefix, keep_vars)
    if not (isinstance(layout, str) and layout in ("jax", "torch")):
        raise ConversionError(f"layout must be 'jax' or 'torch', not {shown(layout)}")
    named = _named_state(model, layout)
    if destination is None and not prefix:
        return named
    filled = destination if destination is not None else type(named)()
    filled.update((prefix + name, value) for name, value in named.items())
    return filled


def _named_state(model: Any, layout: Layout) -> dict[str, Any]:
    """``tj.state_dict(model, layout=layout)``, its names unprefixed."""
    entries = _entries(model)
    if layout == "jax":
        return {entry.name: entry.value for entry in entries}
    import_torch("tj.state_dict(model, layout='torch')")
    tensors: dict[str, Any] = {}
    for entry in entries:
        own = None
        for named in (entry, *entry.aliases):  # a tied weight under each name, as torch
            if named.torch_name is None:
                raise ConversionError(named.no_torch)
            if named.torch_name in tensors:
                raise ConversionError(
                    f"two arrays of the model would both be named {named.torch_name!r} in "
                    "the torch layout; rename an attribute so that no dotted path repeats "
                    "another"
                )
            same_layout = own is not None and (named.permutation, named.reshape) == (
                entry.permutation,
                entry.reshape,
            )
            tensor = own if same_layout else in_torch_layout(named, entry.value)
            own = tensor if own is None else own
            tensors[named.torch_name] = tensor
    names = list(tensors)
    if any(entry.aliases for entry in entries):  # each tied name where the twin lists it
        every = [(alias, entry) for entry in entries for alias in (entry, *entry.aliases)]
        by_path = {alias.path: alias.torch_name for alias, _ in every}
        pairs = in_torch_order(model, [(alias.path, entry.variable) for alias, entry in every])
        names = [str(by_path[path]) for path, _ in pairs]
    return collections.OrderedDict((name, tensors[name]) for name in names)


def in_torch_layout(entry: Entry, value: Any) -> Any:
    """``value`` (an array shaped like ``entry``'s) as the twin's CPU tensor, a copy.

    An array over several processes is read from this process's devices if they hold
    it whole (replicated), else gathered from every process, which all must call this.
    """
    torch = import_torch("the torch layout")
    if isinstance(value, jax.ShapeDtypeStruct):  # abstract: torch's meta tensors
        dtype = to_torch(np.empty(0, value.dtype)).dtype
        tensor = torch.empty(value.shape, dtype=dtype, device="meta")
    else:
        cpu = jax.local_devices(backend="cpu")[0]
        if isinstance(value, jax.Array) and not value.is_fully_addressable:
            (value,) = transfer.device_put(
                [value], SingleDeviceSharding(cpu), copy=False, path=_named(entry.name)
            )
        (on_host,) = host_staging.device_put([value], cpu)  # at pinned speed
        tensor = to_torch(on_host)
    if entry.permutation is not None:
        tensor = tensor.permute(entry.permutation)
    if entry.reshape is not None:
        tensor = tensor.reshape(entry.reshape)
    # A copy: torch code may change it in place, and JAX arrays must not change.
    return tensor.clone(memory_format=torch.contiguous_format)


#: What torch's load_state_dict does with a value of another shape.
_TORCH_REFUSES = "torch raises RuntimeError: size mismatch"


def parameter_entries(model: Any) -> list[Entry]:
    """An NNX module's ``nnx.Param`` arrays in its twin's ``parameters()`` order.

    Torch keys optimizer state by this order (``optimizer.state_dict()["state"][i]``).
    """
    if not is_nnx_module(model):
        raise ConversionError(
            f"the parameters of a Flax NNX module are needed here, not of a {type(model).__name__}"
        )
    nnx = sys.modules["flax.nnx"]
    return [entry for entry in _entries(model) if isinstance(entry.variable, nnx.Param)]


def from_torch_layout(
    what: str, name: str, value: Any, entry: Entry, *, torch_does: str = _TORCH_REFUSES
) -> Any:
    """``value`` in the twin's layout (torch, NumPy or JAX) as ``entry``'s array.

    ``torch_does``: what torch does with a value of another shape, for the message.

    Raises:
        StateDictError: the shape is not the one the twin's layout gives ``entry``.
    """
    return _loaded(what, name, value, entry, "torch", torch_does)


def load_state(
    model: Any,
    state_dict: Any,
    strict: bool = True,
    assign: bool = False,
    *,
    device: Any = None,
    max_memory: Mapping[Any, Any] | None = None,
    device_map: Mapping[str, Any] | str | DeviceMap | None = None,
    copy: bool = True,
) -> Any:
    """Equivalent to `torch.nn.Module.load_state_dict`.

    Puts a saved state back into a model, as ``model.load_state_dict(torch.load(path))``
    with ``strict=True`` does. ``state_dict`` (torch's name) is a file (the safetensors
    [`tj.save_file`][torch2jax_device.save_file] writes, or a torch ``.pt`` of a state
    dict) or a mapping of names to arrays (JAX, NumPy or torch). Either layout loads:
    the model's own names ([`tj.state_dict`][torch2jax_device.state_dict]), or a PyTorch
    twin's (``twin.state_dict()``), transposed back; the names tell which. As in torch,
    each array must have the shape of the one it replaces, takes its dtype (cast if
    needed) and goes where it is (its device or sharding), in one transfer. On a mesh
    that spans processes (a DDP model), each process passes the whole state, as
    ``tj.load(path, map_location="cpu")`` gives it on every rank, and its devices take
    their parts of it.

    Like ``load_state_dict``, it copies: what the source's owner changes later (torch's
    ``optimizer.step()`` or BatchNorm's running statistics, in place) never reaches the
    model, and donating the model's buffers in a train step never deletes the source's
    arrays. ``copy=False`` shares where it can instead (a CPU tensor or NumPy array
    through DLPack, a JAX array already in place): the model then changes when the
    source does.

    Note:
        The model is returned: an NNX module is updated in place, as
        ``load_state_dict`` updates a torch module, but an Equinox module cannot
        change, so a new one comes back. Write ``model = tj.load_state(model, path)``
        for both. There is no ``strict=False``: a mismatch raises a ``RuntimeError``
        (a `tj.CheckpointError` too), as torch does, and changes nothing. A twin's BatchNorm
        ``num_batches_tracked`` is accepted and ignored. A tied weight (an NNX variable
        shared by several modules) loads from a twin's state holding it under every
        name, as ``torch.save(twin.state_dict())`` does, or under one of them, as
        ``safetensors.torch.save_model`` writes it; its copies must be equal.

    An abstract NNX model (``nnx.eval_shape(lambda: Model(...))``, the
    ``init_empty_weights`` / ``torch.device("meta")`` idiom) holds no arrays: its state
    takes the loaded arrays where they are (torch's ``assign=True``), or where
    ``device`` says, and no full copy of the model is ever made. Its RNG state (a
    ``Dropout``'s keys), which no state dict holds, stays abstract: seed it after
    loading (``nnx.reseed(model, dropout=0)``).

    Args:
        model: A Flax NNX module (concrete or abstract) or an Equinox module.
        state_dict: A path (``str`` / ``os.PathLike``) or ``{name: array}``.
        strict: torch's default (``True``), the only form taken: a mismatch raises.
            Positional third, as in ``load_state_dict(state_dict, strict, assign)``.
        assign: torch's default (``False``), the only form taken.
        device: Keyword-only. Where the arrays go instead of where the model's are: a device, or
            ``"auto"`` for a plan (a `tj.DeviceMap` in the
            model's order, within ``max_memory``); from a safetensors file, each tensor
            goes straight to its place (a PyTorch checkpoint is read to the host
            first, as ``torch.load`` reads it, then placed).
        max_memory: The budgets of ``device="auto"``, as for ``tj.load_file``.
        device_map: An explicit map (``{pattern: device}``) or a ``tj.DeviceMap``.
        copy: ``True`` (the default, as torch): the model's arrays are its own.
            ``False``: share the source's memory where no transpose, cast or transfer
            stands between them.

    Returns:
        The model with the loaded state.

    Raises:
        StateDictError: names are missing or unexpected (both listed, as torch's
            ``Missing key(s)`` / ``Unexpected key(s)``), a shape differs, the names of
            one tied weight hold different values, or ``source``
            holds a whole training checkpoint rather than a state dict (the message
            names the entry to pass). A ``RuntimeError``, as torch raises, and a
            `tj.CheckpointError`.
        CheckpointError: ``source`` is not a state dict or cannot be read.
        ConversionError: ``model`` is not a model, or a value is not an array.
        ArgumentTypeError: ``copy``, ``strict`` or ``assign`` is not a bool (a device
            passed third, where torch's ``strict`` is, is refused naming ``device=``).
        StateDictError: ``strict=False`` or ``assign=True``, with the fix.

    Examples:
        >>> import os, tempfile
        >>> from flax import nnx
        >>> import torch2jax_device as tj
        >>> path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
        >>> tj.save_file(nnx.Linear(2, 3, rngs=nnx.Rngs(0)), path)
        >>> model = tj.load_state(nnx.Linear(2, 3, rngs=nnx.Rngs(1)), path)
        >>> bool((model.kernel[...] == nnx.Linear(2, 3, rngs=nnx.Rngs(0)).kernel[...]).all())
        True
    """
    if not _is_model(model):
        raise ConversionError(
            f"load_state() puts a state into a Flax NNX or Equinox module, not "
            f"{type(model).__name__}"
        )
    if strict is not True or assign is not False:
        refuse_torch_options(strict, assign)
    source = state_dict
    if not isinstance(copy, bool):
        raise ArgumentTypeError(
            f"copy must be True (the model's arrays are its own, as torch's "
            f"load_state_dict copies) or False (share the source's memory), not "
            f"{type(copy).__name__} {copy!r}"
        )
    entries = _entries(model)
    arrays = {entry.name: entry.value for entry in entries}
    plan = model_plan(arrays, device, device_map=device_map, max_memory=max_memory)
    if isinstance(source, Mapping):
        what, saved = "the state", source
    else:
        what = repr(os.fspath(source)) if isinstance(source, (str, os.PathLike)) else "the file"
        if plan is None or not reads_straight(source):  # a .pt: to the host, then placed
            saved = load(source, map_location="cpu")
        else:  # each tensor straight to its place, the model's layout or a twin's
            layout = layout_of(what, file_tensors(source), entries, model)
            names = {
                file_name: entry.name
                for entry in entries
                for file_name in ([entry.name] if layout == "jax" else entry.torch_names())
            }
            wanted = {entry.name: (entry.value.shape, entry.value.dtype) for entry in entries}
            saved = load_for_model(source, plan, names, wanted)
    if not isinstance(saved, Mapping):
        raise CheckpointError(
            f"{what} holds a {type(saved).__name__}, not a state dict ({{name: array}})"
        )
    layout = layout_of(what, saved, entries, model)
    values = []
    for entry in entries:
        if layout == "jax":
            values.append(_loaded(what, entry.name, saved[entry.name], entry, layout))
        else:
            values.append(_tied_value(what, saved, entry))
    return _replace(model, entries, _placed(entries, values, plan, copy=copy))


def _tied_value(what: str, saved: Mapping[Any, Any], entry: Entry) -> Any:
    """``entry``'s value from a twin's state: under its own name or a tie's (torch lists
    a tied weight under each; a file may hold only one); every copy held must agree.

    Raises:
        StateDictError: two names of one tied array hold different values.
    """
    held = [
        (name, named)
        for named in (entry, *entry.aliases)
        if (name := named.torch_name) is not None and name in saved
    ]
    values = [_loaded(what, name, saved[name], named, "torch") for name, named in held]
    for (name, _), value in zip(held[1:], values[1:], strict=True):
        if not np.array_equal(np.asarray(value), np.asarray(values[0])):
            raise StateDictError(
                f"{shown(held[0][0])} and {shown(name)} are one tied "
                f"array in the model ({entry.name!r}), and {what} holds different values "
                "for them (torch's load_state_dict would keep the last one, silently). Fix: "
                "untie them in the model, or drop the wrong one from the state"
            )
    return values[0]


def _placed(
    entries: list[Entry], values: list[Any], plan: DeviceMap | None, *, copy: bool
) -> list[Any]:
    """Each value where the array it replaces is (its sharding), in one transfer; where
    ``plan`` says, if there is one.

    ``copy``: never alias the value's buffer (a torch tensor's, through DLPack). A
    model's NumPy values stay NumPy arrays on the host; an abstract model's values are
    taken where they are (torch's ``assign=True``), NumPy ones as CPU arrays. A sharding
    over several processes takes each process's whole value and keeps this process's
    parts.
    """
    if plan is not None:
        shardings = [plan.destination(entry.name).sharding for entry in entries]
        planned = jax.device_put(values, shardings, may_alias=False if copy else None)
        return list(jax.block_until_ready(planned) if copy else planned)
    placed: dict[int, Any] = {}
    local = []
    cpu = jax.local_devices(backend="cpu")[0]
    for i, entry in enumerate(entries):
        if isinstance(entry.value, jax.ShapeDtypeStruct):  # abstract: taken where it is
            placed[i] = values[i] if isinstance(values[i], jax.Array) else None
            if placed[i] is None:
                (placed[i],) = jax.device_put([values[i]], cpu, may_alias=False if copy else None)
        elif not isinstance(entry.value, jax.Array):
            placed[i] = np.array(values[i], copy=copy or None)
        elif transfer.crosses_processes([values[i]], entry.value.sharding):
            (placed[i],) = transfer.device_put(
                [values[i]], entry.value.sharding, copy=copy, path=_named(entry.name)
            )
        else:
            local.append(i)
            if copy and isinstance(values[i], np.ndarray) and _on_cpu(entry.value):
                values[i] = np.array(values[i])  # JAX's CPU client takes NumPy memory as it is
    moved = jax.device_put(
        [values[i] for i in local],
        [entries[i].value.sharding for i in local],
        may_alias=False if copy else None,
    )
    if copy:
        # The copies read the source's memory (a torch tensor's, through DLPack) as they
        # run: done before returning, or the source's owner changing it in place right
        # after (optimizer.step()) reaches the model. A busy machine showed it.
        jax.block_until_ready(moved)
    placed.update(zip(local, moved, strict=True))
    return [placed[i] for i in range(len(entries))]


def placed_like(value: Any, current: jax.Array | jax.ShapeDtypeStruct, name: str) -> jax.Array:
    """``value`` (host or device data) as a copy where ``current`` is, in its dtype.

    On a sharding over several processes, each process gives the whole value and
    keeps its devices' parts.
    """
    value = _in_dtype(value if isinstance(value, jax.Array) else np.asarray(value), current.dtype)
    if transfer.crosses_processes([value], current.sharding):
        (placed,) = transfer.device_put([value], current.sharding, copy=True, path=_named(name))
        return placed
    moved: jax.Array = jax.device_put(value, current.sharding, may_alias=False)
    return moved


def _on_cpu(array: jax.Array) -> bool:
    return any(platform_of(device) == "cpu" for device in array.sharding.device_set)


def _named(name: str) -> Callable[[int], str]:
    """The leaf path for ``transfer.device_put``'s messages: one array, named ``name``."""

    def path(_: int) -> str:
        return name

    return path


def _loaded(
    what: str, name: str, value: Any, entry: Entry, layout: Layout, torch_does: str = ""
) -> Any:
    """``value`` in the model's layout and dtype, still on the host or where it was."""
    if is_torch_tensor(value):
        # Cast by torch first (torch's values, and no 64-bit narrowing on the way).
        value = to_jax(casting.cast_tensor(value.detach(), np.dtype(entry.value.dtype)))
    elif not isinstance(value, (jax.Array, np.ndarray)) or is_tracer(value):
        raise ConversionError(
            f"{what}: {shown(name)} is a {type(value).__name__}, not an array; a state dict maps "
            "names to arrays"
        )
    if layout == "torch" and value.shape != entry.torch_shape():
        raise StateDictError(
            f"size mismatch for {shown(name)}: {what} has shape {tuple(value.shape)}, the "
            f"model's torch twin {entry.torch_shape()} ({torch_does or _TORCH_REFUSES}). "
            f"{SIZE_FIX}"
        )
    if layout == "torch" and entry.reshape is not None:
        value = value.reshape(entry.value.shape)
    if layout == "torch" and entry.permutation is not None:
        value = value.transpose(np.argsort(entry.permutation))
    if value.shape != entry.value.shape:
        hint = (
            " It looks transposed: a torch twin's state dict needs all of the twin's names"
            if value.shape == entry.value.shape[::-1] and layout == "jax"
            else ""
        )
        raise StateDictError(
            f"size mismatch for {shown(name)}: {what} has shape {tuple(value.shape)}, the model "
            f"{tuple(entry.value.shape)} (torch raises RuntimeError: size mismatch).{hint} "
            f"{SIZE_FIX}"
        )
    return _in_dtype(value, entry.value.dtype)


def _in_dtype(value: Any, dtype: Any) -> Any:
    """``value`` (NumPy or JAX) in ``dtype`` with torch's values, as ``load_state_dict``'s
    ``copy_`` casts (``casting``'s rules: float8_e4m3fn saturates where ``astype`` gives
    NaN, complex keeps its real part with a `tj.ComplexCastWarning`, ...)."""
    wanted = np.dtype(dtype)
    if value.dtype == wanted:
        return value
    if isinstance(value, np.ndarray):
        native = value if value.dtype.isnative else value.astype(value.dtype.newbyteorder("="))
        return casting.cast_host(native, wanted)
    return casting.cast_array(value, wanted)


def _replace(model: Any, entries: list[Entry], values: list[Any]) -> Any:
    if is_nnx_module(model):
        for entry, value in zip(entries, values, strict=True):
            entry.variable.set_value(value)
        return model
    leaves, treedef = jax.tree_util.tree_flatten(model)
    for entry, value in zip(entries, values, strict=True):
        leaves[entry.leaf_index] = value
    return jax.tree_util.tree_unflatten(treedef, leaves)


def _entries(model: Any) -> list[Entry]:
    if is_nnx_module(model):
        entries = list(_nnx_entries(model, torch_layout=True))
    elif is_nnx_state(model):
        entries = list(_nnx_entries(model, torch_layout=False))
    elif is_equinox_module(model):
        entries = list(_equinox_entries(model))
    else:
        raise ConversionError(
            f"state_dict() takes a Flax NNX module, an nnx.State or an Equinox module, not "
            f"{type(model).__name__}; for a dict of arrays, use it as it is"
        )
    seen: set[str] = set()
    for entry in entries:
        if entry.name in seen:
            raise ConversionError(
                f"two arrays of the model would both be named {entry.name!r}; rename an "
                "attribute so that no dotted path repeats another"
            )
        seen.add(entry.name)
    return entries


def _nnx_entries(model: Any, *, torch_layout: bool) -> Iterator[Entry]:
    nnx = sys.modules["flax.nnx"]
    modules: dict[tuple[Any, ...], Any] = {}
    paths: dict[int, list[tuple[Any, ...]]] = {}
    if torch_layout and hasattr(sys.modules[nnx.iter_graph.__module__], "get_node_impl"):
        _walk(nnx, model, (), {id(model)}, modules, paths)
    elif torch_layout:  # a flax without the walk's helpers: each node's first path only
        modules = {p: n for p, n in nnx.iter_graph(model) if isinstance(n, nnx.Module)}
    for path, variable in state_variables(model):  # a module's in its twin's order
        path = tuple(path)
        entry = Entry(".".join(map(str, path)), variable.get_value(), variable, path)
        if torch_layout:
            _nnx_torch_names(nnx, entry, path, modules)
            for tied in paths.get(id(variable), []):
                if tied != path:  # a tied weight: the twin lists it under this name too
                    alias = Entry(".".join(map(str, tied)), entry.value, variable, tied)
                    _nnx_torch_names(nnx, alias, tied, modules)
                    entry.aliases.append(alias)
        else:
            entry.no_torch = (
                "layout='torch' needs the module, not its nnx.State: the torch names "
                "depend on the layers; pass the model"
            )
        yield entry


def _walk(
    nnx: Any,
    node: Any,
    path: tuple[Any, ...],
    active: set[int],
    modules: dict[tuple[Any, ...], Any],
    paths: dict[int, list[tuple[Any, ...]]],
) -> None:
    """Every path of each module and variable under ``node``: a shared one under each
    (``nnx.iter_graph`` gives the first only), as torch's ``state_dict`` lists a tied
    parameter, or a module registered twice, under every name. It steps through what
    ``nnx.iter_graph`` steps through: graph nodes and pytrees (a module in a plain
    list, tuple or dict attribute too)."""
    if isinstance(node, nnx.Module):
        modules[path] = node
    graphlib = sys.modules[nnx.iter_graph.__module__]  # what nnx.iter_graph walks by
    impl = graphlib.get_node_impl(node)
    for key, child in impl.node_dict(node).items() if impl is not None else ():
        if isinstance(child, nnx.Variable):
            paths.setdefault(id(child), []).append((*path, key))
        elif graphlib.is_node(child) and id(child) not in active:  # not a cycle's way back
            _walk(nnx, child, (*path, key), active | {id(child)}, modules, paths)


def _nnx_torch_names(
    nnx: Any, entry: Entry, path: tuple[Any, ...], modules: dict[tuple[Any, ...], Any]
) -> None:
    """Fill in the torch twin's name and layout of one NNX variable."""
    parts = []
    for depth, part in enumerate(path):
        if part == "layers" and isinstance(modules.get(path[:depth]), nnx.Sequential):
            continue  # torch's nn.Sequential numbers its layers directly
        parts.append(str(part))
    owner = modules.get(path[:-1])
    layer = _nnx_layer(nnx, owner)
    variable = str(path[-1])
    if layer is not None and variable in _NNX_LAYERS[layer]:
        torch_variable, axes = _NNX_LAYERS[layer][variable]
        parts[-1] = torch_variable
        entry.torch_extras = tuple(
            ".".join([*parts[:-1], extra]) for extra in _TORCH_ONLY.get(layer, ())
        )
        if axes == _MATRIX:
            entry.permutation = (1, 0)
        elif axes == _CONV:
            rank = entry.value.ndim
            entry.permutation = (rank - 1, rank - 2, *range(rank - 2))
    elif _is_flax_layer(nnx, owner):
        entry.no_torch = (
            f"{entry.name!r} belongs to a flax {type(owner).__name__}, which has no torch "
            "counterpart tj knows the layout of; keep its state in the JAX layout "
            "(tj.save_file, then tj.load_state of that file), or convert its torch "
            "tensors yourself"
        )
        return
    entry.torch_name = ".".join(parts)


def _is_flax_layer(nnx: Any, module: Any) -> bool:
    """A layer of flax's own (not a container such as ``nnx.List``), holding variables."""
    containers = tuple(
        getattr(nnx, name) for name in ("List", "Dict", "Sequential") if hasattr(nnx, name)
    )
    return type(module).__module__.startswith("flax.") and not isinstance(module, containers)


def _nnx_layer(nnx: Any, module: Any) -> str | None:
    """The ``_NNX_LAYERS`` key of ``module``'s class (or of a flax class it derives from)."""
    for name in _NNX_LAYERS:
        if isinstance(module, getattr(nnx, name)):
            return name
    return None


def _equinox_entries(model: Any) -> Iterator[Entry]:
    eqx = sys.modules["equinox"]
    pairs = jax.tree_util.tree_flatten_with_path(model)[0]
    arrays = [
        (index, path, leaf)
        for index, (path, leaf) in enumerate(pairs)
        if isinstance(leaf, (jax.Array, np.ndarray, jax.ShapeDtypeStruct))  # abstract too
    ]
    for index, path, leaf in own_leaves_first(arrays, path=operator.itemgetter(1)):
        keys = [_key_name(key) for key in path]
        entry = Entry(".".join(keys), leaf, leaf_index=index)
        owners = list(_equinox_owners(model, path))
        refused = [
            reason
            for name, reason in _EQUINOX_REFUSED.items()
            if isinstance(owners[-1], getattr(eqx.nn, name))
        ]
        if refused:
            entry.no_torch = (
                f"{entry.name!r} belongs to an eqx.nn.{type(owners[-1]).__name__}, and "
                f"{refused[0]}; keep its state in the JAX layout (tj.save_file, then "
                "tj.load_state of that file), or convert its torch tensors yourself"
            )
        else:
            entry.torch_name = ".".join(
                key
                for key, parent in zip(keys, owners, strict=True)
                if not (key == "layers" and isinstance(parent, eqx.nn.Sequential))
            )
        if isinstance(owners[-1], eqx.nn.Conv) and keys[-1] == "bias":
            entry.reshape = (leaf.shape[0],)  # torch's bias is (out,), Equinox's (out, 1, ...)
        yield entry


def _equinox_owners(model: Any, path: tuple[Any, ...]) -> Iterator[Any]:
    """The object each key of ``path`` is looked up in: the model, then inner ones."""
    node = model
    for key in path:
        yield node
        if isinstance(key, jax.tree_util.GetAttrKey):
            node = getattr(node, key.name)
        elif isinstance(key, jax.tree_util.SequenceKey):
            node = node[key.idx]
        elif isinstance(key, jax.tree_util.DictKey):
            node = node[key.key]
        else:
            return


def _key_name(key: Any) -> str:
    for attribute in ("name", "idx", "key"):
        if hasattr(key, attribute):
            return str(getattr(key, attribute))
    return str(key)


def _is_model(obj: Any) -> bool:
    return is_nnx_module(obj) or is_equinox_module(obj)
