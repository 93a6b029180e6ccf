"""The device-map fuzzer's draws: a model, its budgets and a plan's arguments, as plain data.

A :class:`Draw` is everything one example of ``tests/multidevice/test_device_map_fuzz.py``
needs, written down as plain values (a tree of modules with each tensor's name, shape,
dtype and kind; the weights tied; each stand-in accelerator's budget, the host's and the
pinned memory's; the strategy or an explicit map; Accelerate's ``no_split_module_classes``;
how the arrays get to their places), so the same draw builds the same torch twin afresh,
prints as one line of Python and shrinks by rewriting a field. ``draw(rng)`` makes one
from a seeded ``random.Random``; nothing here knows what Accelerate or tj answers
(``device_map_fuzz_oracle`` asks them).

The space:

* the model: nested modules (``Block``, ``Linear``, ``Norm``, ``Stack`` and empty ones
  such as ``Dropout``), each with parameters and buffers (persistent, and now and then
  not) of float32, float16, bfloat16, int8, int32, int64 and bool, any shape (empty
  ones included); a parameter tied to another of its shape (a head to an embedding);
* the budgets: 1-3 CPU devices standing in for accelerators (``cpu:1`` ... ``cpu:3``,
  Accelerate's ``0`` ... ``2``), each a budget from nothing to the whole model, the
  host's (``"cpu"``) from a part of the model to all of it, and at times a
  ``"pinned_host"`` cap;
* the plan: ``"auto"``, ``"balanced"``, ``"balanced_low_0"``, ``"sequential"`` (with
  Accelerate's planner as the oracle), or an explicit map of module prefixes, complete
  or partial;
* the placing: ``tj.to_device`` of the twin's state dict, ``tj.load_file`` and
  ``tj.safe_open`` of its safetensors file, ``tj.load`` of its ``torch.save`` file, each
  by the plan.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import numpy as np
import torch

from tests.support import fuzz_runs

#: The dtypes a model's tensors are drawn in (every one torch and JAX share a name for).
DTYPES = ("float32", "float32", "float16", "bfloat16", "int8", "int32", "int64", "bool")
#: Module classes: ``Leaf`` kinds hold tensors only; ``Block`` and ``Stack`` hold children.
LEAF_CLASSES = ("Linear", "Norm", "Embedding")
PARENT_CLASSES = ("Block", "Stack")
EMPTY_CLASSES = ("Dropout", "Identity")
STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")
#: How the arrays reach their places: a move of the state dict, or a load of a file.
ENTRIES = ("to_device", "load_file", "safe_open", "load")
#: The width of the forward pass's vector: tensors of shape (D, D) and (D,) take part in it.
D = 4


@dataclasses.dataclass(frozen=True)
class Tensor:
    """One tensor of a module: ``kind`` is ``"param"``, ``"buffer"`` or ``"transient"``
    (a buffer registered with ``persistent=False``: in the module, not its state dict)."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    kind: str = "param"
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class Module:
    """A module of the twin: its class name, its own tensors and its children."""

    name: str
    cls: str
    tensors: tuple[Tensor, ...] = ()
    children: tuple[Module, ...] = ()


@dataclasses.dataclass(frozen=True)
class Draw:
    """A model, the budgets it is planned in, and how its arrays are placed."""

    model: Module
    #: Bytes each stand-in accelerator (``cpu:1``, ``cpu:2``...) may take, in order.
    accelerators: tuple[int, ...]
    #: ``max_memory["cpu"]``: the host's share (both host tiers together).
    host: int
    #: ``max_memory["pinned_host"]``, or ``None`` (not given).
    pinned: int | None = None
    #: A strategy of ``STRATEGIES``, or ``None`` with ``device_map`` given.
    strategy: str | None = "sequential"
    #: An explicit map: ``(module prefix, place)`` pairs, a place printed as tj prints
    #: one: ``"cpu"`` (the host), ``"cpu:1"`` (an accelerator), ``"cpu:1 pinned_host"``.
    device_map: tuple[tuple[str, str], ...] | None = None
    #: ``(first, second)``: the parameter named ``second`` is the one named ``first``.
    ties: tuple[tuple[str, str], ...] = ()
    no_split: tuple[str, ...] = ()
    entry: str = "to_device"

    def expression(self) -> str:
        """The draw as one line: what to rerun."""
        return fuzz_runs.expression(self, always=("strategy",))


