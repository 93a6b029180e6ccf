"""The execution oracle of ``scan --diff`` on real projects: the same output after it.

Issue 35 asks for no ``--diff`` that changes what a script does, on real code the tests
have never seen. Every folder of ``tests/support/fixtures/realrun`` holding a
``driver.py`` is a case: ``project/`` holds a real project's files (each file's header
names the repository, path, commit and licence, and what was cut to run offline and in
seconds), rebuilt from a clone of it (``tests/support/excerpts.py``: this project
commits none of their code); ``driver.py`` runs it as its README does on a tiny config with
synthetic data (train, save a checkpoint, load it, evaluate) and prints numbers and
placement facts (``facts.py``: device, dtype, checksums); ``../stubs`` stands in for the
libraries it imports that are not installed or reach the network, never scanned with
it, as a library is not.

Each case runs its driver, then applies ``scan --diff`` to a copy of the project the
two ways a user does: the project's files scanned together (``scan --diff FILES...``,
as ``scan --diff DIR``), and each file alone. Where the diff rewrites anything, the
copy runs again and must print exactly what the original printed (the projects run
on the CPU, where torch and ``tj`` answer alike, so no tolerance is allowed), one call
reaches the fixed point, and scanning the result reports nothing the diff wrote.
``REWRITTEN`` says how many lines each diff rewrites: a change in the scanner that
rewrites more of a real project is then run before it can pass.

None of these projects run under a launcher on two CPU ranks as written (no gloo
path), so each runs on one process.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import excerpts
from tests.support.corpus import ScriptRunner
from tests.support.optional_frameworks import needs
from tests.support.scan_diff import apply_diff, reported_written, scan_diff

REALRUN = Path(__file__).resolve().parents[1] / "support" / "fixtures" / "realrun"
NOT_AT_HAND = excerpts.materialize(REALRUN)  # None where the clones are at hand
if NOT_AT_HAND:
    pytest.skip(NOT_AT_HAND, allow_module_level=True)
CASES = sorted(path.parent.name for path in REALRUN.glob("*/driver.py"))
STUBS = REALRUN / "stubs"

# Lines `scan --diff` rewrites in each project (scanned together, and file by file).
# None yet: every device value, `.to()` and CUDA query in them feeds torch's own
# modules and tensors, so the scanner holds each back with its reason.
REWRITTEN: dict[str, dict[str, int]] = {
    # device string -> net.to / DataParallel / torch.load -> net.load_state_dict
    "pytorch_cifar": {"together": 0, "each file": 0},
    # torch.device -> VAE().to(device), x.to(device) -> the torch model
    "pytorch_tutorial_vae": {"together": 0, "each file": 0},
    # torch.device -> model.to, batches .to(device) inside the package's ch05 helpers
    "llms_from_scratch": {"together": 0, "each file": 0},
    # --device string -> model.to / batches .to; torch.cuda seeds and syncs beside them
    "makemore": {"together": 0, "each file": 0},
}


def _project(name: str) -> Path:
    return REALRUN / name / "project"


def _workdir(folder: Path, name: str) -> Path:
    """The project's files, the stand-in libraries, ``facts.py`` and the driver."""
    shutil.copytree(_project(name), folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(STUBS, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.md"))
    shutil.copy(REALRUN / "facts.py", folder)
    shutil.copy(REALRUN / name / "driver.py", folder)
    return folder


def _sources(folder: Path, name: str) -> dict[str, str]:
    """The project's Python files in ``folder``, by path relative to it."""
    paths = sorted(path.relative_to(_project(name)) for path in _project(name).rglob("*.py"))
    return {str(path): (folder / path).read_text() for path in paths}


def _run(scripts: ScriptRunner, folder: Path) -> list[str]:
    status, out, err = scripts.run("driver.py", cwd=folder, limit_s=120)
    assert status == 0, out[-3000:] + err[-3000:]
    return out.splitlines()


def test_every_case_is_rebuilt_with_its_provenance() -> None:
    assert len(CASES) >= 3, f"fewer than three real projects in {REALRUN}"
    assert sorted(REWRITTEN) == CASES, "REWRITTEN says how much --diff rewrites in each case"
    for name in CASES:
        assert (REALRUN / name / "LICENSE").is_file(), f"{name} has no LICENSE"
        for path in _project(name).rglob("*.py"):
            assert path.read_text().startswith("# Vendored from https://github.com/"), path


@pytest.mark.parametrize("name", CASES)
def test_a_real_project_prints_the_same_after_scan_diff(
    name: str, tmp_path: Path, scripts: ScriptRunner
) -> None:
    needs("torch")
    before = _run(scripts, _workdir(tmp_path / "before", name))
    assert before, f"{name} printed nothing"

    entries = sorted(path.name for path in _project(name).iterdir() if path.name != "__pycache__")
    ways = {"together": [entries], "each file": [[path] for path in _sources(_project(name), name)]}
    for way, calls in ways.items():
        folder = _workdir(tmp_path / way.replace(" ", "-"), name)
        diffs = [scan_diff(folder, *paths) for paths in calls]
        diff = "".join(diffs)
        rewritten = [line for line in diff.splitlines() if line[:1] == "-" and line[:3] != "---"]
        assert len(rewritten) == REWRITTEN[name][way], (way, diff)
        if not diff:
            continue
        apply_diff(folder, diff)
        assert _run(scripts, folder) == before, (way, diff)
        # One call reaches the fixed point, and nothing --diff wrote is reported again.
        assert [scan_diff(folder, *paths) for paths in calls] == [""] * len(calls), way
        assert not reported_written(_sources(folder, name), diff), way
