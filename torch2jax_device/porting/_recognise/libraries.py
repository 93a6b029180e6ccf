"""The objects of libraries built on torch that own a script's device work.

Hugging Face Accelerate's ``Accelerator`` (and ``PartialState``), Lightning Fabric's
``Fabric`` and Transformers' ``Trainer`` and ``TrainingArguments`` pick the device, join
the process group, wrap the model and run collectives. Their members that do device work
are the rows of the catalog's "Libraries built on torch" section
(``"Accelerator.prepare"`` in a row's ``torch_api``); the scanner reports them on an
object that is evidently one (``is_library_object``): built by one of the libraries'
constructors or by a class of the file derived from one, a parameter annotated with one,
``self`` in such a class, a project's ``*Trainer`` given a ``TrainingArguments``, or a
variable named as the libraries' documentation names it (``accelerator``, ``fabric``,
``training_args``). The keywords that place a model (``device_map=``, ``max_memory=``)
are followed through the dictionaries that carry them into ``from_pretrained(**kwargs)``.
"""

from __future__ import annotations

import ast

from .. import catalog
from .._names import Binding
from .._values import LIBRARY_OBJECT, last_name
from .base import Recogniser

__all__ = [
    "TORCH_LIBRARIES",
    "builds_launcher",
    "carried_values",
    "collective_advice",
    "device_keywords",
    "device_map_choice",
    "device_map_test",
    "is_library_object",
    "library_call",
    "member",
    "placement_defaults",
    "placement_keys",
    "process_advice",
]

_CLASSES = (
    "Accelerator",
    "Fabric",
    "DeepSpeedEngine",
    "Trainer",
    "TrainingArguments",
    "ModelCheckpoint",
    "Booster",  # ColossalAI's
    "DistCoordinator",
)
_ROWS = [row for row in catalog.CATALOG if row.section == catalog.libraries.SECTION]
#: The libraries' classes whose objects own the device work (annotations, bases).
_LAUNCHERS = frozenset(
    name
    for name in catalog.get("library-launcher").torch_api
    if name.rsplit(".", 1)[-1][:1].isupper() and name.split(".")[0].islower()
)
# Lightning's checkpoint callback: a subclass calls its savers (self._save_topk_checkpoint).
_MODEL_CHECKPOINTS = frozenset(
    f"{package}.{path}ModelCheckpoint"
    for package in ("lightning.pytorch", "pytorch_lightning")
    for path in ("", "callbacks.", "callbacks.model_checkpoint.")
)
#: The libraries' classes whose objects own the device work (annotations, bases): the
#: launchers, and the objects a script is handed rather than builds (DeepSpeed's engine,
#: Lightning's module, Transformers' TrainerState).
LIBRARY_CLASSES = _LAUNCHERS | {
    "deepspeed.DeepSpeedEngine",
    "deepspeed.runtime.engine.DeepSpeedEngine",
    "lightning.LightningModule",
    "lightning.pytorch.LightningModule",
    "pytorch_lightning.LightningModule",
    "transformers.TrainerState",
    "colossalai.cluster.DistCoordinator",
    "colossalai.cluster.dist_coordinator.DistCoordinator",
    *_MODEL_CHECKPOINTS,
}
# The libraries' callback classes -> the parameters of their hooks that hold the
# library's objects (Transformers' on_save(self, args, state, control); Lightning's
# on_train_epoch_end(self, trainer, pl_module)).
_CALLBACKS = {
    "transformers.TrainerCallback": frozenset({"args", "state"}),
    **dict.fromkeys(
        (
            "lightning.Callback",
            "lightning.pytorch.Callback",
            "lightning.pytorch.callbacks.Callback",
            "pytorch_lightning.Callback",
            "pytorch_lightning.callbacks.Callback",
            *_MODEL_CHECKPOINTS,
        ),
        frozenset({"trainer", "pl_module"}),
    ),
}

