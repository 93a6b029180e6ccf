"""Where a value goes: the escape analysis behind ``scan --diff``'s safety rules.

``Flow.escape`` follows a value that a rewrite would change (a torch tensor becoming a
JAX array, a ``torch.device`` becoming a ``tj.device``) through assignments,
containers, loops, calls of the file's functions and returns, and says where it would
reach code that cannot take the new value. Anything it cannot follow counts as such a
place: the scanner then reports the idiom instead of rewriting it. What each value is
comes from ``_values``.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice

from ._names import Binding, Names, all_names, is_main_guard
from ._values import JAX_ARRAY, NNX_MODULE, NUMBER, TJ, Values, prefixed
from ._written import HOST_BUILTINS, JAX_CODE, NUMPY_VIEWS, WriteCheck, short_text

__all__ = ["Callees", "Flow", "Importers", "is_jitted", "parameter_for"]

#: ``Flow.importers``: (a module-level name, the policy, what is rewritten, whether what
#: calling it returns is followed) -> ``None`` when no scanned module imports the file,
#: else (where the value would reach code that cannot take it, whether JAX reads it).
#: ``Flow.callees``: (a call, the argument followed, the policy, what is rewritten) ->
#: ``None`` when the call is not of the project's code, else as for ``Importers``.
Callees = Callable[
    [ast.Call, ast.AST, str, Callable[[ast.AST], bool]], "tuple[str | None, bool] | None"
]
Importers = Callable[[str, str, Callable[[ast.AST], bool], bool], "tuple[str | None, bool] | None"]
# Builtins that return (or iterate) what they were given.
_CONTAINER_BUILTINS = frozenset(
    "list tuple sorted reversed zip enumerate iter next dict set".split()
)
# Array methods JAX arrays share with torch tensors, with torch's meaning when called
# without keywords (torch says dim=, JAX axis=), and what they give: "host" (a Python
# value) or "array".
_ARRAY_METHODS = {
    "item": "host",
    "tolist": "host",
    "reshape": "array",
    "sum": "array",
    "mean": "array",
    "flatten": "array",
    "ravel": "array",
    "copy": "array",
}
_DICT_METHODS = frozenset("items keys values get pop copy setdefault".split())
_ARRAY_ATTRIBUTES = {"shape": "host", "ndim": "host", "T": "array"}
_MUTATORS = frozenset("append extend insert add update".split())
# Of JAX_CODE (``_written``), the code that only reads values on the host (it takes
# torch tensors too).
_HOST_CODE = ("numpy", "math")
# Conversions that put a host value (a CPU torch tensor, a NumPy array) on JAX's default
# device when not told a device, and leave a JAX array where it is: given what a rewrite
# placed (committed to the CPU by ``tj.load``, ``tj.to_jax``, ``.cpu()``), they would no
# longer move it, and the JAX code after them would run there.
_TO_DEFAULT_DEVICE = frozenset({"jax.numpy.asarray", "jax.numpy.array", "jax.device_put"})
# Tree maps, and where a leaf goes among their function's parameters (after the path).
_TREE_MAPS = {
    "jax.tree_util.tree_map": 0,
    "jax.tree.map": 0,
    "jax.tree_map": 0,
    "jax.tree_util.tree_map_with_path": 1,
    "jax.tree.map_with_path": 1,
}
# JAX and Flax functions whose result holds their argument's own leaves.
_PASS_THROUGH = frozenset(
    "jax.tree_util.tree_leaves jax.tree.leaves jax.tree_leaves jax.tree_util.tree_flatten "
    "jax.tree.flatten jax.tree_flatten jax.tree_util.tree_unflatten jax.tree.unflatten "
    "jax.tree_unflatten jax.block_until_ready flax.traverse_util.flatten_dict "
    "flax.traverse_util.unflatten_dict flax.core.freeze flax.core.unfreeze "
    "flax.core.frozen_dict.freeze flax.core.frozen_dict.unfreeze flax.core.FrozenDict "
    "flax.core.frozen_dict.FrozenDict".split()
)
# What ``escape`` follows: at most this many uses of one value, and over one file at
# most this many uses per node of the file.
_USES_PER_VALUE = 5000
_USES_PER_NODE = 1
_USES_AT_LEAST = 50_000


class Flow:
    """Escape analysis over one file, on the kinds its ``Values`` knows."""

    def __init__(self, values: Values) -> None:
        self.values = values
        self.names = values.names
        self.qualname = values.qualname
        self.kinds = values.kinds
        self._read_by_jax = False
        # Uses followed, over every escape asked of this file: a file whose values
        # reach many uses each (a name bound and read thousands of times) would
        # otherwise cost the square of its size.
        self._budget = _USES_PER_NODE * len(values.names.parents) + _USES_AT_LEAST
        self.writes = WriteCheck(values, self._spend)
        # Module-level names other modules import: __all__'s, and, in a module that only
        # defines names, every one (``_bind`` holds back those it never reads itself).
        self._exported = all_names(values.names.tree)
        #: Whether the module only defines names (a settings or library module): its
        #: functions run in the modules that import it.
        self.imported_only = _only_definitions(values.names.tree.body)
        #: Set by a project scan (``_project.Project.follow``): follows a module-level
        #: name of this file (what calling it returns, with ``calls``) into the modules
        #: importing it; answers ``None`` when no scanned module imports this one.
        self.importers: Importers | None = None
        #: Set by a project scan (``_project.Project.call_into``): follows a value passed
        #: to a function of another scanned module into that function; ``None`` for a
        #: call of code that is not the project's.
        self.callees: Callees | None = None
        self._policy = "array"
        self._rewritten: Callable[[ast.AST], bool] = _nothing_rewritten

    def imported_by_none(self) -> None:
        """No module imports this file (a notebook): its module-level names are read
        only where it reads them, and its body runs for its effects."""
        self._exported = set()
        self.imported_only = False

    def _spend(self, uses: int) -> bool:
        self._budget -= uses
        return self._budget > 0

    def escape(
        self, node: ast.AST, policy: str, rewritten: Callable[[ast.AST], bool]
    ) -> tuple[str | None, bool]:
        """Where the new value of ``node`` would reach code that cannot take it.

        Args:
            node: The expression a rewrite changes.
            policy: ``"array"`` (it becomes JAX arrays, or a container of them) or
                ``"device"`` (it becomes a ``tj.device``).
            rewritten: Whether a call node is itself rewritten into a torch2jax_device
                call (which takes both).

        Returns:
            A reason naming the line and the use, or ``None`` if every use takes it;
            and whether some use is JAX code (a JAX, Flax or torch2jax_device call, a
            Flax NNX module, a jitted function, a call rewritten into one).
        """
        return self.follow([node], policy, rewritten)

    def follow(
        self, nodes: Sequence[ast.AST], policy: str, rewritten: Callable[[ast.AST], bool]
    ) -> tuple[str | None, bool]:
        """``escape`` for several expressions of the file holding the same value (its
        reads in a module that imports it); the state of an ``escape`` under way (a
        project's import cycle back into this file) is kept."""
        state = (self._read_by_jax, self._policy, self._rewritten)
        self._read_by_jax, self._policy, self._rewritten = False, policy, rewritten
        try:
            reason = self._walk(nodes, policy, rewritten)
            return reason, self._read_by_jax
        finally:
            self._read_by_jax, self._policy, self._rewritten = state

    def _walk(
        self, nodes: Sequence[ast.AST], policy: str, rewritten: Callable[[ast.AST], bool]
    ) -> str | None:
        work: deque[ast.AST] = deque(nodes)
        seen: set[int] = set()
        while work:
            if self._budget <= 0:
                return (
                    "the file has too many uses to follow (the scanner's work on a file is "
                    "bounded by its size)"
                )
            expression = work.popleft()
            if id(expression) in seen:
                continue
            seen.add(id(expression))
            self._budget -= 1
            reason = self._use(expression, policy, rewritten, work)
            if reason is not None:
                return reason
            if len(seen) > _USES_PER_VALUE:
                return "too many uses to follow"
        return None

    def _extend(self, work: deque[ast.AST], uses: Iterable[ast.AST]) -> None:
        """Queue ``uses``, no more of them than can still be followed."""
        work.extend(islice(uses, max(0, min(self._budget, _USES_PER_VALUE + 1))))

    def _use(
        self, node: ast.AST, policy: str, rewritten: Callable[[ast.AST], bool], work: deque[ast.AST]
    ) -> str | None:
        parent = self.names.parents.get(node)
        line = getattr(parent, "lineno", getattr(node, "lineno", 0))
        where = f"line {line}"
        if parent is None or isinstance(parent, (ast.Expr, ast.FormattedValue, ast.Delete)):
            return None
        if isinstance(parent, (ast.Assign, ast.AnnAssign)):
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            for target in targets:
                reason = self._bind(target, work)
                if reason:
                    return f"{where}: {reason}"
            return None
        if isinstance(parent, ast.NamedExpr):
            work.append(parent)
            return self._bind(parent.target, work)
        if isinstance(parent, (ast.Tuple, ast.List)):
            assigned = self._tuple_target(parent, node)
            if assigned is not None:
                reason = self._bind(assigned, work)
                return f"{where}: {reason}" if reason else None
            work.append(parent)
            return None
        if isinstance(parent, (ast.Set, ast.Dict, ast.Starred)):
            work.append(parent)
            return None
        if isinstance(parent, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            work.append(parent)
            return None
        if isinstance(parent, ast.keyword):
            call = self.names.parents.get(parent)
            assert isinstance(call, ast.Call)
            return self._argument(call, node, policy, rewritten, work)
        if isinstance(parent, ast.Call):
            if node is parent.func:
                return f"{where}: {short_text(parent)} calls it"
            return self._argument(parent, node, policy, rewritten, work)
        if isinstance(parent, ast.Attribute):
            return self._attribute(parent, policy, rewritten, work)
        if isinstance(parent, ast.Subscript):
            if parent.value is node and policy == "array":
                if isinstance(parent.ctx, ast.Store) and self._fresh_container(node):
                    return None  # d[k] = ... into a dict or list the code made
                if isinstance(parent.ctx, ast.Store):
                    return (
                        f"{where}: {short_text(parent)} = ... writes into it (arrays are immutable)"
                    )
                work.append(parent)
                return None
            return f"{where}: used as an index in {short_text(parent)}"
        if isinstance(parent, ast.BinOp):
            if policy != "array":
                return f"{where}: {short_text(parent)}"
            other = parent.right if parent.left is node else parent.left
            if self.kinds(other) <= {NUMBER, JAX_ARRAY}:
                work.append(parent)
                return None
            return (
                f"{where}: {short_text(parent)} combines it with a value that may be a torch tensor"
            )
        if isinstance(parent, ast.UnaryOp):
            if policy != "array":
                return f"{where}: {short_text(parent)}"
            work.append(parent)
            return None
        if isinstance(parent, ast.Compare):
            others = [c for c in [parent.left, *parent.comparators] if c is not node]
            if policy == "device":
                if all(isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)) for op in parent.ops):
                    return None
                return f"{where}: {short_text(parent)}"
            if all(self.kinds(o) <= {NUMBER, JAX_ARRAY} for o in others):
                work.append(parent)
                return None
            return f"{where}: {short_text(parent)} compares it with a value that may be torch's"
        if isinstance(parent, ast.IfExp):
            if parent.test is not node:
                work.append(parent)
            return None
        if isinstance(parent, ast.BoolOp):
            work.append(parent)
            return None
        if isinstance(parent, (ast.If, ast.While, ast.Assert)):
            return None
        if isinstance(parent, ast.Return):
            return self._returned(parent, work)
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)) and parent.iter is node:
            reason = self._bind(_values_of(node, parent.target), work)
            return f"{where}: {reason}" if reason else None
        if isinstance(parent, ast.Lambda) and node is parent.body:
            calls = self._tree_map_calls(parent)
            if calls is None:
                return (
                    f"{where}: returned by {short_text(parent)} to callers the scanner cannot see"
                )
            self._extend(work, calls)
            return None
        if isinstance(parent, ast.withitem):
            return f"{where}: used as a context manager"
        return f"{where}: used in {short_text(parent)}"

    def _tuple_target(self, value: ast.Tuple | ast.List, element: ast.AST) -> ast.AST | None:
        """For ``a, b = x, y``: the target that receives ``element``."""
        assign = self.names.parents.get(value)
        if not (isinstance(assign, ast.Assign) and assign.value is value):
            return None
        position = self.names.slots[element]
        for target in assign.targets:
            if isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == len(value.elts):
                return target.elts[position]
        return None

    def _bind(self, target: ast.AST, work: deque[ast.AST]) -> str | None:
        if isinstance(target, ast.Name):
            binding = self.names.binding_of.get(target)
            if binding is None:
                return None
            if binding.scope.kind == "module" and self.importers is not None:
                followed = self.importers(target.id, self._policy, self._rewritten, False)
                if followed is not None:  # modules of the project import this one
                    reason, read_by_jax = followed
                    self._read_by_jax = self._read_by_jax or read_by_jax
                    if reason:
                        return f"read in {reason}"
                    self._extend(work, self._visible_loads(binding))
                    return None
            if (
                binding.scope.kind == "module"
                and (self.imported_only or target.id in self._exported)
                and not self.names.loads(binding)
            ):
                # A settings module's `device = torch.device(...)`: read only by the
                # modules importing it, which may hand it to torch.
                return (
                    f"bound at module level as {target.id} and read nowhere in this file: "
                    "modules that import it may hand it to torch"
                )
            self._extend(work, self._visible_loads(binding))
            return None
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                reason = self._bind(element, work)
                if reason:
                    return reason
            return None
        if isinstance(target, ast.Subscript) and self._fresh_container(target.value):
            assert isinstance(target.value, ast.Name)
            for binding in self.names.bindings(target.value):
                self._extend(work, self._visible_loads(binding))
            return None
        return f"stored in {short_text(target)}, whose uses the scanner cannot follow"

    def _fresh_container(self, node: ast.AST) -> bool:
        """``node`` names only lists, dicts or sets the code itself made."""
        if not isinstance(node, ast.Name):
            return False
        bindings = self.names.bindings(node)
        return bool(bindings) and all(_is_fresh_container(b) for b in bindings)

    def _visible_loads(self, binding: Binding) -> Iterator[ast.Name]:
        """Reads that may see ``binding``: not those that only run before it."""
        statement = self.names.statement(binding.node)
        for load in self.names.loads(binding):
            if statement is not None and self.names.only_before(load, statement):
                continue
            yield load

    def _argument(
        self,
        call: ast.Call,
        node: ast.AST,
        policy: str,
        rewritten: Callable[[ast.AST], bool],
        work: deque[ast.AST],
    ) -> str | None:
        if rewritten(call):
            self._read_by_jax = True
            return None
        name = self.qualname(call.func)
        if policy == "array" and self._to_default_device(call, name):
            return (
                f"line {call.lineno}: {short_text(call)} puts a torch tensor on JAX's default "
                "device, but would leave the JAX array where the rewrite puts it (give it "
                "device= first)"
            )
        if policy == "array" and name in _TREE_MAPS and call.args and node is not call.args[0]:
            return self._tree_mapped(call, name, node, work)
        if policy == "array" and name is not None and _numpy_view(name):
            work.append(call)  # np.asarray(x): a view, read-only on a JAX array
            return None
        if policy == "array" and name in _PASS_THROUGH:
            self._read_by_jax = True  # JAX's or Flax's own code takes the tree
            work.append(call)  # jax.tree.leaves(x): what it returns is x's own arrays
            return None
        if name is not None:
            if prefixed(name, (TJ,)) or (policy == "array" and prefixed(name, JAX_CODE)):
                self._read_by_jax = self._read_by_jax or not prefixed(name, _HOST_CODE)
                return None
            followed = None if self.callees is None else self.callees(call, node, policy, rewritten)
            if followed is not None:  # a function of another module of the project
                reason, read_by_jax = followed
                self._read_by_jax = self._read_by_jax or read_by_jax
                return reason
            return self._passed(call)
        builtin = self.values.builtin(call.func)
        if builtin in HOST_BUILTINS:
            return None
        if builtin == "isinstance" and not any(
            (self.qualname(c) or "").startswith("torch") for c in ast.walk(call) if c is not node
        ):
            return None  # isinstance(x, torch.Tensor) would change its answer
        if builtin in _CONTAINER_BUILTINS:
            work.append(call)
            return None
        if builtin in ("max", "min", "sum", "abs", "round") and policy == "array":
            work.append(call)
            return None
        if isinstance(call.func, ast.Name):
            return self._local_argument(call, node, work)
        if isinstance(call.func, ast.Attribute) and policy == "array":
            callee = self.kinds(call.func)  # self.first(x): an attribute holding a module
            if callee == {NNX_MODULE}:
                self._read_by_jax = True
                return None
        if isinstance(call.func, ast.Attribute):
            receiver = call.func.value
            if call.func.attr in _MUTATORS and isinstance(receiver, ast.Name):
                bindings = self.names.bindings(receiver)
                if bindings and all(_is_fresh_container(b) for b in bindings):
                    for binding in bindings:
                        self._extend(work, self._visible_loads(binding))
                    return None
            if policy == "array" and self.kinds(receiver) == {NNX_MODULE}:
                self._read_by_jax = True
                return None
            if call.func.attr == "to" and self.kinds(receiver) == {JAX_ARRAY}:
                # jnp.ones(3).to(x): the move of a JAX array, which only tj.to_device
                # (given an array as its target) makes; held back, it fails as it did.
                self._read_by_jax = True
                return None
        return self._passed(call)

    def _tree_mapped(
        self, call: ast.Call, map_name: str, node: ast.AST, work: deque[ast.AST]
    ) -> str | None:
        """``jax.tree.map(f, x)``: each leaf of ``x`` goes to ``f`` (followed when it is
        the file's own function or a lambda), and what ``f`` returns makes the result."""
        where = f"line {call.lineno}"
        function = call.args[0]
        if any(k.arg == "is_leaf" for k in call.keywords):
            return f"{where}: {short_text(call)} hands its subtrees to is_leaf"
        self._read_by_jax = True  # JAX's own code walks the tree
        name = self.qualname(function)
        if name is not None and prefixed(name, (TJ, *JAX_CODE)):
            return None
        if self.values.builtin(function) in HOST_BUILTINS:
            return None
        definitions = _tree_functions(function, self.names)
        position = next((i for i, a in enumerate(call.args) if a is node), 0) - 1
        position += _TREE_MAPS[map_name] if position >= 0 else 0
        starred = any(isinstance(a, ast.Starred) for a in call.args)
        if definitions is None or position < 0 or starred:
            return f"{where}: {short_text(call)} hands its leaves to {short_text(function)}"
        for definition in definitions:
            if not isinstance(definition, ast.Lambda) and is_jitted(definition, self.qualname):
                continue  # JAX reads it (set above)
            positional = [*definition.args.posonlyargs, *definition.args.args]
            binding = (
                self.names.binding_of.get(positional[position])
                if position < len(positional)
                else None
            )
            if binding is None:
                return f"{where}: {short_text(call)} hands its leaves to {short_text(function)}"
            self._extend(work, self.names.loads(binding))
        return None

    def _tree_map_calls(self, function: ast.AST) -> list[ast.Call] | None:
        """The tree maps ``function`` is handed to, when that is all the file does with
        it: what it returns makes their results."""
        if isinstance(function, ast.Lambda):
            parent = self.names.parents.get(function)
            if isinstance(parent, ast.Call) and parent.args and parent.args[0] is function:
                if self.qualname(parent.func) in _TREE_MAPS:
                    return [parent]
            return None
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        scope = self.names.scope_of.get(function)
        if scope is None or scope.kind == "class":
            return None
        binding = next(
            (b for b in scope.bindings.get(function.name, []) if b.node is function), None
        )
        if binding is None:
            return None
        calls: list[ast.Call] = []
        for load in self.names.loads(binding):
            parent = self.names.parents.get(load)
            if not (
                isinstance(parent, ast.Call)
                and parent.args
                and parent.args[0] is load
                and self.qualname(parent.func) in _TREE_MAPS
            ):
                return None
            calls.append(parent)
        return calls

    def _to_default_device(self, call: ast.Call, name: str | None) -> bool:
        """``call`` is ``jnp.asarray(x)`` (or ``jax.tree.map(jnp.asarray, x)``) with no device."""
        if name in _TREE_MAPS and call.args:
            return self.qualname(call.args[0]) in _TO_DEFAULT_DEVICE
        if name not in _TO_DEFAULT_DEVICE:
            return False
        if any(k.arg in ("device", "sharding") for k in call.keywords):
            return False
        return not (name == "jax.device_put" and len(call.args) > 1)

    def _local_argument(self, call: ast.Call, node: ast.AST, work: deque[ast.AST]) -> str | None:
        assert isinstance(call.func, ast.Name)
        bindings = self.names.bindings(call.func)
        if not bindings:
            return self._passed(call)
        for binding in bindings:
            if binding.kind != "def":
                kinds = self.values.binding_kinds(binding)
                if kinds == {NNX_MODULE}:
                    self._read_by_jax = True
                    continue
                return self._passed(call)
            function = binding.node
            assert isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            if is_jitted(function, self.qualname):
                self._read_by_jax = True
                continue
            parameter = parameter_for(function, call, node)
            scope = self.names.scope_by_node.get(function)
            if parameter is None or scope is None:
                return self._passed(call)
            params = [b for b in scope.bindings.get(parameter, []) if b.kind == "param"]
            if not params:
                return self._passed(call)
            for param in params:
                self._extend(work, self.names.loads(param))
        return None

    def _passed(self, call: ast.Call) -> str:
        return f"line {call.lineno}: passed to {short_text(call)}"

    def _returned(self, statement: ast.Return, work: deque[ast.AST]) -> str | None:
        function = self.names.enclosing(
            statement, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda
        )
        where = f"line {statement.lineno}: returned"
        if function is None:
            return where
        calls = self.values.calls_of(function)
        if calls is None:
            calls = self._tree_map_calls(function)
        elif self.importers is not None and self._module_function(function):
            assert isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            followed = self.importers(function.name, self._policy, self._rewritten, True)
            if followed is not None:  # returned to the modules that import it too
                reason, read_by_jax = followed
                self._read_by_jax = self._read_by_jax or read_by_jax
                if reason:
                    return f"{where} to {reason}"
                if not calls:
                    return None
        if not calls:
            return f"{where} to callers the scanner cannot see"
        self._extend(work, calls)
        return None

    def _module_function(self, function: ast.AST) -> bool:
        scope = self.names.scope_of.get(function)
        return (
            isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            and scope is not None
            and scope.kind == "module"
        )

    def _attribute(
        self,
        attribute: ast.Attribute,
        policy: str,
        rewritten: Callable[[ast.AST], bool],
        work: deque[ast.AST],
    ) -> str | None:
        parent = self.names.parents.get(attribute)
        where = f"line {attribute.lineno}"
        if isinstance(parent, ast.Call) and parent.func is attribute:
            if rewritten(parent):
                self._read_by_jax = True
                return None
            if policy == "array" and not parent.keywords:  # x.sum(dim=0) is torch's spelling
                result = _ARRAY_METHODS.get(attribute.attr)
                if result == "array" or attribute.attr in _DICT_METHODS:
                    work.append(parent)
                    return None
                if result == "host":
                    return None
            return f"{where}: {short_text(parent)} calls a torch method on it"
        if isinstance(attribute.ctx, ast.Store):
            return f"{where}: {short_text(attribute)} is assigned to"
        if policy == "device":
            return (
                None if attribute.attr in ("type", "index") else f"{where}: reads .{attribute.attr}"
            )
        result = _ARRAY_ATTRIBUTES.get(attribute.attr)
        if result == "host":
            return None
        if result == "array":
            work.append(attribute)
            return None
        return f"{where}: reads {short_text(attribute)}, which differs on a JAX array"


