"""The libraries' objects where a script reaches past their documented members, or makes
them through helpers of its own (round 7's development set).

- A loss scaler's internals patched (kohya's ``accelerator.scaler._unscale_grads_ =
  replacer``): Accelerate's ``GradScaler``, torch's own class; a scaler of the script's
  handed to another object (imagen-pytorch's ``self.accelerator.scaler = scaler``,
  ``optimizer.scaler = scaler`` on Accelerate's optimizers).
- DeepSpeed ZeRO-3's partitioned parameter probed (``hasattr(param, "ds_numel")``).
- Accelerate's ``ParallelismConfig.build_device_mesh("cuda")``: ``init_device_mesh``
  underneath.
- DDP's ``model._ddp_params_and_buffers_to_ignore = [...]``: buffers DDP leaves unsynced.
- The DeepSpeed plugin a project's helper builds for the launcher (``deepspeed_plugin =
  prepare_deepspeed_plugin(args)`` then ``Accelerator(deepspeed_plugin=deepspeed_plugin)``),
  and a script's flag that chooses DeepSpeed or FSDP tested (``if args.deepspeed:``).
"""

from __future__ import annotations

import ast
import re

from .._values import UNKNOWN, last_name
from . import device_strings
from .base import Recogniser
from .device_types import names_device_type
from .libraries import builds_launcher

__all__ = [
    "ddp_ignored",
    "imports_package",
    "mesh_built",
    "parallelism_flag",
    "plugin_built",
    "scaler_handed_over",
    "scaler_internals",
    "zero3_probe",
]

# torch.amp.GradScaler's private members a script patches or calls.
_SCALER_INTERNALS = frozenset(
    {
        "_unscale_grads_",
        "_scale",
        "_growth_tracker",
        "_per_optimizer_states",
        "_enabled",
        "_init_scale",
        "_growth_factor",
        "_backoff_factor",
        "_growth_interval",
        "_lazy_init_scale_growth_tracker",
        "_maybe_opt_step",
        "_check_inf_per_device",
        "_found_inf_per_device",
    }
)
_SCALER = re.compile(r"(^|_)scaler$", re.IGNORECASE)
_SCALER_ADVICE = (
    "a loss scaler's internals: JAX has no scaler to patch; bfloat16 or float32 needs no "
    "loss scaling, and float16 multiplies the loss by a constant and divides the gradients"
)
# DeepSpeed ZeRO-3's attributes of a partitioned parameter.
_ZERO3 = frozenset({"ds_numel", "ds_shape", "ds_tensor", "ds_status", "ds_id", "ds_persist"})
_ZERO3_ADVICE = (
    "a sharded parameter keeps its whole shape: with JAX, x.size counts every element "
    "whatever the sharding, and x.addressable_shards holds this process's part"
)
# The launchers' keywords that take a plugin or a config of the parallelism (ColossalAI's
# Booster(plugin=...)).
_PLUGIN_KEYWORDS = frozenset({"deepspeed_plugin", "fsdp_plugin", "parallelism_config", "plugin"})
# A script's flag that chooses a library's parallelism (args.deepspeed, cfg.use_fsdp).
_FLAGS = frozenset({"deepspeed", "use_deepspeed", "fsdp", "use_fsdp"})
_DDP = frozenset(
    {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
    }
)
_LIBRARIES = (
    "accelerate",
    "deepspeed",
    "transformers",
    "lightning",
    "pytorch_lightning",
    "trl",
    "colossalai",
)


def scaler_internals(r: Recogniser, node: ast.Attribute) -> bool:
    """``grad-scaler``: ``accelerator.scaler._unscale_grads_`` taken or patched, a private
    member of torch's ``GradScaler`` on a scaler made elsewhere; ``True`` if reported."""
    receiver = node.value
    if (
        node.attr not in _SCALER_INTERNALS
        or id(node) in r.reported
        or not _SCALER.search(last_name(receiver) or "")
        or not r.file.values.kinds(receiver) <= {UNKNOWN, "grad-scaler"}
        or _made_by_another_library(r, receiver)
    ):
        return False
    parent = r.parent(node)
    reported = parent if isinstance(parent, ast.Call) and parent.func is node else node
    r.add(reported, "grad-scaler", _SCALER_ADVICE, position=r.file.method_position(node))
    r.visit(receiver)
    return True


def scaler_handed_over(r: Recogniser, node: ast.Assign) -> None:
    """``grad-scaler``: ``self.accelerator.scaler = scaler``, a loss scaler (torch's, or
    one named so and made by no other library) given to another object, which unscales
    and steps with it; the object's own ``self.scaler = scaler`` merely keeps it."""
    value = node.value
    if not (
        len(node.targets) == 1
        and isinstance(node.targets[0], ast.Attribute)
        and _SCALER.search(node.targets[0].attr)
        and not (isinstance(node.targets[0].value, ast.Name) and node.targets[0].value.id == "self")
    ):
        return
    kinds = r.file.values.kinds(value)
    named = (
        _SCALER.search(last_name(value) or "") is not None
        and kinds <= {UNKNOWN, "grad-scaler"}
        and not _made_by_another_library(r, value)
        and imports_package(r, ("torch",))
    )
    if "grad-scaler" in kinds or named:
        r.add(
            node,
            "grad-scaler",
            "# no loss scaler to hand over: bfloat16 or float32 needs no loss scaling "
            "(float16 multiplies the loss by a constant and divides the gradients)",
        )


