"""The launcher's and runtime's environment variables (sections "Start-up" and
"Distributed"): ``os.environ["RANK"]``, ``os.getenv("CUDA_VISIBLE_DEVICES")``,
``"LOCAL_RANK" in os.environ``, and the same written through indirection
(``os.environ.update({"MASTER_ADDR": host})``, ``os.environ[key] = value`` with ``key``
bound to a variable's name)."""

from __future__ import annotations

import ast
import re

from .._names import Binding
from .._values import last_name
from .base import Recogniser

__all__ = [
    "ENVIRONMENT_READERS",
    "launcher_argument",
    "project_reader",
    "set_by",
    "variable_check",
    "variable_held",
    "variable_names",
    "variable_read",
    "variable_returned",
    "variable_rule",
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
    "PYTORCH_ALLOC_CONF": ("cuda-alloc-conf", None),  # its name since torch 2.9
    "CUBLAS_WORKSPACE_CONFIG": ("deterministic", None),
    # the node's rank, set by the launchers that start one process per node's device
    "NODE_RANK": ("dist-env", "jax.process_index() // jax.local_device_count()"),
    # the CUDA runtime's and torch's allocator settings, read when CUDA starts
    **dict.fromkeys(
        (
            "CUDA_MODULE_LOADING",
            "CUDA_DEVICE_MAX_CONNECTIONS",
            "PYTORCH_NO_CUDA_MEMORY_CACHING",
            "PYTORCH_HIP_ALLOC_CONF",
        ),
        ("cuda-alloc-conf", None),
    ),
    "CUDA_DEVICE_ORDER": ("cuda-visible-devices", None),
    # the other accelerators' twins: Ascend's (torch_npu), AMD's (ROCm)
    "ASCEND_RT_VISIBLE_DEVICES": ("cuda-visible-devices", None),
    "HIP_VISIBLE_DEVICES": ("cuda-visible-devices", None),
    # Apple GPUs': torch's allocator limit, and its fallback to the CPU for missing kernels
    "PYTORCH_MPS_HIGH_WATERMARK_RATIO": ("cuda-alloc-conf", None),
    "PYTORCH_ENABLE_MPS_FALLBACK": (
        "cuda-alloc-conf",
        "torch's own: JAX has no per-kernel fallback to the CPU; an op its Apple GPU "
        "plugin lacks fails there, so put that computation on the CPU yourself "
        '(jax.device_put(x, jax.devices("cpu")[0]))',
    ),
    # torch.compile's switches: jax.jit reads none of them
    **dict.fromkeys(
        ("TORCHDYNAMO_DISABLE", "TORCH_COMPILE_DISABLE"),
        (
            "torch-compile",
            "torch's own: jax.jit's switch is JAX_DISABLE_JIT=1 "
            '(jax.config.update("jax_disable_jit", True)), for debugging',
        ),
    ),
}
# torch.compile's other settings by prefix (Inductor's cache, Dynamo's limits...).
_COMPILER_PREFIXES = ("TORCHINDUCTOR_", "TORCHDYNAMO_")
_COMPILER_SETTING = (
    "torch's own: jax.jit reads none of torch's compiler settings; JAX's are "
    'jax.config options (jax.config.update("jax_compilation_cache_dir", path)...)'
)
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
# A value named for the environment a project reads variables from: env, self._env, environ.
_ENVIRONMENT_VALUE = re.compile(r"(^|_)(env|environ|environment)$", re.IGNORECASE)
# Launchers' variables by prefix: SLURM's and Open MPI's (jax.distributed reads them).
_LAUNCHER_PREFIXES = ("SLURM_", "OMPI_COMM_WORLD_")
# The other MPI launchers' (Hydra's PMI, PMIx, MVAPICH's): JAX detects none of them.
_MPI_PREFIXES = ("PMI_", "PMIX_", "MV2_COMM_WORLD_")
_GLOO = (
    "torch's own: the network interface of its gloo back end; JAX's gloo CPU collectives "
    "do not read it (they meet through jax.distributed's coordinator)"
)
_TUNABLE_OP = (
    "torch's own: TunableOp tunes torch's GEMMs; XLA autotunes its own "
    "(XLA_FLAGS=--xla_gpu_autotune_level=N)"
)
_MPI_SET = (
    "unchanged: mpiexec sets it (not torchrun) and JAX does not read it; hand it to "
    "jax.distributed.initialize(process_id=..., num_processes=...)"
)


