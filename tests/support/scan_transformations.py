"""Source-to-source transformations that keep what every line means on a device.

Each takes a ``scan_metamorphic.Source`` and returns the ``Edit`` list that makes the new
file (``None`` or ``[]`` where it has nothing to change); ``scan_metamorphic.Transformed``
carries positions across. Each keeps the program's meaning: names are renamed only where
every use is renamed with them (a name the file binds in a way a rename could miss, such
as ``except E as name``, ``global name`` or a class attribute, is left), values are
routed only through code that hands them on unchanged, and a spelling is replaced only
by one torch documents as the same (``torch.cuda.amp.autocast(...)`` is
``torch.autocast("cuda", ...)``).
"""

from __future__ import annotations

import ast
import tokenize
from collections.abc import Callable

from tests.support import scan_relocations as moved
from tests.support.scan_metamorphic import (
    Edit,
    Skip,
    Source,
    Transformation,
    guarded,
    replace_name,
)
from tests.support.scan_relocations import call_arguments, dotted, without_overlaps

_DEVICE_TYPES = ("cuda", "cpu", "mps", "xpu", "npu", "hpu", "xla", "meta")


# -- names ---------------------------------------------------------------------------
def _unsafe_names(tree: ast.AST) -> set[str]:
    """Names bound where a rename of their ``Name`` nodes would miss a spelling."""
    unsafe: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.name:
            unsafe.add(node.name)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            unsafe.update(node.names)
        elif isinstance(node, ast.alias):
            unsafe.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            unsafe.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            unsafe.add(node.rest)
        elif isinstance(node, ast.ClassDef):
            for statement in ast.walk(node):
                if isinstance(statement, ast.Name) and isinstance(statement.ctx, ast.Store):
                    unsafe.add(statement.id)
            unsafe.add(node.name)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            unsafe.add(node.name)
        elif isinstance(node, ast.Attribute):
            unsafe.add(node.attr)  # a name also read as an attribute stays as it is
    return unsafe


def _rename(source: Source, renames: dict[str, str]) -> list[Edit]:
    """Every ``Name`` and parameter spelled as a key of ``renames``, renamed; keywords of
    calls to the file's own functions whose parameter is renamed, renamed with it."""
    edits = []
    renamed_parameters: dict[str, set[str]] = {}
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Name) and node.id in renames:
            edits.append(replace_name(source, node, node.id, renames[node.id]))
        elif isinstance(node, ast.arg) and node.arg in renames:
            edits.append(replace_name(source, node, node.arg, renames[node.arg]))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
            renamed_parameters[node.name] = {a.arg for a in every if a.arg in renames}
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Call):
            callee = node.func.id if isinstance(node.func, ast.Name) else None
            if isinstance(node.func, ast.Attribute):
                callee = node.func.attr
            edits.extend(
                replace_name(source, keyword, keyword.arg, renames[keyword.arg])
                for keyword in node.keywords
                if keyword.arg and keyword.arg in renamed_parameters.get(callee or "", ())
            )
    return edits


def _renamed_names(source: Source, renames: dict[str, str]) -> list[Edit]:
    """Every ``Name`` node spelled as a key of ``renames``, renamed."""
    return [
        replace_name(source, node, node.id, renames[node.id])
        for node in ast.walk(source.tree)
        if isinstance(node, ast.Name) and node.id in renames
    ]