def _made_by_another_library(r: Recogniser, node: ast.expr) -> bool:
    """``node`` is a name bound to what another library's class or function made
    (``scaler = StandardScaler()``)."""
    return isinstance(node, ast.Name) and any(
        isinstance(b.value, ast.Call)
        and not (r.qualname(b.value.func) or "torch").startswith("torch")
        for b in r.file.names.bindings(node)
    )


def zero3_probe(r: Recogniser, call: ast.Call) -> None:
    """``library-strategy``: ``hasattr(param, "ds_numel")``, a parameter asked whether
    DeepSpeed ZeRO-3 partitioned it."""
    if r.file.values.builtin(call.func) not in ("hasattr", "getattr") or len(call.args) < 2:
        return
    probed = call.args[1]
    if isinstance(probed, ast.Constant) and probed.value in _ZERO3 and id(call) not in r.reported:
        if not _guards_deepspeed(r, call):
            r.add(call, "library-strategy", _ZERO3_ADVICE)


def _guards_deepspeed(r: Recogniser, probe: ast.Call) -> bool:
    """``probe`` is the test of an ``if`` whose body calls DeepSpeed (``with
    zero.GatheredParameters([param]):``): that call is the finding of the block."""
    statement = r.file.names.statement(probe)
    if not isinstance(statement, ast.If) or not any(
        part is probe for part in ast.walk(statement.test)
    ):
        return False
    return any(
        isinstance(node, ast.Call) and (r.qualname(node.func) or "").startswith("deepspeed")
        for body in statement.body
        for node in ast.walk(body)
    )


def mesh_built(r: Recogniser, call: ast.Call) -> None:
    """``dist-device-mesh``: Accelerate's ``parallelism_config.build_device_mesh("cuda")``,
    a mesh over every process's devices of that type."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "build_device_mesh"):
        return
    given = call.args[0] if call.args else None
    given = next((k.value for k in call.keywords if k.arg == "device_type"), given)
    if given is None or id(call) in r.reported:
        return
    if names_device_type(given) or device_strings.keeps_device(given):
        r.add(
            call,
            "dist-device-mesh",
            f"mesh = tj.distributed.init_device_mesh({r.text(given)}, shape, "
            "mesh_dim_names=names)  # the config's sizes as the shape, its axes' names",
            position=r.file.method_position(func),
        )


def ddp_ignored(r: Recogniser, node: ast.Assign) -> None:
    """``dist-ddp-gradient``: ``model._ddp_params_and_buffers_to_ignore = [...]``, what
    DDP leaves out of its broadcast and gradient sync."""
    for target in node.targets:
        if (
            isinstance(target, ast.Attribute)
            and target.attr == "_ddp_params_and_buffers_to_ignore"
            and id(target) not in r.reported
            and not _wrapped_in_ddp(r, target.value)
        ):
            r.add(
                target,
                "dist-ddp-gradient",
                "an array left unsynced: give it a sharding of its own (each process's "
                "value) instead of the replicated NamedSharding(mesh, P()) of the rest",
            )


def _wrapped_in_ddp(r: Recogniser, model: ast.expr) -> bool:
    """This file hands ``model`` to torch's DDP (``DDP(model, device_ids=...)``), whose
    finding is where the port decides what is synced."""
    shown = r.text(model)
    return any(
        isinstance(node, ast.Call)
        and r.qualname(node.func) in _DDP
        and node.args
        and r.text(node.args[0]) == shown
        for node in ast.walk(r.file.tree)
    )


def plugin_built(r: Recogniser, call: ast.Call) -> None:
    """``library-strategy``: a plugin or parallelism config a project's helper builds,
    kept in a name and handed to the launcher (``deepspeed_plugin =
    prepare_deepspeed_plugin(args)``, then ``Accelerator(deepspeed_plugin=...)``)."""
    if not builds_launcher(r, call):
        return
    for keyword in call.keywords:
        if keyword.arg not in _PLUGIN_KEYWORDS or not isinstance(keyword.value, ast.Name):
            continue
        for binding in r.file.names.bindings(keyword.value):
            value = binding.value
            if (
                binding.kind == "assign"
                and binding.element is None
                and isinstance(value, ast.Call)
                and r.qualname(value.func) is None  # a project's helper (a library's class
                and value.lineno < call.lineno  # is reported by its name)
                and id(value) not in r.reported
            ):
                r.add(value, "library-strategy")


def parallelism_flag(r: Recogniser, node: ast.Attribute) -> bool:
    """``library-strategy``: ``if args.deepspeed:``, a script's flag that chooses DeepSpeed
    or FSDP tested, in a file of a library built on torch; ``True`` if reported."""
    if node.attr not in _FLAGS or not isinstance(node.ctx, ast.Load) or id(node) in r.reported:
        return False
    if r.qualname(node) is not None:
        return False
    tested: ast.expr = node
    parent = r.parent(tested)
    while isinstance(parent, (ast.BoolOp, ast.UnaryOp)):
        tested, parent = parent, r.parent(parent)
    if not (isinstance(parent, (ast.If, ast.While, ast.IfExp)) and parent.test is tested):
        return False
    if not imports_package(r, _LIBRARIES):
        return False
    r.add(node, "library-strategy", position=r.file.method_position(node))
    r.visit(node.value)
    return True


def imports_package(r: Recogniser, packages: tuple[str, ...]) -> bool:
    """The file imports one of ``packages`` (or a module of one)."""
    for node in ast.walk(r.file.tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        if any(name.split(".")[0] in packages for name in names):
            return True
    return False
