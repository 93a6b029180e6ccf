"""A launcher's settings where a script declares, changes and tests them, away from the
launcher's call.

``settings.launcher_keywords`` reports the keywords a launcher is handed
(``Trainer(accelerator=args.accelerator, precision=args.precision)``). Scripts written
for Lightning declare those settings as command-line options first and work on them
before the call (RWKV's ``train.py``, round 7): ``parser.add_argument("--devices",
default=1)``, ``args.precision = "bf16"`` (the value ``precision=`` gets),
``args.num_nodes * args.devices`` (the processes of the job: the global batch), and
``"deepspeed" in args.strategy`` (a DeepSpeed strategy chosen by name). Each is the
launcher's device work where it is written. A parser of dataclasses given a
``TrainingArguments`` class (Transformers' ``HfArgumentParser``, TRL's ``TrlParser``
with ``SFTConfig``) builds the Trainer's settings, as ``TrainingArguments(...)`` does;
Lightning's ``trainer.save_checkpoint(path)`` saves through the strategy (DeepSpeed's
shards gathered first).
"""

from __future__ import annotations

import ast
import re

from .. import catalog
from .._values import last_name
from .base import Recogniser
from .libraries import builds_launcher
from .library_internals import imports_package
from .settings import LAUNCHER_KEYWORDS

__all__ = [
    "lightning_checkpoint",
    "nodes_times_devices",
    "option_declared",
    "setting_written",
    "start_method_advice",
    "strategy_named",
    "training_arguments_parsed",
]

# What a strategy's name starts with when it names a library's parallelism
# ("deepspeed_stage_3", "fsdp", "ddp_spawn").
_STRATEGY_NAMES = re.compile(r"^(deepspeed|fsdp|ddp|xla|megatron|zero)", re.IGNORECASE)
# Lightning's settings whose product is the number of processes of the job.
_NODES = frozenset({"num_nodes"})
_PER_NODE = frozenset({"devices", "gpus", "num_processes"})
# Parsers of dataclasses that build Transformers' TrainingArguments (TRL's is one).
_PARSERS = frozenset(
    {
        "transformers.HfArgumentParser",
        "transformers.hf_argparser.HfArgumentParser",
        "trl.TrlParser",
        "trl.scripts.utils.TrlParser",
    }
)
# TRL's trainers' configs: Transformers' TrainingArguments, each a subclass of it.
_TRAINING_CONFIG = re.compile(
    r"TrainingArguments$|^(SFT|DPO|GRPO|KTO|ORPO|CPO|PPO|Reward|RLOO|BCO|XPO|NashMD|OnlineDPO|"
    r"GKD|PRM)Config$"
)
_LAUNCHER_CLASSES = frozenset(catalog.get("library-launcher").torch_api)
_LIGHTNING = ("lightning", "pytorch_lightning", "lightning_fabric")
# The launcher keywords Lightning's Trainer takes (from_argparse_args hands it these).
_LIGHTNING_TRAINER = frozenset(
    "accelerator devices gpus tpu_cores num_nodes num_processes precision strategy".split()
)
_PRECISION_ADVICE = (
    "the precision is the arrays' dtype: give the parameters or inputs jnp.bfloat16 "
    "(no launcher setting chooses it)"
)
_DEVICES_ADVICE = (
    "the launcher's devices and processes: under torchrun or torch2jax-device run, "
    "tj.distributed.init_process_group() joins and jax.local_devices() are this "
    "process's devices"
)