def _bound_names(tree: ast.AST) -> set[str]:
    """Names the file binds other than by an import."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            bound.add(node.name)
    return bound


#: Locals and parameters as another author would name them.
VARIABLE_RENAMES = {
    "device": "dev",
    "model": "net",
    "optimizer": "opt",
    "scaler": "amp_scaler",
    "local_rank": "lrank",
    "rank": "proc_rank",
    "world_size": "nprocs",
    "args": "opts",
    "batch": "minibatch",
    "inputs": "xs",
    "images": "pixels",
    "state_dict": "weights",
    "checkpoint": "ckpt",
    "dtype": "precision",
}


@guarded
def rename_variables(source: Source) -> list[Edit] | None:
    """``device`` -> ``dev``, ``model`` -> ``net``... (``VARIABLE_RENAMES``), every use."""
    unsafe = _unsafe_names(source.tree)
    renames = {
        old: new
        for old, new in VARIABLE_RENAMES.items()
        if old not in unsafe and new not in source.identifiers
    }
    return _rename(source, renames)


@guarded
def rename_functions(source: Source) -> list[Edit] | None:
    """Each function of the module (not a method) given a name that says nothing:
    ``setup_distributed`` -> ``step_1``."""
    methods = {
        id(item)
        for node in ast.walk(source.tree)
        if isinstance(node, ast.ClassDef)
        for item in node.body
    }
    attributes = {n.attr for n in ast.walk(source.tree) if isinstance(n, ast.Attribute)}
    keywords = {k.arg for n in ast.walk(source.tree) if isinstance(n, ast.keyword) for k in [n]}
    names: list[str] = []
    for node in ast.walk(source.tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and id(node) not in methods:
            if node.name.startswith("__") or node.name in attributes | keywords:
                continue
            names.append(node.name)
    if len(set(names)) != len(names):
        return None  # a name defined twice (in branches): keep it simple
    renames = {name: source.fresh(f"step_{i}") for i, name in enumerate(names, 1)}
    edits = _rename(source, renames)
    for node in ast.walk(source.tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in renames:
            start = source.text.index(node.name, source.start(node))
            edits.append(Edit(start, start + len(node.name), renames[node.name]))
    return edits


@guarded
def alias_torch(source: Source) -> list[Edit] | None:
    """``import torch`` -> ``import torch as th``, every use of ``torch`` renamed."""
    if "torch" in _bound_names(source.tree) or "th" in source.identifiers:
        return None
    imports = [
        alias
        for node in ast.walk(source.tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name == "torch" and alias.asname is None
    ]
    if not imports:
        return None
    edits = [Edit(source.start(a), source.end(a), "torch as th") for a in imports]
    return edits + _renamed_names(source, {"torch": "th"})


def _torch_module(name: str | None) -> bool:
    return name is not None and (name == "torch" or name.startswith("torch."))


@guarded
def from_import_modules(source: Source) -> list[Edit] | None:
    """``import torch.distributed as dist`` -> ``from torch import distributed as dist``."""
    edits = []
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Import) and len(node.names) == 1:
            (alias,) = node.names
            if alias.asname and _torch_module(alias.name) and "." in alias.name:
                package, module = alias.name.rsplit(".", 1)
                spelled = module if module == alias.asname else f"{module} as {alias.asname}"
                edits.append(
                    Edit(source.start(node), source.end(node), f"from {package} import {spelled}")
                )
    return edits


def _longhand(source: Source, wanted: Callable[[str], bool]) -> list[Edit] | None:
    """Module aliases and from-imports of modules ``wanted`` accepts spelled long-hand:
    ``import torch.distributed as dist`` -> ``import torch.distributed`` and each
    ``dist.x`` -> ``torch.distributed.x``; ``from torch.cuda.amp import autocast`` ->
    ``import torch.cuda.amp`` and each ``autocast`` -> ``torch.cuda.amp.autocast``."""
    bound = _bound_names(source.tree)
    unsafe = _unsafe_names(source.tree) - {
        (a.asname or a.name).split(".")[0]
        for n in ast.walk(source.tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    binders: dict[str, int] = {}
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                name = (alias.asname or alias.name).split(".")[0]
                binders[name] = binders.get(name, 0) + 1
    replaced: dict[str, str] = {}
    edits = []
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Import):
            names = [(a.asname, a.name) for a in node.names if a.asname]
            module_of = {asname: name for asname, name in names if wanted(name)}
            if not module_of or len(module_of) != len(node.names):
                continue
            root = next(iter(module_of.values())).split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and wanted(node.module or ""):
            if any(a.name == "*" for a in node.names):
                continue
            module_of = {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names}
            root = (node.module or "").split(".")[0]
        else:
            continue
        if (
            root in bound
            or any(n in bound | unsafe or binders[n] > 1 for n in module_of)
            or any(n in replaced for n in module_of)
        ):
            continue
        modules = sorted({m.rsplit(".", 1)[0] if isinstance(node, ast.ImportFrom) else m
                          for m in module_of.values()})  # fmt: skip
        edits.append(Edit(source.start(node), source.end(node), "import " + ", ".join(modules)))
        replaced.update(module_of)
    if not replaced:
        return None
    return edits + _renamed_names(source, replaced)


@guarded
def longhand_torch(source: Source) -> list[Edit] | None:
    """torch's module aliases and from-imports spelled long-hand (``_longhand``)."""
    return _longhand(source, _torch_module)


@guarded
def longhand_libraries(source: Source) -> list[Edit] | None:
    """The from-imports of every other package spelled long-hand (``transformers.X``)."""
    return _longhand(
        source,
        lambda name: (
            bool(name)
            and not _torch_module(name)
            and name != "__future__"
            and name.split(".")[0] not in {"typing", "collections", "os", "sys", "dataclasses"}
        ),
    )


