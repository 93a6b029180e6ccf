"""The launcher's and runtime's environment variables (sections "Start-up" and
"Distributed"): ``os.environ["RANK"]``, ``os.getenv("CUDA_VISIBLE_DEVICES")``,
``"LOCAL_RANK" in os.environ``, and the same written through indirection
(``os.environ.update({"MASTER_ADDR": host})``, ``os.environ[key] = value`` with ``key``
bound to a variable's name)."""

from __future__ import annotations

import ast

from .base import Recogniser

__all__ = [
    "ENVIRONMENT_READERS",
    "variable_check",
    "variable_names",
    "variable_read",
    "variables_updated",
]

#: Calls whose first argument names an environment variable.
ENVIRONMENT_READERS = frozenset(
    {"os.environ.get", "os.getenv", "os.environ.setdefault", "os.environ.pop"}
)
# What a variable init_process_group reads becomes: nothing to change.
_WRITTEN = "unchanged: init_process_group reads it"
# The variables: rule and what to write instead.
_ENVIRONMENT = {
    "LOCAL_RANK": ("dist-local-rank", "tj.distributed.get_local_rank()"),
    "RANK": ("dist-env", "tj.distributed.get_rank()"),
    "WORLD_SIZE": ("dist-env", "tj.distributed.get_world_size()"),
    "LOCAL_WORLD_SIZE": ("dist-env", _WRITTEN),
    "GROUP_RANK": ("dist-env", _WRITTEN),
    "MASTER_ADDR": ("dist-env", _WRITTEN),
    "MASTER_PORT": ("dist-env", _WRITTEN),
    "CUDA_VISIBLE_DEVICES": ("cuda-visible-devices", None),
    "PYTORCH_CUDA_ALLOC_CONF": ("cuda-alloc-conf", None),
    "CUBLAS_WORKSPACE_CONFIG": ("deterministic", None),
}
# The variables torchrun sets (torch2jax-device run sets them too).
_TORCHRUN = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
)
# Launchers' variables by prefix: SLURM's and Open MPI's (jax.distributed reads them).
_LAUNCHER_PREFIXES = ("SLURM_", "OMPI_COMM_WORLD_")


def variable_read(r: Recogniser, node: ast.AST, key: ast.expr | None) -> bool:
    """``node`` reads the variable named by ``key``; ``True`` if it is one the scanner knows."""
    found = _variable(_constant(r, key)) if key is not None else None
    if found is None:
        return False
    rule, replacement = found
    r.add(node, rule, replacement)
    return True


def variables_updated(r: Recogniser, call: ast.Call) -> None:
    """``os.environ.update({"MASTER_ADDR": host, "MASTER_PORT": port})`` (or with keywords):
    each variable the scanner knows, reported where its name is written."""
    if r.qualname(call.func) != "os.environ.update":
        return
    keys: list[tuple[ast.AST, object]] = [
        (keyword, keyword.arg) for keyword in call.keywords if keyword.arg is not None
    ]
    for argument in call.args:
        if isinstance(argument, ast.Dict):
            keys += [(key, _constant(r, key)) for key in argument.keys if key is not None]
    for node, name in keys:
        found = _variable(name)
        if found is not None:
            rule, replacement = found
            if replacement is not None and replacement.startswith("tj."):
                replacement = _WRITTEN  # tj.distributed.get_rank() reads, this writes
            r.add(node, rule, replacement, position=r.file.position(r.file.span(node)[0]))


def _constant(r: Recogniser, node: ast.AST) -> object:
    """The string ``node`` is: a literal, or a name every binding of which is one literal
    (``key = "MASTER_ADDR"``, ``key, value = "NCCL_DEBUG", "INFO"``); else ``None``."""
    if isinstance(node, ast.Constant):
        return node.value
    if not isinstance(node, ast.Name):
        return None
    values = {
        binding.value.value
        for binding in r.file.names.bindings(node)
        if binding.kind == "assign" and isinstance(binding.value, ast.Constant)
    }
    bound = r.file.names.bindings(node)
    if len(values) != 1 or len(bound) != sum(b.kind == "assign" for b in bound):
        return None
    return values.pop()


def variable_check(r: Recogniser, node: ast.Compare) -> bool:
    """``"RANK" in os.environ``: launched by torchrun or torch2jax-device run?"""
    found = None
    if (
        len(node.ops) == 1
        and isinstance(node.ops[0], (ast.In, ast.NotIn))
        and r.qualname(node.comparators[0]) == "os.environ"
        and isinstance(node.left, ast.Constant)
    ):
        found = _variable(node.left.value)
    if found is None or not isinstance(node.left, ast.Constant):
        return False
    r.add(node, found[0], f"{r.text(node)}  # {_set_by(str(node.left.value))}")
    return True


def _set_by(name: str) -> str:
    """Who sets the launcher's variable ``name``: torchrun's are set by both launchers,
    SLURM's and Open MPI's by theirs alone."""
    if name.startswith("SLURM_"):
        return "srun sets it (not torchrun); jax.distributed.initialize() reads it"
    if name.startswith("OMPI_COMM_WORLD_"):
        return "mpirun sets it (not torchrun); jax.distributed.initialize() reads it"
    if name in _TORCHRUN:
        return "torchrun and torch2jax-device run set it"
    return "set where the process is started, as for torch"


def variable_names(r: Recogniser, node: ast.Tuple | ast.List | ast.Set | ast.Dict) -> None:
    """The launcher's variables named in data: ``for key in ("RANK", "WORLD_SIZE"):``, the
    keys of ``{"NCCL_DEBUG": "WARN"}`` written into ``os.environ`` in a loop."""
    parent = r.parent(node)
    if isinstance(parent, ast.Assign) and isinstance(parent.targets[0], (ast.Tuple, ast.List)):
        return  # key, value = "NCCL_DEBUG", "INFO": reported where os.environ[key] is written
    elements = node.keys if isinstance(node, ast.Dict) else node.elts
    named = [e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    found = [known[0] for known in map(_variable, named) if known is not None]
    if found and set(found) <= {"dist-env", "dist-local-rank"}:
        r.add(node, "dist-env")


def _variable(name: object) -> tuple[str, str | None] | None:
    """The rule and replacement of an environment variable the scanner knows."""
    if not isinstance(name, str):
        return None
    if name in _ENVIRONMENT:
        return _ENVIRONMENT[name]
    if name.startswith(_LAUNCHER_PREFIXES):
        return "dist-env", "unchanged: jax.distributed.initialize() reads it"
    if name.startswith(("NCCL_", "TORCH_NCCL_")):
        return "dist-env", "unchanged: XLA's GPU collectives run on NCCL, which reads it"
    if name == "TORCH_DISTRIBUTED_DEBUG":
        return "dist-env", "torch's own: JAX reports a failed collective with its coordinator"
    if name == "CUDA_LAUNCH_BLOCKING":
        return (
            "cuda-other",
            "nothing: call jax.block_until_ready(x) where a result must be waited for",
        )
    return None
