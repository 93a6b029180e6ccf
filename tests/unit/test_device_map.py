"""``tj.DeviceMap`` on one CPU device: budgets, explicit maps and their errors (issue 39).

Every refusal happens before a tensor byte is read: the readers' read methods are made
to fail, so a test passes only if the plan alone raised. The tiers over a stand-in
accelerator (cpu:1 and its ``pinned_host`` memory) are in
``tests/multidevice/test_device_map.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy
from hypothesis import given
from hypothesis import strategies as st

import torch2jax_device as tj
from tests.support.gpu_proxy import host_cpu
from torch2jax_device._src.checkpoints import reader as reader_module
from torch2jax_device._src.device_plan import parse_size

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
_UNITS |= {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
#: How the host CPU prints: torch's ``cpu``, with no index, where it is JAX's one CPU
#: device; ``cpu:0`` among simulated ones (the GPU-proxy mode).
CPU = str(host_cpu())


def _checkpoint(path: Path) -> dict[str, np.ndarray[Any, Any]]:
    tensors = {"embed.weight": np.arange(64 * 8, dtype=np.float32).reshape(64, 8)}
    for i in range(3):
        tensors[f"layers.{i}.kernel"] = np.full((8, 8), i, np.float32)
        tensors[f"layers.{i}.bias"] = np.full((8,), i, np.float32)
    safetensors.numpy.save_file(tensors, str(path))
    return tensors


#: Stands for a plan made earlier (made in the test: JAX starts at the first test, not
#: at collection). Given with max_memory=, the budgets would go unused.
PLAN = "a DeviceMap"


@pytest.fixture
def checkpoint(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray[Any, Any]]]:
    path = tmp_path / "model.safetensors"
    return path, _checkpoint(path)


@pytest.fixture
def no_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any read of tensor bytes fails the test: only the header may be read."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a tensor byte was read")

    for method in ("read_into", "read_tensor", "mapped", "read_selection", "read_selection_into"):
        monkeypatch.setattr(reader_module.Reader, method, refuse)
    yield


@given(
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from(sorted(_UNITS)),
    st.sampled_from(["", " "]),
    st.lists(st.booleans(), min_size=3, max_size=3),
)
def test_sizes_parse_as_accelerate_defines_the_units(
    count: int, unit: str, space: str, upper: list[bool]
) -> None:
    """Any case, as Accelerate's ``convert_file_size_to_int`` upper-cases the unit
    (``"20gib"`` is 20 GiB), except a decimal unit ending in ``b``, which Accelerate
    reads as bits (``"20Gb"``, ``"20gb"``: an eighth) and tj refuses."""
    written = "".join(c.upper() if up else c.lower() for c, up in zip(unit, upper, strict=False))
    value = f"{count}{space}{written}"
    if len(unit) == 2 and written.endswith("b"):
        with pytest.raises(tj.ConfigError, match="would be bits"):
            parse_size(value, "cpu")
    else:
        assert parse_size(value, "cpu") == count * _UNITS[unit]


@pytest.mark.parametrize("value", ["20Gb", "20gb", "lots", "-1GiB", "1e9", "", None, 1.5, -3])
def test_a_size_that_does_not_parse_is_refused_with_the_units(value: Any) -> None:
    with pytest.raises(tj.ConfigError, match=r"max_memory\['cpu'\] = .* is not a memory size.*GiB"):
        parse_size(value, "'cpu'")


def test_the_plan_is_made_from_the_header_alone(checkpoint: Any, no_reads: None) -> None:
    path, tensors = checkpoint
    plan = tj.DeviceMap.plan(path, max_memory={"cpu": "1MiB"})
    assert plan.modules() == {"": CPU}
    assert plan.bytes_per_device() == {CPU: sum(t.nbytes for t in tensors.values())}
    assert CPU in repr(plan) and "of 1.00 MiB, max_memory['cpu']" in repr(plan)


def test_a_plan_that_cannot_fit_even_on_the_host_is_refused_before_reading(
    checkpoint: Any, no_reads: None
) -> None:
    path, tensors = checkpoint
    total = sum(t.nbytes for t in tensors.values())
    with pytest.raises(
        tj.OutOfMemoryError, match=rf"does not fit even with host memory.*{total:,}"
    ):
        tj.load_file(path, device="auto", max_memory={"cpu": total - 1})


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        (
            {"device_map": {"layers.*": "cpu"}},
            tj.InvalidDeviceError,
            r"no device for 1 of 7.*'embed.weight'.*'\*': 'cpu'",
        ),
        ({"device_map": {"": "disk"}}, tj.InvalidDeviceError, r"does not offload to disk"),
        (
            {"device_map": {"": "cuda:0"}},
            tj.DeviceUnavailableError,
            r"device_map\[''\] names 'cuda:0'",
        ),
        (
            {"device": "auto", "max_memory": {"cuda:1": "1GiB"}},
            tj.DeviceUnavailableError,
            r"max_memory names 'cuda:1'",
        ),
        ({"device": "auto", "max_memory": {"cpu": "1 gig"}}, tj.ConfigError, r"not a memory size"),
        (
            {"device_map": {"": ("cpu", "hbm")}},
            tj.InvalidDeviceError,
            r"no memory kind 'hbm'.*pinned_host",
        ),
        (
            {"device_map": {"": "cpu"}, "max_memory": {"cpu": 100}},
            tj.OutOfMemoryError,
            r"puts .* on cpu(:0)?, which has a budget of 100 B.*max_memory\['cpu'\]",
        ),
        (
            {"max_memory": {"cpu": "1GiB"}},
            tj.InvalidDeviceError,
            r"max_memory= is the budget of device='auto'",
        ),
        ({"device": "cpu:0", "device_map": "auto"}, tj.InvalidDeviceError, r"both say where"),
        ({"device_map": 3}, tj.InvalidDeviceError, r"give one of Accelerate's strategies"),
        ({"device_map": "balance"}, tj.InvalidDeviceError, r"'balanced_low_0', 'sequential'"),
        (  # Accelerate's disk tier
            {"device": "auto", "max_memory": {"cpu": "1GiB", "disk": "10GiB"}},
            tj.InvalidDeviceError,
            r"max_memory\['disk'\]: tj does not offload to disk. Fix: drop the entry",
        ),
        (  # a typo would send the layer where "" says
            {"device_map": {"": "cpu", "layrs.1": "cpu"}},
            tj.InvalidDeviceError,
            r"device_map\['layrs.1'\] covers none of the 7 tensors \(did you mean 'layers.1'\?\)",
        ),
        (  # a map written for another model
            {"device_map": {"embed": "cpu", "layers": "cpu", "lm_head": "cpu"}},
            tj.InvalidDeviceError,
            r"device_map\['lm_head'\] covers none of the 7 tensors.*Fix: correct the key, or drop",
        ),
        (
            {"device": "auto", "max_memory": {"cpu:0": 100, "cpu": 1000}},
            tj.InvalidDeviceError,
            r"the host's own device, as an accelerator.*max_memory\['cpu'\]",
        ),
        (
            {"device_map": PLAN, "max_memory": {"cpu": "1GiB"}},
            tj.InvalidDeviceError,
            r"the plan was made within its budgets already",
        ),
    ],
)
def test_bad_maps_are_the_librarys_errors_before_a_byte_is_read(
    checkpoint: Any, no_reads: None, arguments: dict[str, Any], error: type, message: str
) -> None:
    path, _ = checkpoint
    if arguments.get("device_map") == PLAN:
        arguments = {**arguments, "device_map": tj.DeviceMap.plan(path, device_map="auto")}
    with pytest.raises(error, match=message):
        tj.load_file(path, **arguments)


@pytest.mark.idiom("library-device-map-auto")
def test_auto_on_a_machine_without_accelerators_loads_onto_the_host(checkpoint: Any) -> None:
    path, tensors = checkpoint
    loaded = tj.load_file(path, device="auto", max_memory={"cpu": "1MiB"})
    assert list(loaded) == list(safetensors.numpy.load_file(str(path)))  # the file's order
    cpu = jax.devices("cpu")[0]
    for name, array in loaded.items():
        assert array.sharding == jax.sharding.SingleDeviceSharding(cpu)
        np.testing.assert_array_equal(array, tensors[name])


def test_explicit_maps_take_accelerate_prefixes_and_wildcards(
    checkpoint: Any,
) -> None:
    path, _ = checkpoint
    plan = tj.DeviceMap.plan(
        path, device_map={"layers.1": ("cpu", "pinned_host"), "layers.1*": "cpu", "*": "cpu"}
    )
    kinds = {name: place.memory_kind for name, place in plan.placements().items()}
    assert kinds == {
        name: "pinned_host" if name.startswith("layers.1.") else "device"
        for name in safetensors.numpy.load_file(str(path))
    }
    # The printed map is Accelerate's: the coarsest prefixes, and it loads the same way.
    assert plan.modules() == {
        "embed": CPU,
        "layers.0": CPU,
        "layers.1": (CPU, "pinned_host"),
        "layers.2": CPU,
    }
    again = tj.DeviceMap.plan(path, device_map=plan.modules())
    assert again.placements() == plan.placements()
    loaded = tj.load_file(path, device_map=plan)
    assert {name: array.sharding.memory_kind for name, array in loaded.items()} == kinds


@pytest.mark.parametrize(
    "device_map",
    [
        {"": "cpu", "layers.1": ("cpu", "pinned_host")},  # Transformers' {"": 0, "lm_head": ...}
        {"layers.1": ("cpu", "pinned_host"), "": "cpu"},
        {"*": "cpu", "layers.1.*": ("cpu", "pinned_host"), "layers": "cpu"},
        {"layers": "cpu", "layers.1*": ("cpu", "pinned_host"), "*": "cpu"},
    ],
    ids=["everything_first", "everything_last", "wildcards", "prefix_and_wildcard"],
)
def test_the_most_specific_key_wins_whatever_the_order(
    checkpoint: Any, device_map: dict[str, Any]
) -> None:
    """Accelerate and Transformers place a tensor by the longest module prefix that
    covers it (``{"": 0, "lm_head": "cpu"}`` keeps lm_head off the GPU), whatever the
    dict's order; a wildcard is as specific as its literal characters."""
    path, _ = checkpoint
    kinds = {
        name: place.memory_kind
        for name, place in tj.DeviceMap.plan(path, device_map=device_map).placements().items()
    }
    assert kinds == {
        name: "pinned_host" if name.startswith("layers.1.") else "device"
        for name in safetensors.numpy.load_file(str(path))
    }


