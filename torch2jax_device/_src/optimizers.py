"""Torch's optimizers as optax transformations, and their state across frameworks.

``tj.optim.SGD`` / ``Adam`` / ``AdamW`` / ``RMSprop`` update parameters by torch's
formulas (weight decay, dampening, Nesterov, bias correction, decoupled decay, centered
averages as ``torch.optim`` does them) and keep their hyperparameters in the optax state
(``optax.inject_hyperparams``), where a scheduler sets the learning rate as torch's
schedulers set ``param_groups[0]["lr"]``. ``tj.optim.state_dict(optimizer, model)``
gives what ``torch_optimizer.state_dict()`` gives for the model's torch twin, and
``tj.optim.load_state_dict(optimizer, model, saved)`` takes it back: state is keyed
by the index of the parameter in ``twin.parameters()``, and each buffer has the twin's
layout (a Linear's ``(out, in)``). So a checkpoint ``{"model": ..., "optimizer": ...}``
written by either framework resumes on the other.

Neither optax nor flax is imported before a function here is called.
"""

from __future__ import annotations

import functools
import math
import numbers
import sys
import weakref
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from .checkpoints.messages import shown
from .checkpoints.module_state import (
    from_torch_layout,
    in_torch_layout,
    parameter_entries,
    placed_like,
)
from .detect import import_torch, is_torch_tensor, is_tracer
from .errors import (
    ArgumentTypeError,
    ConfigError,
    ConversionError,
    StateDictError,
    UnsupportedOperationError,
)

__all__ = [
    "SGD",
    "Adam",
    "AdamState",
    "AdamW",
    "RMSprop",
    "RMSpropState",
    "SGDState",
    "hyperparameter",
    "load_state_dict",
    "state_dict",
]


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


