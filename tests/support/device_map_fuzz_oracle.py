"""The device-map fuzzer's oracle: a drawn model planned by Accelerate and by tj, then placed.

``judge(draw)`` builds the torch twin of one :class:`device_map_fuzz.Draw`, plans it with
``tj.DeviceMap.plan`` (its state dict, the budgets as ``max_memory``: ``cpu:1`` ... stand
in for accelerators, the host's ``"cpu"`` share, the pinned cap) and returns every
:class:`Finding`: a part of the answers that is wrong and that no row of ``DIFFERENCES``
explains. Two kinds of oracle:

* Accelerate's planner, where tj means to agree with it: ``infer_auto_device_map`` on the
  twin with the same budgets (``get_balanced_memory`` first for ``"auto"``,
  ``"balanced"`` and ``"balanced_low_0"``, as Transformers does), each tensor's device
  looked up in its map as Accelerate's loaders do (the longest module prefix). tj's two
  host tiers (the accelerator's ``pinned_host`` memory, the CPU device) are Accelerate's
  ``"cpu"``. Differences by design are taken out before comparing, strictly:
  Accelerate's reserve of the largest layer on the first accelerator and the host
  (``"no-largest-layer-reserve"``), its count of 64-bit tensors at 8 bytes
  (``"x64-counted-as-held"``) and of bool ones at a bit (``"bool-counted-as-a-byte"``);
  and the model Accelerate plans is the one the state dict shows (no buffer that is
  not persistent, no tie, a parent's buffers as parameters), so those rows are strict
  too. Skipped, with the invariants still run, where ``accelerate`` is not installed.
* Invariants, always: a plan names every tensor of the state dict in its order; no
  place holds more than its budget, in the plan and in the placed arrays' buffers; an
  automatic plan pins only on its execution device; an explicit map places each tensor
  by its longest covering key (Accelerate's rule), and one with a key for a module
  without tensors is taken; a plan that cannot fit raises ``tj.OutOfMemoryError``
  naming the tensor and the fix (never a raw XLA error, never a spill past a budget);
  the arrays placed by the plan (``tj.to_device`` of the state dict, ``tj.load_file``
  and ``tj.safe_open`` of its safetensors file, ``tj.load`` of its ``torch.save``
  file) lie where it says, device and memory kind, with the twin's dtype (64-bit ones
  narrowed) and values bit for bit; ``tj.save_file`` of them reads back as the twin's;
  a forward pass over them, stage by stage on the devices they lie on (the CPU
  device's arrays through the execution device's pinned memory, as the guide says),
  equals the twin's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import logging
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import safetensors.numpy
import safetensors.torch
import torch

import torch2jax_device as tj
from tests.support import device_map_fuzz, fuzz_runs
from tests.support.device_map_fuzz import D, Draw, forward_over, named_tensors, smaller, twin
from tests.support.fuzz_runs import Different, Explained

PINNED = "pinned_host"
DOCS = "docs/how-to/big-models.md"


@dataclasses.dataclass(frozen=True)
class Row:
    """A difference from Accelerate by design: what differs, and the phrase of the docs
    that says it."""

    id: str
    what: str
    #: A phrase of ``DOCS`` (the page that says this difference).
    docs: str


DIFFERENCES = (
    Row(
        "no-largest-layer-reserve",
        "Accelerate keeps room for the largest layer on the first accelerator and in host "
        "RAM (to bring an offloaded layer in); tj fills each budget to its figure (the "
        "oracle compares with Accelerate's planner with that reserve taken out)",
        "**No room is kept for the largest layer.**",
    ),
    Row(
        "x64-counted-as-held",
        "a 64-bit tensor counts the bytes JAX holds it in (4: int64 becomes int32 "
        "without x64), not torch's 8 (the oracle gives Accelerate those as special_dtypes)",
        "**A 64-bit tensor counts the bytes JAX holds.**",
    ),
    Row(
        "bool-counted-as-a-byte",
        "a bool tensor counts a byte an element, as JAX (and torch) hold it; Accelerate's "
        "dtype_byte_size counts a bit (the oracle gives Accelerate those as int8 "
        "special_dtypes)",
        "**A bool tensor counts a byte an element.**",
    ),
    Row(
        "no-disk-tier",
        "what Accelerate offloads to 'disk' makes tj raise tj.OutOfMemoryError naming the "
        "tensor, or split a module no tier holds whole, in order",
        "**Nothing goes to disk.**",
    ),
    Row(
        "a-modules-own-tensors-stay-together",
        "a module with children that does not fit: Accelerate places each of its own "
        "tensors apart; tj keeps a module's own tensors (a run of names with one prefix) "
        "together",
        "**A module's own tensors stay together.**",
    ),
    Row(
        "a-tie-in-a-state-dict-is-two-tensors",
        "a weight tied in the twin (one Parameter under two names) is two tensors in its "
        "state_dict() (each name detached on its own): tj counts and places each, as it "
        "makes an array of each; Accelerate counts it once and moves the module of its "
        "second name to the first's device",
        "**A tie in a state dict is two tensors.**",
    ),
    Row(
        "state-dict-order",
        "tj plans in the state dict's order (a module's buffers before its children); "
        "Accelerate treats the root's buffers after its children and leaves a split "
        "module's own buffers out of its map (the oracle gives Accelerate a parent's "
        "buffers as parameters, which it treats in the state dict's order)",
        "**The state dict's order.**",
    ),
    Row(
        "non-persistent-buffers-not-planned",
        "a buffer registered with persistent=False is in no state dict: tj neither plans "
        "nor counts it; Accelerate counts it",
        "**Non-persistent buffers.**",
    ),
    Row(
        "no-split-module-classes",
        "tj has no no_split_module_classes: a module is kept whole only where its own "
        "tensors are (a leaf's); Accelerate keeps whole every module of those classes",
        "**No `no_split_module_classes`.**",
    ),
    Row(
        "balanced-low-0-counts-devices-by-position",
        "balanced_low_0 with an accelerator of budget 0: Accelerate sums the budgets of "
        "devices 1..n-1 by index, counting the empty one; tj sums the others that hold "
        "anything",
        "**`balanced_low_0` with an empty accelerator.**",
    ),
)


class Finding(fuzz_runs.Finding):
    @property
    def kind(self) -> tuple[str, ...]:
        return (self.aspect, self.draw.strategy or "explicit", self.draw.entry)


class Tally:
    """What the rows explained, over a run, and what the draws exercised."""

    def __init__(self) -> None:
        self.examples = 0
        self.compared = 0  # draws whose plan was compared with Accelerate's
        self.agreed = 0  # ... and agreed, tensor by tensor
        self.accelerate_failed = 0  # draws Accelerate's planner crashed on (its ties)
        self.refused = 0  # plans tj refused (each checked as the error it must be)
        self.placed = 0  # plans whose arrays were placed and checked
        self.forward = 0  # ... and run through the forward pass
        self.explained: dict[str, int] = {row.id: 0 for row in DIFFERENCES}


def has_accelerate() -> bool:
    return importlib.util.find_spec("accelerate") is not None


# --- the plans -------------------------------------------------------------------------------


def cpus() -> list[jax.Device]:
    return list(jax.local_devices(backend="cpu"))


def max_memory(draw: Draw) -> dict[str, int]:
    """tj's ``max_memory``: ``cpu:1`` ... for the accelerators, ``"cpu"``, ``"pinned_host"``."""
    memory: dict[str, int] = {f"cpu:{i + 1}": b for i, b in enumerate(draw.accelerators)}
    memory["cpu"] = draw.host
    if draw.pinned is not None:
        memory[PINNED] = draw.pinned
    return memory