def test_a_plan_refuses_a_tensor_it_was_not_made_for(checkpoint: Any) -> None:
    path, _ = checkpoint
    plan = tj.DeviceMap.plan({"w": jax.ShapeDtypeStruct((2,), np.float32)}, device_map={"": "cpu"})
    with pytest.raises(
        tj.CheckpointError, match=r"has no tensor 'embed.weight'.*plan from the file"
    ):
        tj.load_file(path, device=plan)


def test_a_model_is_planned_by_its_state_dict_and_anything_else_is_refused() -> None:
    """A model is planned as ``tj.to_device(model, "auto")`` places it: by its state
    dict's names and order, abstract or not (before, a model was refused)."""
    nnx = pytest.importorskip("flax.nnx")
    for model in (
        nnx.Sequential(nnx.Linear(2, 3, rngs=nnx.Rngs(0)), nnx.Dropout(0.5, rngs=nnx.Rngs(1))),
        nnx.eval_shape(lambda: nnx.Linear(2, 2, rngs=nnx.Rngs(0))),
    ):
        plan = tj.DeviceMap.plan(model, max_memory={"cpu": "1MiB"})
        assert plan.placements() == tj.DeviceMap.plan(tj.state_dict(model)).placements()
    with pytest.raises(tj.ArgumentTypeError, match=r"a model or a tree of arrays, not object"):
        tj.DeviceMap.plan(object())


