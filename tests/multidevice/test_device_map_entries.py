"""Plans through every entry point: ``tj.load``, ``tj.safe_open``, ``tj.to_device`` (issue 39).

cpu:1 stands in for the GPU, as in ``test_device_map.py``: ``max_memory={"cpu:1": ...}``
fills it, then its ``pinned_host`` memory, then the host's CPU device (cpu:0). The
oracles: real torch for a PyTorch checkpoint's values and the objects around its
tensors (``torch.load(map_location="cpu")``), ``tj.DeviceMap.plan`` for where each
tensor goes (it plans from the header or the model alone, and ``test_device_map.py``
checks its rules as properties), the plan's own order (the tiers never go back), and
an all-on-device model for a jitted forward pass over offloaded weights.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torch2jax_device as tj
from tests.support.deadlines import deadline
from tests.support.load_peaks import measured_load
from torch2jax_device._src.checkpoints import device_map as device_map_module

PINNED = "pinned_host"
torch = pytest.importorskip("torch")


def _place(array: jax.Array) -> tuple[int, str]:
    return next(iter(array.devices())).id, str(array.sharding.memory_kind)


def _planned(destination: Any) -> tuple[int, str]:
    return destination.device.id, destination.memory_kind


def _tier(place: tuple[int, str]) -> int:
    return [(1, "device"), (1, PINNED), (0, "device")].index(place)


def _host(array: jax.Array) -> np.ndarray[Any, Any]:
    return np.asarray(jax.device_put(array, jax.devices("cpu")[0]))


@st.composite
def checkpoints_and_budgets(draw: Any) -> tuple[dict[str, Any], dict[str, int]]:
    """A nanoGPT-style checkpoint (a state dict inside a dict, with other entries) of
    generated layers and dtypes, and budgets that cut it anywhere."""
    layers = draw(st.integers(min_value=1, max_value=5))
    state: dict[str, Any] = {}
    for i in range(layers):
        width = draw(st.integers(min_value=1, max_value=16))
        dtype = draw(st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.int8]))
        state[f"h.{i}.weight"] = (torch.arange(width * 4) % 7).reshape(width, 4).to(dtype)
        state[f"h.{i}.bias"] = torch.full((width,), float(i))
    total = sum(t.numel() * t.element_size() for t in state.values())
    budgets = {
        "cpu:1": draw(st.integers(min_value=0, max_value=total)),
        "pinned_host": draw(st.integers(min_value=0, max_value=total)),
        "cpu": total,
    }
    return {"model": state, "iter_num": layers, "config": {"n_layer": layers}}, budgets


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(checkpoints_and_budgets())
def test_a_pytorch_checkpoint_loads_by_its_plan_with_torchs_values(
    tmp_path: Path, case: tuple[dict[str, Any], dict[str, int]]
) -> None:
    checkpoint, max_memory = case
    path = tmp_path / "ckpt.pt"
    torch.save(checkpoint, path)
    plan = tj.DeviceMap.plan(path, max_memory=max_memory)
    names = [f"model.{name}" for name in checkpoint["model"]]
    assert list(plan.placements()) == names  # the order the state dict was saved in
    tiers = [_tier(_planned(place)) for place in plan.placements().values()]
    assert tiers == sorted(tiers)
    loaded = tj.load(path, map_location="auto", max_memory=max_memory)
    expected = torch.load(path, map_location="cpu", weights_only=True)
    assert loaded["iter_num"] == expected["iter_num"] and loaded["config"] == expected["config"]
    assert list(loaded["model"]) == list(expected["model"])
    for name, tensor in expected["model"].items():
        array = loaded["model"][name]
        assert _place(array) == _planned(plan.destination(f"model.{name}")), name
        assert array.dtype == tj.to_jax(tensor).dtype  # torch's dtype, as JAX holds it
        np.testing.assert_array_equal(_host(array), tj.to_jax(tensor))
    # A plan made earlier places the same way, from a file object too (read whole).
    again = tj.load(io.BytesIO(path.read_bytes()), map_location=plan)
    assert {n: _place(a) for n, a in again["model"].items()} == {
        n: _place(a) for n, a in loaded["model"].items()
    }


def test_an_explicit_map_for_a_pytorch_checkpoint_is_a_device_map(tmp_path: Path) -> None:
    """``map_location`` dicts are torch's (saved location -> location); an explicit
    Accelerate map is a ``tj.DeviceMap`` made from it."""
    path = tmp_path / "ckpt.pt"
    twin = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    torch.save(twin.state_dict(), path)
    plan = tj.DeviceMap.plan(path, device_map={"0": "cpu:1", "2": ("cpu:1", PINNED)})
    state = tj.load(path, map_location=plan)
    assert {name: _place(array) for name, array in state.items()} == {
        "0.weight": (1, "device"),
        "0.bias": (1, "device"),
        "2.weight": (1, PINNED),
        "2.bias": (1, PINNED),
    }
    assert dict(state._metadata) == dict(twin.state_dict()._metadata)  # torch's attributes


def test_a_budget_that_cannot_hold_a_pytorch_checkpoint_is_refused_before_a_tensor_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ckpt.pt"
    torch.save({"a.w": torch.zeros(256), "b.w": torch.zeros(256)}, path)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a tensor was converted")

    monkeypatch.setattr(device_map_module, "to_jax", refuse)
    with pytest.raises(
        tj.OutOfMemoryError,
        match=r"does not fit even with host memory: 2 tensors of 2.00 KiB \(2,048 bytes\).*"
        r"'b.w'.*cpu:1: 1.00 KiB of 1.00 KiB.*Fix: raise max_memory",
    ):
        tj.load(path, map_location="auto", max_memory={"cpu:1": 1024, "pinned_host": 0, "cpu": 0})
    with pytest.raises(tj.ConfigError, match=r"max_memory\['cpu:1'\] = '2Gb' is not a memory"):
        tj.load(path, map_location="auto", max_memory={"cpu:1": "2Gb"})
    with pytest.raises(
        tj.DeviceUnavailableError, match=r"max_memory names 'cpu:9'.*cpu:0 to cpu:3"
    ):
        tj.load(path, map_location="auto", max_memory={"cpu:9": "1GiB"})
    with pytest.raises(tj.InvalidDeviceError, match=r"budget of map_location='auto'"):
        tj.load(path, map_location="cpu:1", max_memory={"cpu:1": "1GiB"})
    other = tj.DeviceMap.plan({"a.w": torch.zeros(256)}, device_map={"": "cpu:1"})
    with pytest.raises(tj.CheckpointError, match=r"has no tensor 'b.w'.*planned for 1 other"):
        tj.load(path, map_location=other)


def test_safe_open_places_each_tensor_as_load_file_would(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    tensors = {f"layers.{i}.kernel": np.full((32, 32), i, np.float32) for i in range(4)}
    tj.save_file(tensors, path)
    max_memory = {"cpu:1": 8192, "pinned_host": 4096, "cpu": 2**20}
    loaded = tj.load_file(path, device="auto", max_memory=max_memory)
    with tj.safe_open(path, framework="flax", device="auto", max_memory=max_memory) as f:
        assert (
            f.plan is not None
            and f.plan.modules() == tj.DeviceMap.plan(path, max_memory=max_memory).modules()
        )
        for name in reversed(f.keys()):  # any order: the plan was made on open
            array = f.get_tensor(name)
            assert _place(array) == _place(loaded[name]), name
            np.testing.assert_array_equal(_host(array), tensors[name])
        window = f.get_slice("layers.2.kernel")[:3]
        assert _place(window) == (1, PINNED)
        np.testing.assert_array_equal(_host(window), tensors["layers.2.kernel"][:3])
    with tj.safe_open(path, framework="jax", device=f.plan) as again:
        assert _place(again.get_tensor("layers.3.kernel")) == (0, "device")
    explicit = {"layers.0": ("cpu:1", PINNED), "": "cpu:1"}
    with tj.safe_open(path, framework="flax", device_map=explicit) as mapped:
        assert [_place(mapped.get_tensor(f"layers.{i}.kernel")) for i in (0, 1)] == [
            (1, PINNED),
            (1, "device"),
        ]
    with pytest.raises(tj.OutOfMemoryError, match=r"does not fit even with host memory"):
        tj.safe_open(path, framework="flax", device="auto", max_memory={"cpu": 100})


class _Net:
    """An NNX MLP with dropout (RNG state, which no plan places), made on first use."""

    @staticmethod
    def make(seed: int) -> Any:
        nnx = pytest.importorskip("flax.nnx")

        class Net(nnx.Module):
            def __init__(self, rngs: Any) -> None:
                self.embed = nnx.Linear(16, 64, rngs=rngs)
                self.layers = nnx.List([nnx.Linear(64, 64, rngs=rngs) for _ in range(4)])
                self.dropout = nnx.Dropout(0.5, rngs=rngs)
                self.head = nnx.Linear(64, 8, rngs=rngs)

            def __call__(self, x: Any) -> Any:
                x = self.embed(x)
                for layer in self.layers:
                    x = jax.nn.gelu(layer(x))
                return self.head(self.dropout(x, deterministic=True))

        return Net(nnx.Rngs(seed))


def test_to_device_auto_places_a_model_by_its_plan_and_the_forward_matches() -> None:
    nnx = pytest.importorskip("flax.nnx")
    model, reference = _Net.make(0), _Net.make(0)
    total = sum(a.nbytes for a in tj.state_dict(model).values())
    budget = {"cpu:1": total // 2, "pinned_host": total // 3, "cpu": total}
    plan = tj.DeviceMap.plan(tj.state_dict(model), max_memory=budget)
    assert tj.to_device(model, "auto", max_memory=budget) is model  # in place, as Module.to
    arrays = tj.state_dict(model)
    assert {n: _place(a) for n, a in arrays.items()} == {
        n: _planned(p) for n, p in plan.placements().items()
    }
    assert {_tier(_place(a)) for a in arrays.values()} == {0, 1, 2}
    for name, array in arrays.items():
        np.testing.assert_array_equal(_host(array), np.asarray(tj.state_dict(reference)[name]))
    rng = nnx.state(model, nnx.RngState)
    assert {_place(a) for a in jax.tree.leaves(rng)} == {(1, "device")}  # the execution device
    # The host tier into cpu:1's pinned memory (outside jit), then a jitted forward.
    graphdef, state = nnx.split(model)
    pinned = jax.sharding.SingleDeviceSharding(plan.execution_device, memory_kind=PINNED)
    state = jax.tree.map(
        lambda a: jax.device_put(a, pinned) if _place(a) == (0, "device") else a, state
    )
    x = jax.device_put(jnp.linspace(-1, 1, 3 * 16).reshape(3, 16), jax.devices()[1])
    got = jax.jit(lambda s, x: nnx.merge(graphdef, plan.to_execution_device(s))(x))(state, x)
    expected = jax.jit(lambda m, x: m(x))(tj.to_device(reference, "cpu:1"), x)
    assert _place(got) == (1, "device")
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-6, atol=1e-6)


def test_to_device_places_a_tree_of_every_array_kind_by_a_device_map() -> None:
    tree = {
        "wte": np.ones((8, 4), np.float64),  # narrowed: planned as the float32 JAX holds
        "h": [{"w": torch.full((4, 4), 2.0)}, {"w": jnp.full((4, 4), 3.0)}],
        "name": "gpt",
        "step": 7,
    }
    plan = tj.DeviceMap.plan(
        {
            "wte": jax.ShapeDtypeStruct((8, 4), jnp.float32),
            "h.0.w": tree["h"][0]["w"],
            "h.1.w": tree["h"][1]["w"],
        },
        device_map={"wte": ("cpu:1", PINNED), "h.0": "cpu:1", "": "cpu:0"},
    )
    moved = tj.to_device(tree, plan)
    assert _place(moved["wte"]) == (1, PINNED)
    assert [_place(layer["w"]) for layer in moved["h"]] == [(1, "device"), (0, "device")]
    assert moved["name"] == "gpt" and moved["step"] == 7 and list(moved) == list(tree)
    np.testing.assert_array_equal(_host(moved["h"][0]["w"]), tree["h"][0]["w"].numpy())
    # "auto" with a dtype: planned in the dtype the move casts to, as Module.to casts.
    half = tj.to_device(tree, "auto", jnp.float16, max_memory={"cpu:1": 64, "cpu": 2**20})
    assert [half["wte"].dtype, half["h"][1]["w"].dtype] == [jnp.float16, jnp.float16]
    assert _place(half["wte"]) == (1, "device")  # 8 * 4 * 2 bytes: fits 64 in float16
    assert _place(half["h"][0]["w"]) == (1, PINNED)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"max_memory": {"cpu:1": "lots"}}, tj.ConfigError, r"'lots' is not a memory size"),
        (
            {"max_memory": {"cpu:1": 0, "pinned_host": 0, "cpu": 100}},
            tj.OutOfMemoryError,
            r"does not fit even with host memory: 4 tensors .*Fix: raise max_memory",
        ),
        ({"max_memory": {"cuda:3": "1GiB"}}, tj.DeviceUnavailableError, r"names 'cuda:3'"),
        ("other tree", tj.CheckpointError, r"has no tensor 'b'.*planned for 1 other tensors"),
        ("missing device", tj.DeviceUnavailableError, r"device_map\[''\] names 'cpu:9'"),
        ("unplaced", tj.InvalidDeviceError, r"no device for 1 of 2 tensors: 'b'"),
    ],
)
def test_a_plan_that_cannot_place_everything_moves_nothing(
    arguments: Any, error: type, message: str
) -> None:
    nnx = pytest.importorskip("flax.nnx")
    model = nnx.Sequential(nnx.Linear(8, 8, rngs=nnx.Rngs(0)), nnx.Linear(8, 8, rngs=nnx.Rngs(1)))
    before = tj.state_dict(model)
    tree = {"a": np.ones(4, np.float32), "b": np.ones(4, np.float32)}
    with pytest.raises(error, match=message):
        if arguments == "other tree":
            tj.to_device(tree, tj.DeviceMap.plan({"a": tree["a"]}, device_map={"": "cpu:1"}))
        elif arguments == "missing device":
            tj.to_device(tree, tj.DeviceMap.plan(tree, device_map={"": "cpu:9"}))
        elif arguments == "unplaced":
            tj.to_device(tree, tj.DeviceMap.plan(tree, device_map={"a": "cpu:1"}))
        else:
            tj.to_device(model, "auto", **arguments)
    after = tj.state_dict(model)
    assert all(after[name] is array for name, array in before.items())  # not half-placed


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="reads Linux /proc peaks")
def test_host_memory_of_a_pytorch_load_stays_within_the_plan_and_the_mapped_file(
    tmp_path: Path,
) -> None:
    """On the CPU every tier is host RAM. A PyTorch checkpoint is unpickled over a
    memory map, so the load's peak is what the plan places plus the file's pages as
    they are read (page cache, mapped while torch's storages live) and the few
    tensors in flight, never a further copy of the model."""
    mib = 2**20
    state = {f"layers.{i}.kernel": torch.full((4 * mib,), float(i)) for i in range(8)}
    path, small = tmp_path / "big.pt", tmp_path / "small.pt"
    torch.save(state, path)
    torch.save({"layers.0.kernel": torch.zeros(4)}, small)
    budget = {"cpu:1": 48 * mib, "pinned_host": 48 * mib, "cpu": 256 * mib}
    figures = measured_load(
        'tj.load(source, map_location="auto", max_memory=budget)', path, small, budget
    )
    model_mib = sum(t.numel() * 4 for t in state.values()) / mib
    assert figures["placed"] == {
        "1/device": 48 * mib,
        "1/pinned_host": 48 * mib,
        "0/device": 32 * mib,
    }
    print(f"peak {figures['peak_mib']:.1f} MiB for a {model_mib:.0f} MiB model")
    # Measured: 299.5 MiB for the 128 MiB model (the plan's 128, the file's 128 and
    # under three of its 16 MiB tensors in flight); a load through a full host copy
    # first would add another 128.
    assert figures["peak_mib"] <= model_mib * 2.5, figures


MEASURE_MOVE = """
import gc, json, sys
import jax, numpy as np
import torch2jax_device as tj

def kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])

