"""``torch2jax-device run``: torchrun's job for scripts that have no torch.

``torch2jax-device run --nproc-per-node N script.py [args]`` starts N copies of the
script with the environment torchrun gives its workers (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``, ``TORCHELASTIC_RUN_ID`` and the rest: ``torchrun_compat``), so
``tj.distributed.init_process_group()`` works the same under either launcher. Where
torch is installed, it also does what torchrun's agent does: it hosts torch's rendezvous
store at ``MASTER_PORT`` itself and tells the workers so
(``TORCHELASTIC_USE_AGENT_STORE=True``), so ``torch.distributed`` in the workers never
depends on rank 0 outliving the others (when rank 0 hosts the store, gloo jobs abort
now and then at exit), and JAX's coordinator takes ``MASTER_PORT + 1``. Several hosts:
run it on each with the same ``--nnodes``, ``--master-addr`` (the host of rank 0) and
``--master-port``, and a distinct ``--node-rank``.

Like torchrun's agent, it cleans up after itself:

* Output is relayed as it comes, line by line (an unfinished line waits until it ends,
  its rank pauses 0.1 s or it reaches 1 MiB, so lines of ranks writing large blocks
  arrive whole; reads are at most 64 KiB): ``\r`` progress bars show at once, and
  ``[rankN]:`` starts each line (and each ``\r`` redraw). Relaying stops a second after
  the last worker exits, even when a process the worker started still holds its output
  open.
* When a worker fails, the others are stopped (SIGTERM, SIGKILL after ``--grace-period``
  seconds, 30 by default as torchrun: JAX's preemption handler catches SIGTERM) and the
  first failure's exit code is returned.
* SIGINT (ctrl-C), SIGTERM and SIGHUP are forwarded to every worker's process group,
  SIGKILL follows ``--grace-period`` seconds later, and the launcher exits with 128 + the
  signal's number; a second signal kills the workers at once. Nothing waits without a
  deadline: a signal that comes while the launcher is stuck writing to an output nobody
  reads (a full pipe) abandons that output (it goes to /dev/null from then on).
* On Linux each worker dies (SIGKILL) when the launcher dies, even by SIGKILL
  (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import datetime
import errno
import importlib.util
import io
import os
import re
import select
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import IO, Any, TextIO

from . import torchrun_compat

__all__ = ["add_parser", "plan", "run", "script_command"]

_POLL_S = 0.05
# How long stopped workers get between SIGTERM (or the signal forwarded) and SIGKILL by
# default: torchrun's agent waits 30 s (its SubprocessHandler's close timeout).
_GRACE_S = 30.0
# How long the kernel gets to end SIGKILLed workers before the launcher stops waiting.
_KILL_WAIT_S = 5.0
# While stopping, how often a write to the launcher's output is checked for a reader.
_STUCK_S = 1.0
# How long output is still relayed after the last worker exited.
_DRAIN_S = 1.0
# The most bytes read from a worker's pipe at once: a long line never fills memory.
_CHUNK = 64 * 1024
# An unfinished line is held back until it ends, or its rank writes nothing for this
# long, or it grows past _LINE_HOLD bytes: ranks' lines are relayed whole.
_REST_S = 0.1
_LINE_HOLD = 16 * _CHUNK
# The signals forwarded to every worker, as torchrun's agent does.
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Run by each worker before its script (Linux): PR_SET_PDEATHSIG (1) to SIGKILL (9),
# unless the launcher (argv[1]) already died, then exec the script (argv[2:]).
_DIE_WITH_LAUNCHER = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    os._exit(1)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)
# A line ends at \n (or \r\n); a \r redraws it.
_BREAKS = re.compile(r"(\r\n|\r|\n)")
_SIGNAL_NUMBERS = frozenset(int(number) for number in signal.Signals)
# How long torch's store waits for a worker, as torchrun's default rendezvous timeout.
_STORE_TIMEOUT = datetime.timedelta(minutes=15)


def add_parser(commands: Any) -> None:
    """Register ``run`` on the command line's subcommands."""
    parser = commands.add_parser(
        "run",
        help="launch a multi-process job like torchrun (no torch needed)",
        description=(
            "Start --nproc-per-node copies of a Python script with torchrun's environment "
            "(RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), "
            "relay their output, stop all of them when one fails and exit with its code."
        ),
    )
    parser.add_argument(
        "--nproc-per-node",
        "--nproc_per_node",
        dest="nproc_per_node",
        type=torchrun_compat.from_environment(torchrun_compat.nproc_per_node),
        default=torchrun_compat.environment_default("nproc_per_node", 1),
        help="processes on this host, usually one per GPU (default 1)",
    )
    parser.add_argument(
        "--nnodes",
        type=torchrun_compat.from_environment(torchrun_compat.nnodes),
        default=torchrun_compat.environment_default("nnodes", 1),
        help="hosts in the job (default 1; torchrun's N:N too)",
    )
    parser.add_argument(
        "--node-rank",
        "--node_rank",
        dest="node_rank",
        type=torchrun_compat.from_environment(_non_negative_int),
        default=torchrun_compat.environment_default("node_rank"),
        help="this host's index, 0 to nnodes-1 (default 0)",
    )
    parser.add_argument(
        "--master-addr",
        "--master_addr",
        dest="master_addr",
        default=torchrun_compat.environment_default("master_addr", "127.0.0.1"),
        help="address of the host that runs rank 0 (default 127.0.0.1)",
    )
    parser.add_argument(
        "--master-port",
        "--master_port",
        dest="master_port",
        type=torchrun_compat.from_environment(_port),
        default=torchrun_compat.environment_default("master_port"),
        help="the job's rendezvous port on that host: torch's store where torch is "
        "installed (JAX's coordinator then takes PORT+1), else JAX's coordinator; 1 to 65534 "
        "(default: a free port; required with --nnodes > 1)",
    )
    parser.add_argument(
        "--grace-period",
        "--grace_period",
        dest="grace_period",
        type=_seconds,
        default=_GRACE_S,
        metavar="SECONDS",
        help="how long workers get to exit after a signal is forwarded to them (or SIGTERM "
        f"when another failed) before SIGKILL; default {_GRACE_S:g}, as torchrun",
    )
    parser.add_argument(
        "--cpu-devices",
        dest="cpu_devices",
        type=_positive_int,
        default=None,
        metavar="N",
        help="simulate the job on the CPU: JAX_PLATFORMS=cpu and N CPU devices per process",
    )
    parser.add_argument(
        "--standalone",
        action="store_true",
        default=torchrun_compat.environment_default("standalone", False, flag=True),
        help="torchrun's one-host rendezvous on a free port: what run does without "
        "--nnodes (accepted so torchrun command lines run unchanged)",
    )
    parser.add_argument(
        "-m",
        "--module",
        action="store_true",
        default=torchrun_compat.environment_default("module", False, flag=True),
        help="run SCRIPT as a module (python -m SCRIPT), as torchrun -m",
    )
    torchrun_compat.add_torchrun_options(parser)
    parser.add_argument(
        "script", help="the Python script each process runs (a module name with -m)"
    )
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run the job; return 0, the exit code of the first worker that failed, or 128 +
    the number of the signal that stopped it."""
    problem = plan(args)
    if problem is None and args.node_rank != 0:
        problem = _answered_by_master(args.master_addr, args.master_port, os.environ)
    if problem:
        err.write(f"torch2jax-device run: {problem}\n")
        return 2
    agent_store = importlib.util.find_spec("torch") is not None
    # torch's store port is held from the moment it is chosen: a port probed and let go
    # could be taken by another job starting meanwhile (its workers would then meet ours
    # in one store). JAX's coordinator binds its own port, so that one is only probed.
    reserved = None
    if args.master_port is not None:
        port = args.master_port
    elif agent_store:
        reserved = _reserved_ports()
        port = reserved.getsockname()[1]
    else:
        port = _free_port()
    job = _Job(_Relay(out, err), grace_s=args.grace_period)
    launch_error = None
    stores: list[object] = []  # open until the workers are done
    with _forwarding_signals(job):
        try:
            job.start(args, port, agent_store)
            # Started after the workers, which wait for it: importing torch here costs
            # them nothing.
            if agent_store and args.node_rank == 0 and not job.signals:
                stores.append(_host_store(args, port, reserved))
            job.wait()
        except _LaunchError as error:
            launch_error = error
        finally:
            job.stop()
            stores.clear()
            if reserved is not None:
                reserved.close()
    return job.report(err, launch_error)


class _LaunchError(Exception):
    """A worker could not be started, or torch's rendezvous store hosted (the message
    says why and the fix)."""


class _Worker:
    """One child process, the leader of its own process group."""

    def __init__(self, rank: int, process: subprocess.Popen[bytes]) -> None:
        self.rank = rank
        self.process = process

    def running(self) -> bool:
        return self.process.poll() is None

    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # exited in the meantime
            os.killpg(self.process.pid, signum)

    @property
    def exit_status(self) -> int:
        """The exit code, or 128 + the signal number for a signalled process (as shells do)."""
        code = self.process.returncode
        return 128 - code if code < 0 else code

    def describe(self) -> str:
        code = self.process.returncode
        how = f"exit code {code}"
        if code < 0:
            how = f"signal {signal.Signals(-code).name}" if -code in _SIGNAL_NUMBERS else how
        message = (
            f"torch2jax-device run: rank {self.rank} (pid {self.process.pid}) failed with "
            f"{how}; stopped the others."
        )
        if code == -signal.SIGABRT:
            message += (
                " JAX's distributed runtime aborts a process when another one dies or does "
                "not join within the timeout: the first error printed above is the cause."
            )
        return message


class _Job:
    """The workers of this host, what stopped them, and their output."""

    def __init__(
        self,
        relay: _Relay,
        *,
        grace_s: float = _GRACE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.relay = relay
        self.grace_s, self._clock = grace_s, clock
        self.workers: list[_Worker] = []
        self.signals: list[int] = []  # received, in order
        self.failure: _Worker | None = None
        self._kill_deadline: float | None = None  # when SIGKILL follows the first stop
        self._unstopped: list[_Worker] = []  # still running after SIGKILL and the wait

    def start(self, args: argparse.Namespace, port: int, agent_store: bool) -> None:
        """Start this host's workers; none after a signal arrived."""
        job_id = torchrun_compat.run_id(args)
        for local_rank in range(args.nproc_per_node):
            if self.signals:
                return
            try:
                worker = _start(args, local_rank, port, agent_store, job_id)
            except OSError as error:  # fork, exec or a pipe failed: out of processes or files
                rank = args.node_rank * args.nproc_per_node + local_rank
                fix = (
                    "raise the limit on open files (ulimit -n: each worker holds 2 pipes to "
                    "the launcher)"
                    if error.errno in (errno.EMFILE, errno.ENFILE)
                    else "free processes or memory (ulimit -u, RLIMIT_NPROC, a container's "
                    "pids limit)"
                )
                raise _LaunchError(
                    f"could not start rank {rank} ({type(error).__name__}: "
                    f"{error.strerror or error}); stopped every process started before it. "
                    f"Fix: {fix} or pass a smaller --nproc-per-node."
                ) from None
            self.workers.append(worker)
            self.relay.add(worker.rank, worker.process.stdout, worker.process.stderr)
            if self.signals:  # it came while this worker started: it gets it too
                worker.signal_group(self.signals[0])

    def on_signal(self, signum: int, frame: FrameType | None = None) -> None:
        """The handler of SIGINT, SIGTERM and SIGHUP: forward the first, kill on the next."""
        self.signals.append(signum)
        if len(self.signals) == 1:
            self._stop_workers(signum)
        else:
            for worker in self.workers:
                worker.signal_group(signal.SIGKILL)
        self.relay.stopping = True
        self.relay.unblock()

    def wait(self) -> None:
        """Relay output until every worker exited, one failed, or a signal came."""
        while not self.signals:
            running = [worker.running() for worker in self.workers]  # polls each
            self.failure = next((w for w in self.workers if w.process.returncode), None)
            if self.failure is not None or not any(running):
                return
            self.relay.pump(_POLL_S)

    def stop(self) -> None:
        """Stop what still runs (SIGTERM, SIGKILL after the grace), then drain the output.

        Every wait is bounded: a worker SIGKILL cannot end (stuck in the kernel) is
        reported, not waited for.
        """
        if self._kill_deadline is None:
            self._stop_workers(signal.SIGTERM)
        assert self._kill_deadline is not None
        self._pump_while_running(self._kill_deadline)
        for worker in self.workers:
            if worker.running():
                worker.signal_group(signal.SIGKILL)
        self._pump_while_running(self._clock() + _KILL_WAIT_S)
        self._unstopped = [worker for worker in self.workers if worker.running()]
        deadline = self._clock() + _DRAIN_S
        while self.relay.open() and self._clock() < deadline:
            self.relay.pump(_POLL_S)
        self.relay.close()

    def report(self, err: TextIO, launch_error: _LaunchError | None) -> int:
        """Say what stopped the job, if anything did; return the launcher's exit status."""
        lines = [f"rank {worker.rank} (pid {worker.process.pid})" for worker in self._unstopped]
        if lines:
            self.relay.say(
                err,
                f"torch2jax-device run: {', '.join(lines)} still running after SIGKILL "
                f"and {_KILL_WAIT_S:g} s (stuck in the kernel?); not waiting for it.\n",
            )
        if self.signals:
            name = signal.Signals(self.signals[0]).name
            how = (
                "a second signal killed them (SIGKILL)"
                if len(self.signals) > 1
                else f"forwarded {name}, SIGKILL after {self.grace_s:g} s"
            )
            self.relay.say(
                err,
                f"torch2jax-device run: interrupted by {name}; stopped every process ({how}).\n",
            )
            return 128 + self.signals[0]
        if launch_error is not None:
            self.relay.say(err, f"torch2jax-device run: {launch_error}\n")
            return 1
        if self.failure is not None:
            self.relay.say(err, self.failure.describe() + "\n")
            return self.failure.exit_status
        return 0

    def _stop_workers(self, signum: int) -> None:
        self._kill_deadline = self._clock() + self.grace_s
        for worker in self.workers:
            if worker.running():
                worker.signal_group(signum)

    def _pump_while_running(self, deadline: float) -> None:
        while any(worker.running() for worker in self.workers) and self._clock() < deadline:
            self.relay.pump(_POLL_S)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def _forwarding_signals(job: _Job) -> Iterator[None]:
    """``job.on_signal`` handles SIGINT, SIGTERM and SIGHUP while the job runs.

    The handler never raises, so no signal interrupts the launcher with a traceback;
    outside the main thread (where Python runs no handlers) nothing changes.
    """
    if not _in_main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, job.on_signal) for signum in _FORWARDED}
    previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, lambda *_: job.relay.unblock())
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class _Stream:
    """One worker pipe being relayed, and where its output stands in its current line."""

    def __init__(self, pipe: IO[bytes], sink: TextIO, prefix: str) -> None:
        self.pipe, self.sink, self.prefix = pipe, sink, prefix
        # Bytes that are not UTF-8 are kept as surrogates, written back as the same bytes
        # (``_emit``): the workers' output is relayed byte for byte, as torchrun's is.
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
        self.at_line_start = True
        self.after_return = False  # a \r redraws the line: its text is still shown
        self.pending = b""  # the start of a line not yet ended, held back (_relay_lines)
        self.pending_since = 0.0

    def mid_line(self) -> bool:
        return not self.at_line_start or self.after_return


