"""``tj.to_device`` & co. against ``Tensor.to`` / ``Module.to`` on this machine.

The torch side works on a tensor, the port on the JAX array a ported program holds;
results must agree on placement, dtype, values, identity and aliasing (torch returns
the input itself when nothing changes), and on the error when a device is missing.
Each comparison runs eagerly and, where placement is not involved, under ``jax.jit``.
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
from tests.support.distributed.launch import launch, results
from tests.support.gpu_proxy import host_cpu, torch_named_here

from .harness import Outcome, assert_same_outcome, run

TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def sources() -> tuple[torch.Tensor, jax.Array]:
    """The same data: a CPU tensor, and a JAX array committed to the CPU (as ported)."""
    return torch.arange(6.0).reshape(2, 3), tj.to_device(jnp.arange(6.0).reshape(2, 3), "cpu")


def compare(torch_fn: Any, tj_fn: Any) -> None:
    """Run both on fresh sources; compare outcome, identity and aliasing with the input."""
    torch_x, tj_x = sources()
    theirs, ours = run(lambda: torch_fn(torch_x)), run(lambda: tj_fn(tj_x))
    assert_same_outcome(theirs, ours, torch_source=torch_x, tj_source=tj_x)
    if theirs.error is None:
        assert (ours.value is tj_x) == (theirs.value is torch_x), "identity differs"


# "cpu:0" is left out: torch copies a "cpu" tensor moved to "cpu:0" (it compares the
# unindexed and indexed CPU devices as different); JAX CPU devices are always indexed.
@pytest.mark.idiom("tensor-to-device")
@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:1"])
def test_to_device(device: str) -> None:
    compare(lambda x: x.to(device), lambda x: tj.to_device(x, device))


@pytest.mark.idiom("tensor-to-device")
def test_to_meta_is_a_documented_difference() -> None:
    assert torch.arange(3.0).to("meta").device.type == "meta"
    with pytest.raises(tj.DeviceUnavailableError, match="eval_shape"):
        tj.to_device(jnp.arange(3.0), "meta")


@pytest.mark.idiom("tensor-to-device")
def test_to_a_device_object() -> None:
    compare(lambda x: x.to(torch.device("cpu")), lambda x: tj.to_device(x, tj.device("cpu")))
    compare(lambda x: x.to(torch.device("cpu")), lambda x: tj.to_device(x, torch.device("cpu")))


@pytest.mark.idiom("tensor-to-dtype")
@pytest.mark.parametrize("dtype", list(TORCH_DTYPES))
def test_to_dtype(dtype: str) -> None:
    compare(lambda x: x.to(TORCH_DTYPES[dtype]), lambda x: tj.to_device(x, jnp.dtype(dtype)))
    compare(lambda x: x.to(dtype=TORCH_DTYPES[dtype]), lambda x: tj.to_device(x, dtype=dtype))
    compare(lambda x: x.to(TORCH_DTYPES[dtype]), lambda x: tj.to_device(x, TORCH_DTYPES[dtype]))


@pytest.mark.idiom("tensor-to-dtype")
@pytest.mark.parametrize("dtype", list(TORCH_DTYPES))
def test_to_dtype_under_jit(dtype: str) -> None:
    torch_x, tj_x = sources()
    ours = jax.jit(lambda x: tj.to_device(x, jnp.dtype(dtype)))(tj_x)
    assert_same_outcome(Outcome(torch_x.to(TORCH_DTYPES[dtype])), Outcome(ours))


@pytest.mark.idiom("tensor-to-device-dtype")
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_to_device_and_dtype(device: str) -> None:
    compare(lambda x: x.to(device, torch.float16), lambda x: tj.to_device(x, device, jnp.float16))


@pytest.mark.idiom("tensor-to-other")
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_to_other(dtype: str) -> None:
    torch_other = torch.zeros(1, dtype=TORCH_DTYPES[dtype])
    tj_other = tj.to_device(jnp.zeros(1, dtype=dtype), "cpu")
    compare(lambda x: x.to(torch_other), lambda x: tj.to_device(x, tj_other))


@pytest.mark.idiom("tensor-to-copy")
@pytest.mark.parametrize("dtype", [None, "float16"])
def test_copy(dtype: str | None) -> None:
    torch_dtype = None if dtype is None else TORCH_DTYPES[dtype]
    compare(
        lambda x: x.to("cpu", torch_dtype, copy=True),
        lambda x: tj.to_device(x, "cpu", dtype, copy=True),
    )


@pytest.mark.idiom("tensor-non-blocking")
def test_non_blocking() -> None:
    compare(
        lambda x: x.to("cpu", non_blocking=True),
        lambda x: tj.to_device(x, "cpu", non_blocking=True),
    )
    compare(
        lambda x: x.to("cpu", torch.float16, non_blocking=True),
        lambda x: tj.to_device(x, "cpu", jnp.float16, non_blocking=True),
    )


@pytest.mark.idiom("tensor-cuda")
def test_cuda() -> None:
    compare(lambda x: x.cuda(), lambda x: tj.to_device(x, "cuda"))


@pytest.mark.idiom("tensor-cpu")
def test_cpu() -> None:
    compare(lambda x: x.cpu(), lambda x: tj.to_device(x, "cpu"))


@pytest.mark.idiom("batch-to-device")
def test_batch_dict() -> None:
    torch_batch = {"ids": torch.arange(4, dtype=torch.int32), "mask": torch.ones(4), "n": 4}
    tj_batch = {"ids": np.arange(4, dtype=np.int32), "mask": torch.ones(4), "n": 4}
    theirs = {k: v.to("cpu") if isinstance(v, torch.Tensor) else v for k, v in torch_batch.items()}
    ours = tj.to_device(tj_batch, "cpu")
    assert ours.keys() == theirs.keys() and ours["n"] == theirs["n"] == 4
    for key in ("ids", "mask"):
        assert_same_outcome(Outcome(theirs[key]), Outcome(ours[key]))
        assert isinstance(ours[key], jax.Array) and ours[key].committed


@pytest.mark.idiom("tensor-device")
def test_device_attribute() -> None:
    torch_x, tj_x = sources()
    theirs = torch_named_here(torch_x.device)  # the host CPU as tj names it here
    assert_same_outcome(Outcome(theirs), Outcome(tj.device_of(tj_x)))
    assert (tj.device_of(tj_x) == host_cpu()) == (theirs == torch_named_here(torch.device("cpu")))


@pytest.mark.idiom("tensor-device")
def test_device_under_jit_is_none_and_still_usable() -> None:
    _, tj_x = sources()
    seen: list[Any] = []

    def step(x: jax.Array) -> jax.Array:
        seen.append(tj.device_of(x))
        return jnp.zeros(3, device=tj.device_of(x)) + x.sum()

    assert jax.jit(step)(tj_x).device == tj.device("cpu")
    assert seen == [None]


class TorchModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 2)
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))


class NnxModel(nnx.Module):
    def __init__(self) -> None:
        self.linear = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
        self.steps = nnx.BatchStat(jnp.zeros((), dtype=jnp.int32))


@pytest.mark.idiom("module-to")
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_module_to(device: str) -> None:
    torch_model, tj_model = TorchModel(), NnxModel()
    theirs = run(lambda: torch_model.to(device))
    ours = run(lambda: tj.to_device(tj_model, device))
    if theirs.error is not None:
        assert_same_outcome(theirs, ours)
        return
    assert theirs.value is torch_model and ours.value is tj_model
    assert_same_outcome(
        Outcome(torch_named_here(next(torch_model.parameters()).device)),
        Outcome(next(tj.parameters(tj_model)).device),
    )
    assert all(p.committed for p in tj.parameters(tj_model))


@pytest.mark.idiom("tensor-to-dtype")
@pytest.mark.parametrize("kind", ["array", "module"])
def test_to_dtype_keeps_what_a_cpu_context_made_on_the_cpu(kind: str) -> None:
    """``x.to(dtype)`` keeps the device, for data made where the default device said."""
    with torch.device("cpu"):
        torch_model, torch_x = TorchModel(), torch.ones(2)
    with tj.device("cpu"):
        tj_model, tj_x = NnxModel(), jnp.ones(2)
    if kind == "array":
        theirs, ours = (
            torch_x.to(torch.bfloat16).device,
            tj.device_of(tj.to_device(tj_x, jnp.bfloat16)),
        )
    else:
        theirs = next(torch_model.to(torch.bfloat16).parameters()).device
        ours = tj.device_of(tj.to_device(tj_model, jnp.bfloat16))
    assert ours == torch_named_here(theirs)


@pytest.mark.idiom("module-to-dtype")
def test_module_to_dtype_casts_floating_state_only() -> None:
    torch_model, tj_model = TorchModel(), NnxModel()
    assert torch_model.to(torch.bfloat16) is torch_model
    assert tj.to_device(tj_model, jnp.bfloat16) is tj_model
    assert (
        str(next(torch_model.parameters()).dtype) == f"torch.{next(tj.parameters(tj_model)).dtype}"
    )
    assert not torch_model.steps.dtype.is_floating_point
    assert jnp.issubdtype(tj_model.steps[...].dtype, jnp.integer)


@pytest.mark.idiom("module-to-dtype")
def test_module_to_integer_dtype_raises_like_torch() -> None:
    assert_same_outcome(
        run(lambda: TorchModel().to(torch.int32)), run(lambda: tj.to_device(NnxModel(), jnp.int32))
    )


@pytest.mark.idiom("parameters-device")
def test_parameters_device_equals_the_device() -> None:
    torch_model = TorchModel().to("cpu")
    tj_model = tj.to_device(NnxModel(), "cpu")
    torch_device, tj_device = torch_named_here(torch.device("cpu")), host_cpu()
    assert (torch_named_here(next(torch_model.parameters()).device) == torch_device) == (
        next(tj.parameters(tj_model)).device == tj_device
    )
    assert next(tj.parameters(tj_model)).device == tj_device
    assert tj.device_of(tj_model) == tj_device


@pytest.mark.idiom("from-numpy")
def test_from_numpy_aliases_an_aligned_buffer() -> None:
    source = _aligned(np.arange(8, dtype=np.float32))
    theirs, ours = torch.from_numpy(source), tj.to_jax(source)
    assert_same_outcome(Outcome(theirs), Outcome(ours), torch_source=source, tj_source=source)
    source[0] = 42.0  # as with torch.from_numpy, writes show through
    assert float(theirs[0]) == float(ours[0]) == 42.0


@pytest.mark.idiom("from-numpy")
def test_from_numpy_of_an_unaligned_buffer_copies_or_raises() -> None:
    source = _aligned(np.arange(9, dtype=np.float32))[1:]
    assert torch.from_numpy(source).data_ptr() == source.ctypes.data  # torch aliases anything
    copied = tj.to_jax(source)
    assert copied.unsafe_buffer_pointer() != source.ctypes.data
    assert np.asarray(copied).tolist() == source.tolist()
    with pytest.raises(tj.ConversionError, match="4 bytes past a 64-byte boundary"):
        tj.to_jax(source, strict=True)


@pytest.mark.idiom("tensor-to-jax")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int32", "bool", "uint8"])
def test_tensor_to_jax_shares_memory(dtype: str) -> None:
    tensor = torch.arange(8).to(getattr(torch, dtype))
    array = tj.to_jax(tensor, strict=True)
    assert array.unsafe_buffer_pointer() == tensor.data_ptr()
    assert_same_outcome(Outcome(tensor), Outcome(array))


@pytest.mark.idiom("jax-to-tensor")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "bool"])
def test_jax_to_tensor_shares_memory(dtype: str) -> None:
    array = tj.to_device(jnp.arange(8).astype(dtype), "cpu")
    tensor = tj.to_torch(array)
    assert tensor.data_ptr() == array.unsafe_buffer_pointer()
    assert_same_outcome(Outcome(tensor), Outcome(array))


def _aligned(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A copy of ``values`` whose buffer starts on a 64-byte boundary."""
    raw = np.empty(values.nbytes + 64, dtype=np.uint8)
    start = -raw.ctypes.data % 64
    aligned = raw[start : start + values.nbytes].view(values.dtype).reshape(values.shape)
    aligned[...] = values
    return aligned


