"""``tj.device(spec)`` against ``torch.device(spec)``: every spec form, valid and invalid."""

from __future__ import annotations

import ast
import pickle
import re
import string
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import torch2jax_device as tj
from tests.support.deadlines import deadline
from tests.support.gpu_proxy import several_cpu_devices
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
    assert hash(ours) == hash(theirs) == hash(tj.device(str(theirs)))


@pytest.mark.parametrize("device_type", _platforms.TORCH_DEVICE_TYPES)
@pytest.mark.parametrize("index", [None, 0, 1, 7, 127])
def test_equal_devices_hash_alike_so_dicts_and_sets_find_them(
    device_type: str, index: int | None
) -> None:
    """Every torch device type and index tj.device takes: where the two are equal, a dict
    or set keyed by one finds the other (Python's rule: equal objects, equal hashes)."""
    spec = device_type if index is None else f"{device_type}:{index}"
    theirs = torch.device(spec)
    try:
        ours = tj.device(spec)
    except tj.Torch2JaxDeviceError:
        return  # a type tj.device does not take has no equal to keep consistent
    assert ours == theirs and hash(ours) == hash(theirs)
    assert {theirs: "found"}.get(ours) == "found" and {ours: "found"}.get(theirs) == "found"
    assert len({ours, theirs}) == 1


def test_unindexed_differs_from_index_zero_as_in_torch() -> None:
    assert (tj.device("cuda") == tj.device("cuda:0")) == (
        torch.device("cuda") == torch.device("cuda:0")
    )
    assert tj.device("cuda:1") != torch.device("cuda:2")


JAX_ONLY = set(_platforms.device_types()) - set(_platforms.TORCH_DEVICE_TYPES)
ALPHABET = string.ascii_letters[:8] + "cpumdaxlgt_:019 -"
TYPES = st.sampled_from(_platforms.device_types())
NUMPY_INTEGERS = st.sampled_from(
    [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
)
HUGE = 10**5000  # more digits than Python converts to or from text by default


def numpy_integers() -> st.SearchStrategy[np.integer]:
    return NUMPY_INTEGERS.flatmap(
        lambda kind: st.integers(int(np.iinfo(kind).min), int(np.iinfo(kind).max)).map(kind)
    )


INDICES = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    # (ints over 4300 digits, which hypothesis cannot print, are in the tests below)
    st.sampled_from([2**15, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63), 10**100]),
    numpy_integers(),
)
STRINGS = st.one_of(
    st.text(alphabet=ALPHABET, max_size=12),
    st.text(max_size=8),  # any unicode
    st.builds("{}:{}".format, TYPES, INDICES.map(int)),
    st.builds(
        "{}{}".format,
        st.sampled_from(_platforms.TORCH_DEVICE_TYPES),
        st.text(alphabet=":0123456789x", max_size=5),
    ),
    st.builds("cuda:{}".format, st.just("9" * 5000)),
)
SPECS = st.one_of(
    STRINGS.map(lambda text: (text,)),
    st.one_of(STRINGS.map(str.encode), st.binary(max_size=8)).map(lambda data: (data,)),
    INDICES.map(lambda index: (index,)),
    st.tuples(
        st.one_of(STRINGS, STRINGS.map(str.encode), st.binary(max_size=4)),
        st.one_of(st.none(), INDICES, st.booleans(), st.floats(), st.text(max_size=2)),
    ),
    st.sampled_from([True, 1.5, None, bytearray(b"cpu"), ["cpu"], np.bool_(True)]).map(
        lambda value: (value,)
    ),
)


def spec_id(args: tuple[object, ...]) -> str:
    """A short test id (``repr`` refuses ints over 4300 digits)."""
    return ",".join(
        f"<{value.bit_length()}-bit int>"
        if isinstance(value, int) and value.bit_length() > 256
        else repr(value)[:24]
        for value in args
    )


def string_index(spec: object) -> int | None:
    """The index written in a device string (``None`` without one or if unreadable)."""
    text = spec.decode(errors="replace") if isinstance(spec, bytes) else spec
    if not isinstance(text, str) or ":" not in text:
        return None
    digits = text.rsplit(":", 1)[1]
    return int(digits) if digits.isascii() and digits.isdigit() and len(digits) < 50 else None


