"""Which binding each name refers to: Python's scoping rules, for the scanner.

A name means what the innermost scope binding it says (function, lambda and
comprehension scopes; class bodies only for their own code), so ``import data`` at the
top of a file does not decide what ``def f(data): return data.to(device)`` moves.
``global`` and ``nonlocal`` are followed. The analysis is flow-insensitive inside a
scope: a name bound twice in one scope has both values.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator

__all__ = ["Binding", "Names", "Scope", "all_names", "is_main_guard"]

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
# Modules that define what a package exports, -> the package: an import from the module
# names what the catalog knows by the package's name
# (``from torch.distributed.fsdp.fully_sharded_data_parallel import FullyShardedDataParallel``
# is ``torch.distributed.fsdp.FullyShardedDataParallel``).
_DEFINED_IN = {
    "torch.distributed.fsdp.fully_sharded_data_parallel": "torch.distributed.fsdp",
    "torch.distributed.fsdp.api": "torch.distributed.fsdp",
    "transformers.trainer_utils": "transformers",  # set_seed, defined there
    "colossalai.initialize": "colossalai",  # launch, launch_from_torch, defined there
    **{
        f"{package}.{module}": package
        for package in (
            "lightning.fabric.strategies",
            "lightning_fabric.strategies",
            "lightning.pytorch.strategies",
            "pytorch_lightning.strategies",
        )
        for module in ("fsdp", "xla_fsdp", "deepspeed", "ddp", "xla", "model_parallel")
    },
}
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# How many copies (``a = b``) ``Names.assigned`` follows.
_COPIES = 4


def _copies(value: ast.expr) -> bool:
    """``value`` is a copy ``Names.assigned`` reads through: a name, an entry of a dict by
    a constant key, or an attribute of a name."""
    return (
        isinstance(value, ast.Name)
        or (isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant))
        or (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name))
    )


# torch.distributed's own top-level names: a project's ``distributed`` module that
# re-exports them (nanotron's ``from torch.distributed import *``) is read as
# torch.distributed where one of these is read through it.
_TORCH_DISTRIBUTED = frozenset(
    """is_available is_initialized init_process_group destroy_process_group get_rank
    get_world_size get_backend new_group new_subgroups barrier monitored_barrier
    all_reduce all_gather all_gather_object all_gather_into_tensor reduce_scatter
    reduce_scatter_tensor broadcast broadcast_object_list reduce gather gather_object
    scatter scatter_object_list all_to_all all_to_all_single send recv isend irecv
    batch_isend_irecv P2POp ReduceOp ProcessGroup GroupMember Backend
    get_process_group_ranks get_group_rank get_global_rank is_nccl_available
    is_gloo_available is_torchelastic_launched""".split()
)
# Modules a script star-imports (``from transformers.trainer import *``, a project's copy
# of the Trainer's methods) -> the names of device meaning they bring in, and what each is.
_STAR_EXPORTS = {
    "transformers.trainer": {
        "amp": "apex.amp",  # under is_apex_available()
        "safetensors": "safetensors",  # import safetensors.torch
        "smp_forward_backward": "transformers.trainer_pt_utils.smp_forward_backward",
        "unwrap_model": "transformers.modeling_utils.unwrap_model",
        "is_sagemaker_mp_enabled": "transformers.utils.is_sagemaker_mp_enabled",
        "dist": "torch.distributed",
        "xm": "torch_xla.core.xla_model",  # under is_torch_xla_available()
    },
}
# Frameworks of their own whose ``distributed`` modules are not torch's.
_OTHER_FRAMEWORKS = frozenset(
    "paddle tensorflow mindspore oneflow jittor mxnet jax flax keras ray horovod ignite".split()
)


def _public(origin: str | None) -> str | None:
    """``origin`` under the package that exports it (``_DEFINED_IN``); a project's copy of
    Megatron's ``mpu`` (``fairseq.model_parallel.megatron.mpu``) is ``megatron.mpu``."""
    if origin is None:
        return None
    for module, package in _DEFINED_IN.items():
        if origin == module or origin.startswith(module + "."):
            return package + origin[len(module) :]
    parts = origin.split(".")
    for i in range(1, len(parts) - 1):
        if parts[i : i + 2] == ["megatron", "mpu"]:
            return ".".join(parts[i:])
    return origin


