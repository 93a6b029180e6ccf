"""Devices kept as their names: ``device = "mps"``, ``"cuda" in device``.

torch takes a device's name wherever it takes a device, so scripts keep devices as
strings and test them as strings. Those tests break once the value is a ``tj.device``
(``"cuda" in device`` raises ``TypeError``, ``device == "cuda"`` is ``False``), so the
scanner reports them with ``tj.device(device).type``, which takes a name and a device
alike (catalog rows ``device-string`` and ``device-string-logic``).
"""

from __future__ import annotations

import ast
import re

from .._values import last_name
from .base import Recogniser

__all__ = [
    "DEVICE_TYPES",
    "default_names",
    "device_names_listed",
    "formatted_name",
    "getattr_default",
    "holds_device_name",
    "index_appended",
    "is_device_value",
    "keeps_device",
    "keyed_by_type",
    "name_assignment",
    "name_choice",
    "name_under_test",
    "names_a_device",
    "point_at_tests",
    "split_name",
    "string_test",
]

# Device types of torch and JAX ("gpu", "tpu"), as a script writes them ("meta" aside: a
# word too, device_literals takes it where it is evidently a device).
DEVICE_TYPES = _TYPES = frozenset("cuda cpu mps xla tpu gpu xpu hpu npu mlu musa dipu".split())
# A setting that keeps a device under a longer name: init_device, target_device.
_KEPT_DEVICE = re.compile(r"^_*(\w+_)?(device|device_name)$", re.IGNORECASE)
# A value named as a device: device, self.device, args.device, local_device, dev.
_DEVICE_VALUE = re.compile(r"(^|_)(device|dev)$")


def names_a_device(value: object) -> bool:
    """``"cuda"``, ``"cuda:1"``, ``"mps"``: a device's name.

    Examples:
        >>> names_a_device("cuda:1"), names_a_device("cpu"), names_a_device("train")
        (True, True, False)
    """
    if not isinstance(value, str):
        return False
    kind, _, index = value.partition(":")
    return kind in _TYPES and (not index or index.isdigit())


def _literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Tuple):
        return bool(node.elts) and all(_literal(e) for e in node.elts)
    return isinstance(node, ast.Constant) and names_a_device(node.value)


def name_under_test(node: ast.AST) -> ast.expr | None:
    """The expression ``node`` tests as a device's name, if it does.

    ``"cuda" in device``, ``device == "cuda"``, ``device.startswith("cuda")``; not a
    ``.type`` (already a device's type) nor a comparison of two literals.

    Examples:
        >>> import ast
        >>> ast.unparse(name_under_test(ast.parse('"cuda" in str(device)').body[0].value))
        'str(device)'
        >>> name_under_test(ast.parse('mode == "train"').body[0].value) is None
        True
    """
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = node.left, node.comparators[0]
        operator = node.ops[0]
        if isinstance(operator, (ast.In, ast.NotIn)) and _literal(left):
            subject = right
        elif isinstance(operator, (ast.In, ast.NotIn)) and _names_of_devices(right):
            subject = left  # device_type not in ("cpu", "mps")
        elif isinstance(operator, (ast.Eq, ast.NotEq)) and _literal(right):
            subject = left
        elif isinstance(operator, (ast.Eq, ast.NotEq)) and _auto_choice(left, right):
            subject = left  # config.device == "auto": the choice left to the script
        elif isinstance(operator, (ast.Eq, ast.NotEq)) and _literal(left):
            subject = right
        else:
            return None
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "startswith"
        and len(node.args) == 1
        and _literal(node.args[0])
    ):
        subject = node.func.value
    else:
        return None
    if isinstance(subject, (ast.Constant, ast.JoinedStr, ast.List, ast.Tuple, ast.Set)):
        return None
    if isinstance(subject, ast.Attribute) and subject.attr in ("type", "platform"):
        return None
    return subject


def _tested_against_listed(r: Recogniser, node: ast.Compare) -> ast.expr | None:
    """``device`` of ``device in device_list``, ``device_list`` bound to device names
    (``set(["cuda", "cpu"] + [f"cuda:{i}" for i in ...])``)."""
    if not (len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn))):
        return None
    listed = node.comparators[0]
    if not (isinstance(listed, ast.Name) and keeps_device(node.left)):
        return None
    for binding in r.file.names.bindings(listed):
        value = binding.value
        if value is not None and any(
            isinstance(part, (ast.List, ast.Tuple, ast.Set)) and _names_of_devices(part)
            for part in ast.walk(value)
        ):
            return node.left
    return None


def _auto_choice(subject: ast.AST, literal: ast.AST) -> bool:
    return (
        isinstance(literal, ast.Constant)
        and literal.value == "auto"
        and isinstance(subject, (ast.Name, ast.Attribute))
        and keeps_device(subject)
    )