@guarded
def rename_module_aliases(source: Source) -> list[Edit] | None:
    """``import torch.distributed as dist`` -> ``... as dist_mod``, every use renamed."""
    unsafe = _bound_names(source.tree)
    renames = {}
    edits = []
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                name = alias.asname
                if name is None or name in unsafe:
                    continue
                if name not in renames:
                    renames[name] = source.fresh(f"{name}_mod")
                if not source.segment(alias).endswith(name):
                    raise Skip(f"the alias {name} is not where ast says")
                edits.append(Edit(source.end(alias) - len(name), source.end(alias), renames[name]))
    return edits + _renamed_names(source, renames)


# -- spellings -----------------------------------------------------------------------
@guarded
def quotes(source: Source) -> list[Edit] | None:
    """``'cuda'`` <-> ``"cuda"``: each plain one-line string in the other quotes."""
    edits = []
    for token in source.tokens:
        text = token.string
        if token.type != tokenize.STRING or text[0] not in "'\"" or text[:3] in ('"""', "'''"):
            continue
        inner = text[1:-1]
        if "'" in inner or '"' in inner or "\\" in inner:
            continue
        other = "'" if text[0] == '"' else '"'
        start = source.token_offset(token.start)
        edits.append(Edit(start, start + len(text), f"{other}{inner}{other}"))
    return edits


def _device_strings(source: Source, spelling: str) -> list[Edit]:
    """Each device string built from a type and an index (``f"cuda:{rank}"``,
    ``"cuda:" + str(rank)``, ``"cuda:{}".format(rank)``) in the ``spelling`` given."""
    edits = []
    for node in ast.walk(source.tree):
        built = _device_string(source, node)
        if built is None or built[0] == spelling:
            continue
        _, prefix, index = built
        if any(c in index for c in "\"'\\\n{}"):
            continue
        spelled = {
            "concat": f'"{prefix}:" + str({index})',
            "format": f'"{prefix}:{{}}".format({index})',
            "f": f'f"{prefix}:{{{index}}}"',
        }[spelling]
        edits.append(Edit(source.start(node), source.end(node), spelled))
    return without_overlaps(edits)


@guarded
def device_strings_concatenated(source: Source) -> list[Edit] | None:
    """``f"cuda:{rank}"`` -> ``"cuda:" + str(rank)`` (and ``.format``'s too)."""
    return _device_strings(source, "concat")


@guarded
def device_strings_formatted(source: Source) -> list[Edit] | None:
    """``f"cuda:{rank}"`` -> ``"cuda:{}".format(rank)`` (and the concatenation's too)."""
    return _device_strings(source, "format")


@guarded
def device_strings_interpolated(source: Source) -> list[Edit] | None:
    """``"cuda:" + str(rank)`` and ``"cuda:{}".format(rank)`` -> ``f"cuda:{rank}"``."""
    return _device_strings(source, "f")


def _device_string(source: Source, node: ast.AST) -> tuple[str, str, str] | None:
    """(spelling, device type, index's code) of a device string built from an index."""
    if isinstance(node, ast.JoinedStr) and len(node.values) == 2:
        head, value = node.values
        if (
            isinstance(head, ast.Constant)
            and isinstance(value, ast.FormattedValue)
            and value.conversion == -1
            and value.format_spec is None
            and _prefix(head.value)
        ):
            return "f", _prefix(head.value), source.segment(value.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = node.left, node.right
        if (
            isinstance(left, ast.Constant)
            and _prefix(left.value)
            and isinstance(right, ast.Call)
            and isinstance(right.func, ast.Name)
            and right.func.id == "str"
            and len(right.args) == 1
            and not right.keywords
        ):
            return "concat", _prefix(left.value), source.segment(right.args[0])
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and isinstance(node.func.value, ast.Constant)
        and isinstance(node.func.value.value, str)
        and node.func.value.value.endswith(":{}")
        and _prefix(node.func.value.value[:-2])
        and len(node.args) == 1
        and not node.keywords
    ):
        return "format", _prefix(node.func.value.value[:-2]), source.segment(node.args[0])
    return None


def _prefix(value: object) -> str:
    if isinstance(value, str) and value.endswith(":") and value[:-1] in _DEVICE_TYPES:
        return value[:-1]
    return ""


