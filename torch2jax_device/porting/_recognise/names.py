"""Qualified names the catalog's tables know (sections "Availability", "Memory",
"Randomness", "Kernels", "Precision", the ``*.other`` rows...): one-for-one renames,
advice-only names, and the ``torch.cuda.*`` wildcards."""

from __future__ import annotations

import ast

from .._tables import ADVICE, RENAMES, wildcard
from .base import Recogniser
from .device_strings import DEVICE_TYPES
from .distributed import all_reduce_advice
from .feeding import data_generator
from .launch_settings import start_method_advice
from .libraries import collective_advice, device_context_advice, process_advice

__all__ = [
    "advice",
    "called_through_a_name",
    "generator_seed_advice",
    "inside_reported_call",
    "private",
    "read_by_getattr",
    "rename",
]

# torch2jax_device names whose result is JAX arrays where torch's was tensors.
_ARRAY_RESULTS = frozenset(
    {"tj.load_file", "tj.load", "tj.to_jax", "tj.to_device", "tj.pin_memory"}
)

# Renamed loads whose arrays land elsewhere than ``tj.load_file(path)``'s (committed to the
# CPU), with why: held back, for the porter to say where.
_LANDS_ELSEWHERE = {
    "safetensors.flax.load_file": (
        "safetensors.flax loads onto JAX's default device, tj.load_file onto the CPU: "
        "give tj.load_file the device= you mean"
    ),
    "safetensors.numpy.load_file": (
        "safetensors.numpy gives NumPy arrays, which JAX code puts on its default device; "
        "tj.load_file's stay on the CPU: give tj.load_file the device= you mean"
    ),
}


# Availability helpers (row library-is-available) whose answer is not
# tj.accelerator.is_available(): the helper's last name -> the tj call that answers it.
_AVAILABLE = {
    "is_mps_available": "available = tj.backends.mps.is_available()",
    "is_torch_mps_available": "available = tj.backends.mps.is_available()",
    "is_cuda_available": "available = tj.cuda.is_available()",
    "is_torch_cuda_available": "available = tj.cuda.is_available()",
    "is_bf16_available": "bf16 = tj.cuda.is_bf16_supported()",
    "is_torch_bf16_gpu_available": "bf16 = tj.cuda.is_bf16_supported()",
    "is_ccl_available": (
        "# JAX chooses its own collectives: tj.distributed.init_process_group() takes no backend"
    ),
}


# torch's private twins of a row's call, answering otherwise: reported with the row, as
# advice that says how the answers differ (never renamed).
_PRIVATE = {
    "torch.cuda.memory._set_allocator_settings": (
        "cuda-alloc-conf",
        "tj.configure(preallocate=False)  # before JAX starts: XLA's allocator takes "
        "XLA_PYTHON_CLIENT_* settings, not torch's expandable_segments",
    ),
    # torchtitan's: the accelerator's type by name ("cuda", "xpu", None without one) and
    # torch's module of that type (torch.cuda, torch.xpu)
    "torch._utils._get_available_device_type": (
        "accelerator-current",
        'getattr(tj.accelerator.current_accelerator(), "type", None)  # "cuda" where JAX '
        "has a GPU, None where it has no accelerator, as torch's private call",
    ),
    "torch.get_device_module": (  # the public twin of torch._utils._get_device_module
        "accelerator-current",
        "tj.cuda  # torch's device module by name: tj.cuda's memory and synchronize calls "
        "answer for JAX's accelerator, tj.accelerator.current_accelerator() names it",
    ),
    "torch._utils._get_device_module": (
        "accelerator-current",
        "tj.cuda  # torch's device module by name: tj.cuda's memory and synchronize calls "
        "answer for JAX's accelerator, tj.accelerator.current_accelerator() names it",
    ),
    "torch._C._get_accelerator": (
        "accelerator-current",
        'tj.accelerator.current_accelerator() or tj.device("cpu")  # torch\'s private call '
        "answers cpu where current_accelerator() answers None",
    ),
}


def private(r: Recogniser, node: ast.expr, name: str, call: ast.Call | None) -> bool:
    """``torch._C._get_accelerator()``: a private twin of a row's call (lm-evaluation-
    harness reads ``.type`` from it); ``True`` if reported."""
    if name not in _PRIVATE or call is None:
        return False
    rule, replacement = _PRIVATE[name]
    r.add(call, rule, replacement)
    return True


