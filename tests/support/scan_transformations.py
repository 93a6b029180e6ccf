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
from collections.abc import Callable, Iterator

from tests.support.scan_metamorphic import Edit, Source, Transformation

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
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
            edits.append(_replace_name(source, node, node.id, renames[node.id]))
        elif isinstance(node, ast.arg) and node.arg in renames:
            edits.append(_replace_name(source, node, node.arg, renames[node.arg]))
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
                _replace_name(source, keyword, keyword.arg, renames[keyword.arg])
                for keyword in node.keywords
                if keyword.arg and keyword.arg in renamed_parameters.get(callee or "", ())
            )
    return edits


def _renamed_names(source: Source, renames: dict[str, str]) -> list[Edit]:
    """Every ``Name`` node spelled as a key of ``renames``, renamed."""
    return [
        _replace_name(source, node, node.id, renames[node.id])
        for node in ast.walk(source.tree)
        if isinstance(node, ast.Name) and node.id in renames
    ]


def _replace_name(source: Source, node: ast.AST, old: str, new: str) -> Edit:
    start = source.start(node)
    if source.text[start : start + len(old)] != old:
        raise _Skip(f"{old} is not at {node.lineno}:{node.col_offset}")  # type: ignore[attr-defined]
    return Edit(start, start + len(old), new)


class _Skip(Exception):
    """The file has a form the transformation does not handle: it is not applied."""


def _guarded(transformation: Transformation) -> Transformation:
    def run(source: Source) -> list[Edit] | None:
        try:
            return transformation(source)
        except _Skip:
            return None

    run.__name__ = transformation.__name__
    run.__doc__ = transformation.__doc__
    return run


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


@_guarded
def rename_variables(source: Source) -> list[Edit] | None:
    """``device`` -> ``dev``, ``model`` -> ``net``... (``VARIABLE_RENAMES``), every use."""
    unsafe = _unsafe_names(source.tree)
    renames = {
        old: new
        for old, new in VARIABLE_RENAMES.items()
        if old not in unsafe and new not in source.identifiers
    }
    return _rename(source, renames)


@_guarded
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


@_guarded
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


@_guarded
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


@_guarded
def longhand_torch(source: Source) -> list[Edit] | None:
    """torch's module aliases and from-imports spelled long-hand (``_longhand``)."""
    return _longhand(source, _torch_module)


@_guarded
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


@_guarded
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
                    raise _Skip(f"the alias {name} is not where ast says")
                edits.append(Edit(source.end(alias) - len(name), source.end(alias), renames[name]))
    return edits + _renamed_names(source, renames)


# -- where code lives -----------------------------------------------------------------
def _script_tail(source: Source) -> tuple[list[ast.stmt], ast.If | None]:
    """The module's last statements that are neither imports nor definitions (the
    script), or the body of a closing ``if __name__ == "__main__":``."""
    body = source.tree.body
    tail: list[ast.stmt] = []
    for statement in reversed(body):
        if isinstance(
            statement,
            ast.Import | ast.ImportFrom | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef,
        ):
            break
        tail.insert(0, statement)
    if tail and isinstance(tail[0], ast.Expr) and isinstance(tail[0].value, ast.Constant):
        tail = tail[1:]
    if len(tail) == 1 and _is_main_guard(tail[0]):
        guard = tail[0]
        assert isinstance(guard, ast.If)
        return (guard.body, guard) if not guard.orelse else ([], None)
    return tail, None


def _is_main_guard(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.If)
        and isinstance(statement.test, ast.Compare)
        and isinstance(statement.test.left, ast.Name)
        and statement.test.left.id == "__name__"
    )