@guarded
def keywords_positional(source: Source) -> list[Edit] | None:
    """A device argument by keyword <-> by position, where torch takes both:
    ``torch.load(f, map_location=d)`` <-> ``torch.load(f, d)``, ``x.to(device=d)`` ->
    ``x.to(d)``."""
    torch_names = {
        a.asname or a.name
        for n in ast.walk(source.tree)
        if isinstance(n, ast.Import)
        for a in n.names
        if a.name == "torch"
    }
    edits = []
    for node in ast.walk(source.tree):
        if not isinstance(node, ast.Call) or source.in_fstring(node):
            continue
        func = node.func
        loads = (
            isinstance(func, ast.Attribute)
            and func.attr == "load"
            and isinstance(func.value, ast.Name)
            and func.value.id in torch_names
        )
        to = isinstance(func, ast.Attribute) and func.attr == "to"
        keyword = {"load": "map_location", "to": "device"}["load" if loads else "to"]
        if not (loads or to) or any(isinstance(a, ast.Starred) for a in node.args):
            continue
        before = 1 if loads else 0  # the positionals before the device's
        named = [k for k in node.keywords if k.arg == keyword]
        if named and len(node.args) == before and node.keywords[0] is named[0]:
            edits.append(Edit(source.start(named[0]), source.start(named[0].value), ""))
        elif loads and not node.keywords and len(node.args) == before + 1:
            # (x.to(a) stays: a may be a dtype or a tensor, not a device)
            start = source.start(node.args[before])
            edits.append(Edit(start, start, f"{keyword}="))
    return edits


@guarded
def autocast_spelling(source: Source) -> list[Edit] | None:
    """``torch.cuda.amp.autocast(...)`` <-> ``torch.autocast("cuda", ...)`` and
    ``torch.cuda.amp.GradScaler(...)`` <-> ``torch.amp.GradScaler("cuda", ...)``, where
    torch documents them as the same (keywords only after the device)."""
    torch_names = [
        a.asname or a.name
        for n in ast.walk(source.tree)
        if isinstance(n, ast.Import)
        for a in n.names
        if a.name == "torch"
    ]
    if not torch_names or "torch" in _bound_names(source.tree):
        return None
    torch = torch_names[0]
    edits = []
    for node in ast.walk(source.tree):
        if not isinstance(node, ast.Call) or source.in_fstring(node):
            continue
        spelled = dotted(node.func)
        if spelled is None or not spelled.startswith(f"{torch}."):
            continue
        path = "torch" + spelled[len(torch) :]
        short = {"torch.cuda.amp.autocast": "autocast", "torch.cuda.amp.GradScaler": "GradScaler"}
        long = {
            "torch.autocast": "autocast",
            "torch.amp.autocast": "autocast",
            "torch.amp.GradScaler": "GradScaler",
        }
        open_paren = source.text.index("(", source.end(node.func))
        if path in short and not node.args:
            name = "autocast" if short[path] == "autocast" else "amp.GradScaler"
            edits.append(Edit(source.start(node.func), source.end(node.func), f"{torch}.{name}"))
            comma = ", " if node.keywords else ""
            edits.append(Edit(open_paren + 1, open_paren + 1, f'"cuda"{comma}'))
        elif path in long:
            device = _device_argument(node)
            if device is None:
                continue
            argument, rest = device
            if rest:
                continue
            edits.append(
                Edit(
                    source.start(node.func), source.end(node.func), f"{torch}.cuda.amp.{long[path]}"
                )
            )
            after = _next_argument_start(source, node, argument)
            edits.append(Edit(source.start(argument), after, ""))
    return edits


def _device_argument(node: ast.Call) -> tuple[ast.AST, list[ast.expr]] | None:
    """The ``"cuda"`` device argument of an autocast or scaler call, and any other
    positional argument."""
    if node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "cuda":
        return node.args[0], node.args[1:]
    for keyword in node.keywords:
        if keyword.arg in ("device_type", "device") and isinstance(keyword.value, ast.Constant):
            if keyword.value.value == "cuda":
                return keyword, list(node.args)
    return None


def _next_argument_start(source: Source, call: ast.Call, argument: ast.AST) -> int:
    following = [a for a in call_arguments(call) if source.start(a) > source.start(argument)]
    if following:
        return source.start(following[0])
    return source.end(argument)


#: Every transformation, by name (the routings read the file's labels).
TRANSFORMATIONS: dict[str, Transformation] = {
    f.__name__: f
    for f in (
        alias_torch,
        from_import_modules,
        longhand_torch,
        longhand_libraries,
        rename_module_aliases,
        autocast_spelling,
        keywords_positional,
        rename_variables,
        rename_functions,
        moved.into_main,
        moved.into_class,
        moved.main_guard,
        moved.split_calls,
        moved.join_lines,
        moved.join_statements,
        moved.parenthesize,
        moved.parenthesize_lines,
        quotes,
        device_strings_concatenated,
        device_strings_formatted,
        device_strings_interpolated,
        *(
            moved.router(how, doc)
            for how, doc in (
                ("assignment", "``value = device`` / ``x.to(value)``."),
                ("tuple", "``value, _ = device, None`` / ``x.to(value)``."),
                ("namespace", "``cfg.device = device`` / ``x.to(cfg.device)``."),
                ("dict", "``options = {'device': device}`` / ``x.to(options['device'])``."),
                ("helper", "``x.to(passthrough(device))``, the helper returning its argument."),
            )
        ),
    )
}
