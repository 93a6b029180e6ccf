"""The idiom catalog: one row per PyTorch device idiom and its JAX translations.

This is the single source for the migration guide (``docs/migration-guide.md`` is
generated from it by ``porting.guide``), the side-by-side tests (every row is run in
PyTorch and through torch2jax_device, and a test fails if a row has no such test) and
the porting scanner (its tables are derived from the rows' ``torch_api``, ``tj_api``
and ``rewrite`` fields). Each guide section is one module of this package.

A row whose ``runs`` is true is executed as written by the side-by-side suite: the
``torch`` snippet with ``torch`` in scope, the ``tj`` snippet with ``tj``, ``jax`` and
``jnp`` in scope, and the two outcomes (the value of ``result``, or the exception
raised) must agree. Rows that need set-up name their dedicated tests instead. The
``jax`` column is what you would write with JAX alone.

Examples:
    >>> from torch2jax_device.porting import catalog
    >>> catalog.get("device-select").tj
    'device = tj.device("cuda" if tj.cuda.is_available() else "cpu")'
"""

from __future__ import annotations

from ..._src.errors import MissingKeyError
from ..idiom import Idiom
from . import (
    availability,
    checkpoints,
    creation,
    default_device,
    devices,
    distributed,
    feeding,
    kernels,
    libraries,
    memory,
    placement,
    precision,
    randomness,
    startup,
    timing,
)

__all__ = ["CATALOG", "SECTIONS", "Idiom", "get"]

_MODULES = (
    devices,
    availability,
    default_device,
    placement,
    creation,
    startup,
    memory,
    precision,
    randomness,
    kernels,
    timing,
    checkpoints,
    feeding,
    distributed,
    libraries,
)

#: The guide's sections, in order; each is one module of this package.
SECTIONS: tuple[str, ...] = tuple(module.SECTION for module in _MODULES)

#: Every row, section by section.
CATALOG: tuple[Idiom, ...] = tuple(row for module in _MODULES for row in module.ROWS)


def get(idiom_id: str) -> Idiom:
    """The catalog row with this id.

    Raises:
        MissingKeyError: no row has this id (a ``KeyError``), naming the fix.

    Examples:
        >>> from torch2jax_device.porting import catalog
        >>> catalog.get("tensor-cuda").tj
        'x = tj.to_device(x, "cuda")'
    """
    for idiom in CATALOG if isinstance(idiom_id, str) else ():
        if idiom.id == idiom_id:
            return idiom
    raise MissingKeyError(
        f"no idiom {idiom_id!r} in the catalog. Fix: pass a row's id, as scan reports it "
        "(torch2jax-device scan --explain lists them: catalog.CATALOG's ids)"
    )
