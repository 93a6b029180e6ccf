"""A dtype written by name means what torch means by it.

Ported code writes torch's dtypes as strings too (``dtype="cfloat"`` in a config). For
every name torch gives a dtype (``torch.cfloat``, ``torch.half``, ``torch.long``...),
``tj.to_device(x, dtype=name)`` must give what ``dtype=torch.<name>`` gives (narrowed
as JAX narrows without x64), or the same ``tj.DTypeError`` where JAX has no such dtype.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torch2jax_device as tj

NAMES = sorted(name for name in dir(torch) if isinstance(getattr(torch, name), torch.dtype))


def _outcome(dtype: object) -> str:
    try:
        return str(tj.to_device(np.zeros(1, np.float32), dtype=dtype).dtype)
    except tj.DTypeError:
        return "DTypeError"


@pytest.mark.filterwarnings("ignore::torch2jax_device.DtypeNarrowingWarning")
@pytest.mark.filterwarnings("ignore::torch2jax_device.ComplexCastWarning")
@pytest.mark.parametrize("name", NAMES)
def test_a_torch_dtype_name_means_torchs_dtype(name: str) -> None:
    assert _outcome(name) == _outcome(getattr(torch, name))


def test_the_names_include_torchs_aliases() -> None:
    assert {"cfloat", "cdouble", "half", "long", "chalf", "float"} <= set(NAMES)