def SGD(  # torch's name
    *params: Any,
    lr: float = 1e-3,
    momentum: float = 0.0,
    dampening: float = 0.0,
    weight_decay: float = 0.0,
    nesterov: bool = False,
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

    Args:
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
        ArgumentTypeError: a positional argument (torch's call shape,
            ``SGD(model.parameters(), lr=...)``: ``nnx.Optimizer`` takes the model
            instead), a keyword torch's SGD does not take, or a hyperparameter that is
            not a number.

    Examples:
        >>> import jax.numpy as jnp
        >>> from torch2jax_device import optim
        >>> tx = optim.SGD(lr=0.1, momentum=0.9)
        >>> state = tx.init({"w": jnp.ones(2)})
        >>> updates, state = tx.update({"w": jnp.ones(2)}, state, {"w": jnp.ones(2)})
        >>> updates["w"].tolist(), float(state.hyperparams["learning_rate"])
        ([-0.10000000149011612, -0.10000000149011612], 0.10000000149011612)
    """
    _no_parameters("SGD", params, unknown)
    # torch compares `value < 0`, which NaN passes
    lr = _at_least_zero("SGD", "lr", lr, nan=True)
    momentum = _at_least_zero("SGD", "momentum", momentum, nan=True)
    weight_decay = _at_least_zero("SGD", "weight_decay", weight_decay, nan=True)
    dampening = _number("SGD", "dampening", dampening)
    if nesterov and (momentum <= 0 or dampening != 0):
        raise ConfigError(
            f"Nesterov momentum requires a momentum and zero dampening (torch's ValueError): "
            f"momentum={momentum}, dampening={dampening}; set momentum > 0 and dampening=0, "
            "or nesterov=False"
        )
    options = _kernel_options("SGD", foreach=foreach, fused=fused, differentiable=differentiable)
    optax = _optax()
    return _with_params(optax.inject_hyperparams(_sgd, hyperparam_dtype=jnp.float32), options)(
        learning_rate=lr,
        momentum=momentum,
        dampening=dampening,
        weight_decay=weight_decay,
        nesterov=float(bool(nesterov)),
        maximize=float(bool(maximize)),
    )


def Adam(  # torch's name
    *params: Any,
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    amsgrad: bool = False,
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
    ``capturable`` and ``differentiable`` are kept for the state dict).

    Raises:
        ConfigError: where torch raises ``ValueError``: a negative (or NaN) ``lr``,
            ``eps`` or ``weight_decay``, a beta outside ``[0, 1)``, or betas that are
            not both floats.
        UnsupportedOperationError: where torch raises ``RuntimeError``: ``fused``
            with ``foreach`` or ``differentiable``, or (at ``init``) with a complex
            parameter.
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
    _no_parameters("Adam", params, unknown)
    return _adam_like(
        "Adam", lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
        maximize=maximize, decoupled_weight_decay=decoupled_weight_decay,
        options=_kernel_options(
            "Adam", foreach=foreach, fused=fused, differentiable=differentiable,
            capturable=capturable, amsgrad=bool(amsgrad),
        ),
    )  # fmt: skip


def AdamW(  # torch's name
    *params: Any,
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 1e-2,
    amsgrad: bool = False,
    maximize: bool = False,
    foreach: bool | None = None,
    capturable: bool = False,
    differentiable: bool = False,
    fused: bool | None = None,
    **unknown: Any,
) -> Any:
    """Equivalent to `torch.optim.AdamW`: ``Adam(..., decoupled_weight_decay=True)``.

    Examples:
        >>> from torch2jax_device import optim
        >>> tx = optim.AdamW(lr=0.1)
        >>> state = tx.init({})
        >>> hyper = state.hyperparams
        >>> optim.hyperparameter(hyper["weight_decay"]), float(hyper["decoupled_weight_decay"])
        (0.01, 1.0)
    """
    _no_parameters("AdamW", params, unknown)
    return _adam_like(
        "AdamW", lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
        maximize=maximize, decoupled_weight_decay=True,
        options=_kernel_options(
            "AdamW", foreach=foreach, fused=fused, differentiable=differentiable,
            capturable=capturable, amsgrad=bool(amsgrad),
        ),
    )  # fmt: skip


def _adam_like(
    function: str,
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
    lr = _at_least_zero(function, "lr", lr)
    eps = _at_least_zero(function, "eps", eps)
    if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
        raise ArgumentTypeError(
            f"{function}: betas must be a pair of floats such as (0.9, 0.999), not {betas!r}"
        )
    for index, beta in enumerate(betas):
        if not 0.0 <= _number(function, f"betas[{index}]", beta) < 1.0:
            raise ConfigError(
                f"Invalid beta parameter at index {index}: {beta} (torch's ValueError): "
                f"{function} needs 0 <= beta < 1"
            )
    weight_decay = _at_least_zero(function, "weight_decay", weight_decay)
    if not all(isinstance(beta, float) for beta in betas):
        raise ConfigError(
            f"betas must be either both floats or both Tensors (torch's ValueError), not "
            f"{betas!r}: write them as floats, e.g. {tuple(float(beta) for beta in betas)}"
        )
    optax = _optax()
    factory = optax.inject_hyperparams(
        _adam, static_args=("amsgrad",), hyperparam_dtype=jnp.float32
    )
    return _with_params(factory, options)(
        learning_rate=lr,
        beta1=float(betas[0]),
        beta2=float(betas[1]),
        eps=eps,
        weight_decay=weight_decay,
        decoupled_weight_decay=float(bool(decoupled_weight_decay)),
        maximize=float(bool(maximize)),
        amsgrad=bool(amsgrad),
    )


def RMSprop(  # torch's name
    *params: Any,
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
    _no_parameters("RMSprop", params, unknown)
    lr = _at_least_zero("RMSprop", "lr", lr)
    eps = _at_least_zero("RMSprop", "eps", eps)
    momentum = _at_least_zero("RMSprop", "momentum", momentum)
    weight_decay = _at_least_zero("RMSprop", "weight_decay", weight_decay)
    alpha = _at_least_zero("RMSprop", "alpha", alpha)
    options = _kernel_options(
        "RMSprop", foreach=foreach, differentiable=differentiable, capturable=capturable
    )
    optax = _optax()
    factory = optax.inject_hyperparams(_rmsprop, hyperparam_dtype=jnp.float32)
    return _with_params(factory, options)(
        learning_rate=lr,
        alpha=alpha,
        eps=eps,
        weight_decay=weight_decay,
        momentum=momentum,
        centered=float(bool(centered)),
        maximize=float(bool(maximize)),
    )


def _with_params(factory: Any, options: dict[str, Any]) -> Any:
    """``factory``'s transformations, whose state's scalars (the step count, the
    hyperparameters) are placed where the parameters are.

    optax makes them on the default device: beside parameters replicated over a mesh
    (``DDP(model)``), a jitted step would refuse the mix of devices. Torch keeps an
    optimizer's state with its parameters; so does this. ``options`` (torch's kernel
    choices, which change no number) ride on ``init`` as ``torch_options``, where
    [`state_dict`][torch2jax_device.optim.state_dict] finds them.
    """
    optax = _optax()

    def build(**hyperparameters: Any) -> Any:
        transformation = factory(**hyperparameters)

        def init(params: Any) -> Any:
            if options.get("fused") and any(
                jnp.iscomplexobj(leaf) for leaf in jax.tree.leaves(params)
            ):
                raise UnsupportedOperationError(
                    "`fused=True` requires all the params to be floating point Tensors "
                    "(torch's RuntimeError at the first step): a parameter is complex; "
                    "leave fused unset"
                )
            return _beside(transformation.init(params), params)

        init.torch_options = options  # type: ignore[attr-defined]
        return optax.GradientTransformationExtraArgs(init, transformation.update)

    return build


def _beside(state: Any, params: Any) -> Any:
    """``state``'s 0-d arrays replicated over the mesh of ``params``' first array."""
    arrays = [leaf for leaf in jax.tree.leaves(params) if isinstance(leaf, jax.Array)]
    if not arrays or is_tracer(arrays[0]) or not isinstance(arrays[0].sharding, NamedSharding):
        return state
    sharding = arrays[0].sharding
    replicated = NamedSharding(sharding.mesh, PartitionSpec(), memory_kind=sharding.memory_kind)

    def place(leaf: Any) -> Any:
        if isinstance(leaf, jax.Array) and leaf.ndim == 0 and not is_tracer(leaf):
            return placed_like(
                leaf,
                jax.ShapeDtypeStruct((), leaf.dtype, sharding=replicated),
                "a scalar of the optimizer state",
            )
        return leaf

    return jax.tree.map(place, state)


def _sgd(
    learning_rate: Any,
    momentum: Any,
    dampening: Any,
    weight_decay: Any,
    nesterov: Any,
    maximize: Any,
) -> Any:
    optax = _optax()

    def init(params: Any) -> SGDState:
        return SGDState(_counts(params, jnp.int32), jax.tree.map(jnp.zeros_like, params))

    def update(grads: Any, state: SGDState, params: Any = None) -> tuple[Any, SGDState]:
        if params is None:
            raise ConfigError(
                "tj.optim.SGD needs the parameters: call update(grads, state, params)"
            )

        def one(grad: Any, buffer: Any, param: Any, steps: Any) -> tuple[Any, Any, Any]:
            dtype = param.dtype
            grad = _decayed(jnp.where(maximize > 0, -grad, grad), param, weight_decay)
            started = jnp.where(
                steps == 0, grad, momentum * buffer + (1 - dampening) * grad
            ).astype(dtype)
            step = jnp.where(nesterov > 0, grad + momentum * started, started)
            with_momentum = momentum != 0
            step = jnp.where(with_momentum, step, grad)
            buffer = jnp.where(with_momentum, started, buffer)
            return -learning_rate * step, buffer, steps + 1

        triples = jax.tree.map(one, grads, state.momentum_buffer, params, state.steps)
        updates, buffers, steps = _unzip(triples, grads, 3)
        return updates, SGDState(steps, buffers)

    return optax.GradientTransformation(init, update)


def _adam(
    learning_rate: Any,
    beta1: Any,
    beta2: Any,
    eps: Any,
    weight_decay: Any,
    decoupled_weight_decay: Any,
    maximize: Any,
    amsgrad: bool,
) -> Any:
    optax = _optax()

    def init(params: Any) -> AdamState:
        zeros = functools.partial(jax.tree.map, jnp.zeros_like)
        peaks = zeros(params) if amsgrad else None
        return AdamState(_counts(params, jnp.float32), zeros(params), zeros(params), peaks)

    def update(grads: Any, state: AdamState, params: Any = None) -> tuple[Any, AdamState]:
        if params is None:
            raise ConfigError(
                "tj.optim.Adam needs the parameters: call update(grads, state, params)"
            )

        def one(
            grad: Any, mean: Any, square: Any, peak: Any, param: Any, step: Any
        ) -> tuple[Any, ...]:
            dtype = param.dtype
            step = step + 1
            grad = jnp.where(maximize > 0, -grad, grad)
            grad = _decayed(grad, param, (1 - decoupled_weight_decay) * weight_decay)
            grad, mean, square, peak = (_real(value) for value in (grad, mean, square, peak))
            mean = (mean + (1 - beta1) * (grad - mean)).astype(mean.dtype)  # torch's lerp_
            square = (beta2 * square + (1 - beta2) * grad * grad).astype(square.dtype)
            if amsgrad:
                peak = jnp.maximum(peak, square)
            step_size = learning_rate / (1 - beta1**step)
            denominator = jnp.sqrt(peak if amsgrad else square) / jnp.sqrt(1 - beta2**step)
            denominator = (denominator.astype(square.dtype) + eps).astype(square.dtype)
            decayed = (decoupled_weight_decay > 0) & (weight_decay != 0)  # torch skips 0 * lr
            decay = jnp.where(decayed, learning_rate * weight_decay * param, 0)
            change = _complex(-step_size * mean / denominator, dtype) - decay
            parts = (_complex(mean, dtype), _complex(square, dtype), _complex(peak, dtype))
            return change, *parts, step

        peaks = state.max_exp_avg_sq if amsgrad else jax.tree.map(lambda _: None, grads)
        parts = jax.tree.map(one, grads, state.exp_avg, state.exp_avg_sq, peaks, params, state.step)
        updates, means, squares, peaks, steps = _unzip(parts, grads, 5)
        return updates, AdamState(steps, means, squares, peaks if amsgrad else None)

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

        def one(grad: Any, square: Any, buffer: Any, mean: Any, param: Any) -> tuple[Any, ...]:
            dtype = param.dtype
            grad = _decayed(jnp.where(maximize > 0, -grad, grad), param, weight_decay)
            grad, square, buffer, mean = (_real(value) for value in (grad, square, buffer, mean))
            real = square.dtype
            square = (alpha * square + (1 - alpha) * grad * grad).astype(real)
            mean = jnp.where(centered > 0, mean + (1 - alpha) * (grad - mean), mean).astype(real)
            spread = jnp.where(centered > 0, square - mean * mean, square).astype(real)
            average = (jnp.sqrt(spread).astype(real) + eps).astype(real)
            with_momentum = momentum > 0
            buffer = jnp.where(with_momentum, momentum * buffer + grad / average, buffer).astype(
                real
            )
            step = jnp.where(with_momentum, buffer, grad / average)
            return (
                _complex(-learning_rate * step, dtype),
                *(_complex(value, dtype) for value in (square, buffer, mean)),
            )

        parts = jax.tree.map(
            one, grads, state.square_avg, state.momentum_buffer, state.grad_avg, params
        )
        updates, squares, buffers, means = _unzip(parts, grads, 4)
        steps = jax.tree.map(lambda step: step + 1, state.step)
        return updates, RMSpropState(steps, squares, buffers, means)

    return optax.GradientTransformation(init, update)


def _decayed(grad: Any, param: Any, weight_decay: Any) -> Any:
    """``grad + weight_decay * param`` in the gradient's dtype, as torch's ``grad.add``
    (and left alone without decay, as torch skips it: ``0 * inf`` is no NaN there)."""
    return jnp.where(weight_decay != 0, grad + weight_decay * param, grad).astype(grad.dtype)


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


# --- state across frameworks ---------------------------------------------------------------

# The torch optimizer each state is, and what it holds per parameter, by torch's key.
_KINDS = {SGDState: "SGD", AdamState: "Adam", RMSpropState: "RMSprop"}


def _torch_keys(inner: Any, hyper: dict[str, float]) -> tuple[str, ...]:
    """The buffers torch's optimizer keeps per parameter, with these hyperparameters."""
    if isinstance(inner, SGDState):
        return ("momentum_buffer",) if hyper["momentum"] != 0 else ()
    if isinstance(inner, AdamState):
        amsgrad = inner.max_exp_avg_sq is not None
        return ("exp_avg", "exp_avg_sq", *(("max_exp_avg_sq",) if amsgrad else ()))
    optional = (("momentum_buffer", hyper["momentum"] > 0), ("grad_avg", hyper["centered"] > 0))
    return ("square_avg", *(key for key, kept in optional if kept))


