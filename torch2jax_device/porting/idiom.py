"""One row of the idiom catalog: a PyTorch idiom, its JAX and torch2jax_device equivalents."""

from __future__ import annotations

import dataclasses

__all__ = ["REWRITES", "Idiom"]

#: What ``scan --diff`` may do with an idiom (see ``Idiom.rewrite``).
REWRITES = ("rename", "custom", "advice", "")


@dataclasses.dataclass(frozen=True)
class Idiom:
    """One PyTorch idiom with its plain-JAX and torch2jax_device equivalents.

    Attributes:
        id: Stable identifier, used by tests, the guide's anchors and scanner rules.
        section: The guide section the row belongs to (one of ``SECTIONS``).
        title: What the idiom does, in a few words.
        torch: The PyTorch code.
        jax: The same with JAX alone.
        tj: The same with torch2jax_device (imported as ``tj``).
        notes: Differences a porter must know.
        runs: The side-by-side suite executes ``torch`` and ``tj`` as written.
        result: The variable both snippets assign and the suite compares; ``None``
            compares only success versus the exception raised.
        torch_api: The torch names the row covers: qualified functions, classes and
            settings (``"torch.cuda.is_available"``,
            ``"torch.backends.cudnn.benchmark"``) or methods and attributes
            (``"Tensor.to"``, ``"DistributedDataParallel.module"``). A name ending in
            ``.*`` (``"torch.cuda.*"``) covers every name under it that no other row
            names: the scanner reports them under this row rather than not at all.
        tj_api: For ``rewrite="rename"``, the torch2jax_device name replacing each
            ``torch_api`` name, in the same order; otherwise the names the ``tj``
            column uses.
        rewrite: What ``scan --diff`` does with the idiom: ``"rename"`` (a call of
            ``torch_api[i]`` becomes one of ``tj_api[i]``, arguments unchanged),
            ``"custom"`` (a rewrite of the scanner's own, see ``porting.scanner``),
            ``"advice"`` (reported with the ``tj`` column as advice, never rewritten)
            or ``""`` (not scanned for). A rename or custom rewrite is applied only
            when it is correct on its own (see ``porting.scanner``).

    Examples:
        >>> from torch2jax_device.porting import catalog
        >>> row = catalog.get("cuda-is-available")
        >>> row.torch, row.tj
        ('available = torch.cuda.is_available()', 'available = tj.cuda.is_available()')
        >>> row.rewrite, row.tj_api
        ('rename', ('tj.cuda.is_available',))
    """

    id: str
    section: str
    title: str
    torch: str
    jax: str
    tj: str
    notes: str = ""
    runs: bool = True
    result: str | None = None
    torch_api: tuple[str, ...] = ()
    tj_api: tuple[str, ...] = ()
    rewrite: str = ""

    def __post_init__(self) -> None:
        if self.rewrite not in REWRITES:
            raise ValueError(
                f"idiom {self.id!r}: rewrite {self.rewrite!r} is not one of {REWRITES}"
            )
        if self.rewrite == "rename" and len(self.tj_api) != len(self.torch_api):
            raise ValueError(
                f"idiom {self.id!r}: a rename needs one tj_api name per torch_api name"
            )
        if self.rewrite and not self.torch_api:
            raise ValueError(f"idiom {self.id!r}: a scanned row names its torch_api")
