"""The execution oracle of ``scan --diff`` on newcomers' ports of real projects.

Issue 35 asks that a newcomer's port of a small trainer run to the end after ``--diff``
with no hand edit beyond the model itself, and that no ``--diff`` change what a script
does. ``test_scan_realrun.py`` shows the second on real torch projects, where the diff
rewrites nothing (every device value feeds torch's own modules); this test shows the
first, where it has to rewrite.

Every folder of ``tests/support/fixtures/ports`` holding a ``driver.py`` is a case
(sfujim/TD3, an RL agent whose ``TD3.py`` holds the networks and their update, and
karpathy/minGPT's chargpt, whose trainer steps the optimizer inline, so the newcomer
ports its step with the model):

- ``project/`` holds a real project's files, rebuilt from a clone of it
  (``tests/support/excerpts.py``; this project commits none of their code), with the
  one hand edit beyond the model: the import of the model (and of minGPT's trainer)
  pointed at the port, each file's header naming the lines; ``original/`` holds the
  files that edit changed, as they were;
- the case folder's other Python files are the port: the model, as a newcomer ports it
  to Flax NNX by hand (this project's code): the layers and their update step, with the
  device lines, the checkpoint lines and the data feeding it left as they were;
- ``driver.py`` runs the project as its README does on a tiny config with synthetic
  data (train a few steps, save a checkpoint, load it, evaluate), then has the torch
  original load the port's checkpoint; it prints ``fact`` lines (placement, dtypes,
  outcomes) that read the same for the torch original and for the port.

Each case runs the torch original, then the port after ``scan --diff`` applied the two
ways a user does it (the project's files scanned together, and each file alone; where
a file alone cannot show what reaches a line the port needs, ``HELD_BACK_ALONE`` names
the line the diff holds back, with its reason, and that way is not run). The port must
run to the end, print the original's facts and a loss that decreased; one
``--diff`` call reaches the fixed point; and scanning the result reports nothing the
diff wrote. ``REWRITTEN`` says how many lines each diff rewrites, so a scanner change
that rewrites more or less of a port is seen.
"""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest

from tests.support import excerpts
from tests.support.corpus import ScriptRunner
from tests.support.optional_frameworks import needs
from tests.support.scan_diff import apply_diff, reported_written, scan_diff
from torch2jax_device.porting import scanner

PORTS = Path(__file__).resolve().parents[1] / "support" / "fixtures" / "ports"
NOT_AT_HAND = excerpts.materialize(
    PORTS
)  # None where the clones (sfujim/TD3, karpathy/minGPT) are at hand
if NOT_AT_HAND:
    pytest.skip(NOT_AT_HAND, allow_module_level=True)
CASES = sorted(path.parent.name for path in PORTS.glob("*/driver.py"))
STUBS = PORTS / "stubs"

# Lines `scan --diff` rewrites in each port (scanned together, and file by file).
REWRITTEN: dict[str, dict[str, int]] = {
    # TD3_nnx.py: the device, Actor/Critic .to(device), the state fed to the actor, the
    # two state_dict saves, the two load_state_dicts and the two optimizers' torch.loads;
    # main.py, utils.py and the torch DDPG/TD3 files stay torch's.
    # Alone, TD3_nnx.py also gets tj.cuda.is_available() (on the device line): no torch
    # module is moved in that file.
    "td3": {"together": 10, "each file": 10},
    # trainer_nnx.py: self.model.to(self.device) (what chargpt.py hands Trainer is
    # model_nnx's GPT), each batch's .to; chargpt.py: the sample's context .to, the save.
    # Alone, trainer_nnx.py keeps self.model.to: nothing in it says what model is; and
    # mingpt/utils.py keeps torch.cuda.manual_seed_all: a module of definitions alone,
    # whose set_seed runs in scripts not scanned with it, which may keep torch's CUDA.
    "mingpt": {"together": 4, "each file": 1},
}
# Cases whose port scanned file by file cannot run: the diff holds back a line the
# port needs, with its reason, since only the project shows what reaches it.
HELD_BACK_ALONE = {"mingpt": ("trainer_nnx.py", "self.model.to(self.device)")}


def _port_files(name: str) -> list[Path]:
    return sorted(path for path in (PORTS / name).glob("*.py") if path.name != "driver.py")