def state_dict(optimizer: Any, model: Any) -> dict[str, Any]:
    """Equivalent to `torch.optim.Optimizer.state_dict`.

    What the torch twin's optimizer would return: ``{"state": {index: {...}},
    "param_groups": [{...}]}``, with CPU tensors in the twin's layouts, keyed by the
    parameter's index in ``twin.parameters()`` (the model's
    [`tj.parameters`][torch2jax_device.parameters] order), and one parameter group
    holding the current hyperparameters (the learning rate a scheduler set). So
    ``torch.save({"model": tj.state_dict(model, layout="torch"), "optimizer":
    tj.optim.state_dict(optimizer, model)}, path)`` is a checkpoint the torch
    original resumes from.

    Args:
        optimizer: An ``nnx.Optimizer`` over ``tj.optim.SGD``, ``Adam``, ``AdamW`` or
            ``RMSprop`` (``wrt=nnx.Param``).
        model: The Flax NNX model it optimizes (its twin's order and layouts).

    Returns:
        Torch's optimizer state dict, as torch's own ``state_dict()`` lays it out
        (the parameter group's keys are those of the installed torch's optimizer).

    Raises:
        ConversionError: ``optimizer`` is not an ``nnx.Optimizer`` over a
            ``tj.optim`` transformation (the message names the fix), or its state
            does not cover the model's parameters.

    Examples:
        >>> from flax import nnx
        >>> import torch
        >>> from torch2jax_device import optim
        >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        >>> optimizer = nnx.Optimizer(model, optim.SGD(lr=0.1, momentum=0.9), wrt=nnx.Param)
        >>> saved = optim.state_dict(optimizer, model)
        >>> saved["state"], saved["param_groups"][0]["momentum"], saved["param_groups"][0]["params"]
        ({}, 0.9, [0, 1])
        >>> twin = torch.nn.Linear(2, 3)
        >>> torch.optim.SGD(twin.parameters(), lr=0.5, momentum=0.9).load_state_dict(saved)
    """
    hyper, inner = _states(optimizer)
    entries = parameter_entries(model)
    torch = import_torch("tj.optim.state_dict")
    group = _torch_group(type(inner), hyper, _options(optimizer))
    del group["params"]  # last, as torch packs it
    group["lr"] = exact_lr(optimizer, optimizer.opt_state.hyperparams["learning_rate"])
    if optimizer in _INITIAL_LRS:  # a scheduler was made for it, as torch's group says
        group["initial_lr"] = _INITIAL_LRS[optimizer]
    group["params"] = list(range(len(entries)))
    state: dict[int, dict[str, Any]] = {}
    keys = _torch_keys(inner, hyper)
    steps = _flat(inner[0])
    buffers = {key: _flat(getattr(inner, key)) for key in keys}
    for index, entry in enumerate(entries):
        if entry.name not in steps:  # left out of the optimizer (wrt=): torch's frozen one
            continue
        step = float(_value(steps[entry.name]))
        if step == 0 or not keys:  # torch keeps no state for a parameter before its step
            continue
        state[index] = {}
        if not isinstance(inner, SGDState):
            state[index]["step"] = torch.tensor(step)
        for key, flat in buffers.items():
            state[index][key] = in_torch_layout(entry, _value(_own(flat, key, entry.name)))
    return {"state": state, "param_groups": [group]}


