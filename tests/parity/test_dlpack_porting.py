"""DLPack exchanges as glue code writes them, against the torch2jax_device calls the
scanner suggests for them (rows ``tensor-to-jax`` and ``jax-to-tensor``).

``jax.dlpack.from_dlpack(t)`` / ``jnp.from_dlpack(t)`` against ``tj.to_jax(t)``, and
``torch.from_dlpack(x)`` / ``torch.utils.dlpack.from_dlpack(x)`` against
``tj.to_torch(x)``: where the DLPack call succeeds, both must agree on placement, dtype,
values and whether they share the source's memory, checked by writing to the source
afterwards. Where they differ (refusals, a negative bit, capsules, other inputs), the
test pins down how, since those are the reasons ``scan --diff`` leaves the call alone.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.utils.dlpack

import torch2jax_device as tj

# --- torch tensor -> JAX ---------------------------------------------------------------

_TENSORS: dict[str, Callable[[], torch.Tensor]] = {
    "float32": lambda: torch.arange(64.0),
    "float32-unaligned": lambda: torch.arange(65.0)[1:],  # 4 bytes past 64: JAX copies
    "float32-transposed": lambda: torch.arange(64.0).reshape(8, 8).T,
    "int64": lambda: torch.arange(64),  # int32 without x64: a copy
    "float64": lambda: torch.arange(64, dtype=torch.float64),
    "bfloat16": lambda: torch.arange(64.0).to(torch.bfloat16),
    "float16": lambda: torch.arange(64.0).to(torch.float16),
    "bool": lambda: torch.arange(64) % 2 == 0,
    "uint8": lambda: torch.arange(64, dtype=torch.uint8),
    "float8_e4m3fn": lambda: torch.arange(64.0).to(torch.float8_e4m3fn),
    "0-d": lambda: torch.tensor(3.0),
    "empty": lambda: torch.ones(0),
}
_TO_JAX = {"jax.dlpack.from_dlpack": jax.dlpack.from_dlpack, "jnp.from_dlpack": jnp.from_dlpack}


def _overwrite(tensor: torch.Tensor) -> None:
    """Write new values into ``tensor``'s memory, in place."""
    if tensor.element_size() == 1:  # bool, uint8, float8: through the bytes
        tensor.view(torch.uint8).fill_(1)
    else:
        tensor.fill_(7)