# Member name -> the row reporting it ("prepare" -> "library-prepare").
_MEMBERS: dict[str, str] = {
    name.split(".", 1)[1]: row.id
    for row in _ROWS
    for name in row.torch_api
    if name.split(".", 1)[0] in _CLASSES
}
# Transformers' own members (trainer.save_model, trainer.args.should_save): reported on an
# object named as its documentation names it, a Trainer's being Transformers' alone.
_HF_MEMBERS = {
    name.split(".", 1)[1]: row.id
    for row in _ROWS
    for name in row.torch_api
    if name.split(".", 1)[0] in ("Trainer", "TrainingArguments")
}
_HF_OWNER_NAMES = frozenset({"trainer", "training_args"})
# Variable and attribute names the libraries' documentation gives their objects.
_OWNER_NAMES = frozenset({"accelerator", "fabric", "model_engine", "training_args"})
# Attributes of a library object that hold another: trainer.args (its TrainingArguments),
# accelerator.state (its AcceleratorState), trainer.accelerator, a Lightning module's
# self.trainer.
# self.trainer; Transformers' trainer.model_wrapped (the DeepSpeed engine under ZeRO);
# Transformers' training_args.distributed_state (its Accelerate PartialState).
_HELD_OBJECTS = frozenset(
    {"args", "state", "accelerator", "trainer", "model_wrapped", "distributed_state"}
)
# The keywords of Transformers' Trainer besides args=: a project's class named *Trainer
# called with args= and one of them is a Trainer (LLaVA's LLaVATrainer(model=, args=)).
_TRAINER_KEYWORDS = frozenset(
    {
        "model",
        "train_dataset",
        "eval_dataset",
        "tokenizer",
        "processing_class",
        "data_collator",
        "compute_metrics",
        "callbacks",
        "optimizers",
    }
)
# Methods given a placement keyword: a loader's, or a dict's that carries it to one.
_CARRYING_METHODS = frozenset({"from_pretrained", "update"})
# Members of Accelerate's objects that a Transformers Trainer has too, doing no device
# work there: trainer.save_state() writes trainer_state.json (the step, the log).
_NOT_ON_TRAINERS = frozenset({"save_state"})
# A trainer's runs, and the keywords that resume one from a checkpoint
# (trainer.train(resume_from_checkpoint=True), Lightning's trainer.fit(..., ckpt_path=p)).
_RUNS = frozenset({"train", "fit", "validate", "test", "predict", "evaluate"})
_RESUMING = frozenset({"resume_from_checkpoint", "ckpt_path"})
# The library keywords that say where a model's weights go (from_pretrained,
# load_checkpoint_and_dispatch, dispatch_model...), given in a call or carried in a dict.
PLACEMENT_KEYWORDS = ("device_map", "max_memory", "offload_folder")
# Keywords of DeepSpeedEngine.save_checkpoint / load_checkpoint no torch API takes.
_DEEPSPEED_CHECKPOINT_ARGUMENTS = frozenset(
    {
        "client_state",
        "save_latest",
        "exclude_frozen_parameters",
        "load_optimizer_states",
        "load_lr_scheduler_states",
        "load_module_only",
        "load_module_strict",
    }
)
# Packages built on torch whose calls take a device: their device= and device_map= are
# the library's device work.
TORCH_LIBRARIES = ("transformers.", "diffusers.", "sentence_transformers.", "accelerate.")


def member(r: Recogniser, node: ast.Attribute) -> bool:
    """``library-*`` rows: ``accelerator.prepare(...)``, ``fabric.device``; ``True`` if one
    was reported (its receiver is then visited). Never rewritten: the object does several
    jobs at once, and the port keeps the ones the script needs."""
    parent = r.parent(node)
    if node.attr == "hf_device_map":  # where from_pretrained(device_map=) put each module
        r.add(node, "library-device", _DEVICE_MAP_READ, position=r.file.method_position(node))
        r.visit(node.value)
        return True
    row = _member_row(r, node.value, node.attr)
    if row is None and node.attr in _MEMBERS and _deepspeed_checkpoint(node, parent):
        row = _MEMBERS[node.attr]
    if row is None and _resumes(r, node, parent):
        row = "library-checkpoint"
    if row is None:
        return False
    if node.attr in _NOT_ON_TRAINERS and _names_trainer(r, node.value):
        return False
    if node.attr == "distributed_type" and isinstance(node.ctx, ast.Store):
        row = "library-strategy"  # state.distributed_type = DistributedType.DEEPSPEED
    reported = parent if isinstance(parent, ast.Call) and parent.func is node else node
    fitting = _library_device_advice(r, reported) if row == "library-device" else None
    if row == "library-process":
        fitting = _PROCESS_ADVICE.get(node.attr)
    elif row == "library-collective":
        fitting = collective_advice(
            r, node.attr, reported if isinstance(reported, ast.Call) else None
        )
    elif node.attr in _PREPARED_LISTS:  # accelerator._optimizers: what prepare() wrapped
        fitting = (
            f"[{_PREPARED_LISTS[node.attr]}]  # the port's own objects: nothing wraps them, "
            "so keep them in a list of your own"
        )
    r.add(reported, row, fitting, position=r.file.method_position(node))
    r.visit(node.value)
    return True


