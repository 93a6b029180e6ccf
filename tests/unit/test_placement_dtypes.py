"""``ComparableDtype``: a NumPy dtype for JAX and NumPy in every use (torch's side is in
tests/parity/test_audit_round5.py)."""

from __future__ import annotations

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from torch2jax_device._src.dtypes import ComparableDtype, comparable


@pytest.mark.parametrize("name", ["float32", "bfloat16", "int8", "bool", "complex64"])
def test_it_is_the_dtype_for_numpy_and_jax(name: str) -> None:
    plain = jnp.dtype(name)
    dtype = ComparableDtype(plain)
    assert dtype == plain and dtype == name and plain == dtype and not (dtype != plain)
    assert hash(dtype) == hash(plain) and {plain: 1}[dtype] == 1
    assert np.dtype(dtype) == plain and jnp.dtype(dtype) == plain
    assert jnp.zeros(2, dtype).dtype == plain and np.zeros(2, dtype).dtype == plain
    assert jnp.ones(2).astype(dtype).dtype == plain
    assert jax.ShapeDtypeStruct((2,), dtype).dtype == plain
    assert (dtype.itemsize, dtype.kind, dtype.name) == (plain.itemsize, plain.kind, plain.name)
    assert str(dtype) == str(plain) and repr(dtype) == repr(plain)
    assert pickle.loads(pickle.dumps(dtype)) == plain
    assert jnp.issubdtype(dtype, jnp.inexact) == jnp.issubdtype(plain, jnp.inexact)


def test_it_is_immutable_and_a_key_dtype_stays_as_it_is() -> None:
    with pytest.raises(AttributeError):
        ComparableDtype(np.float32).name = "x"  # type: ignore[misc]
    key_dtype = jax.random.key(0).dtype
    assert comparable(key_dtype) is key_dtype