def _names_of_devices(node: ast.AST) -> bool:
    """A tuple, list or set literal of device names: ``("cpu", "mps")``."""
    return (
        isinstance(node, (ast.Tuple, ast.List, ast.Set))
        and bool(node.elts)
        and all(isinstance(e, ast.Constant) and names_a_device(e.value) for e in node.elts)
    )


def holds_device_name(target: ast.AST) -> bool:
    """An assignment target that keeps a device: ``device``, ``self._device``, ``args.device``.

    Examples:
        >>> import ast
        >>> holds_device_name(ast.parse("args.device").body[0].value)
        True
    """
    name = target.id if isinstance(target, ast.Name) else None
    if isinstance(target, ast.Attribute):
        name = target.attr
    return name is not None and name.strip("_").lower() in ("device", "dev", "device_name")


def string_test(r: Recogniser, node: ast.Compare | ast.Call) -> bool:
    """``device-string-logic``: ``"cuda" in device``, ``device in device_list`` (a name
    bound to a list of device names); ``True`` if reported."""
    subject = name_under_test(node)
    if subject is None and isinstance(node, ast.Compare):
        subject = _tested_against_listed(r, node)
    if subject is None:
        return False
    if (
        isinstance(subject, ast.Call)
        and isinstance(subject.func, ast.Name)
        and subject.func.id == "str"
        and len(subject.args) == 1
    ):
        subject = subject.args[0]  # "cuda" in str(device)
    text = r.text(subject)
    r.string_tests.append((node.lineno, text))
    advice = f"tj.device({text}).type  # the type, not the name"
    if isinstance(node, ast.Compare) and any(
        isinstance(side, ast.Constant) and side.value == "auto" for side in node.comparators
    ):
        advice = (
            f"{r.text(node)}  # the choice left to the script: resolve it to a device's "
            "name before tj.device(...) takes it"
        )
    r.add(node, "device-string-logic", advice)
    return True


def name_assignment(r: Recogniser, node: ast.Assign) -> None:
    """``device-string``: ``device = "mps"``, ``args.device = "cuda:1"``, a setting
    that keeps one (``config.init_device = "cpu"``; ``"auto"``, the choice left to the
    script, included), a device type (``self.device_type = "cuda"``), and a config's
    device copied into another setting (``self.device = config.device``,
    ``cfg.init_device = device``)."""
    value = node.value
    typed = [t for t in node.targets if _device_type_name(t)]
    if typed and isinstance(value, ast.Constant) and value.value in _TYPES:
        r.add(
            value,
            "device-string",
            f"{r.text(typed[0])} = {r.text(value)}  # a type: tj.device(device).type gives "
            "it from a device",
        )
        return
    targets = [t for t in node.targets if keeps_device(t)]
    if not targets:
        return
    if isinstance(value, ast.Constant) and (names_a_device(value.value) or value.value == "auto"):
        replacement = f"{r.text(targets[0])} = tj.device({r.text(value)})"
        if value.value == "auto":
            replacement = (
                f"{r.text(targets[0])} = {r.text(value)}  # then "
                'tj.device("cuda" if tj.cuda.is_available() else "cpu") where it is resolved'
            )
        candidate = r.add(value, "device-string", replacement)
        if holds_device_name(targets[0]) and value.value != "auto":
            r.device_names.append(candidate)
    elif (
        isinstance(value, (ast.Name, ast.Attribute))
        and keeps_device(value)
        and _into_a_setting(targets[0], value)
        and id(value) not in r.reported
    ):
        r.add(value, "device-string", f"{r.text(targets[0])} = tj.device({r.text(value)})")


def _into_a_setting(target: ast.expr, value: ast.expr) -> bool:
    """A device handed from one object's settings to another's: into a config
    (``cfg.init_device = device``), or from a config into an object
    (``self.device = config.device``); not a name kept (``device = args.device``,
    ``self.device = device``)."""
    if not isinstance(target, ast.Attribute) or ast.dump(target) == ast.dump(value):
        return False
    return last_name(target.value) != "self" or (
        isinstance(value, ast.Attribute) and last_name(value.value) != "self"
    )


def keeps_device(node: ast.AST) -> bool:
    """``device``, ``args.device``, ``config.init_device``: a name or setting that keeps a
    device (``holds_device_name``'s, or a longer ``*_device``)."""
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
    return holds_device_name(node) or (isinstance(name, str) and bool(_KEPT_DEVICE.match(name)))


def device_names_listed(r: Recogniser, node: ast.List | ast.Tuple | ast.Set) -> None:
    """``device-string``: the device names a script accepts, listed (``["cuda",
    "cpu"]``, ``["mps", "mps:0"]``) outside a test (``device in ("cpu", "mps")`` is
    ``string_test``'s)."""
    parent = r.parent(node)
    if isinstance(parent, ast.Compare) or id(node) in r.reported:
        return
    if len(node.elts) >= 2 and _names_of_devices(node):
        r.add(node, "device-string", f"[tj.device(name) for name in {r.text(node)}]")