def _optional_import(binding: Binding) -> str | None:
    """``ignite.distributed`` for ``idist, has_ignite = optional_import("ignite", version,
    checker, "distributed")``: MONAI's guarded import binds the module (or its member
    ``name``) first, then whether it was found."""
    value = binding.value
    if not (
        binding.kind == "assign"
        and isinstance(value, ast.Call)
        and (
            (isinstance(value.func, ast.Name) and value.func.id == "optional_import")
            or (isinstance(value.func, ast.Attribute) and value.func.attr == "optional_import")
        )
        and value.args
        and isinstance(value.args[0], ast.Constant)
        and isinstance(value.args[0].value, str)
    ):
        return None
    module = value.args[0].value
    named = value.args[3] if len(value.args) > 3 else None
    named = next((k.value for k in value.keywords if k.arg == "name"), named)
    if isinstance(named, ast.Constant) and isinstance(named.value, str) and named.value:
        return f"{module}.{named.value}"
    return module if named is None else None


def reexported(name: str) -> str:
    """``name``, an attribute read through a module, under the package that exports it
    (``_public``: ``torch.distributed.fsdp.api.ShardedStateDictConfig`` spelled long-hand
    is ``torch.distributed.fsdp.ShardedStateDictConfig``, as its from-import is), and as
    torch's where a project's ``distributed`` module re-exports it (``dist.barrier``
    after ``import nanotron.distributed as dist`` is ``torch.distributed.barrier``;
    ``dist.ReduceOp.SUM`` too), else ``name``. A name imported from such a module (SAM
    2's ``from training.utils.distributed import barrier``) is more often the project's
    own wrapper."""
    name = _public(name) or name
    parts = name.split(".")
    for i in range(1, len(parts) - 1):
        if (
            parts[i] == "distributed"
            and parts[i + 1] in _TORCH_DISTRIBUTED
            and parts[0] not in _OTHER_FRAMEWORKS | {"torch", "torch2jax_device"}
        ):
            return ".".join(["torch.distributed", *parts[i + 1 :]])
    return name


@dataclasses.dataclass(eq=False)
class Scope:
    """One Python scope: the module, a function, a lambda, a class body or a comprehension."""

    node: ast.AST
    parent: Scope | None
    kind: str  # "module" | "function" | "class" | "comprehension"
    bindings: dict[str, list[Binding]] = dataclasses.field(default_factory=dict)
    declared_global: set[str] = dataclasses.field(default_factory=set)
    declared_nonlocal: set[str] = dataclasses.field(default_factory=set)


@dataclasses.dataclass(eq=False)
class Binding:
    """One place a name is bound, and what is bound there when the scanner can tell.

    Attributes:
        name: The name.
        scope: The scope the name belongs to.
        node: The binding site (a ``Name``, ``arg``, ``alias``, definition...).
        kind: ``import``, ``assign``, ``param``, ``for``, ``with``, ``def``, ``class``
            or ``other``.
        value: The expression bound (for ``assign``; the iterable for ``for``; the
            context manager for ``with``), ``None`` when unknown or partial.
        origin: For imports, the dotted name imported (``torch.nn.functional``).
        element: For tuple unpacking of a non-literal value, the position unpacked.
    """

    name: str
    scope: Scope
    node: ast.AST
    kind: str
    value: ast.expr | None = None
    origin: str | None = None
    element: int | None = None


