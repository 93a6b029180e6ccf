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

__all__ = ["Finding", "run", "settings"]

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
