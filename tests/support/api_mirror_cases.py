"""How each mirrored pair is called: the arguments torch requires, the values to try
beyond torch's defaults, and the set-up (a model, an optimizer, a checkpoint) each side
needs. ``api_mirror.calls`` generates the calls from torch's signature; these only supply
what a signature cannot say.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import torch2jax_device as tj
from tests.parity import harness
from tests.support import gpu_proxy
from tests.support.api_mirror import Case, Pair, Value, invoke_plainly, normalize, same

# ---- the cases -----------------------------------------------------------------------------

_FILES: dict[str, str] = {}


def checkpoint(kind: str) -> str:
    """A small file written once per process by torch's own writers: ``"pt"`` or
    ``"safetensors"``."""
    if kind not in _FILES:
        import atexit
        import os
        import shutil
        import tempfile

        import safetensors.torch

        folder = tempfile.mkdtemp(prefix="api-mirror-")
        atexit.register(shutil.rmtree, folder, True)
        path = os.path.join(folder, f"weights.{kind}")
        tensors = {"w": torch.arange(4, dtype=torch.float32), "b": torch.ones(2)}
        if kind == "pt":
            torch.save(tensors, path)
        else:
            safetensors.torch.save_file(tensors, path)
        _FILES[kind] = path
    return _FILES[kind]


def _torch_model() -> Any:
    torch.manual_seed(0)
    return torch.nn.Linear(2, 3)


def _nnx_model() -> Any:
    from flax import nnx

    return nnx.Linear(2, 3, rngs=nnx.Rngs(0))


MODEL = Value("model", lambda: [_torch_model()], lambda: [_nnx_model()])


def _parameter_list(side: str) -> Any:
    if side == "torch":
        return [torch.nn.Parameter(torch.zeros(2))]
    from flax import nnx

    return [{"params": nnx.Param}]


PARAMS = Value(
    "model.parameters()", lambda: _parameter_list("torch"), lambda: _parameter_list("tj")
)


def _optimizer_group(side: str, function: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """torch's ``optimizer.param_groups[0]`` without ``params``, and tj's."""
    optimizer = function(*args, **kwargs)
    if side == "torch":
        group = dict(optimizer.param_groups[0])
        del group["params"]
        return group
    from flax import nnx

    from torch2jax_device import optim

    return dict(optim.param_groups(nnx.Optimizer(_nnx_model(), optimizer, wrt=nnx.Param))[0])


def _make_optimizer(side: str) -> Any:
    if side == "torch":
        return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1, momentum=0.9)
    from flax import nnx

    from torch2jax_device import optim

    return nnx.Optimizer(_nnx_model(), optim.SGD(lr=0.1, momentum=0.9), wrt=nnx.Param)


OPTIMIZER = Value("optimizer", lambda: _make_optimizer("torch"), lambda: _make_optimizer("tj"))
OPTIMIZER_AND_MODEL = Value(
    "optimizer", lambda: [_make_optimizer("torch")], lambda: [_make_optimizer("tj"), _nnx_model()]
)


def _schedule(side: str, function: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """The learning rates of three epochs: at construction and after each ``step()``."""
    scheduler = function(*args, **kwargs)
    if "ReduceLROnPlateau" in type(scheduler).__name__:
        rates = []
        for _ in range(3):
            scheduler.step(1.0)
            rates.append(list(scheduler.get_last_lr()))
        return rates
    rates = [list(scheduler.get_last_lr())]
    for _ in range(3):
        if side == "torch":
            scheduler.optimizer.step()
        scheduler.step()
        rates.append([float(rate) for rate in scheduler.get_last_lr()])
    return rates


def _context(side: str, function: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """A device context entered and left."""
    with function(*args, **kwargs):
        return None


def _set_default(side: str, function: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """set_default_device, then the default it leaves; the default restored."""
    getter = torch.get_default_device if side == "torch" else tj.get_default_device
    try:
        function(*args, **kwargs)
        return getter()
    finally:
        (torch.set_default_device if side == "torch" else tj.set_default_device)(None)


def _no_local_rank(side: str, function: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    import os

    saved = os.environ.pop("LOCAL_RANK", None)
    try:
        return function(*args, **kwargs)
    finally:
        if saved is not None:
            os.environ["LOCAL_RANK"] = saved


def _open(side: str, function: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    with function(*args, **kwargs) as handle:
        return sorted(handle.keys())


def _written(side: str, function: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    import safetensors.torch

    function(*args, **kwargs)
    path = kwargs.get("filename", args[1] if len(args) > 1 else None)
    return normalize(safetensors.torch.load_file(path))


def _scratch(kind: str) -> str:
    import os

    return os.path.join(os.path.dirname(checkpoint("pt")), kind)


def _tensors(side: str) -> Any:
    import jax.numpy as jnp

    if side == "torch":
        return {"w": torch.arange(3, dtype=torch.float32)}
    return {"w": jnp.arange(3, dtype=jnp.float32)}


def _device_count_shape(side: str, function: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    mesh = function(*args, **kwargs)
    return tuple(mesh.devices.shape)


def _where_jax_default_is_torchs_cpu() -> str:
    """Side by side where JAX's default device is torch's CPU; elsewhere (a GPU, the proxy
    mode) tj's unset default is JAX's by design (known-differences.md#unset-means-jaxs-default)."""
    return "side-by-side" if gpu_proxy.jax_default_is_torch_cpu() else "tj-only"


_FLOAT = [same("0.5", 0.5)]
CPU_COUNT = Value("(len(jax.devices('cpu')),)", lambda: (len(__import__("jax").devices("cpu")),))
_SEEDS = [same("42", 42), same("2**64 - 1", 2**64 - 1), same("'7'", "7")]

#: How each pair is called; a pair missing here is a failure of ``test_api_mirror``.
CASES: dict[str, Case] = {
    "device": Case(
        required={"type": same("'cuda'", "cuda")},
        values={"index": [same("0", 0), same("1", 1), same("-1", -1), same("None", None)]},
    ),
    "get_default_device": Case(
        mode=_where_jax_default_is_torchs_cpu,
        reason="unset, tj's default is JAX's (a GPU; the proxy mode's second CPU device), "
        "torch's the CPU: known-differences.md#unset-means-jaxs-default",
    ),
    "set_default_device": Case(
        required={"device": same("'cpu'", "cpu")},
        invoke=_set_default,
    ),
    "get_device": Case(
        required={"input": Value("torch.ones(2)", lambda: torch.ones(2))},
    ),
    "load": Case(
        required={"f": Value("path", lambda: checkpoint("pt"))},
        values={
            "map_location": [
                same("'cpu'", "cpu"),
                Value("torch.device('cpu')", lambda: torch.device("cpu")),
                same("{'cpu': 'cpu'}", {"cpu": "cpu"}),
                same("lambda storage, location: storage", lambda storage, location: storage),
            ],
            "weights_only": [same("True", True), same("False", False)],
            "pickle_module": [Value("pickle", lambda: __import__("pickle"))],
            "mmap": [same("True", True), same("False", False)],
        },
    ),
    "load_file": Case(
        required={"filename": Value("path", lambda: checkpoint("safetensors"))},
        values={
            "device": [
                same("'cpu'", "cpu"),
                Value("torch.device('cpu')", lambda: torch.device("cpu")),
                same("0", 0),
            ]
        },
    ),
    "safe_open": Case(
        required={
            "filename": Value("path", lambda: checkpoint("safetensors")),
            "framework": same("'pt'", "pt"),
        },
        values={"device": [same("'cpu'", "cpu")], "backend": [same("'mmap'", "mmap")]},
        invoke=_open,
    ),
    "save_file": Case(
        required={
            "tensors": Value("tensors", lambda: _tensors("torch"), lambda: _tensors("tj")),
            "filename": Value("path", lambda: _scratch("saved.safetensors")),
        },
        values={"metadata": [same("{'format': 'pt'}", {"format": "pt"})]},
        invoke=_written,
        read=lambda value: value,
    ),
    "parameters": Case(
        mode=_where_jax_default_is_torchs_cpu,
        reason="a Linear of each framework, made where each framework's default is",
        leading=MODEL,
        read=lambda value: [(harness.placement(p.device), tuple(sorted(p.shape))) for p in value],
    ),
    "state_dict": Case(mode="tj-only", reason="tj's layouts differ by design", leading=MODEL),
    "load_state": Case(
        mode="tj-only",
        reason="tj's state comes from tj.state_dict: compared by test_load_state_torch_options",
        leading=MODEL,
        required={"state_dict": Value("state", lambda: {}, lambda: tj.state_dict(_nnx_model()))},
        values={"strict": [same("False", False)], "assign": [same("True", True)]},
    ),
    "Parameter": Case(
        mode="tj-only",
        reason="tj.Parameter views a JAX array; torch's makes a leaf tensor",
        values={
            "data": [Value("array", lambda: torch.ones(2), lambda: __import__("jax").numpy.ones(2))]
        },
        read=lambda value: None,
    ),
    "pin_memory": Case(
        mode="tj-only",
        reason="torch's CPU build pins nothing",
        leading=Value("tensor", lambda: [torch.ones(2)], lambda: [np.ones(2)]),
        read=lambda value: None,
    ),
    "to_device": Case(mode="bind-only", reason="Tensor.to takes *args: the placement fuzzer"),
    "cuda.set_device": Case(required={"device": same("0", 0)}),
    "cuda.device": Case(required={"device": same("0", 0)}, invoke=_context),
    "cuda.manual_seed": Case(required={"seed": same("0", 0)}, values={"seed": _SEEDS}),
    "cuda.manual_seed_all": Case(required={"seed": same("0", 0)}),
    "cuda.set_per_process_memory_fraction": Case(
        required={"fraction": same("0.5", 0.5)},
    ),
    "accelerator.device_index": Case(required={"device": same("0", 0)}, invoke=_context),
    "accelerator.set_device_index": Case(required={"device": same("0", 0)}),
    "backends.cuda.is_built": Case(
        mode="tj-only", reason="torch answers for torch's build, tj for JAX's install"
    ),
    "distributed.init_process_group": Case(
        mode="bind-only",
        reason="joining a job changes the test process for good: the multi-process tests run it",
    ),
    "distributed.init_device_mesh": Case(
        mode="tj-only",
        reason="torch's needs a process group",
        required={"device_type": same("'cpu'", "cpu"), "mesh_shape": CPU_COUNT},
        values={"mesh_dim_names": [same("('data',)", ("data",))]},
        invoke=_device_count_shape,
    ),
    "distributed.all_reduce": Case(
        required={"tensor": Value("torch.ones(2)", lambda: torch.ones(2))}
    ),
    "distributed.get_local_rank": Case(
        values={"fallback_rank": [same("3", 3)]}, invoke=_no_local_rank
    ),
    "optim.state_dict": Case(
        mode="bind-only", reason="checked by the optimizer fuzzer", leading=OPTIMIZER_AND_MODEL
    ),
    "optim.load_state_dict": Case(
        mode="bind-only",
        reason="checked by the optimizer fuzzer",
        leading=OPTIMIZER_AND_MODEL,
        required={"state_dict": same("state", {})},
    ),
}

_OPTIMIZER_VALUES: dict[str, list[Value]] = {
    "lr": _FLOAT,
    "momentum": [same("0.9", 0.9)],
    "dampening": [same("0.1", 0.1)],
    "weight_decay": [same("0.1", 0.1)],
    "betas": [same("(0.8, 0.99)", (0.8, 0.99))],
    "eps": [same("1e-6", 1e-6)],
    "alpha": [same("0.9", 0.9)],
    "foreach": [same("True", True), same("False", False)],
    "fused": [same("True", True)],
}
for _name in ("SGD", "Adam", "AdamW", "RMSprop"):
    CASES[f"optim.{_name}"] = Case(
        required={"params": PARAMS}, values=_OPTIMIZER_VALUES, invoke=_optimizer_group,
        read=lambda value: value,
    )  # fmt: skip

_SCHEDULER_REQUIRED: dict[str, dict[str, Value]] = {
    "CosineAnnealingLR": {"T_max": same("10", 10)},
    "ExponentialLR": {"gamma": _FLOAT[0]},
    "LambdaLR": {"lr_lambda": same("lambda epoch: 0.5**epoch", lambda epoch: 0.5**epoch)},
    "MultiStepLR": {"milestones": same("[1, 2]", [1, 2])},
    "OneCycleLR": {"max_lr": same("1.0", 1.0)},
    "StepLR": {"step_size": same("2", 2)},
}
_SCHEDULER_VALUES: dict[str, list[Value]] = {
    "factor": _FLOAT,
    "total_iters": [same("2", 2)],
    "eta_min": [same("0.01", 0.01)],
    "gamma": _FLOAT,
    "start_factor": _FLOAT,
    "end_factor": [same("0.9", 0.9)],
    "power": [same("2.0", 2.0)],
    "mode": [same("'max'", "max")],
    "patience": [same("1", 1)],
    "threshold": [same("0.01", 0.01)],
    "threshold_mode": [same("'abs'", "abs")],
    "cooldown": [same("1", 1)],
    "min_lr": [same("0.01", 0.01)],
    "eps": [same("1e-6", 1e-6)],
    "total_steps": [same("10", 10)],
    "epochs": [same("2", 2)],
    "steps_per_epoch": [same("5", 5)],
    "pct_start": [same("0.4", 0.4)],
    "anneal_strategy": [same("'linear'", "linear")],
    "base_momentum": [same("0.8", 0.8)],
    "max_momentum": [same("0.95", 0.95)],
    "div_factor": [same("10.0", 10.0)],
    "final_div_factor": [same("100.0", 100.0)],
    "last_epoch": [],
}
for _name in ("ConstantLR", "CosineAnnealingLR", "ExponentialLR", "LRScheduler", "LambdaLR",
              "LinearLR", "MultiStepLR", "OneCycleLR", "PolynomialLR", "ReduceLROnPlateau",
              "StepLR"):  # fmt: skip
    CASES[f"optim.lr_scheduler.{_name}"] = Case(
        reason="the base class raises NotImplementedError (tj's is the library's)"
        if _name == "LRScheduler"
        else "",
        required={"optimizer": OPTIMIZER, **_SCHEDULER_REQUIRED.get(_name, {})},
        values=_SCHEDULER_VALUES,
        invoke=invoke_plainly if _name == "LRScheduler" else _schedule,
        read=lambda value: value if isinstance(value, list) else None,
    )


def case(pair: Pair) -> Case:
    return CASES.get(pair.tj_name, Case())


def _parameter(side: str) -> list[Any]:
    import jax.numpy as jnp

    if side == "torch":
        return [torch.nn.Parameter(torch.ones(2, 3))]
    return [tj.Parameter(jnp.ones((2, 3)))]


def _on_opened(side: str, function: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """The method of a file opened (and closed) by each side's safe_open."""
    import safetensors

    opener = safetensors.safe_open if side == "torch" else tj.safe_open
    with opener(checkpoint("safetensors"), "pt") as handle:
        return normalize(getattr(handle, function.__name__)(*args, **kwargs))


def _scheduler(side: str) -> list[Any]:
    optimizer = _make_optimizer(side)
    if side == "torch":
        return [torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)]
    from torch2jax_device import optim

    return [optim.lr_scheduler.StepLR(optimizer, step_size=2)]


_PARAMETER = Value("p", lambda: _parameter("torch"), lambda: _parameter("tj"))
_SCHEDULER = Value("scheduler", lambda: _scheduler("torch"), lambda: _scheduler("tj"))


def _method(side: str, function: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """The method called as ported code calls it: bound to the instance (``p.size(0)``),
    by the name of the function the pair holds (a property's value where tj's is one)."""
    name = function.__name__ if function.__name__ != "__call__" else "size"
    return getattr(args[0], name)(*args[1:], **kwargs)


def _member(leading: Value, **options: Any) -> Case:
    return Case(leading=leading, invoke=_method, **options)


#: How the methods of paired classes are called: on an instance of each framework's
#: class. A method of a class missing here is compared by signature only.
MEMBER_CASES: dict[str, Case] = {
    "Parameter.numel": _member(_PARAMETER),
    "Parameter.dim": _member(_PARAMETER),
    "Parameter.element_size": _member(_PARAMETER),
    "Parameter.is_floating_point": _member(_PARAMETER),
    "Parameter.is_complex": _member(_PARAMETER),
    "Parameter.size": _member(
        _PARAMETER,
        values={"dim": [same("0", 0), same("-1", -1), same("2", 2)]},
        read=lambda value: tuple(value) if isinstance(value, tuple | torch.Size) else value,
    ),
    "safe_open.keys": Case(invoke=_on_opened, read=sorted),
    "safe_open.offset_keys": Case(invoke=_on_opened),
    "safe_open.metadata": Case(invoke=_on_opened),
    "safe_open.get_tensor": Case(invoke=_on_opened, required={"name": same("'w'", "w")}),
    "safe_open.get_tensors": Case(invoke=_on_opened),
    "optim.lr_scheduler.LRScheduler.get_last_lr": _member(_SCHEDULER),
}
