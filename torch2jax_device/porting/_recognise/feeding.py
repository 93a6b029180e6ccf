"""The "Feeding the device" section: ``pin_memory=``, ``x.pin_memory()`` and a DataLoader's
worker processes."""

from __future__ import annotations

import ast

from .._rewrites import Rewrite
from .._values import TJ, last_name
from .._written import short_text
from .base import Recogniser

__all__ = [
    "data_generator",
    "pin_memory_call",
    "pin_memory_keys",
    "pin_memory_keywords",
    "pinned_query",
    "workers",
]

_KEYWORDS = ("pin_memory", "pin_memory_device")


def pin_memory_keywords(r: Recogniser, call: ast.Call) -> None:
    """``dataloader-pin-memory``: ``DataLoader(..., pin_memory=True)`` (not tj's own)."""
    for keyword in call.keywords:
        if keyword.arg in _KEYWORDS and not (r.qualname(call.func) or "").startswith(TJ):
            r.add(
                keyword, "dataloader-pin-memory", position=r.file.position(r.file.span(keyword)[0])
            )


def pin_memory_keys(r: Recogniser, node: ast.Dict) -> None:
    """``DataLoader(**{"pin_memory": True, ...})``: keyword arguments built as a dict."""
    for key in node.keys:
        if isinstance(key, ast.Constant) and key.value in _KEYWORDS:
            r.add(key, "dataloader-pin-memory")


def pin_memory_call(
    r: Recogniser, call: ast.Call, method: ast.Attribute, where: tuple[int, int]
) -> None:
    """``tensor-pin-memory``: ``x.pin_memory()`` becomes ``tj.pin_memory(x)``. A torch
    module has no such method: on an object named or used as one (Diffusers'
    ``ema_unet.pin_memory()``, an ``EMAModel`` offloading its copy of the weights) it pins
    the tensors the object holds, reported as advice."""
    receiver = method.value
    framework = r.file.values.module_framework(receiver)
    if framework == "nnx":
        return  # a Flax module: no pin_memory of torch's
    if framework is not None:
        r.add(
            call,
            "tensor-pin-memory",
            f"{r.text(receiver)}_state = jax.tree.map(tj.pin_memory, nnx.state("
            f"{r.text(receiver)}))  # the arrays it holds, in pinned host memory",
            position=where,
            reason="a torch module has no pin_memory: this object (an EMA copy of a model) "
            "pins the tensors it holds, which become the arrays of its port",
        )
        return
    start, end = r.file.span(call)
    r.add(
        call,
        "tensor-pin-memory",
        f"tj.pin_memory({r.text(receiver)})",
        position=where,
        rewrite=Rewrite(start, end, ("tj.pin_memory(", r.file.receiver_span(method), ")")),
        call=call,
        tj_name="tj.pin_memory",
        effect="value",
        subject=call,
    )


def pinned_query(r: Recogniser, call: ast.Call, receiver: ast.expr, where: tuple[int, int]) -> None:
    """``tensor-pin-memory``: ``x.is_pinned()``."""
    r.add(
        call,
        "tensor-pin-memory",
        f'{r.text(receiver)}.sharding.memory_kind == "pinned_host"',
        position=where,
    )


def workers(r: Recogniser, call: ast.Call) -> None:
    """``dataloader-workers``: a DataLoader that forks worker processes, which can deadlock
    once JAX has started (torch2jax_device warns at run time: ``tj.ForkAfterJaxWarning``)."""
    name = r.qualname(call.func) or last_name(call.func) or ""
    loader = name.split(".")[-1].lower()  # DataLoader, or a factory: make_data_loader
    if not loader.endswith(("dataloader", "data_loader")) or name.startswith(TJ):
        return
    keywords = {k.arg: k for k in call.keywords}
    count = keywords.get("num_workers")
    if count is None or (isinstance(count.value, ast.Constant) and count.value.value == 0):
        return
    context = keywords.get("multiprocessing_context")
    if context is not None and _starts_without_fork(r, context.value):
        return
    reason = (
        "its workers fork, and a fork after JAX has started can deadlock (at run time "
        'tj.ForkAfterJaxWarning says so): give the DataLoader multiprocessing_context="spawn"'
    )
    if context is not None:
        reason = (
            f"its workers start as multiprocessing_context={short_text(context.value)} says, "
            "which may be None (a fork on Linux), and a fork after JAX has started can deadlock "
            '(at run time tj.ForkAfterJaxWarning says so): make it "spawn" whenever there are '
            "workers"
        )
    r.add(
        count, "dataloader-workers", position=r.file.position(r.file.span(count)[0]), reason=reason
    )


def _starts_without_fork(r: Recogniser, context: ast.expr) -> bool:
    """``multiprocessing_context="spawn"`` (or ``"forkserver"``,
    ``multiprocessing.get_context("spawn")``, or a name every assignment of which is one):
    workers that do not fork. A context read from a setting may be None, a fork on Linux."""
    if isinstance(context, ast.Name):
        values = [
            b.value
            for b in r.file.names.bindings(context)
            if b.kind == "assign" and b.element is None and b.value is not None
        ]
        return bool(values) and all(
            not isinstance(v, ast.Name) and _starts_without_fork(r, v) for v in values
        )
    if isinstance(context, ast.Call) and last_name(context.func) == "get_context":
        context = context.args[0] if context.args else ast.Constant(None)
    return isinstance(context, ast.Constant) and context.value in ("spawn", "forkserver")


def data_generator(r: Recogniser, node: ast.expr) -> str:
    """Why a ``torch.Generator`` (its call, or a name bound to it) stays torch's: every use
    seeds torch's data loading (``DataLoader(generator=g)``, ``random_split``, samplers),
    which JAX code does not replace. ``""`` when it may draw numbers elsewhere."""
    made: ast.AST | None = node
    if isinstance(node, ast.Name):
        bindings = r.file.names.bindings(node)
        made = bindings[0].value if len(bindings) == 1 else None
    if not (isinstance(made, ast.Call) and r.qualname(made.func) == "torch.Generator"):
        return ""
    value: ast.AST = made
    parent = r.parent(value)
    while isinstance(parent, ast.Attribute) and parent.attr == "manual_seed":  # chained
        call = r.parent(parent)
        if not (isinstance(call, ast.Call) and call.func is parent):
            return ""
        value, parent = call, r.parent(call)
    uses: list[ast.AST] = [value]
    if isinstance(parent, ast.Assign) and [type(t) for t in parent.targets] == [ast.Name]:
        binding = r.file.names.binding_of.get(parent.targets[0])
        uses = list(r.file.names.loads(binding)) if binding is not None else []
    if not uses or not all(_seeds_data(r, use) for use in uses):
        return ""
    return (
        "it seeds torch's data loading (the DataLoader's order of samples), which stays "
        "torch's: keep it; JAX code draws its own numbers from a jax.random.key"
    )


def _seeds_data(r: Recogniser, use: ast.AST) -> bool:
    parent = r.parent(use)
    if isinstance(parent, ast.Attribute) and parent.attr == "manual_seed":
        return isinstance(r.parent(parent), ast.Call)
    if isinstance(parent, ast.keyword) and parent.arg == "generator":
        call = r.parent(parent)
        return isinstance(call, ast.Call) and (r.qualname(call.func) or "").startswith(
            "torch.utils.data."
        )
    return False
