"""The junk-input oracle: every public callable of tj, called with bad input (not a test module).

The brief's rule: bad input gets a clear error from the library's one hierarchy that
names the value and the fix; no other error escapes, nothing hangs, nothing is
half-written. This module generates the cases instead of listing them:

* ``targets()`` walks the public surface (``tj.__all__`` and every public namespace
  below it: ``tj.cuda``, ``tj.accelerator``, ``tj.backends``, ``tj.distributed``,
  ``tj.optim`` with ``lr_scheduler``, ``tj.porting``'s modules): functions, classes'
  constructors, their own public methods, item access and settable properties, and the
  methods of the objects standing in for torch modules (``tj.backends.cuda``). A new
  public name is walked without editing anything; ``EXCLUDED`` names what is not, and why.
* ``JUNK`` is the table of bad values, ``plausible()`` the good value for a parameter
  (from its name, then its annotation), ``Sandbox`` the files and models they are made of.
* ``judge()`` makes one call with one parameter junk and the others plausible, and says
  what is wrong with the outcome: a raw exception (not a ``tj.Torch2JaxDeviceError``), an
  error that names neither the value nor its type, or no fix, a call that outlives its
  deadline, global state changed by a refused call, a file left half-written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import io
import math
import os
import pkgutil
import re
import threading
import types
import warnings
import zlib
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np

import torch2jax_device as tj
from tests.support.deadlines import deadline

PACKAGE = "torch2jax_device"

#: Public names the walk does not call, each with its reason. A name listed here that
#: no longer exists fails ``test_exclusions_name_public_callables``.
EXCLUDED: dict[str, str] = {
    "tj.distributed.init_process_group": (
        "starts jax.distributed (a rendezvous that waits on the network) with plausible "
        "arguments; its refusals are tests/unit/test_distributed*.py's"
    ),
    "tj.distributed.barrier": "waits on the other processes of a job",
    "tj.distributed.destroy_process_group": "takes no input; ends the job's JAX client",
    "tj.TensorSlice": "constructed by safe_open.get_slice from its reader, never by users",
    "tj.DeviceMap": "constructed by DeviceMap.plan / from_shapes, never by users",
    "tj.Parameter.tree_flatten_with_keys": "JAX's pytree protocol, called by JAX",
    "tj.Parameter.tree_unflatten": "JAX's pytree protocol, called by JAX with its own leaves",
    "tj.optim.lr_scheduler.LRScheduler": (
        "the schedulers' abstract base: constructing it steps its rule, which raises "
        "NotImplementedError as torch's does; each concrete scheduler is walked"
    ),
    "tj.optim.lr_scheduler.LRScheduler.": (
        "the schedulers' abstract base: its rule raises NotImplementedError as torch's "
        "does; every method is walked on each concrete scheduler"
    ),
    "tj.optim.lr_scheduler.*.lr_at": (
        "a scheduler's rule, the override point step() and as_schedule() call with the "
        "scheduler's own epoch (a traced array under jit, so it takes any array-like)"
    ),
    "tj.optim.lr_scheduler.*.next_lr": (
        "a scheduler's rule, the override point step() calls with the optimizer's own rate"
    ),
    "tj.porting.scanner.SourceFile.": (
        "the scanner's helpers over the ast nodes of the file's own tree (the file itself "
        "is walked: SourceFile, read_python, scan_source, apply_edits)"
    ),
}


def excluded(path: str) -> str | None:
    """Why ``path`` is not walked (a key ending in "." covers a class's methods)."""
    for key, reason in EXCLUDED.items():
        if path == key or (key.endswith(".") and path.startswith(key)):
            return reason
        if "*" in key and re.fullmatch(re.escape(key).replace(r"\*", r"\w+"), path):
            return reason
    return None


#: Records: classes that hold what they are given (dataclasses and named tuples with no
#: constructor of their own), made by the library and read by users.
def _is_record(cls: type) -> bool:
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return True
    return dataclasses.is_dataclass(cls) and "__init__" not in _own_code(cls)


def _own_code(cls: type) -> set[str]:
    """The names ``cls`` defines in its own body (not dataclass-generated)."""
    names = set()
    for name, value in vars(cls).items():
        function = getattr(value, "__func__", value)
        code = getattr(function, "__code__", None)
        if code is None or "<string>" not in code.co_filename:
            names.add(name)
    return names


# ----------------------------------------------------------------------------- the walk


@dataclasses.dataclass(frozen=True)
class Target:
    """One public callable: how to reach it, and its parameters."""

    path: str
    #: The function to call, given a sandbox (a bound method of a fresh receiver, or a
    #: setter taking one value).
    bind: Callable[[Sandbox], Callable[..., Any]]
    parameters: tuple[inspect.Parameter, ...]


def _public_modules() -> Iterator[tuple[str, types.ModuleType]]:
    yield "tj", tj
    seen = {id(tj)}
    queue: list[tuple[str, types.ModuleType]] = [("tj", tj)]
    while queue:
        prefix, module = queue.pop(0)
        for name in _public_names(module):
            value = getattr(module, name)
            if (
                isinstance(value, types.ModuleType)
                and value.__name__.startswith(PACKAGE)
                and id(value) not in seen
            ):
                seen.add(id(value))
                queue.append((f"{prefix}.{name}", value))
                yield f"{prefix}.{name}", value


def _public_names(module: types.ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    # A package without __all__ (tj.porting): its public submodules.
    found = []
    for info in pkgutil.iter_modules(getattr(module, "__path__", [])):
        if not info.name.startswith("_"):
            importlib.import_module(f"{module.__name__}.{info.name}")
            found.append(info.name)
    return found


def _parameters(function: Callable[..., Any]) -> tuple[inspect.Parameter, ...]:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return ()
    return tuple(p for p in signature.parameters.values() if p.name not in ("self", "cls"))


def _is_library_object(value: Any) -> bool:
    return type(value).__module__.startswith(PACKAGE)


def targets() -> list[Target]:
    """Every public callable, each once (``tj.device`` is ``tj.Device``)."""
    found: dict[str, Target] = {}
    seen: set[int] = set()
    for prefix, module in _public_modules():
        for name in _public_names(module):
            value = getattr(module, name)
            path = f"{prefix}.{name}"
            if isinstance(value, types.ModuleType) or id(value) in seen:
                continue
            seen.add(id(value))
            if inspect.isclass(value):
                if issubclass(value, BaseException) or _is_record(value):
                    continue
                _add(found, path, lambda box, cls=value: cls, value)
                _add_members(found, path, value, lambda box, c=value, p=path: box.instance(c, p))
            elif inspect.isroutine(value):
                _add(found, path, lambda box, f=value: f, value)
            elif _is_library_object(value):  # tj.backends.cuda
                _add_members(found, path, type(value), lambda box, v=value: v)
    return [target for path, target in found.items() if excluded(path) is None]


def _add(found: dict[str, Target], path: str, bind: Any, function: Any) -> None:
    found.setdefault(path, Target(path, bind, _parameters(function)))


#: The protocol methods users call through syntax, walked where the library defines them.
_SYNTAX = ("__getitem__", "__setitem__", "__call__")


def _add_members(found: dict[str, Target], path: str, cls: type, receiver: Any) -> None:
    for klass in cls.__mro__:
        if not klass.__module__.startswith(PACKAGE):
            continue
        for name, raw in vars(klass).items():
            if name.startswith("_") and name not in _SYNTAX:
                continue
            member = f"{path}.{name}"
            if isinstance(raw, property):
                if raw.fset is not None:
                    value = inspect.Parameter("value", inspect.Parameter.POSITIONAL_ONLY)
                    found.setdefault(
                        f"{member}=", Target(f"{member}=", _setter(receiver, name), (value,))
                    )
                else:
                    getter = _callable_property(receiver, name)
                    if getter is not None:
                        _add(found, f"{member}()", getter[0], getter[1])
            elif isinstance(raw, (staticmethod, classmethod)) or inspect.isfunction(raw):
                function = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
                _add(
                    found,
                    member,
                    lambda box, r=receiver, n=name: getattr(r(box), n),
                    function,
                )
            elif _is_library_object(raw) and not inspect.isclass(raw):  # backends.cuda.matmul
                _add_members(found, member, type(raw), lambda box, r=raw: r)


def _setter(receiver: Any, name: str) -> Any:
    def bind(box: Sandbox) -> Callable[[Any], None]:
        instance = receiver(box)
        return lambda value: setattr(instance, name, value)

    return bind


def _callable_property(receiver: Any, name: str) -> tuple[Any, Any] | None:
    """A property whose value is itself called (``Parameter.size``): walked as a method."""
    try:
        value = getattr(receiver(Sandbox.shared()), name)
        Sandbox.shared().close()
    except Exception:
        return None
    if not (callable(value) and _is_library_object(value)):
        return None
    return (lambda box: getattr(receiver(box), name)), type(value).__call__


# ----------------------------------------------------------------------------- the values


class _Closed(io.StringIO):
    pass


def _closed_file() -> Any:
    handle = open(os.devnull)
    handle.close()
    return handle


def _junk_table() -> dict[str, Callable[[Sandbox], Any]]:
    """Kind -> a junk value (made fresh per call: a call may mutate a container)."""
    import torch

    return {
        "object": lambda box: object(),
        "nonsense-str": lambda box: "nonsense",
        "bytes": lambda box: b"\xff\x00junk",
        "minus-one": lambda box: -1,
        "zero": lambda box: 0,
        "huge-int": lambda box: 2**70,
        "nan": lambda box: math.nan,
        "inf": lambda box: -math.inf,
        "complex": lambda box: 1 + 2j,
        "none": lambda box: None,
        "empty-list": lambda box: [],
        "empty-dict": lambda box: {},
        "nested": lambda box: {"a": [(), {"b": [object()]}]},
        "lambda": lambda box: lambda *args: None,
        "torch-tensor": lambda box: torch.ones(2),
        "torch-dtype": lambda box: torch.float16,
        "torch-device": lambda box: torch.device("meta"),
        "str-array": lambda box: np.array(["a", "b"]),
        "object-array": lambda box: np.array([object(), None], dtype=object),
        "closed-file": lambda box: _closed_file(),
        "missing-path": lambda box: box.root / "no-such-file.safetensors",
        "directory": lambda box: box.root,
    }


JUNK = _junk_table()

#: The junk kinds a parameter may legitimately accept (the call then succeeds, which
#: the oracle allows anyway); listed only to explain why a call succeeded.
_ANY = inspect.Parameter.empty


class Sandbox:
    """A temporary folder with the files, models and optimizers plausible values use."""

    _shared: Sandbox | None = None

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = root / "files"
        self.files.mkdir(parents=True, exist_ok=True)
        self.weights = self.files / "w.safetensors"
        tj.save_file({"w": np.ones((2, 3), np.float32)}, self.weights)
        self.checkpoint = self.files / "w.pt"
        import torch

        torch.save({"w": torch.ones(2, 3)}, self.checkpoint)
        self.opened: list[Any] = []

    @classmethod
    def shared(cls) -> Sandbox:
        """One sandbox for walking (reading property values), made once."""
        if cls._shared is None:
            import tempfile

            cls._shared = Sandbox(Path(tempfile.mkdtemp(prefix="junkfuzz-")))
        return cls._shared

    def close(self) -> None:
        for handle in self.opened:
            with contextlib.suppress(Exception):
                handle.close()
        self.opened.clear()

    # The objects methods are called on, and that parameters named for them get.

    def model(self) -> Any:
        from flax import nnx

        return nnx.Linear(2, 2, rngs=nnx.Rngs(0))

    def optimizer(self, model: Any = None) -> Any:
        from flax import nnx

        model = self.model() if model is None else model
        return nnx.Optimizer(model, tj.optim.SGD(lr=0.1), wrt=nnx.Param)

    def instance(self, cls: type, path: str) -> Any:
        """A plausible instance of a public class."""
        special: dict[str, Callable[[], Any]] = {
            "safe_open": lambda: self._opened(tj.safe_open(self.weights)),
            "TensorSlice": lambda: self._opened(tj.safe_open(self.weights)).get_slice("w"),
            "DeviceMap": lambda: tj.DeviceMap.plan(self.weights),
            "ParamGroup": lambda: tj.optim.param_groups(self.optimizer())[0],
            "Parameter": lambda: tj.Parameter(jax.numpy.ones((2, 3))),
        }
        if cls.__name__ in special:
            return special[cls.__name__]()
        arguments, keywords = self.arguments(cls, path, skip=None)
        return cls(*arguments, **keywords)

    def _opened(self, handle: Any) -> Any:
        self.opened.append(handle)
        return handle

    def arguments(
        self, function: Any, path: str, skip: str | None
    ) -> tuple[list[Any], dict[str, Any]]:
        """Plausible values for ``function``'s required parameters (``skip`` aside)."""
        positional: list[Any] = []
        keywords: dict[str, Any] = {}
        for parameter in _parameters(function):
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                continue
            required = parameter.default is parameter.empty or bool(
                {parameter.name, f"{path}:{parameter.name}"} & _ALWAYS
            )
            if parameter.name == skip or not required:
                if parameter.kind is parameter.POSITIONAL_ONLY and parameter.name != skip:
                    break  # a later positional-only one cannot be given without it
                continue
            value = self.plausible(path, parameter)
            if parameter.kind is parameter.KEYWORD_ONLY:
                keywords[parameter.name] = value
            elif parameter.kind is parameter.POSITIONAL_ONLY:
                positional.append(value)
            else:
                keywords[parameter.name] = value
        return positional, keywords

    def plausible(self, path: str, parameter: inspect.Parameter) -> Any:
        """The good value of a parameter: by target and name, by name, by annotation."""
        name = parameter.name
        for key in (f"{path}:{name}", name):
            if key in _BY_NAME:
                return _BY_NAME[key](self)
        annotation = str(parameter.annotation)
        for pattern, make in _BY_ANNOTATION:
            if re.search(pattern, annotation):
                return make(self)
        raise LookupError(
            f"no plausible value for {path}'s parameter {name!r} ({annotation}): add a row "
            "to tests/support/junk_inputs.py's _BY_NAME"
        )


def _scheduler(box: Sandbox) -> Any:
    return tj.optim.lr_scheduler.StepLR(box.optimizer(), step_size=1)


#: Parameters that get a plausible value although they have a default (their default
#: would make the call do nothing to judge).
_ALWAYS = frozenset({"obj", "tj.optim.lr_scheduler.OneCycleLR:total_steps"})

#: Name (or "target:name") -> its plausible value.
_BY_NAME: dict[str, Callable[[Sandbox], Any]] = {
    "device": lambda box: "cpu",
    "device_id": lambda box: "cpu",
    "spec": lambda box: "cpu",
    "type": lambda box: "cpu",
    "device_type": lambda box: "cpu",
    "map_location": lambda box: "cpu",
    "index": lambda box: 0,
    "obj": lambda box: np.ones(2, np.float32),
    "tree": lambda box: np.ones(2, np.float32),
    "value": lambda box: np.ones(2, np.float32),
    "array": lambda box: np.ones(2, np.float32),
    "tensor": lambda box: np.ones(2, np.float32),
    "local_batch": lambda box: np.ones(1, np.float32),
    "leaf": lambda box: np.float32(0.1),
    "data": lambda box: jax.numpy.ones((2, 3)),
    "tensors": lambda box: {"w": np.ones((2, 3), np.float32)},
    "tj.DeviceMap.plan:tensors": lambda box: box.weights,
    "path": lambda box: box.weights,
    "f": lambda box: box.checkpoint,
    "model": lambda box: box.model(),
    "optimizer": lambda box: box.optimizer(),
    "saved": lambda box: _saved_optimizer(box),
    "source": lambda box: tj.state_dict(box.model()),
    "tj.porting.scanner.scan_source:source": lambda box: "import torch\nx = torch.ones(2).cuda()\n",
    "tj.porting.scanner.apply_edits:source": lambda box: "x = 1\n",
    "tj.porting.scanner.SourceFile:source": lambda box: "x = 1\n",
    "tj.porting.scanner.SourceFile:path": lambda box: "a.py",
    "sources": lambda box: {"a.py": "import torch\n"},
    "files": lambda box: [],
    "findings": lambda box: [],
    "section": lambda box: tj.porting.catalog.SECTIONS[0],
    "idiom_id": lambda box: tj.porting.catalog.CATALOG[0].id,
    "state_dict": lambda box: _scheduler(box).state_dict(),
    "mesh": lambda box: jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",)),
    "mesh_shape": lambda box: (1,),
    "loader": lambda box: [np.ones(2, np.float32)],
    "iterable": lambda box: [np.ones(2, np.float32)],
    "seed": lambda box: 0,
    "fraction": lambda box: 0.5,
    "enabled": lambda box: False,
    "allowed": lambda box: False,
    "lr_lambda": lambda box: lambda epoch: 1.0,
    "T_max": lambda box: 10,
    "step_size": lambda box: 1,
    "gamma": lambda box: 0.5,
    "milestones": lambda box: [1],
    "max_lr": lambda box: 0.1,
    "total_steps": lambda box: 10,
    "metrics": lambda box: 1.0,
    "epoch": lambda box: 1,
    "base_lr": lambda box: 0.1,
    "lr": lambda box: 0.1,
    "group": lambda box: 0,
    "name": lambda box: "w",
    "names": lambda box: ["w"],
    "shape": lambda box: (2, 3),
    "dtype": lambda box: np.dtype(np.float32),
    "key": lambda box: "lr",
    "call": lambda box: _difference_call(),
    "abbreviated": lambda box: False,
}

#: Annotation pattern -> its plausible value, for parameters no name covers.
_BY_ANNOTATION: list[tuple[str, Callable[[Sandbox], Any]]] = [
    (r"DeviceLike", lambda box: "cpu"),
    (r"PathLike", lambda box: box.weights),
    (r"^'?bool", lambda box: False),
    (r"^'?int", lambda box: 1),
    (r"^'?float", lambda box: 0.5),
    (r"^'?str", lambda box: "cpu"),
    (r"Mapping", lambda box: {}),
]


def _saved_optimizer(box: Sandbox) -> Any:
    model = box.model()
    return tj.optim.state_dict(box.optimizer(model), model)


def _difference_call() -> Any:
    from torch2jax_device.porting import known_differences as kd

    return kd.Call(kd.Leaf("numpy", "contiguous", "float32", (1.0,), (1,)), "cpu", None)


# ----------------------------------------------------------------------------- the oracle

#: What a message must contain to give a fix: "Fix:", or an imperative (a verb opening
#: a clause: after a sentence, a colon, a semicolon, a comma, a dash or "or"), or the
#: requirement stated ("must be ...", "expects ...", "give ...").
_FIX = re.compile(
    r"\bFix\b|\b(?:must|should) (?:be|not|have|name|hold|return|define)\b|\bneeds?\b|"
    r"\bit has\b|[\w)\]'], not (?:of )?(?:an? )?\S|\bexpect(?:s|ed)\b|\baccepts?\b|"
    r"\btakes?\b[^.;]*\bnot\b|\bone of\b|\bare valid\b|\bonly\b[^.;]*\bhave\b|"
    r"\b(?:use|pass|give|write|call|install|run|drop|keep)\b|"
    r"(?:^|[.;:,(\u2014-]\s*|\bor\s+|\bthen\s+)"
    r"(?:set|choose|remove|make|load|save|add|check|open|start|put|cast|convert|replace|"
    r"rename|read|name|move|wrap|unset|select|create|restart|list|split|send|upgrade|see|"
    r"try|build|enter|store|leave|reload|let|port|resume|ask|reduce|raise|lower|free|"
    r"delete|close|declare|apply|import|spell|map|step|construct|seed|copy|plan|encode)\b",
    re.IGNORECASE | re.MULTILINE,
)


@dataclasses.dataclass(frozen=True)
class Case:
    """One call: ``target`` with ``parameter`` given the ``kind`` of junk."""

    target: Target
    parameter: inspect.Parameter
    kind: str

    @property
    def label(self) -> str:
        return f"{self.target.path}({self.parameter.name}=<{self.kind}>)"


def cases(target: Target, kinds: list[str] | None = None) -> list[Case]:
    """Each parameter of ``target`` with each junk kind (``kinds`` to narrow them)."""
    kinds = list(JUNK) if kinds is None else kinds
    return [Case(target, parameter, kind) for parameter in target.parameters for kind in kinds]


def _leaves(value: Any, depth: int = 0) -> Iterator[Any]:
    """``value`` and what it holds (keys and items), a few levels down."""
    yield value
    if depth > 3 or isinstance(value, (str, bytes)):
        return
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(key, depth + 1)
            yield from _leaves(item, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaves(item, depth + 1)


def _names_value(message: str, value: Any, parameter: str) -> bool:
    """Whether ``message`` names ``value``: its repr or str (or a leaf's, for a
    container), its type's name, its dtype (an array), or the argument itself written
    ``name=`` (where the argument is refused whatever its value)."""
    if re.search(rf"\b{re.escape(parameter)}=", message):
        return True
    if isinstance(value, (list, dict)) and not value:  # an empty container, told by its count
        if parameter in message or re.search(r"\b(?:empty|got 0|no)\b", message):
            return True
    for leaf in _leaves(value):
        texts = {repr(leaf)[:24], str(leaf)[:24]}
        if isinstance(leaf, Path):
            texts.add(leaf.name)
        if isinstance(getattr(leaf, "name", None), str):  # a closed file
            texts.add(leaf.name)
        if isinstance(leaf, np.ndarray):
            texts |= {str(leaf.dtype), leaf.dtype.name}
        if any(text and text in message for text in texts):
            return True
        kind = type(leaf)
        names = {kind.__name__, kind.__qualname__, f"{kind.__module__}.{kind.__qualname__}"}
        if callable(leaf) and not isinstance(leaf, type):
            names |= {"function", "callable", "returned"}
        if any(re.search(rf"\b{re.escape(name)}\b", message) for name in names):
            return True
    return False


def _allowed(case: Case) -> bool:
    """Whether the junk is a value the parameter takes (``None`` where it is optional):
    then an error may be about something else (no CUDA device here), not the value."""
    parameter = case.parameter
    return case.kind == "none" and (
        parameter.default is None or "None" in str(parameter.annotation)
    )


#: Library errors that refuse the machine, not the value: a well-formed device that does
#: not exist here (``tj.cuda.set_device(0)`` without a GPU) names the platform it lacks.
_ENVIRONMENT_ERRORS = (tj.DeviceUnavailableError,)


def _call(target: Target, box: Sandbox, parameter: inspect.Parameter | None, value: Any) -> Any:
    """``target`` called with plausible arguments, ``parameter`` (if any) given ``value``."""
    function = target.bind(box)
    skip = None if parameter is None else parameter.name
    positional, keywords = box.arguments(function, target.path, skip=skip)
    if parameter is None:
        pass
    elif parameter.kind is parameter.VAR_KEYWORD:
        keywords["nonsense_keyword"] = value
    elif parameter.kind in (parameter.POSITIONAL_ONLY, parameter.VAR_POSITIONAL):
        positional.append(value)
    else:
        keywords[parameter.name] = value
    result = function(*positional, **keywords)
    if result is not value:  # the junk handed back (a leaf left as it is) is not run
        _consume(result)
    return result


def _in_thread(
    call: Callable[[], Any], name: str, seconds: float, cwd: Path
) -> dict[str, Any] | None:
    """Run ``call`` in a thread of its own (its default device and strict placement are
    that thread's, and die with it) and in the folder ``cwd`` (a relative path such as
    ``"nonsense"`` lands there): ``{"result": ...}`` or ``{"error": ...}``, or ``None``
    if it is still running after ``deadline(seconds)``."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except BaseException as error:
            outcome["error"] = error

    worker = threading.Thread(target=run, name=name, daemon=True)
    with contextlib.chdir(cwd), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a warning is no refusal: the same in every tier
        worker.start()
        worker.join(deadline(seconds))
    return None if worker.is_alive() else outcome


_BASELINES: dict[str, str | None] = {}


def _baseline(target: Target, box: Sandbox, seconds: float) -> str | None:
    """The library error ``target`` raises with every argument plausible (no CUDA device
    here, no process group), as ``Class: message``; ``None`` when it raises none."""
    if target.path not in _BASELINES:
        before = _global_state()
        try:
            outcome = _in_thread(
                lambda: _call(target, box, None, None), target.path, seconds, box.root
            )
        finally:
            _restore(before)
            box.close()
        error = (outcome or {}).get("error")
        _BASELINES[target.path] = (
            _masked(error) if isinstance(error, tj.Torch2JaxDeviceError) else None
        )
    return _BASELINES[target.path]


def _masked(error: BaseException) -> str:
    return f"{type(error).__name__}: " + re.sub(r"0x[0-9a-f]+|/tmp/\S+", "_", str(error))


def judge(case: Case, box: Sandbox, seconds: float = 60) -> str | None:
    """Make ``case``'s call; ``None`` if its outcome keeps the rule, else what broke it.

    A library error that the call raises with every argument plausible too (no CUDA
    device on this machine, no process group) refuses the environment before the value
    is read: it keeps the rule (a GPU or multi-process run judges the value)."""
    target, parameter = case.target, case.parameter
    environment = _baseline(target, box, seconds)
    value = JUNK[case.kind](box)
    before = _global_state()
    files_before = _files(box.root)
    try:
        outcome = _in_thread(
            lambda: _call(target, box, parameter, value), case.label, seconds, box.root
        )
        if outcome is None:
            return f"{case.label}: still running after {deadline(seconds):.0f} s (a hang)"
        error = outcome.get("error")
        after = _global_state()
        if error is None:
            return _half_written(case, box, files_before)
        if not isinstance(error, tj.Torch2JaxDeviceError):
            return f"{case.label}: raw {type(error).__name__}: {_short(error)}"
        message = str(error)
        if (environment is not None and _masked(error) == environment) or isinstance(
            error, _ENVIRONMENT_ERRORS
        ):
            named = True  # the environment's refusal, whatever the value
        elif parameter.kind is parameter.VAR_KEYWORD:
            named = "nonsense_keyword" in message
        else:
            named = _allowed(case) or _names_value(message, value, parameter.name)
        if not named:
            return (
                f"{case.label}: {type(error).__name__} names neither the value nor its "
                f"type: {_short(error)}"
            )
        if not _FIX.search(message):
            return f"{case.label}: {type(error).__name__} gives no fix: {_short(error)}"
        if after != before:
            keys = before.keys() | after.keys()
            changed = sorted(key for key in keys if before.get(key) != after.get(key))
            return f"{case.label}: refused, but changed {', '.join(changed)}"
        leftovers = _files(box.root) - files_before
        if leftovers:
            return f"{case.label}: refused, but left {sorted(leftovers)}"
        return None
    finally:
        _restore(before)
        box.close()
        for name in _files(box.root) - files_before:  # the next call sees the same sandbox
            (box.root / name).unlink()


def _consume(result: Any) -> None:
    """Run what the call deferred: two items of a generator, a scope's (empty) body."""
    deferred = isinstance(result, Iterator) and not _is_library_object(result)
    if deferred or isinstance(result, Generator):  # a library's generator too
        for _, _item in zip(range(2), result, strict=False):
            pass
    elif (
        hasattr(result, "__exit__")
        and hasattr(result, "__enter__")
        and not isinstance(result, type)
        and (_is_library_object(result) or type(result).__module__ == "contextlib")
    ):  # the library's scopes (tj.device, track_arrays), not JAX's (a Mesh)
        with result:
            pass


def _short(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _files(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*") if path.is_file()}


def _half_written(case: Case, box: Sandbox, before: set[str]) -> str | None:
    """A successful call's new files must be whole: each checkpoint reads back."""
    for name in sorted(_files(box.root) - before):
        path = box.root / name
        if name.endswith(".safetensors") or path.read_bytes()[8:10] == b'{"':
            try:
                tj.load_file(path)
            except Exception as error:
                return f"{case.label}: succeeded, but wrote {name} that does not read back: {error}"
        elif re.search(r"\.(tmp|partial|part)$|\.tmp", name):
            return f"{case.label}: succeeded, but left the temporary file {name}"
    return None


_CONFIG = (
    "jax_default_device",
    "jax_default_matmul_precision",
    "jax_enable_x64",
    "jax_platforms",
    "jax_transfer_guard",
    "jax_transfer_guard_device_to_device",
)


def _global_state() -> dict[str, Any]:
    """The process-wide state a call could change: JAX's options and the environment
    (per-thread state, the default device and strict placement, dies with the call's
    thread)."""
    state: dict[str, Any] = {f"jax.config.{name}": getattr(jax.config, name) for name in _CONFIG}
    state.update({f"os.environ[{k!r}]": v for k, v in os.environ.items()})
    from torch2jax_device import distributed

    state["tj.distributed.is_initialized()"] = distributed.is_initialized()
    return state


def _restore(before: dict[str, Any]) -> None:
    now = _global_state()
    for name in _CONFIG:
        key = f"jax.config.{name}"
        if now[key] != before[key]:
            jax.config.update(name, before[key])
    for key in now.keys() - before.keys():
        if key.startswith("os.environ"):
            os.environ.pop(key[len("os.environ['") : -2], None)
    for key, value in before.items():
        if key.startswith("os.environ") and now.get(key) != value:
            os.environ[key[len("os.environ['") : -2]] = value


# ----------------------------------------------------------------------------- the sweep

#: ``TORCH2JAX_DEVICE_JUNK_KINDS=all`` gives every parameter every kind of junk in the
#: in-process tier too; otherwise each parameter gets ``FAST_KINDS`` kinds, a different
#: pair per parameter (so the pairs together cover the table).
KINDS_ENV = "TORCH2JAX_DEVICE_JUNK_KINDS"
FAST_KINDS = 2


def kinds_for(target: Target, parameter: inspect.Parameter, every: bool) -> list[str]:
    """The junk kinds ``parameter`` gets: all of them, or a pair chosen by its name."""
    names = list(JUNK)
    if every:
        return names
    start = zlib.crc32(f"{target.path}:{parameter.name}".encode()) % len(names)
    return [names[(start + step) % len(names)] for step in range(FAST_KINDS)]


def sweep(target: Target, box: Sandbox, every: bool) -> tuple[int, list[tuple[str, str]]]:
    """Every case of ``target``: the number of calls, and (parameter, finding) pairs."""
    calls, findings = 0, []
    for parameter in target.parameters:
        for kind in kinds_for(target, parameter, every):
            calls += 1
            finding = judge(Case(target, parameter, kind), box)
            if finding is not None:
                findings.append((parameter.name, finding))
    return calls, findings


def main() -> None:
    """``python -m tests.support.junk_inputs``: the whole sweep, every kind of junk on
    every parameter, one JSON line per finding and a closing count."""
    import json
    import tempfile

    box = Sandbox(Path(tempfile.mkdtemp(prefix="junkfuzz-")))
    total = 0
    walked = targets()
    for target in walked:
        calls, findings = sweep(target, box, every=True)
        total += calls
        for parameter, finding in findings:
            print(json.dumps({"target": target.path, "parameter": parameter, "finding": finding}))
    print(json.dumps({"callables": len(walked), "calls": total}), flush=True)


if __name__ == "__main__":
    main()
