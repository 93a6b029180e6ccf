"""Helpers the distributed tests share: free ports, launchers and worker results.

Every launch has a timeout, and every address is the loopback interface.
"""

from __future__ import annotations

import _thread
import argparse
import fcntl
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.support.deadlines import deadline
from torch2jax_device.cli import run as _run

SCRIPTS = Path(__file__).resolve().parent
TORCHRUN = Path(sys.executable).with_name("torchrun")
# JAX timeout inside workers that test failures: short, so no test waits long.
SHORT_TIMEOUT_S = 3


#: Ports handed out by any test process on this machine, with when: a port probed free
#: and let go is free for anyone until the test's worker binds it, and test processes run
#: side by side (scripts/test.sh's groups, other checkouts), so none hands out a port
#: another handed out within ``_PORT_QUARANTINE_S``.
_PORT_REGISTRY = Path(tempfile.gettempdir()) / "torch2jax-device-test-ports"
_PORT_QUARANTINE_S = 900


def free_port() -> int:
    """A TCP port nobody listens on right now, and no other test process was given lately."""
    return _handed_out(1)


def free_port_pair() -> int:
    """The first of two consecutive such ports: torch's store, then JAX's coordinator."""
    return _handed_out(2)


def _handed_out(count: int) -> int:
    """The first of ``count`` consecutive ports free now and not handed out lately (bind
    port 0, read it, let it go), recorded in the machine's registry under its lock."""
    with open(_PORT_REGISTRY, "a+") as registry:
        fcntl.flock(registry, fcntl.LOCK_EX)  # released when the file closes
        registry.seek(0)
        now = time.time()  # wall-clock: a record's age across processes, never a wait
        recent = {}
        for line in registry.read().split():
            port, _, when = line.partition("@")
            if port.isdigit() and when.replace(".", "", 1).isdigit():
                if now - float(when) < _PORT_QUARANTINE_S:
                    recent[int(port)] = float(when)
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.bind(("127.0.0.1", 0))
                first: int = probe.getsockname()[1]
            ports = range(first, first + count)
            fresh = not recent.keys() & set(ports)
            if first + count <= 65536 and fresh and all(map(_run._is_free, ports)):
                break
        recent.update(dict.fromkeys(ports, now))
        registry.seek(0)
        registry.truncate()
        registry.write("".join(f"{port}@{when:.0f}\n" for port, when in recent.items()))
        return first


def worker_env(**extra: str) -> dict[str, str]:
    """This environment, minus any launcher variables, with JAX on the CPU."""
    launcher = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_NAME",
                "ROLE_WORLD_SIZE", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID",
                "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_SIGNALS_TO_HANDLE",
                "TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS",
                "JAX_COORDINATOR_PORT", "JAX_LOCAL_DEVICE_IDS", "JAX_NUM_CPU_DEVICES",
                "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"}  # fmt: skip
    env = {key: value for key, value in os.environ.items() if key not in launcher}
    env.update(JAX_PLATFORMS="cpu", **extra)
    return env


def rank_env(rank: int, world_size: int, port: int, **extra: str) -> dict[str, str]:
    """The environment torchrun would give one worker on this host."""
    return worker_env(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
        **extra,
    )  # fmt: skip


def results(output: str, marker: str = "RESULT ", count: int | None = None) -> list[dict[str, Any]]:
    """The JSON objects workers printed after ``marker``, in rank order (``count`` of
    them, if given: else the output is the failure's message).

    Decoded where each marker starts, not line by line: torchrun lets its workers
    write to one stream, so two results can share a line.
    """
    decoder = json.JSONDecoder()
    found = []
    start = output.find(marker)
    while start != -1:
        value, end = decoder.raw_decode(output, start + len(marker))
        found.append(value)
        start = output.find(marker, end)
    assert count is None or len(found) == count, output[-4000:]
    return sorted(found, key=lambda result: result["rank"])


def run_bounded(command: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, str]:
    """Run a launcher process; past ``timeout`` stop it (and so its workers) and fail."""
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.terminate()  # torchrun stops its workers on SIGTERM (30 s grace)
        try:
            out, err = process.communicate(timeout=deadline(45))
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
        message = f"{command} ran past {timeout} s:\n{out[-3000:]}\n{err[-3000:]}"
        raise AssertionError(message) from None
    return process.returncode, out, err


def torchrun(script: str, *args: str, nproc: int = 2, limit_s: float = 120) -> str:
    """Run a worker script under the real torchrun; what its workers printed.

    The port is a free one (torchrun's default, 29500, may be another job's), with the
    next one free too: JAX's coordinator takes it under torchrun.
    """
    status, out, err = run_bounded(
        [str(TORCHRUN), f"--nproc_per_node={nproc}", f"--master_port={free_port_pair()}",
         str(SCRIPTS / script), *args],
        env=worker_env(OMP_NUM_THREADS="1"), timeout=deadline(limit_s),
    )  # fmt: skip
    assert status == 0, out[-4000:] + err[-4000:]
    return out


def launch(
    *argv: str, limit_s: float = 120, out: io.StringIO | None = None
) -> tuple[int, str, str]:
    """``torch2jax-device run ARGV``, called in this process: exit status, stdout, stderr.

    Past ``deadline(limit_s)`` a watchdog interrupts it as Ctrl-C would: the launcher stops its
    workers and returns 130. ``out``: where stdout goes as it is relayed (another thread
    may read it meanwhile).
    """
    parser = argparse.ArgumentParser(prog="torch2jax-device")
    _run.add_parser(parser.add_subparsers(dest="command", required=True))
    # torchrun's 30 s grace before SIGKILL would make every stopped job slow to test.
    args = parser.parse_args(["run", "--grace-period", "3", *argv])
    out, err = out if out is not None else io.StringIO(), io.StringIO()
    # wall-clock: a watchdog against a hang, its limit scaled by deadline()
    watchdog = threading.Timer(deadline(limit_s), _thread.interrupt_main)
    watchdog.start()
    try:
        status: int = args.run(args, out, err)
    finally:
        watchdog.cancel()
    return status, out.getvalue(), err.getvalue()


def launch_in(cwd: Path, *argv: str, limit_s: float) -> tuple[int, str, str]:
    """``launch(ARGV)`` as a user's job starts: in ``cwd``, with exactly a worker's
    environment (``worker_env``, the repository importable), this process's restored after."""
    import pytest

    env = worker_env(OMP_NUM_THREADS="1", PYTHONPATH=str(SCRIPTS.parents[2]))
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        for name in set(os.environ) - set(env):
            patch.delenv(name)
        for name, value in env.items():
            patch.setenv(name, value)
        return launch(*argv, limit_s=limit_s)
