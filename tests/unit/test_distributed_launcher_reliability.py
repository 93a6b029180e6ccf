"""``torch2jax-device run`` never hangs and never shows a raw traceback: an output nobody
reads, a --master-addr that cannot work, a worker that cannot be forked, the grace period
before SIGKILL (a fake clock: nothing here waits on a real one)."""

from __future__ import annotations

import argparse
import errno
import io
import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.deadlines import deadline
from tests.support.distributed.launch import launch, worker_env
from torch2jax_device.cli import run as _run

# Floods its stdout from a thread; once it has written more than the launcher's stdout
# pipe holds (but less than all the buffers between it and the test), it says so through
# a FIFO (the test's event), and waits. The launcher is then stuck writing to its full
# stdout, or soon will be, while stopping: both must end.
FLOODER = """
import sys, threading, time
written, flooded = 0, threading.Event()
def flood():
    global written
    line = ("x" * 99 + "\\n").encode()
    while True:
        sys.stdout.buffer.write(line * 40)
        sys.stdout.buffer.flush()
        written += len(line) * 40
        if written > 96 * 1024:
            flooded.set()
threading.Thread(target=flood, daemon=True).start()
flooded.wait()
with open(sys.argv[1], "w") as ready:
    ready.write("flooded")
time.sleep(600)
"""


@pytest.mark.slow  # starts the launcher and a worker
def test_sigterm_stops_the_launcher_while_its_stdout_is_a_pipe_nobody_reads(
    tmp_path: Path,
) -> None:
    script, fifo = tmp_path / "flood.py", tmp_path / "ready"
    script.write_text(FLOODER)
    os.mkfifo(fifo)
    launcher = subprocess.Popen(
        [sys.executable, "-m", "torch2jax_device", "run", str(script), str(fifo)],
        env=worker_env(),
        stdout=subprocess.PIPE,  # never read
        stderr=subprocess.DEVNULL,
    )
    try:
        with open(fifo) as ready:  # 96 KiB written: more than the launcher's stdout holds
            assert ready.read() == "flooded"
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=deadline(120)) == 128 + signal.SIGTERM
    finally:
        launcher.kill()
        launcher.wait()
        assert launcher.stdout is not None
        launcher.stdout.close()


@pytest.mark.slow  # before the check, the launcher started workers that waited forever
@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("256.1.1.1", "--master-addr='256.1.1.1' names no address"),
        ("no-such-host.invalid", "names no address"),
        ("192.0.2.1", "is not an address of this host"),  # TEST-NET-1: nobody's
    ],
)
def test_a_master_addr_that_cannot_work_is_refused_before_any_worker_starts(
    tmp_path: Path, address: str, problem: str
) -> None:
    # A launcher process of its own, killed past the deadline: before the check it hung
    # inside torch's store (C++, where no Python signal handler runs), so a launch in this
    # process would hang the test run instead of failing this test.
    script = tmp_path / "worker.py"
    script.write_text("raise SystemExit('a worker started')\n")
    command = [sys.executable, "-m", "torch2jax_device", "run", "--master-addr", address]
    try:
        result = subprocess.run(
            [*command, str(script)], env=worker_env(), capture_output=True, text=True,
            timeout=deadline(60),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"the launcher with --master-addr {address} still ran after the deadline")
    assert result.returncode == 2 and problem in result.stderr
    assert "a worker started" not in result.stderr + result.stdout


@pytest.mark.slow  # the first worker really starts (and is stopped)
@pytest.mark.parametrize(
    ("error", "fix"),
    [
        (BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable"), "processes"),
        (OSError(errno.EMFILE, "Too many open files"), "open files (ulimit -n: each worker"),
    ],
    ids=["out-of-processes", "out-of-files"],
)
def test_a_worker_that_cannot_be_forked_is_the_launchers_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: OSError, fix: str
) -> None:
    script = tmp_path / "worker.py"
    script.write_text("import time\ntime.sleep(600)\n")
    started = []
    popen = subprocess.Popen

    def fork_once(*args: object, **kwargs: object) -> object:
        if started:
            raise error
        started.append(popen(*args, **kwargs))  # type: ignore[call-overload]
        return started[-1]

    monkeypatch.setattr(_run.subprocess, "Popen", fork_once)
    status, _, err = launch("--nproc-per-node", "2", str(script), limit_s=120)
    assert status == 1 and "Traceback" not in err
    assert f"could not start rank 1 ({type(error).__name__}: {error.strerror})" in err
    assert "Fix: free processes or memory (ulimit -u" in err if fix == "processes" else fix in err
    assert started[0].poll() is not None  # the rank that did start was stopped


