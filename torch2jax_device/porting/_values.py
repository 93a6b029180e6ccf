"""What a value is, and where it goes: the evidence behind ``scan --diff``'s safety rules.

``Values.kinds`` says what an expression holds (a torch module, a Flax NNX module, a
torch tensor, a ``torch.device``, a file object, a path...) from how it was made:
imports, constructors, classes of the file and their bases, the arguments every call
of a function of the file passes, what functions return. ``Values.escape`` follows a
value that a rewrite would change (a torch tensor becoming a JAX array, a
``torch.device`` becoming a ``tj.device``) through assignments, containers, loops,
calls of the file's functions and returns, and says where it would reach code that
cannot take the new value. Anything it cannot follow counts as such a place: the
scanner then reports the idiom instead of rewriting it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator

from ._names import Binding, Names

__all__ = ["Values"]

UNKNOWN = "?"
TORCH_MODULE = "torch-module"
WRAPPED = "ddp-wrapped"
NNX_MODULE = "nnx-module"
TORCH_TENSOR = "torch-tensor"
JAX_ARRAY = "jax-array"
TORCH_DEVICE = "torch-device"
CHECKPOINT = "checkpoint"
FILE = "file"
PATH = "path"
ARGS = "args"
ARGS_VALUE = "args-value"
PARSER = "argparser"
LOADER = "loader"
NUMBER = "number"
CLASS = "class"
FUNCTION = "function"

# Names the scanner treats as what they are called: a qualified name -> a kind.
_CONSTRUCTORS = {
    "torch.nn.parallel.DistributedDataParallel": {TORCH_MODULE, WRAPPED},
    "torch.nn.DataParallel": {TORCH_MODULE, WRAPPED},
    "torch.nn.parallel.DataParallel": {TORCH_MODULE, WRAPPED},
    "torch.nn.Parameter": {TORCH_TENSOR},
    "torch.nn.parameter.Parameter": {TORCH_TENSOR},
    "torch.device": {TORCH_DEVICE},
    "torch.load": {CHECKPOINT},
    "torch.utils.data.DataLoader": {LOADER},
    "torch.utils.data.dataloader.DataLoader": {LOADER},
    "argparse.ArgumentParser": {PARSER},
    "builtins.open": {FILE},
    "io.open": {FILE},
    "io.BytesIO": {FILE},
    "gzip.open": {FILE},
    "os.path.join": {PATH},
    "os.path.expanduser": {PATH},
    "os.path.abspath": {PATH},
    "os.path.realpath": {PATH},
    "os.fspath": {PATH},
    "pathlib.Path": {PATH},
    "pathlib.PurePath": {PATH},
    "torch.amp.GradScaler": {"grad-scaler"},
    "torch.cuda.amp.GradScaler": {"grad-scaler"},
    "torch.cpu.amp.GradScaler": {"grad-scaler"},
    "torch.GradScaler": {"grad-scaler"},
    "torch.cuda.Event": {"cuda-event"},
    "torch.Event": {"cuda-event"},
    "torch.cuda.Stream": {"cuda-stream"},
    "torch.autocast": {"autocast"},
    "torch.amp.autocast": {"autocast"},
    "torch.cuda.amp.autocast": {"autocast"},
    "torch.cpu.amp.autocast": {"autocast"},
    "torch.utils.data.distributed.DistributedSampler": {"dist-sampler"},
    "torch.utils.data.DistributedSampler": {"dist-sampler"},
}
# torch functions that do not return a tensor.
_TORCH_NOT_TENSORS = frozenset(
    "device load save manual_seed seed initial_seed no_grad inference_mode enable_grad "
    "set_grad_enabled compile autocast is_tensor is_floating_point is_complex numel "
    "set_default_device get_default_device set_default_dtype get_default_dtype "
    "set_float32_matmul_precision get_float32_matmul_precision use_deterministic_algorithms "
    "set_num_threads get_num_threads Generator dtype finfo iinfo Size typename".split()
)
# Methods whose result is the object they are called on (module and tensor "in place").
_SELF_METHODS = frozenset(
    "to cuda cpu train eval half float double bfloat16 requires_grad_ share_memory_ "
    "zero_ apply".split()
)
# Evidence that a name holds a module: methods only modules have.
_MODULE_METHODS = frozenset(
    "parameters named_parameters buffers named_buffers modules named_modules children "
    "named_children train eval state_dict load_state_dict register_buffer "
    "register_parameter zero_grad apply requires_grad_".split()
)
_MODULE_NAMES = re.compile(
    r"(^|_)(model|net|module|network|encoder|decoder|backbone|head|classifier|unet|vae|"
    r"transformer|student|teacher|critic|actor|policy|generator|discriminator|ema)"
    r"(_|$|\d)|model$|net$",
    re.IGNORECASE,
)
# Builtins whose result is a plain Python value whatever the argument.
_HOST_BUILTINS = frozenset(
    "print len str repr format id hash bool float int callable vars dir getattr hasattr".split()
)
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
# Qualified-name prefixes of code that takes JAX arrays (and, for the first, tj devices).
TJ = "torch2jax_device"
_JAX_CODE = ("torch2jax_device", "jax", "flax", "optax", "numpy", "math", "safetensors.flax")
# Of those, code that only reads values on the host (it takes torch tensors too).
_HOST_CODE = ("numpy", "math")


def _prefixed(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


class Values:
    """Kinds of expressions and escape analysis over one file."""

    def __init__(self, names: Names, qualname: Callable[[ast.AST], str | None]) -> None:
        self.names = names
        self.qualname = qualname
        self._kinds: dict[ast.AST, frozenset[str]] = {}
        self._computing: dict[ast.AST, int] = {}  # node -> depth, while being computed
        self._partial: dict[ast.AST, tuple[frozenset[str], int]] = {}
        self._deepest_cycle = 1 << 30
        self._calls: dict[int, list[ast.Call]] | None = None
        self._attributes: dict[tuple[int, str], list[ast.expr]] | None = None
        self._method_uses: dict[int, set[str]] | None = None
        self._read_by_jax = False
        self._file_types = any(
            isinstance(node, ast.Attribute) and node.attr == "FileType"
            for node in ast.walk(names.tree)
        )

    # -- kinds ----------------------------------------------------------------------
    def kinds(self, node: ast.AST) -> frozenset[str]:
        """What ``node`` can hold; contains ``"?"`` when something about it is unknown.

        A value defined in terms of itself (``model = load(model.cpu())``) holds what its
        other definitions hold: a node met again while it is being computed counts as
        nothing, and what was computed under that assumption is not remembered.
        """
        if node in self._kinds:
            return self._kinds[node]
        if node in self._partial:  # computed in this query, inside a cycle
            found, cycle = self._partial[node]
            self._deepest_cycle = min(self._deepest_cycle, cycle)
            return found
        if node in self._computing:
            self._deepest_cycle = min(self._deepest_cycle, self._computing[node])
            return frozenset()
        depth = len(self._computing)
        self._computing[node] = depth
        outer, self._deepest_cycle = self._deepest_cycle, depth + 1
        try:
            found = frozenset(self._compute(node))
        finally:
            del self._computing[node]
        if self._deepest_cycle > depth:
            found = found or frozenset({UNKNOWN})
            self._kinds[node] = found  # no cycle through an outer node: final
        else:
            self._partial[node] = (found, self._deepest_cycle)
        self._deepest_cycle = min(outer, self._deepest_cycle)
        if not self._computing:
            self._partial.clear()
        return found

    def _compute(self, node: ast.AST) -> set[str]:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                return {PATH}
            return {NUMBER} if isinstance(node.value, (int, float)) else {UNKNOWN}
        if isinstance(node, ast.JoinedStr):
            return {PATH}
        if isinstance(node, ast.BinOp):
            sides = self.kinds(node.left) | self.kinds(node.right)
            if PATH in sides and isinstance(node.op, (ast.Add, ast.Div, ast.Mod)):
                return {PATH}
            return {NUMBER} if sides == {NUMBER} else {UNKNOWN}
        if isinstance(node, (ast.IfExp, ast.BoolOp)):
            parts = [node.body, node.orelse] if isinstance(node, ast.IfExp) else node.values
            return set().union(*(self.kinds(p) for p in parts))
        if isinstance(node, ast.Name):
            return self._name_kinds(node)
        if isinstance(node, ast.Call):
            return self._call_kinds(node)
        if isinstance(node, ast.Attribute):
            return self._attribute_kinds(node)
        if isinstance(node, ast.Subscript):
            inner = self.kinds(node.value)
            kept = inner & {CHECKPOINT, TORCH_TENSOR, JAX_ARRAY, ARGS_VALUE}
            return set(kept) if kept else {UNKNOWN}
        return {UNKNOWN}

    def _name_kinds(self, node: ast.Name) -> set[str]:
        if self.names.is_builtin(node):
            return {UNKNOWN}
        found: set[str] = set()
        for binding in self.names.bindings(node):
            found |= self.binding_kinds(binding)
        return found

    def binding_kinds(self, binding: Binding) -> set[str]:
        """What a binding holds."""
        if binding.kind == "import":
            return {UNKNOWN}
        if binding.kind == "def":
            return {FUNCTION}
        if binding.kind == "class":
            return {CLASS}
        if binding.kind == "assign" and binding.value is not None:
            if binding.element is None:
                return set(self.kinds(binding.value))
            return {UNKNOWN}
        if binding.kind == "for" and binding.value is not None:
            return self._element_kinds(binding.value, binding.element)
        if binding.kind == "with" and binding.value is not None:
            inner = self.kinds(binding.value)
            return {FILE} if FILE in inner else {UNKNOWN}
        if binding.kind == "param":
            return self._parameter_kinds(binding)
        return {UNKNOWN}

    def _element_kinds(self, iterable: ast.expr, position: int | None) -> set[str]:
        """What ``for x in iterable`` (``position`` for ``for a, b in ...``) binds."""
        if isinstance(iterable, ast.Call):
            name = self.qualname(iterable.func) or self._builtin(iterable.func)
            if name == "enumerate" and iterable.args:
                if position == 0:
                    return {NUMBER}
                return self._element_kinds(iterable.args[0], None) if position == 1 else {UNKNOWN}
            if name in ("tqdm.tqdm", "tqdm.auto.tqdm", "iter") and iterable.args:
                return self._element_kinds(iterable.args[0], position)
        if LOADER in self.kinds(iterable):
            return {TORCH_TENSOR}
        return {UNKNOWN}

    def _builtin(self, func: ast.AST) -> str | None:
        if isinstance(func, ast.Name) and self.names.is_builtin(func):
            return func.id
        return None

    def _parameter_kinds(self, binding: Binding) -> set[str]:
        function = self.names.enclosing(binding.node, ast.FunctionDef, ast.AsyncFunctionDef)
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return {UNKNOWN}
        arguments = self.arguments_for(function, binding.name)
        if arguments is None or not arguments:
            return {UNKNOWN}
        found: set[str] = set()
        for argument in arguments:
            found |= self.kinds(argument)
        return found

    def arguments_for(
        self, function: ast.FunctionDef | ast.AsyncFunctionDef, parameter: str
    ) -> list[ast.expr] | None:
        """What every call of ``function`` in the file passes as ``parameter``.

        ``None`` when that cannot be known: the function is a method, is used other than
        by calling it, or a call passes ``*args``/``**kwargs``.
        """
        calls = self.calls_of(function)
        if calls is None:
            return None
        positional = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
        found: list[ast.expr] = []
        for call in calls:
            if any(isinstance(a, ast.Starred) for a in call.args) or any(
                k.arg is None for k in call.keywords
            ):
                return None
            keyword = next((k.value for k in call.keywords if k.arg == parameter), None)
            if keyword is not None:
                found.append(keyword)
            elif parameter in positional and positional.index(parameter) < len(call.args):
                found.append(call.args[positional.index(parameter)])
            else:
                defaults = function.args.defaults
                offset = len(positional) - len(defaults)
                if parameter in positional and positional.index(parameter) >= offset:
                    found.append(defaults[positional.index(parameter) - offset])
                else:
                    return None
        return found

    def calls_of(self, function: ast.AST) -> list[ast.Call] | None:
        """Every call of a function defined in the file; ``None`` if it escapes."""
        if self._calls is None:
            self._index_calls()
        assert self._calls is not None
        scope = self.names.scope_of.get(function)
        if scope is None or scope.kind == "class" or isinstance(function, ast.Lambda):
            return None
        return self._calls.get(id(function))

    def _index_calls(self) -> None:
        calls: dict[int, list[ast.Call]] = {}
        escaped: set[int] = set()
        for binding in self.names.definitions():
            if binding.kind != "def":
                continue
            for load in self.names.loads(binding):
                parent = self.names.parents.get(load)
                if isinstance(parent, ast.Call) and parent.func is load:
                    calls.setdefault(id(binding.node), []).append(parent)
                else:
                    escaped.add(id(binding.node))
            calls.setdefault(id(binding.node), [])
        for key in escaped:
            calls.pop(key, None)
        self._calls = calls

    def _call_kinds(self, node: ast.Call) -> set[str]:
        name = self.qualname(node.func)
        builtin = self._builtin(node.func)
        if builtin == "open":
            return {FILE}
        if builtin == "str":
            return {PATH}
        if name == f"{TJ}.to_device" and node.args:
            moved = self.kinds(node.args[0])
            if NNX_MODULE in moved:
                return set(moved)  # an NNX module moves in place and comes back
        if name is not None:
            return self._qualified_call_kinds(name)
        if isinstance(node.func, ast.Name):
            return self._local_call_kinds(node.func)
        if isinstance(node.func, ast.Attribute):
            receiver = self.kinds(node.func.value)
            method = node.func.attr
            if method in _SELF_METHODS and (
                not receiver or receiver & {TORCH_MODULE, NNX_MODULE, TORCH_TENSOR}
            ):
                return set(receiver)  # nothing yet, inside a cycle: nothing more
            if PARSER in receiver and method in ("parse_args", "parse_known_args"):
                return {ARGS}
            if TORCH_TENSOR in receiver and method not in ("item", "tolist", "numpy", "size"):
                return {TORCH_TENSOR}
            if receiver == {JAX_ARRAY} and method not in ("item", "tolist"):
                return {JAX_ARRAY}
        return {UNKNOWN}

    def _qualified_call_kinds(self, name: str) -> set[str]:
        if name in _CONSTRUCTORS:
            return set(_CONSTRUCTORS[name])
        last = name.rsplit(".", 1)[-1]
        if name.startswith("torch.nn.functional.") or name == "torch.from_numpy":
            return {TORCH_TENSOR}
        if name.startswith(("torch.nn.", "torchvision.models.", "timm.")) and last[:1].isupper():
            return {TORCH_MODULE}
        if name in ("timm.create_model",) or (
            _prefixed(name, ("transformers", "diffusers")) and last == "from_pretrained"
        ):
            return {TORCH_MODULE}
        if name.startswith("torch.") and name.count(".") == 1 and last not in _TORCH_NOT_TENSORS:
            return {TORCH_TENSOR} if last[:1].islower() else {UNKNOWN}
        if name.startswith("flax.nnx.") and last[:1].isupper():
            return {NNX_MODULE}
        if _prefixed(name, ("jax.numpy", "jax.random", "jax.nn", "jax.lax")):
            return {JAX_ARRAY}
        if name in ("jax.device_put", f"{TJ}.to_device", f"{TJ}.to_jax", f"{TJ}.pin_memory"):
            return {JAX_ARRAY}
        if name in (f"{TJ}.load", f"{TJ}.load_file"):
            return {CHECKPOINT, JAX_ARRAY}
        return {UNKNOWN}

    def _local_call_kinds(self, func: ast.Name) -> set[str]:
        found: set[str] = set()
        for binding in self.names.bindings(func):
            if binding.kind == "class":
                assert isinstance(binding.node, ast.ClassDef)
                found |= self.class_kinds(binding.node)
            elif binding.kind == "def":
                node = binding.node
                assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                returns = [
                    r.value
                    for r in _own_nodes(node)
                    if isinstance(r, ast.Return) and r.value is not None
                ]
                if not returns:
                    found.add(UNKNOWN)
                for value in returns:
                    found |= self.kinds(value)
            elif self.binding_kinds(binding) == {NNX_MODULE}:
                found.add(JAX_ARRAY)  # calling a Flax NNX module
            else:
                found.add(UNKNOWN)
        return found

    def class_kinds(self, node: ast.ClassDef) -> set[str]:
        """What instances of a class of the file are, from its bases."""
        found: set[str] = set()
        for base in node.bases:
            name = self.qualname(base)
            if name is not None:
                if name.startswith(("torch.nn.", "torchvision.models.")):
                    found.add(TORCH_MODULE)
                elif name.startswith("flax.nnx."):
                    found.add(NNX_MODULE)
                else:
                    found.add(UNKNOWN)
            elif isinstance(base, ast.Name):
                for binding in self.names.bindings(base):
                    if binding.kind == "class":
                        assert isinstance(binding.node, ast.ClassDef)
                        found |= self.class_kinds(binding.node) - {CLASS}
                    else:
                        found.add(UNKNOWN)
            else:
                found.add(UNKNOWN)
        return found or {UNKNOWN}

    def _attribute_kinds(self, node: ast.Attribute) -> set[str]:
        receiver = self.kinds(node.value)
        if ARGS in receiver:
            return {ARGS_VALUE} if not self._file_types else {UNKNOWN}
        if node.attr == "module" and WRAPPED in receiver:
            return {TORCH_MODULE}
        stored = self.stored_attributes(node)
        if stored:
            return set().union(*(self.kinds(value) for value in stored))
        return {UNKNOWN}

    def stored_attributes(self, node: ast.Attribute) -> list[ast.expr]:
        """What ``self.x = value`` stores, for ``self.x`` read in a method of the class, or
        ``obj.x`` where ``obj`` is an instance of a class of the file."""
        owners: list[ast.AST]
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            owner = self.names.enclosing(node, ast.ClassDef)
            owners = [owner] if owner is not None else []
        else:
            owners = list(self.instance_classes(node.value, set()))
        if self._attributes is None:
            self._attributes = {}
            for target in ast.walk(self.names.tree):
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.ctx, ast.Store)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    klass = self.names.enclosing(target, ast.ClassDef)
                    statement = self.names.parents.get(target)
                    if klass is not None and isinstance(statement, ast.Assign):
                        key = (id(klass), target.attr)
                        self._attributes.setdefault(key, []).append(statement.value)
        return [v for owner in owners for v in self._attributes.get((id(owner), node.attr), [])]

    def instance_classes(self, node: ast.AST, seen: set[int]) -> list[ast.ClassDef]:
        """The classes of the file ``node`` is evidently an instance of."""
        if id(node) in seen:
            return []
        seen.add(id(node))
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                return [
                    b.node
                    for b in self.names.bindings(node.func)
                    if b.kind == "class" and isinstance(b.node, ast.ClassDef)
                ]
            if isinstance(node.func, ast.Attribute) and node.func.attr in _SELF_METHODS:
                return self.instance_classes(node.func.value, seen)
        if isinstance(node, ast.Name):
            found: list[ast.ClassDef] = []
            for binding in self.names.bindings(node):
                if (
                    binding.kind == "assign"
                    and binding.value is not None
                    and binding.element is None
                ):
                    found += self.instance_classes(binding.value, seen)
            return found
        if isinstance(node, ast.Attribute):
            return [c for v in self.stored_attributes(node) for c in self.instance_classes(v, seen)]
        return []

    # -- modules ------------------------------------------------------------------------
    def module_framework(self, node: ast.AST) -> str | None:
        """``"torch"``/``"nnx"`` when ``node`` is evidently a module of that framework,
        ``"module"`` when it looks like a module of either, ``None`` otherwise."""
        kinds = self.kinds(node)
        if TORCH_MODULE in kinds:
            return "torch"
        if NNX_MODULE in kinds:
            return "nnx" if kinds == {NNX_MODULE} else "module"
        if self._used_as_module(node):
            return "module"
        name = _last_name(node)
        if name is not None and _MODULE_NAMES.search(name):
            return "module"
        return None

    def _used_as_module(self, node: ast.AST) -> bool:
        if not isinstance(node, ast.Name):
            return False
        if self._method_uses is None:
            uses: dict[int, set[str]] = {}
            for load in ast.walk(self.names.tree):
                if not (isinstance(load, ast.Name) and isinstance(load.ctx, ast.Load)):
                    continue
                parent = self.names.parents.get(load)
                if isinstance(parent, ast.Attribute) and parent.attr in _MODULE_METHODS:
                    for binding in self.names.bindings(load):
                        uses.setdefault(id(binding), set()).add(parent.attr)
            self._method_uses = uses
        return any(id(b) in self._method_uses for b in self.names.bindings(node))

    # -- escape analysis ----------------------------------------------------------------
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
        self._read_by_jax = False
        work: list[ast.AST] = [node]
        seen: set[int] = set()
        while work:
            expression = work.pop(0)
            if id(expression) in seen:
                continue
            seen.add(id(expression))
            reason = self._use(expression, policy, rewritten, work)
            if reason is not None:
                return reason, self._read_by_jax
            if len(seen) > 5000:
                return "too many uses to follow", self._read_by_jax
        return None, self._read_by_jax

    def _text(self, node: ast.AST) -> str:
        text = ast.unparse(node)
        return text if len(text) <= 60 else text[:57] + "..."

    def _use(
        self, node: ast.AST, policy: str, rewritten: Callable[[ast.AST], bool], work: list[ast.AST]
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
                return f"{where}: {self._text(parent)} calls it"
            return self._argument(parent, node, policy, rewritten, work)
        if isinstance(parent, ast.Attribute):
            return self._attribute(parent, policy, rewritten, work)
        if isinstance(parent, ast.Subscript):
            if parent.value is node and policy == "array":
                if isinstance(parent.ctx, ast.Store):
                    return (
                        f"{where}: {self._text(parent)} = ... writes into it (arrays are immutable)"
                    )
                work.append(parent)
                return None
            return f"{where}: used as an index in {self._text(parent)}"
        if isinstance(parent, ast.BinOp):
            if policy != "array":
                return f"{where}: {self._text(parent)}"
            other = parent.right if parent.left is node else parent.left
            if self.kinds(other) <= {NUMBER, JAX_ARRAY}:
                work.append(parent)
                return None
            return (
                f"{where}: {self._text(parent)} combines it with a value that may be a torch tensor"
            )
        if isinstance(parent, ast.UnaryOp):
            if policy != "array":
                return f"{where}: {self._text(parent)}"
            work.append(parent)
            return None
        if isinstance(parent, ast.Compare):
            others = [c for c in [parent.left, *parent.comparators] if c is not node]
            if policy == "device":
                if all(isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)) for op in parent.ops):
                    return None
                return f"{where}: {self._text(parent)}"
            if all(self.kinds(o) <= {NUMBER, JAX_ARRAY} for o in others):
                work.append(parent)
                return None
            return f"{where}: {self._text(parent)} compares it with a value that may be torch's"
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
        if isinstance(parent, (ast.For, ast.AsyncFor)) and parent.iter is node:
            reason = self._bind(parent.target, work)
            return f"{where}: {reason}" if reason else None
        if isinstance(parent, ast.comprehension) and parent.iter is node:
            reason = self._bind(parent.target, work)
            return f"{where}: {reason}" if reason else None
        if isinstance(parent, ast.withitem):
            return f"{where}: used as a context manager"
        return f"{where}: used in {self._text(parent)}"

    def _tuple_target(self, value: ast.Tuple | ast.List, element: ast.AST) -> ast.AST | None:
        """For ``a, b = x, y``: the target that receives ``element``."""
        assign = self.names.parents.get(value)
        if not (isinstance(assign, ast.Assign) and assign.value is value):
            return None
        position = value.elts.index(element)  # type: ignore[arg-type]
        for target in assign.targets:
            if isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == len(value.elts):
                return target.elts[position]
        return None

    def _bind(self, target: ast.AST, work: list[ast.AST]) -> str | None:
        if isinstance(target, ast.Name):
            binding = self.names.binding_of.get(target)
            if binding is not None:
                work.extend(self._visible_loads(binding))
            return None
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                reason = self._bind(element, work)
                if reason:
                    return reason
            return None
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            bindings = self.names.bindings(target.value)
            if bindings and all(_is_fresh_container(b) for b in bindings):
                for binding in bindings:
                    work.extend(self._visible_loads(binding))
                return None
        return f"stored in {self._text(target)}, whose uses the scanner cannot follow"

    def _visible_loads(self, binding: Binding) -> Iterator[ast.Name]:
        """Reads that may see ``binding``: not those that only run before it."""
        statement = self.names.statement(binding.node)
        for load in self.names.loads(binding):
            if statement is not None and self._only_before(load, statement):
                continue
            yield load

    def _only_before(self, load: ast.AST, statement: ast.stmt) -> bool:
        """``load`` is in the same body as ``statement``, earlier, outside any loop around both."""
        if self.names.scope_of.get(load) is not self.names.scope_of.get(statement):
            return False
        if (load.lineno, load.col_offset) >= (statement.lineno, statement.col_offset):  # type: ignore[attr-defined]
            return False
        node: ast.AST | None = statement
        while node is not None:
            if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
                return False
            node = self.names.parents.get(node)
        return True

    def _argument(
        self,
        call: ast.Call,
        node: ast.AST,
        policy: str,
        rewritten: Callable[[ast.AST], bool],
        work: list[ast.AST],
    ) -> str | None:
        where = f"line {call.lineno}: passed to {self._text(call)}"
        if rewritten(call):
            self._read_by_jax = True
            return None
        name = self.qualname(call.func)
        if name is not None:
            if _prefixed(name, (TJ,)) or (policy == "array" and _prefixed(name, _JAX_CODE)):
                self._read_by_jax = self._read_by_jax or not _prefixed(name, _HOST_CODE)
                return None
            return where
        builtin = self._builtin(call.func)
        if builtin in _HOST_BUILTINS:
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
            return self._local_argument(call, node, where, work)
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
                        work.extend(self._visible_loads(binding))
                    return None
            if policy == "array" and self.kinds(receiver) == {NNX_MODULE}:
                self._read_by_jax = True
                return None
        return where

    def _local_argument(
        self, call: ast.Call, node: ast.AST, where: str, work: list[ast.AST]
    ) -> str | None:
        assert isinstance(call.func, ast.Name)
        bindings = self.names.bindings(call.func)
        if not bindings:
            return where
        for binding in bindings:
            if binding.kind != "def":
                kinds = self.binding_kinds(binding)
                if kinds == {NNX_MODULE}:
                    self._read_by_jax = True
                    continue
                return where
            function = binding.node
            assert isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            if _is_jitted(function, self.qualname):
                self._read_by_jax = True
                continue
            parameter = _parameter_for(function, call, node)
            scope = self.names.scope_by_node.get(function)
            if parameter is None or scope is None:
                return where
            params = [b for b in scope.bindings.get(parameter, []) if b.kind == "param"]
            if not params:
                return where
            for param in params:
                work.extend(self.names.loads(param))
        return None

    def _returned(self, statement: ast.Return, work: list[ast.AST]) -> str | None:
        function = self.names.enclosing(
            statement, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda
        )
        where = f"line {statement.lineno}: returned"
        if function is None:
            return where
        calls = self.calls_of(function)
        if not calls:
            return f"{where} to callers the scanner cannot see"
        work.extend(calls)
        return None

    def _attribute(
        self,
        attribute: ast.Attribute,
        policy: str,
        rewritten: Callable[[ast.AST], bool],
        work: list[ast.AST],
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
            return f"{where}: {self._text(parent)} calls a torch method on it"
        if isinstance(attribute.ctx, ast.Store):
            return f"{where}: {self._text(attribute)} is assigned to"
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
        return f"{where}: reads {self._text(attribute)}, which differs on a JAX array"


def _last_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


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


def _is_jitted(
    function: ast.FunctionDef | ast.AsyncFunctionDef, qualname: Callable[[ast.AST], str | None]
) -> bool:
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = qualname(target)
        if name in ("jax.jit", "flax.nnx.jit", "jax.pmap", "equinox.filter_jit"):
            return True
    return False


def _parameter_for(
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


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's body, not those of functions or classes inside it."""
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))