class Names:
    """Scopes, bindings and the parent of every node of one parsed file."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parents: dict[ast.AST, ast.AST] = {}
        self.scope_of: dict[ast.AST, Scope] = {}  # every node -> the scope it runs in
        self.module = Scope(tree, None, "module")
        self.scopes: list[Scope] = [self.module]
        self.scope_by_node: dict[ast.AST, Scope] = {tree: self.module}
        self.binding_of: dict[ast.AST, Binding] = {}  # binding site -> its binding
        self._loads: dict[tuple[int, str], list[ast.Name]] = {}
        # (id of a scope's binding list, alias depth) -> origin
        self._origins: dict[tuple[int, int], str | None] = {}
        self._module_lasts: dict[int, tuple[ast.stmt, Binding] | None] = {}
        self._statements: dict[ast.AST, ast.stmt | None] = {}  # node -> its statement
        # (id of a name's binding list, attribute) -> the values stored there
        self._attribute_stores: dict[tuple[int, str], list[ast.expr]] | None = None
        self._builder(self.module).visit_body(tree)
        # node -> its index in the list field of its parent that holds it (the elements
        # of a display, the values of a dict): looked up, never searched, so a display
        # of 90,000 elements costs no more than 90,000 displays.
        self.slots: dict[ast.AST, int] = {}
        for node in ast.walk(tree):
            for _, value in ast.iter_fields(node):
                if isinstance(value, ast.AST):
                    self.parents[value] = node
                elif isinstance(value, list):
                    for index, item in enumerate(value):
                        if isinstance(item, ast.AST):
                            self.parents[item] = node
                            self.slots[item] = index
        for node, scope in self.scope_of.items():
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                home = self.home(node.id, scope)
                if home is not None:
                    self._loads.setdefault((id(home), node.id), []).append(node)

    def _builder(self, scope: Scope) -> _Builder:
        return _Builder(self, scope)

    # -- queries ---------------------------------------------------------------
    def home(self, name: str, scope: Scope) -> Scope | None:
        """The scope whose binding ``name`` refers to from ``scope``; ``None`` for builtins."""
        if name in scope.declared_global:
            return self.module if name in self.module.bindings else None
        if name in scope.declared_nonlocal:
            return self._enclosing_function(name, scope.parent)
        if name in scope.bindings:
            return scope
        return self._enclosing_function(name, scope.parent, include_module=True)

    def _enclosing_function(
        self, name: str, scope: Scope | None, include_module: bool = False
    ) -> Scope | None:
        while scope is not None:
            if scope.kind != "class" and name in scope.bindings:
                if scope.kind != "module" or include_module:
                    return scope
            scope = scope.parent
        return None

    def bindings(self, node: ast.Name) -> list[Binding]:
        """Every binding the name can refer to (empty for builtins and unknown names)."""
        scope = self.scope_of.get(node)
        if scope is None:
            return []
        home = self.home(node.id, scope)
        return [] if home is None else home.bindings[node.id]

    def assigned(self, node: ast.expr, *, every: bool = False) -> list[ast.expr] | None:
        """The values the name ``node`` was assigned, through copies: after ``value =
        device`` (or ``value, _ = device, None``, or ``value = options["device"]`` where
        ``options`` holds dict literals with that key), ``value`` holds what ``device``
        was assigned. A name copied whose bindings are no assignments (a parameter) is
        its own value. ``node`` may be such an entry itself (``options["device"]``), or
        an attribute of a name that statements of the file store to (``cfg.device``
        after ``cfg.device = device``); any other expression holds nothing told.
        ``every``: ``None`` unless every binding met is an assignment (else those that
        are not are passed over).

        Examples:
            >>> import ast
            >>> tree = ast.parse("d = 'cuda'\\nopts = {'device': d}\\nv = opts['device']\\nv\\n")
            >>> names = Names(tree)
            >>> [ast.unparse(v) for v in names.assigned(tree.body[-1].value)]
            ["'cuda'"]
        """
        found: list[ast.expr] = []
        return found if self._values(node, every, found, 0) else None

    def _values(self, node: ast.expr, every: bool, found: list[ast.expr], depth: int) -> bool:
        """Add what ``node`` (a name or a dict literal's entry) holds to ``found``;
        ``False`` where it cannot be told and ``every`` asks that it be."""
        if isinstance(node, ast.Subscript):
            entry = self._entry(node)
            if entry is None:
                return not every
            values = [entry]
        elif isinstance(node, ast.Attribute):
            values = self._stored(node)
            if not values:
                return not every
        elif isinstance(node, ast.Name):
            bindings = self.bindings(node)
            if every and not bindings:
                return False
            values = []
            for binding in bindings:
                if binding.kind == "assign" and binding.value is not None:
                    if binding.element is None:
                        values.append(binding.value)
                        continue
                if every:
                    return False
        else:
            return not every
        for value in values:
            if not _copies(value) or depth >= _COPIES:
                found.append(value)
                continue
            inner: list[ast.expr] = []
            if not self._values(value, every, inner, depth + 1):
                return False
            found.extend(inner or [value])  # a parameter copied: the copy is the value
        return True

    def _stored(self, node: ast.Attribute) -> list[ast.expr]:
        """What ``name.attr = value`` statements store in the attribute ``node`` reads
        (``cfg.device`` after ``cfg.device = device``), for a name that sees the same
        bindings; ``self``'s attributes are ``_values``' (a class's, not a scope's)."""
        if not isinstance(node.value, ast.Name) or node.value.id == "self":
            return []
        if self._attribute_stores is None:
            self._attribute_stores = {}
            for statement in ast.walk(self.tree):
                if not isinstance(statement, ast.Assign):
                    continue
                for target in statement.targets:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                        owner = self.bindings(target.value)
                        if owner:
                            key = (id(owner), target.attr)
                            self._attribute_stores.setdefault(key, []).append(statement.value)
        bindings = self.bindings(node.value)
        return self._attribute_stores.get((id(bindings), node.attr), []) if bindings else []

    def _entry(self, node: ast.Subscript) -> ast.expr | None:
        """The entry a constant key reads from the dict literals a name holds
        (``options["device"]`` after ``options = {"device": d}``)."""
        if not (isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Constant)):
            return None
        entries = [
            v
            for b in self.bindings(node.value)
            if b.kind == "assign" and isinstance(b.value, ast.Dict) and b.element is None
            for k, v in zip(b.value.keys, b.value.values, strict=True)
            if isinstance(k, ast.Constant) and k.value == node.slice.value
        ]
        return entries[0] if len(entries) == 1 else None

    def origin(self, node: ast.Name) -> str | None:
        """The module or object a name was imported as, if every binding is that import.

        An alias counts as the import it names (``autocast = torch.cuda.amp.autocast``),
        and a guarded import's fallback does not count (``xm = None`` in an ``except
        ImportError:`` handler): the name means the module wherever it is used. Worked
        out once per name, scope and depth (every read of the name shares its bindings),
        so a name bound many times costs no more than one bound once.
        """
        if not isinstance(node.ctx, ast.Load):
            return None  # binding the name, not using what it names
        return self._origin(node, depth=0)

    def _origin(self, node: ast.Name, depth: int) -> str | None:
        bindings = self.bindings(node)
        if not bindings:
            return None  # a builtin or unknown name
        key = (id(bindings), depth)  # the scope's list of the name's bindings
        if key not in self._origins:
            self._origins[key] = self._resolve_origin(bindings, depth)
        if self._origins[key] is None and (last := self._last_binding(node, bindings)):
            key = (id(last), depth)  # the one binding every read after it sees
            if key not in self._origins:
                self._origins[key] = self._resolve_origin([last], depth)
            return self._origins[key]
        return self._origins[key]

    def _last_binding(self, node: ast.Name, bindings: list[Binding]) -> Binding | None:
        """The binding a read sees when the module binds the name more than once and the
        last binding is a statement of the module's own body, above the read's
        (open-instruct: ``import deepspeed.comm as dist`` in a ``try:``, then ``import
        torch.distributed as dist``; a function defined after both reads torch's). Not
        when a function rebinds the module's name (``global``): that may run at any
        time. The last binding is worked out once per name (``_module_last``); each read
        costs only the walk to its own module-level statement."""
        if len(bindings) < 2 or bindings[0].scope is not self.module:
            return None
        key = id(bindings)
        if key not in self._module_lasts:
            self._module_lasts[key] = self._module_last(bindings)
        found = self._module_lasts[key]
        if found is None:
            return None
        last, binding = found
        top = self.statement(node)
        while top is not None and self.parents.get(top) is not self.tree:
            top = self.statement(self.parents[top]) if top in self.parents else None
        if top is None or top.lineno <= (last.end_lineno or last.lineno):
            return None
        return binding

    def _module_last(self, bindings: list[Binding]) -> tuple[ast.stmt, Binding] | None:
        """The last of a module name's bindings, if each is outside every function and
        the last is a statement of the module's body: (that statement, its binding)."""
        statements = [self.statement(b.node) for b in bindings]
        if any(
            s is None or self.enclosing(s, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            for s in statements
        ):
            return None
        last = max(statements, key=lambda s: s.lineno)  # type: ignore[union-attr]
        if self.parents.get(last) is not self.tree:  # type: ignore[arg-type]
            return None
        return last, bindings[statements.index(last)]  # type: ignore[return-value]

    def _resolve_origin(self, bindings: list[Binding], depth: int) -> str | None:
        origins: set[str | None] = set()
        for binding in bindings:
            if self._import_fallback(binding) or self._rebinds_itself(binding):
                continue
            if binding.kind == "import":
                origins.add(_public(binding.origin))
            elif binding.element == 0 and (guarded := _optional_import(binding)):
                origins.add(guarded)
            elif binding.kind == "assign" and binding.element is None and depth < 4:
                origins.add(self._dotted(binding.value, depth + 1))
            else:
                return None
        return origins.pop() if len(origins) == 1 else None

    def _dotted(self, node: ast.AST | None, depth: int) -> str | None:
        """``torch.cuda.amp.autocast`` for that expression, when it names an import."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        root = self._origin(node, depth)
        return None if root is None else ".".join([root, *reversed(parts)])

    @staticmethod
    def _rebinds_itself(binding: Binding) -> bool:
        """``ShardedGradScaler = ShardedGradScaler``: a module re-exporting an import under
        its own name binds what the import bound."""
        value = binding.value
        return (
            binding.kind == "assign"
            and binding.element is None
            and isinstance(value, ast.Name)
            and value.id == binding.name
        )

    def _import_fallback(self, binding: Binding) -> bool:
        """``name = None`` (a constant) in an ``except ImportError:`` handler."""
        if binding.kind != "assign" or not isinstance(binding.value, ast.Constant):
            return False
        handler = self.enclosing(binding.node, ast.ExceptHandler)
        caught = handler.type if isinstance(handler, ast.ExceptHandler) else None
        names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
        return any(
            isinstance(name, ast.Name) and name.id in ("ImportError", "ModuleNotFoundError")
            for name in names
        )

    def loads(self, binding: Binding) -> list[ast.Name]:
        """Every read of the name that can see this binding (flow-insensitive)."""
        return self._loads.get((id(binding.scope), binding.name), [])

    def is_builtin(self, node: ast.Name) -> bool:
        """The name refers to no binding of the file (a builtin, or undefined)."""
        scope = self.scope_of.get(node)
        return scope is not None and self.home(node.id, scope) is None

    def enclosing(self, node: ast.AST, *types: type[ast.AST]) -> ast.AST | None:
        """The nearest ancestor of one of ``types``."""
        parent = self.parents.get(node)
        while parent is not None and not isinstance(parent, types):
            parent = self.parents.get(parent)
        return parent

    def statement(self, node: ast.AST) -> ast.stmt | None:
        """The statement containing ``node`` (itself, for a statement); each node's is
        kept, so a node nested ``n`` deep costs ``n`` steps once."""
        walked: list[ast.AST] = []
        found: ast.AST | None = node
        while found is not None and found not in self._statements:
            if isinstance(found, ast.stmt):
                self._statements[found] = found
                break
            walked.append(found)
            found = self.parents.get(found)
        statement = None if found is None else self._statements[found]
        for inner in walked:
            self._statements[inner] = statement
        return statement

    def only_before(self, load: ast.AST, statement: ast.stmt) -> bool:
        """``load`` is in the same body as ``statement``, earlier (or in the value it
        assigns: ``x`` of ``x = x.cuda()`` reads the old ``x``), outside any loop around
        both."""
        if self.scope_of.get(load) is not self.scope_of.get(statement):
            return False
        earlier = (load.lineno, load.col_offset) < (statement.lineno, statement.col_offset)  # type: ignore[attr-defined]
        if not (earlier or self._in_value_of(load, statement)):
            return False
        node: ast.AST | None = statement
        while node is not None:
            if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
                return False
            node = self.parents.get(node)
        return True

    def _in_value_of(self, load: ast.AST, statement: ast.stmt) -> bool:
        """``load`` is in the value ``statement`` assigns, which runs before it binds."""
        if not isinstance(statement, (ast.Assign, ast.AnnAssign)) or statement.value is None:
            return False
        node: ast.AST | None = load
        while node is not None and node is not statement:
            if node is statement.value:
                return True
            node = self.parents.get(node)
        return False

    def definitions(self) -> Iterator[Binding]:
        """Every ``def``/``class`` binding of the file, scope by scope in creation order."""
        for scope in self.scopes:
            for bindings in scope.bindings.values():
                yield from (b for b in bindings if b.kind in ("def", "class"))


class _Builder:
    """Collects the scopes and bindings of a tree (one instance per scope)."""

    def __init__(self, names: Names, scope: Scope) -> None:
        self.names = names
        self.scope = scope

    def bind(
        self,
        name: str,
        node: ast.AST,
        kind: str,
        value: ast.expr | None = None,
        origin: str | None = None,
        element: int | None = None,
    ) -> None:
        scope = self.scope
        if name in scope.declared_global:
            scope = self.names.module
        elif name in scope.declared_nonlocal:
            scope = self.names._enclosing_function(name, scope.parent) or scope
        elif scope.kind == "comprehension" and kind == "walrus":
            while scope.kind == "comprehension" and scope.parent is not None:
                scope = scope.parent
            kind = "assign"
        binding = Binding(name, scope, node, kind, value, origin, element)
        scope.bindings.setdefault(name, []).append(binding)
        self.names.binding_of[node] = binding

    # -- traversal -----------------------------------------------------------------
    def visit_body(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            self.visit(child)

    def visit(self, node: ast.AST) -> None:
        self.names.scope_of[node] = self.scope
        method = getattr(self, f"visit_{type(node).__name__}", None)
        if method is not None:
            method(node)
        else:
            self.visit_body(node)

    def _child(self, node: ast.AST, kind: str) -> _Builder:
        scope = Scope(node, self.scope, kind)
        self.names.scopes.append(scope)
        self.names.scope_by_node[node] = scope
        return _Builder(self.names, scope)

    def visit_Global(self, node: ast.Global) -> None:
        self.scope.declared_global.update(node.names)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.scope.declared_nonlocal.update(node.names)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.names.scope_of[alias] = self.scope
            if alias.asname:
                self.bind(alias.asname, alias, "import", origin=alias.name)
            else:
                top = alias.name.split(".")[0]
                self.bind(top, alias, "import", origin=top)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            self.names.scope_of[alias] = self.scope
            if alias.name == "*":
                for name, origin in _STAR_EXPORTS.get(node.module or "", {}).items():
                    self.bind(name, alias, "import", origin=origin)
                continue
            if node.module and node.level == 0:
                self.bind(
                    alias.asname or alias.name,
                    alias,
                    "import",
                    origin=f"{node.module}.{alias.name}",
                )
            else:  # a relative import: this project's own code
                self.bind(alias.asname or alias.name, alias, "other")

    def _definition(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        arguments = node.args
        for expression in [*arguments.defaults, *(d for d in arguments.kw_defaults if d)]:
            self.visit(expression)
        if not isinstance(node, ast.Lambda):
            for decorator in node.decorator_list:
                self.visit(decorator)
            if node.returns is not None:
                self.visit(node.returns)
        inner = self._child(node, "function")
        every = [
            *arguments.posonlyargs,
            *arguments.args,
            *([arguments.vararg] if arguments.vararg else []),
            *arguments.kwonlyargs,
            *([arguments.kwarg] if arguments.kwarg else []),
        ]
        for argument in every:
            self.names.scope_of[argument] = inner.scope
            if argument.annotation is not None:
                self.visit(argument.annotation)
            inner.bind(argument.arg, argument, "param")
        if isinstance(node, ast.Lambda):
            inner.visit(node.body)
        else:
            for statement in node.body:
                inner.visit(statement)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.bind(node.name, node, "def")
        self._definition(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.bind(node.name, node, "def")
        self._definition(node)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._definition(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expression in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expression)
        self.bind(node.name, node, "class")
        inner = self._child(node, "class")
        for statement in node.body:
            inner.visit(statement)

    def _comprehension(self, node: ast.AST, generators: list[ast.comprehension]) -> None:
        self.visit(generators[0].iter)  # evaluated in the enclosing scope
        inner = self._child(node, "comprehension")
        for position, generator in enumerate(generators):
            inner.names.scope_of[generator] = inner.scope
            if position:
                inner.visit(generator.iter)
            inner.target(generator.target, "for", generator.iter)
            for condition in generator.ifs:
                inner.visit(condition)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.comprehension):
                inner.visit(child)

    def visit_ListComp(self, node: ast.ListComp) -> None:
        self._comprehension(node, node.generators)

    def visit_SetComp(self, node: ast.SetComp) -> None:
        self._comprehension(node, node.generators)

    def visit_GeneratorExp(self, node: ast.GeneratorExp) -> None:
        self._comprehension(node, node.generators)

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._comprehension(node, node.generators)

    # -- binding statements ---------------------------------------------------------
    def target(self, target: ast.AST, kind: str, value: ast.expr | None) -> None:
        """Bind the names of an assignment target; ``value`` is the whole value."""
        self.names.scope_of[target] = self.scope
        if isinstance(target, ast.Name):
            self.bind(target.id, target, kind, value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            elements = target.elts
            literal = (
                isinstance(value, (ast.Tuple, ast.List))
                and len(value.elts) == len(elements)
                and not any(isinstance(e, ast.Starred) for e in [*elements, *value.elts])
            )
            for position, element in enumerate(elements):
                if literal:
                    assert isinstance(value, (ast.Tuple, ast.List))
                    self.target(element, kind, value.elts[position])
                else:
                    self._element(element, kind, value, position)
        elif isinstance(target, ast.Starred):
            self.names.scope_of[target.value] = self.scope
            self._element(target.value, kind, None, None)
        else:  # attribute or subscript: not a binding, but its parts are read
            self.visit(target)

    def _element(
        self, target: ast.AST, kind: str, value: ast.expr | None, position: int | None
    ) -> None:
        self.names.scope_of[target] = self.scope
        if isinstance(target, ast.Name):
            self.bind(target.id, target, kind, value, element=position)
        else:
            self.target(target, kind, None)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self.target(target, "assign", node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self.visit(node.annotation)
        self.target(node.target, "assign", node.value)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        if isinstance(node.target, ast.Name):
            self.names.scope_of[node.target] = self.scope
            self.bind(node.target.id, node.target, "other")
        else:
            self.visit(node.target)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self.names.scope_of[node.target] = self.scope
        self.bind(node.target.id, node.target, "walrus", node.value)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        self.target(node.target, "for", node.iter)
        for statement in [*node.body, *node.orelse]:
            self.visit(statement)

    visit_AsyncFor = visit_For

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            self.names.scope_of[item] = self.scope
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self.target(item.optional_vars, "with", item.context_expr)
        for statement in node.body:
            self.visit(statement)

    visit_AsyncWith = visit_With

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.type is not None:
            self.visit(node.type)
        if node.name:
            self.bind(node.name, node, "other")
        for statement in node.body:
            self.visit(statement)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.name:
            self.bind(node.name, node, "other")
        self.visit_body(node)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self.bind(node.name, node, "other")

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        if node.rest:
            self.bind(node.rest, node, "other")
        self.visit_body(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self.names.scope_of[target] = self.scope
            if not isinstance(target, ast.Name):
                self.visit(target)


def all_names(tree: ast.Module) -> set[str]:
    """The constant names of a module's ``__all__ = [...]``."""
    found: set[str] = set()
    for statement in tree.body:
        if (
            isinstance(statement, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in statement.targets)
            and isinstance(statement.value, (ast.List, ast.Tuple))
        ):
            found |= {
                e.value
                for e in statement.value.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            }
    return found


def is_main_guard(statement: ast.stmt) -> bool:
    """``if __name__ == "__main__":``."""
    test = statement.test if isinstance(statement, ast.If) else None
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )
