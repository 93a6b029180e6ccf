"""``tj.cuda`` / ``tj.accelerator`` / discovery on this machine, as JAX sees it."""

from __future__ import annotations

import re

import jax
import pytest

import torch2jax_device as tj
from tests.support.deadlines import deadline

HAS_CUDA = "cuda" in tj.available_backends()


def test_available_backends_include_the_default_first() -> None:
    backends = tj.available_backends()
    assert "cpu" in backends
    assert backends[0] in {"cuda", "rocm", "tpu", "METAL", "cpu"}
    assert tj.list_devices() == [
        tj.device(d) for b in backends for d in jax.local_devices(backend=b)
    ]


def test_list_devices_of_an_absent_backend_is_empty() -> None:
    assert tj.list_devices("tpu") == [] or "tpu" in tj.available_backends()


def test_list_devices_of_a_device_type_lists_the_platforms_serving_it() -> None:
    gpus = [tj.device(d) for b in ("cuda", "rocm") if b in tj.available_backends()
            for d in jax.local_devices(backend=b)]  # fmt: skip
    assert tj.list_devices("gpu") == gpus
    assert tj.list_devices("cpu") == [tj.device(d) for d in jax.local_devices(backend="cpu")]


@pytest.mark.parametrize("name", ["bogus", "CPU", "meta", "cuda:0", ""])
def test_list_devices_of_a_name_no_platform_has_is_refused(name: str) -> None:
    """It gave ``[]``, as for a platform this machine lacks, so a typo read as no GPU."""
    with pytest.raises(
        tj.InvalidDeviceError, match=rf"no backend is named {re.escape(repr(name))}.*Fix: "
    ):
        tj.list_devices(name)


def test_list_devices_of_a_non_string_is_refused() -> None:
    with pytest.raises(tj.ArgumentTypeError, match=r"backend must be a str.*got int 0"):
        tj.list_devices(0)  # type: ignore[arg-type]


def test_predicates_agree_with_jax() -> None:
    assert tj.cuda.is_available() == HAS_CUDA
    assert tj.cuda.device_count() == (len(jax.local_devices(backend="cuda")) if HAS_CUDA else 0)


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-GPU behaviour")
@pytest.mark.parametrize(
    "call",
    [
        tj.cuda.current_device,
        lambda: tj.cuda.set_device(0),
        lambda: tj.cuda.device(0).__enter__(),
        tj.cuda.get_device_name,
        tj.cuda.get_device_properties,
        tj.cuda.get_device_capability,
        tj.cuda.synchronize,
    ],
)
def test_cuda_calls_without_a_gpu_raise_with_the_fix(call: object) -> None:
    with pytest.raises(tj.DeviceUnavailableError, match=r"CUDA is not available.*jax\[cuda12\]"):
        call()  # type: ignore[operator]


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-GPU behaviour")
def test_no_gpu_predicates_answer_false() -> None:
    assert not tj.cuda.is_bf16_supported()
    assert tj.cuda.device_count() == 0
    assert tj.accelerator.device_count() == 0 or tj.accelerator.is_available()


@pytest.mark.skipif(tj.accelerator.is_available(), reason="checks the no-accelerator behaviour")
def test_accelerator_index_calls_without_one_raise_torch_message() -> None:
    with pytest.raises(tj.DeviceUnavailableError, match="Cannot access accelerator device"):
        tj.accelerator.current_device_index()
    with tj.accelerator.device_index(None):  # None changes nothing, as in torch
        pass


@pytest.mark.parametrize("index", [-1, -2])
def test_accelerator_device_index_refuses_a_negative_index_on_an_accelerator(
    monkeypatch: pytest.MonkeyPatch, index: int
) -> None:
    # torch 2.11 on an H200: torch.accelerator.device_index(-1) raises "CUDA error: invalid
    # device ordinal" on entering (tests/parity/test_availability.py checks it against
    # torch on a GPU); torch.cuda.device(-1) changes nothing. The CPU stands in here.
    monkeypatch.setattr(tj.accelerator, "_platform", lambda: "cpu")
    before = tj.accelerator.current_device_index()
    with pytest.raises(tj.InvalidDeviceError, match=r"invalid device ordinal.*Fix: pass None"):
        with tj.accelerator.device_index(index):
            pass
    assert tj.accelerator.current_device_index() == before
    with tj.accelerator.device_index(0):  # a valid index still enters
        assert tj.accelerator.current_device_index() == 0


def test_backend_init_error_explains_jax_platforms() -> None:
    import subprocess
    import sys

    code = (
        "import torch2jax_device as tj\n"
        "try:\n    tj.available_backends()\n"
        "except tj.BackendInitError as e:\n    print('ERR', e)\n"
        "import warnings\nwarnings.simplefilter('ignore')\n"
        "print('avail', tj.cuda.is_available())\n"
    )
    env = {**__import__("os").environ, "JAX_PLATFORMS": "tpu"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=deadline(120),
        check=True,
    ).stdout
    assert "ERR JAX could not initialize its backends" in out
    assert "JAX_PLATFORMS='tpu'" in out and "'cuda,cpu'" in out
    assert "avail False" in out


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("cuda", "Stream"),
        ("cuda", "graphs"),
        ("backends", "cudnn"),
        ("accelerator", "current_stream"),
    ],
)
def test_a_torch_name_the_module_does_not_map_is_the_librarys_error(module: str, name: str) -> None:
    """``torch.cuda.Stream`` ported as ``tj.cuda.Stream``: Python's bare "module has no
    attribute" said nothing about the torch name or what to do."""
    torch = pytest.importorskip("torch")
    assert hasattr(getattr(torch, module), name)  # a real torch name
    with pytest.raises(tj.NoSuchAttributeError, match=rf"tj\.{module} has no '{name}' .*Fix: "):
        getattr(getattr(tj, module), name)
    assert not hasattr(getattr(tj, module), name)
    with pytest.raises(AttributeError) as dunder:  # what tools probe stays Python's
        getattr(tj, module).__wrapped__  # noqa: B018
    assert type(dunder.value) is AttributeError