class _Abandoned(Exception):
    """Raised by the signal handler into a write blocked on an output nobody reads."""


class _Relay:
    """Workers' pipes, relayed as chunks arrive, with ``[rankN]:`` at each line start."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self._out, self._err = out, err
        self._writing: TextIO | None = None  # the sink a write is in progress to
        # Set once a signal came: from then on a write is checked every _STUCK_S (SIGALRM)
        # and abandoned if nobody reads its output, so stopping cannot hang on it.
        self.stopping = False
        self._selector = selectors.DefaultSelector()
        # Per sink, the stream whose line is unfinished there: another stream's output
        # starts on a new line, so every prefix stands at a line start.
        self._unfinished: dict[int, _Stream | None] = {}
        self._broken: set[int] = set()  # sinks that failed (a closed terminal or pipe)

    def add(self, rank: int, stdout: IO[bytes] | None, stderr: IO[bytes] | None) -> None:
        """Relay rank ``rank``'s two pipes (read ends) to the launcher's stdout and stderr."""
        prefix = f"[rank{rank}]: "
        for pipe, sink in ((stdout, self._out), (stderr, self._err)):
            if pipe is not None:
                os.set_blocking(pipe.fileno(), False)
                self._selector.register(pipe, selectors.EVENT_READ, _Stream(pipe, sink, prefix))

    def open(self) -> bool:
        return bool(self._selector.get_map())

    def pump(self, timeout_s: float) -> None:
        """Relay what is ready within ``timeout_s``: at most one chunk per pipe."""
        if not self.open():
            time.sleep(timeout_s)
            return
        streams = [key.data for key in self._selector.get_map().values()]
        if any(stream.pending for stream in streams):
            timeout_s = min(timeout_s, _REST_S)  # to show a paused rank's partial line
        for key, _ in self._selector.select(timeout_s):
            stream: _Stream = key.data
            try:
                chunk = os.read(stream.pipe.fileno(), _CHUNK)
            except BlockingIOError:
                continue
            if chunk:
                self._relay_lines(stream, chunk)
            else:
                self._finish(stream)
        now = time.monotonic()
        for key in list(self._selector.get_map().values()):
            stream = key.data
            if stream.pending and now - stream.pending_since >= _REST_S:
                self._write(stream, stream.decoder.decode(stream.pending))  # a real pause
                stream.pending = b""

    def _relay_lines(self, stream: _Stream, chunk: bytes) -> None:
        """Relay ``chunk``'s whole lines; keep an unfinished one until it ends, or its
        rank pauses (``_REST_S``), or it grows past ``_LINE_HOLD``.

        A read that ends mid-line is usually part of a larger write (a rank printing a
        large block, which the kernel passes on page by page): relaying it alone would
        let another rank's output land inside the line.
        """
        data = stream.pending + chunk
        cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        tail = data[cut:]
        if len(tail) > _LINE_HOLD:
            cut, tail = len(data), b""
        if tail and not stream.pending:
            stream.pending_since = time.monotonic()
        stream.pending = tail
        self._write(stream, stream.decoder.decode(data[:cut]))

    def close(self) -> None:
        """Stop relaying: what a process still holding a pipe writes later is dropped."""
        for key in list(self._selector.get_map().values()):
            self._finish(key.data)
        self._selector.close()

    def _finish(self, stream: _Stream) -> None:
        self._selector.unregister(stream.pipe)
        self._write(stream, stream.decoder.decode(stream.pending, final=True))
        stream.pending = b""
        if self._unfinished.get(id(stream.sink)) is stream:
            self._emit(stream.sink, "\n")
            self._unfinished[id(stream.sink)] = None
        stream.pipe.close()

    def _write(self, stream: _Stream, text: str) -> None:
        if not text:
            return
        sink = stream.sink
        other = self._unfinished.get(id(sink))
        parts = []
        if other is not None and other is not stream:
            parts.append("\n")
            other.at_line_start, other.after_return = True, False
        for index, piece in enumerate(_BREAKS.split(text)):
            if not piece:
                continue
            if index % 2 == 0:  # text
                if stream.at_line_start:
                    parts.append(stream.prefix)
                stream.at_line_start = stream.after_return = False
            elif piece == "\r":
                stream.at_line_start = stream.after_return = True
            else:  # a line ends; an empty line gets its prefix too
                if stream.at_line_start and not stream.after_return:
                    parts.append(stream.prefix)
                stream.at_line_start, stream.after_return = True, False
            parts.append(piece)
        self._unfinished[id(sink)] = stream if stream.mid_line() else None
        self._emit(sink, "".join(parts))

    def unblock(self) -> None:
        """Called by the signal handler: if the write in progress is blocked on a full
        pipe nobody reads, abandon it (raise into it), so the launcher can stop the job
        and exit; a write that can go on is left alone."""
        sink = self._writing
        if sink is None:
            return
        try:
            descriptor = sink.fileno()
            _, writable, _ = select.select([], [descriptor], [], 0)
        except (OSError, ValueError, io.UnsupportedOperation):
            return  # not a file (a StringIO): it cannot block
        if not writable:
            raise _Abandoned

    def say(self, sink: TextIO, text: str) -> None:
        """The launcher's own message, written as relayed output is (``_emit``)."""
        self._emit(sink, text)

    def _emit(self, sink: TextIO, text: str) -> None:
        if id(sink) in self._broken:
            return
        self._writing = sink
        watched = self.stopping and _in_main_thread()
        if watched:
            signal.setitimer(signal.ITIMER_REAL, _STUCK_S, _STUCK_S)
        try:
            buffer = getattr(sink, "buffer", None)
            if buffer is None:  # a text-only sink (a StringIO)
                sink.write(text)
                sink.flush()
            else:  # the workers' bytes as they wrote them, whatever the sink's encoding
                sink.flush()
                buffer.write(text.encode("utf-8", "surrogateescape"))
                buffer.flush()
        except _Abandoned:
            self._abandon(sink)
        except (OSError, ValueError):  # the reader went away: keep the job, drop its output
            self._broken.add(id(sink))
        finally:
            if watched:
                signal.setitimer(signal.ITIMER_REAL, 0)
            self._writing = None

    def _abandon(self, sink: TextIO) -> None:
        """Drop ``sink``'s output from now on: its descriptor goes to /dev/null, so what
        is still buffered (flushed at exit too) can never block again."""
        self._broken.add(id(sink))
        with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, sink.fileno())
            finally:
                os.close(null)


