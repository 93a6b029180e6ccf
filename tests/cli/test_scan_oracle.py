"""The execution oracle of ``scan --diff``: a script prints the same before and after.

Every ``*.py`` of ``tests/support/fixtures/oracle`` is a case (a new script is a new
case), and so is every folder holding a ``main.py`` (a project of several modules,
scanned together as ``scan --diff`` scans a folder, run as ``python main.py``): real-shaped
mixed scripts, torch and JAX in one process, torch's process group
owned by torch or by a library (``lib/deepspeed``, a stand-in installed beside the
script, never scanned with it, as a library is not), CUDA-state queries read later by
torch code, a model saved and resumed. Its first line says how it runs:
``# oracle: ranks=N`` (2: two CPU ranks under ``torch2jax-device run``, gloo on
127.0.0.1; ``ranks=1,2``: launched on one rank, then on two, each a case). A
``NAME.port`` beside it is a newcomer's hand port of the code between the script's
``# port: begin`` / ``# port: end`` marks (the model, to Flax NNX): the port is
made, then ``scan --diff`` is applied as the documented workflow says (``patch -p1``),
and the result must print what the torch original printed, running to the end. Then
the result is scanned again: the rewrite reached its fixed point (a second ``--diff``
is empty) and nothing ``--diff`` wrote is reported.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.support.corpus import ScriptRunner
from tests.support.distributed.launch import launch_in
from tests.support.optional_frameworks import needs
from tests.support.scan_diff import apply_diff, reported_written, scan_diff
from tests.support.scan_diff import brought as scan_diff_brought
from torch2jax_device.porting import scanner

ORACLE = Path(__file__).resolve().parents[1] / "support" / "fixtures" / "oracle"
# Projects: folders of modules, their entry point main.py.
PROJECTS = sorted(path.parent.name for path in ORACLE.glob("*/main.py"))
CASES = sorted([*(path.stem for path in ORACLE.glob("*.py")), *PROJECTS])
ROOT = Path(__file__).resolve().parents[2]
# torch's gloo threads can abort a rank at interpreter exit after the script has finished
# (tests/support/distributed/exit_after_script.py explains): ranks exit when it returns.
EXIT_AFTER_SCRIPT = ROOT / "tests" / "support" / "distributed" / "exit_after_script.py"
_RANKS = re.compile(r"# oracle: ranks=(\d+(?:,\d+)*)")
_RANK_LINE = re.compile(r"\[rank(\d+)\]: (.*)")
_PORT = re.compile(r"^# port: begin\n.*?^# port: end\n", re.DOTALL | re.MULTILINE)


def _ranks(source: str) -> list[int]:
    found = _RANKS.match(source)
    assert found, "an oracle script starts with '# oracle: ranks=N' (or 'ranks=1,2')"
    return [int(count) for count in found.group(1).split(",")]


def _entry(name: str) -> Path:
    """The file a case runs: the script, or a project's ``main.py``."""
    return ORACLE / name / "main.py" if name in PROJECTS else ORACLE / f"{name}.py"


def _scanned(name: str) -> list[str]:
    """What ``scan --diff`` is given: the script, or every entry of the project folder
    (its modules and packages, not the stand-in libraries beside them)."""
    if name in PROJECTS:
        return sorted(p.name for p in (ORACLE / name).iterdir() if p.name != "__pycache__")
    return [f"{name}.py"]


def _workdir(tmp: Path, name: str) -> Path:
    """A folder with the script (or the project's files) and the libraries it imports
    (``lib/*``) beside it."""
    folder = tmp / name
    shutil.copytree(ORACLE / "lib", folder)
    if name in PROJECTS:
        shutil.copytree(ORACLE / name, folder, dirs_exist_ok=True)
        for port in folder.rglob("*.port"):
            port.unlink()  # the newcomer's port is made from the fixture's copy
    else:
        shutil.copy(ORACLE / f"{name}.py", folder)
    return folder


def _ports(name: str) -> list[tuple[Path, Path]]:
    """(the port, the file of the work folder it replaces the marked code of), relative."""
    if name in PROJECTS:
        base = ORACLE / name
        return [(port, port.relative_to(base).with_suffix(".py")) for port in base.rglob("*.port")]
    port = ORACLE / f"{name}.port"
    return [(port, Path(f"{name}.py"))] if port.exists() else []


def _hand_port(script: Path, port: Path) -> None:
    """The newcomer's manual step: the marked region replaced by its port."""
    source = script.read_text()
    assert _PORT.search(source), f"{script.name} has a {port.name} but no '# port:' marks"
    script.write_text(_PORT.sub(lambda _: port.read_text(), source, count=1))


def _diff(folder: Path, name: str) -> str:
    """``torch2jax-device scan --diff NAME.py`` in ``folder`` (the script alone), or over
    the project's files together."""
    return scan_diff(folder, *_scanned(name))


