"""The oracle of the mirrored API: tj's torch look-alikes, called with torch's spellings.

A user porting line by line keeps torch's keyword names, positional order, defaults
and argument forms. Nothing here lists those: they come from torch itself.

* :func:`pairs` walks tj's public namespaces (:data:`NAMESPACES`) and pairs every
  public callable with the torch callable of the same dotted name; :data:`RENAMED`
  names the twins whose names differ, :data:`NO_TWIN` the public callables that mirror
  nothing callable (each with why), so that a new public callable is either paired
  automatically or has to be placed by hand (``test_api_mirror.py`` checks).
* :func:`torch_signature` is ``inspect.signature``, or for ``torch._C`` builtins the
  overloads torch's own argument parser prints when it refuses a probe keyword.
* :func:`signature_differences` lists each torch parameter tj cannot take by torch's
  name or position, and each default that differs.
* :func:`calls` generates, from torch's signature, the calls a porting user writes:
  the required arguments positionally and by keyword, each optional parameter by
  keyword at torch's default and at the other values its case holds (every form torch's
  annotation admits for a device), and positionally in torch's order. :func:`judge` runs
  each call both ways (:class:`Case` says how: side by side with torch on the CPU, or
  tj alone where torch's side needs a GPU or a job) and says what differs. The cases,
  one per pair that needs arguments or set-up, are ``api_mirror_cases.CASES``.
* :func:`unread_parameters` finds a parameter a tj function takes and never reads: a
  torch keyword accepted and silently ignored.
* :func:`member_pairs` pairs the methods of paired classes the same way (``Parameter.size``,
  a scheduler's ``step``).

A difference is fixed in the library, or tj refuses the value by name with the fix and a
table here (:data:`REFUSALS`, :data:`UNREAD_BY_DESIGN`, ...) names the known-differences
heading that says why; :data:`OPEN` holds what waits on a request.
"""

from __future__ import annotations

import dataclasses
import dis
import importlib
import inspect
import re
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

import torch2jax_device as tj
from tests.parity import harness
from tests.support import gpu_proxy

#: tj's namespaces that mirror torch's: tj's dotted path (from the package) -> torch's.
NAMESPACES: dict[str, str] = {
    "": "torch",
    "cuda": "torch.cuda",
    "accelerator": "torch.accelerator",
    "backends.cuda": "torch.backends.cuda",
    "backends.mps": "torch.backends.mps",
    "distributed": "torch.distributed",
    "optim": "torch.optim",
    "optim.lr_scheduler": "torch.optim.lr_scheduler",
}

#: Namespaces that hold no mirrored callables (tj.backends: the objects cuda and mps and
#: the fp32_precision setting; tj.porting: the scanner's tools).
NOT_MIRRORING = {"backends": "holds the namespaces backends.cuda and backends.mps",
                 "porting": "the porting tools: no torch counterpart"}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Twin:
    """A torch callable whose tj counterpart has another name.

    ``leading``: how many of tj's first parameters stand for torch's ``self`` (the model,
    the tensor; an optimizer's ``(optimizer, model)``), matched to nothing of torch's.
    """

    torch_name: str
    leading: int = 0


#: tj callables whose torch twin has another name.
RENAMED: dict[str, Twin] = {
    "to_device": Twin("torch.Tensor.to", leading=1),
    "get_device": Twin("torch.get_device"),
    "parameters": Twin("torch.nn.Module.parameters", leading=1),
    "state_dict": Twin("torch.nn.Module.state_dict", leading=1),
    "load_state": Twin("torch.nn.Module.load_state_dict", leading=1),
    "Parameter": Twin("torch.nn.Parameter"),
    "pin_memory": Twin("torch.Tensor.pin_memory", leading=1),
    "load_file": Twin("safetensors.torch.load_file"),
    "save_file": Twin("safetensors.torch.save_file"),
    "safe_open": Twin("safetensors.safe_open"),
    "distributed.get_local_rank": Twin("torch.distributed.get_node_local_rank"),
    "optim.state_dict": Twin("torch.optim.Optimizer.state_dict", leading=2),
    "optim.load_state_dict": Twin("torch.optim.Optimizer.load_state_dict", leading=2),
}

