"""Ray's GPU workers and DeepSpeed's engine reached through a project's own names (round 7's
second development set: OpenRLHF, verl, CogVideoX).

- Ray places one process per GPU it is asked for: ``@ray.remote(num_gpus=1)``, an actor's
  ``.options(num_gpus=n)`` and a placement group's bundles (``{"GPU": 1, "CPU": 1}``) are
  the launcher's request (``library-launcher``); ``ray.get_runtime_context()
  .get_accelerator_ids()`` the devices it gave (``library-device``, as ``ray.get_gpu_ids()``
  is by its name).
- DeepSpeed's engine held in a project's ``model`` (OpenRLHF's strategy: ``model.backward(
  loss)``, ``model.step()``, ``engine.compile()``), and its ``get_global_grad_norm()``
  wherever the engine is reached (``self.components.transformer`` under Accelerate's
  DeepSpeed).
"""

from __future__ import annotations

import ast
import re

from .._values import last_name
from .base import Recogniser
from .libraries import is_library_object
from .library_internals import imports_package

__all__ = ["deepspeed_engine_call", "ray_devices", "ray_gpu_bundle", "ray_gpu_request"]

# The resource keywords of Ray's tasks and actors that ask for GPUs.
_GPU_KEYWORDS = frozenset({"num_gpus"})
_RAY_ADVICE = (
    "one process per device: with JAX, one process per host sees all its devices "
    "(jax.local_devices()); under a launcher, tj.distributed.init_process_group() joins "
    "the job and jax.distributed.initialize(local_device_ids=...) gives a process its own"
)
_BUNDLE_ADVICE = (
    "a placement group's devices: with JAX, a mesh over jax.devices() "
    "(jax.make_mesh(shape, names)) lays the processes' devices out"
)
# The names a project gives DeepSpeed's engine, or the model it rebinds to the engine.
_ENGINE = re.compile(r"^(model|engine|\w+_engine)$")
_ENGINE_LIBRARIES = ("deepspeed",)
# Members only DeepSpeed's engine has, under Accelerate's DeepSpeed too.
_ENGINE_ONLY = frozenset({"get_global_grad_norm"})


def ray_gpu_request(r: Recogniser, call: ast.Call) -> None:
    """``library-launcher``: ``ray.remote(num_gpus=1)`` or ``actor.options(num_gpus=n)``,
    reported on the keyword's line."""
    func = call.func
    is_remote = r.qualname(func) == "ray.remote"
    is_options = isinstance(func, ast.Attribute) and func.attr == "options"
    if not (is_remote or (is_options and r.qualname(func) is None)):
        return
    for keyword in call.keywords:
        if keyword.arg in _GPU_KEYWORDS and id(keyword.value) not in r.reported:
            if not (is_remote or imports_package(r, ("ray",))):
                return
            if _asks_for_none(keyword.value):
                continue
            position = (keyword.lineno, keyword.col_offset)
            r.add(keyword.value, "library-launcher", _RAY_ADVICE, position=position)


def _asks_for_none(value: ast.expr) -> bool:
    """``num_gpus=0``: a CPU worker."""
    return isinstance(value, ast.Constant) and value.value in (0, 0.0, None)


def ray_gpu_bundle(r: Recogniser, node: ast.Dict) -> None:
    """``library-launcher``: a placement group's bundle ``{"GPU": 1, "CPU": 1}``, in a file
    that imports Ray."""
    gpus = next(
        (
            value
            for key, value in zip(node.keys, node.values, strict=True)
            if isinstance(key, ast.Constant) and key.value == "GPU"
        ),
        None,
    )
    if gpus is None or _asks_for_none(gpus) or id(node) in r.reported:
        return
    if imports_package(r, ("ray",)):
        r.add(node, "library-launcher", _BUNDLE_ADVICE)


def ray_devices(r: Recogniser, call: ast.Call) -> None:
    """``library-device``: ``ray.get_runtime_context().get_accelerator_ids()``, the
    accelerators Ray gave this worker."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "get_accelerator_ids"):
        return
    context = func.value
    if (
        isinstance(context, ast.Call)
        and r.qualname(context.func) == "ray.get_runtime_context"
        and id(call) not in r.reported
    ):
        r.add(
            call,
            "library-device",
            "jax.local_devices()  # the devices this process was given",
            position=r.file.method_position(func),
        )


def deepspeed_engine_call(r: Recogniser, call: ast.Call) -> None:
    """``library-backward`` / ``torch-compile``: DeepSpeed's engine, in a file that uses
    DeepSpeed, through the name a project gives it: ``model.backward(loss)``,
    ``model.step()``, ``engine.compile()``; ``x.get_global_grad_norm()`` on any receiver."""
    func = call.func
    if not isinstance(func, ast.Attribute) or id(call) in r.reported:
        return
    if r.qualname(func) is not None:
        return
    name, receiver = func.attr, func.value
    if name != "compile" and is_library_object(r, receiver):
        return  # model_engine.backward(...): the library's member, reported as one
    where = r.file.method_position(func)
    if name in _ENGINE_ONLY and not call.args:
        if imports_package(r, ("deepspeed", "accelerate")):
            r.add(call, "library-backward", position=where)
        return
    if not _ENGINE.match(last_name(receiver) or "") or not imports_package(r, _ENGINE_LIBRARIES):
        return
    if name == "backward" and len(call.args) == 1 and not call.keywords:
        r.add(call, "library-backward", position=where)
    elif name == "step" and not call.args and not call.keywords:
        r.add(call, "library-backward", position=where)
    elif name == "compile" and not call.args and not call.keywords:
        r.add(call, "torch-compile", position=where)