class _FakeWorker:
    def __init__(self) -> None:
        self.rank, self.signals = 0, []  # type: ignore[var-annotated]

    def running(self) -> bool:
        return signal.SIGKILL not in self.signals

    def signal_group(self, signum: int) -> None:
        self.signals.append(signum)


class _FakeRelay:
    """Pumping advances the fake clock by the time it is given."""

    def __init__(self) -> None:
        self.now = 0.0
        self.stopping = False

    def unblock(self) -> None:
        pass

    def clock(self) -> float:
        return self.now

    def pump(self, timeout_s: float) -> None:
        self.now += timeout_s

    def open(self) -> bool:
        return False

    def close(self) -> None:
        pass


@pytest.mark.parametrize("grace_s", [0.0, 3.0, 30.0])
def test_sigkill_follows_a_forwarded_signal_after_the_grace_period(grace_s: float) -> None:
    relay = _FakeRelay()
    job = _run._Job(relay, grace_s=grace_s, clock=relay.clock)  # type: ignore[arg-type]
    worker = _FakeWorker()
    job.workers.append(worker)  # type: ignore[arg-type]
    job.on_signal(signal.SIGINT)  # ctrl-C: forwarded at once
    assert worker.signals == [signal.SIGINT] and relay.now == 0.0
    job.stop()
    assert worker.signals == [signal.SIGINT, signal.SIGKILL]
    assert grace_s <= relay.now < grace_s + 2 * _run._POLL_S  # killed once the grace ran out


def test_the_grace_period_defaults_to_torchruns() -> None:
    parser = argparse.ArgumentParser()
    _run.add_parser(parser.add_subparsers(dest="command"))
    assert parser.parse_args(["run", "x.py"]).grace_period == 30.0
    assert parser.parse_args(["run", "--grace-period", "0.5", "x.py"]).grace_period == 0.5
    for bad in ("-1", "inf", "soon"):
        with pytest.raises(SystemExit):
            parser.parse_args(["run", "--grace-period", bad, "x.py"])


def test_torchs_store_port_is_held_while_the_workers_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The launcher probed a free port, let it go, started its workers and only then
    # hosted torch's store there: a job starting meanwhile (two test groups side by side)
    # could probe the same port, and the two jobs' workers met in one store (gloo:
    # "Connection closed by peer", seen in a full run beside other jobs). Now the port is
    # held from its choice on; the store takes over the listening socket.
    pytest.importorskip("torch")  # the launcher hosts torch's store only where torch is
    seen: list[tuple[bool, bool]] = []

    def start(job: object, args: argparse.Namespace, port: int, agent_store: bool) -> None:
        seen.append((agent_store, _run._is_free(port)))
        raise _run._LaunchError("stopped by the test")

    monkeypatch.setattr(_run._Job, "start", start)
    parser = argparse.ArgumentParser()
    _run.add_parser(parser.add_subparsers(dest="command"))
    script = tmp_path / "job.py"
    script.write_text("")
    _run.run(
        parser.parse_args(["run", "--nproc-per-node", "2", str(script)]),
        io.StringIO(),
        io.StringIO(),
    )
    assert seen == [(True, False)]  # torch is installed: its store's port, not free to others


def test_torchs_store_takes_over_the_held_port() -> None:
    from datetime import timedelta

    TCPStore = pytest.importorskip("torch.distributed").TCPStore

    held = _run._reserved_ports()
    port = held.getsockname()[1]
    try:
        store: Any = _run._host_store(argparse.Namespace(master_addr="127.0.0.1"), port, held)
        client = TCPStore("127.0.0.1", port, None, False, timedelta(seconds=deadline(30)))
        client.set("rank", "1")
        assert store.get("rank") == b"1"
        del client, store
    finally:
        held.close()
    assert _run._is_free(port)  # nothing left listening once the job is over


def test_lines_of_ranks_writing_large_blocks_are_relayed_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A held line is shown after its rank pauses this long: long here, so a slow thread
    # switch on a loaded machine never counts as a pause (every write ends a line).
    monkeypatch.setattr(_run, "_REST_S", 30.0)
    out, err = io.StringIO(), io.StringIO()
    relay = _run._Relay(out, err)
    pipes = [os.pipe() for _ in range(2)]
    for rank, (read_end, _) in enumerate(pipes):
        relay.add(rank, os.fdopen(read_end, "rb"), None)
    line = b"x" * 99 + b"\n"  # 65,536 is no multiple of 100: every full chunk breaks a line

    def write_blocks(descriptor: int) -> None:
        for _ in range(4):
            os.write(descriptor, line * 3000)  # 300 KB in one write, as a large print
        os.close(descriptor)

    writers = [threading.Thread(target=write_blocks, args=(w,)) for _, w in pipes]
    for writer in writers:
        writer.start()
    while relay.open():  # ends when both writers closed their pipes
        relay.pump(5)
    for writer in writers:
        writer.join()
    lines = out.getvalue().splitlines()
    whole = {f"[rank{rank}]: " + "x" * 99 for rank in range(2)}
    assert [text for text in lines if text not in whole] == []
    assert len(lines) == 2 * 4 * 3000