def test_plan_sizes_count_the_dtype_jax_will_hold() -> None:
    # int64 becomes int32 without jax_enable_x64: the budget counts the narrowed bytes.
    plan = tj.DeviceMap.plan({"ids": jax.ShapeDtypeStruct((10,), np.int64)}, device_map={"": "cpu"})
    expected = 10 * (8 if jax.config.jax_enable_x64 else 4)
    assert plan.bytes_per_device() == {CPU: expected}


@pytest.mark.idiom("library-init-empty-weights")
def test_an_abstract_model_is_filled_with_no_device_given(tmp_path: Path) -> None:
    """Before issue 39, ``tj.state_dict`` of an abstract model was empty and
    ``tj.load_state`` filled nothing: its variables hold ``jax.ShapeDtypeStruct``."""
    nnx = pytest.importorskip("flax.nnx")
    path = tmp_path / "linear.safetensors"
    reference = nnx.Linear(3, 4, rngs=nnx.Rngs(0))
    tj.save_file(reference, path)
    abstract = nnx.eval_shape(lambda: nnx.Linear(3, 4, rngs=nnx.Rngs(1)))
    assert {name: v.shape for name, v in tj.state_dict(abstract).items()} == {
        "kernel": (3, 4),
        "bias": (4,),
    }
    model = tj.load_state(abstract, path)
    cpu = jax.devices("cpu")[0]
    for name, array in tj.state_dict(model).items():
        assert isinstance(array, jax.Array) and array.devices() == {cpu}
        np.testing.assert_array_equal(array, tj.state_dict(reference)[name])


