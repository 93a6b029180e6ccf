"""Every command started with its stdout or stderr closed (``>&-``, as some service
managers and cron lines start them) does its work and exits 0: before, each died with a
raw ``AttributeError: 'NoneType' object has no attribute 'write'`` (Python's ``sys.stdout``
is ``None`` then), and ``run`` before its workers' output was relayed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.deadlines import deadline
from tests.support.distributed.launch import worker_env

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("closed", ["1", "2"], ids=["stdout", "stderr"])
@pytest.mark.parametrize("command", ["run", "devices", "doctor", "scan"])
def test_a_command_with_a_closed_stream_does_its_work(
    tmp_path: Path, command: str, closed: str
) -> None:
    script, done = tmp_path / "worker.py", tmp_path / "done"
    # scan reads a torch script; run's worker only prints, so it runs where torch is not
    imports = "import torch\n" if command == "scan" else ""
    body = f"{imports}print('x = torch.ones(2).cuda()')\nopen({str(done)!r}, 'w')\n"
    script.write_text(body)
    argv = {"run": ["run", str(script)], "scan": ["scan", str(script)]}.get(command, [command])
    # The shell closes the stream, then becomes Python: nothing else holds it open.
    line = " ".join([sys.executable, "-m", "torch2jax_device", *argv])
    other = "2>&1" if closed == "1" else ""
    result = subprocess.run(
        ["sh", "-c", f"exec {line} {other} {closed}>&-"], capture_output=True, text=True,
        env=worker_env(PYTHONPATH=str(ROOT)), timeout=deadline(300),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stdout + result.stderr
    assert done.exists() == (command == "run")