def _workdir(folder: Path, name: str, side: str) -> Path:
    """The project's files (the originals of ``original/`` on the torch side, the port's
    files beside them on the port's), the stand-in libraries, ``facts.py``, the driver."""
    shutil.copytree(PORTS / name / "project", folder, ignore=shutil.ignore_patterns("__pycache__"))
    if side == "torch":
        shutil.copytree(PORTS / name / "original", folder, dirs_exist_ok=True)
    else:
        for path in _port_files(name):
            shutil.copy(path, folder)
    shutil.copytree(STUBS, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.md"))
    shutil.copy(PORTS / "facts.py", folder)
    shutil.copy(PORTS / name / "driver.py", folder)
    return folder


def _sources(folder: Path, name: str) -> dict[str, str]:
    """The port's project files in ``folder`` (the project's and the port's), by path."""
    project = PORTS / name / "project"
    paths = [path.relative_to(project) for path in project.rglob("*.py")]
    paths += [Path(path.name) for path in _port_files(name)]
    return {str(path): (folder / path).read_text() for path in sorted(paths)}


def _run(scripts: ScriptRunner, folder: Path) -> list[str]:
    status, out, err = scripts.run("driver.py", cwd=folder, limit_s=600)
    assert status == 0, out[-3000:] + err[-3000:]
    return out.splitlines()


def _facts(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("fact ")]


def _reported_written(sources: dict[str, str], diff: str) -> list[tuple[str, int, str, str]]:
    """Findings on lines ``diff`` wrote about code it wrote: a torch call the diff kept
    inside a rewritten line (``tj.device("cuda" if torch.cuda.is_available() else
    "cpu")``, the query held back for torch's own use elsewhere) was there before."""
    removed = [line[1:] for line in diff.splitlines() if line[:1] == "-" and line[:3] != "---"]
    return [
        found
        for found in reported_written(sources, diff)
        if not any(found[3] in line for line in removed)
    ]


def test_every_case_is_rebuilt_and_changes_one_line() -> None:
    assert CASES, f"no ported project in {PORTS}"
    assert sorted(REWRITTEN) == CASES, "REWRITTEN says how much --diff rewrites in each port"
    for name in CASES:
        assert (PORTS / name / "LICENSE").is_file(), f"{name} has no LICENSE"
        assert _port_files(name), f"{name} has no port"
        for path in (PORTS / name / "project").rglob("*.py"):
            assert path.read_text().startswith("# Vendored from https://github.com/"), path
        # The one hand edit beyond the model: one line of the project, its model's import.
        for original in (PORTS / name / "original").rglob("*.py"):
            ported = PORTS / name / "project" / original.relative_to(PORTS / name / "original")
            changed = [
                line
                for line in difflib.ndiff(
                    original.read_text().splitlines(), ported.read_text().splitlines()
                )
                if line[:2] in ("- ", "+ ")
            ]
            header = [line for line in changed if line[2:].startswith("#")]
            code = [line for line in changed if line not in header]
            removed = [line for line in code if line.startswith("- ")]
            assert code and len(removed) * 2 == len(code) <= 4, code
            assert all(line[2:].startswith(("import ", "from ")) for line in code), code


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_a_newcomers_port_runs_to_the_end_after_scan_diff(
    name: str, tmp_path: Path, scripts: ScriptRunner
) -> None:
    needs("torch")
    needs("flax")
    torch_facts = _facts(_run(scripts, _workdir(tmp_path / "torch", name, "torch")))
    assert torch_facts, f"{name}'s torch original printed no facts"

    for way in ("together", "each file"):
        folder = _workdir(tmp_path / way.replace(" ", "-"), name, "port")
        sources = _sources(folder, name)
        calls = [list(sources)] if way == "together" else [[path] for path in sources]
        diff = "".join(scan_diff(folder, *paths) for paths in calls)
        rewritten = [line for line in diff.splitlines() if line[:1] == "-" and line[:3] != "---"]
        assert len(rewritten) == REWRITTEN[name][way], (way, diff)
        if way == "each file" and name in HELD_BACK_ALONE:
            path, code = HELD_BACK_ALONE[name]
            held = [
                f for f in scanner.scan_sources({path: sources[path]})[path] if f.original == code
            ]
            assert held and all(f.rewrite is None and f.reason for f in held), held
            continue

        apply_diff(folder, diff)
        out = _run(scripts, folder)
        assert _facts(out) == torch_facts, (way, "\n".join(out))
        losses = [line for line in out if line.startswith("loss ")]
        assert losses and all(line.endswith("decreased True") for line in losses), (way, losses)
        # One call reaches the fixed point, and nothing --diff wrote is reported again.
        assert [scan_diff(folder, *paths) for paths in calls] == [""] * len(calls), way
        assert not _reported_written(_sources(folder, name), diff), way
