"""Writes after a move: what ``scan --diff``'s memory-sharing rule reads.

``torch.from_numpy(a)`` always shares ``a``'s memory, and ``x.cpu()``/``x.to(d)`` return
``x`` itself when it is there already; ``tj.to_jax``/``tj.to_device`` share only a
64-byte-aligned buffer. So a rewrite of one is correct only where nothing that may run
afterwards writes into ``a`` or ``x``: ``WriteCheck.written_after`` finds such a write,
through the name, through a holder (``batch["x"]``, ``self.buf``, ``outputs[0]``),
through another name or holder it was given to (``b = a``, ``ws = [w]``, ``opt =
SGD([w])``: ``_Aliases``), or through a call that may write (anything but JAX, NumPy's
readers and Python's builtins).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from ._names import Binding
from ._values import Values, last_name, prefixed

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
# The step to any element of a container the value was put in (``ws = [w]``: ``ws[i]``).
_ANY_ELEMENT = ast.Subscript(
    value=ast.Name("_", ast.Load()), slice=ast.Name("_", ast.Load()), ctx=ast.Load()
)
# Builtins that build a container of their argument's elements (the same objects).
_CONTAINER_BUILTINS = frozenset(
    "list tuple dict set frozenset sorted reversed iter zip enumerate map filter".split()
)
# Container methods that keep their argument: ``ws.append(w)``.
_STORING_METHODS = frozenset(
    "append extend insert add update setdefault appendleft extendleft".split()
)
# How many names and holders of one value are followed before the scanner gives up.
_MOST_PLACES = 64


@dataclass
class _Place:
    """A name (with the steps from it) the value lives under; ``via``: the statement that
    put it there (``None`` for the moved value's own name)."""

    root: ast.Name
    steps: list[ast.expr]
    via: ast.stmt | None


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

    def written_after(
        self, array: ast.expr, call: ast.AST, *, unknown_holders: bool, rebound: bool = False
    ) -> str | None:
        """Where code that may run after ``call`` writes into the array or tensor
        ``array`` (``a[0] = 1``, ``a += 1``, ``a.fill(0)``, ``x.add_(1)``, ``np.copyto(a,
        b)``, or ``a`` handed to a call that could), or ``None``. A name is followed; a new
        array (``np.load(p)``, ``a.astype(t)``) has no other holder. With
        ``unknown_holders`` (a NumPy array, which ``torch.from_numpy`` always shares)
        anything else (``self.buffer``, ``a[i]``, ``load(p)``) counts as written; without
        (a tensor moved), a tensor reached through its holders (``batch["x"]``,
        ``self.buf``, ``outputs[0]``) is followed through the root name, and through
        every method of the class for ``self``, and a call's result has no other holder
        the scanner can see.

        Other names for the same memory are followed too (``aliases``): a name it was
        assigned from or to (``b = a``, ``a, b = w, v``, ``v = w.T``), a container it was
        put in (``ws = [w]``, ``d = {"w": w}``, ``ws.append(w)``, ``self.w = w``), and an
        object built from it (``opt = SGD([w])``), where any use that may reach it counts.
        With ``rebound`` (``x = x.to(d)``: later reads of ``x`` read the result) only those
        other names are followed."""
        if _new_array(array, self.qualname):
            return None
        if isinstance(array, ast.Name):
            start: _Path = (array, [])
        else:
            path = None if unknown_holders else self.access_path(array)
            if path is None and not unknown_holders:
                return None  # a call's result: no holder the scanner can see
            if path is None:
                return (
                    f"line {array.lineno}: the scanner cannot tell what else holds "
                    f"{short_text(array)} and may write into it"
                )
            start = path  # x.detach(), x.T, x.float(): x's memory, or x itself
        return _Aliases(self, array, call, unknown_holders).written(start, rebound=rebound)

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


class _Aliases:
    """The places one array or tensor lives in: its own name (or holder), and every other
    name, container or object the scanner sees it go to; what writes into it through any
    of them, after a move of it."""

    def __init__(
        self, check: WriteCheck, array: ast.expr, call: ast.AST, unknown_holders: bool
    ) -> None:
        self.check = check
        self.names = check.names
        self.call = call
        self.statement = check.names.statement(call)
        self.shown = short_text(array)
        self.unknown_holders = unknown_holders
        self.queue: list[_Place] = []
        self.seen: set[tuple[int, tuple[tuple[str, object], ...]]] = set()
        self.start: ast.Name | None = None

    def written(self, start: _Path, *, rebound: bool) -> str | None:
        """``WriteCheck.written_after`` from ``start``, the moved value's own path."""
        self.start = start[0]
        self._add(start[0], start[1], None)
        while self.queue:
            if len(self.seen) > _MOST_PLACES:
                return f"{self.shown} goes to more names than the scanner follows"
            place = self.queue.pop(0)
            reason = self._place_written(place, only_before=rebound and place.via is None)
            if reason is not None:
                if place.via is None:
                    return reason
                return (
                    f"{reason} ({short_text(place.root)} holds {self.shown}: line "
                    f"{place.via.lineno})"
                )
        return None

    def _add(self, root: ast.Name, steps: list[ast.expr], via: ast.stmt | None) -> None:
        bindings = self.names.bindings(root)
        if not bindings:
            return  # a builtin or undefined name: nothing the file binds
        key = (id(bindings), tuple(_step_key(step) for step in steps))
        if key not in self.seen:
            self.seen.add(key)
            self.queue.append(_Place(root, steps, via))

    def _place_written(self, place: _Place, *, only_before: bool) -> str | None:
        """What writes into the value at ``place``, or hands it on to another place."""
        check = self.check
        method = check._method_of(place.root)
        bindings = [] if method is not None else self.names.bindings(place.root)
        if method is not None:
            loads = check._self_loads(method)
        else:
            loads = self.names.loads(bindings[0]) if bindings else []
            if not check._spend(len(bindings) + len(loads)):
                loads = None
        if loads is None:
            return "the file has too many uses to follow"
        for binding in bindings:
            site = self.names.parents.get(binding.node)
            if (
                not place.steps
                and not only_before
                and isinstance(site, ast.AugAssign)
                and not check._before(site, self.statement)
            ):
                return f"line {site.lineno}: {short_text(site)} writes into it"
            reason = self._origin(binding, place)
            if reason is not None:
                return reason
        for load in loads:
            if load is self.start:
                continue
            before = method is None and check._before(load, self.statement)
            if only_before and not before:
                continue
            through_self = method is not None
            reason = self._reaches(load, place.steps, through_self=through_self, before=before)
            if reason is not None:
                return f"line {load.lineno}: {reason}"
        return None

    def _origin(self, binding: Binding, place: _Place) -> str | None:
        """Follow what the name was assigned (``b = a``, ``x = batch["x"]``, ``v = w.T``):
        the same memory under the other name."""
        value = binding.value
        if binding.kind not in ("assign", "walrus") or value is None or binding.element is not None:
            return None
        if _new_array(value, self.check.qualname):
            return None
        path = self.check.access_path(value)
        if path is None:
            return None  # a call's result: no holder the scanner can see
        root, steps = path
        if steps and self.unknown_holders:
            return (
                f"line {value.lineno}: {binding.name} is {short_text(value)}, and the scanner "
                "cannot tell what else holds it and may write into it"
            )
        statement = self.names.statement(value)
        self._add(root, [*steps, *place.steps], statement)
        return None

    def _reaches(
        self, load: ast.Name, steps: list[ast.expr], *, through_self: bool, before: bool
    ) -> str | None:
        """What ``load`` does to the value at ``steps`` from it: writes into it, hands one
        of its holders to code that may, or ``None``; another name it gets is followed.
        A load ``before`` the move can only hand it on."""
        shown = self.shown
        check = self.check
        node: ast.AST = load
        for position, step in enumerate(steps):
            parent = self.names.parents.get(node)
            if isinstance(parent, (ast.Attribute, ast.Subscript)) and parent.value is node:
                called = _called(parent, self.names.parents)
                # outputs.logits may be outputs[0] (a ModelOutput, a namedtuple)
                same = _same_step(parent, step) or (type(parent) is not type(step) and not called)
                if not same:
                    if through_self or not called or before:
                        return None  # another field or key
                    return (
                        f"{short_text(parent)} may reach {shown} through "
                        f"{short_text(node)}, and the scanner cannot follow it there"
                    )
                if isinstance(parent.ctx, (ast.Store, ast.Del)):
                    statement = self.names.parents.get(parent)
                    if isinstance(statement, ast.AugAssign) and not before:
                        return f"{short_text(statement)} writes into {shown}"
                    return None  # a new value in the holder's place, not a write
                node = parent
                continue
            if through_self and node is load and isinstance(parent, ast.Return):
                return None  # return self: its callers hold the object already
            handed, reason = self._hand_off(node, steps[position:], before=before, whole=False)
            if handed or before:
                return reason
            return check._holder_use(node, parent, shown)
        while True:  # the value itself, and its views (w.T, w.view(-1), w.float())
            if not before:
                reason = check._writes(node)
                if reason is not None:
                    return _naming(reason, shown) if steps else reason
            parent = self.names.parents.get(node)
            if isinstance(parent, ast.NamedExpr) and parent.value is node:
                statement = self.names.statement(parent)
                assert statement is not None
                self._add(parent.target, [], statement)  # (v := w).add_(1): both
                node = parent
                continue
            if not (isinstance(parent, ast.Attribute) and parent.value is node):
                break
            if parent.attr in _VIEW_ATTRIBUTES:
                node = parent
            elif parent.attr in _VIEW_METHODS and _called(parent, self.names.parents):
                node = self.names.parents[parent]
                if node is self.call:
                    return None  # the move itself
            else:
                break
        return self._hand_off(node, [], before=before, whole=True)[1]

    def _hand_off(
        self, node: ast.AST, rest: list[ast.expr], *, before: bool, whole: bool
    ) -> tuple[bool, str | None]:
        """Where ``node`` (the value, or with ``rest`` one of its holders) goes: to another
        name or holder, followed (``True``), or somewhere the scanner cannot follow (a
        reason). ``whole``: ``node`` is the value itself, not a holder."""
        parent = self.names.parents.get(node)
        if isinstance(parent, ast.Starred):
            return self._hand_off(parent, rest, before=before, whole=False)
        if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and parent.value is node:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            statement = self.names.statement(parent)
            assert statement is not None
            for target in targets:
                reason = self._store(target, rest, statement)
                if reason is not None:
                    return True, reason
            return True, None
        if not (whole or before):
            return False, None  # a holder used later: WriteCheck._holder_use's question
        if isinstance(parent, (ast.Tuple, ast.List, ast.Set)) or (
            isinstance(parent, ast.Dict) and node in parent.values
        ):
            return self._element(node, parent, rest, before=before)
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)) and parent.iter is node:
            statement = self.names.statement(parent)
            assert statement is not None
            return True, self._store(parent.target, rest[1:], statement)
        if isinstance(parent, ast.keyword):
            parent = self.names.parents.get(parent)
        if isinstance(parent, ast.Call) and node is not parent.func:
            return self._taken_by(parent, node, rest, before=before)
        return False, None

    def _element(
        self, node: ast.AST, display: ast.expr, rest: list[ast.expr], *, before: bool
    ) -> tuple[bool, str | None]:
        """``node`` put in a tuple, list, set or dict display."""
        outer = self.names.parents.get(display)
        if (
            isinstance(display, (ast.Tuple, ast.List))
            and isinstance(outer, ast.Assign)
            and outer.value is display
            and all(_unpacks(target, display) for target in outer.targets)
        ):  # a, b = w, v: the names of the same position
            position = self.names.slots[node]
            for target in outer.targets:
                assert isinstance(target, (ast.Tuple, ast.List))
                reason = self._store(target.elts[position], rest, outer)
                if reason is not None:
                    return True, reason
            return True, None
        step: ast.expr = _ANY_ELEMENT
        if isinstance(display, ast.Dict):
            key = display.keys[self.names.slots[node]]
            if isinstance(key, ast.Constant):
                step = ast.Subscript(value=_ANY_ELEMENT.value, slice=key, ctx=ast.Load())
        # a container made here: what it holds is the value's, whoever uses it
        return self._hand_off(display, [step, *rest], before=before, whole=True)

    def _taken_by(
        self, call: ast.Call, node: ast.AST, rest: list[ast.expr], *, before: bool
    ) -> tuple[bool, str | None]:
        """``node`` handed to ``call``: kept by a container's method (``ws.append(w)``),
        by a container or object built from it (``list(ws)``, ``SGD([w])``), written by
        code that may (after the move), or nothing the scanner sees."""
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in _STORING_METHODS:
            return True, self._stored(call, func.value, [_ANY_ELEMENT, *rest])
        kept = _kept_as_attribute(call, node)
        if kept is not None:  # self.register_buffer("buf", w), setattr(self, "w", w)
            owner, attribute = kept
            step = ast.Attribute(value=owner, attr=attribute, ctx=ast.Load())
            return True, self._stored(call, owner, [step, *rest])
        name = self.check.qualname(func)
        if self.check.values.builtin(func) in _CONTAINER_BUILTINS or _constructs(func, name):
            return self._hand_off(call, [_ANY_ELEMENT, *rest], before=before, whole=True)
        if before:
            return False, None
        reason = self.check._writes(node)
        return (True, _naming(reason, self.shown)) if reason is not None else (False, None)

    def _stored(self, call: ast.Call, holder: ast.expr, steps: list[ast.expr]) -> str | None:
        """``call`` keeps the value in ``holder`` at ``steps`` from it: another place to
        follow, or why the scanner cannot."""
        path = self.check.access_path(holder)
        statement = self.names.statement(call)
        assert statement is not None
        if path is None:
            return (
                f"line {call.lineno}: {short_text(call)} stores {self.shown} where the "
                "scanner cannot follow it"
            )
        self._add(path[0], [*path[1], *steps], statement)
        return None

    def _store(self, target: ast.expr, rest: list[ast.expr], statement: ast.stmt) -> str | None:
        """The value (or, with ``rest``, a holder of it) assigned to ``target``."""
        if isinstance(target, ast.Starred):
            target = target.value
        if isinstance(target, ast.Name):
            self._add(target, rest, statement)
            return None
        if isinstance(target, (ast.Tuple, ast.List)):  # unpacked: its elements (rows)
            for element in target.elts:
                reason = self._store(element, rest[1:], statement)
                if reason is not None:
                    return reason
            return None
        path = self.check.access_path(target)  # self.w = w, d["w"] = w
        if path is None:
            return (
                f"line {statement.lineno}: {short_text(target)} = ... stores {self.shown} "
                "where the scanner cannot follow it"
            )
        self._add(path[0], [*path[1], *rest], statement)
        return None


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


