"""An independent side-by-side audit of issue 13's cases, torch 2.13 as the oracle (1 device).

Script-style: every case is a line of ported code run in torch and through
torch2jax_device; the audit passes when every difference is fixed or documented in
``docs/known-differences.md`` (see ``tests/support/audit.py``). Run it as a script to
read the tally: ``python -m tests.parity.test_audit``. The 4-device half is
``tests/multidevice/test_audit.py``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from flax import nnx

import torch2jax_device as tj
from tests.support.audit import Case, assert_clean, audit, summary
from tests.support.gpu_proxy import host_cpu, torch_named_here
from torch2jax_device._src.interop import aligned_empty

# --- the same model in both frameworks -------------------------------------------------


def torch_parameter() -> torch.Tensor:
    return next(torch.nn.Linear(3, 2).to(torch.device("cpu")).parameters())


def tj_parameter() -> tj.Parameter:
    return next(tj.parameters(tj.to_device(nnx.Linear(3, 2, rngs=nnx.Rngs(0)), tj.device("cpu"))))


def reads(device: Any) -> dict[str, Any]:
    """What ported code does with a device it was handed.

    Where tj's answer is a JAX array's place on the host CPU, torch's is read as
    ``torch_named_here`` names it: ``cpu:0`` among simulated CPU devices (the proxy mode),
    ``cpu`` on CPU and GPU machines, as tj names it.
    """
    return {
        "type": device.type,
        "index": device.index,
        "str": str(device),
        "is_cuda": device.type == "cuda",
        "eq_torch_cpu": device == torch.device("cpu"),
        "eq_string": device == "cpu",
    }


def device_cases() -> list[Case]:
    """Issue item 1: every device the library hands back reads like a torch.device."""
    return [
        Case(
            "parameter-device",
            lambda: reads(torch_named_here(torch_parameter().device)),
            lambda: reads(tj_parameter().device),
        ),
        Case(
            "parameter-device-equals-own-kind",
            lambda: (
                torch_named_here(torch_parameter().device) == torch_named_here(torch.device("cpu"))
            ),
            lambda: tj_parameter().device == host_cpu(),
        ),
        Case(
            "parameter-is-an-array",
            lambda: float((torch.ones(2, 3) * 2).sum()),
            lambda: float((next(tj.parameters([jnp.ones((2, 3))])) * 2).sum()),
        ),
        Case(
            "parameter-in-jit",
            lambda: float(torch.ones(3).sum()),
            lambda: float(jax.jit(jnp.sum)(next(tj.parameters([jnp.ones(3)])))),
        ),
        Case(
            "parameter-count",
            lambda: sum(p.numel() for p in torch.nn.Linear(3, 2).parameters()),
            lambda: sum(p.numel() for p in tj.parameters(nnx.Linear(3, 2, rngs=nnx.Rngs(0)))),
        ),
        Case(
            "device-of",
            lambda: reads(torch_named_here(torch.ones(2).device)),
            lambda: reads(tj.device_of(tj.to_device(jnp.ones(2), "cpu"))),
        ),
        Case(
            "device-of-numpy-scalar",
            lambda: reads(torch.as_tensor(np.float32(1)).device),
            lambda: reads(tj.device_of(np.float32(1))),
        ),
        Case(
            "default-device-in-context",
            lambda: _in(
                torch.device("cpu"), lambda: reads(torch_named_here(torch.get_default_device()))
            ),
            lambda: _in(tj.device("cpu"), lambda: reads(tj.get_default_device())),
        ),
        Case(
            "list-devices",
            lambda: reads(torch_named_here(torch.device("cpu"))),
            lambda: reads(tj.list_devices("cpu")[0]),
        ),
        # New arrays are made on the CPU on both sides: on a GPU machine JAX's default
        # device is the GPU, where torch's is the CPU (a documented difference).
        Case(
            "check-same-device",
            lambda: reads(torch_named_here((torch.ones(1) + torch.ones(1)).device)),
            lambda: reads(
                tj.check_same_device(
                    _in(tj.device("cpu"), lambda: jnp.ones(1)), tj.to_device(jnp.ones(1), "cpu")
                )
            ),
        ),
        Case(
            "check-same-device-0-dim-cpu-tensor",
            lambda: reads(torch_named_here((torch.ones(1) + torch.tensor(1.0)).device)),
            lambda: reads(
                tj.check_same_device(tj.to_device(jnp.ones(1), "cpu"), torch.tensor(1.0))
            ),
        ),
    ]


def _in(device: Any, body: Callable[[], Any]) -> Any:
    with device:
        return body()


# --- copy=True, for every input kind and form -------------------------------------------

COPY_FORMS: dict[str, tuple[tuple[Any, ...], tuple[Any, ...], dict[str, Any], dict[str, Any]]] = {
    "device": (("cpu",), ("cpu",), {}, {}),
    "same-dtype": ((torch.float32,), (jnp.float32,), {}, {}),
    "dtype-keyword": ((), (), {"dtype": torch.float32}, {"dtype": "float32"}),
    "device-and-dtype": (("cpu", torch.float32), ("cpu", jnp.float32), {}, {}),
}


def aligned_numpy() -> np.ndarray[Any, Any]:
    values = aligned_empty(16).view(np.float32)
    values[:] = [0.0, 1.0, 2.0, 3.0]
    return values


def copy_then_write(source: Any, to: Callable[[Any], Any]) -> Any:
    result = to(source)
    source[0] = 99.0  # a copy does not see this
    return result


def copy_cases() -> list[Case]:
    """Issue item 2: ``copy=True`` always copies."""
    cases = []
    for form, (torch_args, tj_args, torch_kwargs, tj_kwargs) in COPY_FORMS.items():
        for kind, make in (("torch", lambda: torch.arange(4.0)), ("aligned-numpy", aligned_numpy)):
            cases.append(
                Case(
                    f"copy-{form}-from-{kind}",
                    lambda a=torch_args, k=torch_kwargs: copy_then_write(
                        torch.arange(4.0), lambda t: t.to(*a, copy=True, **k)
                    ),
                    lambda a=tj_args, k=tj_kwargs, make=make: copy_then_write(
                        make(), lambda x: tj.to_device(x, *a, copy=True, **k)
                    ),
                )
            )
    return cases


# --- torch modules, unknown objects, and tj.device in torch / JAX APIs -----------------


def module_and_device_cases() -> list[Case]:
    """Issue items 3 and 4."""
    return [
        Case(
            "torch-module-to-dtype",
            lambda: str(torch.nn.Linear(2, 2).to(torch.float16).weight.dtype),
            lambda: tj.to_device(torch.nn.Linear(2, 2), jnp.float16),
            documented="**Torch modules are refused by `tj.to_device`**",
        ),
        Case(
            "torch-module-with-torch-device",
            lambda: torch.nn.Linear(2, 2).to(torch.device("cpu")).weight.device,
            lambda: torch.nn.Linear(2, 2).to(tj.device("cpu").torch_device).weight.device,
        ),
        Case(
            "unknown-object",
            lambda: object().to("cpu"),  # type: ignore[attr-defined]
            lambda: tj.to_device(object(), "cpu"),
            documented="**Only containers pass unknown objects through.**",
        ),
        Case(
            "torch-factory-with-torch-device",
            lambda: torch.zeros(2, device=torch.device("cpu")),
            lambda: torch.zeros(2, device=tj.device("cpu").torch_device),
        ),
        Case(
            "tensor-to-torch-device",
            lambda: torch.ones(2).to(torch.device("cpu")),
            lambda: torch.ones(2).to(tj.device("cpu").torch_device),
        ),
        Case(
            "jnp-factory-with-jax-device",
            lambda: torch.zeros(2, device=torch.device("cpu")),
            lambda: jnp.zeros(2, device=tj.device("cpu").jax_device),
        ),
        Case(
            "device-put-with-jax-device",
            lambda: torch.ones(2).to(torch.device("cpu")),
            lambda: jax.device_put(jnp.ones(2), tj.device("cpu").jax_device),
        ),
        Case(
            "jnp-factory-with-tj-device",
            lambda: torch.zeros(2, device=torch.device("cpu")),
            lambda: jnp.zeros(2, device=tj.device("cpu")),
            documented="**A `tj.device` is neither a `torch.device` nor a `jax.Device`.**",
        ),
        Case(
            "to-torch-with-tj-device",
            lambda: torch.ones(2).to(torch.device("cpu")),
            lambda: tj.to_torch(jnp.ones(2), tj.device("cpu")),
        ),
    ]


# --- odd inputs: torch's values or torch's error class ---------------------------------


def _quiet(make: Callable[[], Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's prototype / deprecation notes
        return make()


def quantized() -> torch.Tensor:
    return _quiet(lambda: torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.quint8))


def strictly_quiet(body: Callable[[], Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return body()


def odd_input_cases() -> list[Case]:
    """Issue items 6 and 7: no raw errors, NumPy scalars, the float64 warning."""
    conj = lambda: torch.tensor([1 + 2j, -1j]).conj()  # noqa: E731
    negative = lambda: torch.tensor([1 + 2j]).conj().imag  # noqa: E731  (contiguous)
    big_endian = lambda: np.arange(3, dtype=">f4")  # noqa: E731
    return [
        Case("conjugate-bit", lambda: conj().to("cpu"), lambda: tj.to_device(conj(), "cpu")),
        Case("conjugate-bit-to-jax", lambda: conj().to("cpu"), lambda: tj.to_jax(conj())),
        Case("negative-bit", lambda: negative().to("cpu"), lambda: tj.to_device(negative(), "cpu")),
        Case(
            "big-endian",
            lambda: torch.from_numpy(big_endian()),
            lambda: tj.to_jax(big_endian()),
            documented="**Big-endian NumPy arrays are converted**",
        ),
        Case(
            "string-array-in-a-batch",
            lambda: {"text": torch.as_tensor(np.array(["a", "b"]))},
            lambda: tj.to_device({"text": np.array(["a", "b"])}, "cpu"),
            documented="**NumPy arrays of text, objects, dates or records raise**",
        ),
        Case(
            "meta-tensor",
            lambda: torch.ones(2, device="meta").cpu(),
            lambda: tj.to_device(torch.ones(2, device="meta"), "cpu"),
        ),
        Case(
            "sparse-tensor",
            lambda: torch.eye(2).to_sparse().to("cpu").to_dense(),
            lambda: tj.to_device(torch.eye(2).to_sparse(), "cpu"),
            documented="**Sparse, quantized and nested tensors are refused**",
        ),
        Case(
            "quantized-tensor",
            lambda: quantized().to("cpu").dequantize(),
            lambda: tj.to_device(quantized(), "cpu"),
            documented="**Sparse, quantized and nested tensors are refused**",
        ),
        Case(
            "numpy-scalar-to-device",
            lambda: torch.as_tensor(np.float32(1.5)).to("cpu"),
            lambda: tj.to_device(np.float32(1.5), "cpu"),
        ),
        Case(
            "numpy-float64-batch",
            lambda: str(torch.from_numpy(np.linspace(0, 1, 3)).dtype),
            lambda: strictly_quiet(lambda: str(tj.to_device(np.linspace(0, 1, 3), "cpu").dtype)),
            documented="**NumPy float64 narrows quietly.**",
        ),
        Case(
            "numpy-float32-batch-values",
            lambda: torch.from_numpy(np.linspace(0, 1, 3, dtype=np.float32)),
            lambda: strictly_quiet(
                lambda: tj.to_device(np.linspace(0, 1, 3, dtype=np.float32), "cpu")
            ),
        ),
    ]


def all_cases() -> list[Case]:
    return device_cases() + copy_cases() + module_and_device_cases() + odd_input_cases()


def test_no_undocumented_differences_on_one_device() -> None:
    assert_clean(audit(all_cases()))


if __name__ == "__main__":
    print(summary(audit(all_cases())))