def _run(scripts: ScriptRunner, folder: Path, name: str, ranks: int, launched: bool) -> list[str]:
    """What the script prints, line by line (launched: by rank, ``_by_rank``)."""
    script = "main.py" if name in PROJECTS else f"{name}.py"
    if not launched:
        status, out, err = scripts.run(script, str(folder), cwd=folder)
    else:
        status, out, err = launch_in(
            folder, "--nproc-per-node", str(ranks), "--cpu-devices", "1",
            str(EXIT_AFTER_SCRIPT), script, str(folder), limit_s=240,
        )  # fmt: skip
    assert status == 0, out[-3000:] + err[-3000:]
    return _by_rank(out) if launched else out.splitlines()


def _by_rank(out: str) -> list[str]:
    """Each rank's output, its relayed pieces joined in order (the launcher may relay a
    line in pieces, each prefixed ``[rankN]: ``: issue 36, item 5), then the lines of no
    rank, sorted."""
    pieces: dict[str, list[str]] = {}
    others = []
    for line in out.splitlines():
        found = _RANK_LINE.match(line)
        if found:
            pieces.setdefault(found.group(1), []).append(found.group(2))
        else:
            others.append(line)
    return [f"rank {rank}: {''.join(pieces[rank])}" for rank in sorted(pieces)] + sorted(others)


# Every script the tests hold, as written and, for an oracle case with a port, ported.
SCRIPTS = sorted(
    [
        *(ROOT / "examples").glob("*.py"),
        *(ROOT / "tests" / "support" / "fixtures").rglob("*.py"),
    ]
)


@pytest.mark.parametrize("path", SCRIPTS, ids=[str(p.relative_to(ROOT)) for p in SCRIPTS])
def test_one_diff_reaches_the_fixed_point_and_its_output_is_never_reported(path: Path) -> None:
    """``scan --diff`` twice is ``scan --diff`` once (no "run again"), and scanning its
    result reports nothing ``--diff`` wrote, on every script the tests hold."""
    sources = [path.read_text()]
    port = path.with_suffix(".port")
    if port.exists():
        sources.append(_PORT.sub(lambda _: port.read_text(), sources[0], count=1))
    for source in sources:
        before = scanner.scan_source(source, str(path))
        ported = scanner.apply_edits(source, before)
        again = scanner.scan_source(ported, str(path))
        assert scanner.apply_edits(ported, again) == ported
        reported = scan_diff_brought(source, ported, before, again)
        assert not reported, [(f.line, f.rule, f.original) for f in reported]


def test_every_case_says_how_it_runs() -> None:
    assert CASES, f"no oracle scripts in {ORACLE}"
    assert len(PROJECTS) >= 2, "the oracle holds at least two projects of several modules"
    for name in CASES:
        _ranks(_entry(name).read_text())
    for port in ORACLE.glob("*.port"):
        assert port.stem in CASES, f"{port.name} ports no script"


# (case, ranks, launched): a case of several rank counts is launched on each.
RUNS = [
    (name, ranks, len(counts) > 1 or ranks > 1)
    for name in CASES
    for counts in [_ranks(_entry(name).read_text())]
    for ranks in counts
]


@pytest.mark.parametrize(
    ("name", "ranks", "launched"), RUNS, ids=[f"{name}-ranks{ranks}" for name, ranks, _ in RUNS]
)
def test_the_script_prints_the_same_after_scan_diff(
    name: str, ranks: int, launched: bool, tmp_path: Path, scripts: ScriptRunner
) -> None:
    needs("torch")
    needs("flax")
    original = _workdir(tmp_path / "before", name)
    before = _run(scripts, original, name, ranks, launched)
    assert before, f"{name} printed nothing"

    ported = _workdir(tmp_path / "after", name)
    for port, target in _ports(name):
        _hand_port(ported / target, port)
    diff = _diff(ported, name)
    if diff:
        apply_diff(ported, diff)
    after = _run(scripts, ported, name, ranks, launched)
    assert after == before, diff

    # One call reaches the fixed point, and nothing --diff wrote is reported again.
    assert _diff(ported, name) == ""
    if diff:
        reported = reported_written(_project_sources(ported, name), diff)
        assert not reported, reported


def _project_sources(folder: Path, name: str) -> dict[str, str]:
    """The sources ``scan --diff`` was given, by path relative to ``folder``."""
    found: dict[str, str] = {}
    for entry in _scanned(name):
        path = folder / entry
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            found[str(file.relative_to(folder))] = file.read_text()
    return found


@pytest.mark.parametrize("name", PROJECTS)
def test_a_project_reaches_the_fixed_point_together(name: str, tmp_path: Path) -> None:
    """Scanned together (as ``scan --diff DIR``), a project's rewrite applied and scanned
    again rewrites nothing more and reports nothing it wrote, before and after its
    newcomer's port."""
    folder = _workdir(tmp_path, name)
    stages = [_project_sources(folder, name)]
    if _ports(name):
        for port, target in _ports(name):
            _hand_port(folder / target, port)
        stages.append(_project_sources(folder, name))
    for sources in stages:
        found = scanner.scan_sources(sources)
        ported = {p: scanner.apply_edits(s, found[p]) for p, s in sources.items()}
        again = scanner.scan_sources(ported)
        assert {p: scanner.apply_edits(s, again[p]) for p, s in ported.items()} == ported
        for path, text in ported.items():
            reported = scan_diff_brought(sources[path], text, found[path], again[path])
            assert not reported, [(path, f.line, f.rule, f.original) for f in reported]
