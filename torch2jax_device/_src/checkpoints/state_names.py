"""Which layout a saved state's names are in, and torch's error when they match neither.

``tj.load_state`` takes a state by the model's own names (``layers.0.kernel``) or a
PyTorch twin's (``layers.0.weight``); the names tell which. A state that matches
neither raises torch's ``Missing key(s)`` / ``Unexpected key(s)`` error, with the fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ..errors import StateDictError
from .messages import shown

__all__ = ["SIZE_FIX", "layout_of"]

#: What to do about an array of another shape than the model's.
SIZE_FIX = (
    "Fix: build the model with the checkpoint's sizes (the configuration it was saved "
    "with), or replace that entry of the state with an array of the model's shape"
)


def layout_of(
    what: str, saved: Mapping[Any, Any], entries: Sequence[Any], model: Any
) -> Literal["jax", "torch"]:
    """Which layout ``saved``'s names are in, or the torch-style error listing the mismatch.

    ``entries``: the model's arrays (``module_state.Entry``: names in both layouts, what
    a twin also holds, why a layer has no torch layout).
    """
    names = set(saved)
    jax_names = {entry.name for entry in entries}
    if names == jax_names:
        return "jax"
    torch_names = {entry.torch_name for entry in entries if entry.torch_name is not None}
    extras = names & {extra for entry in entries for extra in entry.torch_extras}
    tied = {name for entry in entries for name in entry.torch_names()} - torch_names
    held_once = all(names & set(entry.torch_names()) for entry in entries)
    if len(torch_names) == len(entries) and held_once and not names - extras - torch_names - tied:
        return "torch"  # a tied weight under one of its names at least
    nested = [key for key, value in saved.items() if isinstance(value, Mapping)]
    if nested:
        raise StateDictError(
            f"{what} holds a whole checkpoint ({', '.join(map(shown, list(saved)[:6]))}), "
            f"not a state dict. Fix: pass the state dict in it, e.g. "
            f"tj.load_state(model, tj.load(path)[{shown(nested[0])}])"
        )
    # The layout the names are closer to; a tie (no name of either) reads as a twin's,
    # the names a PyTorch checkpoint holds.
    closer = jax_names if len(names ^ jax_names) < len(names ^ torch_names) else torch_names
    missing = sorted(closer - names)
    if closer is torch_names:  # a tie held under another of its names is not missing
        missing = sorted(
            entry.torch_name
            for entry in entries
            if entry.torch_name is not None and not names & set(entry.torch_names())
        )
    ties = tied if closer is torch_names else set()
    unexpected = sorted(str(name) for name in names - closer - extras - ties)
    problems = [_listed("Missing key(s)", missing), _listed("Unexpected key(s)", unexpected)]
    # A layer with no torch layout whose arrays the state names otherwise: say why.
    layers = {_layer_of(name) for name in unexpected}
    untwinned = [e for e in entries if e.no_torch and _layer_of(e.name) in layers]
    why = (
        f". {untwinned[0].no_torch}"
        + (f" (and {len(untwinned) - 1} more array(s) like it)" if len(untwinned) > 1 else "")
        if untwinned
        else ""
    )
    fix = (
        "rename the state's keys to the model's (strip a 'module.' or '_orig_mod.' prefix "
        "that DDP or torch.compile added), drop the unexpected ones, or build the model the "
        "checkpoint was saved from"
    )
    if not names & (jax_names | torch_names | tied):  # no state of this model at all
        why += (
            f". The state (a {type(saved).__name__} of {len(names)} name(s)) shares no name "
            "with the model"
        )
        fix = (
            "pass the model's state dict (tj.state_dict(model)), a checkpoint path or a "
            "loaded checkpoint"
        )
    raise StateDictError(
        f"Error(s) in loading {what} into {type(model).__name__}: "
        + "; ".join(problem for problem in problems if problem)
        + " (torch raises RuntimeError here). Names are the model's own, as tj.state_dict "
        "gives them, or a PyTorch twin's, as tj.state_dict(model, layout='torch') gives them"
        + why
        + f". Fix: {fix}"
    )


def _layer_of(name: str) -> str:
    """The dotted path of the layer holding the array named ``name``."""
    return name.rpartition(".")[0]


def _listed(title: str, names: list[str]) -> str:
    if not names:
        return ""
    quoted = ", ".join(shown(name) for name in names[:10])
    return f"{title}: {quoted}{f' and {len(names) - 10} more' if len(names) > 10 else ''}"