def rename(r: Recogniser, node: ast.expr, name: str, call: ast.Call | None) -> bool:
    """A ``rename`` row: ``torch.cuda.is_available()`` -> ``tj.cuda.is_available()``."""
    if name not in RENAMES:
        return False
    row, new_name = RENAMES[name]
    if call is None:
        r.add(node, row.id, new_name, reason="a reference, not a call: rename it by hand")
        return True
    if name in _LANDS_ELSEWHERE:
        r.add(call, row.id, f"{new_name}({r.arguments(call)})", reason=_LANDS_ELSEWHERE[name])
        return True
    r.add(
        call,
        row.id,
        f"{new_name}({r.arguments(call)})",
        rewrite=r.rename(node, new_name),
        call=call,
        tj_name=new_name,
        effect=_effect_of(new_name),
        subject=call,
        policy="device" if new_name == "tj.get_default_device" else "array",
    )
    return True


def advice(r: Recogniser, node: ast.expr, name: str, call: ast.Call | None) -> bool:
    """An ``advice`` row's name: reported with the row's advice, never rewritten."""
    owner = name.rsplit(".", 1)[0]
    if name not in ADVICE and owner in ADVICE and owner.rsplit(".", 1)[-1][:1].isupper():
        if inside_reported_call(r, node):
            return False  # FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD)
        name = owner  # ShardingStrategy.NO_SHARD, FSDP.fsdp_modules: the class's row
    if name not in ADVICE:
        return False
    row = ADVICE[name]
    helper = name.rsplit(".", 1)[-1]
    fitting = _AVAILABLE.get(helper) if row.id == "library-is-available" else None
    if row.id == "dist-all-reduce" and call is not None:
        fitting = all_reduce_advice(r, call)
    elif row.id == "library-collective":
        # torch_xla's take the reduction or a tag first (xm.all_reduce(xm.REDUCE_SUM, t))
        fitting = collective_advice(r, helper, None if name.startswith("torch_xla.") else call)
    elif row.id == "library-process":
        fitting = process_advice(helper)
    elif row.id == "library-device":
        fitting = device_context_advice(r, helper, call)
    elif row.id == "profiler":
        fitting = _profiler_range(r, node, call)
    elif row.id in ("manual-seed", "library-seed") and call is not None:
        fitting = _seed_advice(r, call)
    elif row.id == "optimizer-torch-rules" and call is None:  # dict(adam=torch.optim.Adam)
        fitting = (
            f"tj.optim.{helper}  # torch's rule for an nnx.Optimizer: "
            f"nnx.Optimizer(model, tj.optim.{helper}(lr=...), wrt=nnx.Param)"
        )
    elif row.id == "mp-spawn" and helper.endswith("_start_method"):
        fitting = start_method_advice(r, call or node)
        if fitting is None:
            return False  # the method printed: no choice made
    if call is not None and name == "torch.Generator":
        seeded = r.parent(call)  # torch.Generator().manual_seed(args.seed)
        if isinstance(seeded, ast.Attribute) and seeded.attr == "manual_seed":
            fitting = generator_seed_advice(r, r.parent(seeded))
    candidate = r.add(call or node, row.id, fitting)
    if call is not None and name == "torch.Generator":
        candidate.reason = data_generator(r, call)
    return True


def _seed_advice(r: Recogniser, call: ast.Call) -> str | None:
    """``torch.manual_seed(args.seed)`` -> ``key = jax.random.key(args.seed)``: the
    script's own seed (``set_seed(seed)``, ``seed_everything(seed=cfg.seed)`` alike),
    with what the torch call still does; ``None`` without one (``torch.seed()``: the
    row's advice)."""
    seed = call.args[0] if call.args else None
    seed = next((k.value for k in call.keywords if k.arg == "seed"), seed)
    if seed is None or isinstance(seed, ast.Starred):
        return None
    written = r.text(seed)
    one_line = " ".join(r.text(call).split())  # a call over lines, in a comment
    still = (
        "still seeds a DataLoader's shuffle (torch's global generator)"
        if (r.qualname(call.func) or "").startswith("torch.")
        else "still seeds Python, NumPy and torch (a DataLoader's shuffle)"
    )
    return (
        f"key = jax.random.key({written})  # {one_line} {still}: keep it while torch "
        "feeds the port; pass the key (jax.random.split for more) to each random call"
    )


def generator_seed_advice(r: Recogniser, seeding: ast.AST | None) -> str | None:
    """``generator.manual_seed(args.seed)`` -> a key from the script's own seed; ``None``
    for another call (the row's advice)."""
    if not (isinstance(seeding, ast.Call) and len(seeding.args) == 1 and not seeding.keywords):
        return None
    seed = r.text(seeding.args[0])
    return f"key = jax.random.key({seed})\nx = jax.random.normal(key, (3,))"


