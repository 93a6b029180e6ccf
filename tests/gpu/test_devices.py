"""Device names resolve to the CUDA devices torch sees."""

from __future__ import annotations

import torch2jax_device as tj


def test_cuda_resolves_to_a_cuda_jax_device() -> None:
    gpu = tj.resolve("cuda:0")
    assert gpu.platform == "gpu" and tj.device(gpu) == tj.device("cuda:0")
    assert tj.list_devices("cuda") == [tj.device("cuda", i) for i in range(tj.cuda.device_count())]