# --- the twin --------------------------------------------------------------------------------


def values(tensor: Tensor) -> torch.Tensor:
    """``tensor``'s values from its seed: small numbers every dtype holds exactly."""
    generator = torch.Generator().manual_seed(tensor.seed)
    if tensor.dtype == "bool":
        return torch.rand(tensor.shape, generator=generator) < 0.5
    if tensor.dtype.startswith("int"):
        drawn = torch.randint(-100, 100, tensor.shape, generator=generator)
        return drawn.to(getattr(torch, tensor.dtype))
    drawn = torch.randn(tensor.shape, generator=generator) / 2
    return drawn.to(getattr(torch, tensor.dtype))


class Twin(torch.nn.Module):
    """The torch model a draw describes; its forward runs every tensor of its state dict,
    in order, through ``forward_over`` (the same arithmetic tj's side runs in JAX)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return forward_over(list(self.state_dict().values()), x, torch)


def forward_over(tensors: list[Any], x: Any, xp: Any) -> Any:
    """The forward pass over ``tensors`` in order, for torch (``xp=torch``) or JAX
    (``jax.numpy``): a (D, D) matrix is a layer, ``tanh(w @ x)``; a (D,) vector a bias;
    any other tensor adds its mean (nothing when empty). Everything in float32."""
    for tensor in tensors:
        value = tensor.to(torch.float32) if xp is torch else tensor.astype(np.float32)
        if tuple(value.shape) == (D, D):
            x = xp.tanh(value @ x)
        elif tuple(value.shape) == (D,):
            x = x * 0.5 + value
        elif int(np.prod(value.shape)):
            x = x + value.mean()
    return x


def twin(draw_: Draw) -> torch.nn.Module:
    """The torch model of ``draw_``, its ties tied (one ``Parameter`` under both names)."""
    root = _built(draw_.model)
    for first, second in draw_.ties:
        owner, _, local = second.rpartition(".")
        module = root.get_submodule(owner) if owner else root
        setattr(module, local, root.get_parameter(first))
    return root


def _built(spec: Module) -> torch.nn.Module:
    module: torch.nn.Module = type(spec.cls, (Twin,), {})()
    for tensor in spec.tensors:
        made = values(tensor)
        if tensor.kind == "param":
            module.register_parameter(tensor.name, torch.nn.Parameter(made, requires_grad=False))
        else:
            module.register_buffer(tensor.name, made, persistent=tensor.kind == "buffer")
    for child in spec.children:
        module.add_module(child.name, _built(child))
    return module


def named_tensors(spec: Module, prefix: str = "") -> list[tuple[str, Tensor]]:
    """Every tensor of the tree by its dotted name, in the order torch's state dict lists
    them (a module's own tensors, then its children's)."""
    found = [(prefix + tensor.name, tensor) for tensor in spec.tensors]
    for child in spec.children:
        found += named_tensors(child, f"{prefix}{child.name}.")
    return found


def module_paths(spec: Module, prefix: str = "") -> list[tuple[str, Module]]:
    """Every module below the root by its dotted path, depth first."""
    found: list[tuple[str, Module]] = []
    for child in spec.children:
        path = prefix + child.name
        found.append((path, child))
        found += module_paths(child, path + ".")
    return found


def nbytes(tensor: Tensor) -> int:
    itemsize = {"bool": 1, "int8": 1, "float16": 2, "bfloat16": 2}.get(tensor.dtype, 4)
    if tensor.dtype == "int64":
        itemsize = 8
    return int(np.prod(tensor.shape, dtype=np.int64)) * itemsize


# --- drawing ---------------------------------------------------------------------------------


def _shape(rng: random.Random) -> tuple[int, ...]:
    return rng.choice([(D, D), (D, D), (D,), (D,), (8, D), (3,), (0,), (2, 0), (), (5, 3), (16, D)])


def _tensors(rng: random.Random, count: int, buffers: bool) -> tuple[Tensor, ...]:
    names = rng.sample(["weight", "bias", "scale", "table", "running_mean", "step"], count)
    made = []
    for name in names:
        kind = "param"
        if buffers and rng.random() < 0.3:
            kind = "transient" if rng.random() < 0.15 else "buffer"
        made.append(
            Tensor(
                name=name,
                shape=_shape(rng),
                dtype=rng.choice(DTYPES) if rng.random() < 0.4 else "float32",
                kind=kind,
                seed=rng.randrange(2**16),
            )
        )
    return tuple(made)


def _module(rng: random.Random, name: str, depth: int) -> Module:
    roll = rng.random()
    if roll < 0.1:
        return Module(name=name, cls=rng.choice(EMPTY_CLASSES))
    if depth >= 2 or roll < 0.55:
        return Module(
            name=name, cls=rng.choice(LEAF_CLASSES), tensors=_tensors(rng, rng.randint(1, 3), True)
        )
    children = tuple(
        _module(rng, str(i) if rng.random() < 0.6 else f"m{i}", depth + 1)
        for i in range(rng.randint(1, 4))
    )
    own = _tensors(rng, rng.randint(1, 2), True) if rng.random() < 0.25 else ()
    return Module(name=name, cls=rng.choice(PARENT_CLASSES), tensors=own, children=children)


def _model(rng: random.Random) -> Module:
    names = ["embed", "layers", "norm", "head", "drop"]
    children = tuple(_module(rng, name, 0) for name in names[: rng.randint(1, 5)])
    own = _tensors(rng, 1, True) if rng.random() < 0.15 else ()
    return Module(name="", cls="Model", tensors=own, children=children)


def _ties(rng: random.Random, model: Module) -> tuple[tuple[str, str], ...]:
    """At times one parameter tied to an earlier one of its shape and dtype (renamed to
    be that one: the twin sets the same ``Parameter`` under the second name)."""
    params = [(name, t) for name, t in named_tensors(model) if t.kind == "param"]
    if len(params) < 2 or rng.random() < 0.7:
        return ()
    second = rng.randrange(1, len(params))
    first = rng.randrange(second)
    return ((params[first][0], params[second][0]),)


def _tied_model(model: Module, ties: tuple[tuple[str, str], ...]) -> Module:
    """``model`` with each tied second tensor given its first's shape and dtype."""
    if not ties:
        return model
    specs = dict(named_tensors(model))
    wanted = {second: specs[first] for first, second in ties}

    def rebuilt(spec: Module, prefix: str) -> Module:
        tensors = tuple(
            dataclasses.replace(
                t, shape=wanted[prefix + t.name].shape, dtype=wanted[prefix + t.name].dtype
            )
            if prefix + t.name in wanted
            else t
            for t in spec.tensors
        )
        children = tuple(rebuilt(child, f"{prefix}{child.name}.") for child in spec.children)
        return dataclasses.replace(spec, tensors=tensors, children=children)

    return rebuilt(model, "")


