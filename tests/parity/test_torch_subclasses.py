"""torch tensor subclasses: torch's own data, or the library's error; never other numbers.

A wrapper subclass (``__torch_dispatch__``: a fake tensor from ``FakeTensorMode`` or
``torch.compile`` tracing, a ``MaskedTensor``) does not hold its values in its memory (a
fake tensor's storage is on ``meta``, its pointer 0): read through DLPack it gave garbage.
Every entry point must refuse it with the library's error naming the class and the fix;
a plain subclass (``nn.Parameter``, a user's ``torch.Tensor`` subclass) is its data.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import torch2jax_device as tj


class Tagged(torch.Tensor):
    """A plain subclass (no dispatch of its own): its memory is its values."""


def _fake() -> torch.Tensor:
    with FakeTensorMode():
        return torch.arange(6.0).reshape(2, 3) * 7 + 1


def _masked() -> torch.Tensor:
    from torch.masked import masked_tensor

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "prototype stage"
        return masked_tensor(torch.ones(3), torch.tensor([True, False, True]))


WRAPPERS: dict[str, tuple[Callable[[], torch.Tensor], str]] = {
    "fake": (_fake, "FakeTensor.*no values"),
    "masked": (_masked, r"MaskedTensor.*get_data\(\)"),
}
PLAIN: dict[str, Callable[[], torch.Tensor]] = {
    "parameter": lambda: torch.nn.Parameter(torch.arange(3.0)),
    "user_subclass": lambda: torch.arange(3.0).as_subclass(Tagged),
}
ENTRY_POINTS: dict[str, Callable[[Any, Path], Any]] = {
    "to_jax": lambda value, _: tj.to_jax(value),
    "to_device": lambda value, _: tj.to_device(value, "cpu"),
    "to_device_in_a_batch": lambda value, _: tj.to_device({"x": [value]}, "cpu")["x"][0],
    "save_file": lambda value, folder: _saved(value, folder),
}


def _saved(value: Any, folder: Path) -> Any:
    tj.save_file({"x": value}, folder / "x.safetensors")
    return tj.load_file(folder / "x.safetensors")["x"]


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("kind", list(WRAPPERS))
def test_a_wrapper_subclass_is_refused_naming_it_and_the_fix(
    kind: str, entry: str, tmp_path: Path
) -> None:
    make, message = WRAPPERS[kind]
    with pytest.raises(tj.ConversionError, match=message):
        ENTRY_POINTS[entry](make(), tmp_path)
    assert not (tmp_path / "x.safetensors").exists()


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("kind", list(PLAIN))
def test_a_plain_subclass_is_its_data(kind: str, entry: str, tmp_path: Path) -> None:
    tensor = PLAIN[kind]()
    ours = ENTRY_POINTS[entry](tensor, tmp_path)
    assert np.asarray(ours).tolist() == tensor.detach().numpy().tolist()
