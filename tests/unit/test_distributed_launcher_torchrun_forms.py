"""torchrun command lines people copy run unchanged under ``torch2jax-device run``.

``--standalone`` (torchrun's one-host rendezvous, in most copied command lines) and
``-m module`` run as under torchrun, side by side: the same lines from the same ranks.
What cannot work is the library's error with the fix, before any worker starts.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from tests.support.deadlines import deadline
from tests.support.distributed.launch import TORCHRUN, launch_in, run_bounded, worker_env
from tests.support.optional_frameworks import needs

pytestmark = pytest.mark.slow

MODULE = (
    "import os, sys\n"
    'print("rank", os.environ["RANK"], "of", os.environ["WORLD_SIZE"], sys.argv[1:])\n'
)


@pytest.fixture
def package(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(MODULE)
    return tmp_path


def _lines(output: str) -> list[str]:
    return sorted(line.split("]: ", 1)[-1] for line in output.splitlines() if "rank" in line)


def test_standalone_and_a_module_run_as_under_torchrun(package: Path) -> None:
    needs("torch")
    argv = ["--standalone", "--nproc_per_node", "2", "-m", "pkg.train", "--lr", "0.1"]
    status, ours, err = launch_in(package, *argv, limit_s=120)
    assert status == 0, err
    with contextlib.chdir(package):
        theirs_status, theirs, theirs_err = run_bounded(
            [str(TORCHRUN), *argv], env=worker_env(OMP_NUM_THREADS="1"), timeout=deadline(120)
        )
    assert theirs_status == 0, theirs_err
    assert (
        _lines(ours)
        == _lines(theirs)
        == [
            "rank 0 of 2 ['--lr', '0.1']",
            "rank 1 of 2 ['--lr', '0.1']",
        ]
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--standalone", "--nnodes", "2", "--master-port", "29400", "-m", "pkg.train"],
            "--standalone is a job on one host",
        ),
        (["-m", "nowhere.train"], "module 'nowhere.train' not found"),
        (["-m", "pkg/train.py"], "module 'pkg/train.py' not found"),
    ],
)
def test_what_cannot_run_is_said_before_any_worker_starts(
    package: Path, argv: list[str], message: str
) -> None:
    status, out, err = launch_in(package, *argv, limit_s=60)
    assert status == 2 and message in err and out == ""
    assert os.getcwd() != str(package)
