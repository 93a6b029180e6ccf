"""Placement plans for arrays bigger than their accelerator: Accelerate's ``device_map``, in JAX.

``device_map="auto"`` with ``max_memory={"cuda:0": "20GiB", "cpu": "100GiB"}`` in
Accelerate fills the GPUs in the model's order (each a balanced share of it, when there
are several), then the CPU. A plan does the same for
JAX arrays, with one more tier that only JAX has: every JAX sharding carries a memory
kind, and an accelerator's ``pinned_host`` memory is host RAM that jitted code can bring
into device memory itself (``DevicePlan.to_execution_device``). So tensors go, in
order, to each accelerator until its budget is spent, then to the ``pinned_host``
memory of the accelerator that computes (the first one filled), then to the CPU device
(ordinary host memory).

The rules of a plan live here, below ``placement`` and ``checkpoints``, which both
place by them: the fill order, explicit maps and their checks, the errors and the
printed form; the budgets it fills (``max_memory`` parsed, the free memory of the
devices it leaves out, balanced shares) are ``device_budgets``'. A plan is made
from names, shapes and dtypes alone (``{name: array or jax.ShapeDtypeStruct}``, in
order); ``checkpoints.device_map.DeviceMap``, the public ``tj.DeviceMap``, also
plans from a checkpoint's header. A plan is a per-tensor rule
``(name, shape, dtype) -> Sharding``, so loaders place each tensor straight where it
says, never through the GPU first; ``tj.to_device(tree, "auto")`` places a model's
arrays by one (``array_names`` gives their names and order).
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import SingleDeviceSharding

from . import dtypes
from .array_names import NamedArrays, is_model
from .checkpoints.messages import shown
from .detect import is_torch_tensor
from .device import Device
from .device_budgets import PINNED, Budgets, Destination, device_in_map, memory_kinds, parse_size
from .errors import ArgumentTypeError, CheckpointError, InvalidDeviceError, OutOfMemoryError

__all__ = [
    "AUTO",
    "PINNED",
    "Destination",
    "DevicePlan",
    "asks_for_plan",
    "parse_size",
    "plan_for",
    "shapes_of",
]

#: The ``device=`` / ``device_map=`` value that asks for a plan, as Accelerate spells it.
AUTO = "auto"
#: The ``device_map`` strategies Accelerate and Transformers take: ``"auto"`` is
#: ``"balanced"`` (several GPUs share the model evenly); ``"balanced_low_0"`` keeps GPU 0
#: as empty as the others allow; ``"sequential"`` fills each GPU before the next.
STRATEGIES = (AUTO, "balanced", "balanced_low_0", "sequential")


class DevicePlan:
    """Which device and memory kind each named array goes to: ``device_map="auto"``.

    The plan itself, made from names, shapes and dtypes; the public
    [`tj.DeviceMap`][torch2jax_device.DeviceMap] is one that also plans from a
    checkpoint's header, and documents the rules. ``tj.to_device(tree, "auto")`` makes
    one of these from the tree's arrays.
    """

    def __init__(
        self,
        placements: Mapping[str, Destination],
        sizes: Mapping[str, int],
        budgets: Mapping[Destination, tuple[int | None, str]],
        execution_device: jax.Device,
    ) -> None:
        self._placements = dict(placements)
        self._sizes = dict(sizes)
        self._budgets = dict(budgets)  # each place's budget, and where it comes from
        self._execution_device = execution_device

    @classmethod
    def from_shapes(
        cls,
        tensors: Mapping[str, Any],
        *,
        max_memory: Mapping[Any, Any] | None = None,
        device_map: Mapping[str, Any] | str | None = None,
    ) -> Any:
        """The plan for ``{name: array or jax.ShapeDtypeStruct}``, in its order (see
        ``tj.DeviceMap.plan`` for the rules, the arguments and the errors)."""
        sizes, ties = _sizes(tensors)
        own = {name: nbytes for name, nbytes in sizes.items() if name not in ties}
        budgets = Budgets(max_memory)
        if device_map is None or (isinstance(device_map, str) and device_map in STRATEGIES):
            if device_map != "sequential":
                budgets.balance(
                    sum(own.values()), _final_modules(own), low_zero=device_map == "balanced_low_0"
                )
            placed = _pinned_on_the_first_filled(_auto(own, budgets), budgets)
            # a tie (one array under two names) goes where its first name goes
            placements = {name: placed[ties.get(name, name)] for name in sizes}
        elif isinstance(device_map, Mapping):
            placements = _explicit(sizes, device_map, budgets, counted=own)
        else:
            raise InvalidDeviceError(
                f"device_map={shown(device_map)}: give one of Accelerate's strategies "
                "('auto', 'balanced', 'balanced_low_0', 'sequential') or a dict of name "
                "patterns to devices, e.g. {'layers.0.*': 'cuda:0', '*': 'cpu'}"
            )
        used = {place: (budgets.of(place), budgets.source(place)) for place in placements.values()}
        computing = [place for place in placements.values() if not budgets.in_host(place)]
        first = computing[0] if computing else next(iter(placements.values()), None)
        execution = budgets.tiers()[0].device if first is None else first.device
        return cls(placements, {name: own.get(name, 0) for name in sizes}, used, execution)

    def __call__(self, name: str, shape: tuple[int, ...], dtype: Any) -> SingleDeviceSharding:
        """The sharding tensor ``name`` is loaded onto (the loaders' per-tensor rule).

        Raises:
            CheckpointError: the plan has no tensor ``name`` (it was made for another file).
        """
        return self.destination(name).sharding

    def destination(self, name: str) -> Destination:
        """Where tensor ``name`` goes.

        Raises:
            CheckpointError: the plan has no tensor ``name``.
            ArgumentTypeError: ``name`` is not a str.
        """
        if not isinstance(name, str):
            raise ArgumentTypeError(
                f"{type(self).__name__}: a tensor is named by its str name (as the file or "
                f"the model names it), not {type(name).__name__} {shown(name)}. Fix: pass "
                "the name, e.g. plan.destination('layers.0.kernel')"
            )
        try:
            return self._placements[name]
        except KeyError:
            raise CheckpointError(
                f"the {type(self).__name__} has no tensor {shown(name)}: it was planned for "
                f"{len(self._placements)} other tensors. Fix: plan from the file or model "
                "being loaded (tj.DeviceMap.plan(path)), or pass device='auto'"
            ) from None

    def placements(self) -> dict[str, Destination]:
        """Every tensor's place, by name, in the plan's order."""
        return dict(self._placements)

    def grouped(self, names: Iterable[str]) -> dict[Destination, list[str]]:
        """``names`` by their place, in order: what each place receives.

        Raises:
            CheckpointError: the plan has no tensor of one of the names.
            ArgumentTypeError: ``names`` is one str, or not iterable, or holds a non-str.
        """
        if (
            isinstance(names, (str, bytes))
            or not isinstance(names, Iterable)
            or hasattr(names, "shape")  # an array's elements are no str names
            or hasattr(names, "read")  # nor are a file's lines
        ):
            raise ArgumentTypeError(
                f"{type(self).__name__}.grouped(): names must be an iterable of tensor "
                f"names, not {type(names).__name__} {shown(names)}. Fix: pass a list of "
                "names, e.g. plan.grouped(['layers.0.kernel']) or plan.grouped(plan.placements())"
            )
        groups: dict[Destination, list[str]] = {}
        for name in names:
            groups.setdefault(self.destination(name), []).append(name)
        return groups

    def modules(self) -> dict[str, str | tuple[str, str]]:
        """Accelerate's ``device_map``: the shortest module prefixes with one place each.

        ``{"embed": "cuda:0", "layers.0": "cuda:0", "layers.1": ("cuda:0",
        "pinned_host"), "head": "cpu:0"}``; ``{"": place}`` when everything goes to one.
        ``device_map=`` takes it back.
        """
        return {prefix: destination.spec() for prefix, destination in self._groups()}

    def bytes_per_device(self) -> dict[str, int]:
        """The bytes the plan puts on each place, by its printed name, in tier order."""
        totals: dict[str, int] = {}
        for name, destination in self._placements.items():
            key = str(destination)
            totals[key] = totals.get(key, 0) + self._sizes[name]
        return totals

    @property
    def execution_device(self) -> jax.Device:
        """The device that computes (Accelerate's ``execution_device``): the first
        accelerator the plan fills, or the pinned memory's device, or the host's."""
        return self._execution_device

    def to_execution_device(self, tree: Any) -> Any:
        """Every array of ``tree`` in the execution device's own memory: offloaded
        weights brought in for a computation, inside ``jax.jit`` or outside it.

        Inside ``jit`` this is a copy XLA schedules with the computation (an array
        already in device memory stays where it is), so a jitted forward pass can take
        parameters that live in ``pinned_host`` memory and use them as if on the device;
        the device holds them only while the program runs. An array on the CPU device
        (the plan's last tier, when ``max_memory["pinned_host"]`` caps the pinned one)
        cannot enter a program compiled for an accelerator: put it in the execution
        device's ``pinned_host`` memory first, outside ``jit`` (``jax.device_put(array,
        SingleDeviceSharding(plan.execution_device, memory_kind="pinned_host"))``), or
        on the device itself with this same call.

        Examples:
            >>> import jax, jax.numpy as jnp
            >>> import torch2jax_device as tj
            >>> plan = tj.DeviceMap.plan({"w": jax.ShapeDtypeStruct((2,), jnp.float32)},
            ...                          device_map={"": "cpu"})
            >>> w = jax.device_put(jnp.ones(2), plan.destination("w").sharding)
            >>> jax.jit(lambda w: plan.to_execution_device(w) * 2)(w).tolist()
            [2.0, 2.0]
        """
        target = SingleDeviceSharding(self.execution_device, memory_kind="device")

        def fetch(leaf: Any) -> Any:
            return jax.device_put(leaf, target) if isinstance(leaf, jax.Array) else leaf

        return jax.tree.map(fetch, tree)

    def _groups(self) -> list[tuple[str, Destination]]:
        """(prefix, place) pairs: each module whose tensors all share a place, coarsest
        first, in the order the modules first appear."""
        root = _Node()
        for name, destination in self._placements.items():
            node = root
            for part in name.split("."):
                node = node.children.setdefault(part, _Node())
            node.own = destination
        groups: list[tuple[str, Destination]] = []
        root.collect("", groups)
        return groups

    def __repr__(self) -> str:
        total = sum(self._sizes.values())
        groups = self._groups()
        width = max((len(prefix or "''") for prefix, _ in groups), default=2)
        lines = [f"{type(self).__name__}({len(self._placements)} tensors, {_human(total)}):"]
        lines += [f"  {prefix or repr(''):<{width}}  {place}" for prefix, place in groups]
        lines.append("bytes per device:")
        budgets = {str(place): figures for place, figures in self._budgets.items()}
        totals = self.bytes_per_device()
        width = max((len(place) for place in totals), default=2)
        for place, nbytes in totals.items():
            budget, source = budgets[place]
            limit = "no limit" if budget is None else f"of {_human(budget)}, {source}"
            lines.append(f"  {place:<{width}}  {_human(nbytes)} ({nbytes:,} bytes) {limit}")
        return "\n".join(lines)


@dataclasses.dataclass
class _Node:
    """One level of dotted names: the tensor named by the path so far, and deeper ones."""

    own: Destination | None = None
    children: dict[str, _Node] = dataclasses.field(default_factory=dict)

    def places(self) -> set[Destination]:
        found = {self.own} if self.own is not None else set()
        for child in self.children.values():
            found |= child.places()
        return found

    def collect(self, prefix: str, out: list[tuple[str, Destination]]) -> None:
        places = self.places()
        if len(places) == 1:
            out.append((prefix, places.pop()))
            return
        for part, child in self.children.items():
            child.collect(f"{prefix}.{part}" if prefix else part, out)
        if self.own is not None:  # after the deeper ones: a prefix key covers them too
            out.append((prefix, self.own))


def _auto(sizes: Mapping[str, int], budgets: Budgets) -> dict[str, Destination]:
    """Each tensor's tier: a module's tensors (a layer's kernel and bias) go together to
    the first tier from the current one that holds them all, as Accelerate never splits
    a module; a module no single tier holds is split, tensor by tensor, in order."""
    tiers = budgets.tiers()
    limits = [budgets.of(tier) for tier in tiers]
    host_left = budgets.host_total()
    used = [0] * len(tiers)
    placements: dict[str, Destination] = {}

    def fits(tier: int, nbytes: int) -> bool:
        limit = limits[tier]
        if limit is not None and used[tier] + nbytes > limit:
            return False
        return not (budgets.in_host(tiers[tier]) and host_left is not None and nbytes > host_left)

    def first_fit(tier: int, nbytes: int) -> int:
        while tier < len(tiers) and not fits(tier, nbytes):
            tier += 1
        return tier

    tier = 0
    for module in _modules(sizes):
        whole = first_fit(tier, sum(sizes[name] for name in module))
        for name in module:
            nbytes = sizes[name]
            tier = whole if whole < len(tiers) else first_fit(tier, nbytes)
            if tier == len(tiers):
                raise OutOfMemoryError(_no_room(name, nbytes, sizes, tiers, limits, used))
            used[tier] += nbytes
            if budgets.in_host(tiers[tier]) and host_left is not None:
                host_left -= nbytes
            placements[name] = tiers[tier]
    return placements


def _pinned_on_the_first_filled(
    placements: dict[str, Destination], budgets: Budgets
) -> dict[str, Destination]:
    """The pinned tier in the pinned memory of the accelerator the plan fills first (its
    execution device), not of the first one named: one given no room (``max_memory``
    of 0, or too little for any module) computes nothing, and a program on the execution
    device takes the pinned arrays of its own device only (``to_execution_device``)."""
    filled = next((p.device for p in placements.values() if not budgets.in_host(p)), None)
    if filled is None or PINNED not in memory_kinds(filled):
        return placements
    home = Destination(filled, PINNED)
    return {
        name: home if place.memory_kind == PINNED else place for name, place in placements.items()
    }


def _final_modules(sizes: Mapping[str, int]) -> list[int]:
    """The bytes of each final module, as Accelerate's ``get_balanced_memory`` finds
    them from the names alone (``get_module_leaves`` twice): of every dotted prefix, the
    tensors are the leaves; with them taken away, the prefixes with no other below them
    are the final modules (a layer; a top-level tensor, or a module's own tensors beside
    its children, count in no final module)."""
    totals: dict[str, int] = {}
    for name, nbytes in sizes.items():
        parts = name.split(".")
        for end in range(len(parts) + 1):
            prefix = ".".join(parts[:end])
            totals[prefix] = totals.get(prefix, 0) + nbytes
    modules = {prefix: nbytes for prefix, nbytes in totals.items() if prefix not in sizes}
    parents = {prefix.rpartition(".")[0] for prefix in modules if "." in prefix}
    return [nbytes for prefix, nbytes in modules.items() if prefix and prefix not in parents]


def _modules(sizes: Mapping[str, int]) -> list[list[str]]:
    """The names in order, grouped by module: a run of names with one dotted prefix
    (``layers.0.kernel``, ``layers.0.bias``) is one group; a name without a dot (a
    tree's top-level leaf) is its own."""
    groups: list[list[str]] = []
    previous = None
    for name in sizes:
        prefix = name.rpartition(".")[0] or None
        if groups and prefix is not None and prefix == previous:
            groups[-1].append(name)
        else:
            groups.append([name])
        previous = prefix
    return groups


def _explicit(
    sizes: Mapping[str, int],
    device_map: Mapping[str, Any],
    budgets: Budgets,
    *,
    counted: Mapping[str, int],
) -> dict[str, Destination]:
    """Each tensor where the most specific key covering it says; ``counted`` are the
    tensors whose bytes the budgets hold (an array under a second name counts once)."""
    rules = [(str(key), _destination(key, value)) for key, value in device_map.items()]
    placements: dict[str, Destination] = {}
    unplaced = []
    for name in sizes:
        covering = [(key, place) for key, place in rules if _covers(key, name)]
        found = max(covering, key=lambda rule: _specificity(rule[0]))[1] if covering else None
        if found is None:
            unplaced.append(name)
        else:
            placements[name] = found
    if unplaced:
        listed = ", ".join(shown(name) for name in unplaced[:8])
        more = f" and {len(unplaced) - 8} more" if len(unplaced) > 8 else ""
        raise InvalidDeviceError(
            f"device_map places no device for {len(unplaced)} of {len(sizes)} tensors: "
            f"{listed}{more}. Fix: add a key that covers them (a module prefix such as "
            f"{shown(unplaced[0].rsplit('.', 1)[0])}, a wildcard, or '*': 'cpu' last)"
        )
    _refuse_unused_keys(rules, sizes)
    totals: dict[Destination, int] = {}
    for name, place in placements.items():
        totals[place] = totals.get(place, 0) + counted.get(name, 0)
    for place, nbytes in totals.items():
        budget = budgets.of(place)
        if budget is not None and nbytes > budget:
            raise OutOfMemoryError(
                f"device_map puts {_human(nbytes)} ({nbytes:,} bytes) on {place}, which has a "
                f"budget of {_human(budget)} ({budget:,} bytes; {budgets.source(place)}). "
                "Fix: move some modules elsewhere in device_map, raise max_memory for it, or "
                "use device_map='auto' to spill the rest to host memory"
            )
    host = sum(nbytes for place, nbytes in totals.items() if budgets.in_host(place))
    host_budget = budgets.host_total()
    if host_budget is not None and host > host_budget:
        raise OutOfMemoryError(
            f"device_map puts {_human(host)} ({host:,} bytes) in host memory, and the host "
            f"has {_human(host_budget)} ({host_budget:,} bytes) for it. Fix: put more on "
            "accelerators, or raise max_memory['cpu']"
        )
    return placements


def _refuse_unused_keys(rules: list[tuple[str, Destination]], sizes: Mapping[str, int]) -> None:
    """A key that covers no tensor is a typo (``"lm_haed"``) or a map for another
    model: its module would silently go where a more general key says. A module without
    tensors (a ``Dropout``, an ``Identity``, a rotary embedding's non-persistent cache)
    is no typo: Accelerate's maps list such modules (``"transformer.drop": 0``), so a
    key for a child of a module the tensors have, close to none of that module's other
    children's names, is taken (it places nothing); so is ``""`` with no tensor at all.

    Raises:
        InvalidDeviceError: naming the key and the closest module prefix there is.
    """
    prefixes = {name.rsplit(".", i)[0] for name in sizes for i in range(name.count(".") + 1)}
    for key, _ in rules:
        if not key or any(_covers(key, name) for name in sizes):
            continue
        if _an_empty_module(key, prefixes, sizes):
            continue
        close = difflib.get_close_matches(key, sorted(prefixes), n=1)
        hint = f" (did you mean {shown(close[0])}?)" if close else ""
        raise InvalidDeviceError(
            f"device_map[{shown(key)}] covers none of the {len(sizes)} tensors{hint}. Its "
            "module would go where another key says. Fix: correct the key, or drop it (a "
            "tied weight a checkpoint saves once has no tensor of its own)"
        )


def _an_empty_module(key: str, prefixes: set[str], sizes: Mapping[str, int]) -> bool:
    """Whether ``key`` reads as a module without tensors: a plain name under a module
    the tensors have, and like none of that module's other children (a top-level key
    with no tensor is a map for another model: ``"lm_head"`` for a bare decoder)."""
    if any(character in key for character in "*?[]"):
        return False
    parent, _, child = key.rpartition(".")
    if parent not in prefixes or parent in sizes:  # under a module, not under a tensor
        return False
    start = f"{parent}."
    siblings = {
        prefix[len(start) :].partition(".")[0] for prefix in prefixes if prefix.startswith(start)
    }
    return not difflib.get_close_matches(child, sorted(siblings), n=1)


def _covers(key: str, name: str) -> bool:
    """Whether a ``device_map`` key covers tensor ``name``: Accelerate's module prefix
    (``""`` covers all), or a shell wildcard over the whole name."""
    return key in ("", name) or name.startswith(key + ".") or fnmatch.fnmatchcase(name, key)


def _specificity(key: str) -> int:
    """How specific a ``device_map`` key is: the most specific key covering a tensor
    places it (Accelerate's and Transformers' rule: the longest module prefix, so
    ``{"": 0, "lm_head": "cpu"}`` puts ``lm_head`` on the CPU). A wildcard counts its
    literal characters; on a tie the earlier key wins (``max`` keeps the first)."""
    return len(key) - sum(key.count(character) for character in "*?[]")


def _destination(key: Any, value: Any) -> Destination:
    """A ``device_map`` value as a place."""
    kind = "device"
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], str):
        value, kind = value
    if isinstance(value, str) and value == "disk":
        raise InvalidDeviceError(
            f"device_map[{shown(key)}] = 'disk': tj does not offload to disk. Fix: place it "
            "on 'cpu' (a safetensors file is memory-mapped, so the host reads only what is "
            "used), or read tensors on demand with tj.safe_open"
        )
    device = device_in_map(value, f"device_map[{shown(key)}]")
    if kind not in memory_kinds(device):
        raise InvalidDeviceError(
            f"device_map[{shown(key)}] = {shown((value, kind))}: {Device(device)} has no memory "
            f"kind {shown(kind)}; it has {', '.join(sorted(memory_kinds(device)))}"
        )
    return Destination(device, kind)


def _sizes(tensors: Any) -> tuple[dict[str, int], dict[str, str]]:
    """Each tensor's bytes once placed (in JAX's dtype: 64-bit ones narrowed), in order:
    of ``{name: array}`` as given, or of a model's or tree's arrays as ``NamedArrays``
    names them; and each name of an array already named (a tie: the same object twice),
    with its first name. Accelerate counts a tied weight once, on one device."""
    if not _is_flat(tensors):
        if not isinstance(tensors, (Mapping, list, tuple)) and not is_model(tensors):
            raise ArgumentTypeError(
                f"a plan is made from a checkpoint's path, {{name: array}}, a model or a "
                f"tree of arrays, not {type(tensors).__name__}"
            )
        tensors = NamedArrays(tensors).arrays
    sizes: dict[str, int] = {}
    ties: dict[str, str] = {}
    first: dict[int, str] = {}
    for name, value in tensors.items():
        if id(value) in first:
            ties[str(name)] = first[id(value)]
        first.setdefault(id(value), str(name))
        if not (hasattr(value, "shape") and hasattr(value, "dtype")):
            raise CheckpointError(
                f"tensor {shown(name)} is a {type(value).__name__}, which has no shape and "
                "dtype; give arrays or jax.ShapeDtypeStruct"
            )
        if isinstance(value, jax.Array):
            sizes[str(name)] = value.nbytes  # in JAX's dtype already (key arrays too)
        else:
            sizes[str(name)] = _nbytes(tuple(value.shape), value.dtype)
    return sizes, ties


def _is_flat(tensors: Any) -> bool:
    """``{name: array}``: a mapping whose values all have a shape and a dtype."""
    return isinstance(tensors, Mapping) and all(
        hasattr(value, "shape") and hasattr(value, "dtype") for value in tensors.values()
    )


def _nbytes(shape: Sequence[int], dtype: Any) -> int:
    """The bytes of an array JAX will hold (no narrowing warning: nothing is converted
    yet; the load warns); ``dtype`` a NumPy, JAX or torch one."""
    held = np.dtype(jax.dtypes.canonicalize_dtype(dtypes.to_numpy_dtype(dtype)))
    return math.prod(shape) * held.itemsize


def asks_for_plan(target: Any) -> bool:
    """Whether ``target`` (a ``device=`` or ``map_location=``) asks for a plan:
    ``"auto"`` or a plan made earlier."""
    return isinstance(target, DevicePlan) or (isinstance(target, str) and target == AUTO)


def plan_for(
    describe: Callable[[], Mapping[str, Any]],
    device: Any,
    *,
    device_map: Mapping[str, Any] | str | DevicePlan | None,
    max_memory: Mapping[Any, Any] | None,
    kind: type[DevicePlan] = DevicePlan,
    argument: str = "device",
) -> Any:
    """What a placement onto ``device`` with ``device_map=`` and ``max_memory=`` goes by:
    a plan when one is asked for (``device="auto"``, a plan, ``device_map=``), made by
    ``kind`` from ``describe()`` (``{name: array or jax.ShapeDtypeStruct}``, called only
    then), else ``device`` itself. ``argument`` is how the caller names ``device``
    (``tj.load``'s ``map_location``).

    Raises:
        InvalidDeviceError: ``device_map`` together with a device, ``max_memory``
            without a plan to apply it to, or with a plan made already.
    """
    if isinstance(device, DevicePlan) and device_map is None:  # a plan made earlier
        device, device_map = AUTO, device
    auto = isinstance(device, str) and device == AUTO
    if device_map is None and not auto:
        if max_memory is not None:
            raise InvalidDeviceError(
                f"max_memory= is the budget of {argument}='auto', and {argument}="
                f"{shown(device)} puts everything on one device. Fix: pass {argument}='auto' "
                "(or device_map=) with it"
            )
        return device
    if device_map is not None and not auto and device not in ("cpu", None):
        raise InvalidDeviceError(
            f"{argument}={shown(device)} and device_map= both say where tensors go. Fix: "
            f"pass only device_map= (or {argument}='auto' with max_memory=)"
        )
    if isinstance(device_map, DevicePlan):
        if max_memory is not None:
            raise InvalidDeviceError(
                f"max_memory= with a {type(device_map).__name__}: the plan was made within "
                "its budgets already. Fix: pass max_memory to tj.DeviceMap.plan, or drop it "
                "here"
            )
        return device_map
    return kind.from_shapes(describe(), max_memory=max_memory, device_map=device_map)


def shapes_of(
    leaves: Mapping[str, Any], dtype: Any = None, *, cast_all: bool = False
) -> dict[str, Any]:
    """``{name: ShapeDtypeStruct}`` of arrays (JAX, NumPy, torch) or numbers as they will
    be held: cast to ``dtype`` where given and the array is floating-point or complex
    (what a model's move casts), or whatever it is with ``cast_all`` (a lone array's).
    An array under two names gets one struct, so the plan sees the tie."""
    shapes = {}
    made: dict[int, Any] = {}
    for name, leaf in leaves.items():
        if id(leaf) in made:
            shapes[name] = made[id(leaf)]
            continue
        held = _held_dtype(leaf)
        if dtype is not None and (cast_all or dtypes.is_inexact(held)):
            held = dtypes.to_numpy_dtype(dtype)
        kept = isinstance(leaf, jax.Array) and held == leaf.dtype
        shapes[name] = made[id(leaf)] = leaf if kept else jax.ShapeDtypeStruct(np.shape(leaf), held)
    return shapes


def _held_dtype(leaf: Any) -> Any:
    if isinstance(leaf, jax.Array):
        return leaf.dtype
    dtype = dtypes.to_numpy_dtype(leaf.dtype) if is_torch_tensor(leaf) else np.result_type(leaf)
    return jax.dtypes.canonicalize_dtype(dtype)


def _no_room(
    name: str,
    nbytes: int,
    sizes: Mapping[str, int],
    tiers: list[Destination],
    limits: list[int | None],
    used: list[int],
) -> str:
    total = sum(sizes.values())
    room = "; ".join(
        f"{tier}: {_human(taken)} of {'no limit' if limit is None else _human(limit)}"
        for tier, limit, taken in zip(tiers, limits, used, strict=True)
    )
    return (
        f"the model does not fit even with host memory: {len(sizes)} tensors of "
        f"{_human(total)} ({total:,} bytes), and tensor {shown(name)} ({_human(nbytes)}) has "
        f"no room left ({room}). Fix: raise max_memory (its 'cpu' entry is the host's "
        "share), free host memory, or load the model in a smaller dtype"
    )


def _human(nbytes: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes} B"
