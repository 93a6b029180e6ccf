"""Start-up order: nothing that starts JAX may run before the job is joined.

``init_process_group``, ``jax.distributed.initialize``, ``tj.configure`` and
``set_per_process_memory_fraction`` must come before anything starts JAX's backends.
``StartupOrder`` follows each process's calls in the order they run (``_Traces``),
disables the rewrites that would start JAX too early, and reports a ``startup-order``
finding where the script already does.

A rewrite that would start JAX before the job is joined is never made, whether the join
is torch's or torch2jax_device's: the join may be ported later. The calls followed are
the ones a launcher makes: module-level code and the ``__main__`` block, the file's
functions they call or hand to another call (``launch(main)``, ``fire.Fire(main)``),
``mp.spawn`` targets, and every function the file never calls itself (an entry point
that a launcher or another module runs), each after the module's import.
"""

from __future__ import annotations

import ast

from . import catalog
from ._candidate import Candidate
from ._names import is_main_guard
from ._source import SourceFile
from ._values import TJ

__all__ = ["StartupOrder"]

# torch2jax_device names that do not start JAX's backends.
_QUIET = frozenset(
    {
        "tj.device",
        "tj.backends.cuda.is_built",
        "tj.backends.mps.is_built",
        "tj.cuda.is_initialized",
        "tj.cuda.manual_seed",
        "tj.cuda.manual_seed_all",
        "tj.save_file",
        "tj.distributed.get_rank",
        "tj.distributed.get_world_size",
        "tj.distributed.get_local_rank",
        "tj.distributed.is_initialized",
        "tj.distributed.destroy_process_group",
    }
)
# Calls that must come before anything starts JAX.
_FIRST = {
    "torch.distributed.init_process_group": "init_process_group",
    f"{TJ}.distributed.init_process_group": "init_process_group",
    "jax.distributed.initialize": "jax.distributed.initialize",
    "torch.cuda.set_per_process_memory_fraction": "set_per_process_memory_fraction",
    f"{TJ}.cuda.set_per_process_memory_fraction": "set_per_process_memory_fraction",
    f"{TJ}.configure": "tj.configure",
    # Libraries that create torch's process group (under a launcher, a tj call that
    # starts JAX joins a JAX job: that belongs after the library's own join).
    **{
        name: name
        for name in (
            "deepspeed.init_distributed",
            "deepspeed.initialize",
            "accelerate.Accelerator",
            "accelerate.PartialState",
            "accelerate.state.PartialState",
            "lightning.Fabric",
            "lightning.fabric.Fabric",
            "lightning_fabric.Fabric",
            "torchtune.training.init_distributed",
            "megatron.core.parallel_state.initialize_model_parallel",
        )
    },
}
# How many calls deep a project function's join is looked for.
_DEEPEST = 4
# Advice rows whose port creates arrays (and so starts JAX).
_ADVICE_STARTS = frozenset(
    {
        "factory-device",
        "factory-tensor-device",
        "tensor-new-factory",
        "module-device-kwarg",
        "cuda-tensor-type",
        "manual-seed",
        "generator-device",
        "dist-data-parallel",
        "dist-ddp-gradient",
        "dist-device-mesh",
    }
)
# A call that starts JAX too early: (its candidate, or None for JAX code already there),
# the call, the call it comes before, that call's short name, the file.
_Violation = tuple[Candidate | None, ast.Call, ast.Call, str, SourceFile]
# JAX calls that start its backends.
_JAX_STARTERS = frozenset(
    "jax.devices jax.local_devices jax.device_count jax.local_device_count "
    "jax.default_backend jax.device_put jax.make_mesh jax.process_index "
    "jax.process_count".split()
)

# Modules whose functions compute on a device when called outside a trace.
_JAX_STARTING_MODULES = ("jax.numpy.", "jax.random.", "jax.nn.", "jax.lax.", "jax.scipy.")
# Transformations whose result, called, runs on a device.
_COMPILERS = frozenset({"jax.jit", "jax.pmap", "flax.nnx.jit", "flax.nnx.pmap"})


