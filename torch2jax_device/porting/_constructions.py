"""How code reads a class or a function it calls: what a call passes as a parameter, and
whether a read of a class makes an instance (``Values`` follows a model handed to a
constructor into ``self``: minGPT's ``Trainer(config, model)``)."""

from __future__ import annotations

import ast
from typing import Literal


def passed_as(
    function: ast.FunctionDef | ast.AsyncFunctionDef,
    positional: list[str],
    call: ast.Call,
    parameter: str,
) -> ast.expr | None:
    """What ``call`` passes as ``function``'s ``parameter`` (``positional``: the names
    its positional arguments fill, ``self`` left out for a constructor), its default
    when it passes none; ``None`` when that cannot be known (``*args``, ``**kwargs``)."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        return None
    keyword = next((k.value for k in call.keywords if k.arg == parameter), None)
    if keyword is not None:
        return keyword
    if parameter in positional and positional.index(parameter) < len(call.args):
        return call.args[positional.index(parameter)]
    all_positional = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
    defaults = function.args.defaults
    offset = len(all_positional) - len(defaults)
    if parameter in all_positional and all_positional.index(parameter) >= offset:
        return defaults[all_positional.index(parameter) - offset]
    return None


def construction(parent: ast.AST | None, load: ast.expr) -> ast.Call | Literal[False] | None:
    """How a read ``load`` of a class uses it: the call making an instance, ``None`` for a
    read of a static attribute (``Trainer.get_default_config()``), ``False`` for any other
    use (a base class, handed on, ``isinstance``, ``Trainer.__init__``)."""
    if isinstance(parent, ast.Call) and parent.func is load:
        return parent
    if isinstance(parent, ast.Attribute) and not parent.attr.startswith("__"):
        return None
    return False


def makes_itself(cls: ast.ClassDef) -> bool:
    """``cls(...)``, ``type(self)(...)`` or ``self.__class__(...)`` in the class: it makes
    instances no read of its name shows."""
    for node in ast.walk(cls):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (
            (isinstance(func, ast.Name) and func.id == "cls")
            or (
                isinstance(func, ast.Call)
                and isinstance(func.func, ast.Name)
                and func.func.id == "type"
            )
            or (isinstance(func, ast.Attribute) and func.attr == "__class__")
        ):
            return True
    return False
