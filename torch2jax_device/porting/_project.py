"""A project: the files scanned together, read as Python imports them (``scan DIR``).

Module names come from where the files lie: a folder is a package when its
``__init__.py`` is among the files scanned, and a file's module name runs from the
first folder above it that is not one (the folder Python's path would hold: the
script's own folder, ``src/``), and, to a script higher up, from each folder above it
up to the top of the files scanned (namespace packages: ``from models.net import
Net`` without ``models/__init__.py``). An import is followed when it names a module of the
project: an absolute one (``import utils``, ``from pkg.utils import device``) among the
modules of the importing file's own root first, then in a root above it (a script of
``scripts/`` run from the project's top) or a ``src/`` folder when exactly one file there
has that name; a relative one (``from .utils import device``) from the importing
file's package. Anything else (the standard library, torch, a module that was not
scanned, a name two roots both hold) is not the project's, and is treated as the
scanner treats third-party code.

What flows along an import (``attach``):

* what a name holds (``Values.imported``): a model class of ``model.py`` that is a Flax
  NNX module, a ``torch.device`` chosen in ``utils.py``, what ``get_device()`` returns;
  a name ``from models import *`` binds too (``models/__init__.py`` re-exporting
  ``from .lenet import *``), when exactly one of the modules it imports * from binds it
  and exports it (``__all__``, else its public names);
* where a changed value goes (``Flow.importers``): a rewrite of ``device`` in
  ``utils.py`` is checked against every use of it in the modules that import it, and
  their reasons name the file (``train.py:12``);
* who joins the job: a call of a project function that creates the process group
  (``init_distributed()`` calling ``deepspeed.init_distributed``) counts as that join for
  the start-up order (``_startup``).

Files that import one another, directly or not, form one program (``programs``):
rewrites are planned over a program's files and never over unrelated ones, so a reason
never cites a file its own does not reach. The work is bounded: the index is one walk of
each file's imports, a name is followed into each importer once per question (an import
cycle ends there), and each file's escape analysis spends its own budget.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import PurePath

from ._constructions import construction
from ._flow import is_jitted, parameter_for
from ._names import Binding
from ._source import SourceFile
from ._values import UNKNOWN, Values
from ._written import short_text

__all__ = ["Project"]

# A use of a module-level name in a module that imports it: (that module, the node that
# holds the value there: a read of the imported name, or ``utils.device``).
_Use = tuple[SourceFile, ast.expr]
# Where a name of the project resolves: (its file, the module-level name, or None for
# the module itself).
_Target = tuple[SourceFile, str | None]
_LINK = ", which imports it: "
_LINE = re.compile(r"\bline (\d+)")
# How many questions about imports may be open at once (a chain of re-exports, a value
# passed from module to module): beyond, the answer is the cautious one.
_DEEPEST = 64


class Project:
    """The files of one scan, their module names and the imports between them.

    Examples:
        >>> from torch2jax_device.porting._source import SourceFile
        >>> files = [SourceFile("p/utils.py", "device = 'cpu'\\n"),
        ...          SourceFile("p/train.py", "from utils import device\\nprint(device)\\n"),
        ...          SourceFile("q/alone.py", "import os\\n")]
        >>> project = Project(files)
        >>> [[f.path for f in program] for program in project.programs()]
        [['p/utils.py', 'p/train.py'], ['q/alone.py']]
    """

    def __init__(self, files: Sequence[SourceFile]) -> None:
        self.files = list(files)
        paths = {PurePath(os.path.normpath(f.path)) for f in self.files}
        packages = {path.parent for path in paths if path.name == "__init__.py"}
        self._root: dict[int, PurePath] = {}
        self._module: dict[int, str] = {}
        # module name -> the files it names, each with the root it is named from
        self._index: dict[str, list[tuple[SourceFile, PurePath]]] = {}
        self._prefixes: set[str] = set()
        self._names: dict[int, list[str]] = {}  # id of a file -> its names, from its root up
        top = _common_folder(paths)
        for file in self.files:
            root, module = _module_name(PurePath(os.path.normpath(file.path)), packages)
            self._root[id(file)], self._module[id(file)] = root, module
            # Folders without an __init__.py above the root are namespace packages to a
            # script run from higher up (``from models.net import Net``): the names from
            # each folder up to the top of the files scanned. A notebook is no module:
            # nothing imports it.
            while not file.notebook:
                self._index.setdefault(module, []).append((file, root))
                self._names.setdefault(id(file), []).append(module)
                parts = module.split(".")
                self._prefixes.update(".".join(parts[:k]) for k in range(1, len(parts)))
                if top is None or root == top or top not in root.parents or not root.name:
                    break
                root, module = root.parent, f"{root.name}.{module}"
        self._by_id = {id(file): file for file in self.files}
        # (id of a file, a module-level name) -> its uses in the modules importing it.
        self._uses: dict[tuple[int, str], list[_Use]] = {}
        # id of a file -> why any of its names may be read where the scanner cannot follow
        # (``from utils import *``, the module object handed on), citing where.
        self._opaque: dict[int, str] = {}
        self._edges: dict[int, set[int]] = {id(file): set() for file in self.files}
        self._imported: set[int] = set()  # files some other project file imports
        # (id of a file, a module-level name) -> the modules importing it at their own
        # module level, and the name it has there (what others may import from them).
        self._reexports: dict[tuple[int, str], list[tuple[SourceFile, str]]] = {}
        self._active: set[tuple[int, str, str]] = set()  # questions being answered
        # (id of a file, a module-level name) -> where another module assigns it
        # (``utils.device = ...``): what it holds is then not what its module binds.
        self._written: dict[tuple[int, str], str] = {}
        self._tops: dict[int, set[str]] = {}  # id of a file -> ``_tops_seen``
        # id of a file -> the project modules it imports * from, in order.
        self._stars: dict[int, list[SourceFile]] = {}
        for file in self.files:
            self._index_imports(file)

    # -- modules ----------------------------------------------------------------------
    def programs(self) -> list[list[SourceFile]]:
        """The files grouped by the imports between them (either way), in scan order."""
        group = {key: key for key in self._edges}

        def find(key: int) -> int:
            while group[key] != key:
                group[key] = group[group[key]]
                key = group[key]
            return key

        for key, targets in self._edges.items():
            for target in targets:
                group[find(key)] = find(target)
        found: dict[int, list[SourceFile]] = {}
        for file in self.files:
            found.setdefault(find(id(file)), []).append(file)
        return list(found.values())

    def resolve(self, file: SourceFile, dotted: str) -> _Target | None:
        """The project module ``dotted`` names when ``file`` imports it, or the module and
        one of its module-level names (``utils.device``); ``None`` when it is not the
        project's, or names an attribute of such a value (``utils.device.type``)."""
        parts = dotted.split(".")
        for k in range(len(parts), max(0, len(parts) - 2), -1):
            target = self._lookup(file, ".".join(parts[:k]))
            if target is not None:
                return target, (parts[k] if k < len(parts) else None)
        return None

    def _lookup(self, file: SourceFile, module: str) -> SourceFile | None:
        found = self._index.get(module, [])
        root = self._root[id(file)]
        same_root = [f for f, named_from in found if named_from == root]
        if same_root:
            return same_root[0] if len(same_root) == 1 else None
        # Another root is on the path when the script runs from above it (``python -m``,
        # ``PYTHONPATH=.``) or installs it (a ``src/`` layout).
        reachable = [
            f for f, named_from in found if named_from in root.parents or named_from.name == "src"
        ]
        return reachable[0] if len(reachable) == 1 else None

    def _absolute(self, file: SourceFile, node: ast.ImportFrom) -> str | None:
        """The absolute module an ``ImportFrom`` names (its level resolved)."""
        if not node.level:
            return node.module
        # Its own name first, then the names from the folders above (a module of a
        # namespace package, ns/a.py's `from . import b`, is ns.a to a script above ns).
        for name in self._names.get(id(file), [self._module[id(file)]]):
            package = name.split(".")
            if PurePath(file.path).name != "__init__.py":
                package = package[:-1]
            if package and node.level <= len(package):
                base = package[: len(package) - (node.level - 1)]
                return ".".join([*base, *([node.module] if node.module else [])])
        return None  # not in a package, or beyond its top (Python refuses it too)

    # -- the index of imports ---------------------------------------------------------
    def _index_imports(self, file: SourceFile) -> None:
        names = file.names
        for node in ast.walk(file.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self._edge(file, alias.name)
            elif isinstance(node, ast.ImportFrom):
                module = self._absolute(file, node)
                if module is None:
                    continue
                self._edge(file, module)
                for alias in node.names:
                    if alias.name == "*":
                        target = self.resolve(file, module)
                        if target is not None:
                            self._opaque.setdefault(
                                id(target[0]), f"{file.path}:{node.lineno}: imports * from it"
                            )
                            if target[1] is None:
                                self._stars.setdefault(id(file), []).append(target[0])
                    else:
                        self._edge(file, f"{module}.{alias.name}")
        for scope in names.scopes:
            for bindings in scope.bindings.values():
                for binding in bindings:
                    dotted = self._imported_as(file, binding)
                    if dotted is None:
                        continue
                    for load in names.loads(binding):
                        self._index_load(file, load, dotted)
                    target = self.resolve(file, dotted) if scope is names.module else None
                    if target is not None and target[1] is not None:
                        key = (id(target[0]), target[1])
                        self._reexports.setdefault(key, []).append((file, binding.name))

    def _edge(self, file: SourceFile, dotted: str) -> None:
        target = self.resolve(file, dotted)
        if target is not None and target[0] is not file:
            self._edges[id(file)].add(id(target[0]))
            self._imported.add(id(target[0]))

    def _imported_as(self, file: SourceFile, binding: Binding) -> str | None:
        """The absolute dotted name an import binding stands for."""
        if binding.kind == "import" and binding.origin is not None:
            return binding.origin
        alias = binding.node
        statement = file.names.parents.get(alias) if isinstance(alias, ast.alias) else None
        if binding.kind == "other" and isinstance(statement, ast.ImportFrom):
            assert isinstance(alias, ast.alias)
            module = self._absolute(file, statement)
            return None if module is None else f"{module}.{alias.name}"
        return None

    def _index_load(self, file: SourceFile, load: ast.Name, dotted: str) -> None:
        """Record what the read ``load`` of an import reaches: ``utils.device`` climbs the
        attributes until a module-level name of a project module is reached."""
        node: ast.expr = load
        while True:
            target = self.resolve(file, dotted)
            if target is not None and target[1] is not None:
                key = (id(target[0]), target[1])
                self._uses.setdefault(key, []).append((file, node))
                if not isinstance(getattr(node, "ctx", None), ast.Load):
                    self._written.setdefault(key, f"{file.path}:{node.lineno}")
                return
            if target is None and dotted not in self._prefixes:
                return  # not the project's
            parent = file.names.parents.get(node)
            if not (isinstance(parent, ast.Attribute) and parent.value is node):
                if target is not None:  # the module object itself, handed on
                    self._opaque.setdefault(
                        id(target[0]),
                        f"{file.path}:{node.lineno}: the module {dotted} is used as a value "
                        f"({ast.unparse(parent)[:60] if parent is not None else dotted})",
                    )
                return
            node, dotted = parent, f"{dotted}.{parent.attr}"

    # -- what flows along imports -----------------------------------------------------
    def is_imported(self, file: SourceFile) -> bool:
        """Some other file of the project imports ``file``."""
        return id(file) in self._imported

    def uses(self, file: SourceFile, name: str) -> tuple[list[_Use], str]:
        """Every use of ``file``'s module-level ``name`` in the project's other modules,
        through re-exports (``from utils import device`` in a module that another
        imports it from); and why some may not be followed (``""`` when all can)."""
        found: list[_Use] = []
        seen = {(id(file), name)}
        work = [(file, name)]
        while work:
            owner, current = work.pop()
            if id(owner) in self._opaque:
                return found, self._opaque[id(owner)]
            found.extend(self._uses.get((id(owner), current), []))
            for importer, again in self._reexports.get((id(owner), current), []):
                if (id(importer), again) not in seen:
                    seen.add((id(importer), again))
                    work.append((importer, again))
        return found, ""

    def follow(
        self,
        file: SourceFile,
        name: str,
        policy: str,
        rewritten: Callable[[ast.AST], bool],
        calls: bool,
    ) -> tuple[str | None, bool] | None:
        """Follow ``file``'s module-level ``name`` (what calling it returns, with
        ``calls``) into the modules that import it: ``None`` when no project file
        imports ``file``; else where it would reach code that cannot take the new value
        (naming the importing file and its line), and whether JAX code reads it."""
        if not self.is_imported(file):
            return None
        key = (id(file), name, "calls" if calls else "value")
        if key in self._active:
            return None, False  # an import cycle: followed where it started
        if len(self._active) > _DEEPEST:
            return f"{file.path}, more than {_DEEPEST} imports away (not followed further)", False
        self._active.add(key)
        try:
            uses, opaque = self.uses(file, name)
            if opaque:
                return f"{opaque}, so its names are read where the scanner cannot follow", False
            read_by_jax = False
            by_file: dict[int, list[ast.expr]] = {}
            for importer, node in uses:
                if calls:
                    call = importer.names.parents.get(node)
                    if not (isinstance(call, ast.Call) and call.func is node):
                        where = f"{importer.path}:{node.lineno}"
                        return f"{importer.path}, which hands {name} on ({where})", False
                    node = call
                by_file.setdefault(id(importer), []).append(node)
            for key_file, nodes in by_file.items():
                importer = self._by_id[key_file]
                reason, by_jax = importer.flow.follow(nodes, policy, rewritten)
                read_by_jax = read_by_jax or by_jax
                if reason:
                    reason = f"{importer.path}{_LINK}{cited(reason, importer)}"
                    outermost = sum(k[2] in ("value", "calls") for k in self._active) == 1
                    return _chain(reason) if outermost else reason, read_by_jax
            return None, read_by_jax
        finally:
            self._active.discard(key)

    def call_into(
        self,
        file: SourceFile,
        call: ast.Call,
        node: ast.AST,
        policy: str,
        rewritten: Callable[[ast.AST], bool],
    ) -> tuple[str | None, bool] | None:
        """Follow ``node``, an argument of ``call``, into the function of another project
        module that ``call`` calls (its parameter's reads there); ``None`` when ``call``
        is not of the project's code."""
        functions = list(self.functions(file, call))
        if not functions:
            return None
        passed = f"line {call.lineno}: passed to {short_text(call)}"
        read_by_jax = False
        for owner, function in functions:
            if is_jitted(function, owner.qualname):
                read_by_jax = True
                continue
            parameter = parameter_for(function, call, node)
            scope = owner.names.scope_by_node.get(function)
            params = (
                [b for b in scope.bindings.get(parameter, []) if b.kind == "param"]
                if parameter is not None and scope is not None
                else []
            )
            key = (id(function), parameter or "", "argument")
            if not params or len(self._active) > _DEEPEST:
                return passed, read_by_jax
            if key in self._active:
                continue  # a recursive call: followed where it started
            self._active.add(key)
            try:
                loads = [load for p in params for load in owner.names.loads(p)]
                reason, by_jax = owner.flow.follow(loads, policy, rewritten)
            finally:
                self._active.discard(key)
            read_by_jax = read_by_jax or by_jax
            if reason:
                where = f"{function.name} of {owner.path}"
                return f"{passed}, and in {where}: {cited(reason, owner)}", read_by_jax
        return None, read_by_jax

    def constructed(
        self, file: SourceFile, cls: ast.ClassDef
    ) -> list[tuple[Values, ast.Call]] | None:
        """Every call making ``file``'s module-level class ``cls`` in the project's other
        modules, with their ``Values``; ``None`` when one reads it other than by calling
        it or reading a static attribute, or the question is already open (a cycle)."""
        bindings = file.names.module.bindings.get(cls.name, [])
        if not any(binding.node is cls for binding in bindings):
            return []  # a class inside a function or a class: no other module makes it
        key = (id(cls), cls.name, "constructed")
        if key in self._active or len(self._active) > _DEEPEST:
            return None
        self._active.add(key)
        try:
            uses, opaque = self.uses(file, cls.name)
            if opaque:
                return None
            found: list[tuple[Values, ast.Call]] = []
            for importer, node in uses:
                call = construction(importer.names.parents.get(node), node)
                if call is False:
                    return None
                if isinstance(call, ast.Call):
                    found.append((importer.values, call))
            return found
        finally:
            self._active.discard(key)

    def kinds(self, file: SourceFile, node: ast.expr, how: str) -> set[str] | None:
        """What an imported name holds (``how="value"``), what calling it gives
        (``"call"``) or what its subclasses are (``"base"``), from the module defining
        it; ``None`` when ``node`` is not a name of the project."""
        target = self._target(file, node) or self._star_target(file, node)
        return None if target is None else self._kinds_of(*target, how)

    def _kinds_of(self, owner: SourceFile, name: str, how: str) -> set[str] | None:
        bindings = owner.names.module.bindings.get(name)
        if not bindings:
            return None
        if (id(owner), name) in self._written:
            return {UNKNOWN}
        key = (id(owner), name, how)
        if key in self._active or len(self._active) > _DEEPEST:
            return {UNKNOWN}  # an import cycle, or a chain too long to follow
        self._active.add(key)
        try:
            found: set[str] = set()
            for binding in bindings:
                dotted = self._imported_as(owner, binding)
                target = None if dotted is None else self.resolve(owner, dotted)
                if target is not None and target[1] is not None:  # imported again
                    found |= self._kinds_of(target[0], target[1], how) or {UNKNOWN}
                elif how == "value":
                    found |= owner.values.binding_kinds(binding)
                elif binding.kind == "class" and isinstance(binding.node, ast.ClassDef):
                    kinds = owner.values.class_kinds(binding.node)
                    found |= kinds if how == "call" else kinds - {"class"}
                elif how == "call":
                    found |= owner.values.call_kinds(binding)
                else:
                    found.add(UNKNOWN)
            return found or {UNKNOWN}
        finally:
            self._active.discard(key)

    def _target(self, file: SourceFile, node: ast.expr) -> tuple[SourceFile, str] | None:
        """The project file and module-level name ``node`` (``device``, ``utils.device``)
        stands for, when it reads an import of the project's."""
        attributes: list[str] = []
        root = node
        while isinstance(root, ast.Attribute):
            attributes.append(root.attr)
            root = root.value
        if not isinstance(root, ast.Name) or not isinstance(root.ctx, ast.Load):
            return None
        bindings = file.names.bindings(root)
        if not bindings:
            return None
        found: set[tuple[int, str]] = set()
        for binding in bindings:
            dotted = self._imported_as(file, binding)
            if dotted is None:
                return None
            target = self.resolve(file, ".".join([dotted, *reversed(attributes)]))
            if target is None or target[1] is None:
                return None
            found.add((id(target[0]), target[1]))
        if len(found) != 1:
            return None
        key, name = found.pop()
        return self._by_id[key], name

    def _star_target(self, file: SourceFile, node: ast.expr) -> tuple[SourceFile, str] | None:
        """The project module and name a name bound by no statement of ``file`` comes
        from, through its ``from models import *``: the one module that binds it among
        those it imports * from, followed through their own ``import *`` (a package's
        ``__init__.py`` re-exporting its modules); ``None`` when none or several may."""
        if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load):
            return None
        if file.names.bindings(node) or id(file) not in self._stars:
            return None
        found = self._star_bindings(file, node.id, 0)
        if found is None or len(found) != 1:
            return None
        key, name = found.pop()
        return self._by_id[key], name

    def _star_bindings(
        self, file: SourceFile, name: str, depth: int
    ) -> set[tuple[int, str]] | None:
        """Where the modules ``file`` imports * from bind ``name`` (empty when none
        exports it); ``None`` when one's exports cannot be read (a computed ``__all__``,
        an import cycle, a chain too long)."""
        if depth > _DEEPEST:
            return None
        found: set[tuple[int, str]] = set()
        for module in self._stars.get(id(file), []):
            exported = _exports(module, name)
            if exported is None:
                return None
            if not exported:
                continue
            if name in module.names.module.bindings:
                found.add((id(module), name))
                continue
            inner = self._star_bindings(module, name, depth + 1)
            if inner is None:
                return None
            found |= inner
        return found

    def holds_value(self, file: SourceFile, node: ast.AST) -> bool:
        """``node`` (``net``, ``model.net.to``) reads, at its root, a value another
        project module binds (``net = MLP()``), not one of its functions, classes or
        modules: a name like a variable of the file, whose methods are a value's."""
        chain: list[ast.expr] = []
        while isinstance(node, ast.Attribute):
            chain.append(node)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self._tops_seen(file):
            return False
        for prefix in [node, *reversed(chain)]:
            target = self._target(file, prefix)
            if target is not None:
                return self._is_value(*target, 0)
        return False

    def _tops_seen(self, file: SourceFile) -> set[str]:
        """The names of ``file`` bound by imports of the project's modules."""
        found = self._tops.get(id(file))
        if found is None:
            found = {
                binding.name
                for scope in file.names.scopes
                for bindings in scope.bindings.values()
                for binding in bindings
                if (dotted := self._imported_as(file, binding)) is not None
                and (self.resolve(file, dotted) is not None or dotted in self._prefixes)
            }
            self._tops[id(file)] = found
        return found

    def _is_value(self, owner: SourceFile, name: str, depth: int) -> bool:
        bindings = owner.names.module.bindings.get(name, [])
        if not bindings or depth > _DEEPEST:
            return False
        for binding in bindings:
            dotted = self._imported_as(owner, binding)
            if dotted is not None:
                target = self.resolve(owner, dotted)
                if (
                    target is None
                    or target[1] is None
                    or not self._is_value(target[0], target[1], depth + 1)
                ):
                    return False
            elif binding.kind in ("def", "class", "import", "other"):
                return False
        return True

    def functions(
        self, file: SourceFile, call: ast.Call, methods: bool = False
    ) -> Iterator[tuple[SourceFile, ast.FunctionDef | ast.AsyncFunctionDef]]:
        """The functions of another project module that ``call`` calls, with their file:
        a function (``utils.setup()``), and with ``methods`` a class's ``__init__``
        (``utils.Helper()``) or a method of an instance made in the call or kept in a name
        (``utils.Helper().run()``, ``h = utils.Helper(); h.run()``), whose parameters
        start with ``self``."""
        func, method = call.func, "__init__"
        if isinstance(call.func, ast.Attribute):
            made = _instance_made(file, call.func.value) if methods else None
            if made is not None:  # utils.Helper().run(), or h.run() of h = utils.Helper()
                func, method = made.func, call.func.attr
        target = self._target(file, func)
        if target is None:
            return
        owner, name = target
        for binding in owner.names.module.bindings.get(name, []):
            if func is call.func and isinstance(
                binding.node, (ast.FunctionDef, ast.AsyncFunctionDef)
            ):
                yield owner, binding.node
            elif methods and isinstance(binding.node, ast.ClassDef):
                for item in binding.node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                        item.name == method
                    ):
                        yield owner, item

    def attach(self) -> None:
        """Let each file's values and flow follow its imports into the project."""
        for file in self.files:
            file.project = self
            file.values.imported = _kinds_hook(self, file)
            file.values.constructed = _constructed_hook(self, file)
            file.flow.importers = _follow_hook(self, file)
            file.flow.callees = _callees_hook(self, file)


