"""torch's (and the libraries') names reached through the project's own (round 9's
development set: DLRM, Text Generation Inference, LoRA's GPT-2 example).

- DDP under a project module's name: ``import extend_distributed as ext_dist`` then
  ``ext_dist.DDP(dlrm.bot_l)`` (``dist-ddp-gradient``): a project module re-exporting
  ``DistributedDataParallel`` as ``DDP``; the module itself is scanned on its own.
- torch's memory and synchronisation calls under a project helper's name:
  ``from text_generation_server.utils.import_utils import empty_cache, synchronize``,
  which hold ``torch.cuda.empty_cache`` or ``torch.xpu.synchronize`` by backend, called as
  torch's are (``empty_cache()``, ``synchronize(self.device)``).
- A module kept in an attribute: ``args.dist = dist`` (``torch.distributed``) or
  ``args.hvd = hvd`` (Horovod's), read elsewhere as ``args.dist.barrier()``: the call
  is the module's function's, reported with its row as advice (never renamed: the
  attribute stays the porter's to replace).
"""

from __future__ import annotations

import ast
import weakref

from .._source import SourceFile
from .._tables import ADVICE, RENAMES, wildcard
from .base import Recogniser
from .library_internals import imports_package

__all__ = ["ddp_by_alias", "held_module_call", "torch_call_by_name"]

# The names a project module re-exports DistributedDataParallel under.
_DDP_NAMES = frozenset({"DDP", "DistributedDataParallel"})
# Packages whose own DDP (or functions of torch's names) are theirs, with rows of their own.
_NOT_PROJECTS = ("torch", "jax", "flax", "deepspeed", "fairscale", "cupy", "numba", "horovod")
# torch's calls, by the name a project's helper keeps them under -> the row reporting it,
# and whether the call is told a device (``synchronize(self.device)``) or nothing.
_TORCH_CALLS = {
    "empty_cache": ("cuda-empty-cache", False),
    "synchronize": ("cuda-synchronize", True),
}
# The modules a script keeps in an attribute whose calls have rows.
_HELD_MODULES = ("torch.distributed", "torch.cuda", "horovod.torch")
_HELD = "{advice}  # {held} is {module}: replace the attribute with the call"
_stores: weakref.WeakKeyDictionary[SourceFile, dict[str, list[ast.expr]]] = (
    weakref.WeakKeyDictionary()
)


def ddp_by_alias(r: Recogniser, call: ast.Call) -> None:
    """``dist-ddp-gradient``: ``ext_dist.DDP(module)``, ``ext_dist`` a project module."""
    func = call.func
    if not (
        isinstance(func, ast.Attribute)
        and func.attr in _DDP_NAMES
        and isinstance(func.value, ast.Name)
        and call.args
        and id(call) not in r.reported
    ):
        return
    bindings = r.file.names.bindings(func.value)
    if not bindings or any(b.kind != "import" for b in bindings):
        return
    origin = r.qualname(func.value) or ""
    if origin and not origin.startswith(_NOT_PROJECTS):
        r.add(call, "dist-ddp-gradient", position=r.file.method_position(func))


def torch_call_by_name(r: Recogniser, call: ast.Call) -> None:
    """``cuda-empty-cache`` / ``cuda-synchronize``: ``empty_cache()``,
    ``synchronize(self.device)``, imported by name from a project module in a file that
    imports torch."""
    func = call.func
    if not isinstance(func, ast.Name) or func.id not in _TORCH_CALLS or id(call) in r.reported:
        return
    bindings = r.file.names.bindings(func)
    origin = r.qualname(func) or ""
    if not bindings or any(b.kind != "import" for b in bindings) or not origin:
        return
    if origin.startswith(_NOT_PROJECTS) or not imports_package(r, ("torch",)):
        return
    rule, takes_device = _TORCH_CALLS[func.id]
    given = [*call.args, *(k.value for k in call.keywords)]
    if takes_device != bool(given):
        return  # synchronize() of stylegan2's distributed.py is a barrier: a device is told
    if given and not (len(given) == 1 and _names_a_device(given[0])):
        return
    r.add(call, rule)


def held_module_call(r: Recogniser, call: ast.Call) -> None:
    """``args.dist.barrier()`` where every store to ``.dist`` in the file is torch's
    ``torch.distributed`` (``args.dist = dist``): the function's row, as advice."""
    func = call.func
    if not (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Attribute)
        and id(call) not in r.reported
        and r.qualname(func) is None
    ):
        return
    stored = _stored_in(r.file).get(func.value.attr, [])
    modules = {r.qualname(value) for value in stored}
    if len(modules) != 1:
        return
    module = modules.pop()
    if module not in _HELD_MODULES:
        return
    name = f"{module}.{func.attr}"
    if name in RENAMES:
        row, new_name = RENAMES[name]
        advice = f"{new_name}({r.arguments(call)})"
    elif name in ADVICE:
        row = ADVICE[name]
        advice = row.tj.splitlines()[0]
    elif (covering := wildcard(name)) is not None:
        row, advice = covering, covering.tj.splitlines()[0]
    else:
        return
    held = r.text(func.value)
    r.add(
        call,
        row.id,
        _HELD.format(advice=advice, held=held, module=module),
        position=r.file.method_position(func),
    )


def _stored_in(file: SourceFile) -> dict[str, list[ast.expr]]:
    """Attribute name -> the values ``x.name = value`` statements of the file store
    (``self``'s included)."""
    if file not in _stores:
        found: dict[str, list[ast.expr]] = {}
        for statement in ast.walk(file.tree):
            if isinstance(statement, ast.Assign):
                for target in statement.targets:
                    if isinstance(target, ast.Attribute):
                        found.setdefault(target.attr, []).append(statement.value)
        _stores[file] = found
    return _stores[file]


def _names_a_device(node: ast.expr) -> bool:
    """``device``, ``self.device``, ``torch_device``: a name that says it holds a device."""
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return isinstance(name, str) and "device" in name.lower()
