"""int64 values past the 32-bit range are never wrapped (JAX without x64 holds int32).

torch keeps ``2**40 + 5``; JAX alone makes it ``5``. Every way data reaches JAX through
the library (a tensor, a NumPy array, a container, a safetensors file, a pickled
checkpoint) refuses such a value with the library's error, every time, whatever the
warning filters say (the once-per-dtype `tj.DtypeNarrowingWarning` is about what *can*
happen; this is about what *would*). Values in range narrow as before, equal to torch's.
The placement fuzzer draws such values too (``int64-values-past-32-bits-refused``).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import torch2jax_device as tj

BIG = [5, 2**40 + 5]  # the second wraps to 5 in int32


SOURCES = {
    "tensor": lambda: torch.tensor(BIG),
    "uint64_tensor": lambda: torch.tensor(BIG, dtype=torch.uint64),
    "strided_negative": lambda: torch.tensor([[-(2**33), 1]]).T,
    "numpy": lambda: np.array(BIG, np.int64),
}
CONVERSIONS = {
    "to_device": lambda value: tj.to_device(value, "cpu"),
    "to_jax": tj.to_jax,
    "to_device_in_a_container": lambda value: tj.to_device({"batch": {"ids": value}}, "cpu"),
}


@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("convert", list(CONVERSIONS))
def test_a_value_past_32_bits_is_refused_not_wrapped(source: str, convert: str) -> None:
    value = SOURCES[source]()
    first = torch.tensor([1, 2])  # a harmless int64 batch first uses up the warning
    where = r"leaf \['batch'\]\['ids'\]: " if "container" in convert else ""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tj.DtypeNarrowingWarning)  # as the tutorial does
        assert tj.to_device(first, "cpu").tolist() == first.tolist()
        with pytest.raises(
            tj.ConversionError, match=where + r"the u?int64 value .* does not fit u?int32.*Fix"
        ):
            CONVERSIONS[convert](value)


def test_values_in_range_narrow_to_torchs_values() -> None:
    edges = torch.tensor([-(2**31), -1, 0, 2**31 - 1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tj.DtypeNarrowingWarning)
        moved = tj.to_device(edges, "cpu")
        unsigned = tj.to_device(torch.tensor([0, 2**32 - 1], dtype=torch.uint64), "cpu")
    assert moved.dtype == np.int32 and moved.tolist() == edges.tolist()
    assert unsigned.dtype == np.uint32 and unsigned.tolist() == [0, 2**32 - 1]


def test_a_checkpoint_tensor_past_32_bits_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "ids.safetensors"
    save_file({"fits": torch.arange(4), "ids": torch.tensor(BIG)}, str(path))
    pickled = tmp_path / "ids.pt"
    torch.save({"ids": torch.tensor(BIG)}, pickled)
    assert torch.load(pickled)["ids"].tolist() == BIG  # torch keeps them
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tj.DtypeNarrowingWarning)
        with pytest.raises(tj.ConversionError, match=r"tensor 'ids'.*1099511627781"):
            tj.load_file(path)
        with pytest.raises(tj.Torch2JaxDeviceError, match=r"1099511627781 does not fit int32"):
            tj.load(pickled)
        with tj.safe_open(path, framework="flax") as opened:
            assert opened.get_tensor("fits").tolist() == [0, 1, 2, 3]