def _tail_bindings(tail: list[ast.stmt]) -> tuple[set[str], set[str]]:
    """Names the tail binds in its own scope, and those it binds in ways an attribute
    cannot replace (imports, definitions, walrus, ``except ... as``)."""
    bound: set[str] = set()
    fixed: set[str] = set()
    stack: list[ast.AST] = list(tail)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            bound.add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            fixed.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.NamedExpr):
            fixed.add(node.target.id)
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            fixed.add(node.name)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            raise _Skip("a global statement in the script")
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            fixed.add(node.name)
            stack.extend(node.decorator_list)
            continue  # its own scope
        if isinstance(node, (ast.Lambda, *_COMPREHENSIONS)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return bound | fixed, fixed


def _read_elsewhere(source: Source, tail: list[ast.stmt]) -> set[str]:
    """Names read inside the module's functions and classes outside the tail."""
    inside = {id(n) for s in tail for n in ast.walk(s)}
    read: set[str] = set()
    for node in ast.walk(source.tree):
        if isinstance(node, _SCOPES) and id(node) not in inside:
            read.update(
                n.id
                for n in ast.walk(node)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
            )
    return read


def _indent_lines(source: Source, first: int, last: int, by: str) -> list[Edit]:
    return [
        Edit(source.line_start(line), source.line_start(line), by)
        for line in range(first, last + 1)
        if line not in source.string_interiors and source.lines[line - 1].strip()
    ]


def _wrap(source: Source, header: str, call: str, per_name: str | None) -> list[Edit] | None:
    """The script (``_script_tail``) moved under ``header`` (one or more lines, each
    opening a block), ``call`` appended at the module's end; names the module's
    functions read are declared ``global``; ``per_name`` (``"self"``) turns every other
    name the script binds into an attribute of it."""
    tail, guard = _script_tail(source)
    if len(tail) < 2 or any(isinstance(s, ast.ImportFrom) and any(
            a.name == "*" for a in s.names) for s in tail):  # fmt: skip
        return None
    bound, fixed = _tail_bindings(tail)
    shared = sorted(bound & _read_elsewhere(source, tail))
    levels = header.split("\n")
    opened = "".join(f"{'    ' * i}{line}\n" for i, line in enumerate(levels))
    first, last = tail[0].lineno, tail[-1].end_lineno or tail[-1].lineno
    if guard is not None:  # the guard's line becomes the header; its body moves in
        start, end = source.line_start(guard.lineno), source.line_start(first)
        extra = "    " * (len(levels) - 1)
        inner = source.indent(first) + extra
        call = f'if __name__ == "__main__":\n    {call}'
    else:
        start = end = source.line_start(first)
        extra = inner = "    " * len(levels)
    if shared:
        opened += f"{inner}global {', '.join(shared)}\n"
    edits = [Edit(start, end, opened)]
    if extra:
        edits += _indent_lines(source, first, last, extra)
    newline = "" if source.text.endswith("\n") else "\n"
    edits.append(Edit(len(source.text), len(source.text), f"{newline}\n\n{call}\n"))
    if per_name:
        names = bound - fixed - set(shared)
        if _binds_anywhere_nested(tail, names | {per_name}):
            raise _Skip("a nested scope rebinds a script name")
        for statement in tail:
            for node in ast.walk(statement):
                if isinstance(node, ast.Name) and node.id in names:
                    edits.append(_replace_name(source, node, node.id, f"{per_name}.{node.id}"))
    return edits


def _binds_anywhere_nested(tail: list[ast.stmt], names: set[str]) -> bool:
    for statement in tail:
        for scope in ast.walk(statement):
            if isinstance(scope, (*_SCOPES, *_COMPREHENSIONS)):
                for node in ast.walk(scope):
                    if isinstance(node, ast.arg) and node.arg in names:
                        return True
                    if (
                        isinstance(node, ast.Name)
                        and isinstance(node.ctx, ast.Store)
                        and node.id in names
                    ):
                        return True
    return False


@_guarded
def into_main(source: Source) -> list[Edit] | None:
    """The module's script moved into ``def main():`` (called at the end)."""
    name = source.fresh("main")
    return _wrap(source, f"def {name}():", f"{name}()", None)


@_guarded
def into_class(source: Source) -> list[Edit] | None:
    """The module's script moved into a method, its names turned into ``self.`` attributes."""
    name = source.fresh("Script")
    return _wrap(source, f"class {name}:\ndef run(self):", f"{name}().run()", "self")


@_guarded
def main_guard(source: Source) -> list[Edit] | None:
    """The module's script put under ``if __name__ == "__main__":``."""
    if _script_tail(source)[1] is not None:
        return None  # already under one
    return _wrap(source, 'if __name__ == "__main__":', "pass", None)


# -- layout --------------------------------------------------------------------------
def _outer_calls(source: Source) -> Iterator[ast.Call]:
    """Calls not inside another call, on one line, not in an f-string."""
    stack: list[ast.AST] = [source.tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call):
            if node.lineno == node.end_lineno and not source.in_fstring(node):
                yield node
                continue
        stack.extend(ast.iter_child_nodes(node))


def _arguments(call: ast.Call) -> list[ast.AST]:
    return sorted([*call.args, *call.keywords], key=lambda n: (n.lineno, n.col_offset))  # type: ignore[attr-defined]


@_guarded
def split_calls(source: Source) -> list[Edit] | None:
    """Each one-line call (the outermost of a line) split one argument a line, as black
    writes a long call."""
    edits = []
    for call in _outer_calls(source):
        arguments = _arguments(call)
        if not arguments or source.start(arguments[0]) <= source.end(call.func):
            continue  # none, or a bare generator (its node starts at the call's parenthesis)
        indent = source.indent(call.lineno)
        for argument in arguments:
            position = source.start(argument)
            edits.append(Edit(position, position, f"\n{indent}    "))
        close = source.end(call) - 1
        if source.text[close] != ")":
            continue
        edits.append(Edit(close, close, f"\n{indent}"))
    return edits


@_guarded
def join_lines(source: Source) -> list[Edit] | None:
    """Every line break inside brackets that no comment ends, joined: a call written
    over several lines becomes one line."""
    edits, depth, previous = [], 0, None
    tokens = source.tokens
    for index, token in enumerate(tokens):
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
        elif token.type == tokenize.NL and depth > 0 and previous is not None:
            if previous.type == tokenize.COMMENT:
                continue
            following = tokens[index + 1]
            while following.type in (tokenize.NL, tokenize.COMMENT):
                break
            if following.type == tokenize.COMMENT:
                continue
            start = source.token_offset(previous.end)
            end = source.token_offset(following.start)
            tight = previous.string in "([{" or following.string in ")]}"
            edits.append(Edit(start, end, "" if tight else " "))
        if token.type not in (tokenize.NL,):
            previous = token
    return _without_overlaps(edits)


def _without_overlaps(edits: list[Edit]) -> list[Edit]:
    kept: list[Edit] = []
    for edit in sorted(edits):
        if kept and edit.start < kept[-1].end:
            continue
        kept.append(edit)
    return kept


@_guarded
def join_statements(source: Source) -> list[Edit] | None:
    """Pairs of short one-line statements of a block joined by ``;``."""
    commented = {t.start[0] for t in source.tokens if t.type == tokenize.COMMENT}
    edits = []
    for node in ast.walk(source.tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            index = 0
            while index + 1 < len(block):
                a, b = block[index], block[index + 1]
                if (
                    _joinable(source, a, commented)
                    and _joinable(source, b, commented)
                    and (b.lineno == a.lineno + 1)
                ):
                    edits.append(Edit(source.end(a), source.start(b), "; "))
                    index += 2
                else:
                    index += 1
    return edits


def _joinable(source: Source, statement: ast.stmt, commented: set[int]) -> bool:
    simple = not isinstance(
        statement,
        ast.If
        | ast.For
        | ast.AsyncFor
        | ast.While
        | ast.With
        | ast.AsyncWith
        | ast.Try
        | ast.FunctionDef
        | ast.AsyncFunctionDef
        | ast.ClassDef
        | ast.Match,
    ) and not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant))
    return (
        simple
        and statement.lineno == statement.end_lineno
        and statement.lineno not in commented
        and source.begins_line(statement)
        and len(source.lines[statement.lineno - 1]) < 60
        and ";" not in source.lines[statement.lineno - 1]
    )