def option_declared(r: Recogniser, call: ast.Call) -> None:
    """``library-launcher`` / ``library-strategy``: ``parser.add_argument("--devices",
    default=1)``, a command-line option whose value the file hands to the launcher's
    keyword of the same name (or every option, ``Trainer.from_argparse_args(args)``), in
    a script that works on those settings before (``args.precision = 16``, ``"deepspeed"
    in args.strategy``): options only handed through are the launcher call's finding."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "add_argument" and call.args):
        return
    flag = call.args[0]
    if not (isinstance(flag, ast.Constant) and isinstance(flag.value, str)):
        return
    if not flag.value.startswith("--"):
        return
    name = flag.value[2:].replace("-", "_")
    if name in LAUNCHER_KEYWORDS and id(call) not in r.reported:
        handed = _handed_settings(r)
        if name in {attr for _, attr in handed} and _worked_on(r, handed):
            r.add(call, LAUNCHER_KEYWORDS[name], _advice(name))


def setting_written(r: Recogniser, node: ast.Assign) -> None:
    """``library-launcher``: ``args.precision = "bf16"``, a setting the file hands to the
    launcher set before the call."""
    handed = None
    for target in node.targets:
        if (
            isinstance(target, ast.Attribute)
            and target.attr in LAUNCHER_KEYWORDS
            and id(target) not in r.reported
        ):
            handed = handed if handed is not None else _handed_settings(r)
            if (r.text(target.value), target.attr) in handed:
                r.add(target, LAUNCHER_KEYWORDS[target.attr], _advice(target.attr))


def strategy_named(r: Recogniser, node: ast.Compare) -> None:
    """``library-strategy``: ``"deepspeed" in args.strategy``, ``cfg.strategy ==
    "fsdp"``: the parallelism a library runs, tested by its name."""
    sides = [node.left, *node.comparators]
    settings = [s for s in sides if last_name(s) == "strategy" and r.qualname(s) is None]
    names = [
        s
        for s in sides
        if isinstance(s, ast.Constant)
        and isinstance(s.value, str)
        and _STRATEGY_NAMES.match(s.value)
    ]
    if settings and names and id(node) not in r.reported:
        r.add(
            node,
            "library-strategy",
            f"{r.text(node)}  # the same test of the sharding the port chose: a replicated "
            "model for data parallelism, sharded parameters for FSDP/ZeRO (dist-fsdp)",
        )


def nodes_times_devices(r: Recogniser, node: ast.BinOp) -> None:
    """``library-launcher``: ``args.num_nodes * args.devices``, the job's processes (a
    global batch): ``tj.distributed.get_world_size()`` once joined."""
    if not isinstance(node.op, ast.Mult) or id(node) in r.reported:
        return
    parent = r.parent(node)
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Mult):
        return  # the outermost product is reported
    factors = {_setting_name(f) for f in _factors(node)}
    if factors & _NODES and factors & _PER_NODE and imports_package(r, _LIGHTNING):
        r.add(
            node,
            "library-launcher",
            f"world_size = tj.distributed.get_world_size()  # {r.text(node)}: the processes "
            "of the job",
        )


def training_arguments_parsed(r: Recogniser, call: ast.Call) -> None:
    """``library-launcher``: ``HfArgumentParser((ModelArguments, TrainingArguments))``,
    ``TrlParser((ScriptArguments, SFTConfig, ModelConfig))``: the Trainer's settings
    (devices, processes, precision) built from the command line."""
    if r.qualname(call.func) not in _PARSERS or id(call) in r.reported or not call.args:
        return
    given = call.args[0]
    classes = given.elts if isinstance(given, (ast.Tuple, ast.List)) else [given]
    if any(r.qualname(c) in _LAUNCHER_CLASSES for c in classes):
        return  # transformers.TrainingArguments named: reported itself
    if any(_defined_here(r, c) for c in classes):
        return  # class TrainingArguments(transformers.TrainingArguments): reported there
    if any(_TRAINING_CONFIG.search(last_name(c) or "") for c in classes):
        r.add(call, "library-launcher")


def lightning_checkpoint(r: Recogniser, call: ast.Call) -> None:
    """``library-checkpoint``: Lightning's ``trainer.save_checkpoint(path)`` in a file of
    Lightning, the trainer handed in (a callback's, a helper's parameter)."""
    func = call.func
    if (
        isinstance(func, ast.Attribute)
        and func.attr == "save_checkpoint"
        and id(call) not in r.reported
        and (last_name(func.value) or "").lower().endswith("trainer")
        and imports_package(r, _LIGHTNING)
    ):
        r.add(call, "library-checkpoint", position=r.file.method_position(func))


def _defined_here(r: Recogniser, node: ast.expr) -> bool:
    """``node`` names a class this file defines."""
    return isinstance(node, ast.Name) and any(
        isinstance(binding.node, ast.ClassDef) for binding in r.file.names.bindings(node)
    )


def _factors(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return [*_factors(node.left), *_factors(node.right)]
    return [node]


def _setting_name(node: ast.expr) -> str | None:
    """``args.devices``, ``int(args.devices)``: the setting's name."""
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        node = node.args[0]
    return node.attr if isinstance(node, ast.Attribute) else None


def _handed_settings(r: Recogniser) -> set[tuple[str, str]]:
    """(receiver, setting) of every ``receiver.setting`` the file hands to a launcher's
    keyword (``Trainer(precision=args.precision)``), and every launcher setting of what
    Lightning's ``Trainer.from_argparse_args(args)`` is given."""
    handed: set[tuple[str, str]] = set()
    for node in ast.walk(r.file.tree):
        if not isinstance(node, ast.Call):
            continue
        if (r.qualname(node.func) or "").endswith(".from_argparse_args") and node.args:
            given = r.text(node.args[0])
            handed |= {(given, name) for name in _LIGHTNING_TRAINER}
        elif builds_launcher(r, node):
            for keyword in node.keywords:
                value = keyword.value
                if keyword.arg in LAUNCHER_KEYWORDS and isinstance(value, ast.Attribute):
                    handed.add((r.text(value.value), value.attr))
    return handed


def _worked_on(r: Recogniser, handed: set[tuple[str, str]]) -> bool:
    """The file reads or sets one of the ``handed`` settings other than as a launcher's
    keyword (``if args.precision == "fp16":``, ``args.num_nodes * args.devices``)."""
    for node in ast.walk(r.file.tree):
        if (
            isinstance(node, ast.Attribute)
            and (r.text(node.value), node.attr) in handed
            and not isinstance(r.parent(node), ast.keyword)
        ):
            return True
    return False


def _advice(name: str) -> str | None:
    """The advice for a launcher setting ``name``: the precision's, the devices', or the
    row's (the strategy's)."""
    if name in ("precision", "mixed_precision"):
        return _PRECISION_ADVICE
    if LAUNCHER_KEYWORDS[name] == "library-launcher":
        return _DEVICES_ADVICE
    return None


def start_method_advice(r: Recogniser, node: ast.AST) -> str | None:
    """``mp-spawn``'s advice for ``mp.set_start_method("spawn")`` and the
    ``get_start_method()`` test before it: they stay, JAX forks no better than CUDA.
    ``None`` for ``get_start_method()`` printed or logged (in a formatted string or
    handed to a call): no choice is made there."""
    if isinstance(node, ast.Call) and last_name(node.func) == "get_start_method":
        parent = r.parent(node)
        if isinstance(parent, (ast.FormattedValue, ast.Call)):
            return None
    return (
        f"{r.text(node)}  # keep it: JAX, as CUDA, cannot be used in a forked child "
        "(or start one process per device with torch2jax-device run)"
    )
