"""The tests' fork server (tests/support/forking.py) starts processes as ``python`` would."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.deadlines import deadline
from tests.support.forking import ForkServer

SCRIPT = """
import os, sys
print("out", os.getcwd(), os.environ.get("MARK"), sys.argv[1:])
print("err", file=sys.stderr)
raise SystemExit(int(sys.argv[1]))
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ForkServer]:
    (tmp_path / "script.py").write_text(SCRIPT)
    server = ForkServer({"PATH": os.environ.get("PATH", "")}, (), tmp_path)
    yield server
    server.close()


def test_a_child_has_its_own_status_environment_directory_and_output(
    server: ForkServer, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    child = server.start(
        str(tmp_path / "script.py"), "3", env={"MARK": "m"}, cwd=work, stdout=out, stderr=err
    )
    assert child.wait(deadline(60)) == 3
    assert out.read_text() == f"out {work} m ['3']\n"
    assert err.read_text() == "err\n"


def test_a_child_that_ended_before_the_next_start_is_not_its_answer(server: ForkServer) -> None:
    first = server.start("script.py", "0", env={})
    # wall-clock: the first child's end is likely reported before the next request; the
    # answer must be right either way
    time.sleep(0.5)
    second = server.start("script.py", "5", env={})
    assert (first.wait(deadline(60)), second.wait(deadline(60))) == (0, 5)
    assert first.pid != second.pid
    assert second.communicate() == ("", "err\n")