def _explicit(rng: random.Random, model: Module, accelerators: int) -> tuple[tuple[str, str], ...]:
    """Module prefixes to places: a covering one (``""``) now and then, the rest drawn."""
    paths = [path for path, _ in module_paths(model)] + [name for name, _ in named_tensors(model)]
    keys = rng.sample(paths, min(len(paths), rng.randint(1, 4)))
    if rng.random() < 0.7:
        keys.append("")
    places = ["cpu"] + [f"cpu:{i + 1}" for i in range(accelerators)] * 2
    places += [f"cpu:{i + 1} pinned_host" for i in range(accelerators)]
    return tuple((key, rng.choice(places)) for key in keys)


def draw(rng: random.Random, *, devices: int = 4) -> Draw:
    """One example from ``rng``; ``devices``: how many CPU devices JAX has here (all but
    the first stand in for accelerators)."""
    ties: tuple[tuple[str, str], ...] = ()
    model = _model(rng)
    ties = _ties(rng, model)
    model = _tied_model(model, ties)
    tied = {second for _, second in ties}
    total = sum(nbytes(t) for name, t in named_tensors(model) if name not in tied)
    count = rng.randint(1, max(1, min(3, devices - 1)))
    accelerators = tuple(
        rng.choice([0, total // 5, total // 3, total // 2, total, rng.randint(0, total + 1)])
        for _ in range(count)
    )
    host = rng.choice([total * 2, total, total, total // 2, rng.randint(0, total + 1)])
    pinned = rng.choice([None, None, None, 0, total // 4, total])
    explicit = rng.random() < 0.25
    classes = sorted({spec.cls for _, spec in module_paths(model) if spec.children})
    return Draw(
        model=model,
        accelerators=accelerators,
        host=host,
        pinned=pinned,
        strategy=None if explicit else rng.choice(STRATEGIES),
        device_map=_explicit(rng, model, count) if explicit else None,
        ties=ties,
        no_split=tuple(rng.sample(classes, 1)) if classes and rng.random() < 0.2 else (),
        entry=rng.choice(ENTRIES),
    )


def smaller(draw_: Draw) -> list[Draw]:
    """Draws one step simpler than ``draw_`` (for shrinking a finding)."""
    replace = dataclasses.replace
    candidates = []
    for default_name, default in (
        ("pinned", None),
        ("no_split", ()),
        ("entry", "to_device"),
        ("ties", ()),
    ):
        if getattr(draw_, default_name) != default:
            candidates.append(replace(draw_, **{default_name: default}))
    if len(draw_.accelerators) > 1:
        candidates.append(replace(draw_, accelerators=draw_.accelerators[:-1]))
    if draw_.device_map:
        for i in range(len(draw_.device_map)):
            rest = draw_.device_map[:i] + draw_.device_map[i + 1 :]
            if rest:
                candidates.append(replace(draw_, device_map=rest))
    tied = {name for pair in draw_.ties for name in pair}
    if not draw_.device_map:
        candidates.extend(
            replace(draw_, model=_without(draw_.model, path))
            for path, _ in module_paths(draw_.model)
            if not any(name.startswith(path + ".") for name in tied)
        )
    for name, tensor in named_tensors(draw_.model):
        if name in tied or draw_.device_map:
            continue
        simpler = [
            replace(tensor, seed=0),
            replace(tensor, kind="param"),
            replace(tensor, dtype="float32"),
        ]
        candidates.extend(
            replace(draw_, model=_with(draw_.model, name, other))
            for other in simpler
            if other != tensor
        )
    return [
        candidate
        for candidate in candidates
        if candidate != draw_ and named_tensors(candidate.model)
    ]


def _without(spec: Module, path: str) -> Module:
    head, _, rest = path.partition(".")
    children = tuple(
        child if child.name != head else _without(child, rest)
        for child in spec.children
        if not (child.name == head and not rest)
    )
    return dataclasses.replace(spec, children=children)


def _with(spec: Module, name: str, tensor: Tensor) -> Module:
    head, _, rest = name.partition(".")
    if not rest:
        return dataclasses.replace(
            spec, tensors=tuple(tensor if t.name == head else t for t in spec.tensors)
        )
    children = tuple(_with(c, rest, tensor) if c.name == head else c for c in spec.children)
    return dataclasses.replace(spec, children=children)


__all__ = ["Draw", "Module", "Tensor", "draw", "forward_over", "named_tensors", "smaller", "twin"]
