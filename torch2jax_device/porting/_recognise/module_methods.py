"""torch's methods known by the call's shape where the receiver's kind is not (round 8's
development set: WeNet, timm).

- FSDP's own ``model.clip_grad_norm_(max_norm)``: ``FullyShardedDataParallel``'s method
  computes the norm over every rank's shards (a plain module has no such method; torch's
  ``clip_grad_norm_(model.parameters(), max_norm)`` is a function), in a file that uses
  FSDP (``dist-fsdp``). Accelerate's ``accelerator.clip_grad_norm_`` is its row's.
- torch.compile's wrapper unwrapped: ``model._orig_mod`` (``OptimizedModule``'s module),
  also asked with ``getattr(model, "_orig_mod", model)`` / ``hasattr``
  (``torch-compile``): with JAX the module is never wrapped, ``jax.jit`` wraps the step.
- torch's legacy constructor ``x.new(data)`` (``loss.new([loss_avg])``): a tensor of
  ``x``'s dtype on ``x``'s device (``tensor-new-factory``), on a tensor the scanner knows,
  or given a list of values to hold.
- torch's legacy cast ``x.type(dtype)`` (Tianshou's ``x = x.type(dtype)``): given a dtype
  it is ``x.to(dtype)`` (``tensor-to-dtype``, ``module-to-dtype`` on a module); given a
  tensor type (``torch.cuda.HalfTensor``, or its name as a string) it casts and moves
  (``tensor-to-device-dtype``). ``x.type()`` asks for the type's name: not a cast.
"""

from __future__ import annotations

import ast
import re

from .._values import FOREIGN, TORCH_TENSOR, UNKNOWN
from .base import Recogniser
from .libraries import is_library_object
from .library_internals import imports_package
from .placement import is_dtype

__all__ = ["compiled_original", "fsdp_clip_grad_norm", "legacy_new", "legacy_type"]

_FSDP_MODULES = ("torch.distributed.fsdp", "torch.distributed._composable.fsdp")
_FSDP_CLIP = (
    "grads = optax.clip_by_global_norm({max_norm}).update(grads, optax.EmptyState())[0]  "
    "# the global norm over every shard: XLA reduces a sharded array's norm itself"
)


def fsdp_clip_grad_norm(r: Recogniser, call: ast.Call) -> None:
    """``dist-fsdp``: ``model.clip_grad_norm_(clip)`` in a file that imports FSDP."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "clip_grad_norm_"):
        return
    if id(call) in r.reported or r.qualname(func) is not None or not call.args:
        return  # torch.nn.utils.clip_grad_norm_(params, n): the function, by its name
    if is_library_object(r, func.value) or not _imports_fsdp(r):
        return
    r.add(
        call,
        "dist-fsdp",
        _FSDP_CLIP.format(max_norm=r.text(call.args[0])),
        position=r.file.method_position(func),
    )


_ORIGINAL = "_orig_mod"
_UNWRAPPED = (
    "the module itself: jax.jit (nnx.jit) compiles the step and leaves the module unwrapped"
)


def compiled_original(r: Recogniser, node: ast.Attribute | ast.Call) -> None:
    """``torch-compile``: ``model._orig_mod``, ``getattr(model, "_orig_mod", model)``."""
    if id(node) in r.reported:
        return
    if isinstance(node, ast.Attribute):
        if node.attr == _ORIGINAL:
            r.add(node, "torch-compile", f"{r.text(node.value)}  # {_UNWRAPPED}")
        return
    if (
        r.file.values.builtin(node.func) in ("getattr", "hasattr")
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and node.args[1].value == _ORIGINAL
    ):
        asked = r.file.values.builtin(node.func) == "hasattr"
        value = "False" if asked else r.text(node.args[0])
        r.add(node, "torch-compile", f"{value}  # {_UNWRAPPED}")


def legacy_new(r: Recogniser, call: ast.Call) -> None:
    """``tensor-new-factory``: ``x.new([values])`` or ``t.new(...)`` on a known tensor."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "new"):
        return
    if id(call) in r.reported or r.qualname(func) is not None:
        return  # hashlib.new("md5"), Image.new(...): a module's function
    kinds = r.file.values.kinds(func.value)
    data = len(call.args) == 1 and isinstance(call.args[0], (ast.List, ast.Tuple))
    if TORCH_TENSOR in kinds or (data and kinds <= {UNKNOWN} and FOREIGN not in kinds):
        if not imports_package(r, ("torch",)):
            return
        values = r.text(call.args[0]) if data else "data"
        receiver = r.text(func.value)
        r.add(
            call,
            "tensor-new-factory",
            f"jnp.asarray({values}, dtype={receiver}.dtype, "
            f"device=tj.device_of({receiver}).jax_device)",
            position=r.file.method_position(func),
            reason="torch's legacy constructor: its dtype and device are the receiver's, "
            "which JAX spells out",
        )


# torch's tensor types by name: torch.FloatTensor (on the CPU), torch.cuda.HalfTensor.
_TENSOR_TYPE = re.compile(r"^torch\.(cuda\.)?[A-Z][A-Za-z]*Tensor$")


def legacy_type(r: Recogniser, call: ast.Call) -> None:
    """``x.type(dtype)``: torch's legacy cast, by a dtype or a tensor type; advice."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "type"):
        return
    if id(call) in r.reported or r.qualname(func) is not None or len(call.args) != 1:
        return  # x.type(): the type's name; np.dtype.type: numpy's
    if call.keywords and {k.arg for k in call.keywords} != {"non_blocking"}:
        return
    receiver = func.value
    if r.file.values.kinds(receiver) == {FOREIGN} or not imports_package(r, ("torch",)):
        return
    given = call.args[0]
    named = given.value if isinstance(given, ast.Constant) else r.qualname(given)
    where = r.file.method_position(func)
    text = r.text(receiver)
    if isinstance(named, str) and _TENSOR_TYPE.match(named):
        device = '"cuda"' if named.startswith("torch.cuda.") else '"cpu"'
        r.add(
            call,
            "tensor-to-device-dtype",
            f"tj.to_device({text}, {device}, {named}.dtype)  # the tensor type's dtype, "
            "on its device",
            position=where,
        )
    elif is_dtype(r, given):
        framework = r.file.values.module_framework(receiver)
        rule = "module-to-dtype" if framework is not None else "tensor-to-dtype"
        r.add(
            call,
            rule,
            f"tj.to_device({text}, {r.text(given)})  # x.type(dtype) is x.to(dtype)",
            position=where,
        )


def _imports_fsdp(r: Recogniser) -> bool:
    for node in ast.walk(r.file.tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        if any(name.startswith(_FSDP_MODULES) for name in names):
            return True
    return False
