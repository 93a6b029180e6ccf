"""torch's legacy tensor types asked of a value (round 9's development set: a PPO
implementation's vectorised environments), section "Creation".

``isinstance(actions, torch.LongTensor)`` is true for an int64 tensor on the CPU only
(a CUDA one is a ``torch.cuda.LongTensor``), so the test asks for a dtype and a device at
once (``cuda-tensor-type``). A JAX array is a ``jax.Array`` of some dtype, on the device
``tj.device_of`` names: the advice tests both.
"""

from __future__ import annotations

import ast

from .base import Recogniser

__all__ = ["legacy_type_tested"]

# The legacy types -> the dtype each holds.
_DTYPES = {
    "FloatTensor": "jnp.float32",
    "DoubleTensor": "jnp.float64",
    "HalfTensor": "jnp.float16",
    "BFloat16Tensor": "jnp.bfloat16",
    "ByteTensor": "jnp.uint8",
    "CharTensor": "jnp.int8",
    "ShortTensor": "jnp.int16",
    "IntTensor": "jnp.int32",
    "LongTensor": "jnp.int64",
    "BoolTensor": "jnp.bool_",
}


def legacy_type_tested(r: Recogniser, call: ast.Call) -> None:
    """``cuda-tensor-type``: ``isinstance(x, torch.LongTensor)``, the type alone or in a
    tuple of types, ``torch.cuda.FloatTensor`` alike; reported on the type."""
    if r.file.values.builtin(call.func) != "isinstance" or len(call.args) != 2:
        return
    value, types = call.args
    listed = types.elts if isinstance(types, ast.Tuple) else [types]
    for kind in listed:
        name = r.qualname(kind) or ""
        package, _, short = name.rpartition(".")
        if package not in ("torch", "torch.cuda") or short not in _DTYPES or id(kind) in r.reported:
            continue
        where = '"cuda"' if package == "torch.cuda" else '"cpu"'
        r.add(
            kind,
            "cuda-tensor-type",
            f"isinstance({r.text(value)}, jax.Array) and {r.text(value)}.dtype == "
            f"{_DTYPES[short]} and tj.device_of({r.text(value)}).type == {where}  # {name}: "
            "a dtype and a device at once (int64 and float64 need jax_enable_x64)",
        )
