"""Strict placement in one process with one CPU device: what passes, and its switches."""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import torch2jax_device as tj
from tests.support.gpu_proxy import host_cpu
from torch2jax_device._src import strict as _strict
from torch2jax_device._src.strict import pins_to_cpu


def test_one_device_and_host_data_is_torchs_cpu_world() -> None:
    @tj.strict_placement
    def step(params: dict[str, Any], batch: Any) -> jax.Array:
        return (params["w"] * jnp.asarray(batch)).sum()

    params = tj.to_device({"w": jnp.ones(3)}, "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about on a CPU-only machine
        assert float(step(params, np.ones(3, np.float32))) == 3.0
        assert float(step(params, torch.ones(3))) == 3.0
        with tj.device("cpu"):  # made where params are: JAX's default device may be a GPU
            batch = jnp.ones(3)
        assert float(step(params, batch=batch)) == 3.0
    assert step.__name__ == "step" and step.__wrapped__ is not None  # functools.wraps


def test_decorator_forms_and_scope_object() -> None:
    scope = tj.strict_placement(transfer_guard=True)
    assert isinstance(scope, tj.StrictPlacement) and scope.transfer_guard
    assert tj.strict_placement()(lambda: 1)() == 1
    with scope as entered:
        assert entered is scope
        with scope:  # nests, and restores what it changed
            assert jax.config.jax_transfer_guard_device_to_device == "disallow"
        assert jax.config.jax_transfer_guard_device_to_device == "disallow"


def test_process_wide_switch_sets_and_clears_jaxs_guard() -> None:
    assert jax.config.jax_transfer_guard_device_to_device in (None, "allow")
    tj.set_strict_placement(True)
    try:
        assert jax.config.jax_transfer_guard_device_to_device == "disallow"
        assert float(tj.to_device(np.ones(2, np.float32), "cpu").sum()) == 2.0
    finally:
        tj.set_strict_placement(False)
    assert jax.config.jax_transfer_guard_device_to_device == "allow"


@pytest.mark.parametrize(
    ("inputs", "default", "expected"),
    [
        ({"cpu"}, "gpu", True),  # insitubatch#88: committed host data, GPU default
        ({"cpu"}, "tpu", True),
        ({"cpu", "gpu"}, "gpu", False),  # JAX raises for these itself
        ({"gpu"}, "gpu", False),
        ({"cpu"}, "cpu", False),  # a CPU machine runs on the CPU
        (set(), "gpu", False),  # uncommitted inputs follow the default device
    ],
)
def test_when_committed_inputs_pin_a_computation_to_the_cpu(
    inputs: set[str], default: str, expected: bool
) -> None:
    assert pins_to_cpu(inputs, default) is expected


def test_errors_that_are_not_about_devices_pass_through() -> None:
    with pytest.raises(ZeroDivisionError):
        with tj.strict_placement():
            1 / 0  # noqa: B018


class _FakeDevice:
    """A jax.Device as JAX's messages name it: a platform, an id, a class in its repr."""

    def __init__(self, platform: str, device_id: int, kind: str) -> None:
        self.platform, self.id, self._kind = platform, device_id, kind

    def __repr__(self) -> str:
        return f"{self._kind}(id={self.id})"


# A GPU machine's JAX messages (jax 0.10/0.11 wording), where GPU 0 and CPU 0 share id 0.
_GPU_INCOMPATIBLE = (
    "Received incompatible devices for jitted computation. Got argument x of matmul with "
    "shape float32[3] and with device ids [0] on platform GPU and argument y of matmul with "
    "shape float32[3] and with device ids [0] on platform CPU"
)
_GPU_DISALLOWED = (
    "INVALID_ARGUMENT: Disallowed device-to-device transfer: aval=ShapedArray(float32[3]), "
    "sharding=SingleDeviceSharding(device=CpuDevice(id=0), memory_kind=device), "
    "dst_sharding=SingleDeviceSharding(device=CudaDevice(id=0), memory_kind=device)"
)


@pytest.mark.parametrize(
    ("error", "names"),
    [
        (ValueError(_GPU_INCOMPATIBLE), "cuda:0 and cpu!"),
        (RuntimeError(_GPU_DISALLOWED), "cuda:0 and cpu!"),
    ],
    ids=["committed-arrays-meet", "transfer-guard"],
)
def test_devices_with_one_id_on_two_backends_get_their_own_names(
    error: BaseException, names: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    devices = [
        (_FakeDevice("gpu", 0, "CudaDevice"), tj.device("cuda:0")),
        (_FakeDevice("cpu", 0, "CpuDevice"), tj.device("cpu")),
    ]
    monkeypatch.setattr(_strict, "_local_devices", lambda: devices)
    translated = _strict._torch_style(error)
    assert translated is not None
    assert f"found at least two devices, {names}" in str(translated)


def test_a_device_of_another_process_is_named_by_its_id_and_platform() -> None:
    error = ValueError(
        _GPU_INCOMPATIBLE.replace("ids [0] on platform GPU", "ids [9] on platform GPU")
    )
    translated = _strict._torch_style(error)
    assert translated is not None and f"JAX device id 9 (gpu) and {host_cpu()}!" in str(translated)
