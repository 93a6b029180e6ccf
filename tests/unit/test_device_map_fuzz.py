"""The device-map fuzzer's draws on one device: explicit maps of modules without tensors.

The fuzzer itself runs with four CPU devices (``tests/multidevice/test_device_map_fuzz.py``);
the draws kept here need only the host, and check what an explicit ``device_map`` made
by Accelerate (which lists modules without tensors) does in ``tj.DeviceMap.plan``.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import torch2jax_device as tj
from tests.support.device_map_fuzz import Draw, Module, Tensor
from tests.support.device_map_fuzz_oracle import judge

SHAPES = {
    "transformer.wte.weight": np.ones(4, np.float32),
    "transformer.h.0.attn.c_attn.weight": np.ones(4, np.float32),
    "lm_head.weight": np.ones(4, np.float32),
}


@pytest.mark.parametrize(
    "key", ["transformer.drop", "transformer.h.0.attn.attn_dropout", "transformer.rotary_emb"]
)
def test_a_key_for_a_module_without_tensors_is_taken_as_accelerates_maps_list_them(
    key: str,
) -> None:
    """GPT-2's ``transformer.drop`` (a Dropout) is in the maps ``infer_auto_device_map``
    makes: such a key places nothing, and the map is taken."""
    plan = tj.DeviceMap.plan(SHAPES, device_map={key: "cpu", "": "cpu"})
    assert plan.modules() == {"": "cpu"}


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("lm_haed", "did you mean 'lm_head'"),
        ("transformer.h.0.attn.c_atn", "did you mean 'transformer.h.0.attn.c_attn'"),
        ("model.layers.0", "covers none"),  # under a module the tensors do not have
        ("drop", "covers none"),  # at the top: a map for another model
        ("layers*", "covers none"),  # a wildcard that matches nothing
        ("lm_head.weight.x", "covers none"),  # under a tensor, not a module
    ],
)
def test_a_key_like_a_modules_name_or_for_another_model_is_still_refused(
    key: str, hint: str
) -> None:
    pattern = rf"device_map\[{re.escape(repr(key))}\].*{hint}.*Fix:"
    with pytest.raises(tj.InvalidDeviceError, match=pattern):
        tj.DeviceMap.plan(SHAPES, device_map={key: "cpu", "": "cpu"})


#: Found 2026-11-29 (seed 7): a model whose modules hold no tensor (a Dropout alone)
#: with device_map={"": "cpu"}: the key covering everything was refused as covering
#: "none of the 0 tensors".
NO_TENSORS = Draw(
    model=Module(name="", cls="Model", children=(Module(name="drop", cls="Dropout"),)),
    accelerators=(), host=0, strategy=None, device_map=(("", "cpu"),),
)  # fmt: skip
#: Found 2026-11-29 (seed 20261129): Identity and Dropout children in the map.
EMPTY_MODULES_IN_THE_MAP = Draw(
    model=Module(name="", cls="Model", children=(
        Module(name="embed", cls="Linear", tensors=(Tensor(name="weight", shape=(4, 4), seed=1),)),
        Module(name="drop", cls="Dropout"),
        Module(name="head", cls="Stack", children=(
            Module(name="m0", cls="Linear", tensors=(Tensor(name="bias", shape=(4,), seed=2),)),
            Module(name="1", cls="Identity"),
        )),
    )),
    accelerators=(), host=10**4, strategy=None,
    device_map=(("head.1", "cpu"), ("", "cpu")),
)  # fmt: skip


@pytest.mark.parametrize("draw", [NO_TENSORS, EMPTY_MODULES_IN_THE_MAP], ids=["none", "some"])
def test_explicit_maps_with_modules_without_tensors_plan_and_place(draw: Draw) -> None:
    assert judge(draw) == []
