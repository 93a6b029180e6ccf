"""Writes after a move: what ``scan --diff``'s memory-sharing rule reads.

``torch.from_numpy(a)`` always shares ``a``'s memory, and ``x.cpu()``/``x.to(d)`` return
``x`` itself when it is there already; ``tj.to_jax``/``tj.to_device`` share only a
64-byte-aligned buffer. So a rewrite of one is correct only where nothing that may run
afterwards writes into ``a`` or ``x``: ``WriteCheck.written_after`` finds such a write,
through the name, through a holder (``batch["x"]``, ``self.buf``, ``outputs[0]``), or
through a call that may write (anything but JAX, NumPy's readers and Python's builtins).
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from ._values import Values, prefixed

__all__ = ["HOST_BUILTINS", "JAX_CODE", "NUMPY_VIEWS", "WriteCheck", "short_text"]

# Builtins whose result is a plain Python value whatever the argument.
HOST_BUILTINS = frozenset(
    "print len str repr format id hash bool float int callable vars dir getattr hasattr".split()
)
# Qualified-name prefixes of code that takes JAX arrays (and, for the first, tj devices).
JAX_CODE = ("torch2jax_device", "jax", "flax", "optax", "numpy", "math", "safetensors.flax")
# What writes into a NumPy array in place: its methods, and NumPy's functions given it
# first (``out=`` anywhere counts too).
_NDARRAY_WRITERS = frozenset("fill sort resize put itemset partition setfield byteswap".split())
_NUMPY_WRITERS = frozenset(
    "numpy.copyto numpy.put numpy.place numpy.putmask numpy.put_along_axis "
    "numpy.fill_diagonal numpy.random.shuffle".split()
)
# NumPy functions that may return their argument, or a view of it.
NUMPY_VIEWS = frozenset(
    "asarray asanyarray ascontiguousarray asfortranarray require frombuffer reshape ravel "
    "transpose squeeze expand_dims moveaxis swapaxes atleast_1d atleast_2d atleast_3d "
    "broadcast_to".split()
)


# Tensor methods whose result may share the tensor's memory: views, and casts and moves
# that hand back the tensor itself when there is nothing to do.
_VIEW_METHODS = frozenset(
    "detach detach_ view view_as reshape reshape_as t transpose permute squeeze unsqueeze "
    "flatten unflatten expand expand_as narrow select as_strided unfold diagonal movedim "
    "moveaxis swapaxes swapdims contiguous float double half bfloat16 int long short bool "
    "byte char type type_as to cpu cuda requires_grad_ numpy".split()
)
_VIEW_ATTRIBUTES = frozenset("data T mT H mH real imag".split())
# A tensor reached through its holders: the root name, and the steps from it outwards.
_Path = tuple[ast.Name, list[ast.expr]]


class WriteCheck:
    """Writes into arrays and tensors, over one file."""

    def __init__(self, values: Values, spend: Callable[[int], bool]) -> None:
        """``spend(n)`` takes ``n`` uses from the file's budget, ``False`` once it is spent."""
        self.values = values
        self.names = values.names
        self.qualname = values.qualname
        self._spend = spend
        # Per class: the reads of ``self`` in all its methods (``None``: over the budget).
        self._self_loads_of: dict[ast.ClassDef, list[ast.Name] | None] = {}
        # Per expression: its access path (``access_path``), and whether a view or a cast
        # lies on the way to it; each node is walked once.
        self._paths: dict[ast.expr, tuple[_Path | None, bool]] = {}

    def written_after(self, array: ast.expr, call: ast.AST, *, unknown_holders: bool) -> str | None:
        """Where code that may run after ``call`` writes into the array or tensor
        ``array`` (``a[0] = 1``, ``a += 1``, ``a.fill(0)``, ``x.add_(1)``, ``np.copyto(a,
        b)``, or ``a`` handed to a call that could), or ``None``. A name is followed; a new
        array (``np.load(p)``, ``a.astype(t)``) has no other holder. With
        ``unknown_holders`` (a NumPy array, which ``torch.from_numpy`` always shares)
        anything else (``self.buffer``, ``a[i]``, ``load(p)``) counts as written; without
        (a tensor moved), a tensor reached through its holders (``batch["x"]``,
        ``self.buf``, ``outputs[0]``) is followed through the root name, and through
        every method of the class for ``self``, and a call's result has no other holder
        the scanner can see."""
        if _new_array(array, self.qualname):
            return None
        if not isinstance(array, ast.Name):
            path = None if unknown_holders else self.access_path(array)
            if path is not None and path[1]:
                return self._path_written_after(array, path, call)
            if path is None and not unknown_holders:
                return None  # a call's result: no holder the scanner can see
            if path is None:
                return (
                    f"line {array.lineno}: the scanner cannot tell what else holds "
                    f"{short_text(array)} and may write into it"
                )
            array = path[0]  # x.detach(), x.T, x.float(): x's memory, or x itself
        statement = self.names.statement(call)
        bindings = self.names.bindings(array)
        loads = self.names.loads(bindings[0]) if bindings else []  # the same for each
        if not self._spend(len(bindings) + len(loads)):
            return "the file has too many uses to follow"
        for binding in bindings:
            site = self.names.parents.get(binding.node)
            if isinstance(site, ast.AugAssign) and not self._before(site, statement):
                return f"line {site.lineno}: {short_text(site)} writes into it"
        for load in loads:
            if load is array or self._before(load, statement):
                continue
            reason = self._writes(load)
            if reason is not None:
                return f"line {load.lineno}: {reason}"
        return None

    def access_path(self, node: ast.expr) -> _Path | None:
        """``batch["x"]``, ``self.buf``, ``outputs[0].logits``: the root name and the steps
        from it outwards; ``None`` for anything else (a call's result). A view or a cast
        that may return the tensor itself (``x.detach()``, ``x.T``, ``x.float()``) stands
        for the whole of what it is taken of: ``self.w.detach()[0]`` is ``self.w``. Each
        node's path is kept, so a chain of ``n`` calls costs ``n`` steps once, not ``n``
        steps per question (``x.cuda().cuda()...`` asks once per call in it)."""
        walked: list[tuple[ast.expr, bool]] = []
        while node not in self._paths:
            step = _path_step(node)
            if step is None:
                self._paths[node] = ((node, []) if isinstance(node, ast.Name) else None, False)
                break
            walked.append((node, step[1]))
            node = step[0]
        path, viewed = self._paths[node]
        for outer, is_step in reversed(walked):
            if not is_step:
                viewed = True  # the steps outside a view are the whole's, not the path's
            elif path is not None and not viewed:
                path = (path[0], [*path[1], outer])
            self._paths[outer] = (path, viewed)
        return path

    def moved_name(self, receiver: ast.expr) -> ast.Name | None:
        """The name whose tensor (or a view of it) ``receiver`` is: ``x``, ``x.detach()``,
        ``x.T``, ``x.float()``; ``None`` for anything else (``batch["x"]``, a call's
        result)."""
        path = self.access_path(receiver)
        return path[0] if path is not None and not path[1] else None

    def _path_written_after(self, array: ast.expr, path: _Path, call: ast.AST) -> str | None:
        """``written_after`` for a tensor reached through its holders (``batch["x"]``,
        ``self.buf``, ``outputs[0]``): every later read of the root name that reaches
        the same place, or hands a holder on, counts. Through ``self``, every method of
        the class may run afterwards."""
        root, steps = path
        statement = self.names.statement(call)
        method = self._method_of(root)
        if method is not None:
            loads = self._self_loads(method)
        else:
            bindings = self.names.bindings(root)
            loads = self.names.loads(bindings[0]) if bindings else []
            if not self._spend(len(loads)):
                loads = None
        if loads is None:
            return "the file has too many uses to follow"
        shown = short_text(array)
        for load in loads:
            if load is root or (method is None and self._before(load, statement)):
                continue  # through self, a method's earlier lines run again on its next call
            reason = self._reaches(load, steps, shown, through_self=method is not None)
            if reason is not None:
                return f"line {load.lineno}: {reason}"
        return None

    def _method_of(self, root: ast.Name) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The method whose first parameter ``root`` is (``self``), if it is one."""
        bindings = self.names.bindings(root)
        if len(bindings) != 1 or bindings[0].kind != "param":
            return None
        function = bindings[0].scope.node
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        if not isinstance(self.names.parents.get(function), ast.ClassDef):
            return None
        return function if _self_parameter(function) is bindings[0].node else None

    def _self_loads(self, method: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Name] | None:
        """Reads of ``self`` in every method of ``method``'s class, listed (and taken from
        the file's budget) once per class; ``None`` once the budget is spent."""
        klass = self.names.parents.get(method)
        assert isinstance(klass, ast.ClassDef)
        if klass not in self._self_loads_of:
            loads: list[ast.Name] = []
            for function in klass.body:
                if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                parameter = _self_parameter(function)
                binding = None if parameter is None else self.names.binding_of.get(parameter)
                if binding is not None:
                    loads.extend(self.names.loads(binding))
            self._self_loads_of[klass] = loads if self._spend(len(loads)) else None
        return self._self_loads_of[klass]

    def _reaches(
        self, load: ast.Name, steps: list[ast.expr], shown: str, *, through_self: bool
    ) -> str | None:
        """What ``load`` does to the tensor at ``steps`` from it: writes into it, hands
        one of its holders to code that may, or ``None``."""
        node: ast.AST = load
        for step in steps:
            parent = self.names.parents.get(node)
            if isinstance(parent, (ast.Attribute, ast.Subscript)) and parent.value is node:
                called = _called(parent, self.names.parents)
                # outputs.logits may be outputs[0] (a ModelOutput, a namedtuple)
                same = _same_step(parent, step) or (type(parent) is not type(step) and not called)
                if not same:
                    if through_self or not called:
                        return None  # another field or key
                    return (
                        f"{short_text(parent)} may reach {shown} through "
                        f"{short_text(node)}, and the scanner cannot follow it there"
                    )
                if isinstance(parent.ctx, (ast.Store, ast.Del)):
                    statement = self.names.parents.get(parent)
                    if isinstance(statement, ast.AugAssign):
                        return f"{short_text(statement)} writes into {shown}"
                    return None  # a new value in the holder's place, not a write
                node = parent
                continue
            if through_self and node is load and isinstance(parent, ast.Return):
                return None  # return self: its callers hold the object already
            return self._holder_use(node, parent, shown)
        reason = self._writes(node)
        return None if reason is None else _naming(reason, shown)

    def _holder_use(self, holder: ast.AST, parent: ast.AST | None, shown: str) -> str | None:
        """A holder of the tensor used as a whole: read, or handed on."""
        reason = self._writes(holder)
        if reason is not None:
            return f"{_naming(reason, shown)} through {short_text(holder)}"
        call = self.names.parents.get(parent) if isinstance(parent, ast.keyword) else parent
        if isinstance(call, ast.Call) and holder is not call.func:
            return None  # host or JAX code, which writes into nothing
        if isinstance(
            parent, (ast.Compare, ast.Expr, ast.If, ast.While, ast.Assert, ast.FormattedValue)
        ):
            return None
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)) and parent.iter is holder:
            return (
                f"iterating over {short_text(holder)} hands on what it holds, {shown} among "
                "them, where the scanner cannot follow it"
            )
        if isinstance(parent, ast.stmt):
            what = f"the {type(parent).__name__.lower().removeprefix('async')} statement"
        else:
            what = short_text(parent) if parent is not None else "its use"
        return (
            f"{what} takes {short_text(holder)}, which holds {shown}, somewhere the scanner "
            "cannot follow"
        )

    def _writes(self, load: ast.AST) -> str | None:
        """What writes into the array ``load`` reads, through its views (``a[1:]``)."""
        node: ast.AST = load
        parent = self.names.parents.get(node)
        while isinstance(parent, ast.Subscript) and parent.value is node:
            if isinstance(parent.ctx, ast.Store):
                return f"{short_text(parent)} = ... writes into it"
            node, parent = parent, self.names.parents.get(parent)
        if isinstance(parent, ast.Attribute) and (
            parent.attr in _NDARRAY_WRITERS or _in_place(parent.attr)
        ):
            return f"{short_text(parent)}(...) writes into it"
        if isinstance(parent, ast.keyword):
            parent = self.names.parents.get(parent)
        if isinstance(parent, ast.Call) and node is not parent.func:
            name = self.qualname(parent.func)
            if any(k.arg == "out" and k.value is node for k in parent.keywords):
                return f"{short_text(parent)} writes into it"
            if name in _NUMPY_WRITERS or not (
                (name is not None and prefixed(name, (*JAX_CODE, "torch.from_numpy")))
                or self.values.builtin(parent.func) in HOST_BUILTINS
            ):
                return f"passed to {short_text(parent)}, which may write into it"
        return None

    def _before(self, node: ast.AST, statement: ast.stmt | None) -> bool:
        return (
            statement is not None
            and node is not statement
            and self.names.only_before(node, statement)
        )


