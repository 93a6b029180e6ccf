"""``torch2jax-device run`` cleans up after itself, as torchrun's agent does.

Real launchers on 127.0.0.1 with workers that print their pids: a signal to the
launcher stops every worker, a second one kills them at once, a SIGKILLed launcher takes
its workers with it (Linux), a grandchild holding the output open does not hold the
launcher, output streams as it comes in bounded chunks, and the port is checked. Every
wait is bounded; a worker counts as gone when ``os.kill(pid, 0)`` fails or it is a
zombie nobody reaped yet. Each ``torch2jax-device run`` is a process of its own, forked
from a server that made the launcher's imports once (``forking.py``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.support.deadlines import MARK, DeadlineHit, deadline
from tests.support.distributed.launch import SCRIPTS, TORCHRUN, free_port, launch, worker_env
from tests.support.forking import Forked, ForkServer
from tests.support.optional_frameworks import needs
from torch2jax_device.cli import run as _run

WORKER = str(Path(__file__).resolve().parents[1] / "support/distributed/signal_worker.py")
TORCHRUN_COMMAND = [str(TORCHRUN), "--nproc_per_node=2"]
TJ_COMMAND = [sys.executable, "-m", "torch2jax_device", "run", "--nproc-per-node", "2"]
# Launcher start-up (importing JAX, or torch for torchrun) under load, with room to spare.
START_S = 90  # for a launcher to start; read_until and launch grow it with deadline()


@pytest.fixture(scope="module")
def launchers() -> Iterator[ForkServer]:
    """Starts ``python -m torch2jax_device run`` processes, forked after the imports the
    launcher makes (torch2jax_device, and torch for the store it hosts where torch is
    installed: the launcher needs no torch)."""
    torch = ("torch.distributed",) if importlib.util.find_spec("torch") is not None else ()
    server = ForkServer(worker_env(), ("torch2jax_device.cli", *torch), SCRIPTS)
    yield server
    server.close()


class _Launched:
    """A launcher process whose stdout and stderr this test reads as they come."""

    def __init__(self, process: subprocess.Popen[bytes] | Forked, out: IO[bytes], err: IO[bytes]):
        self.process = process
        self.out, self.err = bytearray(), bytearray()
        self._selector = selectors.DefaultSelector()
        for pipe, buffer in ((out, self.out), (err, self.err)):
            os.set_blocking(pipe.fileno(), False)
            self._selector.register(pipe, selectors.EVENT_READ, buffer)

    @classmethod
    def tj(cls, launchers: ForkServer, folder: Path, *args: str) -> _Launched:
        """``python -m torch2jax_device run ARGS``, its output read through two FIFOs."""
        fifos = [folder / "launcher-out", folder / "launcher-err"]
        pipes = []
        for fifo in fifos:
            os.mkfifo(fifo)
            pipes.append(os.fdopen(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK), "rb", 0))
        process = launchers.start_module(
            "torch2jax_device", "run", *args, env=worker_env(), stdout=fifos[0], stderr=fifos[1]
        )
        return cls(process, *pipes)

    @classmethod
    def started(cls, *command: str) -> _Launched:
        """``command`` started as a user starts it, in a fresh interpreter."""
        process = subprocess.Popen(
            command, env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert process.stdout is not None and process.stderr is not None
        return cls(process, process.stdout, process.stderr)

    def read_until(self, done: Callable[[], bool], limit_s: float, what: str) -> None:
        limit = deadline(limit_s)
        until = time.monotonic() + limit
        while not done():
            if time.monotonic() > until:
                self.kill()
                raise DeadlineHit(f"{MARK}: no {what} within {limit:.0f} s:\n{self.text()}")
            self._read(0.05)

    def pids(self, count: int) -> list[int]:
        """The pids the workers printed, once ``count`` of them have."""
        found: list[int] = []

        def printed() -> bool:
            found[:] = [int(pid) for pid in re.findall(rb"PID \d+ (\d+)", bytes(self.out))]
            return len(found) == count

        self.read_until(printed, START_S, f"{count} worker pids")
        return found

    def finish(self, limit_s: float) -> int:
        """The launcher's exit status, reading its output meanwhile; fails past ``limit_s``."""
        self.read_until(lambda: self.process.poll() is not None, limit_s, "launcher exit")
        self._read(0.2)
        self._close()
        return self.process.returncode

    def kill(self) -> None:
        self.process.kill()
        assert self.process.wait(timeout=deadline(30)) is not None
        self._close()

    def _close(self) -> None:
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()

    def text(self) -> str:
        return (self.out + b"\n--- stderr ---\n" + self.err).decode(errors="replace")[-4000:]

    def _read(self, timeout_s: float) -> None:
        for key, _ in self._selector.select(timeout_s):
            with contextlib.suppress(BlockingIOError):
                key.data.extend(os.read(key.fd, 65536))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc: os.kill said it exists
    return state != "Z"