#: Public tj callables that mirror no torch callable, and why.
NO_TWIN: dict[str, str] = {
    "ArrayReport": "what tj.track_arrays yields: tj's own",
    "Device": "the class tj.device names: checked as tj.device",
    "DeviceLike": "a type alias",
    "DeviceLoader": "wraps a torch DataLoader: its arguments are tj's own",
    "DeviceMap": "what device_map= resolves to: tj's own",
    "ShardingRule": "JAX sharding: no torch counterpart",
    "StrictPlacement": "tj's strict placement mode: no torch counterpart",
    "TensorSlice": "safe_open's get_slice result: made by tj, never by the user",
    "available_backends": "JAX's backends",
    "check_same_device": "tj's check before a jitted call",
    "configure": "JAX's start-up settings",
    "device_of": "the attribute Tensor.device: nothing to call",
    "list_devices": "jax.devices",
    "live_arrays": "JAX's live arrays",
    "prefetch_to_device": "tj's prefetching iterator",
    "resolve": "a tj.device as a jax.Device",
    "set_strict_placement": "tj's strict placement mode",
    "strict_placement": "tj's strict placement mode",
    "to_jax": "the conversion torch has no counterpart of",
    "to_torch": "the conversion torch has no counterpart of",
    "track_arrays": "JAX's live arrays",
    "cuda.DeviceProperties": "what get_device_properties returns (torch's is private)",
    "distributed.make_global_batch": "what DistributedSampler does, as a JAX array",
    "optim.AdamState": "optax state: torch keeps it in optimizer.state",
    "optim.RMSpropState": "optax state: torch keeps it in optimizer.state",
    "optim.SGDState": "optax state: torch keeps it in optimizer.state",
    "optim.ParamGroup": "one of optimizer.param_groups: made by tj.optim.param_groups",
    "optim.hyperparameter": "reads an optax hyperparameter: tj's own",
    "optim.param_groups": "the attribute optimizer.param_groups: nothing to call",
}


@dataclasses.dataclass(frozen=True)
class Pair:
    """A tj callable (``tj_name`` as under ``tj.``) and its torch twin."""

    tj_name: str
    torch_name: str
    tj_object: Any
    torch_object: Any
    leading: int = 0

    def __str__(self) -> str:
        return f"tj.{self.tj_name}"


def resolve(dotted: str) -> Any:
    """The object a dotted name reaches (``safetensors.torch.load_file``), or ``None``."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        module = _module(".".join(parts[:split]))
        if module is not None:
            return _attribute(module, parts[split:])
    return None


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _attribute(value: Any, path: list[str]) -> Any:
    for part in path:
        value = getattr(value, part, None)
        if value is None:
            return None
    return value


def tj_namespace(path: str) -> Any:
    return tj if not path else resolve(f"torch2jax_device.{path}")


def public_names(namespace: Any) -> list[str]:
    names = getattr(namespace, "__all__", None)
    if names is None:
        names = [name for name in vars(type(namespace)) if not name.startswith("_")]
    return sorted(names)


def is_mirror_candidate(value: Any) -> bool:
    """A public callable whose call a user ports (exception and warning classes aside:
    they are raised, never called)."""
    if isinstance(value, types.ModuleType) or not callable(value):
        return False
    return not (isinstance(value, type) and issubclass(value, BaseException))


def public_callables() -> dict[str, Any]:
    """Every public callable of tj's mirrored namespaces, by dotted name under ``tj.``."""
    found = {}
    for path in NAMESPACES:
        namespace = tj_namespace(path)
        for name in public_names(namespace):
            value = getattr(namespace, name)
            if is_mirror_candidate(value):
                found[f"{path}.{name}".lstrip(".")] = value
    return found


def torch_twin_name(tj_name: str) -> str:
    path, _, name = tj_name.rpartition(".")
    return f"{NAMESPACES[path]}.{name}"


def pairs() -> list[Pair]:
    """Every tj callable with a torch twin: same dotted name, or :data:`RENAMED`."""
    found = []
    for tj_name, value in public_callables().items():
        twin = RENAMED.get(tj_name)
        torch_name = twin.torch_name if twin else torch_twin_name(tj_name)
        torch_object = resolve(torch_name)
        if torch_object is None or not callable(torch_object):
            continue
        found.append(Pair(tj_name, torch_name, value, torch_object, twin.leading if twin else 0))
    return found