def _profiler_range(r: Recogniser, node: ast.expr, call: ast.Call | None) -> str | None:
    """``torch.cuda.cudart().cudaProfilerStart()`` and ``torch.cuda.profiler.start()``
    open a profiled range (nsys's capture range): ``jax.profiler.start_trace``; their
    ``Stop`` closes it. ``None`` for the other profiler names (the row's advice)."""
    outer = r.parent(call) if call is not None else None
    named = (outer.attr if isinstance(outer, ast.Attribute) else r.text(node)).lower()
    if named.endswith(("profilerstart", "profiler.start")):
        return 'jax.profiler.start_trace("/tmp/trace")'
    if named.endswith(("profilerstop", "profiler.stop")):
        return "jax.profiler.stop_trace()"
    label = r.text(call.args[0]) if call is not None and call.args else '"name"'
    if named.endswith(("range_push", "nvtx.range", "record_function")):
        return f"with jax.profiler.TraceAnnotation({label}):  # the code of the range"
    if named.endswith("range_pop"):
        return "# the end of the with jax.profiler.TraceAnnotation(...) block"
    return None


def _effect_of(tj_name: str) -> str:
    """What a renamed call changes (``Candidate.effect``)."""
    if tj_name in _ARRAY_RESULTS:
        return "value"
    if tj_name.startswith("tj.distributed."):
        return "dist"
    if tj_name in ("tj.set_default_device",):
        return "default"
    if (
        tj_name.startswith(("tj.cuda.", "tj.accelerator.", "tj.backends."))
        or tj_name == "tj.get_default_device"
    ):
        return "runtime"
    return "none"


def called_through_a_name(r: Recogniser, call: ast.Call) -> bool:
    """``wrap(block, **kwargs)`` where one of the values ``wrap`` is bound to is a name a
    row covers, or ``functools.partial`` of one (``wrap = partial(auto_wrapper, ...)`` in
    one branch, a callable from a dict in another): reported under that row, as advice
    (which value the name holds is known at run time alone); ``True`` if reported.
    A name bound once to such a name alone is that name (``_names``), reported as it."""
    func = call.func
    if not isinstance(func, ast.Name):
        return False
    for binding in r.file.names.bindings(func):
        value = binding.value if binding.kind == "assign" and binding.element is None else None
        for name in _callables(r, value):
            row = RENAMES[name][0] if name in RENAMES else ADVICE.get(name) or wildcard(name)
            if row is None:
                continue
            fitting = (
                _optimizer_chosen(r, call, name) if row.id == "optimizer-torch-rules" else None
            )
            candidate = r.add(call, row.id, fitting)
            candidate.reason = (
                f"{func.id} may be {name} (bound at line {binding.node.lineno}: "  # type: ignore[attr-defined]
                f"{r.text(binding.node)} = ...): port the call as that name's"
            )
            return True
    return False


def _optimizer_chosen(r: Recogniser, call: ast.Call, name: str) -> str:
    """``nnx.Optimizer(model, tj.optim.Adam(**optimizer_kwargs), wrt=nnx.Param)`` for a
    call of a name that may be torch's optimizer class ``name`` (Sample Factory's
    ``optimizer_cls(params, **optimizer_kwargs)``), with the call's own settings."""
    params = call.args[0] if call.args else None
    model = "model"
    if (
        isinstance(params, ast.Call)
        and isinstance(params.func, ast.Attribute)
        and params.func.attr == "parameters"
    ):
        model = r.text(params.func.value)
    settings = ", ".join(
        r.text(a) for a in [*call.args[1:], *call.keywords] if not isinstance(a, ast.Starred)
    )
    parent = r.parent(call)
    target = (
        r.text(parent.targets[0])
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1
        else "optimizer"
    )
    return (
        f"{target} = nnx.Optimizer({model}, tj.optim.{name.rsplit('.', 1)[-1]}({settings}), "
        f"wrt=nnx.Param)  # where it is {name}"
    )


def read_by_getattr(r: Recogniser, call: ast.Call) -> bool:
    """``getattr(getattr(torch, "version", None), "hip", None)``: a name of torch's read
    through ``getattr`` with its attribute's name written out (Unsloth asks for ROCm so),
    reported under the row of the name it reads, as advice; ``True`` if reported. The
    device module by its type (``getattr(torch, "xpu")``) is ``device_types``'."""
    if id(call) in r.reported or _read_through_getattr(r, r.parent(call), call):
        return False  # reported, or the inner read of a longer chain
    name = _getattr_name(r, call)
    if name is None or not name.startswith("torch.") or name.count(".") < 2:
        return False
    row = RENAMES[name][0] if name in RENAMES else ADVICE.get(name) or wildcard(name)
    if row is None:
        return False
    candidate = r.add(call, row.id, RENAMES[name][1] if name in RENAMES else None)
    candidate.reason = f"reads {name} through getattr: port it as that name's"
    return True