def cited(reason: str, file: SourceFile) -> str:
    """``reason``, written about ``file``, with each ``line N`` naming it (``file:N``)."""
    return _LINE.sub(lambda found: f"{file.path}:{found.group(1)}", reason)


def _chain(reason: str) -> str:
    """A reason through a long chain of modules, with its first and last links."""
    links = reason.split(_LINK)
    if len(links) <= 5:
        return reason
    skipped = f"{_LINK}(through {len(links) - 4} more modules) "
    return _LINK.join(links[:2]) + skipped + _LINK.join(links[-2:])


def _exports(file: SourceFile, name: str) -> bool | None:
    """Whether ``from file import *`` binds ``name``: listed in the module's ``__all__``
    (a literal list or tuple of strings), or, without one, public; ``None`` when its
    ``__all__`` is computed or changed."""
    listed: set[str] = set()
    for node in ast.walk(file.tree):
        if isinstance(node, ast.Name) and node.id == "__all__":
            parent = file.names.parents.get(node)
            value = parent.value if isinstance(parent, ast.Assign) else None
            if not (
                isinstance(value, (ast.List, ast.Tuple))
                and parent in file.tree.body
                and all(
                    isinstance(item, ast.Constant) and isinstance(item.value, str)
                    for item in value.elts
                )
            ):
                return None  # __all__ += [...], __all__.append(...), a computed list
            listed.update(
                item.value
                for item in value.elts
                if isinstance(item, ast.Constant) and isinstance(item.value, str)
            )
    if "__all__" in file.names.module.bindings:
        return name in listed
    return not name.startswith("_")


