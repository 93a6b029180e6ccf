"""``tj.to_device`` of trees holding ``float0`` leaves, with ``jax.device_put`` as the oracle.

``jax.grad(..., allow_int=True)`` gives an integer input a gradient of dtype ``float0``: a
NumPy array (JAX's ``TypedNdArray``) that holds no values and that no device can hold.
``jax.device_put`` gives such a leaf back as NumPy float0 data of the same shape; a ported
``grads.to(device)`` must move the rest of the tree and give that leaf back the same way.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import torch2jax_device as tj

CPU = tj.resolve("cpu")


def _grads() -> dict[str, Any]:
    """The gradients of a float weight and an integer index input."""
    params = {"w": jnp.arange(3.0), "ids": jnp.arange(3)}
    grads: dict[str, Any] = jax.grad(lambda p: p["w"] @ p["ids"], allow_int=True)(params)
    assert grads["ids"].dtype == jax.dtypes.float0
    return grads


def _assert_as_jax_gives(ours: Any, source: Any) -> None:
    """``ours`` is a float0 leaf as ``jax.device_put(source)`` gives one back."""
    theirs = jax.device_put(source, CPU)
    assert isinstance(ours, np.ndarray) and isinstance(theirs, np.ndarray)
    assert not isinstance(ours, jax.Array) and not isinstance(theirs, jax.Array)
    assert ours.dtype == theirs.dtype == jax.dtypes.float0
    assert ours.shape == theirs.shape == source.shape


@pytest.mark.parametrize(
    "target",
    ["cpu", CPU, NamedSharding(jax.make_mesh((1,), ("data",), devices=[CPU]), P())],
    ids=["name", "device", "sharding"],
)
@pytest.mark.parametrize("non_blocking", [False, True])
def test_a_tree_with_float0_leaves_moves(target: Any, non_blocking: bool) -> None:
    grads = _grads()
    moved = tj.to_device(grads, target, non_blocking=non_blocking)
    assert list(moved) == list(grads)
    assert moved["w"].devices() == {CPU} and moved["w"].committed
    np.testing.assert_array_equal(np.asarray(moved["w"]), np.arange(3))
    assert moved["ids"] is grads["ids"]  # no data, nothing to move: the leaf itself
    _assert_as_jax_gives(moved["ids"], grads["ids"])


def test_a_lone_float0_array_moves_and_so_does_a_plain_numpy_one() -> None:
    made_by_hand = np.zeros((2, 3), jax.dtypes.float0)  # how JAX's docs build float0 tangents
    for leaf in (_grads()["ids"], made_by_hand, made_by_hand[0, 0]):
        moved = tj.to_device(leaf, "cpu")
        assert moved is leaf
        assert moved.dtype == jax.dtypes.float0 and moved.shape == np.shape(leaf)


def test_copy_true_gives_a_new_float0_leaf() -> None:
    grads = _grads()
    copied = tj.to_device(grads, "cpu", copy=True)
    assert copied["ids"] is not grads["ids"]
    assert type(copied["ids"]) is type(grads["ids"])  # JAX's TypedNdArray stays one
    _assert_as_jax_gives(copied["ids"], grads["ids"])


def test_a_dtype_casts_the_floating_leaves_and_keeps_float0() -> None:
    grads = _grads()
    for moved in (tj.to_device(grads, jnp.bfloat16), tj.to_device(grads, "cpu", jnp.bfloat16)):
        assert moved["w"].dtype == jnp.bfloat16
        assert moved["ids"] is grads["ids"]


def test_casting_a_lone_float0_array_is_refused_with_the_fix() -> None:
    with pytest.raises(tj.DTypeError, match=r"float0 array.*holds no values.*np\.zeros\(x\.shape"):
        tj.to_device(_grads()["ids"], jnp.float16)
    assert tj.to_device(_grads()["ids"], jax.dtypes.float0).dtype == jax.dtypes.float0


def test_pinning_a_tree_with_float0_leaves() -> None:
    grads = _grads()
    pinned = tj.pin_memory(grads)
    assert pinned["w"].sharding.memory_kind == "pinned_host"
    assert pinned["ids"] is grads["ids"]


def test_optax_updates_of_a_model_with_integer_state_move_and_apply() -> None:
    optax = pytest.importorskip("optax")
    params = {"w": jnp.arange(3.0), "ids": jnp.arange(3)}
    grads = jax.grad(lambda p: p["w"] @ p["ids"], allow_int=True)(params)
    optimizer = optax.masked(optax.sgd(0.5), {"w": True, "ids": False})
    updates, _ = optimizer.update(grads, optimizer.init(params), params)
    moved = tj.to_device(updates, "cpu")
    assert jax.tree.structure(moved) == jax.tree.structure(updates)
    assert moved["ids"].dtype == jax.dtypes.float0  # optax passed it through; so do we
    stepped = optax.apply_updates({"w": params["w"]}, {"w": moved["w"]})
    np.testing.assert_allclose(np.asarray(stepped["w"]), [0.0, 0.5, 1.0])