def plan(args: argparse.Namespace) -> str | None:
    """Settle the job ``run`` starts for a parsed command line, starting nothing: why it
    cannot run (the option and the fix), else ``None``, and ``args`` then hold the plan,
    torchrun's spellings resolved to one meaning (``--rdzv-endpoint`` is rank 0's
    host and port; the workers' environment is ``torchrun_compat.worker_environment``,
    their command ``script_command``).

    For example ``run --nproc-per-node 2 --nnodes 2 --node-rank 1 --rdzv-endpoint
    10.0.0.1:29400 train.py`` plans ranks 2 and 3 of 4, meeting at 10.0.0.1:29400;
    ``run --nnodes 1:4 train.py`` is refused (an elastic range), naming ``--nnodes N``.
    """
    refused = torchrun_compat.refused_option(args)
    if refused is not None:
        return refused
    if args.standalone and args.nnodes > 1:
        return (
            f"--standalone is a job on one host, and --nnodes is {args.nnodes}. Fix: drop "
            "--standalone and give every host --master-addr and --master-port (or "
            "--rdzv-endpoint) and its --node-rank."
        )
    named_rank = args.node_rank is not None
    if args.node_rank is None:
        args.node_rank = 0
    torchrun_compat.settle_rendezvous(args)
    if args.node_rank >= args.nnodes:
        return (
            f"--node-rank {args.node_rank} must be below --nnodes {args.nnodes}. Fix: number "
            f"the hosts 0 to {args.nnodes - 1}, rank 0's host 0."
        )
    if args.rdzv_backend == "c10d" and args.nnodes > 1:
        if not args.rdzv_endpoint:
            return (
                f"--rdzv-backend c10d with --nnodes {args.nnodes} names no --rdzv-endpoint: "
                "each host would meet only itself, at localhost:29400. Fix: --rdzv-endpoint "
                "HOST:PORT of rank 0's host on every host."
            )
        if not named_rank:
            return (
                f"--rdzv-backend c10d with --nnodes {args.nnodes} and no --node-rank: torchrun "
                "numbers the hosts as they join, this launcher by their --node-rank, so every "
                "host would be host 0. Fix: give each host its --node-rank, 0 to "
                f"{args.nnodes - 1} (0 on the host of --rdzv-endpoint)."
            )
    if args.module:
        if not _module_exists(args.script):
            return (
                f"module {args.script!r} not found (-m runs python -m {args.script} here). "
                "Fix: run from the folder that holds the module's package, or install it."
            )
    elif not Path(args.script).is_file():
        return (
            f"script {args.script!r} not found. Fix: the script's path from this folder "
            f"({os.getcwd()}), or -m MODULE."
        )
    return _check_master_addr(args.master_addr, here=args.node_rank == 0)


