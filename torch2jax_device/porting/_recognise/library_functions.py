"""More libraries built on torch, their functions and objects by package (round 9's
development set: LoRA's GPT-2 example on Horovod, TorchRec's DLRM, ESM on fairscale, DeiT
on timm, Graphormer on fairseq, DGL's multi-GPU GraphSAGE, SimCSE's copy of
Transformers' Trainer), section "Libraries built on torch".

- Functions by their qualified names, with advice built from the call: Horovod's
  ``hvd.init()``, ``hvd.rank()``, ``hvd.allreduce(x)``, ``hvd.broadcast_parameters(...)``,
  ``hvd.DistributedOptimizer(opt, ...)``; TorchRec's ``get_local_size()`` and
  ``DistributedModelParallel(...)``; timm's ``NativeScaler()`` and ``get_state_dict(ema)``;
  fairseq's ``utils.move_to_cuda(sample)``. The rest of the rows' names (fairscale's
  ``wrap``, TorchRec's planner...) are the tables' (``names.advice``).
- Keywords a library's call takes that place or split the work: TorchRec's
  ``dense_device=`` / ``compute_device=``, DGL's ``DataLoader(use_ddp=, use_uva=)``,
  fairscale's FSDP options (``mixed_precision=``, ``cpu_offload=``), given to the call or
  in a ``dict(...)`` splatted into it.
- Objects a library made or was annotated with, by their members: a TorchRec planner's
  ``collective_plan(...)``, a pipeline's ``_device``; a timm loss scaler
  (``loss_scaler = NativeScaler()``, or a parameter named ``*scaler`` in a file of timm)
  called for the backward (``loss_scaler(loss, optimizer, clip_grad=...)``) or saved
  (``loss_scaler.state_dict()``).
- A fairseq model's ``load_state_dict(state, strict=True, model_cfg=cfg.model)``
  (``load-model-state``: Module's, after fairseq upgrades the keys).
- A DeepSpeed engine's ``save_checkpoint(dir, tag)`` on a model Accelerate's ``prepare``
  returned (no other prepared model has the method).
- Transformers' Trainer internals in a project's copy of it, names the cut file leaves
  unbound (``init_deepspeed(self, ...)``, ``ShardedDDP(model, optimizer)``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from .._values import last_name
from .base import Recogniser
from .libraries import is_library_object
from .library_internals import imports_package

__all__ = [
    "FUNCTIONS",
    "engine_checkpoint",
    "fairseq_state_loaded",
    "library_function",
    "library_keywords",
    "library_member",
    "trainer_internal",
]

_THIS_DEVICE = 'tj.device(f"cuda:{tj.distributed.get_local_rank()}")'
_LOCAL_WORLD = (
    'local_world_size = int(os.environ["LOCAL_WORLD_SIZE"])  # set by torchrun and '
    "torch2jax-device run"
)


def _first(r: Recogniser, call: ast.Call, default: str) -> str:
    return r.text(call.args[0]) if call.args else default


def _keyword(r: Recogniser, call: ast.Call, name: str, default: str) -> str:
    return next((r.text(k.value) for k in call.keywords if k.arg == name), default)


def _all_reduce(r: Recogniser, call: ast.Call) -> str:
    value = _first(r, call, "x")
    done = f'tj.distributed.all_reduce({value}, op="mean")  # Horovod averages by default'
    return r.loaded_into(call.args[0], done) if call.args else f"x = {done}"


def _broadcast(what: str | None) -> Callable[[Recogniser, ast.Call], str]:
    """A broadcast from ``root_rank`` of ``what`` (``None``: the call's first argument)."""

    def advice(r: Recogniser, call: ast.Call) -> str:
        root = _keyword(r, call, "root_rank", r.text(call.args[1]) if len(call.args) > 1 else "0")
        value = what or _first(r, call, "x")
        done = (
            f"multihost_utils.broadcast_one_to_all({value}, is_source="
            f"jax.process_index() == {root})"
        )
        if what is not None:
            return f"{what} = {done}  # then nnx.update the model with it"
        return r.loaded_into(call.args[0], done) if call.args else f"x = {done}"

    return advice


def _all_gather(r: Recogniser, call: ast.Call) -> str:
    value = _first(r, call, "x")
    done = f"multihost_utils.process_allgather({value}, tiled=True)  # concatenated, as Horovod's"
    return r.loaded_into(call.args[0], done) if call.args else f"x = {done}"


def _distributed_optimizer(r: Recogniser, call: ast.Call) -> str:
    return (
        f"{_first(r, call, 'optimizer')}  # no wrapper: with the model replicated over a mesh "
        "(dist-ddp-gradient) XLA averages the gradients in the jitted step"
    )


def _moved(r: Recogniser, call: ast.Call) -> str:
    value = _first(r, call, "sample")
    device = '"cpu"' if last_name(call.func) == "move_to_cpu" else '"cuda"'
    return (
        r.loaded_into(call.args[0], f"tj.to_device({value}, {device})")
        if call.args
        else (f"sample = tj.to_device(sample, {device})")
    )


def _ema_state(r: Recogniser, call: ast.Call) -> str:
    return (
        f"tj.state_dict({_first(r, call, 'model')})  # the model's arrays by torch's names "
        "(an EMA copy is a second nnx module, or a tree of arrays, with JAX)"
    )


def _unwrapped(r: Recogniser, call: ast.Call) -> str:
    return f"{_first(r, call, 'model')}  # the model itself: the port keeps its own nnx module"


def _fixed(advice: str) -> Callable[[Recogniser, ast.Call], str]:
    return lambda r, call: advice


_HOROVOD = ("horovod.torch",)
#: The libraries' functions this module reports -> (row, the advice built from the call).
FUNCTIONS: dict[str, tuple[str, Callable[[Recogniser, ast.Call], str]]] = {
    **{
        f"{package}.init": (
            "library-launcher",
            _fixed(
                "jax.distributed.initialize()  # under mpirun it reads Open MPI's variables; "
                "under torch2jax-device run, tj.distributed.init_process_group()"
            ),
        )
        for package in _HOROVOD
    },
    **{
        f"{package}.{name}": ("library-process", _fixed(advice))
        for package in _HOROVOD
        for name, advice in (
            ("rank", "rank = tj.distributed.get_rank()"),
            ("local_rank", "local_rank = tj.distributed.get_local_rank()"),
            ("size", "world_size = tj.distributed.get_world_size()"),
            ("local_size", _LOCAL_WORLD),
        )
    },
    **{
        f"{package}.{name}": ("library-collective", _all_reduce)
        for package in _HOROVOD
        for name in ("allreduce", "allreduce_")
    },
    **{f"{package}.allgather": ("library-collective", _all_gather) for package in _HOROVOD},
    **{
        f"{package}.{name}": ("library-collective", _broadcast(None))
        for package in _HOROVOD
        for name in ("broadcast", "broadcast_", "broadcast_object")
    },
    **{
        f"{package}.broadcast_parameters": ("library-collective", _broadcast("params"))
        for package in _HOROVOD
    },
    **{
        f"{package}.broadcast_optimizer_state": (
            "library-collective",
            _broadcast("optimizer_state"),
        )
        for package in _HOROVOD
    },
    **{
        f"{package}.DistributedOptimizer": ("library-prepare", _distributed_optimizer)
        for package in _HOROVOD
    },
    "torchrec.distributed.comm.get_local_size": ("library-process", _fixed(_LOCAL_WORLD)),
    "timm.utils.NativeScaler": (
        "library-backward",
        _fixed(
            "nothing: bfloat16 needs no loss scaling; nnx.value_and_grad and "
            "optax.clip_by_global_norm in the jitted step do the backward and the clipping"
        ),
    ),
    "timm.utils.get_state_dict": ("library-checkpoint", _ema_state),
    "transformers.modeling_utils.unwrap_model": ("library-prepare", _unwrapped),
    "transformers.utils.is_sagemaker_mp_enabled": (
        "library-strategy",
        _fixed("False  # SageMaker's model parallelism: shard over a mesh's model axis instead"),
    ),
    "fairseq.utils.move_to_cuda": ("library-to-device", _moved),
    "fairseq.utils.move_to_cpu": ("library-to-device", _moved),
}


def library_function(r: Recogniser, call: ast.Call) -> None:
    """A function of ``FUNCTIONS`` called: its row, with advice built from the call (the
    name itself is then left alone by ``names.advice``)."""
    name = r.qualname(call.func)
    if name is None or name not in FUNCTIONS or id(call) in r.reported:
        return
    rule, advice = FUNCTIONS[name]
    r.add(call, rule, advice(r, call))
    r.reported.add(id(call.func))


_PLACE_DENSE = "place it yourself: build the dense layers under with tj.device(device):"
_FSDP_OPTION = (
    "shard it yourself: sharded parameters over a mesh axis (dist-fsdp), bfloat16 dtypes for "
    "mixed precision; CPU offload has no counterpart"
)
# Keywords of a package's calls -> (row, advice).
_KEYWORDS = {
    ("torchrec", "dense_device"): ("library-device", _PLACE_DENSE),
    ("torchrec", "device"): (
        "library-device",
        "place it yourself: tj.to_device(model, device), the tables sharded over a mesh",
    ),
    ("torchrec", "compute_device"): (
        "library-device",
        "plan for it yourself: tj.accelerator.current_accelerator().type is the device "
        "type, a mesh's NamedSharding places each table",
    ),
    ("dgl", "use_ddp"): (
        "library-prepare",
        "shard it yourself: each process takes indices[tj.distributed.get_rank()::"
        "tj.distributed.get_world_size()] (a DistributedSampler's split)",
    ),
    ("dgl", "use_uva"): (
        "library-device",
        "place it yourself: the graph's arrays go to the device with tj.to_device(x, "
        "device); pinned host memory is tj.pin_memory(x)",
    ),
    **{
        ("fairscale", option): ("library-strategy", _FSDP_OPTION)
        for option in ("mixed_precision", "cpu_offload", "move_params_to_cpu", "move_grads_to_cpu")
    },
}
_KEYWORD_NAMES = frozenset(keyword for _, keyword in _KEYWORDS)


def library_keywords(r: Recogniser, call: ast.Call) -> None:
    """A keyword of ``_KEYWORDS`` given to a call of its package, or to ``dict(...)`` kept
    in a name that is splatted into one (``enable_wrap(wrapper_cls=FSDP, **fsdp_params)``)."""
    given = [(k.arg, k) for k in call.keywords if k.arg is not None and k.arg in _KEYWORD_NAMES]
    if not given:
        return
    packages = {_package(r, call.func)}
    if r.file.values.builtin(call.func) == "dict":
        packages = _splatted_into(r, call)
    for argument, keyword in given:
        found = next(
            (_KEYWORDS[(p, argument)] for p in packages if p and (p, argument) in _KEYWORDS), None
        )
        if found is not None and id(keyword) not in r.reported:
            rule, advice = found
            r.add(keyword, rule, advice, position=r.file.position(r.file.span(keyword)[0]))


def _package(r: Recogniser, func: ast.expr) -> str | None:
    name = r.qualname(func)
    return None if name is None else name.split(".")[0]


def _splatted_into(r: Recogniser, call: ast.Call) -> set[str | None]:
    """The packages of the calls the name ``call`` is assigned to is splatted into."""
    statement = r.parent(call)
    if not (
        isinstance(statement, ast.Assign)
        and len(statement.targets) == 1
        and isinstance(statement.targets[0], ast.Name)
    ):
        return set()
    binding = r.file.names.binding_of.get(statement.targets[0])
    if binding is None:
        return set()
    packages: set[str | None] = set()
    for load in r.file.names.loads(binding):
        keyword = r.parent(load)
        user = r.parent(keyword) if isinstance(keyword, ast.keyword) else None
        if isinstance(keyword, ast.keyword) and keyword.arg is None and isinstance(user, ast.Call):
            packages.add(_package(r, user.func))
    return packages


# A member of an object a package made (or a parameter annotated with its class) ->
# (package, row, advice).
_MEMBERS = {
    "collective_plan": (
        "torchrec",
        "library-strategy",
        "shardings = {name: NamedSharding(mesh, P('model')) for name in tables}  # each "
        "table split by rows over a mesh axis: the plan is the shardings",
    ),
    "_device": ("torchrec", "library-device", f"device = {_THIS_DEVICE}"),
}
# A loss scaler of timm's, by the name a script gives it.
_SCALER = re.compile(r"(^|_)scaler$", re.IGNORECASE)
_TIMM_SCALERS = frozenset({"timm.utils.NativeScaler", "timm.utils.ApexScaler"})
_SCALER_STATE = (
    "nothing to save: without loss scaling there is no scale to keep (bfloat16 needs none)"
)


def library_member(r: Recogniser, call_or_attribute: ast.Call | ast.Attribute) -> None:
    """A TorchRec object's member (``planner.collective_plan(...)``, ``pipeline._device``);
    a timm loss scaler called or saved."""
    if id(call_or_attribute) in r.reported:
        return
    if isinstance(call_or_attribute, ast.Call):
        _scaler_used(r, call_or_attribute)
        return
    node = call_or_attribute
    if node.attr not in _MEMBERS or not isinstance(node.value, ast.Name):
        return
    package, rule, advice = _MEMBERS[node.attr]
    if package in _made_by(r, node.value):
        parent = r.parent(node)
        reported = parent if isinstance(parent, ast.Call) and parent.func is node else node
        r.add(reported, rule, advice, position=r.file.method_position(node))
        r.reported.discard(id(reported))  # torch's objects it is handed are reported too
        # (planner.collective_plan(model, sharders, dist.GroupMember.WORLD): torch's group)


def _scaler_used(r: Recogniser, call: ast.Call) -> None:
    func = call.func
    if isinstance(func, ast.Name) and _is_timm_scaler(r, func) and len(call.args) >= 2:
        r.add(call, "library-backward")  # loss_scaler(loss, optimizer, clip_grad=...)
    elif (
        isinstance(func, ast.Attribute)
        and func.attr in ("state_dict", "load_state_dict")
        and isinstance(func.value, ast.Name)
        and _is_timm_scaler(r, func.value)
    ):
        r.add(call, "library-checkpoint", _SCALER_STATE, position=r.file.method_position(func))
        r.reported.add(id(call))


def _is_timm_scaler(r: Recogniser, name: ast.Name) -> bool:
    """Made by timm's ``NativeScaler()``, or a parameter named ``*scaler`` in a file of
    timm's (DeiT's ``train_one_epoch(..., loss_scaler, ...)``)."""
    made = [
        binding.value
        for binding in r.file.names.bindings(name)
        if binding.kind == "assign" and isinstance(binding.value, ast.Call)
    ]
    if made:
        return all(r.qualname(call.func) in _TIMM_SCALERS for call in made)
    bindings = r.file.names.bindings(name)
    return (
        bool(bindings)
        and all(b.kind == "param" for b in bindings)
        and _SCALER.search(name.id) is not None
        and imports_package(r, ("timm",))
    )


def _made_by(r: Recogniser, name: ast.Name) -> set[str]:
    """The packages whose calls (or annotations) every binding of ``name`` comes from."""
    packages: set[str] = set()
    for binding in r.file.names.bindings(name):
        if binding.kind == "assign" and isinstance(binding.value, ast.Call):
            package = _package(r, binding.value.func)
        elif binding.kind == "param" and isinstance(binding.node, ast.arg):
            annotation = binding.node.annotation
            package = (
                _package(r, annotation)
                if isinstance(annotation, (ast.Name, ast.Attribute))
                else None
            )
        else:
            package = None
        if package is None:
            return set()
        packages.add(package)
    return packages


# Transformers' Trainer internals a project's copy calls by names the file leaves unbound.
_TRAINER_INTERNALS = {
    "init_deepspeed": (
        "library-prepare",
        "model = tj.to_device(model, device)  # DeepSpeed's engine: the model placed (or "
        "sharded over a mesh), nnx.Optimizer for the optimizer",
    ),
    "ShardedDDP": (
        "library-strategy",
        "shard it yourself: the optimizer state sharded over a mesh axis (dist-fsdp), the "
        "model replicated",
    ),
}


def trainer_internal(r: Recogniser, call: ast.Call) -> None:
    """``init_deepspeed(self, ...)``, ``ShardedDDP(model, optimizer)``: unbound in a file
    that imports Transformers (a project's copy of its Trainer)."""
    func = call.func
    if not isinstance(func, ast.Name) or func.id not in _TRAINER_INTERNALS:
        return
    if r.file.names.bindings(func) or id(call) in r.reported:
        return
    if imports_package(r, ("transformers",)):
        rule, advice = _TRAINER_INTERNALS[func.id]
        r.add(call, rule, advice)


_ENGINE_SAVED = (
    'tj.save_file({model}, os.path.join({directory}, "model.safetensors"))  # DeepSpeed\'s '
    "engine gathers its shards first: tj.save_file writes a sharded array whole"
)
_ENGINE_LOADED = '{model} = tj.load_state({model}, os.path.join({directory}, "model.safetensors"))'


def engine_checkpoint(r: Recogniser, call: ast.Call) -> None:
    """``library-checkpoint``: ``model.save_checkpoint(dir, tag)`` on a model a library's
    ``prepare`` returned (Accelerate's DeepSpeed engine: no other prepared model has the
    method)."""
    func = call.func
    if not (
        isinstance(func, ast.Attribute)
        and func.attr in ("save_checkpoint", "load_checkpoint")
        and isinstance(func.value, ast.Name)
        and call.args
        and id(call) not in r.reported
    ):
        return
    prepared = any(
        binding.kind == "assign"
        and isinstance(binding.value, ast.Call)
        and isinstance(binding.value.func, ast.Attribute)
        and binding.value.func.attr == "prepare"
        and is_library_object(r, binding.value.func.value)
        for binding in r.file.names.bindings(func.value)
    )
    if prepared:
        advice = _ENGINE_SAVED if func.attr == "save_checkpoint" else _ENGINE_LOADED
        model, directory = r.text(func.value), r.text(call.args[0])
        r.add(
            call,
            "library-checkpoint",
            advice.format(model=model, directory=directory),
            position=r.file.method_position(func),
        )


# The keywords only fairseq's models' load_state_dict takes (BaseFairseqModel's override of
# Module.load_state_dict, which upgrades the state's keys first).
_FAIRSEQ_LOAD_KEYWORDS = frozenset({"model_cfg", "args"})


def fairseq_state_loaded(r: Recogniser, call: ast.Call) -> None:
    """``load-model-state``: ``model.load_state_dict(state, strict=True,
    model_cfg=cfg.model)`` in a file of fairseq's."""
    func = call.func
    if not (
        isinstance(func, ast.Attribute)
        and func.attr == "load_state_dict"
        and len(call.args) == 1
        and any(k.arg in _FAIRSEQ_LOAD_KEYWORDS for k in call.keywords)
        and id(call) not in r.reported
        and imports_package(r, ("fairseq",))
    ):
        return
    model = r.text(func.value)
    r.add(
        call,
        "load-model-state",
        r.loaded_into(func.value, f"tj.load_state({model}, {r.text(call.args[0])})")
        + "  # fairseq upgrades the state's keys first: port the model to Flax NNX",
        position=r.file.method_position(func),
    )