def tj_map(draw: Draw) -> dict[str, Any] | None:
    """The explicit map of ``draw`` as tj takes it (``None`` for a strategy): a place
    ``"cpu:1 pinned_host"`` as ``("cpu:1", "pinned_host")``."""
    if draw.device_map is None:
        return None
    return {key: tuple(place.split()) if " " in place else place for key, place in draw.device_map}


def _where(place: Any) -> tuple[jax.Device, str]:
    """A place of an explicit map as a device and memory kind (``"cpu"``: the host's)."""
    device, kind = place if isinstance(place, tuple) else (place, "device")
    index = 0 if device == "cpu" else int(device.split(":")[1])
    return cpus()[index], kind


def tier(destination: Any) -> str:
    """A tj place as Accelerate names it: ``"0"`` ... for the accelerators, ``"cpu"``."""
    device, kind = destination.device, destination.memory_kind
    if kind == PINNED or device == cpus()[0]:
        return "cpu"
    return str(device.id - 1)


def lookup(device_map: dict[str, Any], name: str) -> Any:
    """The place Accelerate's loaders give tensor ``name`` (``_get_param_device``): the
    longest module prefix of it that the map has, or ``None``."""
    key = name
    while True:
        if key in device_map:
            return device_map[key]
        if not key:
            return None
        key = key.rpartition(".")[0]