def load_state_dict(optimizer: Any, model: Any, saved: Mapping[str, Any]) -> None:
    """Equivalent to `torch.optim.Optimizer.load_state_dict`.

    Puts a torch optimizer's state dict (``torch.load(path)["optimizer"]``, or one
    [`state_dict`][torch2jax_device.optim.state_dict] wrote) into an ``nnx.Optimizer``
    over ``tj.optim.SGD``, ``Adam``, ``AdamW`` or ``RMSprop``, in place. Buffers go to the
    parameter at the same index of the model's twin (``twin.parameters()`` order),
    transposed from the twin's layout and placed where the optimizer's state is; the
    parameter group's hyperparameters (the learning rate included) replace the
    optimizer's, as torch's ``load_state_dict`` replaces them. Tensors come from
    torch, NumPy or ``tj.load`` (JAX arrays).

    Args:
        optimizer: The ``nnx.Optimizer``.
        model: The NNX model it optimizes.
        saved: ``{"state": {...}, "param_groups": [...]}``.

    Raises:
        StateDictError: ``saved`` is not an optimizer state dict, has several
            parameter groups or another number of parameters than the model (torch's
            ``ValueError``), is another optimizer's (Adam's into SGD), or a buffer's
            shape differs from its parameter's (named). A ``RuntimeError`` and a
            `tj.CheckpointError`.
        UnsupportedOperationError: ``amsgrad`` or ``maximize`` is set.
        ConversionError: ``optimizer`` is not an ``nnx.Optimizer`` over a
            ``tj.optim`` transformation.

    Examples:
        >>> from flax import nnx
        >>> import torch
        >>> from torch2jax_device import optim
        >>> twin = torch.nn.Linear(2, 3)
        >>> torch_optimizer = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
        >>> twin(torch.ones(1, 2)).sum().backward()
        >>> torch_optimizer.step()
        >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        >>> optimizer = nnx.Optimizer(model, optim.SGD(lr=0.5, momentum=0.5), wrt=nnx.Param)
        >>> optim.load_state_dict(optimizer, model, torch_optimizer.state_dict())
        >>> float(optimizer.opt_state.hyperparams["momentum"][...])
        0.8999999761581421
        >>> optimizer.opt_state.inner_state.momentum_buffer["kernel"][...].tolist()
        [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """
    _, inner = _states(optimizer)
    entries = parameter_entries(model)
    group, per_parameter = _checked(saved, type(inner), len(entries))
    options = _options(optimizer)
    if bool(group.get("amsgrad", False)) != bool(options.get("amsgrad", False)):
        raise StateDictError(
            f"the checkpoint's optimizer has amsgrad={bool(group.get('amsgrad'))} and this "
            f"one amsgrad={bool(options.get('amsgrad'))}: amsgrad shapes the state (its "
            f"max_exp_avg_sq), so build tj.optim.{_KINDS[type(inner)]}(..., "
            f"amsgrad={bool(group.get('amsgrad'))}) to resume it"
        )
    hyper = _hyperparameters(type(inner), group)
    for name, value in hyper.items():
        _set(optimizer.opt_state.hyperparams[name], value)
    options.update(
        (name, group[name]) for name in _KERNEL_CHOICES if name in options and name in group
    )
    if "initial_lr" in group:  # torch keeps the loaded group's, for schedulers made next
        _INITIAL_LRS[optimizer] = float(group["initial_lr"])
    _EXACT_LRS[optimizer] = float(group["lr"])
    keys = _torch_keys(inner, hyper)
    flats = {key: _flat(getattr(inner, key)) for key in keys}
    steps = _flat(inner[0])
    loaded: list[tuple[Any, Any]] = []  # (variable, value): all checked first, then set
    counts: list[float] = []
    for index, entry in enumerate(entries):
        values = per_parameter.get(index) or {}
        if entry.name not in steps:
            if values:
                raise StateDictError(
                    f"the checkpoint has optimizer state for parameter {index} "
                    f"({shown(entry.torch_name or entry.name)}), which this optimizer does "
                    "not hold (its wrt= leaves it out): build nnx.Optimizer(model, tx, "
                    "wrt=nnx.Param) to resume it"
                )
            continue
        for key in keys:
            if values and values.get(key) is None:
                raise StateDictError(f"optimizer state of parameter {index} has no {key!r}")
            variable = _own(flats[key], key, entry.name)
            if not values:  # not stepped in the saved run: it starts afresh, as in torch
                loaded.append((variable, np.zeros(np.shape(_value(variable)), np.float32)))
                continue
            where = f"the optimizer state's {key} of parameter {index}"
            value = from_torch_layout(where, entry.torch_name or entry.name, values[key], entry)
            loaded.append((variable, value))
        counts.append(_saved_step(index, values, isinstance(inner, SGDState)))
        loaded.append((_own(steps, "step", entry.name), counts[-1]))
    for variable, value in loaded:
        _set(variable, value)
    most = 0.0 if isinstance(inner, SGDState) else max(counts, default=0.0)
    if most:  # updates so far, as optax and nnx count them (torch's SGD keeps no count)
        _set(optimizer.opt_state.count, int(most))
        if hasattr(optimizer, "step"):
            _set(optimizer.step, int(most))