@_guarded
def parenthesize(source: Source) -> list[Edit] | None:
    """Parentheses around every assigned or returned value and every call argument."""
    edits = []
    for node in ast.walk(source.tree):
        wrapped: list[ast.AST] = []
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Return) and node.value:
            wrapped.append(node.value)
        elif isinstance(node, ast.Call) and not source.in_fstring(node):
            wrapped += [a for a in node.args if not isinstance(a, ast.Starred)]
            wrapped += [k.value for k in node.keywords if k.arg]
        for value in wrapped:
            if isinstance(value, ast.Yield | ast.YieldFrom | ast.NamedExpr) or source.in_fstring(
                value
            ):
                continue
            if isinstance(value, ast.GeneratorExp) and source.text[source.start(value)] != "(":
                continue
            edits.append(Edit(source.start(value), source.start(value), "("))
            edits.append(Edit(source.end(value), source.end(value), ")"))
    return edits


@_guarded
def parenthesize_lines(source: Source) -> list[Edit] | None:
    """A one-line assignment of a call written as black writes a long one:
    ``x = (`` / ``    call(...)`` / ``)``."""
    edits = []
    for node in ast.walk(source.tree):
        if (
            isinstance(node, ast.Assign | ast.AnnAssign)
            and isinstance(node.value, ast.Call)
            and node.lineno == node.end_lineno
            and source.begins_line(node)
            and not source.text[source.end(node) :].startswith(";")
        ):
            indent = source.indent(node.lineno)
            edits.append(
                Edit(source.start(node.value), source.start(node.value), f"(\n{indent}    ")
            )
            edits.append(Edit(source.end(node.value), source.end(node.value), f"\n{indent})"))
    return edits


