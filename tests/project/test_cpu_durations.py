"""``--cpu-durations`` (tests/support/cpu_durations.py) reports what tests cost the CPU."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_costly_tests_come_first_with_their_subprocesses_counted(tmp_path: Path) -> None:
    (tmp_path / "test_burn.py").write_text(
        textwrap.dedent(
            """
            import subprocess, sys, time

            def _burn(seconds):
                end = time.process_time() + seconds
                while time.process_time() < end:
                    pass

            def test_cheap():
                pass

            def test_burns_here():
                _burn(0.3)

            def test_burns_in_a_subprocess():
                code = "import time\\nend = time.process_time() + 0.6\\n"
                code += "while time.process_time() < end: pass"
                subprocess.run([sys.executable, "-c", code], check=True)
            """
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.support.cpu_durations", "-p",
         "no:cacheprovider", "--cpu-durations=2", "-q", str(tmp_path / "test_burn.py")],
        cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    report = result.stdout.split("2 most CPU-costly tests", 1)[1].splitlines()[1:4]
    first, second, total = report
    assert first.endswith("test_burn.py::test_burns_in_a_subprocess"), report
    assert second.endswith("test_burn.py::test_burns_here"), report
    in_subprocesses = float(first.split(",")[1].split("s in subprocesses")[0])
    here = float(second.split("(")[1].split("s here")[0])
    assert in_subprocesses >= 0.6 and here >= 0.3, report
    assert total.startswith("3 tests: "), report