def index_appended(r: Recogniser, node: ast.AugAssign) -> None:
    """``device-indexed``: ``device += f":{local_rank}"``, an index appended to a
    device's name."""
    value = node.value
    if not (isinstance(node.op, ast.Add) and holds_device_name(node.target)):
        return
    head = value.values[0] if isinstance(value, ast.JoinedStr) and value.values else value
    if isinstance(head, ast.Constant) and isinstance(head.value, str) and head.value[:1] == ":":
        target = r.text(node.target)
        r.add(node, "device-indexed", f"{target} = tj.device({target} + {r.text(value)})")


def name_choice(r: Recogniser, node: ast.IfExp) -> None:
    """``device-string``: ``device = "cuda" if available else "cpu"``. Not a choice handed
    to a call (``torch.device(...)`` is ``device-select``, and ``tj.device``,
    ``tj.to_device`` and torch take names)."""
    parent = r.parent(node)
    if (
        not isinstance(parent, ast.Assign)
        or id(node) in r.reported
        or name_under_test(node.test) is not None  # "cuda" if "cuda" in device else "cpu"
    ):
        return
    target = parent.targets[0]
    names = [
        isinstance(v, ast.Constant) and names_a_device(v.value) for v in (node.body, node.orelse)
    ]
    # device = self.device if kind == "batch" else "cpu": a name, or another device kept
    # in a name, for a target that keeps a device.
    kept = [holds_device_name(v) and holds_device_name(target) for v in (node.body, node.orelse)]
    if not (any(names) and all(n or k for n, k in zip(names, kept, strict=True))):
        return
    candidate = r.add(node, "device-string", f"{r.text(target)} = tj.device({r.text(node)})")
    if holds_device_name(target):
        r.device_names.append(candidate)


def point_at_tests(r: Recogniser) -> None:
    """After the walk: each device kept as a name says which lines test it as a string,
    the lines to change before it becomes a ``tj.device``."""
    for candidate in r.device_names:
        statement = r.file.names.statement(candidate.node)
        assert isinstance(statement, ast.Assign)
        target = r.text(statement.targets[0])
        candidate.reason = (
            "a device's name works wherever torch2jax_device takes a device; make it a "
            "tj.device where code needs one"
        )
        lines = sorted({line for line, text in r.string_tests if text == target})
        if lines:
            candidate.reason += (
                f"; line {', '.join(map(str, lines))} tests it as a string: write "
                f"tj.device({target}).type there first (on a device, `in` raises TypeError "
                "and `==` a name is False)"
            )


def split_name(r: Recogniser, call: ast.Call) -> None:
    """``device-string-logic``: ``device_type, *index = device.split(":")`` (or
    ``.partition(":")``, ``.rsplit``): a device's name cut into its type and index."""
    func = call.func
    if not (
        isinstance(func, ast.Attribute)
        and func.attr in ("split", "rsplit", "partition")
        and call.args
        and isinstance(call.args[0], ast.Constant)
        and call.args[0].value == ":"
        and (keeps_device(func.value) or _device_type_name(func.value))
    ):
        return
    text = r.text(func.value)
    r.string_tests.append((call.lineno, text))
    r.add(
        call,
        "device-string-logic",
        f"tj.device({text}).type, tj.device({text}).index  # the type and index",
    )


def keyed_by_type(r: Recogniser, node: ast.Call | ast.Subscript) -> None:
    """``device-string-logic``: ``backends.get(device_type, "gloo")`` or
    ``backends[device.type]``, a table keyed by device names (``{"cuda": "nccl", ...}``)."""
    if isinstance(node, ast.Call):
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr == "get" and node.args):
            return
        table, key = func.value, node.args[0]
    else:
        table, key = node.value, node.slice
    if not isinstance(table, ast.Name) or isinstance(key, ast.Constant):
        return
    bindings = r.file.names.bindings(table)
    values = [b.value for b in bindings if b.kind == "assign" and b.element is None]
    if not bindings or len(values) != len(bindings):
        return
    for value in values:
        if not (isinstance(value, ast.Dict) and value.keys):
            return
        keys = [k for k in value.keys if k is not None]
        if len(keys) != len(value.keys) or not all(
            isinstance(k, ast.Constant) and names_a_device(k.value) for k in keys
        ):
            return
    r.add(node, "device-string-logic", f"{r.text(node)}  # keyed by tj.device(...).type")