# --- next(model.parameters()).device, as ported code reads it ------------------------


def _reads(device: Any) -> dict[str, Any]:
    """What ported code does with a parameter's device."""
    return {
        "type": device.type,
        "index": device.index,
        "str": str(device),
        "repr": repr(device),
        "is_cuda": device.type == "cuda",
        "eq_torch_cpu": device == torch.device("cpu"),
        "eq_torch_cpu0": device == torch.device("cpu", 0),
        "ne_torch_cuda": device != torch.device("cuda"),
        "eq_string": device == "cpu",  # False in torch too: a device is not a string
        "f_string": f"on {device}",
    }


def _equinox_model() -> Any:
    eqx = pytest.importorskip("equinox")
    return eqx.nn.Linear(3, 2, key=jax.random.key(0))


TJ_MODELS = {
    "nnx": lambda: NnxModel(),
    "linen-variables": lambda: {"params": {"kernel": jnp.ones((3, 2)), "bias": jnp.zeros(2)}},
    "equinox": _equinox_model,
    "pytree": lambda: [jnp.ones((2, 3)), jnp.zeros(2)],
}


@pytest.mark.idiom("parameters-device")
@pytest.mark.idiom("parameters-device-type")
@pytest.mark.parametrize("kind", list(TJ_MODELS))
def test_parameter_device_reads_like_torchs(kind: str) -> None:
    torch_model = TorchModel().to(torch.device("cpu"))
    tj_model = tj.to_device(TJ_MODELS[kind](), tj.device("cpu"))
    theirs = torch_named_here(next(torch_model.parameters()).device)
    ours = next(tj.parameters(tj_model)).device
    assert _reads(ours) == _reads(theirs)
    assert _reads(tj.device_of(tj_model)) == _reads(theirs)