def _kinds_hook(project: Project, file: SourceFile) -> Callable[[ast.expr, str], set[str] | None]:
    return lambda node, how: project.kinds(file, node, how)


def _constructed_hook(
    project: Project, file: SourceFile
) -> Callable[[ast.ClassDef], list[tuple[Values, ast.Call]] | None]:
    return lambda cls: project.constructed(file, cls)


def _follow_hook(
    project: Project, file: SourceFile
) -> Callable[[str, str, Callable[[ast.AST], bool], bool], tuple[str | None, bool] | None]:
    return lambda name, policy, rewritten, calls: project.follow(
        file, name, policy, rewritten, calls
    )


def _callees_hook(
    project: Project, file: SourceFile
) -> Callable[[ast.Call, ast.AST, str, Callable[[ast.AST], bool]], tuple[str | None, bool] | None]:
    return lambda call, node, policy, rewritten: project.call_into(
        file, call, node, policy, rewritten
    )


def _instance_made(file: SourceFile, node: ast.expr) -> ast.Call | None:
    """The call that made the instance ``node`` is: ``node`` itself, or the one value every
    binding of the name ``node`` holds."""
    if isinstance(node, ast.Call):
        return node
    if not isinstance(node, ast.Name):
        return None
    bindings = file.names.bindings(node)
    values = [b.value for b in bindings if b.kind == "assign" and b.element is None]
    if len(values) != 1 or len(bindings) != 1 or not isinstance(values[0], ast.Call):
        return None
    return values[0]


def _common_folder(paths: set[PurePath]) -> PurePath | None:
    """The deepest folder holding every file, if they share one."""
    try:
        return PurePath(os.path.commonpath([str(path.parent) for path in paths]))
    except ValueError:  # none, or absolute and relative paths mixed
        return None


def _module_name(path: PurePath, packages: set[PurePath]) -> tuple[PurePath, str]:
    """(the root folder, the dotted module name) of a file: its folders count while
    they are packages (hold an ``__init__.py`` scanned with it)."""
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder = path.parent
    while folder in packages:
        parts.append(folder.name)
        if folder.parent == folder:
            break
        folder = folder.parent
    return folder, ".".join(reversed(parts)) or path.stem
