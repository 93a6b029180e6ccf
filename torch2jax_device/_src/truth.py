"""Flags read as torch reads them: ``if flag:``, with the library's error where that fails.

Torch's flags (``amsgrad``, ``nesterov``, ``copy``...) are read with ``if flag:``, so
anything with a truth value works; an array of several elements has none, and NumPy,
JAX and torch each raise their own error for it. ``truth`` reads the flag the same way
and raises [`tj.ArgumentTypeError`][torch2jax_device.ArgumentTypeError] instead, naming
the argument, the value and the fix.
"""

from __future__ import annotations

from .errors import ArgumentTypeError

__all__ = ["truth"]


def truth(where: str, name: str, value: object) -> bool:
    """``bool(value)``, or the library's error naming ``where``'s ``name`` and the value.

    Examples:
        >>> import numpy as np
        >>> truth("tj.to_jax()", "strict", 1)
        True
        >>> try:
        ...     truth("tj.to_jax()", "strict", np.ones(2))
        ... except TypeError as error:
        ...     print(str(error).split(" (")[0])
        tj.to_jax(): strict=array([1., 1.]) has no single truth value
    """
    try:
        return bool(value)
    except Exception:  # NumPy's ValueError, torch's RuntimeError, JAX's ...
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise ArgumentTypeError(
            f"{where}: {name}={shown} has no single truth value (a "
            f"{type(value).__name__} of several elements is neither True nor False). Fix: "
            f"pass {name}=True or {name}=False"
        ) from None
