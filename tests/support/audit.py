"""The side-by-side audit's machinery: run cases in torch and tj, hold differences to the docs.

A case is one line of ported code, written once for torch (the oracle) and once for
torch2jax_device. Both run; their outcomes (a value, normalized by the parity harness,
or the exception) must agree as ``harness.assert_same_outcome`` defines it. A case that
differs on purpose names the phrase of ``docs/known-differences*.md`` that documents
the difference; the audit fails for an undocumented difference, for a phrase no page
contains, and for a "documented" case that no longer differs (stale).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tests.parity.harness import assert_same_outcome, run

# The known-differences pages: this one and its children (placement, checkpoints, ...).
DOCS = Path(__file__).resolve().parents[2] / "docs"
KNOWN_DIFFERENCES = sorted(DOCS.glob("known-differences*.md"))


@dataclasses.dataclass(frozen=True)
class Case:
    """One idiom, in torch and in tj; ``documented`` quotes the known difference, if any."""

    id: str
    torch: Callable[[], Any]
    tj: Callable[[], Any]
    documented: str = ""


@dataclasses.dataclass
class Verdict:
    case: Case
    agrees: bool
    detail: str

    @property
    def problem(self) -> str:
        """Why this case fails the audit, or ``""``."""
        if not self.agrees and not self.case.documented:
            return f"undocumented difference: {self.detail}"
        if self.case.documented and not any(
            self.case.documented in page.read_text() for page in KNOWN_DIFFERENCES
        ):
            return f"documented as {self.case.documented!r}, which the page does not say"
        if self.agrees and self.case.documented:
            return f"documented as a difference but agrees ({self.detail}): drop the mark"
        return ""


def judge(case: Case) -> Verdict:
    theirs, ours = run(case.torch), run(case.tj)
    detail = f"torch {theirs.describe()}; tj {ours.describe()}"
    try:
        assert_same_outcome(theirs, ours)
    except AssertionError:
        return Verdict(case, False, detail)
    return Verdict(case, True, detail)


def audit(cases: Iterable[Case]) -> list[Verdict]:
    cases = list(cases)
    ids = [case.id for case in cases]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    return [judge(case) for case in cases]


def summary(verdicts: list[Verdict]) -> str:
    same = sum(verdict.agrees for verdict in verdicts)
    documented = sum(bool(verdict.case.documented) and not verdict.agrees for verdict in verdicts)
    problems = [f"  {v.case.id}: {v.problem}" for v in verdicts if v.problem]
    return "\n".join(
        [
            f"{len(verdicts)} cases: {same} agree with torch, {documented} documented "
            f"differences, {len(problems)} problems",
            *problems,
        ]
    )


def assert_clean(verdicts: list[Verdict]) -> None:
    assert not any(verdict.problem for verdict in verdicts), summary(verdicts)
