"""float32 matmul precision: torch's names written into JAX's configuration (TF32)."""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
import pytest

import torch2jax_device as tj
from torch2jax_device._src import precision as _precision


@pytest.fixture(autouse=True)
def jax_default_precision() -> Iterator[None]:
    before = jax.config.jax_default_matmul_precision
    yield
    jax.config.update("jax_default_matmul_precision", before)


def _lowered_precision() -> str:
    a = jnp.ones((4, 4), jnp.float32)
    text = jax.jit(lambda x, y: x @ y).lower(a, a).as_text()
    (line,) = [line for line in text.splitlines() if "dot_general" in line]
    return line


@pytest.mark.parametrize(
    ("torch_name", "jax_value", "traced"),
    [
        ("highest", "highest", "HIGHEST"),
        ("high", "tensorfloat32", "HIGH"),
        ("medium", "bfloat16", "DEFAULT"),
    ],
)
def test_configure_writes_jax_precision_and_jit_traces_it(
    torch_name: str, jax_value: str, traced: str
) -> None:
    written = tj.configure(matmul_precision=torch_name)  # JAX may have started: it still applies
    assert written == {"jax_default_matmul_precision": jax_value}
    assert jax.config.jax_default_matmul_precision == jax_value
    line = _lowered_precision()
    assert f"precision = [{traced}, {traced}]" in line or (
        traced == "DEFAULT" and "precision" not in line
    ), line
    assert _precision.matmul_precision() == torch_name


def test_allow_tf32_reads_and_writes_the_same_setting() -> None:
    jax.config.update("jax_default_matmul_precision", None)
    assert tj.backends.cuda.matmul.allow_tf32 is True  # JAX's default lets GPUs use TF32
    tj.backends.cuda.matmul.allow_tf32 = False
    assert jax.config.jax_default_matmul_precision == "highest"
    assert "precision = [HIGHEST, HIGHEST]" in _lowered_precision()
    assert tj.backends.cuda.matmul.allow_tf32 is False
    tj.backends.cuda.matmul.allow_tf32 = True
    assert jax.config.jax_default_matmul_precision == "tensorfloat32"


def test_jaxs_own_context_is_read_back() -> None:
    with jax.default_matmul_precision("float32"):
        assert tj.backends.cuda.matmul.allow_tf32 is False
    assert _precision.matmul_precision() == "medium"


@pytest.mark.parametrize("value", ["low", "HIGHEST", "float32", 1, None])
def test_configure_refuses_what_torch_does_not_name(value: object) -> None:
    if value is None:  # None means "leave it": nothing written
        assert tj.configure(matmul_precision=None) == {}
        return
    with pytest.raises(tj.ConfigError, match="must be one of 'highest', 'high' or 'medium'"):
        tj.configure(matmul_precision=value)  # type: ignore[arg-type]


def test_allow_tf32_takes_only_a_bool_and_matmul_no_other_setting() -> None:
    with pytest.raises(tj.ConfigError, match="allow_tf32 must be True or False, got 'yes'"):
        tj.backends.cuda.matmul.allow_tf32 = "yes"  # type: ignore[assignment]
    with pytest.raises(AttributeError, match="no setting 'allow_fp16'"):
        tj.backends.cuda.matmul.allow_fp16 = True  # type: ignore[attr-defined]