def _module_exists(name: str) -> bool:
    """Whether ``python -m name`` in this folder finds the module's top package: a file
    or folder here (what ``-m`` puts first on ``sys.path``), or an installed one."""
    top = name.split(".")[0]
    if not top.isidentifier():
        return False
    return Path(f"{top}.py").is_file() or Path(top).is_dir() or _installed(top)


def _installed(top: str) -> bool:
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def _check_master_addr(host: str, *, here: bool) -> str | None:
    """Why ``--master-addr`` cannot work, checked before any worker starts: it must
    resolve, and where rank 0 runs on this host (``here``), be one of this host's
    addresses; else every worker would wait for a coordinator that never comes."""
    from .._src.distributed.rendezvous import check_host
    from .._src.errors import DistributedError

    try:
        check_host(host, "--master-addr")
    except DistributedError as error:
        return str(error)
    if not here:
        return None
    try:
        family = socket.getaddrinfo(host.strip("[]"), None, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host.strip("[]"), 0))
    except OSError as error:
        return (
            f"--master-addr {host!r} is not an address of this host ({error.strerror or error}), "
            "but rank 0 runs here (--node-rank 0) and listens on it, so no worker could "
            "ever reach it. Fix: pass this host's name or IP address (127.0.0.1 when every "
            "worker runs here)."
        )
    return None