def test_load_state_onto_one_device_is_a_plan_too(tmp_path: Path) -> None:
    nnx = pytest.importorskip("flax.nnx")
    path = tmp_path / "linear.safetensors"
    tj.save_file(nnx.Linear(3, 4, rngs=nnx.Rngs(0)), path)
    abstract = nnx.eval_shape(lambda: nnx.Linear(3, 4, rngs=nnx.Rngs(1)))
    model = tj.load_state(abstract, path, device="cpu")
    assert {a.sharding.memory_kind for a in tj.state_dict(model).values()} == {"device"}
    plan = tj.DeviceMap.plan(
        tj.state_dict(abstract), device_map={"bias": ("cpu", "pinned_host"), "": "cpu"}
    )
    model = tj.load_state(abstract, path, device=plan)  # a plan made earlier, as device=
    kinds = {name: a.sharding.memory_kind for name, a in tj.state_dict(model).items()}
    assert kinds == {"kernel": "device", "bias": "pinned_host"}
    with pytest.raises(tj.DeviceUnavailableError, match=r"names 'cuda'"):
        tj.load_state(abstract, path, device="cuda")


def test_a_pytorch_checkpoint_loads_by_a_plan_through_the_host(tmp_path: Path) -> None:
    """A ``.pt`` has no header to plan from: torch.load reads it, then the plan places it
    (before, the planned path read it as safetensors and refused it as corrupt)."""
    nnx = pytest.importorskip("flax.nnx")
    torch = pytest.importorskip("torch")
    twin = torch.nn.Linear(3, 4)
    path = tmp_path / "twin.pt"
    torch.save(twin.state_dict(), path)
    model = tj.load_state(
        nnx.eval_shape(lambda: nnx.Linear(3, 4, rngs=nnx.Rngs(0))), path, device="auto"
    )
    np.testing.assert_array_equal(model.kernel[...], twin.weight.detach().numpy().T)
    np.testing.assert_array_equal(model.bias[...], twin.bias.detach().numpy())
    assert model.kernel[...].devices() == {jax.devices("cpu")[0]}


@pytest.mark.idiom("library-init-empty-weights")
def test_an_abstract_models_torch_state_dict_is_the_meta_twins() -> None:
    """Side by side with torch: a twin built on the meta device (what
    ``init_empty_weights`` makes) lists the same names, shapes and dtypes, on ``meta``.
    Before, the torch layout of an abstract model raised JAX's own InvalidInputException."""
    nnx = pytest.importorskip("flax.nnx")
    torch = pytest.importorskip("torch")

    class Net(nnx.Module):
        def __init__(self, rngs: Any) -> None:
            self.embed = nnx.Embed(10, 6, rngs=rngs)
            self.conv = nnx.Conv(6, 4, (3,), rngs=rngs)
            self.norm = nnx.LayerNorm(4, rngs=rngs)
            self.head = nnx.Linear(4, 2, param_dtype=jnp.bfloat16, rngs=rngs)

    with torch.device("meta"):
        twin = torch.nn.ModuleDict(
            {
                "embed": torch.nn.Embedding(10, 6),
                "conv": torch.nn.Conv1d(6, 4, 3),
                "norm": torch.nn.LayerNorm(4),
                "head": torch.nn.Linear(4, 2, dtype=torch.bfloat16),
            }
        )
    ours = tj.state_dict(nnx.eval_shape(lambda: Net(nnx.Rngs(0))), layout="torch")
    theirs = twin.state_dict()
    assert sorted(ours) == sorted(theirs)
    for name, tensor in theirs.items():
        assert (ours[name].shape, ours[name].dtype, ours[name].device) == (
            tensor.shape,
            tensor.dtype,
            tensor.device,
        ), name


