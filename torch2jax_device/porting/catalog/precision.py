"""Catalog rows, section "Precision": Mixed precision."""

from __future__ import annotations

from ..idiom import Idiom

SECTION = "Precision"

ROWS: tuple[Idiom, ...] = (
    Idiom(
        id="autocast",
        section=SECTION,
        title="Mixed precision on a device",
        torch=('with torch.autocast(device_type="cuda", dtype=torch.bfloat16):\n    y = model(x)'),
        jax="y = model(x.astype(jnp.bfloat16))  # with params cast, or Flax dtype=",
        tj=(
            "model = tj.to_device(model, jnp.bfloat16)  # floating state only\n"
            "y = model(tj.to_device(x, jnp.bfloat16))"
        ),
        notes=(
            "JAX has no autocast: computation runs in the dtype of its inputs. Cast "
            "parameters and inputs (or give Flax layers `dtype=jnp.bfloat16`, which keeps "
            "float32 parameters and computes in bfloat16)."
        ),
        runs=False,
        torch_api=(
            "torch.autocast",
            "torch.amp.autocast",
            "torch.cuda.amp.autocast",
            "torch.cpu.amp.autocast",
        ),
        rewrite="advice",
    ),
)
