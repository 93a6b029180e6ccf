"""torch optimizers known by what they are given (round 9's development set: TorchRec's
DLRM, lucidrains' StyleGAN2), section "Checkpoints" (the optimizer rows).

- A torch optimizer of a rule ``tj.optim`` has no twin of (``Adagrad``, ``Adamax``,
  ``NAdam``, ``RAdam``) given its parameters in a name (``lambda params:
  torch.optim.Adagrad(params, lr=lr, eps=eps)``): ``optimizer-torch-rules``, with optax's
  rule of the same algorithm. Given ``model.parameters()`` it is ``optimizer-parameters``'s
  (``placement``).
- A model's parameters gathered in a name for a torch optimizer (``generator_params =
  list(self.G.parameters()) + list(self.S.parameters())`` then ``Adam(generator_params,
  ...)``): ``optimizer-parameters`` where they are gathered: ``nnx.Optimizer`` takes the
  model, not its parameters.
"""

from __future__ import annotations

import ast

from .base import Recogniser
from .optimizers import assigned_name, optimizer_advice

__all__ = ["optax_rule", "parameters_gathered"]

_OPTAX_ONLY = frozenset(f"torch.optim.{name}" for name in ("Adagrad", "Adamax", "NAdam", "RAdam"))
_GATHERED = (
    "{models}  # the models whose parameters the optimizer steps: nnx.Optimizer(model, rule, "
    "wrt=nnx.Param) takes one model; keep these in one nnx module (or one optimizer each)"
)


def optax_rule(r: Recogniser, call: ast.Call) -> None:
    """``optimizer-torch-rules``: ``torch.optim.Adagrad(params, lr=...)`` no other row
    reported."""
    if id(call) in r.reported or r.qualname(call.func) not in _OPTAX_ONLY:
        return
    if call.args and _parameters_of(r, call.args[0]) is not None:
        return  # Adagrad(model.parameters(), ...): optimizer-parameters' (placement)
    advice = optimizer_advice(r, call)
    if advice is None:
        return
    target = assigned_name(r, call, "optimizer")
    tj_code, plain = advice
    r.add(
        call,
        "optimizer-torch-rules",
        f"{target} = {tj_code}",
        jax=plain if plain.startswith("#") else f"{target} = {plain}",
    )


def parameters_gathered(r: Recogniser, node: ast.Assign) -> None:
    """``optimizer-parameters``: ``params = list(a.parameters()) + list(b.parameters())``,
    ``params`` then handed first to a torch optimizer."""
    if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
        return
    models = [
        r.text(receiver)
        for part in ast.walk(node.value)
        if (receiver := _parameters_of(r, part)) is not None
    ]
    binding = r.file.names.binding_of.get(node.targets[0])
    if not models or binding is None or id(node.value) in r.reported:
        return
    if any(
        _optimizer_class(r.qualname(part.func))
        for part in ast.walk(node.value)
        if isinstance(part, ast.Call)
    ):
        return  # optimizer = torch.optim.Adam(model.parameters()): the optimizer itself
    for load in r.file.names.loads(binding):
        user = r.parent(load)
        if (
            isinstance(user, ast.Call)
            and user.args
            and user.args[0] is load
            and _optimizer_class(r.qualname(user.func))
        ):
            r.add(node.value, "optimizer-parameters", _GATHERED.format(models=", ".join(models)))
            return


def _parameters_of(r: Recogniser, node: ast.AST) -> ast.expr | None:
    """``model`` of ``model.parameters()``, a module's parameters (no imported name's
    method); ``None`` for anything else."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "parameters"
        and r.qualname(node.func) is None
    ):
        return node.func.value
    return None


def _optimizer_class(name: str | None) -> bool:
    """``torch.optim.Adam``: one of torch.optim's optimizer classes (not a scheduler's
    module, ``torch.optim.lr_scheduler.StepLR``)."""
    return (
        name is not None
        and name.startswith("torch.optim.")
        and name.count(".") == 2
        and name.rsplit(".", 1)[1][:1].isupper()
    )
