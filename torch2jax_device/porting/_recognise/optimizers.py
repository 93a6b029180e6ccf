"""The optimizer rows of section "Checkpoints": a torch optimizer built
(``torch.optim.Adam(model.parameters(), lr=1e-2)``), its scheduler, and its state saved or
loaded (``optimizer.state_dict()``). The advice is the script's own: its optimizer, model
and hyperparameters, written as ``tj.optim``'s rule for ``nnx.Optimizer``, and its
scheduler with its arguments."""

from __future__ import annotations

import ast

from .. import catalog
from .._values import TORCH_OPTIMIZER
from .base import Recogniser

__all__ = ["RULES", "assigned_name", "constructor", "optimizer_advice", "scheduler", "state_call"]

#: torch.optim's classes with a tj.optim rule of the same name.
RULES = frozenset(name.rsplit(".", 1)[1] for name in catalog.get("optimizer-torch-rules").torch_api)
# torch.optim.lr_scheduler's classes with a tj.optim.lr_scheduler twin.
_SCHEDULERS = frozenset(catalog.get("lr-scheduler").torch_api)
# torch's positional parameters after ``params``, per class, so that ``SGD(p, 0.1)`` is
# written ``tj.optim.SGD(lr=0.1)``.
_POSITIONAL = {
    "SGD": ("lr", "momentum", "dampening", "weight_decay", "nesterov"),
    "Adam": ("lr", "betas", "eps", "weight_decay", "amsgrad"),
    "AdamW": ("lr", "betas", "eps", "weight_decay", "amsgrad"),
    "RMSprop": ("lr", "alpha", "eps", "weight_decay", "momentum", "centered"),
}
# torch's switches between implementations of the same rule: nothing to port.
_IMPLEMENTATION = frozenset({"foreach", "fused", "capturable", "differentiable"})
# torch.optim classes without a tj.optim rule, and optax's rule of the same algorithm.
_OPTAX = {"Adagrad": "adagrad", "Adamax": "adamax", "NAdam": "nadam", "RAdam": "radam"}


def optimizer_advice(r: Recogniser, call: ast.Call) -> str | None:
    """``nnx.Optimizer(model, tj.optim.Adam(lr=1e-2), wrt=nnx.Param)`` for the optimizer
    ``call`` builds, from its own class, model and hyperparameters; ``None`` when it is no
    torch.optim class the scanner can name."""
    name = r.qualname(call.func)
    if name is None or not name.startswith("torch.optim."):
        return None
    cls = name.rsplit(".", 1)[1]
    if cls not in RULES and cls not in _OPTAX:
        return None
    params = (
        call.args[0]
        if call.args
        else next((k.value for k in call.keywords if k.arg == "params"), None)
    )
    model = "model"
    if (
        isinstance(params, ast.Call)
        and isinstance(params.func, ast.Attribute)
        and params.func.attr in ("parameters", "named_parameters")
    ):
        model = r.text(params.func.value)
    settings = [
        (field, r.text(value))
        for field, value in zip(_POSITIONAL.get(cls, ("lr",)), call.args[1:], strict=False)
    ] + [
        (k.arg, r.text(k.value))
        for k in call.keywords
        if k.arg not in (None, "params", *_IMPLEMENTATION)
    ]
    if cls in RULES:
        rule = f"tj.optim.{cls}({', '.join(f'{field}={text}' for field, text in settings)})"
    else:
        lr = dict(settings).get("lr", "lr")
        rule = f"optax.{_OPTAX[cls]}({lr})"
    return f"nnx.Optimizer({model}, {rule}, wrt=nnx.Param)"


def constructor(r: Recogniser, call: ast.Call, name: str) -> bool:
    """``optimizer-torch-rules``: ``optimizer = torch.optim.SGD(model.parameters(), lr=0.1)``
    is ``optimizer = nnx.Optimizer(model, tj.optim.SGD(lr=0.1), wrt=nnx.Param)``; ``True``
    if reported."""
    if name.rsplit(".", 1)[-1] not in RULES or not name.startswith("torch.optim."):
        return False
    advice = optimizer_advice(r, call)
    if advice is None:
        return False
    r.add(call, "optimizer-torch-rules", f"{assigned_name(r, call, 'optimizer')} = {advice}")
    return True


def scheduler(r: Recogniser, call: ast.Call, name: str) -> bool:
    """``lr-scheduler``: ``scheduler = torch.optim.lr_scheduler.LinearLR(optimizer,
    total_iters=10)`` is ``tj.optim.lr_scheduler.LinearLR`` with the same arguments, stepped
    and resumed as torch's; ``True`` if reported."""
    if name not in _SCHEDULERS:
        return False
    target = assigned_name(r, call, "scheduler")
    r.add(
        call,
        "lr-scheduler",
        f"{target} = tj.optim.lr_scheduler.{name.rsplit('.', 1)[1]}({r.arguments(call)})\n"
        f"{target}.step()  # each epoch\n"
        f'{target}.load_state_dict(tj.load(path)["scheduler"])',
    )
    return True


def state_call(r: Recogniser, call: ast.Call, method: ast.Attribute) -> bool:
    """``optimizer-state-dict``: ``optimizer.state_dict()`` and
    ``optimizer.load_state_dict(...)`` of an optimizer built by ``torch.optim``; ``True`` if
    reported."""
    if method.attr not in ("state_dict", "load_state_dict"):
        return False
    if TORCH_OPTIMIZER not in r.file.values.kinds(method.value):
        return False
    r.add(call, "optimizer-state-dict", position=r.file.method_position(method))
    return True


def assigned_name(r: Recogniser, call: ast.Call, default: str) -> str:
    """The name ``call``'s result is assigned to, or ``default``."""
    parent = r.parent(call)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        return r.text(parent.targets[0])
    return default
