"""The optimizer rows of section "Checkpoints": a torch optimizer built
(``torch.optim.Adam(model.parameters(), lr=1e-2)``), its scheduler, and its state saved or
loaded (``optimizer.state_dict()``). The advice is the script's own: its optimizer, model
and hyperparameters, written as ``tj.optim``'s rule for ``nnx.Optimizer``, and its
scheduler with its arguments."""

from __future__ import annotations

import ast
import re

from .. import catalog
from .._values import TORCH_OPTIMIZER, UNKNOWN, last_name
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


def optimizer_advice(r: Recogniser, call: ast.Call) -> tuple[str, str] | None:
    """``nnx.Optimizer(model, tj.optim.Adam(lr=1e-2), wrt=nnx.Param)`` for the optimizer
    ``call`` builds, from its own class, model and hyperparameters, and the same with optax
    alone (``optax.adam(1e-2)``; a comment where optax has no rule with those arguments);
    ``None`` when it is no torch.optim class the scanner can name."""
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
    values: list[tuple[str, ast.expr]] = list(
        zip(_POSITIONAL.get(cls, ("lr",)), call.args[1:], strict=False)
    )
    values += [
        (k.arg, k.value)
        for k in call.keywords
        if k.arg is not None and k.arg not in ("params", *_IMPLEMENTATION)
    ]
    settings = [(field, r.text(value)) for field, value in values]
    if cls in RULES:
        rule = f"tj.optim.{cls}({', '.join(f'{field}={text}' for field, text in settings)})"
    else:
        lr = dict(settings).get("lr", "lr")
        rule = f"optax.{_OPTAX[cls]}({lr})"
    optax_rule = rule if cls in _OPTAX else _optax_rule(r, cls, dict(values))
    plain = (
        f"nnx.Optimizer({model}, {optax_rule}, wrt=nnx.Param)"
        if optax_rule is not None
        else f"# optax has no rule with {cls}'s arguments as given: tj.optim.{cls} is torch's"
    )
    return f"nnx.Optimizer({model}, {rule}, wrt=nnx.Param)", plain


# An optimizer made elsewhere (``self.optimizer``, a parameter), by its name.
_OPTIMIZER_NAME = re.compile(r"(^|_)optim(i[sz]er)?$", re.IGNORECASE)

# torch.optim's default learning rates, which optax's rules do not have.
_DEFAULT_LR = {"SGD": "1e-3", "Adam": "1e-3", "AdamW": "1e-3", "RMSprop": "1e-2"}


def _optax_rule(r: Recogniser, cls: str, given: dict[str, ast.expr]) -> str | None:
    """torch.optim's ``cls`` with the arguments ``given`` as the optax rule that updates
    the same parameters the same way, as code; ``None`` when optax has none (SGD's
    dampening, AdamW's amsgrad, maximize=True...)."""
    settings = dict(given)
    text = r.text

    def take(field: str, default: str | None = None) -> str | None:
        value = settings.pop(field, None)
        return text(value) if value is not None else default

    def switch(field: str) -> bool | None:
        """A literal True/False, None when it is neither."""
        value = settings.pop(field, None)
        if value is None:
            return False
        if isinstance(value, ast.Constant) and isinstance(value.value, bool):
            return value.value
        return None

    arguments = [take("lr", _DEFAULT_LR[cls]) or ""]
    coupled = take("weight_decay") if cls != "AdamW" else None  # L2 on the gradient
    optax_name = {"SGD": "sgd", "Adam": "adam", "AdamW": "adamw", "RMSprop": "rmsprop"}[cls]
    if cls in ("Adam", "AdamW"):
        betas = settings.pop("betas", None)
        if isinstance(betas, ast.Tuple) and len(betas.elts) == 2:
            arguments += [f"b1={text(betas.elts[0])}", f"b2={text(betas.elts[1])}"]
        elif betas is not None:
            arguments += [f"b1={text(betas)}[0]", f"b2={text(betas)}[1]"]
        eps = take("eps")
        arguments += [f"eps={eps}"] if eps is not None else []
        if switch("amsgrad") is not False:
            return None  # optax.amsgrad keeps the largest corrected second moment, torch the raw
        if cls == "AdamW":  # torch's default decay is 0.01, optax's 1e-4
            arguments.append(f"weight_decay={take('weight_decay', '0.01')}")
    elif cls == "SGD":
        momentum, nesterov = take("momentum"), switch("nesterov")
        dampening = settings.pop("dampening", None)
        if nesterov is None or not (
            dampening is None or (isinstance(dampening, ast.Constant) and dampening.value == 0)
        ):
            return None
        arguments += [f"momentum={momentum}"] if momentum is not None else []
        arguments += ["nesterov=True"] if nesterov else []
    else:  # RMSprop: torch adds eps outside the root, starts from 0 and decays by alpha
        centered = switch("centered")
        if centered is None:
            return None
        arguments += [f"decay={take('alpha', '0.99')}", f"eps={take('eps', '1e-8')}"]
        arguments.append("eps_in_sqrt=False")
        arguments += ["centered=True"] if centered else []
        momentum = take("momentum")
        arguments += [f"momentum={momentum}"] if momentum is not None else []
    if switch("maximize") is not False or settings:
        return None  # maximize=True, or an argument optax's rule has no place for
    rule = f"optax.{optax_name}({', '.join(arguments)})"
    return f"optax.chain(optax.add_decayed_weights({coupled}), {rule})" if coupled else rule