@contextlib.contextmanager
def _without_reserve() -> Iterator[None]:
    """Accelerate's planner with no room kept for the largest layer (the
    ``"no-largest-layer-reserve"`` row): its ``get_max_layer_size`` reports none."""
    from accelerate.utils import modeling

    saved = modeling.get_max_layer_size
    modeling.get_max_layer_size = lambda *args, **kwargs: (0, [])
    try:
        yield
    finally:
        modeling.get_max_layer_size = saved


def accelerates(draw: Draw, model: torch.nn.Module, *, reserve: bool = False) -> dict[str, str]:
    """Accelerate's place for each tensor of the state dict: ``"0"`` ..., ``"cpu"``,
    ``"disk"``, or ``"unplaced"`` (its map leaves the tensor out)."""
    from accelerate.utils import get_balanced_memory, infer_auto_device_map

    # "Device 0 is not available": the CPU devices stand in for its GPUs, by index
    logging.getLogger("accelerate.utils.modeling").setLevel(logging.ERROR)

    memory: dict[Any, int] = dict(enumerate(draw.accelerators))
    memory["cpu"] = draw.host
    as_held = {"int64": torch.int32, "bool": torch.int8}  # JAX's bytes (the two rows)
    held = {
        name: as_held[tensor.dtype]
        for name, tensor in named_tensors(draw.model)
        if tensor.dtype in as_held
    }
    special = held or None
    no_split = list(draw.no_split) or None
    with warnings.catch_warnings(), contextlib.nullcontext() if reserve else _without_reserve():
        warnings.simplefilter("ignore")
        if draw.strategy != "sequential":
            memory = get_balanced_memory(
                model,
                max_memory=memory,
                no_split_module_classes=no_split,
                special_dtypes=special,
                low_zero=draw.strategy == "balanced_low_0",
            )
        found = infer_auto_device_map(
            model, max_memory=memory, no_split_module_classes=no_split, special_dtypes=special
        )
    places = {}
    for name in model.state_dict():
        place = lookup(dict(found), name)
        places[name] = "unplaced" if place is None else str(place)
    return places


# --- judging ---------------------------------------------------------------------------------


def judge(draw: Draw, tally: Tally | None = None) -> list[Finding]:
    """What is wrong with tj's plan and placing of ``draw`` that no row explains (a crash
    of either side included; tj's narrowing of int64, said once per load, is no finding)."""
    tally = tally if tally is not None else Tally()
    return fuzz_runs.outcome(draw, _judge, tally, Finding, crashes=True)


def _judge(draw: Draw, tally: Tally) -> None:
    model = twin(draw)
    state = model.state_dict()
    try:
        plan = tj.DeviceMap.plan(
            state, max_memory=max_memory(draw), device_map=tj_map(draw) or draw.strategy
        )
    except tj.Torch2JaxDeviceError as error:
        plan, refusal = None, error
    else:
        refusal = None
    if plan is None:
        _check_refusal(draw, state, refusal)
        tally.refused += 1
    else:
        _check_plan(draw, state, plan)
    if draw.strategy is not None and has_accelerate():
        _compare_with_accelerate(draw, model, plan, refusal, tally)
    if plan is not None:
        placed = _placed(draw, model, plan)
        _check_placed(draw, state, plan, placed)
        tally.placed += 1
        if _forward(draw, model, plan, placed):
            tally.forward += 1


def _distinct(draw: Draw, state: dict[str, torch.Tensor]) -> dict[str, int]:
    """Each tensor's bytes as JAX holds it (a state dict's tie is two tensors)."""
    sizes = {}
    for name, tensor in state.items():
        itemsize = 4 if tensor.dtype == torch.int64 else tensor.element_size()
        sizes[name] = tensor.numel() * itemsize
    return sizes