@pytest.mark.idiom("parameter-count")
@pytest.mark.parametrize("kind", ["nnx", "equinox"])
def test_parameter_count_and_shapes_match_torch(kind: str) -> None:
    torch_linear = torch.nn.Linear(3, 2)
    tj_linear = nnx.Linear(3, 2, rngs=nnx.Rngs(0)) if kind == "nnx" else _equinox_model()
    assert sum(p.numel() for p in tj.parameters(tj_linear)) == sum(
        p.numel() for p in torch_linear.parameters()
    )
    assert sorted(p.shape for p in tj.parameters(tj_linear)) == sorted(
        tuple(p.shape) if kind == "equinox" else tuple(reversed(p.shape))  # nnx: (in, out)
        for p in torch_linear.parameters()
    )


# --- copy=True against Tensor.to(copy=True), writing to the source afterwards ---------

COPY_CALLS = {
    "device": ((("cpu",), {}), (("cpu",), {})),
    "same-dtype": (((torch.float32,), {}), ((jnp.float32,), {})),
    "dtype-keyword": (((), {"dtype": torch.float32}), ((), {"dtype": "float32"})),
    "device-and-dtype": ((("cpu", torch.float32), {}), (("cpu", jnp.float32), {})),
}


@pytest.mark.idiom("tensor-to-copy")
@pytest.mark.parametrize("form", list(COPY_CALLS))
@pytest.mark.parametrize("source_kind", ["torch", "aligned-numpy"])
def test_copy_is_a_copy_whatever_the_form(form: str, source_kind: str) -> None:
    (torch_args, torch_kwargs), (tj_args, tj_kwargs) = COPY_CALLS[form]
    torch_source = torch.arange(4.0)
    tj_source: Any = (
        torch.arange(4.0) if source_kind == "torch" else _aligned(np.arange(4, dtype=np.float32))
    )
    theirs = torch_source.to(*torch_args, copy=True, **torch_kwargs)
    ours = tj.to_device(tj_source, *tj_args, copy=True, **tj_kwargs)
    torch_source[0] = tj_source[0] = 99.0
    assert_same_outcome(Outcome(theirs), Outcome(ours))


