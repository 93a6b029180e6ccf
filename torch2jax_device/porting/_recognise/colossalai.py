"""ColossalAI's plugins and what its Booster hands back, section "Libraries built on torch"
(round 9's held-out set H: ColossalAI's Llama benchmark, ColossalChat's consumer).

- A plugin's options: ``cpu_offload=`` given to a plugin (``HybridParallelPlugin(...,
  cpu_offload=True)``), and a ``dict(...)`` of options kept in a name and splatted into a
  plugin (``plugin_config = dict(tp_size=1, zero_stage=2)``, then
  ``HybridParallelPlugin(**plugin_config)``): ``library-strategy``.
- A plugin's loader, ``plugin.prepare_dataloader(dataset, ...)`` (a sampler that splits
  the data per data-parallel rank): ``library-prepare``.
- A model the Booster wrapped, unwrapped: ``model.unwrap()`` where ``model`` (or
  ``self.model``) was bound from ``booster.boost(...)``: ``library-prepare``.

The Booster's own members (``boost``, ``backward``, ``no_sync``) are the catalog's
(``libraries.member``), through ``self.booster`` a base class of the file made too.
"""

from __future__ import annotations

import ast

from .. import catalog
from .base import Recogniser
from .libraries import is_library_object

__all__ = ["boosted_unwrapped", "plugin_loader", "plugin_options"]

#: ColossalAI's plugins, by the names the catalog knows them.
_PLUGINS = frozenset(
    name
    for name in catalog.get("library-strategy").torch_api
    if name.startswith("colossalai.booster.plugin.")
)
_OFFLOAD = (
    "shard it yourself: parameters and optimizer state sharded over a mesh axis "
    "(dist-fsdp); host offload of the optimizer state has no counterpart"
)
_LOADER = (
    "shard it yourself: each data-parallel rank takes its share of the dataset "
    "(a DistributedSampler's split), its batches moved by tj.DeviceLoader(loader, device)"
)
_UNWRAPPED = "nothing to unwrap: the port keeps its own nnx module, placed or sharded"


def _is_plugin(r: Recogniser, call: ast.Call) -> bool:
    return r.qualname(call.func) in _PLUGINS


def plugin_options(r: Recogniser, call: ast.Call) -> None:
    """``cpu_offload=`` given to a plugin; a ``dict(...)`` kept in a name splatted into one."""
    if not _is_plugin(r, call):
        return
    for keyword in call.keywords:
        if keyword.arg == "cpu_offload" and id(keyword) not in r.reported:
            r.add(keyword, "library-strategy", _OFFLOAD)
        elif keyword.arg is None and isinstance(keyword.value, ast.Name):
            for binding in r.file.names.bindings(keyword.value):
                value = binding.value
                if (
                    binding.kind == "assign"
                    and binding.element is None
                    and isinstance(value, ast.Call)
                    and r.file.values.builtin(value.func) == "dict"
                    and id(value) not in r.reported
                ):
                    r.add(value, "library-strategy")


def _made_by_plugin(r: Recogniser, receiver: ast.expr) -> bool:
    """``receiver`` (a name, or ``self.x``) holds what a ColossalAI plugin's class made."""
    if isinstance(receiver, ast.Name):
        values = [b.value for b in r.file.names.bindings(receiver) if b.kind == "assign"]
    elif isinstance(receiver, ast.Attribute):
        values = list(r.file.values.stored_attributes(receiver))
    else:
        return False
    return bool(values) and all(
        isinstance(value, ast.Call) and _is_plugin(r, value) for value in values
    )


def plugin_loader(r: Recogniser, call: ast.Call) -> None:
    """``plugin.prepare_dataloader(dataset, ...)`` on a ColossalAI plugin."""
    func = call.func
    if (
        isinstance(func, ast.Attribute)
        and func.attr == "prepare_dataloader"
        and id(call) not in r.reported
        and _made_by_plugin(r, func.value)
    ):
        r.add(call, "library-prepare", _LOADER, position=r.file.method_position(func))


def _boosted(r: Recogniser, receiver: ast.expr) -> bool:
    """``receiver`` is a target of ``... = booster.boost(...)`` in the same function (a
    name) or class (``self.model``)."""
    shown = r.text(receiver)
    scope_type = ast.ClassDef if isinstance(receiver, ast.Attribute) else ast.FunctionDef
    scope = r.file.names.enclosing(receiver, scope_type)
    if scope is None:
        return False
    for node in ast.walk(scope):
        if not (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr == "boost"
            and is_library_object(r, node.value.func.value)
        ):
            continue
        targets = [
            element.value if isinstance(element, ast.Starred) else element
            for target in node.targets
            for element in (target.elts if isinstance(target, ast.Tuple) else [target])
        ]
        if any(r.text(target) == shown for target in targets):
            return True
    return False


def boosted_unwrapped(r: Recogniser, call: ast.Call) -> None:
    """``model.unwrap()`` on a model ColossalAI's ``booster.boost`` wrapped."""
    func = call.func
    if (
        isinstance(func, ast.Attribute)
        and func.attr == "unwrap"
        and not call.args
        and id(call) not in r.reported
        and isinstance(func.value, (ast.Name, ast.Attribute))
        and _boosted(r, func.value)
    ):
        r.add(call, "library-prepare", _UNWRAPPED, position=r.file.method_position(func))