def _answered_by_master(
    host: str,
    port: int,
    environ: Any,
    dial: Callable[..., socket.socket] = socket.create_connection,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """Why no worker of a host other than rank 0's could meet rank 0: its host (``host``)
    answered no connection to ``port`` (accepting or refusing it) for
    ``rendezvous.reach_timeout(environ)`` seconds, checked before any worker starts. A
    host that refuses is up (its launcher has not started yet): the workers wait for it."""
    from .._src.distributed.rendezvous import Reach, reach_timeout
    from .._src.errors import DistributedError

    try:
        start = clock()
        reach = Reach(host, port, "this host (--node-rank > 0)", reach_timeout(environ), start)
        while True:
            try:
                dial((host.strip("[]"), port), timeout=1.0).close()
                return None
            except OSError as error:
                if reach.failed(error, clock()):
                    return None  # refused: the host is up
            sleep(_POLL_S)
    except DistributedError as error:
        return str(error)


def _host_store(args: argparse.Namespace, port: int, reserved: socket.socket | None) -> object:
    """torch's rendezvous store, as torchrun's agent hosts it for its workers; on the
    ``reserved`` listening socket where there is one (a copy of its descriptor: the
    store's to keep)."""
    from torch.distributed import TCPStore

    try:
        return TCPStore(
            args.master_addr,
            port,
            None,
            True,
            _STORE_TIMEOUT,
            wait_for_workers=False,
            multi_tenant=True,
            master_listen_fd=None if reserved is None else os.dup(reserved.fileno()),
        )
    except (RuntimeError, ValueError) as error:  # DistNetworkError is a RuntimeError
        raise _LaunchError(
            f"could not host torch's rendezvous store at {args.master_addr}:{port} "
            f"({error}); stopped every process. Pass a free --master-port, or an address of "
            "this host as --master-addr."
        ) from None


def _start(
    args: argparse.Namespace, local_rank: int, port: int, agent_store: bool, run_id: str
) -> _Worker:
    env = {
        **os.environ,
        **torchrun_compat.worker_environment(args, local_rank, port, run_id),
        "PYTHONUNBUFFERED": "1",  # relay output as it is printed
    }
    if agent_store:  # torchrun's flag: every worker's torch store is a client of ours
        env["TORCHELASTIC_USE_AGENT_STORE"] = "True"
    if args.cpu_devices is not None:
        env.update(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES=str(args.cpu_devices))
    process = subprocess.Popen(
        _command(args),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, signalled as one
    )
    return _Worker(int(env["RANK"]), process)


def _command(args: argparse.Namespace) -> list[str]:
    """The worker's command line: the script, run so that it dies when the launcher dies.

    On Linux a short Python first sets ``PR_SET_PDEATHSIG`` (the kernel sends SIGKILL to
    the worker when the launcher ends, even by SIGKILL; the setting survives ``exec``),
    then becomes the script with ``os.execv``: same pid, same ``sys.argv``. Done after
    ``exec``, not in a ``preexec_fn``, because no Python code is safe between ``fork``
    and ``exec`` in a process that runs threads (JAX's, when the launcher is called from
    a program that uses JAX). Elsewhere a killed launcher leaves its workers running.
    """
    script = script_command(args)
    if not sys.platform.startswith("linux"):
        return script
    return [sys.executable, "-I", "-S", "-c", _DIE_WITH_LAUNCHER, str(os.getpid()), *script]


def script_command(args: argparse.Namespace) -> list[str]:
    """What each worker runs: ``python [-m] SCRIPT ARGS...`` (torchrun adds ``-u``; here
    ``PYTHONUNBUFFERED=1`` does the same)."""
    return [sys.executable, *(["-m"] if args.module else []), args.script, *args.script_args]


def _reserved_ports() -> socket.socket:
    """A socket listening on the first of two consecutive free ports (torch's store's,
    held; the next, probed, is JAX's coordinator's)."""
    while True:
        held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        held.bind(("", 0))
        held.listen()
        if held.getsockname()[1] < 65535 and _is_free(held.getsockname()[1] + 1):
            return held
        held.close()


def _free_port() -> int:
    """A free TCP port (JAX's coordinator's, where no torch store is hosted)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        port: int = probe.getsockname()[1]
    return port


def _is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("", port))
        except OSError:
            return False
        return True


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}. Fix: 0 or more")
    return value


def _port(text: str) -> int:
    """A rendezvous port: ``PORT`` and ``PORT + 1`` (JAX's coordinator) must both be TCP ports."""
    value = _non_negative_int(text)
    if not 1 <= value <= torchrun_compat.MAX_PORT:
        raise argparse.ArgumentTypeError(
            f"{text} is not a port the job can use: where torch is installed, torch's "
            "rendezvous store holds PORT and JAX's coordinator PORT + 1 (as under torchrun), "
            f"and every host must agree. Fix: pass a port from 1 to {torchrun_compat.MAX_PORT}"
        )
    return value