def variable_read(r: Recogniser, node: ast.AST, key: ast.expr | None) -> bool:
    """``node`` reads (or writes) the variable named by ``key``: a literal, or a name that
    holds one of several (``for v in ("LOCAL_RANK", "SLURM_LOCALID"): os.environ[v]``);
    ``True`` if one is a variable the scanner knows."""
    found = _known(r, key) if key is not None else None
    if found is None:
        return False
    rule, replacement = found
    if isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Load):
        rule = "dist-env" if rule == "dist-local-rank" else rule  # a write
        if replacement is not None and replacement.startswith("tj."):
            replacement = _WRITTEN  # tj.distributed.get_rank() reads, this writes
    r.add(node, rule, replacement)
    return True


def _known(r: Recogniser, key: ast.expr) -> tuple[str, str | None] | None:
    """The rule and replacement of the variable ``key`` names: a literal or a name bound
    to one literal; or, for a loop's variable over a table of alternatives (``for v in
    ("LOCAL_RANK", "MPI_LOCALRANKID")``), the first of them the scanner knows."""
    if not _loop_variable(r, key):
        found = _variable(_constant(r, key))
        if found is None and isinstance(key, ast.Name):
            given = (_variable(_constant(r, a)) for a in _arguments_for(r, key))
            found = next((f for f in given if f is not None), None)
        return found
    return next(
        (found for found in map(_variable, variable_keys(r, key)) if found is not None), None
    )


def _arguments_for(r: Recogniser, key: ast.Name) -> list[ast.expr]:
    """What the calls of the file hand the parameter ``key`` names
    (``_config_var("WORLD_SIZE", ...)`` for ``def _config_var(env_var, ...)``)."""
    bindings = r.file.names.bindings(key)
    if len(bindings) != 1 or bindings[0].kind != "param":
        return []
    function = r.file.names.enclosing(bindings[0].node, ast.FunctionDef, ast.AsyncFunctionDef)
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    positional = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
    index = positional.index(key.id) if key.id in positional else None
    given: list[ast.expr] = []
    calls = (
        node
        for node in r.file.names.parents
        if isinstance(node, ast.Call) and last_name(node.func) == function.name
    )
    for call in calls:
        if index is not None and index < len(call.args):
            given.append(call.args[index])
        given += [k.value for k in call.keywords if k.arg == key.id]
    return given


def _loop_variable(r: Recogniser, key: ast.expr) -> bool:
    """``key`` is a loop's variable (every binding a ``for``, or of a comprehension)."""
    if not isinstance(key, ast.Name):
        return False
    bindings = r.file.names.bindings(key)
    return bool(bindings) and all(b.kind == "for" for b in bindings)


def variable_keys(r: Recogniser, node: ast.AST, depth: int = 0) -> list[str]:
    """The variable names ``node`` may hold, in order: a literal, a name bound to literals,
    a loop's (or comprehension's) variable over a tuple of them, or a tuple held in a name
    (``_ENV_VARS = ("RANK", ...)``); ``[]`` when one binding is something else."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) else []
    if not isinstance(node, ast.Name) or depth > 3:
        return []
    names: list[str] = []
    bindings = r.file.names.bindings(node)
    around = [b for b in bindings if b.kind == "for" and _inside_loop_of(r, node, b)]
    for binding in around or bindings:  # the loop around a read binds what it reads
        value = binding.value
        if binding.kind == "assign" and binding.element is None and value is not None:
            held = variable_keys(r, value, depth + 1)
        elif binding.kind == "for" and binding.element is None and value is not None:
            held = [n for e in _elements(r, value, depth + 1) for n in variable_keys(r, e)]
        elif binding.kind == "for" and binding.element == 0 and (table := _items_of(value)):
            keys = _updating_dict(r, table) if _reads(r, node) else None  # a write: the
            held = [n for k in keys or [] for n in variable_keys(r, k)]  # table's, reported there
        else:
            held = []
        if not held:
            return []
        names += held
    return names


def _reads(r: Recogniser, node: ast.AST) -> bool:
    """``node`` names the variable ``os.environ`` is read with, not written with."""
    parent = r.parent(node)
    return not (isinstance(parent, ast.Subscript) and not isinstance(parent.ctx, ast.Load))


def _items_of(node: ast.AST | None) -> ast.expr | None:
    """``table`` of ``table.items()``."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "items"
        and not node.args
    ):
        return node.func.value
    return None