def _check_refusal(draw: Draw, state: dict[str, torch.Tensor], error: BaseException | None) -> None:
    """A refused plan must be the library's error that the draw earns, naming the fix."""
    sizes = _distinct(draw, state)
    message = str(error)
    if draw.device_map is not None:
        explicit = tj_map(draw) or {}
        unplaced = [name for name in state if lookup(explicit, name) is None]
        if unplaced:
            if not isinstance(error, tj.InvalidDeviceError) or "Fix:" not in message:
                raise Different("refusal", "device_map", f"unplaced {unplaced[:3]}", error)
            return
        unused = [key for key in explicit if not any(lookup({key: 1}, name) for name in state)]
        # A key for a module without tensors (Accelerate's maps have them) is taken when
        # its parent holds tensors; one like a sibling's name is refused as a typo,
        # naming that sibling; at the top or under a module with no tensor at all,
        # refused (nothing tells it from a map for another model).
        taken = [
            key
            for key in unused
            if not key
            or ("." in key and any(name.startswith(key.rpartition(".")[0] + ".") for name in state))
        ]
        if "covers none" in message:
            refused = message.partition("device_map[")[2].partition("]")[0].strip("'")
            if refused not in unused:
                raise Different("refusal", f"device_map[{refused!r}]", "covers tensors", error)
            hint = message.partition("did you mean '")[2].partition("'")[0]
            sibling = bool(hint) and hint.rpartition(".")[0] == refused.rpartition(".")[0]
            if refused in taken and not sibling:
                raise Different(
                    "refusal", f"device_map[{refused!r}]", "placed (no tensor under it)", error
                )
            return
        totals = _explicit_totals(draw, state, explicit)
        over = [place for place, nbytes in totals.items() if nbytes > _budget(draw, place)]
        host = sum(nbytes for place, nbytes in totals.items() if _in_host(place))
        if host > draw.host:
            over.append("host")
        if not over or not isinstance(error, tj.OutOfMemoryError) or "Fix:" not in message:
            raise Different("refusal", "device_map", f"over budget: {over}", error)
        return
    if not isinstance(error, tj.OutOfMemoryError) or "Fix:" not in message:
        raise Different("refusal", "auto", "tj.OutOfMemoryError naming the fix", error)
    if sum(sizes.values()) <= draw.host:  # the host alone holds the model: never refused
        raise Different("refusal", "auto", f"fits the host ({sum(sizes.values())} bytes)", error)
    if not any(repr(name) in message for name in state):
        raise Different("refusal", "message", "names the tensor with no room", error)


def _explicit_totals(
    draw: Draw, state: dict[str, torch.Tensor], explicit: dict[str, Any]
) -> dict[tuple[jax.Device, str], int]:
    sizes = _distinct(draw, state)
    totals: dict[tuple[jax.Device, str], int] = {}
    for name in state:
        place = _where(lookup(explicit, name))
        totals[place] = totals.get(place, 0) + sizes[name]
    return totals


def _in_host(place: tuple[jax.Device, str]) -> bool:
    return place[1] == PINNED or place[0] == cpus()[0]


def _budget(draw: Draw, place: tuple[jax.Device, str]) -> int:
    """A place's own budget: an accelerator's, the host's, pinned memory's cap within it."""
    device, kind = place
    if kind == PINNED:
        return draw.host if draw.pinned is None else min(draw.pinned, draw.host)
    if device == cpus()[0]:
        return draw.host
    return draw.accelerators[device.id - 1]


