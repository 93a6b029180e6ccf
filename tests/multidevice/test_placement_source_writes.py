"""Writes to a host source after ``tj.to_device`` returned: shared as documented, or never seen.

torch's ``.to(device, non_blocking=True)`` from pageable memory has read the source when
it returns; ``torch.from_numpy`` / ``torch.as_tensor`` on the CPU share it. JAX's CPU
backend keeps a dense, 64-byte aligned NumPy buffer in place (shared), copies a strided
one before returning, and copies a dense misaligned one *after* returning (jax#37830),
so without care a write right after the call could reach the result, or not: a race.
These tests pin each case down deterministically: what JAX is handed (never caller
memory it copies late), where the result's memory is, and that it is ready on return.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import torch2jax_device as tj
from tests.support.checkpoints import misaligned_empty
from torch2jax_device._src import batched_transfer as _batched_transfer
from torch2jax_device._src import host_staging
from torch2jax_device._src.interop import ALIGNMENT, aligned_empty

DEVICES = jax.devices("cpu")
MESH = jax.make_mesh((len(DEVICES),), ("data",), devices=DEVICES)
ROWS = 4 * 2**18  # float32 elements: 4 MiB, long enough for JAX's copy to lag behind
LATE = 8 * ROWS  # 32 MiB: JAX's copy of it is still running when a call that did not wait returns

TARGETS: dict[str, Any] = {
    "cpu:0": DEVICES[0],
    "cpu:1": DEVICES[1],
    "rows": NamedSharding(MESH, P("data")),
    "replicated": NamedSharding(MESH, P()),
}
#: The lane for NumPy batches, and the general path (a string leaf leaves the lane).
FORMS: dict[str, Callable[[Any, Any, bool], Any]] = {
    "array": lambda x, target, nb: tj.to_device(x, target, non_blocking=nb),
    "batch": lambda x, target, nb: tj.to_device({"x": x}, target, non_blocking=nb)["x"],
    "general": lambda x, target, nb: tj.to_device(
        {"x": x, "split": "train"}, target, non_blocking=nb
    )["x"],
}


def _filled(buffer: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    values = buffer.view(np.float32)
    values[:] = 1.0
    return values


def _misaligned(count: int = ROWS) -> np.ndarray[Any, Any]:
    values = _filled(misaligned_empty(4 * count))
    assert values.ctypes.data % ALIGNMENT and values.flags.c_contiguous
    return values


def _aligned(count: int = ROWS) -> np.ndarray[Any, Any]:
    return _filled(aligned_empty(4 * count))


def _pointers(array: jax.Array) -> set[int]:
    return {shard.data.unsafe_buffer_pointer() for shard in array.addressable_shards}


def _inside(pointer: int, source: np.ndarray[Any, Any]) -> bool:
    return source.ctypes.data <= pointer < source.ctypes.data + source.nbytes


@pytest.fixture
def handed_to_jax(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every array ``to_device`` hands to the transfer, in order."""
    handed: list[Any] = []
    device_put = host_staging.device_put

    def spy(arrays: Any, destination: Any, **kwargs: Any) -> list[Any]:
        handed.extend(arrays)
        return device_put(arrays, destination, **kwargs)

    monkeypatch.setattr(host_staging, "device_put", spy)
    return handed


@pytest.mark.parametrize("non_blocking", [True, False])
@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("target", list(TARGETS))
def test_a_dense_misaligned_source_is_read_before_returning(
    target: str, form: str, non_blocking: bool, handed_to_jax: list[Any]
) -> None:
    source = _misaligned()
    result = FORMS[form](source, TARGETS[target], non_blocking)
    # JAX was handed a copy it keeps in place, never the caller's buffer to copy later.
    assert handed_to_jax and not any(np.may_share_memory(a, source) for a in handed_to_jax)
    assert result.is_ready()
    assert not any(_inside(pointer, source) for pointer in _pointers(result))
    source[:] = -1.0
    assert np.asarray(result).min() == 1.0


@pytest.mark.parametrize("non_blocking", [True, False])
@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("target", list(TARGETS))
def test_an_aligned_source_is_shared_as_documented(
    target: str, form: str, non_blocking: bool
) -> None:
    source = _aligned()
    result = FORMS[form](source, TARGETS[target], non_blocking)
    assert all(_inside(pointer, source) for pointer in _pointers(result))  # every piece
    source[:] = -1.0  # as through torch.from_numpy: the write shows, every time
    assert np.asarray(result).max() == -1.0