def _nothing_rewritten(node: ast.AST) -> bool:
    return False


def _values_of(iterated: ast.AST, target: ast.expr) -> ast.expr:
    """What of ``target`` receives the value followed: for ``k, v in d.items()``, ``v``
    (the keys of a checkpoint are names, not arrays)."""
    if (
        isinstance(iterated, ast.Call)
        and isinstance(iterated.func, ast.Attribute)
        and iterated.func.attr == "items"
        and isinstance(target, ast.Tuple)
        and len(target.elts) == 2
    ):
        return target.elts[1]
    return target


def _is_fresh_container(binding: Binding) -> bool:
    value = binding.value
    return (
        binding.kind == "assign"
        and binding.element is None
        and (
            isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp))
            or (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and value.func.id in ("list", "dict", "set")
                and not value.args
            )
        )
    )


def is_jitted(
    function: ast.FunctionDef | ast.AsyncFunctionDef, qualname: Callable[[ast.AST], str | None]
) -> bool:
    """``function`` is decorated with ``jax.jit``, ``nnx.jit``, ``jax.pmap`` or
    ``eqx.filter_jit``: inside, arrays are traced."""
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = qualname(target)
        if name in ("jax.jit", "flax.nnx.jit", "jax.pmap", "equinox.filter_jit"):
            return True
    return False


