"""DLPack exchanges between torch and JAX (rows ``tensor-to-jax`` and ``jax-to-tensor``).

``jax.dlpack.from_dlpack(t)`` and ``jnp.from_dlpack(t)`` become ``tj.to_jax(t)``, and
``torch.from_dlpack(x)`` becomes ``tj.to_torch(x)``; the DLPack capsules of older code
(``torch.utils.dlpack.to_dlpack``, ``jax.dlpack.to_dlpack``) are reported with the call
that consumes them, as one exchange.

Only ``torch.from_dlpack(x)`` of an ``x`` known to be a JAX array is rewritten: there
``tj.to_torch`` is the same DLPack import (device, dtype and shared memory). The other
forms differ on some inputs (other frameworks' arrays, capsules, tensors with their
negative bit set), which the scanner cannot rule out, so they are findings to port by hand.
"""

from __future__ import annotations

import ast

from .._rewrites import Rewrite
from .._tables import DLPACK
from .._values import JAX_ARRAY
from .base import Recogniser

__all__ = ["exchange"]

_TO_JAX_REASON = (
    "tj.to_jax takes torch tensors, NumPy and JAX arrays, not other DLPack exporters "
    "(CuPy, TensorFlow, capsules); on a tensor it matches jax.dlpack except where DLPack "
    "misreads or refuses it (a negative bit, whose signs DLPack drops, is resolved; a "
    "tensor that requires grad, a strided or conjugate one is copied): port it by hand"
)
_TO_TORCH_REASON = (
    "torch.from_dlpack also takes capsules and other DLPack exporters, which tj.to_torch "
    "refuses; rename it by hand where the argument is a JAX array"
)
_OPTIONS_REASON = (
    "given more than the array (device=, copy=, stream=, take_ownership=...), which the "
    "tj call does not take alike: port it by hand"
)
# The capsule makers (the rest of DLPACK imports), and why their exchange is not renamed.
_CAPSULES = {
    "torch.utils.dlpack.to_dlpack": (
        "a DLPack capsule, which jax.dlpack.from_dlpack no longer takes (JAX 0.10): hand "
        "the tensor itself to tj.to_jax"
    ),
    "jax.dlpack.to_dlpack": (
        "jax.dlpack.to_dlpack is gone from JAX (0.10): hand the array itself to tj.to_torch"
    ),
}


def exchange(r: Recogniser, node: ast.expr, name: str, call: ast.Call | None) -> bool:
    """Report a DLPack exchange named ``name``; ``True`` if ``name`` is one."""
    if name not in DLPACK:
        return False
    row, tj_name = DLPACK[name]
    if call is None:
        r.add(node, row, tj_name, reason="a reference, not a call: port it by hand")
    elif name in _CAPSULES:
        r.add(call, row, f"{tj_name}({r.arguments(call)})", reason=_CAPSULES[name])
    else:
        _import_call(r, call, name)
    return True


def _import_call(r: Recogniser, call: ast.Call, name: str) -> None:
    """``jax.dlpack.from_dlpack(...)`` / ``torch.from_dlpack(...)``, with the capsule its
    argument makes (``from_dlpack(to_dlpack(t))``) as part of the one finding."""
    row, tj_name = DLPACK[name]
    options = _has_options(call)
    source = call.args[0] if call.args else None
    capsule = _capsule(r, source)
    if capsule is not None:
        r.reported.add(id(capsule.func))  # one finding for the exchange
        options = options or _has_options(capsule)
        source = capsule.args[0] if capsule.args else None
    shown = r.arguments(call) if source is None else r.text(source)
    replacement = f"{tj_name}({shown})"
    if options or source is None:
        r.add(call, row, replacement, reason=_OPTIONS_REASON)
        return
    if row == "tensor-to-jax":
        r.add(call, row, replacement, reason=_TO_JAX_REASON)
        return
    from_jax = capsule is not None and r.qualname(capsule.func) == "jax.dlpack.to_dlpack"
    if not from_jax and r.file.values.kinds(source) != {JAX_ARRAY}:
        r.add(call, row, replacement, reason=_TO_TORCH_REASON)
        return
    start, end = r.file.span(call)
    r.add(
        call,
        row,
        replacement,
        rewrite=Rewrite(start, end, (f"{tj_name}(", r.file.span(source), ")")),
        call=call,
        tj_name=tj_name,
        subject=call,
    )


def _has_options(call: ast.Call) -> bool:
    """More than the one array: ``device=``, ``copy=``, ``take_ownership=``..."""
    return len(call.args) != 1 or bool(call.keywords) or isinstance(call.args[0], ast.Starred)


def _capsule(r: Recogniser, node: ast.expr | None) -> ast.Call | None:
    """``node`` if it is a call making a DLPack capsule (``to_dlpack(t)``)."""
    if isinstance(node, ast.Call) and r.qualname(node.func) in _CAPSULES:
        return node
    return None
