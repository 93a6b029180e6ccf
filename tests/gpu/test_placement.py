"""Placement on a real GPU: torch's same-device error, and the CPU-fallback warning."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import torch2jax_device as tj
from tests.parity.harness import assert_same_outcome, run


@tj.strict_placement
def _step(weight: object, batch: object) -> object:
    return (weight * batch).sum()  # type: ignore[operator]


def test_host_batch_meets_gpu_weights_like_torch() -> None:
    torch_weight = torch.ones(3, device="cuda")
    theirs = run(lambda: torch_weight * torch.ones(3))
    ours = run(lambda: _step(tj.to_device(jnp.ones(3), "cuda"), np.ones(3, np.float32)))
    assert_same_outcome(theirs, ours)
    shared = "Expected all tensors to be on the same device, but found at least two devices, "
    for message in (str(theirs.error), str(ours.error)):
        assert message.startswith(shared) and "cuda:0" in message and " cpu" in message


def test_cpu_committed_inputs_on_a_gpu_machine_warn() -> None:
    weight = tj.to_device(jnp.ones(3), "cpu")
    with pytest.warns(tj.CpuComputationWarning, match=r"runs on the CPU although the default"):
        _step(weight, tj.to_device(np.ones(3, np.float32), "cpu"))


def test_parameter_device_is_cuda_with_torchs_index() -> None:
    params = tj.to_device({"w": jnp.ones(2)}, "cuda")
    device = next(tj.parameters(params)).device
    torch_device = next(torch.nn.Linear(2, 2).to("cuda").parameters()).device
    assert (device.type, device.index, str(device)) == (
        torch_device.type,
        torch_device.index,
        str(torch_device),
    )
    assert device == torch_device


def test_devices_meeting_in_a_block_are_named_like_torch() -> None:
    # JAX device ids repeat across backends (GPU 0 and CPU 0): the names come from both.
    theirs = run(lambda: torch.ones(3, device="cuda") + torch.ones(3))
    assert theirs.error is not None and "cuda:0 and cpu!" in str(theirs.error)
    gpu, cpu = tj.to_device(jnp.ones(3), "cuda"), tj.to_device(jnp.ones(3), "cpu")
    with pytest.raises(tj.MixedDeviceError, match="found at least two devices, cuda:0 and cpu!"):
        with tj.strict_placement():
            gpu @ cpu


def test_a_0_dim_cpu_tensor_meets_a_gpu_array_as_in_torch() -> None:
    scalar = torch.tensor(2.0)
    assert (torch.ones(3, device="cuda") * scalar).device.type == "cuda"  # torch allows it
    gpu = tj.to_device(jnp.ones(3), "cuda")
    assert tj.check_same_device(gpu, scalar) == tj.device("cuda:0")
    # JAX cannot compute with a torch tensor: a port passes its value (0-d host data,
    # which meets every device, as the 0-dim CPU tensor does in torch).
    assert float(_step(gpu, scalar.numpy())) == 6.0
    with pytest.raises(tj.MixedDeviceError, match="cuda:0 and cpu!"):
        tj.check_same_device(gpu, torch.ones(3))  # a 1-d CPU tensor does not, in torch either