def written_index(args: tuple[object, ...]) -> int | None:
    """The index a spec names, read without tj (for specs both libraries accept)."""
    if len(args) == 2:
        return None if args[1] is None else int(args[1])  # type: ignore[call-overload]
    spec = args[0].decode() if isinstance(args[0], bytes) else args[0]
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        return int(spec)  # an accelerator index: torch.device(0) is cuda:0 on a GPU
    return int(spec.rsplit(":", 1)[1]) if isinstance(spec, str) and ":" in spec else None


def assert_parses_like_torch(args: tuple[object, ...]) -> None:
    """Same acceptance as ``torch.device(*args)``, same error class, only library errors.

    Where both accept, the type matches and the index is the one written: torch keeps 16
    bits of it (``cuda:128`` becomes 65408), tj keeps it whole. JAX-only device types
    (``gpu``, ``tpu``, ``rocm``) are accepted where torch refuses them.
    """
    theirs, ours = run(lambda: torch.device(*args)), run(lambda: tj.device(*args))
    if ours.error is not None:
        assert isinstance(ours.error, tj.Torch2JaxDeviceError), ours.describe()
    if ours.error is None and ours.value.type in JAX_ONLY:
        assert theirs.error is not None
        return
    if isinstance(theirs.error, UnicodeDecodeError):
        # torch's UnicodeDecodeError is a ValueError; so is tj's InvalidDeviceError.
        assert isinstance(ours.error, tj.InvalidDeviceError) and isinstance(ours.error, ValueError)
        return
    if theirs.error is None and len(args) == 2 and string_index(args[0]) is not None:
        # torch stores ``cuda:255`` as "no index" and then accepts an index argument too.
        assert string_index(args[0]) % 256 == 255  # type: ignore[operator]
        assert isinstance(ours.error, tj.InvalidDeviceError), ours.describe()
        assert "must not include an index" in str(ours.error)
        return
    if theirs.error is None and ours.error is None:
        assert ours.value.type == theirs.value.type
        assert ours.value.index == written_index(args)
        return
    assert_same_outcome(theirs, ours)


@settings(max_examples=500, deadline=None)
@given(SPECS)
@example(("cpu:255", None))
@example((b"cuda:511", 0))
def test_property_parses_like_torch(args: tuple[object, ...]) -> None:
    """Strings, bytes, ints, NumPy ints, (type, index) pairs, huge and negative numbers,
    unicode: accepted and refused as torch does, and nothing but the library's errors."""
    assert_parses_like_torch(args)


@pytest.mark.idiom("device-type-index")
@pytest.mark.parametrize(
    "args",
    [
        ("cuda", np.int64(1)),
        ("cuda", np.uint8(3)),
        ("cuda", np.int64(-1)),
        (b"cuda", 1),
        (b"cuda", np.int32(2)),
        (b"cuda:1", None),
        (np.int64(0),),
        (np.int32(-1),),
        ("cuda", np.float64(1.0)),
        ("cuda", np.bool_(True)),
        ("cuda", 2**63),
        ("cuda", 2**64),
        ("cuda", -(2**64)),
        ("cuda", HUGE),
        (HUGE,),
        (2**63,),
        ("cuda:" + "9" * 5000,),
        ("cuda:2147483648",),
        (b"\xff",),
        (b"\xff", 1),
    ],
    ids=lambda args: spec_id(args),
)
def test_index_forms_torch_accepts_or_refuses(args: tuple[object, ...]) -> None:
    assert_parses_like_torch(args)