# --- torch modules and torch APIs in mixed code ---------------------------------------


@pytest.mark.idiom("device-torch-device")
def test_torch_apis_take_the_devices_torch_device() -> None:
    device = tj.device("cpu")
    assert_same_outcome(
        run(lambda: torch.zeros(2, device=torch.device("cpu"))),
        run(lambda: torch.zeros(2, device=device.torch_device)),
    )
    tensor = torch.arange(3.0)
    assert tensor.to(device.torch_device) is tensor.to(torch.device("cpu")) is tensor
    model = torch.nn.Linear(2, 2)
    assert model.to(device.torch_device) is model  # Module.to moves in place, as before


@pytest.mark.idiom("torch-module-to")
def test_a_torch_module_given_to_to_device_is_refused_not_ignored() -> None:
    module = torch.nn.Linear(2, 2)
    theirs = run(lambda: module.to(torch.float16))
    ours = run(lambda: tj.to_device(torch.nn.Linear(2, 2), jnp.float16))
    assert theirs.error is None and theirs.value.weight.dtype == torch.float16
    assert isinstance(ours.error, tj.ConversionError)  # documented: never a silent no-op
    assert "module.to(device.torch_device)" in str(ours.error)


# --- odd tensors: torch's values, or torch's error class ------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.tensor([1 + 2j, -1j]).conj(),
        lambda: torch.tensor([1 + 2j]).conj().imag,  # contiguous: DLPack would drop the sign
        lambda: torch.arange(6.0).reshape(2, 3).t(),
    ],
    ids=["conjugate-bit", "negative-bit", "transposed"],
)
def test_lazy_tensors_convert_to_torchs_values(make: Any) -> None:
    assert_same_outcome(run(lambda: make().to("cpu")), run(lambda: tj.to_device(make(), "cpu")))