def _saved_step(index: int, values: Mapping[str, Any], sgd: bool) -> float:
    """Parameter ``index``'s step in a torch state dict: SGD keeps none (a buffer means
    it stepped), Adam and RMSprop keep it per parameter."""
    if not values:
        return 0.0
    if sgd:
        return 1.0
    if "step" not in values:
        raise StateDictError(f"optimizer state of parameter {index} has no 'step'")
    step = float(np.asarray(_host(values["step"])))
    if not (step >= 0 and step.is_integer()):
        raise StateDictError(
            f"optimizer state of parameter {index} has step {step}: a count of updates "
            "(0, 1, 2, ...) is expected"
        )
    return step


def _own(flat: Mapping[str, Any], key: str, name: str) -> Any:
    """The optimizer state's ``key`` for parameter ``name``, or the library's error."""
    if name not in flat:
        raise ConversionError(
            f"the optimizer's state has no {key} for {name!r}: build "
            "nnx.Optimizer(model, tx, wrt=nnx.Param) over this model"
        )
    return flat[name]


#: Each optimizer's ``initial_lr``, which torch keeps in its parameter group once a
#: scheduler is made for it (``group.setdefault("initial_lr", group["lr"])``) and which
#: ``Scheduler(optimizer, ..., last_epoch=N)`` needs to resume: an optax state has no
#: place for it, so it is kept beside the optimizer.
_INITIAL_LRS: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def initial_lr(optimizer: Any, lr: float | None = None) -> float | None:
    """torch's ``group.setdefault("initial_lr", group["lr"])``: the rate a scheduler made
    for ``optimizer`` starts from (a loaded checkpoint's, else ``lr``); with no ``lr``,
    the one kept, or None (torch's ``KeyError`` on resuming with ``last_epoch``)."""
    if lr is None:
        return _INITIAL_LRS.get(optimizer)
    return _INITIAL_LRS.setdefault(optimizer, lr)


