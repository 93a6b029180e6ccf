"""The launcher's and runtime's environment variables (sections "Start-up" and
"Distributed"): ``os.environ["RANK"]``, ``os.getenv("CUDA_VISIBLE_DEVICES")``,
``"LOCAL_RANK" in os.environ``."""

from __future__ import annotations

import ast

from .base import Recogniser

__all__ = ["ENVIRONMENT_READERS", "variable_check", "variable_names", "variable_read"]

#: Calls whose first argument names an environment variable.
ENVIRONMENT_READERS = frozenset(
    {"os.environ.get", "os.getenv", "os.environ.setdefault", "os.environ.pop"}
)
# The variables: rule and what to write instead.
_ENVIRONMENT = {
    "LOCAL_RANK": ("dist-local-rank", "tj.distributed.get_local_rank()"),
    "RANK": ("dist-env", "tj.distributed.get_rank()"),
    "WORLD_SIZE": ("dist-env", "tj.distributed.get_world_size()"),
    "LOCAL_WORLD_SIZE": ("dist-env", "unchanged: init_process_group reads it"),
    "GROUP_RANK": ("dist-env", "unchanged: init_process_group reads it"),
    "MASTER_ADDR": ("dist-env", "unchanged: init_process_group reads it"),
    "MASTER_PORT": ("dist-env", "unchanged: init_process_group reads it"),
    "CUDA_VISIBLE_DEVICES": ("cuda-visible-devices", None),
    "PYTORCH_CUDA_ALLOC_CONF": ("cuda-alloc-conf", None),
    "CUBLAS_WORKSPACE_CONFIG": ("deterministic", None),
}
# Launchers' variables by prefix: SLURM's and Open MPI's (jax.distributed reads them).
_LAUNCHER_PREFIXES = ("SLURM_", "OMPI_COMM_WORLD_")


def variable_read(r: Recogniser, node: ast.AST, key: ast.expr | None) -> bool:
    """``node`` reads the variable named by ``key``; ``True`` if it is one the scanner knows."""
    found = _variable(key.value) if isinstance(key, ast.Constant) else None
    if found is None:
        return False
    rule, replacement = found
    r.add(node, rule, replacement)
    return True


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
    if found is None:
        return False
    r.add(node, found[0], f"{r.text(node)}  # torchrun and torch2jax-device run set it")
    return True


def variable_names(r: Recogniser, node: ast.Tuple | ast.List | ast.Set) -> None:
    """The launcher's variables named in data: ``for key in ("RANK", "WORLD_SIZE"):``."""
    named = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    found = [_ENVIRONMENT[v][0] for v in named if v in _ENVIRONMENT]
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