class StartupOrder:
    """Calls that start JAX before the job is joined (or JAX configured), per process.

    A process's calls are followed in the order they run: module-level statements, then
    the functions they call (the file's own functions are entered where they are
    called), and for ``mp.spawn``/``Process(target=...)`` a new process that imports the
    module (without its ``__main__`` block) and runs the target.
    """

    def __init__(self, files: list[SourceFile], candidates: list[Candidate]) -> None:
        self.files = files
        self.by_call: dict[int, list[Candidate]] = {}
        for candidate in candidates:
            for node in (candidate.node, candidate.call):
                if node is not None:
                    self.by_call.setdefault(id(node), []).append(candidate)
        self.violations: dict[int, _Violation] = {}
        self.joins: dict[int, str | None] = {}  # id of a project function -> its join
        # id of a project function -> the calls it makes, through its callees
        self.helper_calls: dict[int, list[tuple[SourceFile, ast.Call]]] = {}
        self.traces = [(file, trace) for file in files for trace in _Traces(file).traces()]

    def check(self) -> bool:
        """Disable rewrites that would start JAX too early; ``True`` if any was."""
        changed = False
        for file, trace in self.traces:
            changed |= self._check_trace(file, trace)
        return changed

    def _check_trace(self, file: SourceFile, trace: list[ast.Call]) -> bool:
        changed = False
        started: list[tuple[ast.Call, Candidate | None]] = []
        for call in trace:
            first = self._first(file, call)
            if first is not None:
                rewritten_first = self._ported_first(file, call)
                for start, candidate in started:
                    key = id(start)
                    if key not in self.violations:
                        self.violations[key] = (candidate, start, call, first, file)
                    if candidate is not None and candidate.enabled:
                        where = (
                            f"line {call.lineno}"
                            if candidate.file is file
                            else f"{file.path}:{call.lineno}, after {ast.unparse(start)[:60]} "
                            f"(line {start.lineno} there) calls it"
                        )
                        candidate.disable(
                            f"it would start JAX before {first} ({where}); move it after that line"
                        )
                        changed = True
                    elif rewritten_first and candidate is None:
                        for c in self.by_call.get(id(call), []):
                            if c.enabled:
                                c.disable(
                                    f"line {start.lineno} starts JAX before it; move that line "
                                    "after this one"
                                )
                                changed = True
                return changed  # after the job is joined, starting JAX is fine
            starter = self._starter(file, call)
            if starter is not None:
                started.append((call, starter if isinstance(starter, Candidate) else None))
        return changed

    def _first(self, file: SourceFile, call: ast.Call) -> str | None:
        name = file.qualname(call.func)
        if name is not None and name in _FIRST:
            return _FIRST[name]
        if file.project is None:
            return None
        for owner, function in file.project.functions(file, call, methods=True):
            joins = self._joins(owner, function, 0)
            if joins is not None:
                return f"{ast.unparse(call.func)}(), which calls {joins}"
        return None

    def _joins(
        self, file: SourceFile, function: ast.FunctionDef | ast.AsyncFunctionDef, depth: int
    ) -> str | None:
        """Where a function of the project joins the job (``init_distributed`` of a
        helper module calling ``deepspeed.init_distributed``), itself or through the
        functions it calls (of its file or the project's, ``_DEEPEST`` calls deep)."""
        key = id(function)
        if key in self.joins:
            return self.joins[key]
        self.joins[key] = None  # a recursive helper: no join through itself
        found = None
        for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
            name = file.qualname(call.func)
            if name is not None and name in _FIRST:
                found = f"{_FIRST[name]} ({file.path}:{call.lineno})"
                break
            if depth >= _DEEPEST:
                continue
            callees: list[tuple[SourceFile, ast.FunctionDef | ast.AsyncFunctionDef]] = []
            if isinstance(call.func, ast.Name):
                callees = [
                    (file, b.node)
                    for b in file.names.bindings(call.func)
                    if isinstance(b.node, (ast.FunctionDef, ast.AsyncFunctionDef))
                ]
            if file.project is not None:
                callees += list(file.project.functions(file, call, methods=True))
            found = next(
                (j for owner, f in callees if (j := self._joins(owner, f, depth + 1))), None
            )
            if found is not None:
                break
        self.joins[key] = found
        return found

    def _ported_first(self, file: SourceFile, call: ast.Call) -> bool:
        """The call is (or becomes) torch2jax_device's or JAX's, which care about the order."""
        name = file.qualname(call.func)
        if name is not None and not name.startswith("torch."):
            return True
        return any(c.enabled for c in self.by_call.get(id(call), []))

    def _starter(self, file: SourceFile, call: ast.Call) -> Candidate | bool | None:
        """A candidate whose port starts JAX, ``True`` for JAX code that does, else
        ``None``; for a call of another module's function, what starts JAX in it."""
        here = self._starts_here(file, call)
        if here is not None or file.project is None:
            return here
        for owner, function in file.project.functions(file, call, methods=True):
            for inner_file, inner in self._calls_in(owner, function):
                inner_start = self._starts_here(inner_file, inner)
                if inner_start is True or (
                    isinstance(inner_start, Candidate) and inner_start.enabled
                ):
                    return inner_start
        return None

    def _calls_in(
        self, file: SourceFile, function: ast.FunctionDef | ast.AsyncFunctionDef
    ) -> list[tuple[SourceFile, ast.Call]]:
        """The calls a project function makes, itself and through the functions it calls
        (of its file or the project's, ``_DEEPEST`` calls deep, ``_Traces._LONGEST`` in
        all), worked out once per function."""
        key = id(function)
        if key in self.helper_calls:
            return self.helper_calls[key]
        self.helper_calls[key] = []  # a recursive helper: its calls are being gathered
        found: list[tuple[SourceFile, ast.Call]] = []
        work = [(file, function, 0)]
        entered = {key}
        while work and len(found) < _Traces._LONGEST:
            owner, current, depth = work.pop()
            for call in (n for n in ast.walk(current) if isinstance(n, ast.Call)):
                found.append((owner, call))
                if depth >= _DEEPEST:
                    continue
                callees = [
                    (owner, b.node)
                    for b in (
                        owner.names.bindings(call.func) if isinstance(call.func, ast.Name) else []
                    )
                    if isinstance(b.node, (ast.FunctionDef, ast.AsyncFunctionDef))
                ]
                if owner.project is not None:
                    callees += list(owner.project.functions(owner, call, methods=True))
                for callee_file, callee in callees:
                    if id(callee) not in entered:
                        entered.add(id(callee))
                        work.append((callee_file, callee, depth + 1))
        self.helper_calls[key] = found
        return found

    def _starts_here(self, file: SourceFile, call: ast.Call) -> Candidate | bool | None:
        for candidate in self.by_call.get(id(call), []):
            if candidate.rule in _ADVICE_STARTS:
                return candidate
            if candidate.tj_name == "tj.device":
                if _device_starts(candidate):
                    return candidate
            elif candidate.tj_name is not None and candidate.tj_name not in _QUIET:
                return candidate
        func = call.func
        if isinstance(func, ast.Call) and file.qualname(func.func) in _COMPILERS:
            return True  # jax.jit(f)(x): runs f on a device
        name = file.qualname(func)
        if name is None:
            return None
        if name.startswith(TJ + "."):
            short = "tj." + name[len(TJ) + 1 :]
            if short in _QUIET or name in _FIRST:
                return None
            return True if not short.startswith(("tj.porting", "tj.distributed")) else None
        if name in _JAX_STARTERS or name.startswith(_JAX_STARTING_MODULES):
            return True
        if name.startswith("flax.nnx.") and name.split(".")[-1][:1].isupper():
            return True
        return None

    def findings(self) -> list[Candidate]:
        """One ``startup-order`` finding per call that starts JAX too early."""
        found: list[Candidate] = []
        for candidate, start, first_call, first, file in self.violations.values():
            what = ast.unparse(start.func)
            found.append(
                Candidate(
                    file,
                    start,
                    "startup-order",
                    catalog.get("startup-order").tj,
                    (start.lineno, file.position(file.span(start)[0])[1]),
                    reason=(
                        f"{what}(...) {'would start' if candidate is not None else 'starts'} JAX "
                        f"before {first} (line {first_call.lineno}) runs: move it after that line"
                    ),
                )
            )
        return found