def _check_plan(draw: Draw, state: dict[str, torch.Tensor], plan: Any) -> None:
    placements = plan.placements()
    if list(placements) != list(state):
        raise Different("plan", "names", list(state), list(placements))
    sizes = _distinct(draw, state)
    used: dict[str, int] = {}
    for name, destination in placements.items():
        key = "pinned" if destination.memory_kind == PINNED else tier(destination)
        used[key] = used.get(key, 0) + sizes[name]
    for i, budget in enumerate(draw.accelerators):
        if used.get(str(i), 0) > budget:
            raise Different("budget", f"cpu:{i + 1}", f"<= {budget}", used[str(i)])
    host = used.get("cpu", 0) + used.get("pinned", 0)
    if host > draw.host:
        raise Different("budget", "host", f"<= {draw.host}", host)
    if draw.pinned is not None and used.get("pinned", 0) > draw.pinned:
        raise Different("budget", PINNED, f"<= {draw.pinned}", used["pinned"])
    pinned_on = {d.device for d in placements.values() if d.memory_kind == PINNED}
    if draw.strategy is not None and pinned_on - {plan.execution_device}:
        raise Different("pinned tier", PINNED, plan.execution_device, pinned_on)
    explicit = tj_map(draw)
    if explicit is not None:  # the longest covering key places each tensor
        for name, destination in placements.items():
            expected = _where(lookup(explicit, name))
            if (destination.device, destination.memory_kind) != expected:
                raise Different("explicit", name, lookup(explicit, name), destination)


def _compare_with_accelerate(
    draw: Draw, model: torch.nn.Module, plan: Any, refusal: BaseException | None, tally: Tally
) -> None:
    plain = model if _as_tj_sees_it(draw) == draw else twin(_as_tj_sees_it(draw))
    try:
        theirs = accelerates(draw, plain)
    except IndexError:  # Accelerate's get_module_size_with_ties on some ties: no answer
        tally.accelerate_failed += 1
        return
    tally.compared += 1
    if "disk" in theirs.values() and (plan is None or _splits_a_module(plan)):
        raise Explained("no-disk-tier")
    ours = (
        dict.fromkeys(theirs, "refused")
        if plan is None
        else {name: tier(destination) for name, destination in plan.placements().items()}
    )
    if ours == theirs:
        tally.agreed += 1
        if accelerates(draw, plain, reserve=True) != theirs:
            tally.explained["no-largest-layer-reserve"] += 1
        if plain is not model and _accelerates_or_none(draw, model) != theirs:
            kinds = {t.kind for _, t in named_tensors(draw.model)}
            if "transient" in kinds:
                tally.explained["non-persistent-buffers-not-planned"] += 1
            if draw.ties:
                tally.explained["a-tie-in-a-state-dict-is-two-tensors"] += 1
            if _parents_hold_buffers(draw):
                tally.explained["state-dict-order"] += 1
        dtypes = {t.dtype for _, t in named_tensors(draw.model)}
        tally.explained["x64-counted-as-held"] += "int64" in dtypes
        tally.explained["bool-counted-as-a-byte"] += "bool" in dtypes
        return
    row = _row_for(draw)
    if row is None:
        first = next(name for name in ours if ours[name] != theirs[name])
        raise Different("accelerate", first, theirs, ours)
    raise Explained(row)


def _as_tj_sees_it(draw: Draw) -> Draw:
    """``draw``'s model as its state dict shows it, for Accelerate: no buffer that is not
    persistent, no tie (each name its own tensor), and a parent module's buffers made
    parameters (Accelerate treats a parent's parameters in the state dict's order, its
    buffers not). The rows of those differences are then compared strictly: Accelerate
    must agree with tj on that model."""

    def kept(spec: device_map_fuzz.Module) -> device_map_fuzz.Module:
        tensors = tuple(t for t in spec.tensors if t.kind != "transient")
        if spec.children:
            tensors = tuple(dataclasses.replace(t, kind="param") for t in tensors)
        return dataclasses.replace(
            spec, tensors=tensors, children=tuple(kept(child) for child in spec.children)
        )

    return dataclasses.replace(draw, model=kept(draw.model), ties=())


def _parents_hold_buffers(draw: Draw) -> bool:
    parents = [spec for _, spec in device_map_fuzz.module_paths(draw.model) if spec.children]
    return any(t.kind == "buffer" for spec in [draw.model, *parents] for t in spec.tensors)


def _accelerates_or_none(draw: Draw, model: torch.nn.Module) -> dict[str, str] | None:
    try:
        return accelerates(draw, model)
    except IndexError:
        return None


def _splits_a_module(plan: Any) -> bool:
    by_module: dict[str, set[Any]] = {}
    for name, destination in plan.placements().items():
        by_module.setdefault(name.rpartition(".")[0], set()).add(destination)
    return any(len(places) > 1 for places in by_module.values())