#: The learning rate as torch's parameter group holds it (a Python float) where it was
#: last set exactly (a checkpoint's group, a scheduler's step): the optax state holds it
#: in float32, so a scheduler that scales it and a state dict that saves it read this
#: one while the state still holds its float32.
_EXACT_LRS: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def exact_lr(optimizer: Any, variable: Any) -> float:
    """``optimizer``'s learning rate, held in ``variable``, as torch's group holds it: the
    float last set exactly where the state still holds it, else the state's value (the
    shortest decimal of its float32, as ``hyperparameter`` gives it)."""
    held = np.float32(_value(variable))
    exact = _EXACT_LRS.get(optimizer)
    if exact is not None and np.float32(exact) == held:
        return exact
    return hyperparameter(variable)


def set_exact_lr(optimizer: Any, lr: float) -> None:
    """Keep ``lr`` as ``optimizer``'s exact learning rate (the caller sets the state's)."""
    _EXACT_LRS[optimizer] = lr


def _states(optimizer: Any) -> tuple[dict[str, float], Any]:
    """The hyperparameters (as floats) and the inner state of a ``tj.optim`` optimizer."""
    opt_state = getattr(optimizer, "opt_state", None)
    inner = getattr(opt_state, "inner_state", None)
    if opt_state is None or type(inner) not in _KINDS:
        held = type(opt_state if inner is None else inner).__name__
        raise ConversionError(
            f"expected an nnx.Optimizer over tj.optim.SGD, Adam, AdamW or RMSprop, not a "
            f"{type(optimizer).__name__} holding {held}: build it as nnx.Optimizer(model, "
            "tj.optim.SGD(lr=..., momentum=...), wrt=nnx.Param), whose state holds "
            "torch's buffers and hyperparameters"
        )
    hyper = {name: hyperparameter(value) for name, value in opt_state.hyperparams.items()}
    return hyper, inner


#: Torch's kernel choices: in the parameter group, changing no number.
_KERNEL_CHOICES = ("foreach", "fused", "capturable", "differentiable")


