"""The device-map fuzzer: random models planned by tj and by Accelerate, then placed.

Each example draws a model (nested modules, every dtype, tied weights, buffers, empty
modules), budgets for one to three CPU devices standing in for accelerators, the host
and its pinned memory, and a strategy or an explicit map (``tests/support/device_map_fuzz.py``),
then plans it with ``tj.DeviceMap.plan``, compares the plan with Accelerate's
``infer_auto_device_map`` where ``accelerate`` is installed, checks the plan's
invariants, places the arrays by it and runs a forward pass over them
(``tests/support/device_map_fuzz_oracle.py``). A finding that no row of the oracle's
``DIFFERENCES`` covers fails the test with one shrunk reproduction per kind; each row is
said on ``docs/how-to/big-models.md``.

The default run is the examples ``fuzz_runs.settings`` gives, from its seed, the same
every time. ``TORCH2JAX_DEVICE_DEVICE_MAP_FUZZ_EXAMPLES=N`` and
``TORCH2JAX_DEVICE_DEVICE_MAP_FUZZ_SEED=S`` make a longer or another run.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

import torch2jax_device as tj
from tests.support import device_map_fuzz, fuzz_runs
from tests.support.device_map_fuzz import Draw, Module, Tensor
from tests.support.device_map_fuzz_oracle import (
    DIFFERENCES,
    DOCS,
    accelerates,
    fuzz,
    judge,
    report,
)
from tests.support.gpu_proxy import jax_default_is_torch_cpu
from tests.support.optional_frameworks import needs, required_frameworks

pytestmark = pytest.mark.skipif(
    not jax_default_is_torch_cpu(),
    reason="the fuzzer's oracle is torch's CPU; JAX's default device is another here",
)

EXAMPLES, SEED = fuzz_runs.settings("DEVICE_MAP_FUZZ", 60)
ROOT = Path(__file__).resolve().parents[2]


def test_tj_plans_and_places_models_as_accelerate_does() -> None:
    found, tally = fuzz(EXAMPLES, SEED, devices=len(jax.local_devices(backend="cpu")))
    assert tally.examples == EXAMPLES
    if "accelerate" in required_frameworks():  # its oracle must have answered
        assert tally.compared > 0, "no plan was compared with Accelerate's"
    if found:
        pytest.fail(report(found, tally, SEED), pytrace=False)
    print(report(found, tally, SEED))


def test_every_row_is_said_on_the_big_models_page() -> None:
    page = (ROOT / DOCS).read_text(encoding="utf-8")
    missing = [row.id for row in DIFFERENCES if row.docs not in page]
    assert not missing, f"rows with no heading on {DOCS}: {missing}"


# --- the fuzzer's draws, kept: each found a bug, fixed ---------------------------------------

#: Found 2026-11-29 (seed 20261129): with the first accelerator given no room, the plan
#: put the offloaded layers in *its* pinned memory while the second computed, so
#: ``plan.to_execution_device`` inside ``jit`` met arrays of two devices (XLA's "incompatible
#: devices"). The pinned tier is now the execution device's.
PINNED_OF_AN_EMPTY_ACCELERATOR = Draw(
    model=Module(name="", cls="Model", children=(
        Module(name="a", cls="Linear", tensors=(Tensor(name="weight", shape=(4, 4), seed=1),)),
        Module(name="b", cls="Linear", tensors=(Tensor(name="weight", shape=(4, 4), seed=2),)),
    )),
    accelerators=(0, 64), host=10**4, strategy="sequential",
)  # fmt: skip

#: Found 2026-11-29 (seed 12): a top-level tensor and a module's own tensors beside its
#: children counted as modules in the balanced share's mean; Accelerate's mean is of its
#: final modules only (``get_module_leaves``), rounded before the 1.25.
BALANCED_MEAN_OF_FINAL_MODULES = Draw(
    model=Module(name="", cls="Model", tensors=(Tensor(name="table", shape=(4, 4), seed=3),),
                 children=(
        Module(name="embed", cls="Stack", children=(
            Module(name="m0", cls="Linear", tensors=(
                Tensor(name="running_mean", shape=(4,), seed=4),
                Tensor(name="weight", shape=(0,), kind="buffer"),
                Tensor(name="scale", shape=(), dtype="float16", kind="buffer", seed=5),
            )),
        )),
    )),
    accelerators=(82, 41), host=82, pinned=20, strategy="auto",
)  # fmt: skip


def test_the_pinned_tier_is_the_execution_devices() -> None:
    plan = tj.DeviceMap.plan(
        {"a.weight": np.ones((4, 4), np.float32), "b.weight": np.ones((4, 4), np.float32)},
        max_memory={"cpu:1": 0, "cpu:2": 64, "cpu": 10**4},
        device_map="sequential",
    )
    assert plan.modules() == {"a": "cpu:2", "b": ("cpu:2", "pinned_host")}
    assert plan.execution_device == jax.devices("cpu")[2]
    assert judge(PINNED_OF_AN_EMPTY_ACCELERATOR) == []


def test_the_balanced_share_is_accelerates_from_the_final_modules() -> None:
    """82 bytes over two accelerators: 41 each plus 1.25 x 18 (the one final module,
    ``embed.m0``) = 63 on cpu:1, which the 64-byte top-level ``table`` does not fit, and
    cpu:2's 41 neither: the model goes to the host, as Accelerate plans it."""
    state = device_map_fuzz.twin(BALANCED_MEAN_OF_FINAL_MODULES).state_dict()
    plan = tj.DeviceMap.plan(
        state, max_memory={"cpu:1": 82, "cpu:2": 41, "cpu": 82, "pinned_host": 20}
    )
    assert plan.modules() == {"": "cpu:0"}
    assert "of 63 B, its balanced share" not in repr(plan)  # nothing placed on cpu:1
    assert judge(BALANCED_MEAN_OF_FINAL_MODULES) == []


def test_accelerates_planner_agrees_on_the_kept_draws() -> None:
    """What Accelerate's planner says of the kept draws (its largest-layer reserve taken
    out): the layer that does not fit GPU 1 goes to the host, and the model whose share
    of GPU 0 is 63 bytes goes to the host whole."""
    needs("accelerate")
    pinned = PINNED_OF_AN_EMPTY_ACCELERATOR
    assert accelerates(pinned, device_map_fuzz.twin(pinned)) == {"a.weight": "1", "b.weight": "cpu"}
    balanced = BALANCED_MEAN_OF_FINAL_MODULES
    assert set(accelerates(balanced, device_map_fuzz.twin(balanced)).values()) == {"cpu"}


def test_one_array_under_two_names_is_moved_once_as_the_plan_counts_it() -> None:
    """A tie as a tree holds it (one object under two names: ``state_dict(keep_vars=True)``
    of a tied model): the plan counts its bytes once, so the move must make one array."""
    shared = np.ones(64, np.float32)
    tree = {"embed": shared, "mid": np.ones(8, np.float32), "head": shared}
    plan = tj.DeviceMap.plan(tree, max_memory={"cpu:1": 300, "cpu": 10**6})
    assert plan.bytes_per_device() == {"cpu:1": 288}
    placed = tj.to_device(tree, plan)
    assert placed["embed"] is placed["head"]