# Accelerate's lists of what prepare() wrapped -> what the port holds instead.
_PREPARED_LISTS = {
    "_optimizers": "optimizer",
    "_models": "model",
    "_schedulers": "schedule",
    "_dataloaders": "loader",
}


def device_context_advice(r: Recogniser, name: str, call: ast.Call | None) -> str | None:
    """``library-device``'s advice for a library's context that builds a model
    (``with init_empty_weights():``, ``with deepspeed.zero.Init():``, ``with
    init_on_device(device):``), or for its memory's (torchtune's ``get_memory_stats``,
    Diffusers' ``free_memory()``); ``None`` elsewhere (the row's)."""
    if name in _MEMORY_ADVICE:
        return _MEMORY_ADVICE[name]
    if name == "load_model" and call is not None:  # whisper.load_model(name, device)
        device = call.args[1] if len(call.args) > 1 else None
        device = next((k.value for k in call.keywords if k.arg == "device"), device)
        where = r.text(device) if device is not None else "device"
        return (
            f"model = tj.load_state(model, path, device={where})  # the checkpoint's "
            "weights into a JAX port of the model, on that device"
        )
    if call is None or not isinstance(r.parent(call), ast.withitem):
        return None
    if name == "init_on_device" and call.args:
        return f"with tj.device({r.text(call.args[0])}):  # the arrays made inside land there"
    return (
        "model = nnx.eval_shape(lambda: Model(config, rngs=nnx.Rngs(0)))  # no memory until "
        "tj.load_state(model, path, device_map=...) fills it"
    )


# The libraries' calls on the device's memory -> the advice that fits.
_MEMORY_ADVICE = {
    "get_memory_stats": "stats = tj.cuda.memory_stats()  # the allocator's statistics",
    **dict.fromkeys(
        ("free_memory", "cleanup_before_training"),
        "tj.cuda.empty_cache()  # JAX frees an array's memory once nothing refers to it",
    ),
}


def process_advice(name: str) -> str | None:
    """``library-process``'s advice for the member or function ``name``: the one
    ``tj.distributed`` query that answers it; ``None`` for another (the row's)."""
    return _PROCESS_ADVICE.get(name)


def collective_advice(r: Recogniser, name: str, call: ast.Call | None) -> str | None:
    """``library-collective``'s advice for what the member or function ``name`` does,
    with the call's own value: a barrier (``accelerator.wait_for_everyone()``), a
    reduction, a broadcast, a gather, padding before one, DeepSpeed's gather of ZeRO-3
    shards; ``None`` for another (the row's)."""
    family = next((f for f, names in _COLLECTIVES.items() if name in names), None)
    if family is None:
        return None
    given = call.args[0] if call is not None and call.args else None
    if given is None or isinstance(given, ast.Starred) or family in ("barrier", "shards"):
        return _COLLECTIVE_ADVICE[family]
    value = r.text(given)
    if family == "reduce":
        keywords = {k.arg: r.text(k.value) for k in call.keywords if k.arg} if call else {}
        op = keywords.get("reduction", keywords.get("reduce_op"))
        func = call.func if call is not None else None
        if isinstance(func, ast.Attribute) and name == "all_reduce":
            if is_library_object(r, func.value):  # fabric.all_reduce: Fabric's default mean
                op = op or '"mean"'  # (torch's, DeepSpeed's and flashy's sum)
        done = f"tj.distributed.all_reduce({value}{'' if op is None else f', op={op}'})"
    elif family == "broadcast":
        done = f"multihost_utils.broadcast_one_to_all({value}, is_source=jax.process_index() == 0)"
    elif family == "pad":
        dim = next((r.text(k.value) for k in call.keywords if k.arg == "dim"), "0") if call else "0"
        return (
            f"longest = int(tj.distributed.all_reduce(jnp.asarray({value}.shape[{dim}]), "
            'op="max"))  # then jnp.pad each process\'s array to it before the gather'
        )
    else:
        done = f"multihost_utils.process_allgather({value})"
    return r.loaded_into(given, done, "returns the result: keep it in a name")


