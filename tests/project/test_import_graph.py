"""The package's imports point one way: no module reaches, however indirectly, back to itself;
and no private name (``_name``) is imported across a module border.

Every import a reader follows counts: module level, inside functions, and
``importlib.import_module`` with a literal name; relative imports are resolved. Imports
under ``if TYPE_CHECKING:`` run only for type checkers and do not count. The meta-tests
build a tiny package with a circle of each kind and show that the check finds it, so
the main test cannot pass vacuously.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import torch2jax_device

PACKAGE = Path(torch2jax_device.__file__).parent


def module_names(root: Path) -> dict[str, Path]:
    """``{dotted module name: file}`` for every module of the package at ``root``."""
    names = {}
    for file in root.rglob("*.py"):
        parts = list(file.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = file
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.AST]:
    """Every import statement and ``importlib.import_module`` call, outside TYPE_CHECKING."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif (
            isinstance(node, ast.Call)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (isinstance(node.func, ast.Name) and node.func.id == "import_module")
            )
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    """A relative import's target, seen from ``module``."""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def import_graph(root: Path) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}``."""
    modules = module_names(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for module, file in modules.items():
        is_package = file.name == "__init__.py"
        for node in _imports(ast.parse(file.read_text(encoding="utf-8"), str(file))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = (
                    _absolute(module, is_package, node.level, node.module)
                    if node.level
                    else node.module or ""
                )
                # ``from pkg import sub`` imports the submodule; ``from mod import name``
                # the module that holds the name.
                targets = [
                    f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                    for alias in node.names
                ]
            elif isinstance(node, ast.Call):
                name = node.args[0].value  # type: ignore[attr-defined]
                anchored = name.startswith(".")
                if anchored:
                    level = len(name) - len(name.lstrip("."))
                    name = _absolute(module, is_package, level, name.lstrip(".") or None)
                targets = [name]
            for target in targets:
                if target in modules and target != module:
                    graph[module].add(target)
    return graph


def circles(graph: dict[str, set[str]], ignored: frozenset[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    edges = {
        module: sorted(t for t in targets if (module, t) not in ignored)
        for module, targets in graph.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, position = work.pop()
            if position == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            children = edges[node]
            if position < len(children):
                work.append((node, position + 1))
                child = children[position]
                if child not in index:
                    work.append((child, 0))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def describe(found: list[list[str]], graph: dict[str, set[str]]) -> str:
    lines = []
    for component in found:
        members = set(component)
        lines.append("circle: " + ", ".join(component))
        lines.extend(
            f"    {module} -> {target}"
            for module in component
            for target in sorted(graph[module] & members)
        )
    return "\n".join(lines)


def test_the_package_has_no_import_circles() -> None:
    graph = import_graph(PACKAGE)
    found = circles(graph, frozenset())
    assert not found, "\n" + describe(found, graph)


def _package(root: Path, files: dict[str, str]) -> Path:
    package = root / "tiny"
    for name, text in {"__init__.py": "", **files}.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


@pytest.mark.parametrize(
    "files",
    [
        pytest.param({"a.py": "from . import b\n", "b.py": "from .a import x\n"}, id="module"),
        pytest.param(
            {"a.py": "import tiny.b\n", "b.py": "def f():\n    from tiny import a\n"},
            id="inside-a-function",
        ),
        pytest.param(
            {
                "a.py": "from .sub import c\n",
                "sub/__init__.py": "",
                "sub/c.py": "import importlib\nimportlib.import_module('tiny.a')\n",
            },
            id="import-module",
        ),
        pytest.param(
            {
                "a.py": "from .sub.c import f\n",
                "sub/__init__.py": "",
                "sub/c.py": "def f():\n    from ..a import g\n",
            },
            id="relative-two-levels",
        ),
    ],
)
def test_a_circle_is_found(tmp_path: Path, files: dict[str, str]) -> None:
    graph = import_graph(_package(tmp_path, files))
    found = circles(graph, frozenset())
    assert len(found) == 1 and "tiny.a" in found[0], describe(found, graph)


def test_type_checking_imports_and_other_packages_do_not_count(tmp_path: Path) -> None:
    files = {
        "a.py": "from . import b\nimport numpy\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n",
    }
    assert circles(import_graph(_package(tmp_path, files)), frozenset()) == []


def private_imports(root: Path) -> list[str]:
    """``module: from x import _name`` for every private name of the package imported
    across a module border (a submodule imported as a name is a module, not a name)."""
    modules = module_names(root)
    found = []
    for module, file in modules.items():
        is_package = file.name == "__init__.py"
        for node in _imports(ast.parse(file.read_text(encoding="utf-8"), str(file))):
            if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
                continue
            source = (
                _absolute(module, is_package, node.level, node.module)
                if node.level
                else node.module or ""
            )
            if source not in modules:
                continue  # another package's names are its own business
            found.extend(
                f"{module}: from {source} import {alias.name}"
                for alias in node.names
                if alias.name.startswith("_")
                and not alias.name.endswith("__")  # __version__ and its kind are public
                and f"{source}.{alias.name}" not in modules
            )
    return found


def test_no_private_name_crosses_a_module_border() -> None:
    assert private_imports(PACKAGE) == []


def test_a_private_import_is_found(tmp_path: Path) -> None:
    files = {"a.py": "def _hidden(): pass\n", "b.py": "from .a import _hidden\nfrom . import a\n"}
    assert private_imports(_package(tmp_path, files)) == ["tiny.b: from tiny.a import _hidden"]
