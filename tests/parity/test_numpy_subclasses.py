"""NumPy array subclasses: what JAX refuses, every entry point of the library refuses.

JAX is the oracle here (torch's ``from_numpy`` drops a masked array's mask without a
word): an ``ndarray`` subclass whose conversion would lose information, such as a masked
array's mask, is refused by ``jnp.asarray``; the library's entry points must refuse it
too, with its own error naming the leaf and the fix, and take the others with JAX's
values.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import torch2jax_device as tj

SUBCLASSES: dict[str, Callable[[Path], Any]] = {
    "masked": lambda _: np.ma.masked_array([1.0, 2.0, 3.0], mask=[0, 1, 0]),
    "masked_nothing_masked": lambda _: np.ma.masked_array(np.ones(2, np.float32)),
    "matrix": lambda _: _matrix(),
    "memmap": lambda folder: _memmap(folder),
    "record_view": lambda _: np.arange(3, dtype=np.float32).view(np.recarray),
}

ENTRY_POINTS: dict[str, Callable[[Any, Path], Any]] = {
    "to_jax": lambda value, _: tj.to_jax(value),
    "to_device": lambda value, _: tj.to_device(value, "cpu"),
    "to_device_in_a_batch": lambda value, _: tj.to_device({"x": [value]}, "cpu")["x"][0],
    "pin_memory": lambda value, _: tj.pin_memory(value),
    "prefetch_to_device": lambda value, _: next(iter(tj.prefetch_to_device([value]))),
    "save_file": lambda value, folder: _saved(value, folder),
}


def _matrix() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)  # NumPy's, on creation
        return np.asmatrix(np.array([[1.0, 2.0]], np.float32))


def _memmap(folder: Path) -> np.memmap[Any, Any]:
    mapped = np.memmap(folder / "data.bin", np.float32, "w+", shape=(3,))
    mapped[:] = [1.0, 2.0, 3.0]
    return mapped


def _saved(value: Any, folder: Path) -> Any:
    path = folder / "saved.safetensors"
    tj.save_file({"x": value}, path)
    return tj.load_file(path)["x"]


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("subclass", list(SUBCLASSES))
def test_what_jax_refuses_is_refused_and_the_rest_has_jaxs_values(
    subclass: str, entry: str, tmp_path: Path
) -> None:
    value = SUBCLASSES[subclass](tmp_path)
    try:
        expected = np.asarray(jnp.asarray(value))
    except (TypeError, ValueError):
        with pytest.raises(tj.ConversionError, match=r"masked array.*Fix: arr\.filled"):
            ENTRY_POINTS[entry](value, tmp_path)
        return
    ours = ENTRY_POINTS[entry](value, tmp_path)
    assert np.asarray(ours).tolist() == expected.tolist()
    assert np.asarray(ours).dtype == expected.dtype


def test_the_error_names_the_leaf_and_the_tensor(tmp_path: Path) -> None:
    masked = SUBCLASSES["masked"](tmp_path)
    with pytest.raises(tj.ConversionError, match=r"leaf \['batch'\]\['mask'\]: a NumPy masked"):
        tj.to_device({"batch": {"mask": masked}}, "cpu")
    with pytest.raises(tj.ConversionError, match=r"tensor 'weights': a NumPy masked"):
        tj.save_file({"weights": masked}, tmp_path / "w.safetensors")
    assert not (tmp_path / "w.safetensors").exists()