# What the libraries' collectives do, by name (members and functions alike).
_COLLECTIVES = {
    "barrier": {"wait_for_everyone", "barrier", "rendezvous", "block_all"},
    "reduce": {"reduce", "all_reduce", "mesh_reduce", "average_metrics"},
    "broadcast": {"broadcast", "broadcast_tensors", "broadcast_object_list"},
    "gather": {"gather", "gather_for_metrics", "all_gather", "gather_object", "all_gather_object"},
    "pad": {"pad_across_processes"},
    "shards": {
        "GatheredParameters",
        "safe_get_full_fp32_param",
        "safe_get_full_grad",
        "safe_get_full_optimizer_state",
    },
}
_COLLECTIVE_ADVICE = {
    "barrier": "tj.distributed.barrier()",
    "reduce": "x = tj.distributed.all_reduce(x)",
    "broadcast": "x = multihost_utils.broadcast_one_to_all(x, is_source=jax.process_index() == 0)",
    "gather": "x = multihost_utils.process_allgather(x)",
    "pad": (
        'longest = int(tj.distributed.all_reduce(jnp.asarray(n), op="max"))  # then jnp.pad '
        "each process's array to it before the gather"
    ),
    "shards": (
        "param = jax.device_put(param, NamedSharding(mesh, P()))  # a whole copy of a "
        "sharded array; under jit XLA gathers the shards where they are used"
    ),
}


_DEVICE_MAP_READ = (
    "device_map = plan.modules()  # {module prefix: device} of the tj.DeviceMap that placed "
    "the model"
)
# library-process members whose answer is one tj.distributed query (the row's advice,
# rank 0 printing the world size, for the others).
_PROCESS_ADVICE = {
    **dict.fromkeys(
        ("local_rank", "local_process_index", "get_local_rank"),
        "local_rank = tj.distributed.get_local_rank()",
    ),
    **dict.fromkeys(
        ("process_index", "global_rank", "get_rank", "rank"), "rank = tj.distributed.get_rank()"
    ),
    **dict.fromkeys(
        ("world_size", "num_processes", "get_world_size"),
        "world_size = tj.distributed.get_world_size()",
    ),
    "rank_zero_only": "if tj.distributed.get_rank() == 0:  # where the function is called",
    "is_initialized": "joined = tj.distributed.is_initialized()",
    "n_gpu": "n_gpu = jax.local_device_count()",
    **dict.fromkeys(
        ("is_main_process", "is_global_zero", "should_save", "should_log", "is_world_process_zero"),
        "tj.distributed.get_rank() == 0",
    ),
    **dict.fromkeys(
        ("is_local_main_process", "is_local_process_zero"), "tj.distributed.get_local_rank() == 0"
    ),
}
# This process's device once joined: what the libraries' ``device`` is.
_THIS_DEVICE = 'tj.device(f"cuda:{tj.distributed.get_local_rank()}")'


def _library_device_advice(r: Recogniser, reported: ast.AST) -> str | None:
    """The ``library-device`` advice that fits where the library's device is used:
    entered (``with fabric.init_module():``, ``with fabric.device:``), kept in a name,
    asked its type; ``None``: the row's (a move to it)."""
    parent = r.parent(reported)
    if isinstance(parent, ast.withitem):
        return f"with {_THIS_DEVICE}:  # the arrays made inside land there"
    if isinstance(parent, ast.Attribute) and parent.attr in ("type", "index"):
        return f"{_THIS_DEVICE}.{parent.attr}"
    statement = r.file.names.statement(reported)
    if isinstance(statement, (ast.Assign, ast.Return)) and statement.value is reported:
        kept = r.text(statement.targets[0]) if isinstance(statement, ast.Assign) else "device"
        return f"{kept} = {_THIS_DEVICE}  # after tj.distributed.init_process_group()"
    return None


def _member_row(r: Recogniser, owner: ast.AST, name: str) -> str | None:
    """The row of ``owner.name`` when ``owner`` is a library's object with that member:
    evidently one (``is_library_object``), or for Transformers' own members, named as
    its documentation names a Trainer (``trainer.save_model``, ``trainer.args.local_rank``)."""
    if name in _MEMBERS and is_library_object(r, owner):
        return _MEMBERS[name]
    if name in _HF_MEMBERS and _named_hf(owner):
        return _HF_MEMBERS[name]
    return None


def _named_hf(node: ast.AST) -> bool:
    """``trainer``, ``self.trainer``, ``training_args``, ``trainer.args``."""
    if isinstance(node, ast.Attribute) and node.attr == "args":
        return _named_hf(node.value)
    return last_name(node) in _HF_OWNER_NAMES


def _names_trainer(r: Recogniser, node: ast.expr) -> bool:
    """``trainer``, ``self.trainer``, or ``self`` in a class named ``*Trainer``."""
    named = last_name(node)
    if named == "self":
        klass = r.file.names.enclosing(node, ast.ClassDef)
        named = klass.name if isinstance(klass, ast.ClassDef) else None
    return named is not None and named.lower().endswith("trainer")


