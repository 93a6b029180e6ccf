"""The start method of worker processes chosen from Python's ``multiprocessing`` in a torch
script (round 9's development set: FlagEmbedding's multi-device pool), section
"Distributed".

``ctx = mp.get_context("spawn")`` (``multiprocessing`` or ``torch.multiprocessing``) and
``multiprocessing.set_start_method("spawn")`` start each worker in a fresh interpreter
because CUDA cannot be used in a forked child (``mp-spawn``, as torch's
``mp.set_start_method``): JAX cannot either, so the choice stays. ``"fork"`` is no such
choice and stays silent, as is a DataLoader's ``multiprocessing_context=`` (its workers'
start method: the ``dataloader-workers`` row's).
"""

from __future__ import annotations

import ast

from .base import Recogniser
from .launch_settings import start_method_advice
from .library_internals import imports_package

__all__ = ["start_context"]

_CHOOSERS = frozenset(
    {
        "multiprocessing.get_context",
        "multiprocessing.set_start_method",
        "torch.multiprocessing.get_context",
    }
)
_FRESH = frozenset({"spawn", "forkserver"})
_LOADER_CONTEXT = "multiprocessing_context"


def start_context(r: Recogniser, call: ast.Call) -> None:
    """``mp-spawn``: ``mp.get_context("spawn")``, ``multiprocessing.set_start_method(
    "forkserver")`` in a file that imports torch."""
    if id(call) in r.reported or r.qualname(call.func) not in _CHOOSERS:
        return
    method = call.args[0] if call.args else None
    method = next((k.value for k in call.keywords if k.arg == "method"), method)
    if not (isinstance(method, ast.Constant) and method.value in _FRESH):
        return
    if imports_package(r, ("torch",)) and not _only_for_loaders(r, call):
        r.add(call, "mp-spawn", start_method_advice(r, call))


def _only_for_loaders(r: Recogniser, call: ast.Call) -> bool:
    """The context is a DataLoader's ``multiprocessing_context=`` (given there, or kept in a
    name only given there): its workers' start method, the ``dataloader-workers`` row's."""
    parent = r.parent(call)
    if isinstance(parent, ast.keyword):
        return parent.arg == _LOADER_CONTEXT
    if not (
        isinstance(parent, ast.Assign)
        and len(parent.targets) == 1
        and isinstance(parent.targets[0], ast.Name)
    ):
        return False
    binding = r.file.names.binding_of.get(parent.targets[0])
    uses = [r.parent(load) for load in r.file.names.loads(binding)] if binding else []
    return bool(uses) and all(
        isinstance(use, ast.keyword) and use.arg == _LOADER_CONTEXT for use in uses
    )