def _device_starts(candidate: Candidate) -> bool:
    """``tj.device(0)`` resolves the accelerator at once; names only parse."""
    call = candidate.call
    return (
        isinstance(call, ast.Call)
        and bool(call.args)
        and isinstance(call.args[0], ast.Constant)
        and isinstance(call.args[0].value, int)
    ) or candidate.rule == "default-device-context"


class _Traces:
    """The calls of one file in the order they run, per process."""

    _SPAWN = frozenset(
        {
            "torch.multiprocessing.spawn",
            "torch.multiprocessing.start_processes",
            "multiprocessing.Process",
            "torch.multiprocessing.Process",
        }
    )

    # A trace stops growing here (a file calling its functions from everywhere).
    _LONGEST = 100_000

    def __init__(self, file: SourceFile) -> None:
        self.file = file
        self.children: list[ast.AST] = []
        self.bodies: dict[int, list[ast.Call]] = {}  # a function's calls, entered once

    def traces(self) -> list[list[ast.Call]]:
        main: list[ast.Call] = []
        self._statements(self.file.tree.body, main, [], main_block=True)
        found = [main]
        entered = set(self.bodies)
        uncalled = [
            b.node
            for b in self.file.names.definitions()
            if b.kind == "def" and id(b.node) not in entered and b.node not in self.children
        ]
        for target in [*self.children, *uncalled]:
            child: list[ast.Call] = []
            self._statements(self.file.tree.body, child, [], main_block=False)
            self._enter(target, child, [])
            found.append(child)
        return found

    def _statements(
        self,
        statements: list[ast.stmt],
        out: list[ast.Call],
        stack: list[ast.AST],
        main_block: bool,
    ) -> None:
        for statement in statements:
            if not main_block and is_main_guard(statement):
                continue
            self._node(statement, out, stack)

    def _node(self, node: ast.AST, out: list[ast.Call], stack: list[ast.AST]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for expression in [*node.decorator_list, *node.args.defaults]:
                self._node(expression, out, stack)
            return
        if isinstance(node, ast.Lambda):
            return
        for child in ast.iter_child_nodes(node):
            self._node(child, out, stack)
        if isinstance(node, ast.Call) and len(out) < self._LONGEST:
            out.append(node)
            spawned = self._spawned(node)
            if len(stack) < 8:
                for definition in [*self._callees(node), *self._handed(node, spawned)]:
                    if definition not in stack:
                        self._enter(definition, out, stack)

    def _callees(self, call: ast.Call) -> list[ast.AST]:
        """The file's functions (or classes) a call enters: ``f()``, ``self.method()``."""
        func = call.func
        if isinstance(func, ast.Name):
            return [b.node for b in self.file.names.bindings(func) if b.kind in ("def", "class")]
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Call)
            and isinstance(func.value.func, ast.Name)
        ):  # Helper().run(): the method of the file's class made in the call
            return [
                item
                for b in self.file.names.bindings(func.value.func)
                if isinstance(b.node, ast.ClassDef)
                for item in b.node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                and item.name == func.attr
            ]
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            klass = self.file.names.enclosing(call, ast.ClassDef)
            if func.value.id == "self" and isinstance(klass, ast.ClassDef):
                return [
                    s
                    for s in klass.body
                    if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and s.name == func.attr
                ]
        return []

    def _enter(self, definition: ast.AST, out: list[ast.Call], stack: list[ast.AST]) -> None:
        if isinstance(definition, ast.ClassDef):
            init = next(
                (
                    s
                    for s in definition.body
                    if isinstance(s, ast.FunctionDef) and s.name == "__init__"
                ),
                None,
            )
            if init is None:
                return
            definition = init
        assert isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef))
        if id(definition) not in self.bodies:
            body: list[ast.Call] = []
            stack.append(definition)
            for statement in definition.body:
                self._node(statement, body, stack)
            stack.pop()
            self.bodies[id(definition)] = body
        out.extend(self.bodies[id(definition)][: self._LONGEST - len(out)])

    def _spawned(self, call: ast.Call) -> bool:
        """Record the target of ``mp.spawn(fn)`` as a process; ``True`` if ``call`` spawns."""
        name = self.file.qualname(call.func)
        if name not in self._SPAWN:
            return False
        target = call.args[0] if call.args else None
        target = next((k.value for k in call.keywords if k.arg in ("fn", "target")), target)
        if isinstance(target, ast.Name):
            for binding in self.file.names.bindings(target):
                if binding.kind == "def" and binding.node not in self.children:
                    self.children.append(binding.node)
        return True

    def _handed(self, call: ast.Call, spawned: bool) -> list[ast.AST]:
        """The file's functions handed to a call that may run them: ``launch(main)``."""
        if spawned:
            return []
        found = []
        for argument in [*call.args, *(k.value for k in call.keywords)]:
            if isinstance(argument, ast.Name):
                found += [b.node for b in self.file.names.bindings(argument) if b.kind == "def"]
        return found