def _quietly(convert: Callable[[], Any]) -> Any:
    """``convert()`` without tj's int64/float64 narrowing warning (tested elsewhere)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tj.DtypeNarrowingWarning)
        return convert()


def _shares(array: jax.Array, tensor: torch.Tensor) -> bool:
    return array.size > 0 and array.unsafe_buffer_pointer() == tensor.data_ptr()


def _values(array: jax.Array) -> np.ndarray[Any, Any]:
    host = np.asarray(array)
    return host.view(np.uint8) if host.dtype.itemsize == 1 else host


@pytest.mark.idiom("tensor-to-jax")
@pytest.mark.parametrize("exchange", _TO_JAX)
@pytest.mark.parametrize("case", _TENSORS)
def test_to_jax_places_and_shares_as_dlpack_does(exchange: str, case: str) -> None:
    source, ported = _TENSORS[case](), _TENSORS[case]()
    theirs = _TO_JAX[exchange](source)
    ours = _quietly(lambda: tj.to_jax(ported))
    assert ours.devices() == theirs.devices() == {jax.devices("cpu")[0]}
    assert ours.dtype == theirs.dtype
    assert ours.shape == theirs.shape == tuple(source.shape)
    np.testing.assert_array_equal(_values(ours), _values(theirs))
    assert _shares(ours, ported) == _shares(theirs, source), "alias-or-copy differs"
    _overwrite(source)
    _overwrite(ported)
    np.testing.assert_array_equal(_values(ours), _values(theirs))  # both see it, or neither


@pytest.mark.idiom("tensor-to-jax")
def test_a_negative_bit_is_resolved_where_dlpack_drops_it() -> None:
    """A dense lazy negated view (made as torch's own tests make it): DLPack shares its
    memory without the sign."""
    view = torch._neg_view(torch.arange(1.0, 65.0))
    assert view.is_neg()
    expected = view.tolist()  # [-1.0, -2.0, ...]
    theirs = jax.dlpack.from_dlpack(view)
    ours = tj.to_jax(view)
    assert np.asarray(ours).tolist() == expected
    assert not _shares(ours, view)  # resolving the bit is a copy
    assert np.asarray(theirs).tolist() != expected, (
        "DLPack now carries the negative bit: relax the tensor-to-jax note and the "
        "scanner's reason for not rewriting jax.dlpack.from_dlpack"
    )


@pytest.mark.idiom("tensor-to-jax")
@pytest.mark.parametrize(
    ("case", "make", "shares"),
    [
        ("requires-grad", lambda: torch.arange(64.0).requires_grad_(), True),  # detached
        ("strided", lambda: torch.arange(128.0)[::2], False),
        ("conjugate", lambda: torch.arange(64.0).to(torch.complex64).conj(), False),
    ],
)
def test_to_jax_converts_what_dlpack_refuses(case: str, make: Any, shares: bool) -> None:
    tensor = make()
    with pytest.raises((BufferError, RuntimeError)):
        jax.dlpack.from_dlpack(tensor)
    ours = tj.to_jax(tensor)
    assert ours.devices() == {jax.devices("cpu")[0]}
    assert str(ours.dtype) == str(tensor.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(np.asarray(ours), tensor.detach().resolve_conj().numpy())
    assert _shares(ours, tensor) == shares


@pytest.mark.idiom("tensor-to-jax")
def test_capsules_reach_neither() -> None:
    """``torch.utils.dlpack.to_dlpack`` makes a capsule, which JAX 0.10 no longer takes."""
    tensor = torch.arange(4.0)
    capsule = torch.utils.dlpack.to_dlpack(tensor)
    with pytest.raises(TypeError, match="__dlpack__"):
        jax.dlpack.from_dlpack(capsule)
    with pytest.raises(tj.ConversionError, match="PyCapsule"):
        tj.to_jax(capsule)
    assert _shares(tj.to_jax(tensor), tensor)  # the tensor itself is the port


# --- JAX array -> torch ----------------------------------------------------------------

_PINNED = jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0], memory_kind="pinned_host")
_ARRAYS: dict[str, Callable[[], jax.Array]] = {
    "float32": lambda: jnp.arange(64.0),
    "int32": lambda: jnp.arange(64),
    "bfloat16": lambda: jnp.arange(64.0, dtype=jnp.bfloat16),
    "float16": lambda: jnp.arange(64.0, dtype=jnp.float16),
    "bool": lambda: jnp.arange(64) % 2 == 0,
    "uint32": lambda: jnp.arange(64, dtype=jnp.uint32),
    "complex64": lambda: jnp.arange(64.0) * (1 + 1j),
    "float8_e4m3fn": lambda: jnp.arange(64.0).astype(jnp.float8_e4m3fn),
    "float8_e5m2": lambda: jnp.arange(64.0).astype(jnp.float8_e5m2),
    "0-d": lambda: jnp.array(3.0),
    "empty": lambda: jnp.ones(0),
    "transposed": lambda: jnp.arange(64.0).reshape(8, 8).T,
    "committed": lambda: jax.device_put(jnp.arange(64.0), jax.devices("cpu")[0]),
    "pinned_host": lambda: jax.device_put(jnp.arange(64.0), _PINNED),
}
_TO_TORCH = {
    "torch.from_dlpack": torch.from_dlpack,
    "torch.utils.dlpack.from_dlpack": torch.utils.dlpack.from_dlpack,
}


def _tensor_values(tensor: torch.Tensor) -> np.ndarray[Any, Any]:
    if tensor.element_size() == 1:
        return tensor.view(torch.uint8).numpy()
    if tensor.dtype == torch.bfloat16:
        return tensor.float().numpy()
    return tensor.numpy()


@pytest.mark.idiom("jax-to-tensor")
@pytest.mark.parametrize("exchange", _TO_TORCH)
@pytest.mark.parametrize("case", _ARRAYS)
def test_to_torch_is_the_dlpack_import(exchange: str, case: str) -> None:
    """For a JAX array, ``tj.to_torch`` is torch's DLPack import: the scanner renames it.

    The arrays are made on the host CPU: JAX's default device may be a GPU, whose arrays
    cross as CUDA tensors and never share a pointer with a CPU tensor (``tests/gpu``).
    """
    with tj.device("cpu"):
        array = _ARRAYS[case]()
    theirs = _TO_TORCH[exchange](array)
    ours = tj.to_torch(array)
    assert ours.device == theirs.device == torch.device("cpu")
    assert {tj.resolve(ours.device)} == array.devices()  # the tensor is where the array is
    assert ours.dtype == theirs.dtype
    assert ours.shape == theirs.shape == array.shape
    np.testing.assert_array_equal(_tensor_values(ours), _tensor_values(theirs))
    if array.size == 0:
        return
    assert ours.data_ptr() == theirs.data_ptr() == array.unsafe_buffer_pointer()
    _overwrite(theirs)  # through torch's tensor, into the array's memory: ours sees it
    np.testing.assert_array_equal(_tensor_values(ours), _tensor_values(theirs))


@pytest.mark.idiom("jax-to-tensor")
def test_float8_arrays_are_shared_as_dlpack_shares_them() -> None:
    """torch 2.13 and JAX 0.10 exchange float8 through DLPack: no bit-carrying copy."""
    array = jnp.arange(8.0).astype(jnp.float8_e4m3fn)
    try:
        torch.from_dlpack(array)
    except (BufferError, RuntimeError, TypeError) as err:
        pytest.skip(f"this torch/JAX pair has no float8 DLPack: {err}")
    assert tj.to_torch(array).data_ptr() == array.unsafe_buffer_pointer()


@pytest.mark.idiom("jax-to-tensor")
def test_int4_arrays_cross_neither() -> None:
    array = jnp.arange(8).astype(jnp.int4)
    with pytest.raises(RuntimeError, match="no DLPack equivalent"):
        torch.from_dlpack(array)
    with pytest.raises(tj.ConversionError, match="int4"):
        tj.to_torch(array)


@pytest.mark.idiom("jax-to-tensor")
def test_torch_from_dlpack_takes_what_to_torch_refuses() -> None:
    """Why the scanner renames only calls on JAX arrays: torch's import takes capsules and
    any DLPack exporter, and makes a new tensor of a tensor (``tj.to_torch`` returns it)."""
    tensor = torch.arange(4.0)
    capsule = torch.utils.dlpack.to_dlpack(tensor)
    assert torch.from_dlpack(capsule).data_ptr() == tensor.data_ptr()
    with pytest.raises(tj.ConversionError, match="PyCapsule"):
        tj.to_torch(torch.utils.dlpack.to_dlpack(tensor))
    again = torch.from_dlpack(tensor)
    assert again is not tensor and again.data_ptr() == tensor.data_ptr()
    assert tj.to_torch(tensor) is tensor
