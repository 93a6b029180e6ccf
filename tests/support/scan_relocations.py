"""Transformations that move code: the script into a function or a class, calls split
and joined, parentheses, and values routed through a copy, a tuple, a config namespace,
a dict or a helper (``scan_transformations`` has the others and the registry)."""

from __future__ import annotations

import ast
import tokenize
from collections.abc import Iterator

from tests.support.scan_metamorphic import Edit, Skip, Source, Transformation, guarded, replace_name

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


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
            raise Skip("a global statement in the script")
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
            raise Skip("a nested scope rebinds a script name")
        for statement in tail:
            for node in ast.walk(statement):
                if isinstance(node, ast.Name) and node.id in names:
                    edits.append(replace_name(source, node, node.id, f"{per_name}.{node.id}"))
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


@guarded
def into_main(source: Source) -> list[Edit] | None:
    """The module's script moved into ``def main():`` (called at the end)."""
    name = source.fresh("main")
    return _wrap(source, f"def {name}():", f"{name}()", None)


@guarded
def into_class(source: Source) -> list[Edit] | None:
    """The module's script moved into a method, its names turned into ``self.`` attributes."""
    name = source.fresh("Script")
    return _wrap(source, f"class {name}:\ndef run(self):", f"{name}().run()", "self")


@guarded
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


def call_arguments(call: ast.Call) -> list[ast.AST]:
    return sorted([*call.args, *call.keywords], key=lambda n: (n.lineno, n.col_offset))  # type: ignore[attr-defined]


@guarded
def split_calls(source: Source) -> list[Edit] | None:
    """Each one-line call (the outermost of a line) split one argument a line, as black
    writes a long call."""
    edits = []
    for call in _outer_calls(source):
        arguments = call_arguments(call)
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


@guarded
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
            if following.type in (tokenize.NL, tokenize.COMMENT):
                continue  # a blank line or a comment's: the next break joins
            start = source.token_offset(previous.end)
            end = source.token_offset(following.start)
            tight = previous.string in "([{" or following.string in ")]}"
            edits.append(Edit(start, end, "" if tight else " "))
        if token.type not in (tokenize.NL,):
            previous = token
    return without_overlaps(edits)


def without_overlaps(edits: list[Edit]) -> list[Edit]:
    kept: list[Edit] = []
    for edit in sorted(edits):
        if kept and edit.start < kept[-1].end:
            continue
        kept.append(edit)
    return kept


@guarded
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


@guarded
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


@guarded
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
def dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted(node.value)
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
                    spelled = dotted(argument)
                    root = spelled.split(".")[0] if spelled else None
                    if root and root not in imported | defined | nested and root != "self":
                        yield statement, argument
                    elif spelled and root == "self" and "." in spelled:
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


def router(how: str, doc: str) -> Transformation:
    def route(source: Source) -> list[Edit] | None:
        try:
            return _route(source, how)
        except Skip:
            return None

    route.__name__ = f"through_{how}"
    route.__doc__ = doc
    return route