def constructor(r: Recogniser, call: ast.Call, name: str) -> bool:
    """``optimizer-torch-rules``: ``optimizer = torch.optim.SGD(model.parameters(), lr=0.1)``
    is ``optimizer = nnx.Optimizer(model, tj.optim.SGD(lr=0.1), wrt=nnx.Param)``; ``True``
    if reported."""
    if name.rsplit(".", 1)[-1] not in RULES or not name.startswith("torch.optim."):
        return False
    advice = optimizer_advice(r, call)
    if advice is None:
        return False
    target = assigned_name(r, call, "optimizer")
    tj_code, plain = advice
    r.add(
        call,
        "optimizer-torch-rules",
        f"{target} = {tj_code}",
        jax=plain if plain.startswith("#") else f"{target} = {plain}",
    )
    return True


def scheduler(r: Recogniser, call: ast.Call, name: str) -> bool:
    """``lr-scheduler``: ``scheduler = torch.optim.lr_scheduler.LinearLR(optimizer,
    total_iters=10)`` is ``tj.optim.lr_scheduler.LinearLR`` with the same arguments, stepped
    and resumed as torch's; ``True`` if reported."""
    if name not in _SCHEDULERS:
        return False
    target = assigned_name(r, call, "scheduler")
    cls = name.rsplit(".", 1)[1]
    r.add(
        call,
        "lr-scheduler",
        f"{target} = tj.optim.lr_scheduler.{cls}({r.arguments(call)})\n"
        f"{target}.step()  # each epoch\n"
        f'{target}.load_state_dict(tj.load(path)["scheduler"])',
        jax=_optax_schedule(r, call, cls),
    )
    return True


# torch's parameters after ``optimizer`` and their defaults, per scheduler.
_SCHEDULE_PARAMETERS = {
    "StepLR": (("step_size", None), ("gamma", "0.1")),
    "MultiStepLR": (("milestones", None), ("gamma", "0.1")),
    "CosineAnnealingLR": (("T_max", None), ("eta_min", None)),
    "LinearLR": (("start_factor", "1 / 3"), ("end_factor", "1.0"), ("total_iters", "5")),
    "LambdaLR": (("lr_lambda", None),),
    "ExponentialLR": (("gamma", None),),
}