def _still_alive(pids: list[int], limit_s: float) -> list[int]:
    """The pids still running after at most ``deadline(limit_s)``."""
    until = time.monotonic() + deadline(limit_s)
    while any(_alive(pid) for pid in pids) and time.monotonic() < until:
        time.sleep(0.05)
    return [pid for pid in pids if _alive(pid)]


def _unprefixed_tracebacks(stderr: bytes) -> list[str]:
    """Tracebacks the launcher itself printed (a worker's come as ``[rankN]: Traceback``)."""
    return [line for line in stderr.decode().splitlines() if line.startswith("Traceback")]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_to_the_launcher_stops_every_worker(
    signum: signal.Signals, launchers: ForkServer, tmp_path: Path
) -> None:
    """Forwarded to both; rank 1 ignores it, so SIGKILL follows after the grace period.

    SIGTERM goes to a launcher started as users start it: it comes while the launcher
    imports torch for the store it hosts. The others go to forked launchers."""
    if signum == signal.SIGTERM:
        job = _Launched.started(*TJ_COMMAND, "--grace-period", "3", WORKER, "one-stubborn")
    else:
        job = _Launched.tj(
            launchers,
            tmp_path,
            "--nproc-per-node",
            "2",
            "--grace-period",
            "3",
            WORKER,
            "one-stubborn",
        )
    pids = job.pids(2)
    job.process.send_signal(signum)
    assert job.finish(limit_s=30) == 128 + signum
    assert _still_alive(pids, 10) == []
    err = job.err.decode()
    assert f"interrupted by {signum.name}; stopped every process (forwarded {signum.name}" in err
    assert _unprefixed_tracebacks(job.err) == []


def test_a_second_signal_kills_every_worker_at_once_without_a_traceback(
    launchers: ForkServer, tmp_path: Path
) -> None:
    job = _Launched.tj(launchers, tmp_path, "--nproc-per-node", "2", WORKER, "stubborn")
    pids = job.pids(2)
    job.process.send_signal(signal.SIGINT)
    time.sleep(0.3)  # wall-clock: a pause between two signals; any pause gives the same end
    job.process.send_signal(signal.SIGINT)
    job.process.send_signal(signal.SIGINT)
    assert job.finish(limit_s=30) == 130
    assert _still_alive(pids, 10) == []
    assert "a second signal killed them (SIGKILL)" in job.err.decode()
    assert _unprefixed_tracebacks(job.err) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_die_with_a_sigkilled_launcher(launchers: ForkServer, tmp_path: Path) -> None:
    job = _Launched.tj(launchers, tmp_path, "--nproc-per-node", "2", WORKER, "stubborn")
    pids = job.pids(2)
    job.kill()
    assert _still_alive(pids, 15) == []


def test_sigterm_to_torchrun_stops_both_workers_too() -> None:
    """torchrun, the oracle, does what the tj tests above pin: SIGTERM ends both workers.

    ``benchmarks/bench_distributed.py stop`` times both launchers.
    """
    needs("torch")  # torchrun is torch's command
    port = f"--master_port={free_port()}"  # torchrun's default, 29500, may be taken
    job = _Launched.started(*TORCHRUN_COMMAND, port, WORKER, "sleep")
    pids = job.pids(2)
    job.process.send_signal(signal.SIGTERM)
    assert job.finish(limit_s=60) != 0
    assert _still_alive(pids, 10) == []


