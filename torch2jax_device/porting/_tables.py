"""The scanner's tables, derived from the idiom catalog's rows.

Plain renames and advice-only names come from the rows' ``torch_api`` / ``tj_api`` /
``rewrite`` fields; a ``torch_api`` entry ending in ``.*`` covers every name under it
that no other row names, so no ``torch.cuda`` call goes unreported.
"""

from __future__ import annotations

from . import catalog
from .idiom import Idiom

__all__ = [
    "ADVICE",
    "DLPACK",
    "FACTORIES",
    "NEW_FACTORIES",
    "RENAMES",
    "RULES",
    "TENSOR_FACTORIES",
    "WILDCARDS",
    "wildcard",
]


def _table(kind: str) -> dict[str, Idiom]:
    return {
        name: row
        for row in catalog.CATALOG
        if row.rewrite == kind
        for name in row.torch_api
        if not name.endswith(".*")
    }


#: torch name -> (row, the torch2jax_device name that replaces it one for one).
RENAMES = {
    torch_name: (row, tj_name)
    for row in catalog.CATALOG
    if row.rewrite == "rename"
    for torch_name, tj_name in zip(row.torch_api, row.tj_api, strict=True)
}
#: torch name -> row, for names reported with their row's advice and never rewritten.
ADVICE = _table("advice")
#: "torch.cuda" -> row, for "torch.cuda.*": every name under it no other row names.
WILDCARDS = {
    name[: -len(".*")]: row
    for row in catalog.CATALOG
    if row.rewrite in ("advice", "custom")
    for name in row.torch_api
    if name.endswith(".*")
}
#: torch calls told ``device=`` that create tensors.
FACTORIES = frozenset(catalog.get("factory-device").torch_api)
#: ``torch.tensor`` and friends: they copy data given to them.
TENSOR_FACTORIES = frozenset(catalog.get("factory-tensor-device").torch_api)
#: ``x.new_zeros`` and friends, by method name.
NEW_FACTORIES = frozenset(
    name.split(".")[-1] for name in catalog.get("tensor-new-factory").torch_api
)

#: DLPack exchanges by name: the row that reports each and the tj call it stands for.
DLPACK = {
    name: (row.id, row.tj_api[0])
    for row in (catalog.get("tensor-to-jax"), catalog.get("jax-to-tensor"))
    for name in row.torch_api
}

#: Every rule id the scanner can report; each is a row of the idiom catalog.
RULES: frozenset[str] = frozenset(row.id for row in catalog.CATALOG if row.rewrite)


def wildcard(name: str) -> Idiom | None:
    """The row whose ``.*`` entry covers ``name`` most closely, if any."""
    best = ""
    for prefix in WILDCARDS:
        if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > len(best):
            best = prefix
    return WILDCARDS[best] if best else None
