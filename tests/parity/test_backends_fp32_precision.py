"""torch >= 2.9's float32 precision settings, side by side with torch.

``torch.backends.fp32_precision`` and ``torch.backends.cuda.matmul.fp32_precision``
(``"ieee"``, ``"tf32"``, ``"none"``) succeed ``allow_tf32``. Written through ``tj``, each
must leave JAX at the matmul precision torch then reports
(``torch.get_float32_matmul_precision()``), read back as torch reads it; a value torch's
API does not name, or a setting ``tj.backends`` does not have, is the library's error,
never an attribute stored where nothing reads it.
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import pytest
import torch

import torch2jax_device as tj
from torch2jax_device._src import precision

SETTINGS = {
    "backends": (torch.backends, tj.backends),
    "cuda.matmul": (torch.backends.cuda.matmul, tj.backends.cuda.matmul),
}


@pytest.fixture(autouse=True)
def _defaults_restored() -> Iterator[None]:
    yield
    torch.backends.fp32_precision = "none"
    torch.backends.cuda.matmul.fp32_precision = "none"
    jax.config.update("jax_default_matmul_precision", None)


@pytest.mark.parametrize("value", ["ieee", "tf32"])
@pytest.mark.parametrize("where", list(SETTINGS))
def test_a_precision_gives_torchs_matmul_precision(where: str, value: str) -> None:
    theirs, ours = SETTINGS[where]
    theirs.fp32_precision = value
    ours.fp32_precision = value
    assert ours.fp32_precision == theirs.fp32_precision == value
    if value == "ieee":
        assert precision.matmul_precision() == torch.get_float32_matmul_precision()
    else:  # torch refuses to read the legacy names once "tf32" is set the new way; its
        # notes: "tf32" is set_float32_matmul_precision("high"), allow_tf32 = True
        assert precision.matmul_precision() == "high" and tj.backends.cuda.matmul.allow_tf32


def test_none_is_each_frameworks_default() -> None:
    tj.backends.fp32_precision = "ieee"
    tj.backends.fp32_precision = "none"
    assert tj.backends.fp32_precision == torch.backends.fp32_precision == "none"
    assert jax.config.jax_default_matmul_precision is None


@pytest.mark.parametrize("where", list(SETTINGS))
def test_a_value_torch_does_not_name_is_refused(where: str) -> None:
    with pytest.raises(tj.ConfigError, match=r"'ieee'.*'tf32'.*'none'.*got 'bf16'"):
        SETTINGS[where][1].fp32_precision = "bf16"


def test_settings_tj_backends_lacks_are_refused_not_stored() -> None:
    for target, name in [
        (tj.backends, "allow_fp16_everything"),
        (tj.backends.cuda, "enable_flash_sdp"),
        (tj.backends.mps, "benchmark"),
    ]:
        with pytest.raises(tj.NoSuchAttributeError, match=rf"has no {name!r}"):
            setattr(target, name, True)
        assert not hasattr(target, name)