def _resumes(r: Recogniser, node: ast.Attribute, parent: ast.AST | None) -> bool:
    """``trainer.train(resume_from_checkpoint=True)``, ``trainer.fit(model, data,
    ckpt_path=path)``: a library trainer's run resumed from its checkpoint."""
    return (
        node.attr in _RUNS
        and isinstance(parent, ast.Call)
        and parent.func is node
        and any(k.arg in _RESUMING for k in parent.keywords)
        and (is_library_object(r, node.value) or _names_trainer(r, node.value))
    )


def _deepspeed_checkpoint(node: ast.Attribute, parent: ast.AST | None) -> bool:
    """``engine.save_checkpoint(dir, client_state=sd)``, ``engine.load_checkpoint(dir,
    load_optimizer_states=...)``: arguments only DeepSpeed's engine takes, whatever the
    engine's name (GPT-NeoX calls it ``model``)."""
    return (
        node.attr in ("save_checkpoint", "load_checkpoint")
        and isinstance(parent, ast.Call)
        and parent.func is node
        and any(k.arg in _DEEPSPEED_CHECKPOINT_ARGUMENTS for k in parent.keywords)
    )


def is_library_object(r: Recogniser, node: ast.AST) -> bool:
    """``node`` holds an ``Accelerator``, ``PartialState``, ``Fabric``, ``Trainer`` or
    ``TrainingArguments``: made by one of their constructors (passed around included) or
    by a class derived from one, annotated as one, held by one (``trainer.args``,
    ``accelerator.state``), kept in ``self.x`` from such a name (``self.coordinator =
    coordinator``, a parameter annotated ``DistCoordinator``), or named as their
    documentation names it."""
    if LIBRARY_OBJECT in r.file.values.kinds(node):
        return True
    if isinstance(node, ast.Attribute):
        if node.attr in _HELD_OBJECTS and is_library_object(r, node.value):
            return True
        if last_name(node.value) == "self" and any(
            isinstance(value, ast.Name) and is_library_object(r, value)
            for value in r.file.values.stored_attributes(node)
        ):
            return True
        return node.attr in _OWNER_NAMES
    if not isinstance(node, ast.Name):
        return False
    return node.id in _OWNER_NAMES or any(
        _binds_library_object(r, binding) for binding in r.file.names.bindings(node)
    )


def _binds_library_object(r: Recogniser, binding: Binding) -> bool:
    """A parameter annotated with a library class (``trainer: transformers.Trainer``,
    ``Optional[Accelerator]``), ``self`` of a class derived from one, a parameter of a
    library callback's hook (``def on_save(self, args, state, control)``), a name bound
    to an instance of a class derived from one or to a project's trainer
    (``trainer = LLaVATrainer(model=m, args=training_args)``), or the engine
    ``deepspeed.initialize`` returns first."""
    if binding.kind == "param" and isinstance(binding.node, ast.arg):
        annotation = binding.node.annotation
        if annotation is not None and any(
            _is_class_of(r, part, LIBRARY_CLASSES) for part in ast.walk(annotation)
        ):
            return True
        method = r.file.names.enclosing(binding.node, ast.FunctionDef, ast.AsyncFunctionDef)
        klass = None if method is None else r.parent(method)
        if not (isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) and method.args.args):
            return False
        if not isinstance(klass, ast.ClassDef):
            return False
        if method.args.args[0] is binding.node:
            return _derives_from(r, klass, LIBRARY_CLASSES, set())
        return any(
            binding.name in parameters and _derives_from(r, klass, frozenset({callback}), set())
            for callback, parameters in _CALLBACKS.items()
        )
    if binding.kind != "assign" or not isinstance(binding.value, ast.Call):
        return False
    if binding.element == 0:  # model_engine, optimizer, _, _ = deepspeed.initialize(...)
        return r.qualname(binding.value.func) == "deepspeed.initialize"
    return binding.element is None and (
        _constructs_trainer(r, binding.value)
        or _instance_of(r, binding.value, LIBRARY_CLASSES)
        or r.qualname(binding.value.func) in LIBRARY_CLASSES  # DistCoordinator()
    )


def _is_class_of(r: Recogniser, node: ast.AST, classes: frozenset[str]) -> bool:
    return isinstance(node, (ast.Name, ast.Attribute)) and r.qualname(node) in classes


def _derives_from(
    r: Recogniser, klass: ast.ClassDef, classes: frozenset[str], seen: set[int]
) -> bool:
    """``class LLaVATrainer(transformers.Trainer)`` derives from one of ``classes``, or
    from such a class of the file."""
    if id(klass) in seen:
        return False
    seen.add(id(klass))
    for base in klass.bases:
        if _is_class_of(r, base, classes):
            return True
        if isinstance(base, ast.Name):
            for binding in r.file.names.bindings(base):
                if isinstance(binding.node, ast.ClassDef) and _derives_from(
                    r, binding.node, classes, seen
                ):
                    return True
    return False