def member_pairs() -> list[Pair]:
    """The methods of each paired class (defined on tj's class itself, public) with torch's
    method of the same name: ``optim.lr_scheduler.StepLR.step``, ``safe_open.get_tensor``.

    A property of tj's whose value is called where torch's is a method (``Parameter.size``)
    pairs through the value's class's ``__call__`` (:data:`CALLED_PROPERTIES`).
    """
    found = []
    for pair in pairs():
        if not (isinstance(pair.tj_object, type) and isinstance(pair.torch_object, type)):
            continue
        for name, member in vars(pair.tj_object).items():
            theirs = getattr(pair.torch_object, name, None)
            if name.startswith("_") or theirs is None or not callable(theirs):
                continue
            dotted = f"{pair.tj_name}.{name}"
            if isinstance(member, property):
                member = CALLED_PROPERTIES.get(dotted)
            elif isinstance(member, (classmethod, staticmethod)):
                member = member.__func__
            if callable(member) and not isinstance(theirs, type):
                found.append(Pair(dotted, f"{pair.torch_name}.{name}", member, theirs))
    return found


#: tj properties that torch code calls (torch's are methods): the callable their value is.
CALLED_PROPERTIES: dict[str, Any] = {}


def unplaced() -> list[str]:
    """Public callables neither paired nor in :data:`NO_TWIN`: a new one to place."""
    paired = {pair.tj_name for pair in pairs()}
    return sorted(set(public_callables()) - paired - set(NO_TWIN))


def unlisted_namespaces() -> list[str]:
    """tj's public submodules that have a torch namesake but are not in :data:`NAMESPACES`."""
    missing = []
    for path in [*NAMESPACES, *NOT_MIRRORING]:
        namespace = tj_namespace(path)
        for name in public_names(namespace):
            value = getattr(namespace, name, None)
            dotted = f"{path}.{name}".lstrip(".")
            inner = isinstance(value, types.ModuleType) or type(value).__name__.endswith("Backend")
            if inner and dotted not in NAMESPACES and dotted not in NOT_MIRRORING:
                missing.append(dotted)
    return sorted(missing)


# ---- torch's signatures ----------------------------------------------------------------

_OVERLOAD = re.compile(r"^ \* \((.*)\)$", re.MULTILINE)
_DOCUMENTED = re.compile(r"^\s*\w+\(([^()]*)\) ->")
_MISSING = re.compile(r'missing \d+ required positional arguments?: "([^"]+)"')


def torch_signature(function: Any) -> inspect.Signature:
    """torch's signature: ``inspect.signature``, or parsed from the overloads torch's
    argument parser lists when a ``torch._C`` builtin refuses a probe keyword (the first
    overload with the most parameters)."""
    try:
        return inspect.signature(function)
    except (TypeError, ValueError):
        pass
    documented = _DOCUMENTED.match(getattr(function, "__doc__", None) or "")
    if documented:  # a Tensor method: "pin_memory() -> Tensor"
        return _parse_overload(documented.group(1))
    try:
        function(__api_mirror_probe__=None)
    except TypeError as error:
        message = str(error)
    else:
        raise AssertionError(f"{function!r} took a probe keyword")
    overloads = _OVERLOAD.findall(message)
    if overloads:
        return max((_parse_overload(text) for text in overloads), key=lambda s: len(s.parameters))
    missing = _MISSING.search(message)
    if missing:
        names = missing.group(1).replace('"', "").split(", ")
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        return inspect.Signature([inspect.Parameter(name, kind) for name in names])
    raise ValueError(f"no signature for {function!r}: {message}")


def _parse_overload(text: str) -> inspect.Signature:
    parameters, kind = [], inspect.Parameter.POSITIONAL_OR_KEYWORD
    for item in filter(None, (part.strip() for part in text.split(","))):
        if item == "*":
            kind = inspect.Parameter.KEYWORD_ONLY
            continue
        if item.startswith("*"):  # view(*shape): takes any number positionally
            stars = len(item) - len(item.lstrip("*"))
            variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)[stars - 1]
            parameters.append(inspect.Parameter(item.lstrip("*"), variadic))
            kind = inspect.Parameter.KEYWORD_ONLY
            continue
        declaration, _, default_text = item.partition("=")
        name = declaration.split()[-1]
        default: Any = inspect.Parameter.empty
        if default_text:
            default = {"None": None, "False": False, "True": True}.get(
                default_text.strip(), _literal(default_text.strip())
            )
        parameters.append(inspect.Parameter(name, kind, default=default))
    return inspect.Signature(parameters)