def _optax_schedule(r: Recogniser, call: ast.Call, cls: str) -> str:
    """The optax schedule giving the learning rate torch's scheduler ``cls`` sets after
    ``count`` calls of its ``step()``, from the call's own arguments and the optimizer's
    learning rate; ``""`` when an argument is missing or unknown, or ``cls`` has no
    closed form here (the row's column)."""
    if cls not in _SCHEDULE_PARAMETERS:
        return ""
    given = dict(zip((p for p, _ in _SCHEDULE_PARAMETERS[cls]), call.args[1:], strict=False))
    given.update({k.arg: k.value for k in call.keywords if k.arg is not None})
    values: dict[str, str] = {}
    for parameter, default in _SCHEDULE_PARAMETERS[cls]:
        value = given.pop(parameter, None)
        if value is not None:
            values[parameter] = r.text(value)
        elif default is not None:
            values[parameter] = default
        elif parameter != "eta_min":
            return ""
    given.pop("optimizer", None)
    if given:  # last_epoch, verbose...: a schedule resumed mid-way
        return ""
    lr = _optimizer_lr(r, call.args[0] if call.args else None)
    step = "# count: scheduler.step() calls"
    if cls == "StepLR":
        code = (
            f"optax.exponential_decay({lr}, transition_steps={values['step_size']}, "
            f"decay_rate={values['gamma']}, staircase=True)"
        )
    elif cls == "MultiStepLR":
        code = (
            f"optax.piecewise_constant_schedule({lr}, "
            f"{{m: {values['gamma']} for m in {values['milestones']}}})"
        )
    elif cls == "CosineAnnealingLR":
        alpha = f", alpha={values['eta_min']} / {lr}" if "eta_min" in values else ""
        code = f"optax.cosine_decay_schedule({lr}, decay_steps={values['T_max']}{alpha})"
        step += " (torch's goes up again after T_max; optax's stays at its end)"
    elif cls == "LinearLR":
        code = (
            f"optax.linear_schedule({lr} * {values['start_factor']}, {lr} * "
            f"{values['end_factor']}, transition_steps={values['total_iters']})"
        )
    elif cls == "ExponentialLR":
        code = f"optax.exponential_decay({lr}, transition_steps=1, decay_rate={values['gamma']})"
    else:
        function = values["lr_lambda"]
        function = function if function.isidentifier() else f"({function})"
        code = f"lambda count: {lr} * {function}(count)"
    return (
        f"schedule = {code}  {step}\n"
        "# optax's rules take it as learning_rate and count updates: scale the count to "
        "step()'s"
    )


def _optimizer_lr(r: Recogniser, optimizer: ast.expr | None) -> str:
    """The learning rate ``optimizer`` was built with (``lr=1e-2`` of the
    ``torch.optim.Adam(...)`` it names), else ``lr``."""
    if not isinstance(optimizer, ast.Name):
        return "lr"
    for binding in r.file.names.bindings(optimizer):
        built = binding.value
        if binding.kind != "assign" or not isinstance(built, ast.Call):
            continue
        name = r.qualname(built.func) or ""
        cls = name.rsplit(".", 1)[-1]
        if name.startswith("torch.optim.") and cls in _DEFAULT_LR:
            lr = next((k.value for k in built.keywords if k.arg == "lr"), None)
            if lr is None and len(built.args) > 1:
                lr = built.args[1]
            return r.text(lr) if lr is not None else _DEFAULT_LR[cls]
    return "lr"


def state_call(r: Recogniser, call: ast.Call, method: ast.Attribute) -> bool:
    """``optimizer-state-dict``: ``optimizer.state_dict()`` and
    ``optimizer.load_state_dict(...)`` of an optimizer built by ``torch.optim``; ``True`` if
    reported."""
    if method.attr not in ("state_dict", "load_state_dict"):
        return False
    kinds = r.file.values.kinds(method.value)
    named = _OPTIMIZER_NAME.search(last_name(method.value) or "") is not None and UNKNOWN in kinds
    if TORCH_OPTIMIZER not in kinds and not named:
        return False  # an nnx.Optimizer is known for what it is, whatever its name
    optimizer = r.text(method.value)
    fitting = (
        f"tj.optim.state_dict({optimizer}, model)  # torch's layout, by the model's parameters"
        if method.attr == "state_dict"
        else f"tj.optim.load_state_dict({optimizer}, model, {r.arguments(call)})"
    )
    r.add(call, "optimizer-state-dict", fitting, position=r.file.method_position(method))
    return True


def assigned_name(r: Recogniser, call: ast.Call, default: str) -> str:
    """The name ``call``'s result is assigned to, or ``default``."""
    parent = r.parent(call)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        return r.text(parent.targets[0])
    return default