def _instance_of(r: Recogniser, call: ast.Call, classes: frozenset[str]) -> bool:
    """``call`` builds an instance of a class of the file derived from one of ``classes``."""
    return isinstance(call.func, ast.Name) and any(
        isinstance(binding.node, ast.ClassDef) and _derives_from(r, binding.node, classes, set())
        for binding in r.file.names.bindings(call.func)
    )


def _constructs_trainer(r: Recogniser, call: ast.Call) -> bool:
    """A class of the file derived from a library's launcher (``MyTrainer(...)``), or a
    project's class named ``*Trainer`` given ``args=`` and another of Transformers'
    Trainer keywords (``LLaVATrainer(model=model, tokenizer=tokenizer,
    args=training_args)``)."""
    func = call.func
    if _instance_of(r, call, _LAUNCHERS):
        return True
    named = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
    keywords = {k.arg for k in call.keywords}
    return (
        named.endswith("Trainer")
        and r.qualname(func) not in LIBRARY_CLASSES
        and "args" in keywords
        and bool(keywords & _TRAINER_KEYWORDS)
    )


def library_call(r: Recogniser, call: ast.Call) -> None:
    """The calls that are a library's work by their shape: a project's Trainer built
    (``library-launcher``), a library object's member probed with ``getattr`` /
    ``hasattr`` (``getattr(accelerator.state, "fsdp_plugin", None)``), and a dict that
    carries ``device_map=`` splatted into a call (``from_pretrained(name, **kwargs)``)."""
    if id(call) not in r.reported and _constructs_trainer(r, call):
        r.add(call, "library-launcher")
    name = r.file.values.builtin(call.func)
    if name in ("getattr", "hasattr") and len(call.args) >= 2:
        probed, member_name = call.args[0], call.args[1]
        row = (
            _member_row(r, probed, member_name.value)
            if isinstance(member_name, ast.Constant) and isinstance(member_name.value, str)
            else None
        )
        if row is not None:
            r.add(call, row)
    for keyword in call.keywords:
        if keyword.arg is None:
            carried = _carried_placement(r, keyword.value)
            if carried is not None:
                key, line = carried
                candidate = r.add(
                    keyword,
                    "library-device",
                    _placement_advice(r, key, f"{r.text(keyword.value)}[{key!r}]"),
                    position=r.file.position(r.file.span(keyword)[0]),
                )
                candidate.reason = (
                    f"{r.text(keyword.value)} carries {key}= (line {line}): the library "
                    "places the model by it"
                )


def _carried_placement(r: Recogniser, node: ast.expr) -> tuple[str, int] | None:
    """(key, line) where the dict ``node`` names (a name, or ``self.x``) is given a
    placement keyword: a literal with the key, ``dict(device_map=...)``,
    ``d["device_map"] = ...``, ``d.update(...)`` or ``d.setdefault(...)`` of one;
    ``None`` if none is."""
    values, uses = _dict_values_and_uses(r, node)
    if values is None:
        return _placement_in(node)
    for value in values:
        found = _placement_in(value)
        if found is not None:
            return found
    for use in uses:
        parent = r.parent(use)
        if isinstance(parent, ast.Subscript) and isinstance(parent.ctx, ast.Store):
            key = parent.slice
            if isinstance(key, ast.Constant) and key.value in PLACEMENT_KEYWORDS:
                return key.value, parent.lineno
        method = r.parent(parent) if isinstance(parent, ast.Attribute) else None
        if (
            isinstance(parent, ast.Attribute)
            and parent.attr in ("update", "setdefault")
            and isinstance(method, ast.Call)
            and method.func is parent
        ):
            found = _placement_in(method)
            if found is not None:
                return found
    return None


def builds_launcher(r: Recogniser, call: ast.Call) -> bool:
    """``call`` builds a library's launcher: one of theirs (``pl.Trainer(...)``), a class
    of the file derived from one, or a project's Trainer given Transformers' keywords."""
    return r.qualname(call.func) in _LAUNCHERS or _constructs_trainer(r, call)


def carried_values(r: Recogniser, node: ast.expr) -> tuple[list[ast.expr] | None, list[ast.expr]]:
    """What the dict ``node`` names was assigned, and every read of it (``None``
    values for an expression that is no name or ``self.x``)."""
    return _dict_values_and_uses(r, node)