def short_text(node: ast.AST) -> str:
    """``node`` as source, cut to 60 characters for a reason."""
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _in_place(method: str) -> bool:
    """torch's in-place methods end with one underscore: ``add_``, ``copy_``, ``zero_``."""
    return method.endswith("_") and not method.startswith("_")


def _new_array(node: ast.expr, qualname: Callable[[ast.AST], str | None]) -> bool:
    """``node`` makes a NumPy array nothing else holds: ``np.load(p)``, ``a.astype(t)``."""
    if not isinstance(node, ast.Call):
        return False
    if isinstance(node.func, ast.Attribute) and node.func.attr in ("astype", "copy"):
        return not any(k.arg == "copy" for k in node.keywords)  # astype(t, copy=False)
    name = qualname(node.func)
    return (
        name is not None
        and prefixed(name, ("numpy",))
        and name.rsplit(".", 1)[-1] not in NUMPY_VIEWS
    )


def _path_step(node: ast.expr) -> tuple[ast.expr, bool] | None:
    """What ``node`` is taken of, and whether it is a step of the path (an attribute or a
    key) rather than a view or cast of the whole; ``None`` where the walk ends."""
    if isinstance(node, ast.Call) and _view_call(node):
        assert isinstance(node.func, ast.Attribute)
        return node.func.value, False
    if isinstance(node, ast.Attribute) and node.attr in _VIEW_ATTRIBUTES:
        return node.value, False
    if isinstance(node, (ast.Attribute, ast.Subscript)):
        return node.value, True
    return None