# -- values routed ---------------------------------------------------------------------
def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def _routable(source: Source, labelled: set[int]) -> Iterator[tuple[ast.stmt, ast.expr]]:
    """(statement, argument) for each call argument spelled as a name or ``a.b`` on a
    statement that starts its line and covers a labelled line, in file order; what the
    statement itself binds in a nested scope is not routed."""
    imported = {
        (a.asname or a.name).split(".")[0]
        for n in ast.walk(source.tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    defined = {
        n.name for n in ast.walk(source.tree) if isinstance(n, _SCOPES) and hasattr(n, "name")
    }
    for statement in _statements(source.tree):
        header = _header(statement)
        if header is None or not source.begins_line(statement):
            continue
        lines = set(range(statement.lineno, _header_end(statement) + 1))
        if not lines & labelled:
            continue
        nested = {
            n.id if isinstance(n, ast.Name) else n.arg
            for part in header
            for scope in ast.walk(part)
            if isinstance(scope, (ast.Lambda, *_COMPREHENSIONS))
            for n in ast.walk(scope)
            if isinstance(n, ast.arg) or (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
        }
        for part in header:
            for call in ast.walk(part):
                if not isinstance(call, ast.Call) or source.in_fstring(call):
                    continue
                for argument in [*call.args, *(k.value for k in call.keywords if k.arg)]:
                    dotted = _dotted(argument)
                    root = dotted.split(".")[0] if dotted else None
                    if root and root not in imported | defined | nested and root != "self":
                        yield statement, argument
                    elif dotted and root == "self" and "." in dotted:
                        yield statement, argument


def _statements(tree: ast.AST) -> Iterator[ast.stmt]:
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            yield node


def _header(statement: ast.stmt) -> list[ast.AST] | None:
    """The parts of ``statement`` evaluated once, before its body, or ``None``."""
    if isinstance(statement, ast.If):
        return [statement.test]
    if isinstance(statement, ast.For | ast.AsyncFor):
        return [statement.iter]
    if isinstance(statement, ast.With | ast.AsyncWith):
        return [i.context_expr for i in statement.items]
    if isinstance(
        statement,
        ast.While | ast.Try | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Match,
    ):
        return None
    return [statement]


def _header_end(statement: ast.stmt) -> int:
    header = _header(statement) or [statement]
    return max(getattr(part, "end_lineno", statement.lineno) for part in header)


def _route(source: Source, how: str) -> list[Edit] | None:
    """Each argument ``_routable`` finds handed over through ``how``: an assignment, a
    tuple unpack, an attribute of a config namespace, a dict, or a helper's return."""
    edits: list[Edit] = []
    done: set[int] = set()
    keys: dict[str, str] = {}
    config, helper = source.fresh("cfg"), source.fresh("passthrough")
    for statement, argument in _routable(source, set(source.labels)):
        if id(argument) in done or source.lines[statement.lineno - 1].lstrip().startswith("elif"):
            continue
        done.add(id(argument))
        text = source.segment(argument)
        if "\n" in text:
            continue
        last = text.rsplit(".", 1)[-1]
        prefix = suffix = ""  # the line written before: prefix + text + suffix
        if how in ("assignment", "tuple"):
            use = source.fresh("value")
            prefix = f"{use} = " if how == "assignment" else f"{use}, _ = "
            suffix = "" if how == "assignment" else ", None"
        elif how == "namespace":
            last = "wrapped" if last == "module" else last  # cfg.module reads as DDP's .module
            if text not in keys:
                keys[text] = last if last not in keys.values() else source.fresh(last)
            use = f"{config}.{keys[text]}"
            prefix = f"{use} = "
        elif how == "dict":
            name = source.fresh("options")
            prefix, suffix, use = f"{name} = {{{last!r}: ", "}", f"{name}[{last!r}]"
        else:
            use = f"{helper}({text})"
        start, end = source.start(argument), source.end(argument)
        if prefix:  # the argument's code moves to the line written before
            at, indent = source.line_start(statement.lineno), source.indent(statement.lineno)
            copy = (len(indent) + len(prefix), start, len(text))
            edits.append(Edit(at, at, f"{indent}{prefix}{text}{suffix}\n", copy))
            edits.append(Edit(start, end, use))
        else:
            edits.append(Edit(start, end, use, (len(helper) + 1, start, len(text))))
    if not edits:
        return None
    at = _first_code(source)
    if how == "namespace":
        edits.append(Edit(at, at, f"import argparse\n\n{config} = argparse.Namespace()\n"))
    elif how == "helper":
        edits.append(Edit(at, at, f"def {helper}(value):\n    return value\n\n\n"))
    return _without_overlaps_keep_insertions(edits)


def _without_overlaps_keep_insertions(edits: list[Edit]) -> list[Edit]:
    """Drop replacements nested in another (an argument inside a routed argument)."""
    kept: list[Edit] = []
    for edit in sorted(edits, key=lambda e: (e.start, -e.end)):
        if edit.start < edit.end and any(k.start <= edit.start < k.end for k in kept):
            continue
        kept.append(edit)
    return kept


def _first_code(source: Source) -> int:
    """Where module code may be inserted: after the docstring and ``__future__`` imports."""
    for statement in source.tree.body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue
        if isinstance(statement, ast.ImportFrom) and statement.module == "__future__":
            continue
        return source.line_start(statement.lineno)
    return len(source.text)


def _router(how: str, doc: str) -> Transformation:
    def route(source: Source) -> list[Edit] | None:
        try:
            return _route(source, how)
        except _Skip:
            return None

    route.__name__ = f"through_{how}"
    route.__doc__ = doc
    return route


# -- spellings -----------------------------------------------------------------------
@_guarded
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
    return _without_overlaps(edits)


@_guarded
def device_strings_concatenated(source: Source) -> list[Edit] | None:
    """``f"cuda:{rank}"`` -> ``"cuda:" + str(rank)`` (and ``.format``'s too)."""
    return _device_strings(source, "concat")


@_guarded
def device_strings_formatted(source: Source) -> list[Edit] | None:
    """``f"cuda:{rank}"`` -> ``"cuda:{}".format(rank)`` (and the concatenation's too)."""
    return _device_strings(source, "format")


@_guarded
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


@_guarded
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


@_guarded
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
        spelled = _dotted(node.func)
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
    following = [a for a in _arguments(call) if source.start(a) > source.start(argument)]
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
        into_main,
        into_class,
        main_guard,
        split_calls,
        join_lines,
        join_statements,
        parenthesize,
        parenthesize_lines,
        quotes,
        device_strings_concatenated,
        device_strings_formatted,
        device_strings_interpolated,
        *(
            _router(how, doc)
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