def parameter_for(
    function: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call, node: ast.AST
) -> str | None:
    positional = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
    for position, argument in enumerate(call.args):
        if argument is node:
            if isinstance(argument, ast.Starred) or position >= len(positional):
                return None
            return positional[position]
    for keyword in call.keywords:
        if keyword.value is node:
            return keyword.arg
    return None


def _numpy_view(name: str) -> bool:
    """``np.asarray(x)``, ``np.reshape(x, s)``: NumPy may hand back a view of ``x``."""
    module, _, function = name.rpartition(".")
    return module == "numpy" and function in NUMPY_VIEWS


def _tree_functions(
    function: ast.expr, names: Names
) -> list[ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda] | None:
    """The lambda, or the file's own functions, a tree map calls on each leaf."""
    if isinstance(function, ast.Lambda):
        return [function]
    if not isinstance(function, ast.Name):
        return None
    bindings = names.bindings(function)
    if not bindings or any(b.kind != "def" for b in bindings):
        return None
    return [b.node for b in bindings]  # type: ignore[misc]


def _only_definitions(body: list[ast.stmt]) -> bool:
    """A module body that only defines names (imports, assignments, functions, classes,
    also inside ``if``/``try`` blocks such as ``if TYPE_CHECKING:`` or ``try: import ...``,
    but no ``if __name__ == "__main__":`` and no call): a settings or library module,
    whose names other modules import, not a script run for its effects."""
    definitions = (
        ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign, ast.AugAssign,
        ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Pass,
    )  # fmt: skip
    for statement in body:
        if isinstance(statement, ast.If):
            if is_main_guard(statement) or not (
                _only_definitions(statement.body) and _only_definitions(statement.orelse)
            ):
                return False
        elif isinstance(statement, ast.Try):
            blocks = [statement.body, statement.orelse, statement.finalbody]
            blocks += [handler.body for handler in statement.handlers]
            if not all(_only_definitions(block) for block in blocks):
                return False
        elif not (
            isinstance(statement, definitions)
            or (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant))
        ):
            return False
    return True
