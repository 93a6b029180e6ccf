"""What every differential fuzzer of the suite shares: its settings and its run.

A fuzzer draws examples from ``random.Random(f"{seed}:{number}")`` (so a reported example
reruns alone), judges each against torch and groups the findings no table covers by
kind. ``TORCH2JAX_DEVICE_<NAME>_EXAMPLES`` and ``..._SEED`` make a run longer or fresh.
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

__all__ = ["Different", "Explained", "Finding", "expression", "run", "settings", "short"]

#: The seed every fuzzer starts from unless told otherwise.
DEFAULT_SEED = 20261129


class _Counted(Protocol):
    examples: int


class _Found(Protocol):
    @property
    def kind(self) -> tuple[str, ...]: ...


T = TypeVar("T", bound=_Counted)
F = TypeVar("F", bound=_Found)


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
