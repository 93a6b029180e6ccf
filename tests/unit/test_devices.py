"""Behaviour of ``tj.device`` beyond torch parity: immutability, resolution, errors."""

from __future__ import annotations

import pickle

import jax
import jax.numpy as jnp
import pytest

import torch2jax_device as tj
from tests.support.gpu_proxy import several_cpu_devices
from torch2jax_device._src import platforms as _platforms
from torch2jax_device._src import runtime as _runtime


def test_device_is_the_class() -> None:
    assert tj.device is tj.Device
    assert isinstance(tj.device("cpu"), tj.device)


def test_immutable() -> None:
    device = tj.device("cuda:1")
    with pytest.raises(AttributeError, match="immutable"):
        device.index = 2  # type: ignore[misc]
    with pytest.raises(AttributeError, match="immutable"):
        del device.type  # type: ignore[misc]
    assert device.index == 1


def test_hashable_and_usable_as_key() -> None:
    table = {tj.device("cuda:1"): "a", tj.device("cpu"): "b"}
    assert table[tj.device("cuda", 1)] == "a"
    assert len({tj.device("cpu"), tj.device("cpu"), tj.device("cpu:0")}) == 2


def test_pickle_round_trip() -> None:
    for spec in ["cuda:1", "cpu", "gpu:0"]:
        restored = pickle.loads(pickle.dumps(tj.device(spec)))
        assert restored == tj.device(spec) and repr(restored) == repr(tj.device(spec))


def test_equals_the_jax_device_it_resolves_to() -> None:
    cpu0 = jax.devices("cpu")[0]
    assert tj.device("cpu") == cpu0 and cpu0 == tj.device("cpu")
    assert (
        tj.device("cpu:0") == tj.to_device(jnp.zeros(1), "cpu").device
    )  # JAX's default may be a GPU
    assert tj.device("cuda:0") != cpu0  # unavailable devices are unequal, never an error
    assert tj.device("cpu") != "cpu"


def test_resolve_accepts_every_form() -> None:
    cpu0 = jax.devices("cpu")[0]
    for spec in ["cpu", "cpu:0", tj.device("cpu"), cpu0, ("cpu")]:
        assert tj.resolve(spec) == cpu0
    assert tj.resolve(None) == jnp.zeros(1).device


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (  # one CPU device on CPU and GPU machines, two in the proxy mode
            "cuda",
            r"'cuda' is not available: JAX has no cuda backend"
            r".*cpu \((1 device|\d+ devices)\).*cuda12",
        ),
        ("cuda:3", r"cuda:3.*not available.*Fix: install a CUDA build"),
        ("tpu", r"no tpu backend.*jax\[tpu\]"),
        ("mps", r"no METAL backend.*jax-metal"),
        ("meta", r"no JAX equivalent.*eval_shape"),
        ("xpu", r"no backend for torch device type 'xpu'"),
    ],
)
def test_unavailable_devices_name_what_exists_and_the_fix(spec: str, message: str) -> None:
    device = tj.device(spec)  # construction is lazy and never fails for valid specs
    with pytest.raises(tj.DeviceUnavailableError, match=message) as caught:
        _ = device.jax_device
    assert isinstance(caught.value, RuntimeError) and isinstance(caught.value, AssertionError)


def test_unavailable_hint_names_an_excluding_jax_platforms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    assert "JAX_PLATFORMS='cpu' excludes it; add 'cuda'" in _platforms.missing_platform_hint("cuda")
    assert "eval_shape" in _platforms.missing_platform_hint("meta")


def test_xla_means_the_default_backend() -> None:
    assert tj.resolve("xla") == jax.local_devices()[0]


def test_errors_share_one_base() -> None:
    for error in (tj.InvalidDeviceError, tj.DeviceTypeError, tj.DeviceUnavailableError):
        assert issubclass(error, tj.Torch2JaxDeviceError)
    assert issubclass(tj.InvalidDeviceError, RuntimeError)
    assert issubclass(tj.DeviceTypeError, TypeError)
    assert issubclass(tj.BackendInitError, RuntimeError)


class _CpuDevice(_runtime.CurrentDeviceContext):
    """``tj.cuda.device`` for the CPU platform, so the rule runs on this machine."""

    _what = "CPU"

    def _platform(self) -> str:
        return "cpu"


def test_a_process_whose_only_device_is_ordinal_3_stays_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One GPU per process: the current index is unset, and unset means the lowest ordinal.

    Leaving ``with tj.cuda.device(3):`` used to restore index 0, after which every
    unindexed ``tj.device("cuda")`` failed.
    """
    only = jax.local_devices(backend="cpu")[0]
    monkeypatch.setattr(_platforms, "device_indices", lambda platform: {3: only})
    assert tj.resolve("cpu") == only
    assert _runtime.current_index("cpu", "CPU") == 3
    with _CpuDevice(3):
        assert tj.resolve("cpu") == only
    assert tj.resolve("cpu") == only
    assert _runtime.current_index("cpu", "CPU") == 3
    with pytest.raises(tj.DeviceUnavailableError, match=r"'cpu:0' does not exist.*\(cpu:3\)"):
        tj.resolve("cpu:0")


def test_any_cpu_index_names_the_only_cpu_device() -> None:
    """torch ignores a CPU index; a process with one CPU device does too (several are
    told apart: tests/multidevice/test_devices.py)."""
    if several_cpu_devices():
        pytest.skip("one CPU device (CPU and GPU machines): simulated ones are told apart")
    only = jax.local_devices(backend="cpu")[0]
    assert [tj.resolve(f"cpu:{index}") for index in (0, 1, 2**31 - 1)] == [only] * 3
    assert tj.resolve(tj.device("cpu", 5)) == only
    with tj.device("cpu:3"):
        assert jnp.zeros(1).device == only


@pytest.mark.parametrize("spec", ["", "cuda:", ":0", "cuda:0:1"])
def test_an_unreadable_device_string_is_torchs_message_and_the_fix(spec: str) -> None:
    """torch's words ("Device string must not be empty", "Invalid device string: ..."),
    then how to write one: ``map_location=""`` and the like said nothing more."""
    with pytest.raises(tj.InvalidDeviceError, match=r"(empty|string: '.*')\. Fix: write a dev"):
        tj.device(spec)