def _dict_values_and_uses(
    r: Recogniser, node: ast.expr
) -> tuple[list[ast.expr] | None, list[ast.expr]]:
    """What a name or ``self.x`` is assigned, and every read of it (where it may be
    mutated); ``None`` values for another expression."""
    if isinstance(node, ast.Name):
        values: list[ast.expr] = []
        uses: list[ast.expr] = []
        for binding in r.file.names.bindings(node):
            if binding.kind == "assign" and binding.value is not None and binding.element is None:
                values.append(binding.value)
            uses += r.file.names.loads(binding)
        return values, uses
    if isinstance(node, ast.Attribute) and last_name(node.value) == "self":
        klass = r.file.names.enclosing(node, ast.ClassDef)
        if klass is None:
            return None, []
        same: list[ast.expr] = [
            other
            for other in ast.walk(klass)
            if isinstance(other, ast.Attribute)
            and other.attr == node.attr
            and last_name(other.value) == "self"
            and isinstance(other.ctx, ast.Load)
        ]
        return r.file.values.stored_attributes(node), same
    return None, []


def _placement_in(node: ast.AST) -> tuple[str, int] | None:
    """(key, line) of a placement keyword given in ``node``: a dict literal's key, a
    call's keyword (``dict(device_map=...)``, ``d.update(device_map=...)``), the key of
    ``d.setdefault("device_map", ...)``, or any of these among its arguments."""
    if isinstance(node, ast.Dict):
        for key in node.keys:
            if isinstance(key, ast.Constant) and key.value in PLACEMENT_KEYWORDS:
                return key.value, key.lineno
        return None
    if isinstance(node, ast.Call):
        for keyword in node.keywords:
            if keyword.arg in PLACEMENT_KEYWORDS:
                return keyword.arg, keyword.value.lineno
        for argument in node.args:
            if isinstance(argument, ast.Constant) and argument.value in PLACEMENT_KEYWORDS:
                return argument.value, argument.lineno
            found = _placement_in(argument)
            if found is not None:
                return found
    return None


def placement_keys(r: Recogniser, node: ast.Dict | ast.Assign | ast.Call) -> None:
    """``library-device``: a placement keyword kept in a dict for a call later:
    ``{"device_map": device_map, **kwargs}``, ``kwargs["device_map"] = {"": device}``,
    ``kwargs.setdefault("max_memory", budget)``."""
    if isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values, strict=True):
            if isinstance(key, ast.Constant) and key.value in PLACEMENT_KEYWORDS:
                r.add(key, "library-device", _placement_advice(r, key.value, r.text(value), value))
    elif isinstance(node, ast.Assign):
        for target in node.targets:
            key = target.slice if isinstance(target, ast.Subscript) else None
            if isinstance(key, ast.Constant) and key.value in PLACEMENT_KEYWORDS:
                r.add(
                    target,
                    "library-device",
                    _placement_advice(r, key.value, r.text(node.value), node.value),
                )
    elif (
        isinstance(node.func, ast.Attribute)
        and node.func.attr == "setdefault"
        and len(node.args) == 2
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value in PLACEMENT_KEYWORDS
    ):
        value = node.args[1]
        r.add(
            node,
            "library-device",
            _placement_advice(r, node.args[0].value, r.text(value), value),
        )


def device_map_test(r: Recogniser, node: ast.Compare) -> None:
    """``library-device``: the device map tested by its value (``if device_map !=
    "auto":``): the test keeps its meaning on the map handed to ``tj.load_state``."""
    sides = [node.left, *node.comparators]
    named = [s for s in sides if last_name(s) == "device_map"]
    constants = [
        s
        for s in sides
        if (isinstance(s, ast.Constant) and isinstance(s.value, str))
        or (
            isinstance(s, (ast.Tuple, ast.List, ast.Set))
            and s.elts
            and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in s.elts)
        )
    ]
    if named and constants and id(node) not in r.reported:
        r.add(
            node,
            "library-device",
            f"{r.text(node)}  # the same test of the map given to "
            'tj.load_state(model, path, device_map=...): "auto" or {module prefix: device}',
        )


def placement_defaults(r: Recogniser, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    """``library-device``: a placement keyword's default, ``def load(...,
    device_map="auto")``: the choice itself, as ``device_map = "auto"`` is."""
    arguments = node.args
    positional = [*arguments.posonlyargs, *arguments.args]
    pairs = [
        *zip(
            positional[len(positional) - len(arguments.defaults) :], arguments.defaults, strict=True
        ),
        *zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True),
    ]
    for argument, default in pairs:
        if (
            default is not None
            and argument.arg in PLACEMENT_KEYWORDS
            and not (isinstance(default, ast.Constant) and default.value is None)
        ):
            r.add(
                default,
                "library-device",
                _placement_advice(r, argument.arg, r.text(default), default),
            )