def _options(optimizer: Any) -> dict[str, Any]:
    """The torch options a ``tj.optim`` transformation keeps beside its state (its kernel
    choices and ``amsgrad``), as ``_with_params`` left them on its ``init``."""
    init = getattr(getattr(optimizer, "tx", None), "init", None)
    options: dict[str, Any] = getattr(init, "torch_options", {})
    return options


def _torch_group(kind: type, hyper: dict[str, float], options: Mapping[str, Any]) -> dict[str, Any]:
    """The parameter group torch's own optimizer of ``kind`` has with ``hyper``: torch's
    keys in torch's order, from a torch optimizer made with the kernel choices alone (so
    a value torch's constructor would refuse, such as a rate a scheduler took a hair
    below 0, is written as it is, as torch's own group holds it)."""
    torch = import_torch("tj.optim.state_dict")
    values: dict[str, Any] = {"lr": hyper["learning_rate"]}
    if kind is SGDState:
        maker = torch.optim.SGD
        values.update(
            momentum=hyper["momentum"], dampening=hyper["dampening"],
            weight_decay=hyper["weight_decay"], nesterov=bool(hyper["nesterov"]),
        )  # fmt: skip
    elif kind is AdamState:
        maker = torch.optim.Adam
        values.update(
            betas=(hyper["beta1"], hyper["beta2"]), eps=hyper["eps"],
            weight_decay=hyper["weight_decay"],
            decoupled_weight_decay=bool(hyper["decoupled_weight_decay"]),
        )  # fmt: skip
    else:
        maker = torch.optim.RMSprop
        values.update(
            alpha=hyper["alpha"], eps=hyper["eps"], weight_decay=hyper["weight_decay"],
            momentum=hyper["momentum"], centered=bool(hyper["centered"]),
        )  # fmt: skip
    values["maximize"] = bool(hyper.get("maximize", 0.0))
    group: dict[str, Any] = maker([torch.zeros(1)], **options).state_dict()["param_groups"][0]
    group.update(values)
    return group


def _checked(
    saved: Any, kind: type, count: int
) -> tuple[Mapping[str, Any], Mapping[int, Mapping[str, Any]]]:
    """The one parameter group and the per-parameter state of ``saved``, checked."""
    if not (isinstance(saved, Mapping) and {"state", "param_groups"} <= set(saved)):
        keys = list(saved)[:6] if isinstance(saved, Mapping) else type(saved).__name__
        raise StateDictError(
            f"an optimizer state dict has 'state' and 'param_groups' (torch's "
            f"optimizer.state_dict()), this holds {shown(keys)}; for a whole checkpoint, "
            "pass the entry that holds the optimizer's, e.g. checkpoint['optimizer']"
        )
    groups = saved["param_groups"]
    if len(groups) != 1:
        raise StateDictError(
            f"the optimizer state dict has {len(groups)} parameter groups; tj.optim "
            "optimizers hold one. Give each group its own optax transformation "
            "(optax.multi_transform) and load each group's state into it"
        )
    (group,) = groups
    if len(group["params"]) != count:
        raise StateDictError(
            f"loaded state dict contains a parameter group that doesn't match the size of "
            f"optimizer's group: {len(group['params'])} parameters saved, the model has "
            f"{count} (torch raises ValueError here)"
        )
    saved_kind = "Adam" if "betas" in group else "RMSprop" if "alpha" in group else "SGD"
    if saved_kind != _KINDS[kind]:
        raise StateDictError(
            f"this is a torch {saved_kind} state dict and the optimizer is tj.optim."
            f"{_KINDS[kind]}: build the optimizer the checkpoint was written by "
            f"(tj.optim.{saved_kind})"
        )
    order = {torch_index: position for position, torch_index in enumerate(group["params"])}
    state = saved["state"]
    return group, {order[index]: values for index, values in state.items() if index in order}


def _hyperparameters(kind: type, group: Mapping[str, Any]) -> dict[str, float]:
    if kind is SGDState:
        return {
            "learning_rate": group["lr"], "momentum": group["momentum"],
            "dampening": group["dampening"], "weight_decay": group["weight_decay"],
            "nesterov": float(group["nesterov"]), "maximize": float(group.get("maximize", False)),
        }  # fmt: skip
    if kind is RMSpropState:
        return {
            "learning_rate": group["lr"], "alpha": group["alpha"], "eps": group["eps"],
            "weight_decay": group["weight_decay"], "momentum": group["momentum"],
            "centered": float(group["centered"]), "maximize": float(group.get("maximize", False)),
        }  # fmt: skip
    return {
        "learning_rate": group["lr"], "beta1": group["betas"][0], "beta2": group["betas"][1],
        "eps": group["eps"], "weight_decay": group["weight_decay"],
        "decoupled_weight_decay": float(group.get("decoupled_weight_decay", False)),
        "maximize": float(group.get("maximize", False)),
    }  # fmt: skip


def _flat(tree: Any) -> dict[str, Any]:
    """A state tree's variables (or arrays) by dotted path, the names ``Entry`` has."""
    nnx = sys.modules["flax.nnx"]
    if isinstance(tree, nnx.State):
        return {".".join(map(str, path)): leaf for path, leaf in nnx.to_flat_state(tree)}
    pairs = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_variable)[0]
    return {".".join(_key(key) for key in path): leaf for path, leaf in pairs}