def _step_key(step: ast.expr) -> tuple[str, object]:
    """What ``_same_step`` compares of a step: an attribute's name, a constant key, or
    any key."""
    if isinstance(step, ast.Attribute):
        return ("attribute", step.attr)
    if isinstance(step, ast.Subscript) and isinstance(step.slice, ast.Constant):
        return ("key", repr(step.slice.value))
    return ("any", None)


def _kept_as_attribute(call: ast.Call, node: ast.AST) -> tuple[ast.expr, str] | None:
    """``m.register_buffer("buf", w)``, ``m.register_parameter("w", w)``,
    ``setattr(m, "w", w)`` with ``node`` the value: the object and the attribute it is
    kept as."""
    func, args = call.func, call.args
    if (
        isinstance(func, ast.Attribute)
        and func.attr in ("register_buffer", "register_parameter")
        and len(args) >= 2
        and args[1] is node
        and isinstance(args[0], ast.Constant)
        and isinstance(args[0].value, str)
    ):
        return func.value, args[0].value
    if (
        isinstance(func, ast.Name)
        and func.id == "setattr"
        and len(args) == 3
        and args[2] is node
        and isinstance(args[1], ast.Constant)
        and isinstance(args[1].value, str)
    ):
        return args[0], args[1].value
    return None


def _unpacks(target: ast.expr, display: ast.Tuple | ast.List) -> bool:
    """``target`` unpacks ``display`` element by element (``a, b = w, v``)."""
    return (
        isinstance(target, (ast.Tuple, ast.List))
        and len(target.elts) == len(display.elts)
        and not any(isinstance(e, ast.Starred) for e in [*target.elts, *display.elts])
    )


def _constructs(func: ast.expr, name: str | None) -> bool:
    """A call of a class, which may keep what it is given (``SGD([w])``,
    ``nn.Parameter(w)``, ``TensorDataset(x, y)``): a name that starts with a capital, or
    anything of ``torch.optim``; not JAX's or NumPy's."""
    if name is not None and prefixed(name, JAX_CODE):
        return False
    if name is not None and prefixed(name, ("torch.optim",)):
        return True
    last = name.rsplit(".", 1)[-1] if name is not None else last_name(func)
    return last is not None and last[:1].isupper()


def _called(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    parent = parents.get(node)
    return isinstance(parent, ast.Call) and parent.func is node


def _decorator_name(decorator: ast.expr) -> str | None:
    return decorator.id if isinstance(decorator, ast.Name) else None