def _inside_loop_of(r: Recogniser, node: ast.AST, binding: Binding) -> bool:
    """``node`` is in the body of the ``for`` loop (or comprehension) binding ``binding``."""
    loop = r.parent(binding.node)
    while loop is not None and not isinstance(loop, (ast.For, ast.AsyncFor, ast.comprehension)):
        loop = r.parent(loop)
    if isinstance(loop, ast.comprehension):
        loop = r.parent(loop)  # the comprehension's expression and conditions
    parent = r.parent(node)
    while parent is not None and parent is not loop:
        parent = r.parent(parent)
    return parent is not None


def _elements(r: Recogniser, node: ast.AST, depth: int) -> list[ast.expr]:
    """The elements of a tuple, list or set literal, or of one a name holds."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return list(node.elts)
    if isinstance(node, ast.Name) and depth <= 3:
        bindings = r.file.names.bindings(node)
        if bindings and all(b.kind == "assign" and b.element is None for b in bindings):
            return [e for b in bindings if b.value for e in _elements(r, b.value, depth + 1)]
    return []


def project_reader(r: Recogniser, call: ast.Call) -> None:
    """A project's reader of the environment (fairseq2's
    ``self._env.maybe_get("CUDA_VISIBLE_DEVICES")``, ``env.get_int("RANK")``): a method of
    a value named for the environment, given a variable the scanner knows first."""
    func = call.func
    if (
        isinstance(func, ast.Attribute)
        and _ENVIRONMENT_VALUE.search(last_name(func.value) or "")
        and r.qualname(func) is None
        and call.args
        and id(call) not in r.reported
    ):
        variable_read(r, call, call.args[0])


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
        elif any(_variable(_constant(r, key)) for key in _updating_dict(r, argument) or []):
            r.add(call, "dist-env", _WRITTEN)  # os.environ.update(env_vars)
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
    formatted = _formatted_alone(node)
    if formatted is not None:
        return _constant(r, formatted)  # f"{CUDA_ENVVAR}"
    if not isinstance(node, ast.Name):
        return None
    assigned = r.file.names.assigned(node, every=True)  # through copies (key = name)
    values = {v.value for v in assigned or () if isinstance(v, ast.Constant)}
    return values.pop() if len(values) == 1 else None


def _formatted_alone(node: ast.AST) -> ast.expr | None:
    """``name`` of ``f"{name}"``: an f-string that is one value, unformatted."""
    if (
        isinstance(node, ast.JoinedStr)
        and len(node.values) == 1
        and isinstance(node.values[0], ast.FormattedValue)
        and node.values[0].conversion == -1
        and node.values[0].format_spec is None
    ):
        return node.values[0].value
    return None


def variable_held(r: Recogniser, node: ast.Assign) -> None:
    """``CUDA_ENVVAR = "CUDA_VISIBLE_DEVICES"``: a variable's name kept in a module's (or
    class's) constant that reads or writes ``os.environ`` (``os.environ[CUDA_ENVVAR] =
    gpus``, ``os.environ[f"{CUDA_ENVVAR}"]``), reported where the constant is written too:
    it names the variable for the whole file. A function's own ``name = "LOCAL_RANK"`` is
    reported where it is read; a constant that is only printed says nothing about the
    environment."""
    value = node.value
    if r.file.names.enclosing(node, ast.FunctionDef, ast.AsyncFunctionDef) is not None:
        return
    if not (
        len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(value, ast.Constant)
        and id(value) not in r.reported
    ):
        return
    found = _variable(value.value)
    binding = r.file.names.binding_of.get(node.targets[0])
    if found is None or binding is None:
        return
    if any(_keys_environment_read(r, load) for load in r.file.names.loads(binding)):
        r.add(value, found[0], found[1] if found[1] != _WRITTEN else None)


def _keys_environment_read(r: Recogniser, node: ast.AST) -> bool:
    """``node`` (or ``f"{node}"``) is the key of a read or write of ``os.environ``."""
    parent = r.parent(node)
    if isinstance(parent, ast.FormattedValue):
        node = r.parent(parent) or node
        if _formatted_alone(node) is None:
            return False
        parent = r.parent(node)
    if isinstance(parent, ast.Subscript):
        return parent.slice is node and r.qualname(parent.value) == "os.environ"
    if isinstance(parent, ast.Call):
        return (
            r.qualname(parent.func) in ENVIRONMENT_READERS
            and bool(parent.args)
            and parent.args[0] is node
        )
    return isinstance(parent, ast.Compare) and any(
        r.qualname(c) == "os.environ" for c in parent.comparators
    )


def variable_check(r: Recogniser, node: ast.Compare) -> bool:
    """``"RANK" in os.environ``: launched by torchrun or torch2jax-device run?"""
    found = None
    if (
        len(node.ops) == 1
        and isinstance(node.ops[0], (ast.In, ast.NotIn))
        and r.qualname(node.comparators[0]) == "os.environ"
    ):
        found = _known(r, node.left)
        if found is not None and not isinstance(_constant(r, node.left), str):
            # for v in (...): if v in os.environ; all(k in os.environ for k in NAMES), NAMES
            # reported where they are written too: launched?
            found = ("dist-env", None)
    if found is None:
        return False
    named = _constant(r, node.left)  # "RANK", or CUDA_ENVVAR = "CUDA_VISIBLE_DEVICES"
    named = named if isinstance(named, str) else None
    r.add(node, found[0], f"{r.text(node)}  # {_set_by(str(named))}" if named else found[1])
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
    if name.startswith(_MPI_PREFIXES):
        return _MPI_SET
    return "set where the process is started, as for torch"


def variable_names(r: Recogniser, node: ast.Tuple | ast.List | ast.Set | ast.Dict) -> None:
    """The launcher's variables named in data: ``for key in ("RANK", "WORLD_SIZE"):``, the
    keys of ``{"NCCL_DEBUG": "WARN"}`` written into ``os.environ`` in a loop."""
    parent = r.parent(node)
    if isinstance(parent, ast.Assign) and isinstance(parent.targets[0], (ast.Tuple, ast.List)):
        return  # key, value = "NCCL_DEBUG", "INFO": reported where os.environ[key] is written
    if _keys_environment(r, node):
        return  # reported where os.environ is read or written with them
    elements = node.keys if isinstance(node, ast.Dict) else node.elts
    named = [e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    found = [known[0] for known in map(_variable, named) if known is not None]
    if found and set(found) <= {"dist-env", "dist-local-rank"}:
        r.add(node, "dist-env")


def variable_returned(r: Recogniser, node: ast.Return) -> None:
    """A helper that hands out a variable's name (verl's ``return "CUDA_VISIBLE_DEVICES"
    if cuda else "ASCEND_RT_VISIBLE_DEVICES"``): its callers, in other files, read or
    write ``os.environ`` with it."""
    value = node.value
    names = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
    known = [
        _variable(name.value)
        for name in names
        if isinstance(name, ast.Constant) and isinstance(name.value, str)
    ]
    rules = {found[0] for found in known if found is not None}
    if len(rules) == 1 and value is not None and id(value) not in r.reported:
        r.add(value, rules.pop())


def _updating_dict(r: Recogniser, node: ast.expr) -> list[ast.expr] | None:
    """The keys of the dict literal every binding of the name ``node`` holds."""
    if not isinstance(node, ast.Name):
        return None
    values = r.file.names.assigned(node, every=True)  # through copies (value = env_vars)
    if not values or not all(isinstance(v, ast.Dict) for v in values):
        return None
    return [k for v in values if isinstance(v, ast.Dict) for k in v.keys if k is not None]


def _keys_environment(r: Recogniser, node: ast.AST) -> bool:
    """``for v in ("LOCAL_RANK", "SLURM_LOCALID"): ... os.environ[v]``: the names of
    ``node`` are a loop's, whose variable reads ``os.environ``, where they are reported.
    (A tuple kept in a name is reported where it is written: it names the variables.)"""
    user = r.parent(node)
    if isinstance(user, (ast.For, ast.comprehension)) and user.iter is node:
        target = user.target
        return isinstance(target, ast.Name) and _reads_environment_with(r, target)
    return False


def _reads_environment_with(r: Recogniser, target: ast.Name) -> bool:
    binding = r.file.names.binding_of.get(target)
    if binding is None:
        return False
    for load in r.file.names.loads(binding):
        user = r.parent(load)
        if isinstance(user, ast.Subscript) and r.qualname(user.value) == "os.environ":
            return True
        if isinstance(user, ast.Compare) and any(
            r.qualname(c) == "os.environ" for c in user.comparators
        ):
            return True
    return False


def _variable(name: object) -> tuple[str, str | None] | None:
    """The rule and replacement of an environment variable the scanner knows; a copy a
    script keeps under a leading underscore (GPT-SoVITS's ``_CUDA_VISIBLE_DEVICES``) is
    the variable's."""
    if not isinstance(name, str):
        return None
    name = name.lstrip("_")
    if name in _ENVIRONMENT:
        return _ENVIRONMENT[name]
    if name.startswith(_LAUNCHER_PREFIXES):
        return "dist-env", "unchanged: jax.distributed.initialize() reads it"
    if name.startswith(_COMPILER_PREFIXES):
        return "torch-compile", _COMPILER_SETTING
    if name.startswith(_MPI_PREFIXES):
        return "dist-env", _MPI_SET
    if name in ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"):  # Intel MPI's, MPICH's
        return "dist-env", _MPI_SET
    if name.startswith(("NCCL_", "TORCH_NCCL_")):
        return "dist-env", "unchanged: XLA's GPU collectives run on NCCL, which reads it"
    if name.startswith("GLOO_"):  # GLOO_SOCKET_IFNAME: read by torch's ProcessGroupGloo
        return "dist-env", _GLOO
    if name == "USE_LIBUV":
        return "dist-env", "torch's own: its TCPStore's back end, and jax.distributed has no store"
    if name == "TORCH_DISTRIBUTED_DEBUG":
        return "dist-env", "torch's own: JAX reports a failed collective with its coordinator"
    if name.startswith("PYTORCH_TUNABLEOP_"):  # ROCm's and CUDA's GEMM tuning, torch's own
        return "cuda-other", _TUNABLE_OP
    if name == "CUDA_LAUNCH_BLOCKING":
        return (
            "cuda-other",
            "nothing: call jax.block_until_ready(x) where a result must be waited for",
        )
    return None


# The argument torch.distributed.launch and DeepSpeed's launcher give each process.
_LOCAL_RANK_ARGUMENTS = frozenset({"--local_rank", "--local-rank"})


# Command-line libraries' options, declared as argparse's add_argument declares them.
_OPTIONS = frozenset({"click.option", "typer.Option"})


def launcher_argument(r: Recogniser, call: ast.Call) -> None:
    """``dist-local-rank``: ``parser.add_argument("--local_rank", type=int)`` (or Click's
    ``@click.option("--local_rank", ...)``), the local rank torch's older launchers (and
    DeepSpeed's) pass as an argument; torchrun sets ``LOCAL_RANK`` instead. Reported where
    the flag is written."""
    func = call.func
    declares = (isinstance(func, ast.Attribute) and func.attr == "add_argument") or (
        r.qualname(func) in _OPTIONS
    )
    flag = next(
        (a for a in call.args if isinstance(a, ast.Constant) and a.value in _LOCAL_RANK_ARGUMENTS),
        None,
    )
    if declares and flag is not None and id(call) not in r.reported:
        r.add(
            call,
            "dist-local-rank",
            "local_rank = tj.distributed.get_local_rank()  # no --local_rank argument: "
            "torch2jax-device run (like torchrun) sets LOCAL_RANK",
            position=r.file.position(r.file.span(flag)[0]),
        )


def variable_rule(name: object) -> tuple[str, str | None] | None:
    """The rule and replacement of the environment variable ``name`` when the scanner
    knows it (``"PMI_SIZE"``: ``dist-env``), else ``None``."""
    return _variable(name)


def set_by(name: str) -> str:
    """Who sets the launcher's variable ``name`` (``"SLURM_PROCID"``: srun)."""
    return _set_by(name)
