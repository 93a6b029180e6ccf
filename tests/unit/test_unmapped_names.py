"""``tj.<torch name>`` that the package does not define says how torch's line is ported.

A port that swaps ``torch.`` for ``tj.`` line by line meets ``tj.manual_seed`` and
``tj.compile`` first. For every top-level torch name the migration guide has a row for,
the error is the library's ``NoSuchAttributeError`` (an ``AttributeError``: ``hasattr``
stays False) naming the row and its port; other names get the generic fix; private
names stay Python's plain error (tools probe them).
"""

from __future__ import annotations

import pytest

import torch2jax_device as tj
from torch2jax_device.porting import catalog

ROWS = {
    api.removeprefix("torch."): row
    for row in reversed(catalog.CATALOG)  # the first row naming it wins, as the error's
    for api in row.torch_api
    if api.startswith("torch.") and api.count(".") == 1 and not api.endswith(".*")
}
UNDEFINED = sorted(name for name in ROWS if name not in tj.__all__ and not hasattr(type(tj), name))


def test_there_are_such_names() -> None:
    assert {"manual_seed", "compile"} <= set(UNDEFINED)


@pytest.mark.parametrize("name", UNDEFINED)
def test_a_torch_name_with_a_row_names_its_port(name: str) -> None:
    with pytest.raises(tj.NoSuchAttributeError) as raised:
        getattr(tj, name)
    row = next(row for row in catalog.CATALOG if f"torch.{name}" in row.torch_api)
    assert f"#{row.id}" in str(raised.value) and row.tj.splitlines()[0] in str(raised.value)
    assert not hasattr(tj, name)


def test_other_names_get_the_generic_fix_and_private_ones_pythons_error() -> None:
    with pytest.raises(tj.NoSuchAttributeError, match="run `torch2jax-device scan`"):
        tj.no_grad  # noqa: B018
    with pytest.raises(AttributeError) as raised:
        tj._repr_html_  # noqa: B018
    assert type(raised.value) is AttributeError