@pytest.mark.parametrize(
    ("args", "index"),
    [
        (("cuda", 128), 128),
        (("cuda", 2**31), 2**31),
        (("cuda", 2**63 - 1), 2**63 - 1),
        (("cuda:2147483647",), 2**31 - 1),
        (("cuda:40000",), 40000),
    ],
)
def test_large_indices_are_kept_where_torch_wraps_them(
    args: tuple[object, ...], index: int
) -> None:
    theirs, ours = torch.device(*args), tj.device(*args)
    assert theirs.index != index  # torch keeps 16 bits
    assert (ours.type, ours.index) == ("cuda", index)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("cuda", 2**64), r"Device index 18446744073709551616 is out of range.*2\*\*63 - 1"),
        (("cuda", HUGE), r"Device index \(an integer of 16610 bits\) is out of range"),
        (("cuda:" + "9" * 5000,), r"Could not parse device index '9{40}\.\.\..*5000 characters"),
        ((b"\xff",), r"Device string b'\\xff' is not UTF-8"),
        (("cuda", np.float64(1.0)), r"argument 'index' must be int, not numpy.float64"),
    ],
)
def test_refusals_name_the_value_and_the_limit(args: tuple[object, ...], message: str) -> None:
    with pytest.raises((tj.InvalidDeviceError, tj.DeviceTypeError), match=message):
        tj.device(*args)


@pytest.mark.idiom("device-cpu-any-index")
@pytest.mark.parametrize("spec", ["cpu:0", "cpu:1", "cpu:7"])
def test_any_cpu_index_is_the_cpu_as_in_torch(spec: str) -> None:
    """torch has one CPU device and ignores the index; a process with one CPU device too
    (CPU and GPU machines). Among simulated CPU devices (the proxy mode) an index names
    one of them, and one beyond them is refused, as the catalog row's notes say."""
    if several_cpu_devices():
        index = int(spec.split(":")[1])
        cpus = jax.local_devices(backend="cpu")
        if index >= len(cpus):
            with pytest.raises(tj.DeviceUnavailableError, match=f"'{spec}' does not exist"):
                tj.to_device(jnp.zeros(2), spec)
            return
        assert tj.to_device(jnp.zeros(2), spec).device == cpus[index]
        with tj.device(spec):
            assert jnp.zeros(2).device == cpus[index]
        return
    assert_same_outcome(
        run(lambda: torch.zeros(2, device=spec)),
        run(lambda: tj.to_device(jnp.zeros(2), spec)),
    )
    with torch.device(spec):
        theirs = torch.zeros(2)
    with tj.device(spec):
        ours = jnp.zeros(2)
    assert_same_outcome(run(lambda: theirs), run(lambda: ours))


@pytest.mark.parametrize("spec", ["gpu", "gpu:1", "tpu", "tpu:0", "rocm:3"])
def test_jax_platform_names_are_accepted(spec: str) -> None:
    device = tj.device(spec)
    assert str(device) == spec
    assert isinstance(run(lambda: torch.device(spec)).error, RuntimeError)


@pytest.mark.idiom("device-type-index")
@pytest.mark.parametrize(
    "index",
    [
        torch.tensor(1),
        torch.tensor(3, dtype=torch.uint8),
        torch.tensor(-1),
        torch.tensor(True),
        torch.tensor(1.0),
        torch.tensor([1]),
        np.array(1),
    ],
    ids=repr,
)
def test_a_zero_dim_integer_tensor_is_an_index_as_in_torch(index: object) -> None:
    theirs = run(lambda: torch.device("cuda", index))  # type: ignore[call-overload]
    ours = run(lambda: tj.device("cuda", index))  # type: ignore[arg-type]
    assert_same_outcome(theirs, ours)


def test_mkldnn_warns_as_torch_does() -> None:
    # torch warns once per process: ask a fresh one what it says.
    code = (
        "import warnings, torch\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    torch.device('mkldnn')\n"
        "print(repr([(w.category.__name__, str(w.message)) for w in caught]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=deadline(120),
        check=True,
    )
    theirs = ast.literal_eval(result.stdout.strip().splitlines()[-1])
    with pytest.warns(UserWarning) as ours:
        device = tj.device("mkldnn")
    assert device.type == "mkldnn" and device.index is None
    # torch adds where in its C++ source the warning was raised.
    theirs = [
        (kind, re.sub(r" \(Triggered internally at .*\)$", "", text)) for kind, text in theirs
    ]
    assert [(w.category.__name__, str(w.message)) for w in ours] == theirs