def _key(key: Any) -> str:
    for attribute in ("name", "key", "idx"):
        if hasattr(key, attribute):
            return str(getattr(key, attribute))
    return str(key)


def _is_variable(value: Any) -> bool:
    return hasattr(value, "get_value") and hasattr(value, "set_value")


def hyperparameter(leaf: Any) -> float:
    """A hyperparameter of an optax state as the Python float it was set from.

    The state holds float32 (``0.1`` as ``0.10000000149``); torch's param groups hold
    Python floats. The shortest decimal that is the same float32 is the one given.

    Examples:
        >>> import jax.numpy as jnp
        >>> from torch2jax_device import optim
        >>> float(jnp.float32(0.1)), optim.hyperparameter(jnp.float32(0.1))
        (0.10000000149011612, 0.1)
    """
    return float(str(np.float32(_value(leaf))))


def _value(leaf: Any) -> Any:
    return leaf.get_value() if _is_variable(leaf) else leaf


def _host(value: Any) -> Any:
    return value.detach().cpu().numpy() if is_torch_tensor(value) else value


def _set(variable: Any, value: Any) -> None:
    """``variable``'s value replaced by ``value``, in its dtype and where it is."""
    if not _is_variable(variable):
        raise ConversionError(
            "the optimizer's state cannot be changed in place: pass the nnx.Optimizer "
            "itself (its state is held in variables)"
        )
    current = variable.get_value()
    if isinstance(current, jax.Array) and not current.committed:
        # Left uncommitted (nnx's step, optax's count): a jitted step places it beside the
        # parameters, on every process's devices; committing it here would pin it to one.
        variable.set_value(jnp.asarray(np.asarray(_host(value), current.dtype)))
        return
    variable.set_value(placed_like(_host(value), current, "the optimizer state"))


def _no_parameters(function: str, params: tuple[Any, ...], unknown: Mapping[str, Any]) -> None:
    """Torch's call shape, ``SGD(model.parameters(), lr=...)``, refused with the fix, and
    a keyword torch's optimizer does not take (torch's ``TypeError``) named."""
    if params:
        raise ArgumentTypeError(
            f"tj.optim.{function} takes its hyperparameters by keyword and no parameters: "
            f"pass the model to nnx.Optimizer(model, tj.optim.{function}(lr=...), "
            "wrt=nnx.Param), which pairs the two"
        )
    if unknown:
        name = next(iter(unknown))
        raise ArgumentTypeError(
            f"tj.optim.{function} got an unexpected keyword argument {name!r} (as torch's "
            f"{function}, which raises TypeError): it takes the keywords of "
            f"torch.optim.{function}; remove {name}={unknown[name]!r}"
        )


def _number(function: str, name: str, value: Any) -> float:
    """``value`` as a float where torch takes it as a number (a bool, an int, a NumPy
    number); else the library's ``TypeError`` naming it."""
    if not isinstance(value, numbers.Real):
        raise ArgumentTypeError(
            f"{function}: {name} must be a number, not {type(value).__name__} {value!r} "
            "(torch raises TypeError comparing it with 0)"
        )
    return float(value)


#: How torch's messages name each hyperparameter ("Invalid learning rate: -1").
_LABELS = {
    "lr": "learning rate",
    "eps": "epsilon value",
    "momentum": "momentum value",
    "weight_decay": "weight_decay value",
    "alpha": "alpha value",
}


def _at_least_zero(function: str, name: str, value: Any, *, nan: bool = False) -> float:
    """``value`` as a float, refused where torch refuses it: below 0, and NaN unless
    ``nan`` (torch's SGD checks ``value < 0``, which NaN passes; the others
    ``not 0.0 <= value``, which it fails)."""
    number = _number(function, name, value)
    if number < 0 or (math.isnan(number) and not nan):
        raise ConfigError(
            f"Invalid {_LABELS[name]}: {value} (torch's ValueError): tj.optim.{function} "
            f"needs {name} >= 0"
        )
    return number


def _kernel_options(function: str, **options: Any) -> dict[str, Any]:
    """Torch's kernel choices (``foreach``, ``fused``, ``capturable``, ``differentiable``),
    which change no number here, checked as torch checks them and kept for the state
    dict's parameter group; ``amsgrad`` (which shapes the state) rides with them."""
    if options.get("fused"):
        for other in ("differentiable", "foreach"):
            if options.get(other):
                raise UnsupportedOperationError(
                    f"tj.optim.{function}: fused=True and {other}=True cannot be set together "
                    "(torch's RuntimeError); set one of them"
                )
    return {
        name: value if value is None or name in ("foreach", "fused") else bool(value)
        for name, value in options.items()
    }


def _optax() -> Any:
    import optax  # type: ignore[import-untyped]

    return optax
