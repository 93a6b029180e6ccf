"""What a script hands the libraries built on torch, wherever it is written down.

A library's launcher is told the devices, the processes, the precision and the
parallelism by keywords (Lightning's ``Trainer(accelerator="gpu", devices=[0])``,
Composer's ``Trainer(precision=..., parallelism_config=...)``), and a loader its memory
budgets by ``max_memory=``. Scripts seldom write the value in the call: they choose it
in a name first (``accelerator = "gpu"`` in each branch), keep it in a dict splatted
into the call (``trainer_kwargs["strategy"] = ...; Trainer(**trainer_kwargs)``) or in a
config named for the trainer (``trainer_config["devices"]``,
``cfg.trainer.devices``), build the budgets with Accelerate's ``get_max_memory()`` and
trim them (``del budgets["cpu"]``), or name the library's class in a string a config
instantiates (``{"target": "pytorch_lightning.strategies.DDPStrategy"}``). Each of
these is the library's device work, reported where it is written.
"""

from __future__ import annotations

import ast
import re

from .. import catalog
from .._values import last_name
from .base import Recogniser
from .libraries import builds_launcher, carried_values

__all__ = [
    "class_named",
    "launcher_keywords",
    "launcher_setting",
    "model_flags",
    "placement_value",
]

#: The launchers' keywords that choose devices, processes and precision, or the
#: parallelism -> the row reporting them.
LAUNCHER_KEYWORDS = {
    **dict.fromkeys(
        (
            "accelerator",
            "devices",
            "gpus",
            "tpu_cores",
            "num_nodes",
            "num_processes",
            "precision",
            "mixed_precision",
            "device",
            # Lightning's sampler swap (replace_sampler_ddp before 2.0)
            "use_distributed_sampler",
            "replace_sampler_ddp",
        ),
        "library-launcher",
    ),
    **dict.fromkeys(
        ("strategy", "parallelism_config", "fsdp_config", "tp_config", "fsdp", "deepspeed"),
        "library-strategy",
    ),
}
# A config or dict named for the trainer it configures (trainer_config, trainer_kwargs),
# and a config's section for it (cfg.trainer).
_TRAINER_NAMED = re.compile(r"(^|_)trainer_|_trainer($|_)", re.IGNORECASE)
_CONFIG_NAMED = re.compile(r"conf|cfg|opt|args", re.IGNORECASE)
# The libraries' classes, by the dotted names a config instantiates them from.
_LIBRARY_CLASSES = {
    name: row.id
    for row in catalog.CATALOG
    if row.section == catalog.libraries.SECTION
    for name in row.torch_api
    if "." in name and name.split(".")[0].islower() and name.rsplit(".", 1)[-1][:1].isupper()
}
# Calls that hand back a budget map for max_memory= (Accelerate's get_max_memory()).
_BUDGETS = frozenset(
    {"accelerate.utils.get_max_memory", "accelerate.utils.modeling.get_max_memory"}
)
# Transformers' flags for a model whose layers device_map placed.
_MODEL_PARALLEL_FLAGS = frozenset({"is_parallelizable", "model_parallel"})
# A dict's methods that change its keys.
_MUTATORS = frozenset({"pop", "update", "setdefault", "clear", "popitem"})


def launcher_keywords(r: Recogniser, call: ast.Call) -> None:
    """``library-launcher`` / ``library-strategy``: a launcher's keyword that picks the
    devices, processes, precision or parallelism (``Trainer(..., precision=p)``) on a
    line of its own, every value a name given to one was assigned (``accelerator =
    "gpu"``), and the keys set in a dict splatted into the launcher
    (``kw["strategy"] = ...; Trainer(**kw)``)."""
    if not builds_launcher(r, call):
        return
    for keyword in call.keywords:
        if keyword.arg is None:
            values, uses = carried_values(r, keyword.value)
            for value in values or ():
                if isinstance(value, ast.Dict):
                    for key in value.keys:
                        if key is not None:
                            _report_key(r, key, key)
            for use in uses:
                parent = r.parent(use)
                if isinstance(parent, ast.Subscript) and not isinstance(parent.ctx, ast.Load):
                    _report_key(r, parent.slice, parent)
            continue
        row = LAUNCHER_KEYWORDS.get(keyword.arg)
        if row is None:
            continue
        if keyword.value.lineno != call.lineno and id(keyword) not in r.reported:
            r.add(keyword, row, position=r.file.position(r.file.span(keyword)[0]))
        for value in _assigned(r, keyword.value):
            if value.lineno < call.lineno and id(value) not in r.reported:  # chosen before
                r.add(value, row)


def _report_key(r: Recogniser, key: ast.AST | None, node: ast.AST) -> None:
    if isinstance(key, ast.Constant) and key.value in LAUNCHER_KEYWORDS:
        if id(node) not in r.reported:
            r.add(node, LAUNCHER_KEYWORDS[key.value])


def _assigned(r: Recogniser, node: ast.expr) -> list[ast.expr]:
    """The values a name was assigned in its scope (every branch's)."""
    return r.file.names.assigned(node) or []  # through copies (value = device)