def _literal(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        return text


def signature_parameters(signature: inspect.Signature) -> list[Any]:
    """The parameters, ``self`` aside."""
    return [p for p in signature.parameters.values() if p.name != "self"]


# ---- comparing signatures --------------------------------------------------------------

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@dataclasses.dataclass(frozen=True)
class Difference:
    """One way tj's signature refuses a torch spelling."""

    pair: str
    kind: str  # "missing", "position", "default"
    parameter: str
    detail: str

    def __str__(self) -> str:
        return f"{self.pair}: {self.kind} {self.parameter}: {self.detail}"


def same_default(torch_default: Any, tj_default: Any) -> bool:
    """Equal defaults (``0`` and ``0.0`` alike; ``False`` and ``0`` not)."""
    if torch_default is tj_default:
        return True
    if isinstance(torch_default, bool) or isinstance(tj_default, bool):
        return False
    try:
        return bool(torch_default == tj_default)
    except Exception:
        return False


def signature_differences(pair: Pair) -> list[Difference]:
    """Each torch parameter tj cannot take as torch's spelling does."""
    theirs = signature_parameters(torch_signature(pair.torch_object))
    ours = signature_parameters(inspect.signature(pair.tj_object))[pair.leading :]
    by_name = {p.name: p for p in ours}
    var_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ours)
    slots = [p for p in ours if p.kind in (*_POSITIONAL, inspect.Parameter.VAR_POSITIONAL)]
    found = []
    for index, parameter in enumerate(theirs):
        name = str(pair)
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        if parameter.name.startswith("_"):
            continue  # torch's private parameters (init_process_group's _ranks)
        mine = by_name.get(parameter.name)
        if parameter.kind is not inspect.Parameter.POSITIONAL_ONLY and (
            mine is None or mine.kind is inspect.Parameter.POSITIONAL_ONLY
        ):
            if not var_keyword:
                found.append(Difference(name, "missing", parameter.name, "no such keyword"))
                continue
        if parameter.kind in _POSITIONAL:
            at = _slot(slots, index)
            if at is None:
                found.append(
                    Difference(name, "position", parameter.name, f"no positional #{index}")
                )
            elif at.name != parameter.name:
                star = "*" if at.kind is inspect.Parameter.VAR_POSITIONAL else ""
                found.append(
                    Difference(
                        name, "position", parameter.name, f"positional #{index} is {star}{at.name}"
                    )
                )
        if mine is not None and parameter.default not in (inspect.Parameter.empty, ...):
            if mine.default is inspect.Parameter.empty:
                found.append(Difference(name, "default", parameter.name, "required in tj"))
            elif not same_default(parameter.default, mine.default):
                found.append(
                    Difference(
                        name,
                        "default",
                        parameter.name,
                        f"torch {parameter.default!r}, tj {mine.default!r}",
                    )
                )
    return found


# ---- silently ignored parameters -------------------------------------------------------


def _slot(slots: list[Any], index: int) -> Any:
    """tj's parameter that takes the positional argument at ``index``."""
    for position, slot in enumerate(slots):
        if slot.kind is inspect.Parameter.VAR_POSITIONAL or position == index:
            return slot if position <= index else None
    return None


def unread_parameters(function: Any) -> list[str]:
    """The parameters of a tj function (a class: its ``__init__``) its code never reads."""
    if isinstance(function, type):
        function = function.__init__
    function = inspect.unwrap(function)
    code = getattr(function, "__code__", None)
    if code is None:
        return []
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & inspect.CO_VARARGS) + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    names = set(code.co_varnames[:count]) - {"self", "cls"}
    read = set()
    for instruction in dis.get_instructions(code):
        if instruction.opname.startswith("LOAD_") and isinstance(instruction.argval, str):
            read.add(instruction.argval)
        elif instruction.opname.startswith("LOAD_FAST") and isinstance(instruction.argval, tuple):
            read.update(instruction.argval)  # LOAD_FAST_LOAD_FAST (3.13)
    if "locals" in code.co_names:
        return []
    return sorted(names - read - set(code.co_cellvars))