def _row_for(draw: Draw) -> str | None:
    """The row a draw's difference from Accelerate may come from, if any applies."""
    parents = [spec for _, spec in device_map_fuzz.module_paths(draw.model) if spec.children]
    parents.append(draw.model)
    if draw.no_split:
        return "no-split-module-classes"
    if any(len(spec.tensors) > 1 for spec in parents):
        return "a-modules-own-tensors-stay-together"
    if draw.strategy == "balanced_low_0" and 0 in draw.accelerators:
        return "balanced-low-0-counts-devices-by-position"
    return None


# --- placing ---------------------------------------------------------------------------------


def _placed(draw: Draw, model: torch.nn.Module, plan: Any) -> dict[str, jax.Array]:
    state = model.state_dict()
    if draw.entry == "to_device":
        return dict(tj.to_device(state, plan))
    with tempfile.TemporaryDirectory(prefix="tj-device-map-fuzz-") as folder:
        if draw.entry in ("load_file", "safe_open"):
            path = Path(folder) / "model.safetensors"
            safetensors.torch.save_file(
                {k: v.contiguous().clone() for k, v in state.items()}, str(path)
            )
            if draw.entry == "load_file":
                return dict(tj.load_file(path, device=plan))
            with tj.safe_open(path, framework="flax", device=plan) as opened:
                return {name: opened.get_tensor(name) for name in opened.keys()}
        path = Path(folder) / "model.pt"
        torch.save(state, path)
        return dict(tj.load(path, map_location=plan))


def _expected(tensor: torch.Tensor) -> np.ndarray[Any, Any]:
    """The twin's tensor as tj holds it: 64-bit integers narrowed (their values fit)."""
    if tensor.dtype == torch.int64:
        tensor = tensor.to(torch.int32)
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(jnp.bfloat16)
    return tensor.numpy()


def _same_bits(theirs: np.ndarray[Any, Any], ours: np.ndarray[Any, Any]) -> bool:
    return (
        theirs.dtype == ours.dtype
        and theirs.shape == ours.shape
        and theirs.tobytes() == np.ascontiguousarray(ours).tobytes()
    )


def _check_placed(
    draw: Draw, state: dict[str, torch.Tensor], plan: Any, placed: dict[str, Any]
) -> None:
    # a safetensors file lists its tensors by its writer's layout, and tj.load_file (as
    # safetensors' own) returns them so: the names, not their order, for that entry
    by_file = draw.entry in ("load_file", "safe_open")
    listed = sorted(placed) if by_file else list(placed)
    if listed != (sorted(state) if by_file else list(state)):
        raise Different("placed", "names", list(state), list(placed))
    for name, array in placed.items():
        destination = plan.destination(name)
        where = (next(iter(array.devices())), array.sharding.memory_kind)
        if where != (destination.device, destination.memory_kind):
            raise Different("placement", name, destination, where)
        host = np.asarray(jax.device_put(array, cpus()[0]))
        expected = _expected(state[name])
        if not _same_bits(expected, host):
            raise Different(
                "values",
                name,
                f"{expected.dtype} {expected.tolist()}",
                f"{host.dtype} {host.tolist()}",
            )
    _check_held(draw, placed)
    with tempfile.TemporaryDirectory(prefix="tj-device-map-fuzz-") as folder:
        path = Path(folder) / "saved.safetensors"
        tj.save_file(placed, path)
        back = safetensors.numpy.load_file(str(path))
        for name, tensor in state.items():
            expected = _expected(tensor)
            if name not in back or not _same_bits(expected, back[name]):
                raise Different("round trip", name, expected.tolist(), back.get(name))


def _check_held(draw: Draw, placed: dict[str, Any]) -> None:
    """The bytes the placed arrays hold on each place (each buffer once), within its
    budget: what the plan counted is what the move made."""
    held: dict[str, int] = {}
    seen: set[int] = set()
    for array in placed.values():
        if not array.nbytes:
            continue
        pointer = array.addressable_data(0).unsafe_buffer_pointer()
        if pointer in seen:
            continue
        seen.add(pointer)
        device = next(iter(array.devices()))
        key = (
            "pinned"
            if array.sharding.memory_kind == PINNED
            else ("cpu" if device == cpus()[0] else str(device.id - 1))
        )
        held[key] = held.get(key, 0) + array.nbytes
    for i, budget in enumerate(draw.accelerators):
        if held.get(str(i), 0) > budget:
            raise Different("held", f"cpu:{i + 1}", f"<= {budget}", held[str(i)])
    if held.get("cpu", 0) + held.get("pinned", 0) > draw.host:
        raise Different("held", "host", f"<= {draw.host}", held)


