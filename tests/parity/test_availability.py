"""``tj.cuda`` / ``tj.accelerator`` against ``torch.cuda`` / ``torch.accelerator`` here.

The catalog rows that run as written are in test_catalog.py; these are the ones that
need arguments or set-up. On a CPU-only machine both sides report no GPU and fail
the same way; on a GPU machine (scripts/gpu-parity.sh) both see the same devices.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch

import torch2jax_device as tj

from .harness import assert_same_outcome, run

QUERIES = {
    "is_available": (torch.cuda.is_available, tj.cuda.is_available),
    "device_count": (torch.cuda.device_count, tj.cuda.device_count),
    "is_bf16_supported": (torch.cuda.is_bf16_supported, tj.cuda.is_bf16_supported),
    "native_bf16": (
        lambda: torch.cuda.is_bf16_supported(including_emulation=False),
        lambda: tj.cuda.is_bf16_supported(including_emulation=False),
    ),
    "current_device": (torch.cuda.current_device, tj.cuda.current_device),
    "get_device_name": (torch.cuda.get_device_name, tj.cuda.get_device_name),
    "get_device_name(0)": (
        lambda: torch.cuda.get_device_name(0),
        lambda: tj.cuda.get_device_name(0),
    ),
    "get_device_capability": (torch.cuda.get_device_capability, tj.cuda.get_device_capability),
    "synchronize": (torch.cuda.synchronize, tj.cuda.synchronize),
    "accelerator.is_available": (torch.accelerator.is_available, tj.accelerator.is_available),
    "accelerator.device_count": (torch.accelerator.device_count, tj.accelerator.device_count),
    "accelerator.current_accelerator": (
        torch.accelerator.current_accelerator,
        tj.accelerator.current_accelerator,
    ),
    "accelerator.current_device_index": (
        torch.accelerator.current_device_index,
        tj.accelerator.current_device_index,
    ),
    "accelerator.synchronize": (torch.accelerator.synchronize, tj.accelerator.synchronize),
    "accelerator.set_device_index(0)": (
        lambda: torch.accelerator.set_device_index(0),
        lambda: tj.accelerator.set_device_index(0),
    ),
    "accelerator.device_index(0)": (
        lambda: torch.accelerator.device_index(0).__enter__(),
        lambda: tj.accelerator.device_index(0).__enter__(),
    ),
    "backends.mps.is_available": (torch.backends.mps.is_available, tj.backends.mps.is_available),
    "backends.mps.is_built": (torch.backends.mps.is_built, tj.backends.mps.is_built),
    "backends.cuda.is_built": (torch.backends.cuda.is_built, tj.backends.cuda.is_built),
}


@pytest.mark.parametrize("name", list(QUERIES))
def test_query(name: str) -> None:
    torch_fn, tj_fn = QUERIES[name]
    assert_same_outcome(run(torch_fn), run(tj_fn))


@pytest.mark.idiom("cuda-device-properties")
def test_device_properties() -> None:
    theirs, ours = (
        run(lambda: torch.cuda.get_device_properties(0)),
        run(lambda: tj.cuda.get_device_properties(0)),
    )
    if theirs.error is not None:
        assert_same_outcome(theirs, ours)
        return
    assert ours.error is None, ours.describe()
    props = ours.value
    assert props.name == theirs.value.name
    assert (props.major, props.minor) == (theirs.value.major, theirs.value.minor)
    assert props.multi_processor_count == theirs.value.multi_processor_count
    # JAX reports what its allocator may use, never more than the card has.
    assert props.total_memory is None or 0 < props.total_memory <= theirs.value.total_memory


@pytest.mark.idiom("cuda-set-device")
@pytest.mark.parametrize("spec", [0, 1, "cuda:0", -1])
def test_set_device(spec: object) -> None:
    theirs = run(lambda: torch.cuda.set_device(spec))
    ours = run(lambda: tj.cuda.set_device(spec))
    if not torch.backends.cuda.is_built():
        # torch's CPU build fails with AttributeError (no torch._C._cuda_setDevice)
        # except for negative indices, which both treat as a no-op.
        assert (theirs.error is None) == (ours.error is None), (theirs, ours)
        assert ours.error is None or isinstance(ours.error, tj.DeviceUnavailableError)
        return
    assert_same_outcome(theirs, ours)
    if theirs.error is None:
        assert tj.cuda.current_device() == torch.cuda.current_device()


@pytest.mark.idiom("cuda-set-device")
def test_set_device_rejects_a_cpu_device_as_torch_does() -> None:
    theirs, ours = run(lambda: torch.cuda.set_device("cpu")), run(lambda: tj.cuda.set_device("cpu"))
    assert_same_outcome(theirs, ours)
    assert str(ours.error) == str(theirs.error)  # the kind of device first, as torch


@pytest.mark.idiom("cuda-device-context")
@pytest.mark.parametrize("index", [0, 1, -1])
def test_device_context(index: int) -> None:
    def enter_torch() -> int | None:
        with torch.cuda.device(index):
            return torch.cuda.current_device() if torch.cuda.is_available() else None

    def enter_tj() -> int | None:
        with tj.cuda.device(index):
            return tj.cuda.current_device() if tj.cuda.is_available() else None

    assert_same_outcome(run(enter_torch), run(enter_tj))


def test_device_index_argument_of_wrong_type() -> None:
    assert_same_outcome(
        run(lambda: torch.cuda.get_device_name("cpu")), run(lambda: tj.cuda.get_device_name("cpu"))
    )


@pytest.mark.idiom("cuda-manual-seed")
@pytest.mark.parametrize("seed", [0, 1337, "7", 2.5, -1, 2**64, "abc", None, [1]])
@pytest.mark.parametrize("name", ["manual_seed", "manual_seed_all"])
def test_cuda_seeds_accept_and_refuse_what_torch_does(name: str, seed: object) -> None:
    def torch_generators_seed() -> None:  # the check torch's generators apply when seeding
        state = torch.get_rng_state()
        try:
            torch.manual_seed(seed)  # type: ignore[arg-type]
        finally:
            torch.set_rng_state(state)

    ours = run(lambda: getattr(tj.cuda, name)(seed))
    assert_same_outcome(run(torch_generators_seed), ours)
    if torch.cuda.is_initialized():  # torch.cuda seeds at once (else later, at CUDA's start)
        assert_same_outcome(run(lambda: getattr(torch.cuda, name)(seed)), ours)


@pytest.mark.idiom("cuda-manual-seed")
def test_cuda_seeds_leave_jax_random_numbers_to_keys() -> None:
    key = jax.random.key(3)
    before = jax.random.normal(key, (4,))
    tj.cuda.manual_seed_all(99)
    torch.cuda.manual_seed_all(99)
    np.testing.assert_array_equal(jax.random.normal(key, (4,)), before)


@pytest.mark.idiom("cuda-is-initialized")
def test_is_initialized_agrees_after_a_gpu_query() -> None:
    theirs, ours = run(torch.cuda.is_available), run(tj.cuda.is_available)
    assert_same_outcome(theirs, ours)
    # JAX has started now; torch initializes CUDA lazily, at its first CUDA tensor.
    if torch.cuda.is_available():
        torch.zeros(1, device="cuda")
    assert_same_outcome(run(torch.cuda.is_initialized), run(tj.cuda.is_initialized))


@pytest.mark.idiom("cuda-set-device")
@pytest.mark.parametrize("spec", [None, 1.5, "cuda", torch.device("cuda"), [0]], ids=repr)
def test_set_device_refuses_what_has_no_index_as_torch_does(spec: object) -> None:
    theirs = run(lambda: torch.cuda.set_device(spec))  # type: ignore[arg-type]
    ours = run(lambda: tj.cuda.set_device(spec))  # type: ignore[arg-type]
    assert_same_outcome(theirs, ours)
    assert isinstance(ours.error, ValueError) and str(ours.error) == str(theirs.error)


@pytest.mark.parametrize("spec", [None, 1.5, -1], ids=repr)
def test_set_device_index_checks_its_argument_as_torch_does(spec: object) -> None:
    theirs = run(lambda: torch.accelerator.set_device_index(spec))  # type: ignore[arg-type]
    ours = run(lambda: tj.accelerator.set_device_index(spec))  # type: ignore[arg-type]
    assert_same_outcome(theirs, ours)
    if theirs.error is not None:
        assert str(ours.error) == str(theirs.error)


@pytest.mark.parametrize("index", [None, -1, 0])
def test_accelerator_device_index_enters_as_torch_does(index: int | None) -> None:
    def enter(module: object) -> str:
        with module.device_index(index):  # type: ignore[attr-defined]
            return "entered"

    theirs, ours = run(lambda: enter(torch.accelerator)), run(lambda: enter(tj.accelerator))
    assert_same_outcome(theirs, ours)
    if theirs.error is None:
        return
    if "invalid device ordinal" in str(theirs.error):  # an accelerator refuses -1
        assert "invalid device ordinal" in str(ours.error) and "Fix:" in str(ours.error)
    else:  # no accelerator: both say so first
        assert str(ours.error).startswith(str(theirs.error).rstrip("."))