def default_names(r: Recogniser, node: ast.arguments) -> None:
    """``device-string``: a device's name as the default of a parameter that keeps one
    (``def load(path, device="cuda")``, ``device: str = "cuda"``), or a device type as the
    default of one that names the accelerator (SAM 2's ``accelerator: str = "cuda"``,
    then tested ``accelerator == "cuda"``)."""
    positional = [*node.posonlyargs, *node.args]
    with_defaults = positional[len(positional) - len(node.defaults) :]
    pairs = list(zip(with_defaults, node.defaults, strict=True))
    pairs += [
        (a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True) if d is not None
    ]
    for argument, default in pairs:
        if (
            isinstance(default, ast.Constant)
            and names_a_device(default.value)
            and argument.arg.strip("_").lower() in ("device", "dev", "device_name", "device_type")
        ):
            replacement = f"{argument.arg}=tj.device({r.text(default)})"
            r.add(default, "device-string", replacement)
        elif (
            isinstance(default, ast.Constant)
            and names_a_device(default.value)
            and _used_as_a_device(r, node, argument.arg)
        ):  # Real-ESRGAN's loc='cpu', then torch.load(..., map_location=torch.device(loc))
            replacement = f"{argument.arg}=tj.device({r.text(default)})"
            r.add(default, "device-string", replacement)
        elif (
            isinstance(default, ast.Constant)
            and default.value in _TYPES
            and argument.arg.strip("_").lower() == "accelerator"
        ):
            r.add(
                default,
                "device-string",
                f"{argument.arg}={r.text(default)}  # a device type: "
                "tj.accelerator.current_accelerator().type answers it, tj.device(d).type "
                "gives it from a device",
            )


# Keywords that take a device.
_DEVICE_KEYWORDS = frozenset({"device", "map_location", "device_type"})


def _used_as_a_device(r: Recogniser, arguments: ast.arguments, name: str) -> bool:
    """The function's parameter ``name`` is handed where a device goes: to
    ``torch.device(...)``, as ``device=``/``map_location=``, to ``.to(...)``."""
    function = r.parent(arguments)
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return False
    for node in ast.walk(function):
        if not (isinstance(node, ast.Name) and node.id == name):
            continue
        parent = r.parent(node)
        if isinstance(parent, ast.keyword) and parent.arg in _DEVICE_KEYWORDS:
            return True
        if isinstance(parent, ast.Call) and node in parent.args[:1]:
            if r.qualname(parent.func) == "torch.device":
                return True
            if isinstance(parent.func, ast.Attribute) and parent.func.attr == "to":
                return True
    return False


def _device_type_name(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
    return isinstance(name, str) and name.strip("_").lower() in ("device_type", "device_str")


def getattr_default(r: Recogniser, call: ast.Call) -> None:
    """``device-string``: ``getattr(args, "device", "cuda")``, a device's name as the
    fallback of a setting that keeps one."""
    func = call.func
    if not (
        isinstance(func, ast.Name)
        and func.id == "getattr"
        and r.file.names.is_builtin(func)
        and len(call.args) == 3
    ):
        return
    name, default = call.args[1], call.args[2]
    if (
        isinstance(name, ast.Constant)
        and isinstance(name.value, str)
        and name.value.strip("_").lower() in ("device", "dev", "device_name")
        and isinstance(default, ast.Constant)
        and names_a_device(default.value)
    ):
        r.add(default, "device-string", f"tj.device({r.text(default)})")


def formatted_name(r: Recogniser, node: ast.JoinedStr) -> None:
    """``device-string``: ``f"{device_type}:{local_rank}"``, a device's name put together
    from its type's name and an index."""
    values = node.values
    if (
        len(values) == 3
        and isinstance(values[0], ast.FormattedValue)
        and isinstance(values[1], ast.Constant)
        and values[1].value == ":"
        and isinstance(values[2], ast.FormattedValue)
        and (_device_type_name(values[0].value) or holds_device_name(values[0].value))
    ):
        r.add(node, "device-string", f"tj.device({r.text(node)})")


def is_device_value(r: Recogniser, node: ast.expr, depth: int = 0) -> bool:
    """``node`` holds a device: a ``torch.device``, a device's name, or a value named so,
    itself or as the copy it was assigned (``value = device``, ``options["device"]``)."""
    if isinstance(node, ast.Constant):
        return names_a_device(node.value)
    if "torch-device" in r.file.values.kinds(node):
        return True
    name = last_name(node)
    if name is not None and _DEVICE_VALUE.search(name) is not None:
        return True
    if depth or not isinstance(node, (ast.Name, ast.Subscript, ast.Attribute)):
        return False
    copied = r.file.names.assigned(node, every=True) or []
    held = [v for v in copied if not (isinstance(v, ast.Constant) and v.value is None)]
    return bool(held) and all(v is not node and is_device_value(r, v, depth + 1) for v in held)