mib, budget = 2**20, json.loads(sys.argv[1])
tj.to_device({"w": np.zeros(4, np.float32)}, "auto", max_memory=budget)  # warm-up
tree = {f"layers.{i}.kernel": np.full(4 * mib, i, np.float32) for i in range(8)}
gc.collect()
before = kib("VmRSS")
with open("/proc/self/clear_refs", "w") as file:
    file.write("5")
placed = tj.to_device(tree, "auto", max_memory=budget)
print(json.dumps({"peak_mib": (kib("VmHWM") - before) / 1024}))
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="reads Linux /proc peaks")
def test_host_memory_of_a_move_by_a_plan_is_the_plans_copies() -> None:
    """A 128 MiB tree of host arrays moved by a plan over the three tiers (all host RAM
    on the CPU): the new memory is each array's one copy in its place and a few in
    flight, never a staged copy of the whole tree first. Measured: 170.8 MiB (the 128
    MiB the plan places, and under three 16 MiB arrays in flight)."""
    mib = 2**20
    budget = {"cpu:1": 48 * mib, "pinned_host": 48 * mib, "cpu": 256 * mib}
    run = subprocess.run(
        [sys.executable, "-c", MEASURE_MOVE, json.dumps(budget)],
        cwd=Path(__file__).resolve().parents[2],  # where torch2jax_device imports from
        capture_output=True,
        text=True,
        timeout=deadline(300),
        env={**os.environ, "JAX_NUM_CPU_DEVICES": "4", "MALLOC_MMAP_THRESHOLD_": str(mib)},
        check=False,
    )
    assert run.returncode == 0, run.stderr
    peak = json.loads(run.stdout.strip().splitlines()[-1])["peak_mib"]
    print(f"peak {peak:.1f} MiB for a 128 MiB tree")
    assert peak <= 128 * 1.5, peak
