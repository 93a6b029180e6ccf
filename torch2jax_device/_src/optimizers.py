"""Torch's optimizers as optax transformations.

``tj.optim.SGD`` / ``Adam`` / ``AdamW`` / ``RMSprop`` take torch's keywords, with
torch's checks, and update parameters by torch's formulas (weight decay, dampening,
Nesterov, bias correction, decoupled decay, amsgrad, centered averages, maximize,
complex parameters as ``view_as_real``, low-precision state in the parameter's dtype, as
``torch.optim`` does them). They keep their hyperparameters in the optax state
(``optax.inject_hyperparams``, float32; one value per parameter group with torch's
groups, ``param_groups``), where a scheduler sets the learning rate as torch's
schedulers set ``param_groups[i]["lr"]``; ``optimizer_state`` reads and writes that
state as torch's ``state_dict()``.

Neither optax nor flax is imported before a function here is called.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from .checkpoints.module_state import placed_like
from .detect import is_tracer
from .errors import ArgumentTypeError, ConfigError, UnsupportedOperationError
from .optimizer_arguments import at_least_zero, kernel_options, number, unexpected
from .param_groups import Group, chosen, held, members, noted_groups, parsed, refused_complex
from .truth import truth

__all__ = ["SGD", "Adam", "AdamState", "AdamW", "RMSprop", "RMSpropState", "SGDState"]


class SGDState(NamedTuple):
    """``torch.optim.SGD``'s state: per parameter, its updates so far and a momentum buffer.

    Examples:
        >>> import jax.numpy as jnp
        >>> from torch2jax_device import optim
        >>> state = optim.SGD(lr=0.1, momentum=0.9).init({"w": jnp.ones(2)})
        >>> type(state.inner_state).__name__, state.inner_state.momentum_buffer["w"].tolist()
        ('SGDState', [0.0, 0.0])
    """

    steps: Any  # per parameter (int32): updates so far; the first starts its buffer at the gradient
    momentum_buffer: Any
    group: Any = None  # with parameter groups: per parameter, param_groups.noted_groups


class AdamState(NamedTuple):
    """``torch.optim.Adam``'s (and ``AdamW``'s) state: per parameter, as torch keeps it,
    its step, its first and second moments and, with ``amsgrad``, the largest second
    moment so far (else ``None``).

    Examples:
        >>> import jax.numpy as jnp
        >>> from torch2jax_device import optim
        >>> state = optim.Adam(lr=1e-3).init({"w": jnp.ones(2)})
        >>> type(state.inner_state).__name__, float(state.inner_state.step["w"])
        ('AdamState', 0.0)
    """

    step: Any  # per parameter, float32, as torch keeps it (one that has not stepped is behind)
    exp_avg: Any
    exp_avg_sq: Any
    max_exp_avg_sq: Any = None
    group: Any = None  # with parameter groups: per parameter, param_groups.noted_groups


class RMSpropState(NamedTuple):
    """``torch.optim.RMSprop``'s state, per parameter: step, the squares' average and, as
    asked, the momentum buffer and the gradients' average (``centered``).

    Examples:
        >>> import jax.numpy as jnp
        >>> from torch2jax_device import optim
        >>> state = optim.RMSprop(lr=1e-2).init({"w": jnp.ones(2)})
        >>> type(state.inner_state).__name__, state.inner_state.square_avg["w"].tolist()
        ('RMSpropState', [0.0, 0.0])
    """

    step: Any  # per parameter, float32, as torch keeps it
    square_avg: Any
    momentum_buffer: Any
    grad_avg: Any
    group: Any = None  # with parameter groups: per parameter, param_groups.noted_groups


def SGD(  # torch's name and signature; params: the groups, or None (nnx.Optimizer's model)
    params: Any = None,
    lr: float = 1e-3,
    momentum: float = 0.0,
    dampening: float = 0.0,
    weight_decay: float = 0.0,
    nesterov: bool = False,
    *,
    maximize: bool = False,
    foreach: bool | None = None,
    differentiable: bool = False,
    fused: bool | None = None,
    **unknown: Any,
) -> Any:
    """Equivalent to `torch.optim.SGD`, as an optax transformation.

    Torch's update rule: ``g = grad + weight_decay * p`` (``-grad`` first with
    ``maximize``); with momentum, the buffer starts at ``g`` and then becomes
    ``momentum * buf + (1 - dampening) * g``, and the step is the buffer (or
    ``g + momentum * buf`` with Nesterov); ``p -= lr * step``. Give it to
    ``nnx.Optimizer(model, tj.optim.SGD(...), wrt=nnx.Param)``. Unlike torch's, it takes
    no parameters: ``nnx.Optimizer`` pairs it with the model. The hyperparameters live
    in the state (``optax.inject_hyperparams``), so a scheduler and
    [`load_state_dict`][torch2jax_device.optim.load_state_dict] can set them.
    ``foreach``, ``fused`` and ``differentiable`` choose torch's kernel, not the numbers:
    they are taken, checked as torch checks them, and kept for the state dict.

    Torch's parameter groups are its one positional argument:
    ``SGD([{"params": ..., "lr": 0.01}, {"params": ...}], lr=0.1)``, where a group's
    ``"params"`` selects parameters of the model (a predicate over ``(path,
    parameter)`` or an nnx filter, a list of paths, or a list of
    ``tj.parameters(model)``'s parameters) and its other keys override the keywords
    (see [`AdamW`][torch2jax_device.optim.AdamW] and the optimizers guide).

    Args:
        params: Nothing (``nnx.Optimizer`` pairs it with the model), or torch's list of
            parameter groups (dicts with ``"params"``); the hyperparameters follow it in
            torch's order, positionally or by keyword.
        lr: The learning rate.
        momentum: Momentum factor (0: plain SGD).
        dampening: Dampening of the momentum.
        weight_decay: L2 penalty, added to the gradient.
        nesterov: Nesterov momentum (needs ``momentum > 0`` and ``dampening == 0``).
        maximize: Ascend the objective (the gradient's sign flipped).
        foreach: Torch's kernel choice, kept for the state dict.
        differentiable: Torch's autograd through the step, kept for the state dict.
        fused: Torch's kernel choice, kept for the state dict.

    Raises:
        ConfigError: where torch raises ``ValueError``: a negative ``lr``,
            ``momentum`` or ``weight_decay``, or Nesterov without momentum or with
            dampening.
        UnsupportedOperationError: where torch raises ``RuntimeError``: ``fused``
            with ``foreach`` or ``differentiable``.
        ArgumentTypeError: a positional argument other than a list of groups
            (torch's call shape ``SGD(model.parameters(), lr=...)``: ``nnx.Optimizer``
            takes the model instead), a group without ``"params"``, a keyword torch's
            SGD does not take, or a hyperparameter that is not a number (a tensor
            included: pass the float).
        ConfigError: also a parameter two groups select (torch's ``ValueError``, when
            ``nnx.Optimizer`` is made).

    Examples:
        >>> import jax.numpy as jnp
        >>> from torch2jax_device import optim
        >>> tx = optim.SGD(lr=0.1, momentum=0.9)
        >>> state = tx.init({"w": jnp.ones(2)})
        >>> updates, state = tx.update({"w": jnp.ones(2)}, state, {"w": jnp.ones(2)})
        >>> updates["w"].tolist(), float(state.hyperparams["learning_rate"])
        ([-0.10000000149011612, -0.10000000149011612], 0.10000000149011612)
    """
    unexpected("SGD", unknown)
    _flags("SGD", nesterov=nesterov, maximize=maximize, foreach=foreach,
           differentiable=differentiable, fused=fused)  # fmt: skip
    groups = parsed("SGD", _given(params))
    # torch compares `value < 0`, which NaN passes
    lr = at_least_zero("SGD", "lr", lr, nan=True)
    momentum = at_least_zero("SGD", "momentum", momentum, nan=True)
    weight_decay = at_least_zero("SGD", "weight_decay", weight_decay, nan=True)
    dampening = number("SGD", "dampening", dampening)
    if nesterov and (momentum <= 0 or dampening != 0):
        raise ConfigError(
            f"Nesterov momentum requires a momentum and zero dampening (torch's ValueError): "
            f"momentum={momentum}, dampening={dampening}; set momentum > 0 and dampening=0, "
            "or nesterov=False"
        )
    options = kernel_options("SGD", foreach=foreach, fused=fused, differentiable=differentiable)
    optax = _optax()
    factory = optax.inject_hyperparams(_sgd, hyperparam_dtype=jnp.float32)
    return _with_params(factory, options, groups, "SGD")(
        learning_rate=lr,
        momentum=momentum,
        dampening=dampening,
        weight_decay=weight_decay,
        nesterov=float(bool(nesterov)),
        maximize=float(bool(maximize)),
        fused=float(bool(fused)),
    )


def Adam(  # torch's name and signature; params: the groups, or None (nnx.Optimizer's model)
    params: Any = None,
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    amsgrad: bool = False,
    *,
    foreach: bool | None = None,
    maximize: bool = False,
    capturable: bool = False,
    differentiable: bool = False,
    fused: bool | None = None,
    decoupled_weight_decay: bool = False,
    **unknown: Any,
) -> Any:
    """Equivalent to `torch.optim.Adam`, as an optax transformation.

    Torch's update rule, bias corrections included (``eps`` added outside the square
    root); ``weight_decay`` is an L2 penalty added to the gradient, or, with
    ``decoupled_weight_decay=True``, ``AdamW``'s ``p *= 1 - lr * weight_decay``.
    ``amsgrad`` keeps the largest second moment so far (``max_exp_avg_sq``) and divides
    by it; ``maximize`` flips the gradient's sign; a complex parameter's real and
    imaginary parts have their own moments, as torch's ``view_as_real`` gives them. Use
    it as [`SGD`][torch2jax_device.optim.SGD] is used (``foreach``, ``fused``,
    ``capturable`` and ``differentiable`` are kept for the state dict; ``fused``
    computes a low-precision parameter's step in float32). A parameter group may set
    its own ``amsgrad`` and ``fused``, as torch's may.

    Raises:
        ConfigError: where torch raises ``ValueError``: a negative (or NaN) ``lr``,
            ``eps`` or ``weight_decay``, a beta outside ``[0, 1)``, or betas that are
            not both floats.
        UnsupportedOperationError: where torch raises ``RuntimeError``: ``fused``
            with ``foreach`` or ``differentiable`` (a parameter group both fused and
            differentiable, where torch raises at the first step, when made), or (at the
            first step) with a complex parameter of a fused group.
        ArgumentTypeError: a positional argument (torch's call shape, see ``SGD``), a
            keyword torch's Adam does not take, betas that are not a pair, or a
            hyperparameter that is not a number.

    Examples:
        >>> import jax.numpy as jnp
        >>> from torch2jax_device import optim
        >>> tx = optim.Adam(lr=0.1)
        >>> params = {"w": jnp.ones(2)}
        >>> updates, state = tx.update({"w": jnp.ones(2)}, tx.init(params), params)
        >>> [round(value, 6) for value in updates["w"].tolist()], float(state.inner_state.step["w"])
        ([-0.1, -0.1], 1.0)
    """
    unexpected("Adam", unknown)
    _flags("Adam", amsgrad=amsgrad, foreach=foreach, maximize=maximize, capturable=capturable,
           differentiable=differentiable, fused=fused,
           decoupled_weight_decay=decoupled_weight_decay)  # fmt: skip
    groups = parsed("Adam", _given(params))
    return _adam_like(
        "Adam", groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
        maximize=maximize, decoupled_weight_decay=decoupled_weight_decay,
        options=kernel_options(
            "Adam", foreach=foreach, fused=fused, differentiable=differentiable,
            capturable=capturable,
        ),
    )  # fmt: skip


def AdamW(  # torch's name and signature; params: the groups, or None (nnx.Optimizer's model)
    params: Any = None,
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 1e-2,
    amsgrad: bool = False,
    *,
    maximize: bool = False,
    foreach: bool | None = None,
    capturable: bool = False,
    differentiable: bool = False,
    fused: bool | None = None,
    **unknown: Any,
) -> Any:
    """Equivalent to `torch.optim.AdamW`: ``Adam(..., decoupled_weight_decay=True)``.

    With parameter groups, each hyperparameter in the state holds one value per group
    (nanoGPT's split below: weight decay for matrices, none for biases and norms).

    Examples:
        >>> from torch2jax_device import optim
        >>> tx = optim.AdamW(lr=0.1)
        >>> state = tx.init({})
        >>> hyper = state.hyperparams
        >>> optim.hyperparameter(hyper["weight_decay"]), float(hyper["decoupled_weight_decay"])
        (0.01, 1.0)
        >>> from flax import nnx
        >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        >>> tx = optim.AdamW([{"params": lambda path, p: p.ndim >= 2, "weight_decay": 0.1},
        ...                   {"params": lambda path, p: p.ndim < 2, "weight_decay": 0.0}],
        ...                  lr=6e-4, betas=(0.9, 0.95))
        >>> optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
        >>> optimizer.opt_state.hyperparams["weight_decay"][...].tolist()
        [0.10000000149011612, 0.0]
        >>> [group["params"] for group in optim.state_dict(optimizer, model)["param_groups"]]
        [[0], [1]]
    """
    unexpected("AdamW", unknown)
    _flags("AdamW", amsgrad=amsgrad, maximize=maximize, foreach=foreach, capturable=capturable,
           differentiable=differentiable, fused=fused)  # fmt: skip
    groups = parsed("AdamW", _given(params))
    return _adam_like(
        "AdamW", groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
        maximize=maximize, decoupled_weight_decay=True,
        options=kernel_options(
            "AdamW", foreach=foreach, fused=fused, differentiable=differentiable,
            capturable=capturable,
        ),
    )  # fmt: skip


def _flags(function: str, **flags: Any) -> None:
    """Torch's flags read as its ``if flag:`` reads them, before any is used: the
    library's error for one with no single truth value (an array of several elements)."""
    for name, value in flags.items():
        truth(f"tj.optim.{function}", name, value)


def _adam_like(
    function: str,
    groups: list[Group] | None,
    *,
    lr: Any,
    betas: Any,
    eps: Any,
    weight_decay: Any,
    amsgrad: Any,
    maximize: Any,
    decoupled_weight_decay: Any,
    options: dict[str, Any],
) -> Any:
    """Adam's and AdamW's checks, in torch's order, and the transformation."""
    for index, group in enumerate(groups or ()):
        kernel = {name: group.given.get(name, options.get(name)) for name in options}
        if kernel.get("fused") and kernel.get("differentiable"):
            raise UnsupportedOperationError(
                f"tj.optim.{function}: parameter group {index} is fused and differentiable "
                "(torch's RuntimeError at the first step: Adam with fused=True does not "
                f"support differentiable=True). Fix: set one of them in group {index}"
            )
    lr = at_least_zero(function, "lr", lr)
    eps = at_least_zero(function, "eps", eps)
    if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
        raise ArgumentTypeError(
            f"{function}: betas must be a pair of floats such as (0.9, 0.999), not {betas!r}"
        )
    for index, beta in enumerate(betas):
        if not 0.0 <= number(function, f"betas[{index}]", beta) < 1.0:
            raise ConfigError(
                f"Invalid beta parameter at index {index}: {beta} (torch's ValueError): "
                f"{function} needs 0 <= beta < 1"
            )
    weight_decay = at_least_zero(function, "weight_decay", weight_decay)
    if not all(isinstance(beta, float) for beta in betas):
        raise ConfigError(
            f"betas must be either both floats or both Tensors (torch's ValueError), not "
            f"{betas!r}: write them as floats, e.g. {tuple(float(beta) for beta in betas)}"
        )
    optax = _optax()
    factory = optax.inject_hyperparams(_adam, static_args=("peaks",), hyperparam_dtype=jnp.float32)
    # the state keeps max_exp_avg_sq where any group may read it (torch: per group)
    peaks = bool(amsgrad) or any(bool(group.given.get("amsgrad")) for group in groups or ())
    return _with_params(factory, options, groups, function)(
        learning_rate=lr,
        beta1=float(betas[0]),
        beta2=float(betas[1]),
        eps=eps,
        weight_decay=weight_decay,
        decoupled_weight_decay=float(bool(decoupled_weight_decay)),
        maximize=float(bool(maximize)),
        amsgrad=float(bool(amsgrad)),
        peaks=peaks,
        fused=float(bool(options.get("fused"))),
    )


def RMSprop(  # torch's name and signature; params: the groups, or None (nnx.Optimizer's model)
    params: Any = None,
    lr: float = 1e-2,
    alpha: float = 0.99,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    momentum: float = 0.0,
    centered: bool = False,
    capturable: bool = False,
    foreach: bool | None = None,
    maximize: bool = False,
    differentiable: bool = False,
    **unknown: Any,
) -> Any:
    """Equivalent to `torch.optim.RMSprop`, as an optax transformation.

    Torch's update rule: ``eps`` added outside the square root, the gradients' average
    subtracted when ``centered``, and a momentum buffer of ``g / avg`` (not of the
    step, as optax's ``rmsprop`` keeps it); ``maximize`` flips the gradient's sign. Use
    it as [`SGD`][torch2jax_device.optim.SGD] is used.

    Raises:
        ConfigError: a negative (or NaN) ``lr``, ``alpha``, ``eps``, ``weight_decay`` or
            ``momentum`` (torch's ``ValueError``).
        ArgumentTypeError: a positional argument (torch's call shape, see ``SGD``), a
            keyword torch's RMSprop does not take (``fused``), or a hyperparameter that
            is not a number.

    Examples:
        >>> import jax.numpy as jnp
        >>> from torch2jax_device import optim
        >>> tx = optim.RMSprop(lr=0.01)
        >>> params = {"w": jnp.ones(2)}
        >>> updates, state = tx.update({"w": jnp.ones(2)}, tx.init(params), params)
        >>> [round(value, 4) for value in updates["w"].tolist()]
        [-0.1, -0.1]
    """
    unexpected("RMSprop", unknown)
    _flags("RMSprop", centered=centered, capturable=capturable, foreach=foreach,
           maximize=maximize, differentiable=differentiable)  # fmt: skip
    groups = parsed("RMSprop", _given(params))
    lr = at_least_zero("RMSprop", "lr", lr)
    eps = at_least_zero("RMSprop", "eps", eps)
    momentum = at_least_zero("RMSprop", "momentum", momentum)
    weight_decay = at_least_zero("RMSprop", "weight_decay", weight_decay)
    alpha = at_least_zero("RMSprop", "alpha", alpha)
    options = kernel_options(
        "RMSprop", foreach=foreach, differentiable=differentiable, capturable=capturable
    )
    optax = _optax()
    factory = optax.inject_hyperparams(_rmsprop, hyperparam_dtype=jnp.float32)
    return _with_params(factory, options, groups, "RMSprop")(
        learning_rate=lr,
        alpha=alpha,
        eps=eps,
        weight_decay=weight_decay,
        momentum=momentum,
        centered=float(bool(centered)),
        maximize=float(bool(maximize)),
    )


def _given(params: Any) -> tuple[Any, ...]:
    """torch's ``params`` as the positional arguments the groups are parsed from."""
    return () if params is None else (params,)


def _with_params(
    factory: Any, options: dict[str, Any], groups: list[Group] | None, function: str
) -> Any:
    """``factory``'s transformations, whose state's scalars (the step count, the
    hyperparameters) are placed where the parameters are.

    optax makes them on the default device: beside parameters replicated over a mesh
    (``DDP(model)``), a jitted step would refuse the mix of devices. Torch keeps an
    optimizer's state with its parameters; so does this. ``options`` (torch's kernel
    choices, which change no number) ride on ``init`` as ``torch_options``, where
    [`state_dict`][torch2jax_device.optim.state_dict] finds them; ``groups`` (torch's
    parameter groups) as ``torch_groups``, and each group's hyperparameters, as given,
    as ``torch_values``. With groups, each hyperparameter in the state is one value per
    group, and ``init`` notes each parameter's group in the state's ``group``.
    """
    optax = _optax()

    def build(**hyperparameters: Any) -> Any:
        static = {name: value for name, value in hyperparameters.items() if isinstance(value, bool)}
        numeric = {name: value for name, value in hyperparameters.items() if name not in static}
        values = [numeric]
        if groups is not None:
            values = [{**numeric, **group.overrides(function, list(numeric))} for group in groups]
            numeric = {
                name: jnp.asarray([group[name] for group in values], jnp.float32)
                for name in numeric
            }
        transformation = factory(**numeric, **static)

        def init(params: Any) -> Any:
            state = transformation.init(params)
            if groups is not None:
                fused_groups = [value.get("fused", 0.0) > 0 for value in values]
                noted = noted_groups(groups, params, marked=fused_groups)
                inner = state.inner_state._replace(group=noted)
                state = state._replace(inner_state=inner)
            return _beside(state, params)

        init.torch_options = options  # type: ignore[attr-defined]
        init.torch_values = values  # type: ignore[attr-defined]
        init.torch_groups = groups  # type: ignore[attr-defined]

        def update(grads: Any, state: Any, params: Any = None, **extra: Any) -> Any:
            if refused_complex(params, state.inner_state.group, bool(options.get("fused"))):
                # at the first step, as torch checks it (a resumed run may take none)
                raise UnsupportedOperationError(
                    "`fused=True` requires all the params to be floating point Tensors "
                    "(torch's RuntimeError at the first step): a parameter is complex; "
                    "leave fused unset"
                )
            return transformation.update(grads, state, params, **extra)

        return optax.GradientTransformationExtraArgs(init, update)

    return build


def _beside(state: Any, params: Any) -> Any:
    """``state``'s scalars (and, with groups, its hyperparameters and each parameter's
    group) replicated over the mesh of ``params``' first array."""
    arrays = [leaf for leaf in jax.tree.leaves(params) if isinstance(leaf, jax.Array)]
    if not arrays or is_tracer(arrays[0]) or not isinstance(arrays[0].sharding, NamedSharding):
        return state
    sharding = arrays[0].sharding
    replicated = NamedSharding(sharding.mesh, PartitionSpec(), memory_kind=sharding.memory_kind)

    def place(leaf: Any, every: bool = False) -> Any:
        if isinstance(leaf, jax.Array) and (every or leaf.ndim == 0) and not is_tracer(leaf):
            return placed_like(
                leaf,
                jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=replicated),
                "a scalar of the optimizer state",
            )
        return leaf

    state = jax.tree.map(place, state)
    if getattr(state.inner_state, "group", None) is None:
        return state
    return state._replace(
        hyperparams=jax.tree.map(lambda leaf: place(leaf, True), state.hyperparams),
        inner_state=state.inner_state._replace(
            group=jax.tree.map(lambda leaf: place(leaf, True), state.inner_state.group)
        ),
    )


def _sgd(
    learning_rate: Any,
    momentum: Any,
    dampening: Any,
    weight_decay: Any,
    nesterov: Any,
    maximize: Any,
    fused: Any,
) -> Any:
    optax = _optax()
    hyperparameters = (
        learning_rate, momentum, dampening, weight_decay, nesterov, maximize, fused
    )  # fmt: skip

    def init(params: Any) -> SGDState:
        return SGDState(_counts(params, jnp.int32), jax.tree.map(jnp.zeros_like, params))

    def update(grads: Any, state: SGDState, params: Any = None) -> tuple[Any, SGDState]:
        if params is None:
            raise ConfigError(
                "tj.optim.SGD needs the parameters: call update(grads, state, params)"
            )

        def one(
            grad: Any, buffer: Any, param: Any, steps: Any, member: Any
        ) -> tuple[Any, Any, Any]:
            learning_rate, momentum, dampening, weight_decay, nesterov, maximize, fused = chosen(
                member, *hyperparameters
            )
            dtype = param.dtype
            rounding = (dtype, fused)  # per group: fused rounds only the state it stores
            grad, buffer, param = _widened(dtype, grad, buffer, param)
            grad = _decayed(jnp.where(maximize > 0, -grad, grad), param, weight_decay, *rounding)
            kept = _stored(
                _stored(momentum * buffer, *rounding) + (1 - dampening) * grad, *rounding
            )
            started = jnp.where(steps == 0, grad, kept)
            step = jnp.where(nesterov > 0, _stored(grad + momentum * started, *rounding), started)
            with_momentum = momentum != 0
            step = jnp.where(with_momentum, step, grad)
            kept_buffer = jnp.where(with_momentum, started, buffer).astype(dtype)
            return (
                held(member, -learning_rate * step, jnp.zeros_like(step)),
                held(member, kept_buffer, buffer.astype(dtype)),
                held(member, steps + 1, steps),
            )

        each = members(state, grads)
        triples = jax.tree.map(one, grads, state.momentum_buffer, params, state.steps, each)
        updates, buffers, steps = _unzip(triples, grads, 3)
        return updates, SGDState(steps, buffers, state.group)

    return optax.GradientTransformation(init, update)


def _adam(
    learning_rate: Any,
    beta1: Any,
    beta2: Any,
    eps: Any,
    weight_decay: Any,
    decoupled_weight_decay: Any,
    maximize: Any,
    amsgrad: Any,
    peaks: bool,
    fused: Any,
) -> Any:
    """Adam's step; ``amsgrad`` (a flag, per group) divides by the largest second moment
    so far, which the state keeps (``max_exp_avg_sq``) when ``peaks``: where any group
    has ``amsgrad``, each parameter's peak updated only where its group's flag is set."""
    optax = _optax()
    hyperparameters = (
        learning_rate,
        beta1,
        beta2,
        eps,
        weight_decay,
        decoupled_weight_decay,
        maximize,
        amsgrad,
        fused,
    )

    def init(params: Any) -> AdamState:
        zeros = functools.partial(jax.tree.map, jnp.zeros_like)
        kept = zeros(params) if peaks else None
        return AdamState(_counts(params, jnp.float32), zeros(params), zeros(params), kept)

    def update(grads: Any, state: AdamState, params: Any = None) -> tuple[Any, AdamState]:
        if params is None:
            raise ConfigError(
                "tj.optim.Adam needs the parameters: call update(grads, state, params)"
            )

        def one(
            grad: Any, mean: Any, square: Any, peak: Any, param: Any, step: Any, member: Any
        ) -> tuple[Any, ...]:
            (learning_rate, beta1, beta2, eps, weight_decay, decoupled_weight_decay,
             maximize, amsgrad, fused) = chosen(member, *hyperparameters)  # fmt: skip
            old = (mean, square, peak, step)
            dtype = param.dtype
            rounding = (dtype, fused)  # per group: fused rounds only the state it stores
            grad, mean, square, peak, param = _widened(dtype, grad, mean, square, peak, param)
            step = step + 1
            grad = jnp.where(maximize > 0, -grad, grad)
            grad = _decayed(grad, param, (1 - decoupled_weight_decay) * weight_decay, *rounding)
            grad, mean, square, peak = (_real(value) for value in (grad, mean, square, peak))
            mean = _stored(mean + (1 - beta1) * (grad - mean), *rounding)  # torch's lerp_
            square = _stored(
                _stored(beta2 * square, *rounding) + (1 - beta2) * grad * grad, *rounding
            )
            second = square
            if peaks:
                peak = jnp.where(amsgrad > 0, jnp.maximum(peak, square), peak)
                second = jnp.where(amsgrad > 0, peak, square)
            step_size = learning_rate / (1 - beta1**step)
            root = _stored(jnp.sqrt(second), *rounding)
            denominator = _stored(root / jnp.sqrt(1 - beta2**step), *rounding)
            denominator = _stored(denominator + eps, *rounding)
            decayed = (decoupled_weight_decay > 0) & (weight_decay != 0)  # torch skips 0 * lr
            # torch scales the parameter (p *= 1 - lr * wd: an infinite one stays so); as
            # an update, p - lr * wd * p would be inf - inf
            decayed = decayed & jnp.isfinite(param)
            decay = jnp.where(decayed, learning_rate * weight_decay * param, 0)
            change = _complex(-step_size * mean / denominator, dtype) - decay
            new = (*(_kept(value, dtype) for value in (mean, square, peak)), step)
            return (
                held(member, change, jnp.zeros_like(change)),
                *(held(member, value, before) for value, before in zip(new, old, strict=True)),
            )

        old_peaks = state.max_exp_avg_sq if peaks else jax.tree.map(lambda _: None, grads)
        parts = jax.tree.map(
            one, grads, state.exp_avg, state.exp_avg_sq, old_peaks, params, state.step,
            members(state, grads),
        )  # fmt: skip
        updates, means, squares, new_peaks, steps = _unzip(parts, grads, 5)
        return updates, AdamState(steps, means, squares, new_peaks if peaks else None, state.group)

    return optax.GradientTransformation(init, update)


def _rmsprop(
    learning_rate: Any,
    alpha: Any,
    eps: Any,
    weight_decay: Any,
    momentum: Any,
    centered: Any,
    maximize: Any,
) -> Any:
    optax = _optax()
    hyperparameters = (learning_rate, alpha, eps, weight_decay, momentum, centered, maximize)

    def init(params: Any) -> RMSpropState:
        zeros = functools.partial(jax.tree.map, jnp.zeros_like)
        return RMSpropState(
            _counts(params, jnp.float32), zeros(params), zeros(params), zeros(params)
        )

    def update(grads: Any, state: RMSpropState, params: Any = None) -> tuple[Any, RMSpropState]:
        if params is None:
            raise ConfigError(
                "tj.optim.RMSprop needs the parameters: call update(grads, state, params)"
            )

        def one(
            grad: Any, square: Any, buffer: Any, mean: Any, param: Any, member: Any
        ) -> tuple[Any, ...]:
            learning_rate, alpha, eps, weight_decay, momentum, centered, maximize = chosen(
                member, *hyperparameters
            )
            old = (square, buffer, mean)
            dtype = param.dtype
            grad, square, buffer, mean, param = _widened(dtype, grad, square, buffer, mean, param)
            grad = _decayed(jnp.where(maximize > 0, -grad, grad), param, weight_decay, dtype)
            grad, square, buffer, mean = (_real(value) for value in (grad, square, buffer, mean))
            square = _stored(_stored(alpha * square, dtype) + (1 - alpha) * grad * grad, dtype)
            centered_mean = _stored(mean + (1 - alpha) * (grad - mean), dtype)  # lerp_
            mean = jnp.where(centered > 0, centered_mean, mean)
            spread = jnp.where(centered > 0, _stored(square - mean * mean, dtype), square)
            average = _stored(_stored(jnp.sqrt(spread), dtype) + eps, dtype)
            with_momentum = momentum > 0
            kept = _stored(_stored(momentum * buffer, dtype) + grad / average, dtype)
            buffer = jnp.where(with_momentum, kept, buffer)
            step = jnp.where(with_momentum, buffer, grad / average)
            change = _complex(-learning_rate * step, dtype)
            new = (_kept(value, dtype) for value in (square, buffer, mean))
            return (
                held(member, change, jnp.zeros_like(change)),
                *(held(member, value, before) for value, before in zip(new, old, strict=True)),
            )

        each = members(state, grads)
        parts = jax.tree.map(
            one, grads, state.square_avg, state.momentum_buffer, state.grad_avg, params, each
        )
        updates, squares, buffers, means = _unzip(parts, grads, 4)
        steps = jax.tree.map(lambda step, member: held(member, step + 1, step), state.step, each)
        return updates, RMSpropState(steps, squares, buffers, means, state.group)

    return optax.GradientTransformation(init, update)


def _widened(dtype: Any, *values: Any) -> tuple[Any, ...]:
    """``values`` in the dtype torch computes a parameter of ``dtype``'s step in (float32
    for float16 and bfloat16: torch's CPU kernels compute each operation in float and
    round its result to the tensor's dtype)."""
    wide = jnp.promote_types(dtype, jnp.float32)
    return tuple(None if value is None else value.astype(wide) for value in values)


def _stored(value: Any, dtype: Any, fused: Any = False) -> Any:
    """``value`` rounded as torch stores an operation's result in a tensor of ``dtype``
    (a float16 or bfloat16 one), kept in the wider dtype it is computed in; not rounded
    where ``fused`` (the group's flag: torch's fused kernels compute the whole step in
    float and store only the state)."""
    if jnp.dtype(dtype).itemsize >= 4 or jnp.issubdtype(dtype, jnp.complexfloating):
        return value
    narrow = value.astype(dtype).astype(value.dtype)
    return narrow if fused is False else jnp.where(fused > 0, value, narrow)


def _kept(value: Any, dtype: Any) -> Any:
    """A state buffer computed for a parameter of ``dtype``, in that dtype (complex from
    its real view)."""
    return None if value is None else _complex(value, dtype).astype(dtype)


def _decayed(grad: Any, param: Any, weight_decay: Any, dtype: Any, fused: Any = False) -> Any:
    """``grad + weight_decay * param`` as torch's ``grad.add`` gives it for a parameter of
    ``dtype`` (and left alone without decay, as torch skips it: ``0 * inf`` is no NaN)."""
    return _stored(jnp.where(weight_decay != 0, grad + weight_decay * param, grad), dtype, fused)


def _real(value: Any) -> Any:
    """A complex array as torch's ``view_as_real`` (its parts on a last axis of 2)."""
    if value is None or not jnp.iscomplexobj(value):
        return value
    return jnp.stack([value.real, value.imag], axis=-1)


def _complex(value: Any, dtype: Any) -> Any:
    """``_real``'s inverse for a parameter of ``dtype``."""
    if value is None or not jnp.issubdtype(dtype, jnp.complexfloating):
        return value
    return jax.lax.complex(value[..., 0], value[..., 1]).astype(dtype)


def _counts(params: Any, dtype: Any) -> Any:
    """A 0 of ``dtype`` per parameter: torch counts each parameter's steps apart (one
    left out of a step, or loaded from a checkpoint before it first stepped, is behind)."""
    return jax.tree.map(lambda _: jnp.zeros([], dtype), params)


def _unzip(tree: Any, like: Any, parts: int = 2) -> tuple[Any, ...]:
    """A tree of tuples (one where ``like`` has a leaf) as a tuple of trees like ``like``."""
    return tuple(
        jax.tree.map(lambda _, parts_here, i=i: parts_here[i], like, tree) for i in range(parts)
    )


def _optax() -> Any:
    import optax  # type: ignore[import-untyped]

    return optax
