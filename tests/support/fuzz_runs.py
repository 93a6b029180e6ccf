"""What every differential fuzzer of the suite shares: its settings, its run, its report.

A fuzzer draws examples from ``random.Random(f"{seed}:{number}")`` (so a reported example
reruns alone), judges each against torch (``outcome``: a ``Different`` raised is a
finding, an ``Explained`` a row of its table), groups the findings no table covers by
kind, and reports each kind with a shrunk reproduction (``shrink``, ``listed``).
``TORCH2JAX_DEVICE_<NAME>_EXAMPLES`` and ``..._SEED`` make a run longer or fresh.
"""

from __future__ import annotations

import dataclasses
import os
import random
import traceback
import warnings
from collections.abc import Callable, Iterable, MutableMapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

__all__ = [
    "Different", "Explained", "Finding", "Row", "expression", "listed", "outcome", "run",
    "settings", "short", "shrink",
]  # fmt: skip

#: The seed every fuzzer starts from unless told otherwise.
DEFAULT_SEED = 20261129


class _Counted(Protocol):
    examples: int


class _Found(Protocol):
    @property
    def draw(self) -> Any: ...

    @property
    def kind(self) -> tuple[str, ...]: ...

    def reproduction(self) -> str: ...


class _Explaining(Protocol):
    @property
    def explained(self) -> MutableMapping[str, int]: ...


T = TypeVar("T", bound=_Counted)
F = TypeVar("F", bound=_Found)
D = TypeVar("D")
E = TypeVar("E", bound=_Explaining | None)


@dataclasses.dataclass(frozen=True)
class Row:
    """A difference by design, a row of a fuzzer's table: its id (what ``Explained``
    names), what differs, and the phrase of the docs page that says it ("" where no run
    a user makes meets it, or the difference is torch's failure)."""

    id: str
    what: str
    docs: str


@dataclasses.dataclass(frozen=True)
class Finding:
    """A difference no row of a fuzzer's table explains: which part, where, both answers.

    Each fuzzer's subclass says its ``kind`` (what its findings are grouped by).
    """

    draw: Any
    aspect: str
    where: str
    torch: str
    ours: str

    def reproduction(self) -> str:
        """The draw as one line of Python, and what differs."""
        return (
            f"{self.draw.expression()}  # {self.aspect} differs at {self.where}: "
            f"torch {self.torch}; tj {self.ours}"
        )


class Different(Exception):
    """A part of the answers differs: the finding, raised from deep in a comparison."""

    def __init__(self, aspect: str, where: str, theirs: Any, ours: Any) -> None:
        super().__init__(aspect)
        self.parts = (aspect, where, short(theirs), short(ours))


class Explained(Exception):
    """A row of a fuzzer's table accounts for the example's outcome."""

    def __init__(self, row: str) -> None:
        super().__init__(row)
        self.row = row


def short(value: Any) -> str:
    """An answer on one line, at most 300 characters (an error as ``Type: message``)."""
    if isinstance(value, BaseException):
        value = f"{type(value).__name__}: {value}"
    return " ".join(str(value).split())[:300]


def expression(draw: Any, always: tuple[str, ...] = ()) -> str:
    """A dataclass draw as one line of Python: its fields not at their defaults (and
    those named in ``always``), what to rerun."""
    fields = [
        f"{field.name}={getattr(draw, field.name)!r}"
        for field in dataclasses.fields(draw)
        if field.default is dataclasses.MISSING
        or field.name in always
        or getattr(draw, field.name) != field.default
    ]
    return f"{type(draw).__name__}({', '.join(fields)})"


def settings(variable: str, default_examples: int) -> tuple[int, int]:
    """(examples, seed) from ``TORCH2JAX_DEVICE_{variable}_EXAMPLES`` / ``..._SEED``."""
    prefix = f"TORCH2JAX_DEVICE_{variable}_"
    examples = int(os.environ.get(f"{prefix}EXAMPLES", default_examples))
    return examples, int(os.environ.get(f"{prefix}SEED", DEFAULT_SEED))


def run(
    examples: int,
    seed: int,
    draw: Callable[[random.Random], Any],
    judge: Callable[[Any, T], Iterable[F]],
    tally: T,
) -> dict[tuple[str, ...], list[F]]:
    """Draw and judge ``examples`` examples from ``seed``; the findings by kind."""
    found: dict[tuple[str, ...], list[F]] = {}
    for number in range(examples):
        example = draw(random.Random(f"{seed}:{number}"))  # each example reproducible alone
        tally.examples += 1
        for finding in judge(example, tally):
            found.setdefault(finding.kind, []).append(finding)
    return found


def outcome(
    draw: D,
    compare: Callable[[D, E], object],
    tally: E,
    finding: Callable[..., F],
    *,
    crashes: bool = False,
) -> list[F]:
    """``compare(draw, tally)``'s finding: the ``Different`` it raises (as ``finding(draw,
    aspect, where, theirs, ours)``), none where it returns or where a row's ``Explained``
    accounts for the example (counted in ``tally.explained``). With ``crashes``, any
    other exception, of either side, is a finding too: ``crash: Type`` at the file and
    line it came from. Warnings are silenced, not compared: torch warns once per process
    (a complex value cast to real), tj once per dtype (64-bit data narrowed)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compare(draw, tally)
    except Explained as explained:
        if tally is not None:
            tally.explained[explained.row] += 1
    except Different as different:
        return [finding(draw, *different.parts)]
    except Exception as error:
        if not crashes:
            raise
        where = traceback.extract_tb(error.__traceback__)[-1]
        aspect, line = (
            f"crash: {type(error).__name__}",
            f"{Path(where.filename).name}:{where.lineno}",
        )
        return [finding(draw, aspect, line, "", short(error))]
    return []


def shrink(
    finding: F,
    judge: Callable[[Any], Iterable[F]],
    smaller: Callable[[Any], Iterable[Any]],
    budget: int,
    alike: Callable[[F], object] = lambda found: found.kind,
) -> F:
    """A smaller draw showing the same kind of difference: the first of ``smaller(draw)``
    whose judgement holds a finding ``alike`` this one (of its ``kind``, unless told),
    then again from that one, ``budget`` steps at most."""
    best = finding
    for _ in range(budget):
        for candidate in smaller(best.draw):
            same = [found for found in judge(candidate) if alike(found) == alike(best)]
            if same:
                best = same[0]
                break
        else:
            return best
    return best


def listed(
    found: dict[tuple[str, ...], list[F]], shrunk: Callable[[F], F], shown: int | None = None
) -> list[str]:
    """A report's lines, a kind each, the most found first: ``- KIND (Nx): REPRODUCTION``
    of the first finding shrunk (``shrunk``), for the first ``shown`` kinds (all unless
    told; the rest are counted only)."""
    lines = []
    for number, (kind, findings) in enumerate(sorted(found.items(), key=lambda i: -len(i[1]))):
        shows = shown is None or number < shown
        reproduction = f": {shrunk(findings[0]).reproduction()}" if shows else ""
        lines.append(f"- {' / '.join(kind)} ({len(findings)}x){reproduction}")
    return lines