@pytest.mark.parametrize("non_blocking", [True, False])
def test_a_sharding_with_a_misaligned_piece_shares_no_piece(non_blocking: bool) -> None:
    # Rows of 4 * 1001 bytes: the pieces of rows 1-3 start misaligned in an aligned source.
    source = _aligned(len(DEVICES) * 1001).reshape(len(DEVICES), 1001)
    result = tj.to_device(source, TARGETS["rows"], non_blocking=non_blocking)
    assert result.is_ready()
    assert not any(_inside(pointer, source) for pointer in _pointers(result))
    source[:] = -1.0
    assert np.asarray(result).min() == 1.0


def test_a_strided_source_with_dense_misaligned_pieces_is_read_before_returning() -> None:
    # Each device's piece is one row: dense, 4 MiB, starting 4 bytes past a boundary.
    source = _aligned(len(DEVICES) * (ROWS + 1)).reshape(len(DEVICES), ROWS + 1)[:, 1:]
    assert not source.flags.c_contiguous
    result = tj.to_device(source, TARGETS["rows"], non_blocking=True)
    assert result.is_ready()
    source[:] = -1.0
    assert np.asarray(result).min() == 1.0


def test_small_misaligned_sources_are_left_to_jax_which_copies_them_during_the_call(
    handed_to_jax: list[Any],
) -> None:
    source = _filled(misaligned_empty(100 * 1024 - 4))  # under XLA's 100 KiB: copied in the call
    result = tj.to_device(source, DEVICES[1], non_blocking=True)
    assert handed_to_jax[0] is source  # no copy of ours: JAX's own is as cheap and as safe
    assert result.is_ready()
    source[:] = -1.0
    assert np.asarray(result).min() == 1.0


def test_a_strided_source_is_copied_before_returning() -> None:
    source = _aligned(2 * ROWS)[::2]
    result = tj.to_device(source, DEVICES[1], non_blocking=True)
    source[:] = -1.0
    assert np.asarray(result).min() == 1.0


@pytest.mark.parametrize("non_blocking", [True, False])
def test_a_cpu_tensor_moved_to_another_device_is_read_before_returning(
    non_blocking: bool,
) -> None:
    torch = pytest.importorskip("torch")
    tensor = torch.ones(LATE)
    result = tj.to_device(tensor, "cpu:1", non_blocking=non_blocking)
    assert result.is_ready()  # torch's pageable copy has read the source when it returns
    tensor.fill_(-1.0)
    assert np.asarray(result).min() == 1.0


def test_a_cpu_tensor_placed_where_it_is_shares_its_memory_as_in_torch() -> None:
    torch = pytest.importorskip("torch")
    tensor = torch.ones(ROWS)
    assert tensor.to("cpu") is tensor  # torch: the tensor itself
    result = tj.to_device(tensor, "cpu", non_blocking=True)
    tensor.fill_(-1.0)
    assert np.asarray(result).max() == -1.0


# --- off the CPU (a GPU): JAX may read the source late; to_device waits for it ----------


@pytest.fixture
def cpu1_off_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """``to_device`` takes cpu:1 for a device off the CPU, as a GPU: it makes no copy of
    its own, and JAX's copy of a misaligned source runs after ``device_put`` returns."""
    on_cpu = _batched_transfer.on_cpu
    monkeypatch.setattr(
        _batched_transfer,
        "on_cpu",
        lambda target: on_cpu(target) and DEVICES[1] not in target.device_set,
    )


@pytest.mark.parametrize("form", list(FORMS))
def test_off_the_cpu_a_non_blocking_move_returns_once_jax_read_the_source(
    form: str, cpu1_off_the_cpu: None, handed_to_jax: list[Any]
) -> None:
    source = _misaligned(LATE)
    result = FORMS[form](source, DEVICES[1], True)
    assert handed_to_jax[0] is source  # JAX reads the caller's buffer itself...
    assert result.is_ready()  # ...and has read it when to_device returns
    source[:] = -1.0
    assert np.asarray(result).min() == 1.0
