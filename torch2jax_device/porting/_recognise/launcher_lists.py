"""The launchers' variables named in lists (round 9's development set: DLRM's
``extend_distributed``), section "Distributed".

- A list of the variables a script tries in turn, written over several lines
  (``env2int(["PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "WORLD_SIZE"])``
  formatted one name a line): each name is reported on its own line, with who sets it.
  On one line the list keeps its one finding (``environment.variable_names``).
- The read through a helper's parameter: ``def env2int(env_list, default=-1): for e in
  env_list: int(os.environ.get(e, -1))``, where the file's calls hand ``env_list`` lists
  of the launchers' variables: the read is ``dist-env`` (or ``dist-local-rank`` where
  every name read is a local rank).
"""

from __future__ import annotations

import ast

from .._values import last_name
from .base import Recogniser
from .environment import ENVIRONMENT_READERS, set_by, variable_rule

__all__ = ["names_by_line", "read_through_parameter"]

_LAUNCHER_RULES = frozenset({"dist-env", "dist-local-rank"})


def names_by_line(r: Recogniser, node: ast.Tuple | ast.List | ast.Set) -> None:
    """The finding ``environment.variable_names`` just gave ``node``, a list over several
    lines, spread over them: one finding per name the scanner knows, on its own line."""
    if not r.found or r.found[-1].node is not node or node.lineno == node.end_lineno:
        return
    named = [
        (element, variable_rule(element.value))
        for element in node.elts
        if isinstance(element, ast.Constant) and isinstance(element.value, str)
    ]
    if len({element.lineno for element, _ in named}) < 2:
        return
    r.found.pop()
    for element, known in named:
        if known is not None and known[0] in _LAUNCHER_RULES:
            rule, told = known
            if told is None or told.startswith("tj."):  # WORLD_SIZE: torchrun sets it
                told = set_by(str(element.value))
            r.add(element, rule, f"{r.text(element)}  # {told}")


def read_through_parameter(r: Recogniser, node: ast.Call | ast.Subscript) -> None:
    """``os.environ.get(e)`` / ``os.environ[e]`` with ``e`` a loop's variable over a
    parameter the file's calls hand lists of the launchers' variables."""
    if id(node) in r.reported:
        return
    if isinstance(node, ast.Call):
        if r.qualname(node.func) not in ENVIRONMENT_READERS or not node.args:
            return
        key = node.args[0]
    elif r.qualname(node.value) == "os.environ":
        key = node.slice
    else:
        return
    rules = {
        known[0]
        for name in _names_through_parameter(r, key)
        if (known := variable_rule(name)) is not None
    }
    if rules and rules <= _LAUNCHER_RULES:
        rule = "dist-local-rank" if rules == {"dist-local-rank"} else "dist-env"
        advice = (
            "local_rank = tj.distributed.get_local_rank()"
            if rule == "dist-local-rank"
            else "rank, world_size = tj.distributed.get_rank(), tj.distributed.get_world_size()"
        )
        r.add(
            node,
            rule,
            f"{advice}  # the variables tried in turn are the launchers' (torchrun and "
            "torch2jax-device run set RANK, WORLD_SIZE and LOCAL_RANK)",
        )


def _names_through_parameter(r: Recogniser, key: ast.expr) -> list[str]:
    """The strings of the lists the file's calls hand the parameter ``key`` loops over."""
    if not isinstance(key, ast.Name):
        return []
    loops = r.file.names.bindings(key)
    if len(loops) != 1 or loops[0].kind != "for" or not isinstance(loops[0].value, ast.Name):
        return []
    iterated = loops[0].value
    parameters = r.file.names.bindings(iterated)
    if len(parameters) != 1 or parameters[0].kind != "param":
        return []
    function = r.file.names.enclosing(parameters[0].node, ast.FunctionDef, ast.AsyncFunctionDef)
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    positional = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
    index = positional.index(iterated.id)
    names: list[str] = []
    for call in (n for n in r.file.names.parents if isinstance(n, ast.Call)):
        if last_name(call.func) != function.name:
            continue
        given = call.args[index] if index < len(call.args) else None
        given = next((k.value for k in call.keywords if k.arg == iterated.id), given)
        if isinstance(given, (ast.List, ast.Tuple, ast.Set)):
            names += [
                e.value
                for e in given.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            ]
    return names