def _getattr_name(r: Recogniser, node: ast.expr) -> str | None:
    """The qualified name ``node`` reads: its own, or ``getattr(owner, "attribute"[,
    default])``'s over the name of ``owner``."""
    if not (
        isinstance(node, ast.Call)
        and r.file.values.builtin(node.func) == "getattr"
        and len(node.args) in (2, 3)
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ):
        return r.qualname(node)
    owner = _getattr_name(r, node.args[0])
    return None if owner is None else f"{owner}.{node.args[1].value}"


def _read_through_getattr(r: Recogniser, parent: ast.AST | None, node: ast.expr) -> bool:
    """``node`` is what the ``getattr`` call ``parent`` reads an attribute of."""
    return (
        isinstance(parent, ast.Call)
        and r.file.values.builtin(parent.func) == "getattr"
        and bool(parent.args)
        and parent.args[0] is node
    )


def _callables(r: Recogniser, value: ast.expr | None) -> list[str]:
    """The qualified names ``value`` may be as a callable: itself, the function of a
    ``functools.partial`` of it, either branch of a choice."""
    if isinstance(value, ast.IfExp):
        return _callables(r, value.body) + _callables(r, value.orelse)
    if isinstance(value, ast.BoolOp):
        return [name for part in value.values for name in _callables(r, part)]
    if isinstance(value, ast.Call) and value.args:
        if r.qualname(value.func) in ("functools.partial", "functools.partialmethod"):
            return _callables(r, value.args[0])
        return []
    if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name):
        # optimizer_cls = optimizers[cfg.optimizer], optimizers = dict(adam=torch.optim.Adam)
        return [name for entry in _table_entries(r, value.value) for name in _callables(r, entry)]
    name = None if value is None else r.qualname(value)
    return [] if name is None else [name]


def _table_entries(r: Recogniser, table: ast.Name) -> list[ast.expr]:
    """The values of the dict every binding of ``table`` is (a ``{...}`` literal or a
    ``dict(key=value)`` call); ``[]`` when one binding is something else."""
    entries: list[ast.expr] = []
    bindings = r.file.names.bindings(table)
    for binding in bindings:
        value = binding.value if binding.kind == "assign" and binding.element is None else None
        if isinstance(value, ast.Dict):
            entries += value.values
        elif (
            isinstance(value, ast.Call)
            and r.file.values.builtin(value.func) == "dict"
            and not value.args
        ):
            entries += [k.value for k in value.keywords if k.arg is not None]
        elif value is not None and isinstance(value, ast.Subscript):
            continue  # optimizer_cls = optimizer_cls[name]: the lookup itself, read below
        else:
            return []
    return entries


def inside_reported_call(r: Recogniser, node: ast.AST) -> bool:
    """``node`` is an argument of a call already reported (whose finding covers it), and
    not a setting the call is given on a line of its own (``_own_line_member``)."""
    parent = r.parent(node)
    while parent is not None and not isinstance(parent, ast.stmt):
        if isinstance(parent, ast.Call) and id(parent) in r.reported:
            return not _own_line_member(r, node, parent)
        parent = r.parent(parent)
    return False


# A member naming an accelerator: ProfilerActivity.CUDA, .XPU, .MTIA.
_ACCELERATORS = (DEVICE_TYPES | {"mtia"}) - {"cpu"}


def _own_line_member(r: Recogniser, node: ast.AST, call: ast.Call) -> bool:
    """An enum member of torch's given to a multi-line call on a later line of its own,
    choosing what a row is about: a member of a class a row names
    (``state_dict_type=StateDictType.SHARDED_STATE_DICT`` inside ``FSDP.state_dict_type(``)
    or one naming an accelerator (``ProfilerActivity.CUDA`` inside
    ``torch.profiler.profile(``): the porter reads the choice on that line, reported there.
    A CPU member chooses no device; ``op=dist.ReduceOp.SUM``, ``dist.Backend.NCCL`` are
    the call's own arguments (no row names their class)."""
    if not (
        isinstance(node, ast.Attribute)
        and node.lineno > call.lineno
        and node.attr.isupper()
        and node.attr != "CPU"
    ):
        return False
    owner = r.qualname(node.value)
    return owner is not None and (owner in ADVICE or node.attr.lower() in _ACCELERATORS)