def _forward(draw: Draw, model: torch.nn.Module, plan: Any, placed: dict[str, Any]) -> bool:
    """The twin's forward pass over the placed arrays, stage by stage: each run of
    tensors on one device a jitted stage there, its pinned arrays brought in inside the
    program (``plan.to_execution_device`` on the execution device); the CPU device's
    arrays taken by the execution device's stage, put in its pinned memory first, as
    the guide says. Compared with the twin's own forward (float32 rounding apart)."""
    execution = plan.execution_device
    pinned = jax.sharding.SingleDeviceSharding(execution, memory_kind=PINNED)
    stages: list[tuple[jax.Device, list[Any]]] = []
    for name in model.state_dict():  # the twin's order (a safetensors file's is its own)
        array = placed[name]
        device = next(iter(array.devices()))
        if device == cpus()[0] and execution != cpus()[0]:
            array, device = jax.device_put(array, pinned), execution
        if stages and stages[-1][0] == device:
            stages[-1][1].append(array)
        else:
            stages.append((device, [array]))
    x0 = torch.linspace(-1, 1, D)
    x: Any = np.asarray(x0)
    for device, arrays in stages:
        x = _stage(plan, arrays, jax.device_put(x, device), device)
    expected = model(x0).numpy()
    got = np.asarray(jax.device_put(x, cpus()[0]))
    if not np.allclose(expected, got, rtol=1e-4, atol=1e-5, equal_nan=True):
        raise Different("forward", "output", expected.tolist(), got.tolist())
    return True


def _stage(plan: Any, arrays: list[Any], x: Any, device: jax.Device) -> Any:
    """One jitted stage of the forward pass on ``device``: its pinned arrays come in
    inside the program, through ``plan.to_execution_device`` on the execution device (an
    explicit map may pin arrays of another: a ``device_put`` to its memory there)."""
    own = jax.sharding.SingleDeviceSharding(device, memory_kind="device")

    def run(arrays: list[Any], x: Any) -> Any:
        if device == plan.execution_device:
            arrays = plan.to_execution_device(arrays)
        else:
            arrays = [jax.device_put(array, own) for array in arrays]
        return forward_over(arrays, x, jnp)

    return jax.jit(run)(arrays, x)


# --- shrinking and a run ---------------------------------------------------------------------


def shrink(finding: Finding, budget: int = 30) -> Finding:
    """A smaller draw showing the same kind of difference."""
    return fuzz_runs.shrink(finding, judge, smaller, budget)


#: How many kinds of findings a report shows with a shrunk reproduction.
SHOWN = 8


def fuzz(
    examples: int, seed: int, *, devices: int
) -> tuple[dict[tuple[str, ...], list[Finding]], Tally]:
    """Run ``examples`` draws from ``seed``; the unexplained findings by kind, and the tally."""
    tally = Tally()
    drawing = functools.partial(device_map_fuzz.draw, devices=devices)
    return fuzz_runs.run(examples, seed, drawing, judge, tally), tally


def report(found: dict[tuple[str, ...], list[Finding]], tally: Tally, seed: int) -> str:
    lines = [
        f"{sum(map(len, found.values()))} findings no row of device_map_fuzz_oracle.DIFFERENCES "
        f"covers, in {len(found)} kinds ({tally.examples} examples, "
        f"TORCH2JAX_DEVICE_DEVICE_MAP_FUZZ_SEED={seed}):"
    ]
    lines += fuzz_runs.listed(found, shrink, SHOWN)
    lines.append(
        f"Compared with Accelerate: {tally.compared} (agreed {tally.agreed}; Accelerate "
        f"failed on {tally.accelerate_failed}); refused: {tally.refused}; placed: "
        f"{tally.placed}; forward: {tally.forward}; rows: {tally.explained}."
    )
    return "\n".join(lines)
