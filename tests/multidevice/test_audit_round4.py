"""The fourth audit's multi-device cases, side by side with torch (the 1-device half is in
``parity/test_audit_round4.py``).

torch's CPU build has one CPU device: where the port places data on ``cpu:N``, the torch
side reads ``torch.device("cpu", N)``, as ``tests/multidevice/test_audit.py`` does.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import torch2jax_device as tj
from tests.parity.test_audit_round4 import Dropped, DroppedTwin, torch_send_to_device


def where(array: Any) -> tuple[str, int | None]:
    found = tj.device_of(array)
    assert found is not None
    return (found.type, found.index)


def test_a_model_with_rng_state_moves_and_casts_onto_another_device() -> None:
    twin = DroppedTwin().to(torch.bfloat16)
    target = torch.device("cpu", 1)  # where torch would report it after .to("cuda:1", ...)
    model = Dropped()
    assert tj.to_device(model, "cpu:1", jnp.bfloat16) is model
    leaves = jax.tree.leaves(nnx.state(model))
    assert {where(leaf) for leaf in leaves} == {(target.type, target.index)}
    assert [str(p.dtype) for p in tj.parameters(model)] == [
        str(p.dtype).removeprefix("torch.") for p in twin.parameters()
    ]


def test_a_batch_with_a_key_and_a_class_moves_onto_another_device() -> None:
    theirs = torch_send_to_device({"x": torch.ones(2), "dtype": np.float32}, torch.float16)
    key = jax.random.key(0)
    ours = tj.to_device({"x": np.ones(2, np.float32), "dtype": np.float32, "key": key}, "cpu:2")
    ours = tj.to_device(ours, "cpu:2", jnp.float16)
    assert ours["dtype"] is theirs["dtype"] is np.float32
    assert str(ours["x"].dtype) == str(theirs["x"].dtype).removeprefix("torch.")
    assert where(ours["x"]) == where(ours["key"]) == ("cpu", 2)
    assert ours["key"].dtype == key.dtype


# --- a sharding that does not fit a leaf: the library's error, naming the leaf --------------


def mesh_sharding(*spec: Any) -> jax.sharding.NamedSharding:
    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")), ("batch",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))


def test_a_batch_split_over_the_mesh_holds_torchs_chunks() -> None:
    batch = np.arange(16, dtype=np.float32).reshape(8, 2)
    theirs = [chunk.tolist() for chunk in torch.from_numpy(batch).chunk(4)]
    placed = tj.to_device({"x": batch}, mesh_sharding("batch"))["x"]
    ours = [np.asarray(shard.data).tolist() for shard in placed.addressable_shards]
    assert ours == theirs


MISFITS = [
    pytest.param({"x": np.ones(8, np.float32), "y": [np.ones(3, np.float32)]}, ("batch",),
                 r"leaf \['y'\]\[0\] of shape \(3,\).*evenly divide", id="indivisible"),
    pytest.param({"n": np.array(1, np.float32)}, ("batch",), r"leaf \['n'\] of shape \(\).*rank",
                 id="0-d"),
    pytest.param([torch.ones(4)], ("batch", None), r"leaf \[0\] of shape \(4,\).*rank",
                 id="rank"),
]  # fmt: skip


@pytest.mark.parametrize(("batch", "spec", "match"), MISFITS)
def test_a_sharding_that_does_not_fit_a_leaf_names_the_leaf(
    batch: Any, spec: tuple[Any, ...], match: str
) -> None:
    with pytest.raises(tj.ConversionError, match=match + r".*Fix: "):
        tj.to_device(batch, mesh_sharding(*spec))
    with pytest.raises(tj.ConversionError, match=match):
        next(tj.prefetch_to_device([batch], mesh_sharding(*spec)))
