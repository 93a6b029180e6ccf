"""The third audit's multi-device cases, side by side with torch (the 1-device half is in
``parity/test_audit_round3.py``).

torch's CPU build has one CPU device: where the port places data on ``cpu:N``, the torch
side reads ``torch.device("cpu", N)``, as ``tests/multidevice/test_audit.py`` does.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from flax import nnx

import torch2jax_device as tj
from tests.parity.test_audit_round3 import Batch, Encoding, torch_batch_to


def where(array: Any) -> tuple[str, int | None]:
    (device,) = array.devices()
    found = tj.device(device)
    return (found.type, found.index)


def test_a_module_inside_a_batch_moves_in_place_to_the_device() -> None:
    torch_model = torch.nn.Linear(2, 2)
    theirs = torch_batch_to({"model": torch_model}, torch.device("cpu"))
    target = torch.device("cpu", 1)  # where torch would report the module after .to("cuda:1")
    model = tj.to_device(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), "cpu:0")
    ours = tj.to_device({"model": model, "step": 3}, "cpu:1")
    assert (ours["model"] is model) == (theirs["model"] is torch_model)
    assert [where(p.data) for p in tj.parameters(model)] == [
        (target.type, target.index) for _ in torch_model.parameters()
    ]
    assert ours["step"] == 3


def test_arrays_in_dict_subclasses_and_user_dicts_reach_the_device() -> None:
    batch = {"b": Batch(x=np.ones(2, np.float32)), "e": [Encoding({"ids": jnp.ones(2)})]}
    moved = tj.to_device(batch, "cpu:1")
    target = torch.device("cpu", 1)
    leaves = [moved["b"]["x"], moved["e"][0]["ids"]]
    assert [where(leaf) for leaf in leaves] == [(target.type, target.index)] * 2
    assert tj.device_of(moved) == tj.device("cpu:1")
    assert isinstance(jax.device_get(moved["b"]["x"]), np.ndarray)