def launcher_setting(r: Recogniser, node: ast.Subscript | ast.Attribute) -> bool:
    """``library-launcher`` / ``library-strategy``: a launcher keyword kept in a config or
    dict named for the trainer, set, read or deleted (``trainer_config["accelerator"] =
    "gpu"``, ``del trainer_config["accelerator"]``, ``cfg.trainer.devices``); ``True``
    if one was reported."""
    if isinstance(node, ast.Subscript):
        key = node.slice
        name = key.value if isinstance(key, ast.Constant) else None
    else:
        name = node.attr
    if not isinstance(name, str) or name not in LAUNCHER_KEYWORDS or id(node) in r.reported:
        return False
    if not _configures_trainer(node.value):
        return False
    r.add(node, LAUNCHER_KEYWORDS[name])
    return True


def _configures_trainer(node: ast.expr) -> bool:
    """``trainer_config``, ``self.trainer_kwargs``, ``cfg.trainer``: a trainer's
    settings, not the trainer (whose members are ``libraries.member``'s)."""
    if _TRAINER_NAMED.search(last_name(node) or ""):
        return True
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "trainer"
        and bool(_CONFIG_NAMED.search(last_name(node.value) or ""))
    )


def class_named(r: Recogniser, node: ast.Constant) -> None:
    """The row of a library class named in a string a config instantiates
    (``{"target": "pytorch_lightning.strategies.DDPStrategy"}``)."""
    row = _LIBRARY_CLASSES.get(node.value) if isinstance(node.value, str) else None
    if row is not None and id(node) not in r.reported:
        r.add(node, row)


def placement_value(r: Recogniser, node: ast.AST) -> None:
    """``library-device``: a budget map built for ``max_memory=`` and changed before it
    is handed over: the map Accelerate's ``get_max_memory()`` returned, or the name
    later given as ``max_memory`` (``kwargs["max_memory"]["cpu"] = ...``, ``del
    budgets["cpu"]``, ``budgets.pop("cpu")``, ``budgets = {i: per_gpu for i in ...}``)."""
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
        built = node.value  # budgets = {i: per_gpu for i in range(n)}: the map itself
        if isinstance(built, (ast.Dict, ast.DictComp)) and _name_handed(r, node.targets[0], 0):
            shown = built.key if isinstance(built, ast.DictComp) else built
            r.add(shown, "library-device")
    if isinstance(node, (ast.Assign, ast.Delete)):
        for target in node.targets:
            inner = target.value if isinstance(target, ast.Subscript) else None
            if inner is not None and _budget(r, inner) and id(target) not in r.reported:
                r.add(target, "library-device")
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr in _MUTATORS and _budget(r, node.func.value):
            if id(node) not in r.reported:
                r.add(node, "library-device")


def _budget(r: Recogniser, node: ast.expr) -> bool:
    """``node`` holds a budget map: ``kwargs["max_memory"]``, a name bound to
    ``get_max_memory()``, or a name handed over as ``max_memory``."""
    if isinstance(node, ast.Subscript):
        key = node.slice
        return isinstance(key, ast.Constant) and key.value == "max_memory"
    if not isinstance(node, ast.Name):
        return False
    for binding in r.file.names.bindings(node):
        value = binding.value
        if isinstance(value, ast.Call) and r.qualname(value.func) in _BUDGETS:
            return True
    return _name_handed(r, node, 0)


def _handed_as_budget(r: Recogniser, use: ast.expr, depth: int = 0) -> bool:
    """``max_memory=use``, ``d["max_memory"] = use``, or a copy of it handed over so
    (``dict(use)``, itself or through a name: ``budgets = dict(use)``)."""
    parent = r.parent(use)
    if isinstance(parent, ast.keyword):
        return parent.arg == "max_memory"
    if isinstance(parent, ast.Call) and r.file.values.builtin(parent.func) == "dict":
        if depth >= 3:
            return False
        copy = r.parent(parent)
        if isinstance(copy, ast.Assign) and isinstance(copy.targets[0], ast.Name):
            return _name_handed(r, copy.targets[0], depth + 1)
        return _handed_as_budget(r, parent, depth + 1)
    if isinstance(parent, ast.Assign) and parent.value is use:
        return any(
            isinstance(t, ast.Subscript)
            and isinstance(t.slice, ast.Constant)
            and t.slice.value == "max_memory"
            for t in parent.targets
        )
    return False


def _name_handed(r: Recogniser, name: ast.Name, depth: int) -> bool:
    return any(
        _handed_as_budget(r, use, depth)
        for binding in r.file.names.bindings(name)
        for use in r.file.names.loads(binding)
    )


def model_flags(r: Recogniser, node: ast.Assign) -> None:
    """``library-strategy``: Transformers' model-parallel flags set on a model from
    outside (``model.is_parallelizable = True``, ``model.model_parallel = True``): the
    Trainer then leaves the layers where ``device_map`` put them."""
    for target in node.targets:
        if (
            isinstance(target, ast.Attribute)
            and target.attr in _MODEL_PARALLEL_FLAGS
            and last_name(target.value) != "self"
        ):
            r.add(target, "library-strategy")