def _self_parameter(function: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.arg | None:
    """A method's ``self``: its first positional parameter, unless it is a static or
    class method."""
    positional = [*function.args.posonlyargs, *function.args.args]
    if not positional or any(
        _decorator_name(d) in ("staticmethod", "classmethod") for d in function.decorator_list
    ):
        return None
    return positional[0]


def _view_call(node: ast.Call) -> bool:
    return isinstance(node.func, ast.Attribute) and node.func.attr in _VIEW_METHODS


def _same_step(node: ast.Attribute | ast.Subscript, step: ast.expr) -> bool:
    """``node`` may reach what ``step`` reaches: the same attribute, or a key that is not
    a different constant (``batch[k]`` may be ``batch["x"]``)."""
    if isinstance(step, ast.Attribute):
        return isinstance(node, ast.Attribute) and node.attr == step.attr
    if not (isinstance(node, ast.Subscript) and isinstance(step, ast.Subscript)):
        return False
    if isinstance(node.slice, ast.Constant) and isinstance(step.slice, ast.Constant):
        return bool(node.slice.value == step.slice.value)
    return True


def _naming(reason: str, shown: str) -> str:
    """``_writes``'s reason (it ends "... into it") naming the tensor written."""
    return reason.removesuffix("it") + shown


def _called(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    parent = parents.get(node)
    return isinstance(parent, ast.Call) and parent.func is node


def _decorator_name(decorator: ast.expr) -> str | None:
    return decorator.id if isinstance(decorator, ast.Name) else None