def test_an_abstract_equinox_model_is_filled_too(tmp_path: Path) -> None:
    """``eqx.filter_eval_shape`` leaves are ``jax.ShapeDtypeStruct``: before, they were
    skipped, so nothing was filled and the model stayed abstract."""
    eqx = pytest.importorskip("equinox")
    reference = eqx.nn.MLP(4, 2, 8, 2, key=jax.random.key(0))
    path = tmp_path / "mlp.safetensors"
    tj.save_file(reference, path)
    abstract = eqx.filter_eval_shape(eqx.nn.MLP, 4, 2, 8, 2, key=jax.random.key(1))
    model = tj.load_state(abstract, path, device="auto", max_memory={"cpu": "1MiB"})
    x = jnp.linspace(-1, 1, 4)
    np.testing.assert_array_equal(model(x), reference(x))
    assert set(tj.state_dict(model)) == set(tj.state_dict(reference))


def _layers(nnx: Any) -> dict[str, Any]:
    """One of each flax layer the torch layout knows (module_state's table), and a model
    of several: each made by a function of its Rngs, so it can be made abstract."""
    return {
        "Linear": lambda rngs: nnx.Linear(3, 5, rngs=rngs),
        "Conv": lambda rngs: nnx.Conv(2, 4, (3, 3), rngs=rngs),
        "Embed": lambda rngs: nnx.Embed(7, 3, rngs=rngs),
        "LayerNorm": lambda rngs: nnx.LayerNorm(6, rngs=rngs),
        "RMSNorm": lambda rngs: nnx.RMSNorm(6, rngs=rngs),
        "GroupNorm": lambda rngs: nnx.GroupNorm(6, num_groups=2, rngs=rngs),
        "BatchNorm": lambda rngs: nnx.BatchNorm(6, rngs=rngs),
        "Sequential": lambda rngs: nnx.Sequential(
            nnx.Linear(3, 4, rngs=rngs), nnx.LayerNorm(4, rngs=rngs)
        ),
    }


@pytest.mark.parametrize(
    "layer",
    ["Linear", "Conv", "Embed", "LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm", "Sequential"],
)
@pytest.mark.parametrize("layout", ["jax", "torch"])
def test_every_layer_made_abstract_lists_and_loads_as_the_concrete_one(
    tmp_path: Path, layer: str, layout: str
) -> None:
    """The concrete layer is the oracle for its abstract twin: the same names, shapes and
    dtypes in both layouts, and loading a checkpoint of it fills the abstract one with
    the concrete one's values."""
    nnx = pytest.importorskip("flax.nnx")
    if layout == "torch":
        pytest.importorskip("torch")
    make = _layers(nnx)[layer]
    concrete = make(nnx.Rngs(0))
    abstract = nnx.eval_shape(lambda: make(nnx.Rngs(1)))
    theirs = tj.state_dict(concrete, layout=layout)
    ours = tj.state_dict(abstract, layout=layout)
    assert sorted(ours) == sorted(theirs)
    for name, value in theirs.items():
        assert (tuple(ours[name].shape), str(ours[name].dtype)) == (
            tuple(value.shape),
            str(value.dtype),
        ), name
    path = tmp_path / "layer.safetensors"
    tj.save_file(dict(tj.state_dict(concrete, layout=layout)), path)
    filled = tj.load_state(abstract, path, device="auto", max_memory={"cpu": "1MiB"})
    for name, value in tj.state_dict(filled).items():
        np.testing.assert_array_equal(value, tj.state_dict(concrete)[name])


def test_the_hosts_budget_takes_every_spelling_of_the_cpu(checkpoint: Any, no_reads: None) -> None:
    """``torch.device("cpu")`` and ``tj.device("cpu")`` equal ``"cpu"``: each is the
    host's share, never an accelerator to fill (it was refused as the host's device)."""
    torch = pytest.importorskip("torch")
    path, tensors = checkpoint
    total = sum(t.nbytes for t in tensors.values())
    for key in ("cpu", torch.device("cpu"), tj.device("cpu")):
        assert tj.DeviceMap.plan(path, max_memory={key: total}).modules() == {"": CPU}
        with pytest.raises(tj.OutOfMemoryError, match=r"max_memory \(its 'cpu' entry"):
            tj.DeviceMap.plan(path, max_memory={key: total - 1})
