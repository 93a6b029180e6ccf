"""Devices kept as their names: ``device = "mps"``, ``"cuda" in device``.

torch takes a device's name wherever it takes a device, so scripts keep devices as
strings and test them as strings. Those tests break once the value is a ``tj.device``
(``"cuda" in device`` raises ``TypeError``, ``device == "cuda"`` is ``False``), so the
scanner reports them with ``tj.device(device).type``, which takes a name and a device
alike (catalog rows ``device-string`` and ``device-string-logic``).
"""

from __future__ import annotations

import ast

from .base import Recogniser

__all__ = [
    "holds_device_name",
    "name_assignment",
    "name_choice",
    "name_under_test",
    "names_a_device",
    "point_at_tests",
    "string_test",
]

# Device types of torch and JAX ("gpu", "tpu"), as a script writes them.
_TYPES = frozenset("cuda cpu mps xla tpu gpu xpu hpu npu".split())


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
        elif isinstance(operator, (ast.Eq, ast.NotEq)) and _literal(right):
            subject = left
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
    """``device-string-logic``: ``"cuda" in device``; ``True`` if reported."""
    subject = name_under_test(node)
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
    r.add(node, "device-string-logic", f"tj.device({text}).type  # the type, not the name")
    return True


def name_assignment(r: Recogniser, node: ast.Assign) -> None:
    """``device-string``: ``device = "mps"``, ``args.device = "cuda:1"``."""
    targets = [t for t in node.targets if holds_device_name(t)]
    value = node.value
    if targets and isinstance(value, ast.Constant) and names_a_device(value.value):
        replacement = f"{r.text(targets[0])} = tj.device({r.text(value)})"
        r.device_names.append(r.add(value, "device-string", replacement))


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
