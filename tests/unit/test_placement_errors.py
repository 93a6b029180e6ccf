"""Odd inputs through every placement entry point: the library's error, the value, the fix.

Each input goes through ``to_device`` (alone and as a leaf of a tree, where the message
must name the leaf path), ``to_jax``, ``to_torch``, ``device_of``, ``parameters`` and
``check_same_device``. Every failure must be a ``tj.Torch2JaxDeviceError`` whose message
names what was wrong and says "Fix"; every success must give the right values.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import torch2jax_device as tj
from tests.support.deadlines import deadline
from torch2jax_device._src import dtypes as _dtypes


@pytest.fixture(autouse=True)
def _fresh_narrowing_warnings() -> None:
    _dtypes._warned.clear()


def _quantized() -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch deprecates quantized tensors
        return torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.quint8)


def _nested() -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # nested tensors are a prototype
        return torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])


# name -> (make the input, the error class, a fragment naming the problem and its fix)
REFUSED: dict[str, tuple[Callable[[], Any], type[Exception], str]] = {
    "meta tensor": (
        lambda: torch.ones(2, device="meta"),
        tj.DeviceUnavailableError,
        r"meta tensor .* has no data.*Fix: materialize it",
    ),
    "sparse tensor": (
        lambda: torch.eye(2).to_sparse(),
        tj.ConversionError,
        r"sparse tensor \(torch\.sparse_coo\).*Fix: tensor\.to_dense\(\)",
    ),
    "quantized tensor": (
        _quantized,
        tj.ConversionError,
        r"quantized tensor \(torch\.quint8\).*Fix: .*tensor\.dequantize\(\)",
    ),
    "nested tensor": (
        _nested,
        tj.ConversionError,
        r"nested \(ragged\) tensor.*Fix: .*to_padded_tensor",
    ),
    "string array": (
        lambda: np.array(["a", "b"]),
        tj.ConversionError,
        r"dtype <U1 \(text\) cannot become a JAX array.*Fix: keep it out",
    ),
    "object array": (
        lambda: np.array([object()]),
        tj.ConversionError,
        r"dtype object \(Python objects\) cannot become a JAX array.*Fix:",
    ),
    "record array": (
        lambda: np.zeros(2, dtype=[("a", "f4")]),
        tj.ConversionError,
        r"cannot become a JAX array.*Fix:",
    ),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_leaves_name_the_value_the_leaf_path_and_the_fix(name: str) -> None:
    make, error, fragment = REFUSED[name]
    with pytest.raises(error, match=fragment):
        tj.to_device(make(), "cpu")
    with pytest.raises(error, match=r"^leaf \['batch'\]\[1\]: .*" + fragment):
        tj.to_device({"batch": [np.ones(2, np.float32), make()]}, "cpu")
    with pytest.raises(error, match=fragment):
        tj.to_jax(make())
    with pytest.raises(error, match=r"^leaf \[0\]: .*" + fragment):
        tj.to_device([make()], jnp.float16)  # the .to(dtype) form converts too


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: torch.tensor([1 + 2j, 3 - 1j]).conj(), [1 - 2j, 3 + 1j]),
        (lambda: torch.tensor([1 + 2j]).conj().imag, [-2.0]),  # negative bit, contiguous
        (lambda: np.arange(3, dtype=">f4"), [0.0, 1.0, 2.0]),  # big-endian
        (lambda: np.arange(3, dtype=">i4"), [0, 1, 2]),
    ],
    ids=["conjugate-bit", "negative-bit", "big-endian-float", "big-endian-int"],
)
def test_lazy_bits_and_byte_order_are_resolved_with_the_right_values(
    make: Callable[[], Any], expected: list[Any]
) -> None:
    # DLPack refuses the conjugate bit and ignores the negative bit (it would give 2.0).
    assert np.asarray(tj.to_jax(make())).tolist() == expected
    assert np.asarray(tj.to_device({"x": make()}, "cpu")["x"]).tolist() == expected
    assert np.asarray(tj.to_device(make(), "cpu")).tolist() == expected


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda: torch.tensor([1 + 2j]).conj(), r"conjugate bit set.*resolve_conj\(\)"),
        (lambda: torch.tensor([1 + 2j]).conj().imag, r"negative bit set.*resolve_neg\(\)"),
        (lambda: np.arange(4, dtype=">f4"), r"big-endian \(>f4\).*newbyteorder"),
    ],
    ids=["conjugate-bit", "negative-bit", "big-endian"],
)
def test_strict_conversion_refuses_the_resolving_copy(
    make: Callable[[], Any], fragment: str
) -> None:
    with pytest.raises(tj.ConversionError, match="strict=True: .*" + fragment):
        tj.to_jax(make(), strict=True)


def test_torch_modules_are_refused_with_the_fix_root_and_leaf() -> None:
    module = torch.nn.Linear(2, 2)
    with pytest.raises(tj.ConversionError, match=r"torch module \(torch\.nn\.modules.*Linear\)"):
        tj.to_device(module, "cpu")
    with pytest.raises(tj.ConversionError, match=r"module\.to\(device\.torch_device\)"):
        tj.to_device(module, jnp.float16)
    with pytest.raises(tj.ConversionError, match=r"^leaf \['model'\] is a torch module"):
        tj.to_device({"model": module, "x": np.ones(2)}, "cpu")
    assert module.weight.dtype == torch.float32  # nothing happened to it


@pytest.mark.parametrize(
    "value", [object(), "cuda", b"bytes", {1, 2}], ids=["object", "str", "bytes", "set"]
)
def test_unknown_roots_are_refused_never_returned_unchanged(value: Any) -> None:
    with pytest.raises(tj.ConversionError, match=r"cannot move a .*Fix: pass the arrays"):
        tj.to_device(value, "cpu")


def test_containers_without_arrays_and_none_still_pass() -> None:
    assert tj.to_device(None, "cpu") is None
    assert tj.to_device({"name": "x", "steps": 3}, "cpu") == {"name": "x", "steps": 3}


def test_tracers_in_every_entry_point() -> None:
    seen: dict[str, Any] = {}

    def step(x: jax.Array) -> jax.Array:
        seen["device_of"] = tj.device_of(x)
        seen["parameter_device"] = next(tj.parameters([x])).device
        seen["check"] = tj.check_same_device(x)
        for name, convert in (("to_jax", tj.to_jax), ("to_torch", tj.to_torch)):
            with pytest.raises(tj.ConversionError, match="tracer") as caught:
                convert(x)
            seen[name] = str(caught.value)
        return tj.to_device(x, "cpu", jnp.float16)  # the dtype applies, placement is JAX's

    result = jax.jit(step)(jnp.ones(2))
    assert result.dtype == jnp.float16
    assert seen["device_of"] is seen["parameter_device"] is seen["check"] is None
    assert "Fix: use the value as it is" in seen["to_jax"]
    assert "Fix: return the array from the jitted function" in seen["to_torch"]


def test_numpy_scalars_are_host_data_everywhere() -> None:
    array = tj.to_device(jnp.ones(1), "cpu")  # JAX's default device may be a GPU
    for scalar in (np.float32(1.5), np.int32(2), np.bool_(True)):
        assert tj.device_of(scalar) == tj.device("cpu")
        assert tj.device_of({"s": scalar}) == tj.device("cpu")
        assert tj.to_device(scalar, "cpu").devices() == {tj.resolve("cpu")}
        assert tj.check_same_device(scalar, array) == tj.device_of(array)
        assert tj.to_torch(scalar).item() == scalar.item()
        assert [p.numel() for p in tj.parameters([scalar])] == [1]


def test_parameters_and_device_of_accept_a_torch_module() -> None:
    module = torch.nn.Linear(2, 3)
    assert list(tj.parameters(module)) == list(module.parameters())
    assert tj.device_of(module) == torch.device("cpu")
    with pytest.raises(tj.EmptyTreeError, match="StopIteration"):
        tj.device_of(torch.nn.ReLU())


@pytest.mark.parametrize("device", [None, "cpu"])
def test_to_torch_of_a_deleted_array_names_it(device: str | None) -> None:
    array = jnp.arange(3.0)
    array.delete()  # as a donating call does
    with pytest.raises(tj.ConversionError, match=r"deleted or donated jax.Array \(float32\[3\]\)"):
        tj.to_torch(array, device)


def test_a_cpu_tensor_dlpack_refuses_is_told_to_change_its_dtype() -> None:
    with warnings.catch_warnings():  # torch: "ComplexHalf support is experimental"
        warnings.simplefilter("ignore", UserWarning)
        tensor = torch.zeros(4, dtype=torch.complex32)  # DLPack has no 32-bit complex
    with pytest.raises(
        tj.ConversionError, match=r"torch\.complex32 .*tensor\.to\(torch\.complex64\)"
    ):
        tj.to_device(tensor, "cpu")


def test_to_torch_without_torch_is_a_clear_error() -> None:
    script = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # as if torch were not installed
        import jax.numpy as jnp
        import torch2jax_device as tj
        for call in (lambda: tj.to_torch(jnp.ones(2)), lambda: tj.device("cpu").torch_device):
            try:
                call()
            except ModuleNotFoundError as error:
                assert isinstance(error, tj.MissingFrameworkError), type(error)
                print(error)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=deadline(120)
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("tj.to_torch() needs PyTorch, which is not installed")
    assert lines[1].startswith("tj.device('cpu').torch_device needs PyTorch")
    assert all("Fix: pip install torch" in line for line in lines)


def test_numpy_float64_narrows_quietly() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet = tj.to_device({"x": np.linspace(0, 1, 5)}, "cpu")["x"]  # NumPy's default
        assert quiet.dtype == jnp.float32
        assert tj.to_jax(np.ones(3)).dtype == jnp.float32
        tj.to_device(np.array([1.0, np.inf, -np.inf]), "cpu")  # infinities already there


#: 64-bit floating-point data past float32's largest, from every source a move takes:
#: (what it is, a factory, the leaf path the error names).
_OVERFLOWING: list[tuple[str, Callable[[], Any], str]] = [
    ("NumPy array", lambda: np.array([1.0, 1e300]), "<root>"),
    ("NumPy scalar", lambda: np.float64(-1e300), "<root>"),
    ("NumPy complex", lambda: np.array([1e300 + 1j]), "<root>"),
    ("torch tensor", lambda: torch.tensor([1.0, 1e300], dtype=torch.float64), "<root>"),
    ("torch complex", lambda: torch.tensor([1j * 1e300], dtype=torch.complex128), "<root>"),
    ("in a tree", lambda: {"a": [np.ones(2), np.array([3e38 * 10])]}, "['a'][1]"),
]


@pytest.mark.parametrize(
    ("make", "path"), [case[1:] for case in _OVERFLOWING], ids=[case[0] for case in _OVERFLOWING]
)
def test_64_bit_floats_that_would_become_inf_are_refused_every_time(
    make: Callable[[], Any], path: str
) -> None:
    # torch keeps 1e300 in float64; JAX without x64 holds float32, where it is inf. The
    # warning about float64 is said once per dtype: a first, harmless float64 tensor must
    # not make the next, overflowing one silent.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tj.DtypeNarrowingWarning)
        tj.to_device(torch.ones(1, dtype=torch.float64), "cpu")
        tj.to_device(torch.ones(1, dtype=torch.complex128), "cpu")
        with pytest.raises(tj.ConversionError) as caught:
            tj.to_device(make(), "cpu")
    message = str(caught.value)
    assert message.startswith(f"leaf {path}: the ")
    assert "would become inf (torch keeps it)" in message
    assert "jax.config.update('jax_enable_x64', True)" in message
    assert "np.clip(" in message


@pytest.mark.parametrize("form", ["safetensors", "torch.save"])
def test_checkpoint_files_refuse_float64_past_float32(form: str, tmp_path: Any) -> None:
    import safetensors.torch

    wide = torch.tensor([1.0, 1e300], dtype=torch.float64)
    path = tmp_path / "w.bin"
    if form == "safetensors":
        safetensors.torch.save_file({"w": wide}, path)
        assert safetensors.torch.load_file(path)["w"].tolist() == [1.0, 1e300]  # torch keeps it
        load = tj.load_file
    else:
        torch.save({"w": wide}, path)
        assert torch.load(path)["w"].tolist() == [1.0, 1e300]
        load = tj.load
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tj.DtypeNarrowingWarning)
        with pytest.raises(tj.ConversionError, match=r"'w'.*1e\+300 does not fit float32"):
            load(str(path))


@pytest.mark.parametrize("source", ["numpy", "torch"])
def test_asking_for_float32_by_name_casts_as_torch_does_inf_included(source: str) -> None:
    wide = torch.tensor([1.0, 1e300, -1e300], dtype=torch.float64)
    expected = wide.to(torch.float32)  # torch's own cast: [1, inf, -inf]
    given = wide if source == "torch" else wide.numpy()
    moved = tj.to_device(given, "cpu", torch.float32)
    assert moved.dtype == jnp.float32
    assert np.asarray(moved).tolist() == expected.tolist()


def test_a_chosen_float64_warns_once_and_says_precision_changes() -> None:
    with pytest.warns(tj.DtypeNarrowingWarning, match="precision drops to about 6 significant"):
        tj.to_device(torch.ones(2, dtype=torch.float64), "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tj.to_device(torch.ones(2, dtype=torch.float64), "cpu")  # once per dtype
    with pytest.warns(tj.DtypeNarrowingWarning, match=r"values outside \[-2147483648, 2147483647"):
        tj.to_device(np.arange(3), "cpu")  # int64: torch's default integer dtype


class _MovesItself:
    """A batch class as torch codebases write them (PyG's Data, DGL graphs too)."""

    def __init__(self) -> None:
        self.x = torch.ones(2)

    def to(self, device: object) -> _MovesItself:
        self.x = self.x.to(device)
        return self


def test_an_object_that_moves_itself_inside_a_batch_is_refused_naming_it() -> None:
    # torch's batch move (Accelerate's send_to_device) calls its .to(); passed through
    # unmoved, its tensor stayed a torch tensor in a "moved" batch.
    batch = {"graph": _MovesItself(), "y": torch.zeros(1)}
    with pytest.raises(
        tj.ConversionError, match=r"leaf \['graph'\] is a .*_MovesItself with its own \.to\(\).*Fix"
    ):
        tj.to_device(batch, "cpu")
    assert tj.to_device({"name": "run-1", "y": torch.zeros(1)}, "cpu")["name"] == "run-1"
