"""A project's own helpers: a call of a function the project defines that places, loads,
wraps a device idiom or builds the library's launcher
(``create_model_and_transforms(..., device=device)``, ``utils.to_device(batch, device)``,
``accelerator = make_accelerator(cfg)``) is the script's device work, reported as advice:
the helper is ported where it is defined."""

from __future__ import annotations

import ast
import re

from .._source import SourceFile
from .._values import last_name
from . import checkpoints, device_strings, libraries, optimizers
from .base import Recogniser

__all__ = ["helper_device_keywords", "project_helper_call", "project_launcher"]

# What a project's helper told device= makes, by its name or the name of what it returns:
# a model (create_model_and_transforms, ModelEMA, load_model), a batch moved
# (prepare_batch), else arrays it creates there (create_optimizer's tensor rates).
_HELPER_MODULE = re.compile(r"model|net|module|ema|encoder|decoder|backbone", re.IGNORECASE)
_HELPER_BATCH = re.compile(r"batch|input|data|sample|prepare|move|to_device", re.IGNORECASE)
# Packages whose calls told device= are no project helper's: torch's own (rows of their
# own), JAX's and the other array frameworks' (their devices), functools.partial (no call).
_NOT_HELPERS = frozenset(
    "torch torch2jax_device functools jax jaxlib flax optax equinox orbax numpy cupy "
    "tensorflow paddle mindspore oneflow mlx tinygrad".split()
)
# Keywords only DistributedDataParallel (and the wrappers built on it) takes.
_DDP_KEYWORDS = frozenset({"device_ids", "output_device"})


def helper_device_keywords(r: Recogniser, call: ast.Call) -> None:
    """``device=device`` handed to a helper of the project's own, defined in another file
    (``create_model_and_transforms(..., device=device)``, ``task.prepare_batch(batch,
    device=device)``): the helper places there, so the call is the script's placement
    (advice: the helper is ported where it is defined). ``device_ids=``/``output_device=``
    anywhere are DDP's (``task.prepare_distributed(device_ids=[device])``)."""
    if id(call) in r.reported or isinstance(r.parent(call), ast.Call):
        return  # reported already, or an argument of a call (partial(f, device=d))
    name = r.qualname(call.func)
    if name is not None and name.split(".")[0] in _NOT_HELPERS:
        return  # torch's own calls have rows; JAX's take its devices; partial(f, device=d)
    if name is not None and name.startswith(libraries.TORCH_LIBRARIES):
        return  # the libraries' device= is library-device
    if checkpoints.loads_onto_a_parameter(r, call):
        return
    if _defined_here(r, call.func) or r.file.values.builtin(call.func) is not None:
        return
    if checkpoints.project_loader(r, call):
        return
    for keyword in call.keywords:
        if keyword.arg in _DDP_KEYWORDS:
            rule = "dist-ddp-gradient"
        elif keyword.arg == "device" and device_strings.is_device_value(r, keyword.value):
            called = (last_name(call.func) or "") + " " + optimizers.assigned_name(r, call, "")
            if _HELPER_MODULE.search(called):
                rule = "module-device-kwarg"
            elif _HELPER_BATCH.search(called):
                rule = "tensor-to-device"
            else:
                rule = "factory-device"
        else:
            continue
        if _jax_only(r.file):
            return  # flax's own jit(..., device=device): JAX code placing with JAX's devices
        candidate = r.add(keyword, rule, position=r.file.position(r.file.span(keyword)[0]))
        candidate.reason = (
            f"{r.text(call.func)} is the project's own: it places on {r.text(keyword.value)}; "
            "port it where it is defined"
        )
        return


def _jax_only(file: SourceFile) -> bool:
    """The file imports JAX and nothing of torch or the libraries built on it."""
    origins = {
        (b.origin or "").split(".")[0]
        for scope in file.names.scopes
        for bindings in scope.bindings.values()
        for b in bindings
        if b.kind == "import"
    }
    torch_side = {"torch", "transformers", "accelerate", "lightning", "deepspeed", "diffusers"}
    return bool(origins & {"jax", "flax", "equinox", "optax"}) and not origins & torch_side