def test_meta_tensors_fail_like_torch() -> None:
    assert_same_outcome(
        run(lambda: torch.ones(2, device="meta").cpu()),
        run(lambda: tj.to_device(torch.ones(2, device="meta"), "cpu")),
    )


def test_big_endian_numpy_converts_where_torch_refuses() -> None:
    source = np.arange(3, dtype=">f4")
    theirs = run(lambda: torch.from_numpy(source))
    assert isinstance(theirs.error, ValueError) and "byte order" in str(theirs.error)
    assert np.asarray(tj.to_jax(source)).tolist() == [0.0, 1.0, 2.0]  # documented difference
    with pytest.raises(tj.ConversionError):  # ... and a ValueError, as torch's
        tj.to_jax(source, strict=True)


# --- Equinox: modules are immutable, so the moved module comes back -------------------


@pytest.mark.idiom("equinox-module-to")
def test_equinox_module_to_returns_the_moved_module() -> None:
    eqx = pytest.importorskip("equinox")
    model = eqx.nn.MLP(3, 2, 8, 1, key=jax.random.key(0))
    torch_model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU())
    moved = tj.to_device(model, tj.device("cpu"), jnp.bfloat16)
    theirs = torch_model.to(torch.device("cpu"), torch.bfloat16)
    assert theirs is torch_model and moved is not model  # immutable: use the result
    assert type(moved) is type(model) and moved.activation is model.activation
    assert all(p.dtype == jnp.bfloat16 and p.data.committed for p in tj.parameters(moved))
    assert all(p.dtype == jnp.float32 for p in tj.parameters(model))  # input unchanged
    theirs_device = torch_named_here(next(theirs.parameters()).device)
    assert_same_outcome(Outcome(theirs_device), Outcome(tj.device_of(moved)))
    assert float(moved(jnp.ones(3, jnp.bfloat16)).sum()) == pytest.approx(
        float(model(jnp.ones(3)).sum()), rel=0.05
    )
    assert tj.to_device(moved, "cpu") is not moved  # a new module, the same arrays
    again = list(tj.parameters(tj.to_device(moved, "cpu")))
    assert all(new.data is old.data for new, old in zip(again, tj.parameters(moved), strict=True))


# --- two processes: the local device, never JAX's global id ---------------------------

JOB = "tests/support/distributed/placement_ranks.py"  # both sides of placement_worker.py


@pytest.mark.idiom("parameters-device")
def test_parameter_device_in_a_two_process_job_is_the_local_device() -> None:
    status, out, err = launch("--nproc-per-node", "2", "--cpu-devices", "1", JOB)
    assert status == 0, out[-3000:] + err[-3000:]
    ours, theirs = results(out, "TJ ", count=2), results(out, "TORCH ", count=2)
    assert [r["jax_device_id"] for r in ours] == [0, 2048]  # what a bare jax.Device shows
    for rank_ours, rank_theirs in zip(ours, theirs, strict=True):
        for kind in ("local", "replicated"):
            assert rank_ours[kind] == rank_theirs[kind], kind
        assert rank_ours["equal_tj_cpu"] == [True, True]
        assert rank_ours["device_of_replicated"] == rank_theirs["replicated"]["str"]
