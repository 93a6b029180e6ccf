"""Creating tensors on a device: torch's factories with ``device=`` against JAX's.

Factories whose rows run as written (``factory-device``, ``factory-tensor-device``) are
in test_catalog.py; these need a source tensor, a layer or a GPU.
"""

from __future__ import annotations

import jax.numpy as jnp
import pytest
import torch
from flax import nnx

import torch2jax_device as tj
from tests.support.gpu_proxy import torch_named_here

from .harness import normalize, run

DTYPES = ["float16", "bfloat16", "float32", "int32", "int8"]


@pytest.mark.idiom("tensor-new-factory")
@pytest.mark.parametrize("dtype", DTYPES)
def test_new_zeros_keeps_the_sources_dtype_and_device(dtype: str) -> None:
    source = torch.ones(3, dtype=getattr(torch, dtype))
    x = tj.to_jax(source)
    theirs = source.new_zeros((2, 3))
    ours = jnp.zeros((2, 3), dtype=x.dtype, device=tj.device_of(x).jax_device)
    assert normalize(ours) == normalize(theirs)


@pytest.mark.idiom("tensor-new-factory")
@pytest.mark.parametrize("dtype", DTYPES)
def test_new_tensor_takes_the_sources_dtype(dtype: str) -> None:
    source = torch.ones(3, dtype=getattr(torch, dtype))
    x = tj.to_jax(source)
    theirs = source.new_tensor([[1, 2], [3, 4]])
    ours = jnp.asarray([[1, 2], [3, 4]], dtype=x.dtype, device=tj.device_of(x).jax_device)
    assert normalize(ours) == normalize(theirs)


@pytest.mark.idiom("module-device-kwarg")
def test_a_layer_created_on_a_device() -> None:
    theirs = torch.nn.Linear(4, 2, device="cpu")
    with tj.device("cpu"):
        ours = nnx.Linear(4, 2, rngs=nnx.Rngs(0))
    assert tj.device_of(ours) == torch_named_here(theirs.weight.device)
    assert tj.device_of(ours.kernel[...]) == torch_named_here(theirs.weight.device)
    assert ours.kernel[...].shape == theirs.weight.T.shape
    assert str(ours.kernel[...].dtype) == str(theirs.weight.dtype).removeprefix("torch.")


@pytest.mark.idiom("cuda-tensor-type")
# With a GPU, torch (2.11 at least) warns that these constructors are deprecated.
@pytest.mark.filterwarnings(r"ignore:The torch\.cuda\.\*DtypeTensor constructors:UserWarning")
def test_legacy_cuda_tensor_types_need_a_gpu_in_both() -> None:
    theirs = run(lambda: torch.cuda.FloatTensor(2, 3))
    ours = run(lambda: jnp.empty((2, 3), jnp.float32, device=tj.device("cuda").jax_device))
    assert (theirs.error is None) == (ours.error is None), (theirs.describe(), ours.describe())
    if theirs.error is None:
        placement_and_dtype = [normalize(o.value)[:3] for o in (theirs, ours)]
        assert placement_and_dtype[0] == placement_and_dtype[1]
    else:
        assert isinstance(ours.error, tj.DeviceUnavailableError)