def _defined_here(r: Recogniser, func: ast.expr) -> bool:
    """``func`` is a function or class of this file (its body's lines are found there):
    a name bound to one, or ``self.method`` of the enclosing class."""
    if isinstance(func, ast.Name):
        return any(b.kind in ("def", "class") for b in r.file.names.bindings(func))
    if (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id in ("self", "cls")
    ):
        owner = r.file.names.enclosing(func, ast.ClassDef)
        return isinstance(owner, ast.ClassDef) and any(
            isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == func.attr
            for item in owner.body
        )
    return False


# A helper of the project that only wraps a device idiom: at most this many statements.
_HELPER_STATEMENTS = 3


def project_helper_call(r: Recogniser, call: ast.Call) -> None:
    """``batch = utils.to_device(batch, device)`` where ``utils.py``, scanned with this
    file, defines a helper whose short body is a device idiom (``return x.to(device)``,
    ``return torch.load(path, map_location=device)``): the call is this file's placement,
    reported as advice (the helper is ported where it is defined)."""
    if id(call) in r.reported or r.file.project is None:
        return
    for owner, function in r.file.project.functions(r.file, call):
        rule = _wrapped_idiom(owner, function)
        if rule is not None:
            candidate = r.add(call, rule)
            candidate.reason = (
                f"{r.text(call.func)} ({owner.path}:{function.lineno}) wraps {rule}: port it "
                "there, and this call follows"
            )
            return


def _wrapped_idiom(
    owner: SourceFile, function: ast.FunctionDef | ast.AsyncFunctionDef
) -> str | None:
    """The rule of the device idiom a short helper's body is, on one of its parameters."""
    body = [s for s in function.body if not _is_docstring(s)]
    if not body or len(body) > _HELPER_STATEMENTS:
        return None
    parameters = {a.arg for a in [*function.args.posonlyargs, *function.args.args]}
    parameters |= {a.arg for a in function.args.kwonlyargs}
    for node in (n for s in body for n in ast.walk(s)):
        if not isinstance(node, ast.Call):
            continue
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & parameters
        if not used:
            continue
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr in ("to", "cuda")
            and owner.qualname(func) is None
        ):
            return "tensor-to-device" if func.attr == "to" else "tensor-cuda"
        name = owner.qualname(func)
        if name == "torch.load" and any(k.arg == "map_location" for k in node.keywords):
            return "torch-load-map-location"
    return None


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


# A project's factory of the library's launcher: make_accelerator, build_fabric.
_LAUNCHER_FACTORY = re.compile(
    r"^_?(make|build|create|setup|init|get|prepare)_(accelerator|fabric)$"
)
# The names the libraries' documentation gives their launchers.
_LAUNCHER_NAMES = frozenset({"accelerator", "fabric"})


def project_launcher(r: Recogniser, node: ast.Assign) -> None:
    """``library-launcher``: ``accelerator = make_accelerator(cfg)``, a project's factory
    (LeRobot's) of the launcher, kept under the name the library's documentation gives it
    (``accelerator.device`` and the like are then reported as its members)."""
    value = node.value
    if not (
        isinstance(value, ast.Call)
        and len(node.targets) == 1
        and last_name(node.targets[0]) in _LAUNCHER_NAMES
        and _LAUNCHER_FACTORY.match(last_name(value.func) or "")
        and not (r.qualname(value.func) or "").startswith(("torch", "deepspeed", "accelerate"))
        and id(value) not in r.reported
    ):
        return
    found = r.add(value, "library-launcher")
    found.reason = (
        f"{r.text(value.func)} is the project's own: it builds the launcher; port it where it "
        "is defined"
    )
