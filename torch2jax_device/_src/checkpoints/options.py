"""The arguments safetensors' verbs share, checked the same way on every path.

``device`` (``None`` means the CPU, as in safetensors), ``framework`` (accepted, never
obeyed: the results are JAX arrays), ``backend`` and ``staging_bytes``; and the options
of torch's ``load_state_dict`` that ``tj.load_state`` does not take.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import Any

import jax

from ..device import DeviceLike, resolve
from ..errors import ArgumentTypeError, CheckpointError, InvalidDeviceError, StateDictError
from ..truth import truth
from .messages import shown
from .source import PathLike

__all__ = [
    "check_framework",
    "check_state_dict_options",
    "checked_staging",
    "maps_file",
    "refuse_torch_options",
    "resolve_target",
]

# safetensors.safe_open's framework argument: every value it accepts, and its aliases.
_FRAMEWORKS = frozenset(
    {"pt", "torch", "np", "numpy", "flax", "jax", "tf", "tensorflow", "mlx", "paddle"}
)
# safetensors' backend argument: "mmap" maps the file, "pread" reads it.
_BACKENDS = ("mmap", "pread")


def resolve_target(device: DeviceLike | None) -> jax.Device:
    """Where a loader puts its arrays: ``device``, with ``None`` meaning the CPU."""
    return resolve("cpu" if device is None else device)


def check_framework(path: PathLike, framework: Any) -> None:
    """Refuse a ``framework`` safetensors does not know (often a device in its place)."""
    if framework is not None and not (isinstance(framework, str) and framework in _FRAMEWORKS):
        raise InvalidDeviceError(
            f"safe_open({shown(os.fspath(path))}, {shown(framework)}): the second argument "
            f"is safetensors' framework ({', '.join(sorted(_FRAMEWORKS))}), and "
            "tj.safe_open always returns JAX arrays. To choose where they go, pass "
            f"device={shown(framework)}"
        )


def maps_file(backend: str) -> bool:
    """Whether ``backend`` (safetensors' argument) allows arrays over a memory map."""
    if not (isinstance(backend, str) and backend in _BACKENDS):
        raise InvalidDeviceError(
            f"backend={shown(backend)} is not one of safetensors' backends: 'mmap' maps "
            "the file (the default), 'pread' reads it into memory the arrays own"
        )
    return backend == "mmap"


def checked_staging(staging_bytes: int) -> int:
    """``staging_bytes``, if it is a positive number of bytes."""
    if type(staging_bytes) is not int or staging_bytes < 1:
        raise CheckpointError(
            f"staging_bytes={shown(staging_bytes)}: give the host memory for staging "
            "transfers as a positive number of bytes (256 * 2**20 by default)"
        )
    return staging_bytes


def refuse_torch_options(strict: object, assign: object) -> None:
    """``load_state_dict``'s ``strict=False`` and ``assign=True``, refused with the fix
    (not Python's "unexpected keyword argument")."""
    for name, value in (("strict", strict), ("assign", assign)):
        if not isinstance(value, bool):
            raise ArgumentTypeError(
                f"tj.load_state(model, state_dict, strict, assign): {name} (torch's, in "
                f"load_state_dict's order) must be True or False, not {type(value).__name__} "
                f"{shown(value)}. Fix: pass a device by keyword, device={shown(value)} (the "
                "third argument is strict, as torch's), else leave it out"
            )
    if strict is False:
        raise StateDictError(
            "load_state(model, state, strict=False): a partial load (torch loads the names "
            "both hold and returns the missing and unexpected ones) is not supported; tj "
            "loads a whole state and changes nothing on a mismatch. Fix: load the part into "
            "the sub-module it belongs to (tj.load_state(model.backbone, {name.removeprefix("
            "'backbone.'): value for name, value in state.items() if name.startswith("
            "'backbone.')})), or drop the names the model lacks and keep strict=True."
        )
    raise StateDictError(
        "load_state(model, state, assign=True): torch's assign keeps the state's tensors as "
        "they are (their dtype and device) in place of the model's; tj casts and places "
        "each value where the model's is. Fix: copy=False shares the source's memory where "
        "no cast or transfer stands between them; load onto an abstract model "
        "(nnx.eval_shape) to take the arrays where they are."
    )


def check_state_dict_options(destination: object, prefix: object, keep_vars: object) -> None:
    """``Module.state_dict``'s keywords, as ``tj.state_dict`` takes them: ``destination``
    ``None`` or a dict to fill, ``prefix`` a string, ``keep_vars`` a flag (read, and
    nothing to do: the values are arrays either way)."""
    truth("tj.state_dict()", "keep_vars", keep_vars)
    if not isinstance(prefix, str):
        raise ArgumentTypeError(
            f"tj.state_dict(): prefix must be a str, not {type(prefix).__name__} "
            f"{shown(prefix)}. Fix: pass the text to put before every name, e.g. prefix='model.'"
        )
    if destination is not None and not isinstance(destination, MutableMapping):
        raise ArgumentTypeError(
            f"tj.state_dict(): destination must be None or a dict to fill, not "
            f"{type(destination).__name__} {shown(destination)}. Fix: pass destination={{}} "
            "(or an OrderedDict), or leave it out"
        )
