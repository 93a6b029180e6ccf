"""The tests every round of unseen code shares (``tests/cli/test_scan_unseen_roundN.py``).

A round is a folder of ``tests/support/fixtures``: files cut from public repositories
(rebuilt from clones, ``tests/support/excerpts.py``), each beside the ``.truth`` its
labeller wrote by hand, in sets told apart by a phrase of the ``.truth`` header (its
``#`` lines). ``round_tests(folder, floors)`` gives the round's module its tests; the
module keeps its docstring (the round's figures, its history) and its floors, nothing
else::

    from tests.support import unseen_rounds

    FOLDER = "unseen_round9"
    #: The recall each set must keep: (torch lines, library lines), as each set measured
    #: blind on main at COMMIT: D T/T, L/L; E ...; F ... (the counts behind the ratios).
    FLOORS = {
        "Held out set D of round 9": (TORCH_D, LIBRARY_D),
        "Held out set E of round 9": (TORCH_E, LIBRARY_E),
        "Held out set F of round 9": (TORCH_F, LIBRARY_F),
    }

    if __name__ == "__main__":
        unseen_rounds.print_figures(FOLDER, FLOORS)  # python -m ...: the figures
    else:
        globals().update(unseen_rounds.round_tests(FOLDER, FLOORS))

``FLOORS`` maps each set's phrase (as its ``.truth`` headers write it, case and all) to
the recall its torch lines and its library lines must keep, ratios compared with
``>=``: a floor at the counts measured is their ratio cut at the third digit (280/295 =
0.9491... -> 0.949, as round 8 writes its held-out set B's), so the test holds what was
measured and fails on one line fewer. Every file's header must hold exactly one of the
phrases (a phrase inside another, as "Held out" is inside "Held out set D", would count
a file twice: name each set by its whole phrase), and each set must hold
``FEWEST_FILES`` (12) files at least. The figures print with the phrases as the sets' names.

The tests (their names are the round's test ids, the same in every round):

- ``test_the_fixtures_are_labelled_with_catalog_rules_and_cite_their_source``: every
  file has its ``.truth``, every label is a rule of the scanner and some are the
  catalog's libraries', every file is in one set and each set large enough, and each
  file's first lines name the repository, path, 40-hex commit and licence it is cut from;
- ``test_recall_on_torch_lines_and_library_lines``: each set at or above its floors;
- ``test_a_reason_cites_only_lines_of_its_own_file`` (per file): a finding's reason that
  quotes code of "line N" quotes a name of that line;
- ``test_the_diff_compiles_and_reaches_its_fixed_point`` (per file): ``scan --diff``;
- ``test_scanned_together_no_finding_cites_a_file_it_does_not_import``: the folder
  scanned as one project, no reason names another file.

Where the clones are not at hand the module skips, saying which are missing (CI); a
round's own checks beyond these are tests of its module, beside the call.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import corpus, excerpts, scan_diff
from torch2jax_device.porting import catalog, scanner

#: The fewest files a set may hold: a smaller one measures too little (the sets of rounds
#: 6 to 8 hold 16 to 22 files each).
FEWEST_FILES = 12

Floors = dict[str, tuple[float, float]]


def folder_of(folder: str) -> Path:
    """The round's folder of ``tests/support/fixtures``."""
    return excerpts.FIXTURES / folder


def files(folder: str) -> list[str]:
    """The names of the round's files (without ``.py``)."""
    return sorted(path.stem for path in folder_of(folder).glob("*.py"))


def sets_of(folder: str, name: str, floors: Floors) -> list[str]:
    """The sets whose phrase the ``.truth`` header of ``name`` holds (one, in a good round)."""
    header = " ".join(
        line
        for line in (folder_of(folder) / f"{name}.truth").read_text().splitlines()
        if line[:1] == "#"
    )
    return [phrase for phrase in floors if phrase in header]


def figures(folder: str, floors: Floors) -> dict[str, dict[str, tuple[int, int]]]:
    """Per set, the recall over its files (``corpus.recall``)."""
    placed = {name: sets_of(folder, name, floors) for name in files(folder)}
    return {
        phrase: corpus.recall(
            folder_of(folder), [n for n, held in placed.items() if held == [phrase]]
        )
        for phrase in floors
    }


def print_figures(folder: str, floors: Floors) -> None:
    """The figures of each set, as ``python -m tests.cli.test_scan_unseen_roundN`` prints
    them (the rebuilt files written first; exits saying why where clones are missing)."""
    not_at_hand = excerpts.materialize(folder_of(folder))
    if not_at_hand:
        raise SystemExit(not_at_hand)
    corpus.print_figures(figures(folder, floors))


def round_tests(folder: str, floors: Floors) -> dict[str, Callable[..., None]]:
    """The round's tests by name, for ``globals().update`` in its module (the module
    docstring above says how); skips the module where the clones are not at hand."""
    unseen = folder_of(folder)
    not_at_hand = excerpts.materialize(unseen)
    if not_at_hand:
        pytest.skip(not_at_hand, allow_module_level=True)
    names = files(folder)
    libraries = {row.id for row in catalog.CATALOG if row.section == "Libraries built on torch"}

    def test_the_fixtures_are_labelled_with_catalog_rules_and_cite_their_source() -> None:
        assert all((unseen / f"{name}.truth").is_file() for name in names)
        labelled = corpus.labelled_rules(unseen, names)
        assert labelled <= scanner.RULES, labelled - scanner.RULES
        assert labelled & libraries
        placed = {name: sets_of(folder, name, floors) for name in names}
        assert {name: found for name, found in placed.items() if len(found) != 1} == {}
        sizes = {phrase: [found[0] for found in placed.values()].count(phrase) for phrase in floors}
        assert min(sizes.values()) >= FEWEST_FILES, sizes
        assert corpus.uncited_sources(unseen, names) == []

    def test_recall_on_torch_lines_and_library_lines() -> None:
        assert corpus.below_floors(figures(folder, floors), floors) == []

    @pytest.mark.parametrize("name", names)
    def test_a_reason_cites_only_lines_of_its_own_file(name: str) -> None:
        # Scanned on its own, as a one-file program: every name a reason quotes as code
        # of "line N" is on line N of this file or in the statement that starts there.
        assert corpus.miscited((unseen / f"{name}.py").read_text(), name) == []

    @pytest.mark.parametrize("name", names)
    def test_the_diff_compiles_and_reaches_its_fixed_point(name: str) -> None:
        source = (unseen / f"{name}.py").read_text()
        scan_diff.reaches_its_fixed_point(source, name)

    def test_scanned_together_no_finding_cites_a_file_it_does_not_import() -> None:
        # Files of unrelated projects scanned as one folder: a finding's reason names
        # only its own file.
        assert corpus.cited_elsewhere(unseen, names) == []

    return {
        test.__name__: test
        for test in (
            test_the_fixtures_are_labelled_with_catalog_rules_and_cite_their_source,
            test_recall_on_torch_lines_and_library_lines,
            test_a_reason_cites_only_lines_of_its_own_file,
            test_the_diff_compiles_and_reaches_its_fixed_point,
            test_scanned_together_no_finding_cites_a_file_it_does_not_import,
        )
    }
