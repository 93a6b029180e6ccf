"""The optimizer rows of section "Checkpoints": a torch optimizer built
(``torch.optim.Adam(model.parameters(), lr=1e-2)``), its scheduler, and its state saved or
loaded (``optimizer.state_dict()``). The advice is the script's own: its optimizer, model
and hyperparameters, written as ``tj.optim``'s rule for ``nnx.Optimizer``, and its
scheduler with its arguments."""

from __future__ import annotations

import ast
import re

from .. import catalog
from .._values import FOREIGN, LIBRARY_OBJECT, TORCH_OPTIMIZER, UNKNOWN, last_name
from .base import Recogniser
from .library_internals import imports_package

__all__ = [
    "RULES",
    "SCHEDULE_RESTORED",
    "assigned_name",
    "constructor",
    "library_schedule",
    "optimizer_advice",
    "scheduler",
    "scheduler_by_name",
    "state_call",
]

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
_OPTIMIZER_NAME = re.compile(r"(^|_)optim(i[sz]er)?s?$", re.IGNORECASE)

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
    and resumed as torch's; ``True`` if reported. torch's schedulers with no port here
    (``SequentialLR``, ``CyclicLR``...) are reported with what to write instead."""
    cls = name.rsplit(".", 1)[-1]
    if name.startswith("torch.optim.lr_scheduler.") and cls in UNPORTED_SCHEDULERS:
        r.add(call, "lr-scheduler", UNPORTED_SCHEDULERS[cls])
        return True
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


#: torch.optim.lr_scheduler's classes tj.optim.lr_scheduler does not port, and what to
#: write instead.
UNPORTED_SCHEDULERS = {
    "SequentialLR": (
        "schedule = optax.join_schedules([warmup, decay], boundaries=milestones)  # torch's "
        "SequentialLR; or one tj.optim.lr_scheduler.LambdaLR over the epoch"
    ),
    "ChainedScheduler": (
        "scheduler = tj.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: f(epoch) * g(epoch))"
        "  # torch's ChainedScheduler multiplies its schedulers' factors"
    ),
    **dict.fromkeys(
        ("CosineAnnealingWarmRestarts", "CyclicLR", "MultiplicativeLR", "SWALR"),
        "scheduler = tj.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: ...)  # no port "
        "of this scheduler: write its factor by epoch, or use an optax schedule",
    ),
}

# Transformers' and Diffusers' schedule factories: a torch LambdaLR over torch's
# optimizer, by the factory's name -> the optax schedule of the same shape (lr, warm-up
# steps, total steps filled in from the call).
_LIBRARY_SCHEDULES = {
    "linear": (
        "optax.join_schedules([optax.linear_schedule(0.0, {lr}, {warmup}), "
        "optax.linear_schedule({lr}, 0.0, {total} - {warmup})], [{warmup}])"
    ),
    "cosine": "optax.warmup_cosine_decay_schedule(0.0, {lr}, {warmup}, {total})",
    "constant": "optax.constant_schedule({lr})",
    "constant_with_warmup": (
        "optax.join_schedules([optax.linear_schedule(0.0, {lr}, {warmup}), "
        "optax.constant_schedule({lr})], [{warmup}])"
    ),
}
_LIBRARY_FACTORIES = frozenset(
    f"{module}.{function}"
    for module in (
        "transformers",
        "transformers.optimization",
        "diffusers.optimization",
    )
    for function in (
        "get_scheduler",
        "get_linear_schedule_with_warmup",
        "get_cosine_schedule_with_warmup",
        "get_constant_schedule",
        "get_constant_schedule_with_warmup",
        "get_cosine_with_hard_restarts_schedule_with_warmup",
        "get_polynomial_decay_schedule_with_warmup",
    )
)


def library_schedule(r: Recogniser, call: ast.Call) -> bool:
    """``lr-scheduler``: Transformers' or Diffusers' ``get_scheduler("cosine", optimizer,
    num_warmup_steps=..., num_training_steps=...)`` (and ``get_*_schedule_with_warmup``):
    a torch ``LambdaLR`` over torch's optimizer, which an ``nnx.Optimizer`` is not; the
    optax schedule of the same shape; ``True`` if reported."""
    name = r.qualname(call.func)
    if name not in _LIBRARY_FACTORIES or id(call) in r.reported:
        return False
    function = name.rsplit(".", 1)[-1]
    given = {k.arg: k.value for k in call.keywords if k.arg is not None}
    if function == "get_scheduler":
        kind = given.get("name", call.args[0] if call.args else None)
        optimizer = given.get("optimizer", call.args[1] if len(call.args) > 1 else None)
        shape = kind.value if isinstance(kind, ast.Constant) else None
    else:
        optimizer = given.get("optimizer", call.args[0] if call.args else None)
        shape = (
            function.removeprefix("get_")
            .removesuffix("_schedule")
            .replace("_schedule_with_warmup", "_with_warmup")
        )
        shape = "linear" if shape == "linear_with_warmup" else shape
        shape = "cosine" if shape == "cosine_with_warmup" else shape
    warmup, total = (
        r.text(given[k]) if k in given else default
        for k, default in (
            ("num_warmup_steps", "warmup_steps"),
            ("num_training_steps", "total_steps"),
        )
    )
    template = _LIBRARY_SCHEDULES.get(str(shape), _LIBRARY_SCHEDULES["cosine"])
    schedule = template.format(lr=_optimizer_lr(r, optimizer), warmup=warmup, total=total)
    target = assigned_name(r, call, "lr_scheduler")
    r.add(
        call,
        "lr-scheduler",
        f"schedule = {schedule}  # {function}'s shape as optax's: give it to the optax rule "
        f"as learning_rate (no {target}.step(): optax counts updates)",
    )
    return True


# A scheduler made elsewhere (``self.scheduler``, ``lr_scheduler``, a parameter), by its
# name; a diffusion model's noise scheduler is none.
_SCHEDULER_NAME = re.compile(r"(^|_)(lr_)?sched(uler)?s?$", re.IGNORECASE)
_SCHEDULER_METHODS = frozenset({"step", "state_dict", "load_state_dict", "get_last_lr"})


def scheduler_by_name(r: Recogniser, call: ast.Call, method: ast.Attribute) -> bool:
    """``lr-scheduler``: ``self.scheduler.step()``, ``scheduler.state_dict()``,
    ``lr_scheduler.load_state_dict(state)`` on a scheduler the file did not make (a
    parameter, a project's helper's, one ``accelerator.prepare`` wrapped), by its name, in
    a file that uses torch; also each of a dict of them (``{k: v.state_dict() for k, v in
    self.schedulers.items()}``). A noise scheduler's ``step(output, t, sample)`` takes the
    model's output: not a learning rate's; ``True`` if reported."""
    if method.attr not in _SCHEDULER_METHODS:
        return False
    if method.attr == "step" and (
        len(call.args) > 1 or any(k.arg not in ("epoch", "metrics") for k in call.keywords)
    ):
        return False
    receiver = method.value
    kinds = r.file.values.kinds(receiver)
    if kinds & {FOREIGN, LIBRARY_OBJECT, TORCH_OPTIMIZER} or not (
        UNKNOWN in kinds or "lr-scheduler" in kinds
    ):
        return False
    named = held_name(r, receiver) or ""
    if not _SCHEDULER_NAME.search(named) or named.lower().startswith("noise"):
        return False
    if _made_as_something_else(r, receiver):
        return False
    if not imports_package(r, ("torch",)):
        return False
    text = r.text(receiver)
    fitting = {
        "step": f"{r.text(call)}  # unchanged once {text} is a tj.optim.lr_scheduler one: "
        "it sets the nnx.Optimizer's rate by torch's rule",
        "load_state_dict": f"{r.text(call)}  {SCHEDULE_RESTORED}",
    }.get(method.attr, f"{r.text(call)}  # torch's layout, key for key, from a tj scheduler")
    r.add(call, "lr-scheduler", fitting, position=r.file.method_position(method))
    return True


# What a learning-rate scheduler's maker is called (InverseLR, create_lr_scheduler,
# get_scheduler_fix, WarmupLR, LambdaLR, prepare...).
_MAKES_A_SCHEDULE = re.compile(r"lr|sched|prepare|boost", re.IGNORECASE)


def _made_as_something_else(r: Recogniser, node: ast.expr) -> bool:
    """Every value ``node`` is bound to is made by a call whose name says nothing of a
    learning rate (k-diffusion's ``ema_sched = K.utils.EMAWarmup(...)``: an EMA's decay)."""
    if isinstance(node, ast.Name):
        values = [
            b.value for b in r.file.names.bindings(node) if b.kind == "assign" and b.element is None
        ]
        if len(values) != len(r.file.names.bindings(node)):
            return False
    elif isinstance(node, ast.Attribute):
        values = list(r.file.values.stored_attributes(node))
    else:
        return False
    return bool(values) and all(
        isinstance(v, ast.Call) and not _MAKES_A_SCHEDULE.search(last_name(v.func) or "")
        for v in values
    )


def held_name(r: Recogniser, node: ast.expr) -> str | None:
    """The name ``node`` goes by: its own, or for a loop's variable over a collection
    (``for k, v in self.schedulers.items()``, ``for s in schedulers``) the collection's."""
    if isinstance(node, ast.Name):
        bindings = r.file.names.bindings(node)
        if bindings and all(b.kind == "for" and b.value is not None for b in bindings):
            iterable = bindings[0].value
            if (
                isinstance(iterable, ast.Call)
                and isinstance(iterable.func, ast.Attribute)
                and iterable.func.attr in ("items", "values")
            ):
                iterable = iterable.func.value
            return last_name(iterable) if iterable is not None else None
    return last_name(node)


#: scheduler.load_state_dict(state) on a torch scheduler: tj.optim.lr_scheduler's takes it.
SCHEDULE_RESTORED = (
    "# unchanged once the scheduler is torch2jax_device's: it takes torch's state dict, key for key"
)


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
    named = (
        _OPTIMIZER_NAME.search(held_name(r, method.value) or "") is not None and UNKNOWN in kinds
    )
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
