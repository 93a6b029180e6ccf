"""``tj.device(spec)`` against ``torch.device(spec)``: every spec form, valid and invalid."""

from __future__ import annotations

import pickle
import string

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

import torch2jax_device as tj
from torch2jax_device._src import platforms as _platforms

from .harness import assert_same_outcome, run

VALID_STRINGS = [
    "cpu", "cuda", "mps", "meta", "xla", "cpu:0", "cpu:3", "cuda:0", "cuda:1", "cuda:127",
    "xpu", "hip:2", "privateuseone", "fpga:2",
]  # fmt: skip
INVALID_STRINGS = [
    "", "cuda:-1", "cuda:01", " cpu", "cpu ", "CUDA", "cpu:0:1", "cuda:x", "cuda:", ":1",
    "cuda:+1", "cuda: 1", "cuda:0x1", "cpu\n", "cuda:\u0663", "\uff43\uff50\uff55", "cu-da",
    "cuda:2147483648", "_cuda", "cu_da", "jax", "gpu0",
]  # fmt: skip
TYPE_AND_INDEX = [
    ("cuda", 1), ("cpu", 0), ("cpu", None), ("mps", 0), ("cuda", -1), ("cuda:1", 2),
    ("cuda:1", None), ("cuda", True), ("cuda", 1.0), ("cuda", "1"), (1, 0), ("bogus", 0),
]  # fmt: skip
NOT_A_DEVICE = [True, 1.5, None, b"cpu", ["cpu"]]


@pytest.mark.idiom("device-indexed")
@pytest.mark.parametrize("spec", VALID_STRINGS + INVALID_STRINGS)
def test_string(spec: str) -> None:
    assert_same_outcome(run(lambda: torch.device(spec)), run(lambda: tj.device(spec)))


@pytest.mark.idiom("device-parse-error")
@pytest.mark.parametrize("spec", INVALID_STRINGS)
def test_invalid_string_message_matches_torch(spec: str) -> None:
    torch_error = run(lambda: torch.device(spec)).error
    tj_error = run(lambda: tj.device(spec)).error
    assert torch_error is not None and tj_error is not None
    # torch's message is the start of ours (ours may add the JAX platform names).
    torch_head = str(torch_error).split(" device type at start")[0].split(" (")[0]
    assert str(tj_error).startswith(torch_head.split(", privateuseone")[0])


@pytest.mark.idiom("device-type-index")
@pytest.mark.parametrize(("device_type", "index"), TYPE_AND_INDEX)
def test_type_and_index(device_type: object, index: object) -> None:
    assert_same_outcome(
        run(lambda: torch.device(device_type, index)), run(lambda: tj.device(device_type, index))
    )


@pytest.mark.parametrize("spec", ["cuda:1", "cpu", "mps"])
def test_from_torch_device_and_from_itself(spec: str) -> None:
    assert_same_outcome(
        run(lambda: torch.device(torch.device(spec))),
        run(lambda: tj.device(torch.device(spec))),
    )
    assert tj.device(tj.device(spec)) == tj.device(spec)


@pytest.mark.parametrize("value", NOT_A_DEVICE, ids=repr)
def test_values_that_are_not_devices(value: object) -> None:
    assert_same_outcome(run(lambda: torch.device(value)), run(lambda: tj.device(value)))


@pytest.mark.idiom("device-accelerator-index")
@pytest.mark.parametrize("index", [0, 1, -1])
def test_int_means_current_accelerator(index: int) -> None:
    assert_same_outcome(run(lambda: torch.device(index)), run(lambda: tj.device(index)))


@pytest.mark.parametrize("spec", VALID_STRINGS)
def test_str_repr_eq_hash_pickle_match_torch(spec: str) -> None:
    theirs, ours = torch.device(spec), tj.device(spec)
    assert (str(ours), repr(ours)) == (str(theirs), repr(theirs))
    assert ours == theirs and theirs == ours and not (ours != theirs)
    assert pickle.loads(pickle.dumps(ours)) == ours
    assert hash(ours) == hash(tj.device(str(theirs)))


def test_unindexed_differs_from_index_zero_as_in_torch() -> None:
    assert (tj.device("cuda") == tj.device("cuda:0")) == (
        torch.device("cuda") == torch.device("cuda:0")
    )
    assert tj.device("cuda:1") != torch.device("cuda:2")


JAX_ONLY = set(_platforms.device_types()) - set(_platforms.TORCH_DEVICE_TYPES)
ALPHABET = string.ascii_letters[:8] + "cpumdaxlgt_:019 -"


@given(
    st.one_of(
        st.text(alphabet=ALPHABET, max_size=12),
        st.builds(
            "{}:{}".format,
            st.sampled_from(_platforms.device_types()),
            st.integers(min_value=0, max_value=127),
        ),
        st.builds(
            "{}{}".format,
            st.sampled_from(_platforms.TORCH_DEVICE_TYPES),
            st.text(alphabet=":0123456789x", max_size=5),
        ),
    )
)
def test_property_parses_like_torch(spec: str) -> None:
    """Same (type, index) as torch.device, or both reject (JAX-only names excepted)."""
    theirs, ours = run(lambda: torch.device(spec)), run(lambda: tj.device(spec))
    if ours.error is None and ours.value.type in JAX_ONLY:
        assert theirs.error is not None
        return
    if theirs.error is None:
        # torch stores indices as int16 and wraps large ones ("cuda:128" -> 65408).
        assume(":" not in spec or theirs.value.index == int(spec.rsplit(":", 1)[1]))
    assert_same_outcome(theirs, ours)


@pytest.mark.parametrize("spec", ["gpu", "gpu:1", "tpu", "tpu:0", "rocm:3"])
def test_jax_platform_names_are_accepted(spec: str) -> None:
    device = tj.device(spec)
    assert str(device) == spec
    assert isinstance(run(lambda: torch.device(spec)).error, RuntimeError)