# ---- calls with torch's spellings -------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Value:
    """One argument value, made fresh for each side (``tj_make`` defaults to ``make``)."""

    label: str
    make: Callable[[], Any]
    tj_make: Callable[[], Any] | None = None

    def on(self, side: str) -> Any:
        return (self.tj_make or self.make)() if side == "tj" else self.make()


def same(label: str, value: Any) -> Value:
    """A value both sides take as it is (a number, a string, a torch.device)."""
    return Value(label, lambda: value)


@dataclasses.dataclass(frozen=True)
class Call:
    """One call in torch's spelling: ``label`` reads as the call's argument list."""

    label: str
    args: tuple[Value, ...] = ()
    kwargs: tuple[tuple[str, Value], ...] = ()
    #: torch's names of the positional arguments.
    positional: tuple[str, ...] = ()

    def arguments(self, side: str) -> tuple[list[Any], dict[str, Any]]:
        return [v.on(side) for v in self.args], {k: v.on(side) for k, v in self.kwargs}

    def names(self) -> set[str]:
        """torch's names of every argument given, positional or keyword."""
        return {name for name, _ in self.kwargs} | set(self.positional)


def invoke_plainly(side: str, function: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    return function(*args, **kwargs)


def normalize(value: Any) -> Any:
    """harness.normalize, through dicts too; torch's CPU named as tj names the host's CPU
    here (``cpu:0`` among simulated CPU devices: the proxy mode)."""
    if isinstance(value, dict):
        return {key: normalize(item) for key, item in value.items()}
    if isinstance(value, torch.device):
        value = gpu_proxy.torch_named_here(value)
    return harness.normalize(value)


@dataclasses.dataclass(frozen=True)
class Case:
    """How a pair is called.

    ``mode``: ``"side-by-side"`` runs torch's CPU build beside tj; ``"tj-only"`` calls tj
    alone (torch's side needs a GPU, a job, or answers for torch's build), where each call
    must succeed or raise the library's error; ``"bind-only"`` only binds the arguments
    (a call would change the test process for good: ``reason`` says how).
    """

    mode: str | Callable[[], str] = "side-by-side"
    reason: str = ""
    required: dict[str, Value] = dataclasses.field(default_factory=dict)
    values: dict[str, list[Value]] = dataclasses.field(default_factory=dict)
    invoke: Callable[[str, Any, list[Any], dict[str, Any]], Any] = invoke_plainly
    read: Callable[[Any], Any] = normalize
    #: For a method twin: the objects before torch's arguments (torch's ``self``; tj's
    #: model, or optimizer and model), as a list on each side.
    leading: Value | None = None

    def mode_now(self) -> str:
        """The mode, where it depends on the machine (asked when the call runs)."""
        return self.mode() if callable(self.mode) else self.mode

    def arguments(self, side: str, call: Call) -> tuple[list[Any], dict[str, Any]]:
        args, kwargs = call.arguments(side)
        return ([*self.leading.on(side), *args] if self.leading else args), kwargs


def calls(pair: Pair, case: Case) -> list[Call]:
    """The calls a porting user writes, generated from torch's signature."""
    parameters = [
        p
        for p in signature_parameters(torch_signature(pair.torch_object))
        if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        and not p.name.startswith("_")
    ]
    required = [p for p in parameters if p.default is inspect.Parameter.empty]
    missing = [p.name for p in required if p.name not in case.required]
    if missing:
        raise AssertionError(f"{pair}: Case.required has no value for {missing}")
    given = [case.required[p.name] for p in required]
    positional = [p for p in required if p.kind in _POSITIONAL]
    leading = tuple(case.required[p.name] for p in positional)
    by_keyword = tuple(
        (p.name, case.required[p.name]) for p in required if p.kind not in _POSITIONAL
    )
    leading_names = tuple(p.name for p in positional)
    found = [Call(_label(leading, by_keyword), leading, by_keyword, leading_names)]
    if any(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in required):
        keywords = tuple((p.name, v) for p, v in zip(required, given, strict=True)
                         if p.kind is not inspect.Parameter.POSITIONAL_ONLY)  # fmt: skip
        only = tuple(v for p, v in zip(required, given, strict=True)
                     if p.kind is inspect.Parameter.POSITIONAL_ONLY)  # fmt: skip
        only_names = tuple(p.name for p in required if p.kind is inspect.Parameter.POSITIONAL_ONLY)
        found.append(Call(_label(only, keywords), only, keywords, only_names))
    for index, parameter in enumerate(parameters):
        if parameter.default is inspect.Parameter.empty:
            found += _required_forms(case, required, parameter)
            continue
        options = [same(f"{parameter.default!r}", parameter.default)]
        if parameter.default is ...:
            options = []
        options += case.values.get(parameter.name, _generic_values(parameter))
        for option in options:
            if parameter.kind is not inspect.Parameter.POSITIONAL_ONLY:
                kwargs = (*by_keyword, (parameter.name, option))
                found.append(Call(_label(leading, kwargs), leading, kwargs, leading_names))
            if parameter.kind in _POSITIONAL and all(
                p.kind in _POSITIONAL for p in parameters[:index]
            ):
                before = [
                    case.required.get(p.name) if p.default is inspect.Parameter.empty
                    else same(repr(p.default), p.default)
                    for p in parameters[:index]
                ]  # fmt: skip
                args = (*before, option)
                if None not in args and parameter.default is not ...:
                    names = tuple(p.name for p in parameters[: index + 1])
                    found.append(Call(_label(args, by_keyword), args, by_keyword, names))
    unique: dict[str, Call] = {}
    for call in found:
        unique.setdefault(call.label, call)
    return list(unique.values())


def _required_forms(case: Case, required: list[Any], parameter: Any) -> list[Call]:
    """A required parameter at its other values (every device form for a device), the
    other required ones as given, positionally and by keyword where torch allows."""
    calls_ = []
    for option in case.values.get(parameter.name, _generic_values(parameter)):
        chosen = [option if p.name == parameter.name else case.required[p.name] for p in required]
        if all(p.kind in _POSITIONAL for p in required):
            args = tuple(chosen)
            names = tuple(p.name for p in required)
            calls_.append(Call(_label(args, ()), args, (), names))
        keywords = tuple(
            (p.name, value)
            for p, value in zip(required, chosen, strict=True)
            if p.kind is not inspect.Parameter.POSITIONAL_ONLY
        )
        if len(keywords) == len(required):
            calls_.append(Call(_label((), keywords), (), keywords))
    return calls_


def _label(args: tuple[Any, ...], kwargs: tuple[tuple[str, Value], ...]) -> str:
    return "(" + ", ".join([v.label for v in args] + [f"{k}={v.label}" for k, v in kwargs]) + ")"


#: Every form torch takes for a device argument.
#: Every form torch takes for a device argument, each with the annotation word that
#: admits it (a parameter annotated ``int | None`` gets the index forms only).
DEVICE_FORMS: list[tuple[str, Value]] = [
    ("None", same("None", None)),
    ("int", same("0", 0)),
    ("int", same("-1", -1)),
    ("str", same("'cuda'", "cuda")),
    ("str", same("'cuda:0'", "cuda:0")),
    ("device", Value("torch.device('cuda', 0)", lambda: torch.device("cuda", 0))),
    (
        "device",
        Value(
            "tj.device('cuda', 0)", lambda: torch.device("cuda", 0), lambda: tj.device("cuda", 0)
        ),
    ),
    ("str", same("'cpu'", "cpu")),
    ("device", Value("torch.device('cpu')", lambda: torch.device("cpu"))),
]


def _generic_values(parameter: inspect.Parameter) -> list[Value]:
    if "device" in parameter.name:
        return device_forms(parameter)
    if isinstance(parameter.default, bool):
        return [same(repr(not parameter.default), not parameter.default)]
    return []


def device_forms(parameter: inspect.Parameter) -> list[Value]:
    """The device forms torch's annotation of ``parameter`` admits (all without one)."""
    annotation = parameter.annotation
    text = "" if annotation is inspect.Parameter.empty else str(annotation)
    words = {word for word, _ in DEVICE_FORMS if word.lower() in text.lower()}
    if "Optional" in text:
        words.add("None")
    if not words or "Any" in text:
        return [form for _, form in DEVICE_FORMS]
    return [form for word, form in DEVICE_FORMS if word in words]


# ---- judging -----------------------------------------------------------------------------

#: torch's errors that say its CPU build has no CUDA or accelerator: no oracle for tj,
#: which answers for JAX's devices (any answer, or the library's error, is right).
_NO_ORACLE = re.compile(
    r"not compiled with CUDA|compiled without CUDA|_cuda_setDevice|no accelerator|"
    r"Cannot access accelerator|Found no NVIDIA driver|"
    r"has no attribute '_cuda_|'allocated_bytes\.all\.current'|"  # the CPU build's gaps
    # torch.cuda.device(None), documented as a no-op, compares None < 0 on the CPU build
    r"'<' not supported between instances of 'NoneType' and 'int'"
)

#: (tj name, torch parameter) -> the known-differences heading (``page#anchor``) that says
#: why tj refuses a value torch takes there (the refusal must name the parameter).
REFUSALS: dict[tuple[str, str], str] = {
    ("load", "weights_only"): "known-differences-checkpoints.md#tjload-only-ever-loads-weights",
    ("load", "pickle_module"): "known-differences-checkpoints.md#tjload-only-ever-loads-weights",
    ("load_state", "strict"): "known-differences-checkpoints.md#tjload_state-returns-the-model",
    ("load_state", "assign"): "known-differences-checkpoints.md#tjload_state-returns-the-model",
    ("Parameter", "requires_grad"): "known-differences.md#tjparameter-has-no-requires_grad",
}

#: (tj name, torch parameter) -> the heading saying why tj takes the parameter and has no
#: use for it (:func:`unread_parameters` finds it unread).
UNREAD_BY_DESIGN: dict[tuple[str, str], str] = {
    ("cuda.memory_summary", "abbreviated"): "known-differences.md#memory_summary-is-a-short-table",
    ("accelerator.current_accelerator", "check_available"): (
        "known-differences.md#current_acceleratorcheck_available-changes-nothing"
    ),
}

#: tj name -> the heading saying why its error is of another builtin class than torch's.
ERROR_CLASS_DIFFERENCES: dict[str, str] = {
    "distributed.destroy_process_group": (
        "known-differences-feeding-distributed.md#destroy_process_group-is-final"
    ),
}

#: (tj name, parameter) -> why tj takes a value the torch-side library refuses there.
ACCEPTS_MORE: dict[tuple[str, str], str] = {
    ("load_file", "device"): "a torch.device, which safetensors' load_file refuses "
    "(it takes a string or an index): tj takes every device form",
}

#: (tj name, torch parameter) -> why the signatures differ there, by design.
SIGNATURE_DIFFERENCES: dict[tuple[str, str], str] = {
    ("device", "index"): "torch's argument parser prints 'no index' as -1: "
    "torch.device('cuda').index is None, as tj's (the calls compare the two)",
    ("distributed.all_reduce", "op"): "tj's ReduceOp.SUM is the string 'sum'; torch's "
    "ReduceOp members are taken as well (the calls pass torch's default)",
}

#: Pairs neither compared by signature nor called here, and where they are checked.
UNCOMPARED: dict[str, str] = {
    "to_device": "Tensor.to takes *args and **kwargs: tests/parity/test_placement_fuzz.py "
    "draws every form torch's parser takes",
    "distributed.ReduceOp": "not constructed by ported code: its members are compared "
    "(test_reduce_op_has_torchs_members)",
}

#: Pairs whose findings wait on a request in /work/notes/apimirror-requests.md (files this
#: branch does not own): their tests are strict xfails, which turn red once fixed.
OPEN: dict[str, str] = {}


@dataclasses.dataclass(frozen=True)
class Finding:
    pair: str
    call: str
    what: str

    def __str__(self) -> str:
        return f"tj.{self.pair}{self.call}: {self.what}"


def run_call(pair: Pair, case: Case, call: Call) -> Finding | None:
    """Run one call both ways (as ``case.mode`` says) and judge it."""
    if case.mode_now() == "bind-only":
        args, kwargs = case.arguments("tj", call)
        try:
            inspect.signature(pair.tj_object).bind(*args, **kwargs)
        except TypeError as error:
            return Finding(pair.tj_name, call.label, f"cannot bind: {error}")
        return None
    tj_outcome = harness.run(
        lambda: case.read(case.invoke("tj", pair.tj_object, *case.arguments("tj", call)))
    )
    torch_outcome = None
    if case.mode_now() == "side-by-side":
        torch_outcome = harness.run(
            lambda: case.read(
                case.invoke("torch", pair.torch_object, *case.arguments("torch", call))
            )
        )
    what = judge(pair, call, torch_outcome, tj_outcome)
    return None if what is None else Finding(pair.tj_name, call.label, what)


def judge(
    pair: Pair, call: Call, torch_outcome: harness.Outcome | None, tj_outcome: harness.Outcome
) -> str | None:
    """What differs, or None: see the module's docstring."""
    error = tj_outcome.error
    if error is not None and not isinstance(error, tj.Torch2JaxDeviceError):
        return f"raised {type(error).__name__} (not the library's): {error}"
    no_cuda = bool(re.search(r"cuda|0\b", call.label)) and isinstance(
        error, tj.DeviceUnavailableError
    )
    if torch_outcome is None or (
        torch_outcome.error is not None and _NO_ORACLE.search(str(torch_outcome.error))
    ):
        if error is None or no_cuda or _documented_refusal(pair, call, error):
            return None
        named = sorted(name for name in call.names() if name in str(error))
        if named and torch_outcome is None:
            return (
                f"refused {named} with no row in api_mirror.REFUSALS (a known-differences "
                f"heading): {type(error).__name__}: {error}"
            )
        return None
    if torch_outcome.error is None:
        if error is None:
            mine, theirs = tj_outcome.value, torch_outcome.value
            if not _close(mine, theirs):
                return f"torch returned {theirs!r}, tj {mine!r}"
            return None
        if no_cuda:
            return None
        if _documented_refusal(pair, call, error):
            return None
        return f"torch returned {torch_outcome.value!r}; tj raised {type(error).__name__}: {error}"
    if error is None:
        if any((pair.tj_name, name) in ACCEPTS_MORE for name in call.names()):
            return None
        return (
            f"torch raised {type(torch_outcome.error).__name__}: {torch_outcome.error}; "
            f"tj returned {tj_outcome.value!r}"
        )
    expected = harness.expected_error_class(torch_outcome.error)
    if not isinstance(error, expected) and pair.tj_name not in ERROR_CLASS_DIFFERENCES:
        return (
            f"torch raised {type(torch_outcome.error).__name__}: {torch_outcome.error}; tj raised "
            f"{type(error).__name__} (not a {expected.__name__}): {error}"
        )
    return None


def _documented_refusal(pair: Pair, call: Call, error: BaseException) -> bool:
    """tj refuses an argument by name, and a known-differences heading says why."""
    refused = [name for name in call.names() if (pair.tj_name, name) in REFUSALS]
    return any(name in str(error) for name in refused)


def _close(mine: Any, theirs: Any) -> bool:
    if isinstance(mine, dict) and isinstance(theirs, dict):
        return mine.keys() == theirs.keys() and all(_close(mine[k], theirs[k]) for k in mine)
    if isinstance(mine, (list, tuple)) and isinstance(theirs, (list, tuple)):
        return len(mine) == len(theirs) and all(map(_close, mine, theirs))
    if isinstance(mine, float) or isinstance(theirs, float):
        if isinstance(mine, bool) or isinstance(theirs, bool):
            return mine is theirs
        try:
            return bool(np.isclose(mine, theirs, rtol=1e-6, atol=0))
        except TypeError:
            return False
    return bool(mine == theirs)


def findings(pair: Pair, case: Case) -> Iterator[Finding]:
    """Each generated call's finding. A keyword taken and ignored shows as a different
    answer where torch's changes with it (side by side), or as a parameter never read
    (:func:`unread_parameters`)."""
    for call in calls(pair, case):
        found = run_call(pair, case, call)
        if found is not None:
            yield found


def _called_properties() -> dict[str, Any]:
    from torch2jax_device._src.location import ParameterSize

    return {"Parameter.size": ParameterSize.__call__}


CALLED_PROPERTIES.update(_called_properties())