@given(
    lines=st.lists(
        st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b"")),
        max_size=200,
    ),
    cuts=st.lists(st.integers(0, 400), max_size=8),
    encoding=st.sampled_from(["utf-8", "latin-1", "ascii"]),
)
def test_workers_bytes_are_relayed_byte_for_byte(
    lines: list[bytes], cuts: list[int], encoding: str
) -> None:
    # torchrun's workers write to the inherited descriptors: bytes that are not UTF-8 (a
    # latin-1 locale, binary output) reach the terminal as written. The relay decoded them
    # with errors="replace": each became U+FFFD's three bytes (audit A8, item 8). Chunks
    # are cut anywhere, inside a UTF-8 sequence too; the sink's own encoding plays no part.
    data = b"".join(line + b"\n" for line in lines)
    sink = io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors="strict")
    relay = _run._Relay(sink, sink)
    read_end, write_end = os.pipe()
    relay.add(0, os.fdopen(read_end, "rb"), None)
    with os.fdopen(write_end, "wb", buffering=0) as pipe:
        for start, end in itertools.pairwise(
            [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
        ):
            pipe.write(data[start:end])
    while relay.open():
        relay.pump(5)
    sink.flush()
    assert sink.buffer.getvalue() == b"".join(b"[rank0]: " + line + b"\n" for line in lines)


class _Silence:
    """A fake dial and clock: connections fail with ``error`` (a timeout costs its wait)."""

    def __init__(self, error: OSError | None) -> None:
        self.error, self.now = error, 0.0

    def dial(self, address: tuple[str, int], timeout: float) -> socket.socket:
        if self.error is None:
            return socket.socket()  # accepted (the launcher closes it at once)
        if self.error.errno is None:
            self.now += timeout
        raise self.error

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize(
    "error",
    [TimeoutError("timed out"), OSError(errno.ENETUNREACH, os.strerror(errno.ENETUNREACH))],
    ids=["timeout", "no-route"],
)
def test_a_node_whose_master_host_answers_nothing_starts_no_worker(error: OSError) -> None:
    # Before: the launcher on node 1 started its workers, which waited for the whole init
    # timeout (issue 36: "a remote rank waits for an unreachable --master-addr").
    network = _Silence(error)
    problem = _run._answered_by_master(
        "10.9.8.7", 29500, {"TORCH2JAX_DEVICE_RENDEZVOUS_TIMEOUT": "20"},
        dial=network.dial, clock=lambda: network.now, sleep=network.sleep,
    )  # fmt: skip
    assert problem is not None and problem.startswith(
        "this host (--node-rank > 0) could not reach 10.9.8.7 on port 29500: for 2"
    )
    assert "TORCH2JAX_DEVICE_RENDEZVOUS_TIMEOUT to the seconds to wait (now 20)" in problem
    assert 20 <= network.now < 22


@pytest.mark.parametrize(
    "error", [None, ConnectionRefusedError(errno.ECONNREFUSED, "refused")], ids=str
)
def test_a_node_whose_master_host_answers_starts_its_workers_at_once(
    error: OSError | None,
) -> None:
    # Accepted, or refused (rank 0's launcher is not up yet): the host is there.
    network = _Silence(error)
    problem = _run._answered_by_master(
        "10.9.8.7", 29500, {}, dial=network.dial, clock=lambda: network.now, sleep=network.sleep
    )
    assert problem is None and network.now == 0.0


@pytest.mark.slow  # starts the launcher (it stops before any worker)
def test_a_bad_rendezvous_timeout_stops_a_node_before_any_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "worker.py"
    script.write_text("raise SystemExit('a worker started')\n")
    monkeypatch.setenv("TORCH2JAX_DEVICE_RENDEZVOUS_TIMEOUT", "soon")
    status, out, err = launch(
        "--nnodes", "2", "--node-rank", "1", "--master-port", "29500", str(script), limit_s=60
    )
    assert status == 2 and "TORCH2JAX_DEVICE_RENDEZVOUS_TIMEOUT='soon' is not a number" in err
    assert "a worker started" not in err + out
