"""Devices named from settings, as ported scripts name them (``device-from-spec``)."""

from __future__ import annotations

import types

import pytest
import torch

import torch2jax_device as tj

from .harness import assert_same_outcome, run

SPECS = ["cpu", "cuda", "cuda:1", "mps", "cuda:01", "cuda:-1", "", 1.5, True, None]


@pytest.mark.idiom("device-from-spec")
@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_a_device_from_a_setting(spec: object) -> None:
    settings = types.SimpleNamespace(device=spec)
    assert_same_outcome(
        run(lambda: torch.device(settings.device)), run(lambda: tj.device(settings.device))
    )


@pytest.mark.idiom("device-from-spec")
def test_a_torch_device_in_a_setting_names_the_same_device() -> None:
    settings = types.SimpleNamespace(device=torch.device("cuda", 1))
    assert tj.device(settings.device) == settings.device


@pytest.mark.idiom("device-from-spec")
def test_torch_code_refuses_a_tj_device() -> None:
    """Why ``scan --diff`` keeps ``torch.device`` where torch code still uses the device."""
    # torch 2.13: "... must be torch.device ..."; torch 2.11: "zeros() received an invalid
    # combination of arguments - got (int, device=Device)" (seen on an H200).
    refused = r"must be torch\.device|invalid combination of arguments - got \(int, device=Device\)"
    with pytest.raises(TypeError, match=refused):
        torch.zeros(1, device=tj.device("cpu"))  # type: ignore[call-overload]


@pytest.mark.idiom("tensor-device-type")
@pytest.mark.parametrize("where", ["cpu", "cuda"])
def test_the_suggestion_for_get_device_answers_as_torch(where: str) -> None:
    if where == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA GPU for torch here")
    from torch2jax_device.porting.scanner import scan_source

    (finding,) = scan_source("import torch\nindex = x.get_device()\n")
    tensor = torch.ones(2, device=where)
    array = tj.to_device(tj.to_jax(tensor.cpu()), tj.device(tensor.device))
    ported = eval(finding.replacement, {"tj": tj, "x": array})  # the suggestion as printed
    assert ported == tensor.get_device()  # -1 on the CPU, as torch: never None