def test_a_grandchild_holding_the_output_open_does_not_hold_the_launcher() -> None:
    status, out, _ = launch("--nproc-per-node", "1", WORKER, "grandchild", limit_s=60)
    grandchild = int(re.findall(r"GRANDCHILD (\d+)", out)[0])
    try:
        assert status == 0
        assert _alive(grandchild)  # it holds the pipes for an hour: the launcher did not wait
    finally:
        os.kill(grandchild, signal.SIGKILL)


def test_partial_lines_and_progress_bars_are_relayed_at_once(tmp_path: Path) -> None:
    """The launcher, called in this process (the tests above read a launcher process's
    output as it comes), shows a partial line before the worker ends it: the worker ends
    it only once this test has seen it."""
    flag, out, seen = tmp_path / "go", io.StringIO(), threading.Event()

    def release_the_worker_once_shown() -> None:
        until = time.monotonic() + deadline(START_S)
        while time.monotonic() < until and not seen.is_set():
            if "progress 50%" in out.getvalue():
                seen.set()
            time.sleep(0.02)  # wall-clock: how often it looks; the limit is deadline()
        flag.touch()

    watcher = threading.Thread(target=release_the_worker_once_shown, daemon=True)
    watcher.start()
    status, _, err = launch(
        "--nproc-per-node", "1", WORKER, "progress", str(flag), limit_s=START_S, out=out
    )  # fmt: skip
    watcher.join()
    assert seen.is_set(), f"no partial line within {START_S} s:\n{out.getvalue()}\n{err}"
    assert status == 0, err[-3000:]
    relayed = out.getvalue().split("\n", 1)[1]  # after the PID line
    assert relayed == "\r[rank0]: progress 50%\r[rank0]: progress 100%\n"


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_64_mib_line_is_relayed_in_bounded_memory(launchers: ForkServer, tmp_path: Path) -> None:
    flag = tmp_path / "go"
    job = _Launched.tj(launchers, tmp_path, "--nproc-per-node", "1", WORKER, "long-line", str(flag))
    job.read_until(lambda: b"READY" in job.out, START_S, "READY")
    before = _peak_rss_kib(job.process.pid)
    flag.touch()
    peak = before
    until = time.monotonic() + deadline(120)
    while not job.out.endswith(b"x\n") and time.monotonic() < until:
        job._read(0.05)
        peak = max(peak, _peak_rss_kib(job.process.pid))
        del job.out[: max(len(job.out) - 16, 0)]  # keep only the tail
    assert job.finish(limit_s=30) == 0
    assert (peak - before) < 24 * 1024, f"the launcher grew by {(peak - before) // 1024} MiB"


def test_relay_prefixes_each_line_start_and_keeps_ranks_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_run, "_REST_S", 30.0)  # no pause counts: "a" waits for its line
    out, err = io.StringIO(), io.StringIO()
    relay = _run._Relay(out, err)
    pipes = [os.pipe() for _ in range(2)]
    for rank, (read_end, _) in enumerate(pipes):
        relay.add(rank, os.fdopen(read_end, "rb"), None)
    for rank, chunk in [
        (0, b"a"), (1, b"b\n"), (0, b"c\r"), (0, b"\nd\r\n\n"), (0, b"\xc3"), (0, b"\xa9\re"),
    ]:  # fmt: skip
        os.write(pipes[rank][1], chunk)
        relay.pump(5)
    for _, write_end in pipes:
        os.close(write_end)
    until = time.monotonic() + deadline(10)
    while relay.open() and time.monotonic() < until:
        relay.pump(0.1)
    relay.close()
    # rank 0's unfinished "a" waits for its line's end (rank 1's line goes first);
    # \r\n split over two chunks ends a line once; an empty line keeps its prefix; a
    # character split over two chunks arrives whole; the last, unfinished line gets its
    # newline at the end.
    assert out.getvalue() == (
        "[rank1]: b\n[rank0]: ac\r\n[rank0]: d\r\n[rank0]: \n[rank0]: é\r[rank0]: e\n"
    )
    assert err.getvalue() == ""


def test_master_port_leaves_room_for_jaxs_coordinator(capsys: pytest.CaptureFixture[str]) -> None:
    for port in ("65535", "65536", "0"):
        with pytest.raises(SystemExit):
            launch("--master-port", port, WORKER, "sleep")
        assert "pass a port from 1 to 65534" in capsys.readouterr().err
    assert _run._port("65534") == 65534