def device_keywords(r: Recogniser, call: ast.Call) -> None:
    """``library-device``: ``from_pretrained(..., device_map="auto")`` anywhere,
    ``max_memory=`` and ``offload_folder=`` given to a library's call, a
    ``from_pretrained`` or a dict that carries them (``dict(...)``, ``d.update(...)``),
    and ``device=`` given to a call of Transformers, Diffusers or
    Sentence Transformers (``pipeline("text-generation", model=m, device=0)``)."""
    name = r.qualname(call.func)
    ours = name is not None and name.startswith(TORCH_LIBRARIES)
    loader = (
        ours
        or (isinstance(call.func, ast.Attribute) and call.func.attr in _CARRYING_METHODS)
        or r.file.values.builtin(call.func) == "dict"  # kwargs = dict(max_memory=...)
    )
    for keyword in call.keywords:
        placement = keyword.arg == "device_map" or (keyword.arg in PLACEMENT_KEYWORDS and loader)
        if placement or (keyword.arg == "device" and ours):
            fitting = (
                _placement_advice(r, keyword.arg, r.text(keyword.value), keyword.value)
                if placement and keyword.arg is not None
                else None
            )
            r.add(
                keyword,
                "library-device",
                fitting,
                position=r.file.position(r.file.span(keyword)[0]),
            )


def device_map_choice(r: Recogniser, node: ast.Assign) -> None:
    """``library-device``: ``device_map = "auto"`` (or a dict, or what a helper named for
    it returns: ``device_map = _device_map(num_gpus, num_layers)``) kept in a name for a
    ``from_pretrained(..., device_map=device_map)`` later: the choice itself; and an entry
    of the map set (``device_map[f"transformer.h.{i}"] = gpu``)."""
    for target in node.targets:
        name = target.id if isinstance(target, ast.Name) else None
        if isinstance(target, ast.Attribute):
            name = target.attr
        value = node.value
        if isinstance(target, ast.Subscript) and last_name(target.value) == "device_map":
            r.add(
                target, "library-device", _placement_advice(r, "device_map", r.text(value), value)
            )
            return
        if name == "device_map" and any(map(_chosen_map, _alternatives(value))):
            r.add(value, "library-device", _placement_advice(r, name, r.text(value), value))
            return


def _alternatives(value: ast.expr) -> list[ast.expr]:
    """The values ``value`` may be: ``a or "auto"``'s and ``x if c else y``'s each."""
    if isinstance(value, ast.BoolOp):
        return [v for part in value.values for v in _alternatives(part)]
    if isinstance(value, ast.IfExp):
        return [*_alternatives(value.body), *_alternatives(value.orelse)]
    return [value]


def _chosen_map(value: ast.expr) -> bool:
    return (
        isinstance(value, ast.Dict)
        or (isinstance(value, ast.Constant) and isinstance(value.value, str))
        or (
            isinstance(value, ast.Call)
            and (last_name(value.func) or "").strip("_").endswith("device_map")
        )
    )


def _placement_advice(r: Recogniser, key: str, shown: str, value: ast.expr | None = None) -> str:
    """The advice for placement keyword ``key`` given ``shown`` (its value's text):
    ``device_map="auto"``: tj.load_state's plan within max_memory; ``{"": device}``:
    every weight on that device; another map: tj.load_state's ``device_map=``;
    ``max_memory=``: the plan's budgets; ``offload_folder=``: there is no disk tier."""
    if key == "max_memory":
        return f'model = tj.load_state(model, path, device="auto", max_memory={shown})'
    if key == "offload_folder":
        return (
            'model = tj.load_state(model, path, device="auto")  # no disk tier: a '
            "safetensors file is memory-mapped, the plan fills device, pinned host and CPU "
            "memory"
        )
    if isinstance(value, ast.Constant) and value.value in ("auto", "balanced", "sequential"):
        return (
            'model = tj.load_state(model, path, device="auto")  # a tj.DeviceMap plan, '
            "within max_memory="
        )
    if (
        isinstance(value, ast.Dict)
        and len(value.keys) == 1
        and isinstance(value.keys[0], ast.Constant)
        and value.keys[0].value == ""
    ):
        return f"model = tj.load_state(model, path, device={r.text(value.values[0])})"
    return (
        f'model = tj.load_state(model, path, device_map={shown})  # "auto" or '
        "{module prefix: device}"
    )
