"""``torch2jax-device run``: torchrun's job for scripts that have no torch.

``torch2jax-device run --nproc-per-node N script.py [args]`` starts N copies of the
script with the environment torchrun gives its workers (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``), so ``tj.distributed.init_process_group()`` works the same under
either launcher. Where torch is installed, it also does what torchrun's agent does: it
hosts torch's rendezvous store at ``MASTER_PORT`` itself and tells the workers so
(``TORCHELASTIC_USE_AGENT_STORE=True``), so ``torch.distributed`` in the workers never
depends on rank 0 outliving the others (when rank 0 hosts the store, gloo jobs abort
now and then at exit), and JAX's coordinator takes ``MASTER_PORT + 1``. Each line the
workers print is relayed as it comes, prefixed with ``[rankN]:``. When a worker fails,
the others are stopped at once (SIGTERM, then SIGKILL: JAX's preemption handler catches
SIGTERM) and the first failure's exit code is returned. Several hosts: run it on each
with the same ``--nnodes``, ``--master-addr`` (the host of rank 0) and
``--master-port``, and a distinct ``--node-rank``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, TextIO

__all__ = ["add_parser", "run"]

_POLL_S = 0.05
# How long stopped workers get between SIGTERM and SIGKILL.
_GRACE_S = 3.0
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
        type=_positive_int,
        default=1,
        help="processes on this host, usually one per GPU (default 1)",
    )
    parser.add_argument(
        "--nnodes", type=_positive_int, default=1, help="hosts in the job (default 1)"
    )
    parser.add_argument(
        "--node-rank",
        "--node_rank",
        dest="node_rank",
        type=_non_negative_int,
        default=0,
        help="this host's index, 0 to nnodes-1 (default 0)",
    )
    parser.add_argument(
        "--master-addr",
        "--master_addr",
        dest="master_addr",
        default="127.0.0.1",
        help="address of the host that runs rank 0 (default 127.0.0.1)",
    )
    parser.add_argument(
        "--master-port",
        "--master_port",
        dest="master_port",
        type=_port,
        default=None,
        help="the job's rendezvous port on that host: torch's store where torch is "
        "installed (JAX's coordinator then takes PORT+1), else JAX's coordinator "
        "(default: a free port; required with --nnodes > 1)",
    )
    parser.add_argument(
        "--cpu-devices",
        dest="cpu_devices",
        type=_positive_int,
        default=None,
        metavar="N",
        help="simulate the job on the CPU: JAX_PLATFORMS=cpu and N CPU devices per process",
    )
    parser.add_argument("script", help="the Python script each process runs")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Run the job; return 0, or the exit code of the first worker that failed."""
    problem = _check(args)
    if problem:
        err.write(f"torch2jax-device run: {problem}\n")
        return 2
    agent_store = importlib.util.find_spec("torch") is not None
    port = args.master_port if args.master_port is not None else _free_ports(1 + agent_store)
    lock = threading.Lock()  # one line at a time, whichever worker printed it
    workers = [
        _start(args, local_rank, port, agent_store, _Sinks(out, err, lock))
        for local_rank in range(args.nproc_per_node)
    ]
    interrupted = False
    stores: list[object] = []  # open until the workers are done
    try:
        # Started after the workers, which wait for it: importing torch here costs them
        # nothing.
        if agent_store and args.node_rank == 0:
            stores.append(_host_store(args, port))
        failure = _wait(workers)
    except KeyboardInterrupt:
        failure, interrupted = None, True
    except _StoreError as error:
        err.write(f"torch2jax-device run: {error}\n")
        return 1
    finally:
        _stop(workers)
        for worker in workers:
            worker.join_output()
        stores.clear()
    if interrupted:
        err.write("torch2jax-device run: interrupted; stopped every process.\n")
        return 130
    if failure is None:
        return 0
    err.write(failure.describe() + "\n")
    return failure.exit_status


class _StoreError(Exception):
    """torch's rendezvous store could not be hosted (the message says why and the fix)."""


class _Sinks:
    """Where workers' output goes, and the lock that keeps their lines whole."""

    def __init__(self, out: TextIO, err: TextIO, lock: threading.Lock) -> None:
        self.out, self.err, self.lock = out, err, lock


class _Worker:
    """One child process and the threads relaying its output."""

    def __init__(self, rank: int, process: subprocess.Popen[bytes], sinks: _Sinks) -> None:
        self.rank = rank
        self.process = process
        self._relays = [
            threading.Thread(target=_relay, args=(stream, sink, f"[rank{rank}]: ", sinks.lock))
            for stream, sink in ((process.stdout, sinks.out), (process.stderr, sinks.err))
        ]
        for relay in self._relays:
            relay.start()

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

    def join_output(self) -> None:
        for relay in self._relays:
            relay.join()


def _check(args: argparse.Namespace) -> str | None:
    if args.node_rank >= args.nnodes:
        return f"--node-rank {args.node_rank} must be below --nnodes {args.nnodes}."
    if args.nnodes > 1 and args.master_port is None:
        return (
            "--master-port is required with --nnodes > 1: every host must be given the same "
            "port, on the host of rank 0 (--master-addr)."
        )
    if not Path(args.script).is_file():
        return f"script {args.script!r} not found."
    return None


def _host_store(args: argparse.Namespace, port: int) -> object:
    """torch's rendezvous store, as torchrun's agent hosts it for its workers."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    try:
        return TCPStore(
            args.master_addr,
            port,
            None,
            True,
            _STORE_TIMEOUT,
            wait_for_workers=False,
            multi_tenant=True,
        )
    except (RuntimeError, ValueError) as error:  # DistNetworkError is a RuntimeError
        raise _StoreError(
            f"could not host torch's rendezvous store at {args.master_addr}:{port} "
            f"({error}); stopped every process. Pass a free --master-port, or an address of "
            "this host as --master-addr."
        ) from None


def _start(
    args: argparse.Namespace, local_rank: int, port: int, agent_store: bool, sinks: _Sinks
) -> _Worker:
    rank = args.node_rank * args.nproc_per_node + local_rank
    env = {
        **os.environ,
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "GROUP_RANK": str(args.node_rank),
        "WORLD_SIZE": str(args.nnodes * args.nproc_per_node),
        "LOCAL_WORLD_SIZE": str(args.nproc_per_node),
        "MASTER_ADDR": args.master_addr,
        "MASTER_PORT": str(port),
        "PYTHONUNBUFFERED": "1",  # relay lines as they are printed
    }
    if agent_store:  # torchrun's flag: every worker's torch store is a client of ours
        env["TORCHELASTIC_USE_AGENT_STORE"] = "True"
    if args.cpu_devices is not None:
        env.update(JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES=str(args.cpu_devices))
    process = subprocess.Popen(
        [sys.executable, args.script, *args.script_args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, stopped as one
    )
    return _Worker(rank, process, sinks)


def _wait(workers: list[_Worker]) -> _Worker | None:
    """Wait for every worker; return the first that failed (the others still run)."""
    while True:
        running = False
        for worker in workers:
            code = worker.process.poll()
            if code is None:
                running = True
            elif code != 0:
                return worker
        if not running:
            return None
        time.sleep(_POLL_S)


def _stop(workers: list[_Worker]) -> None:
    """SIGTERM every running worker's process group, then SIGKILL what is left."""
    running = [worker for worker in workers if worker.process.poll() is None]
    for worker in running:
        _signal_group(worker.process, signal.SIGTERM)
    deadline = time.monotonic() + _GRACE_S
    for worker in running:
        _wait_or_kill(worker.process, max(deadline - time.monotonic(), 0.0))


def _wait_or_kill(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        process.wait()


def _signal_group(process: subprocess.Popen[bytes], signum: signal.Signals) -> None:
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:  # exited in the meantime
        pass


def _relay(stream: IO[bytes] | None, sink: TextIO, prefix: str, lock: threading.Lock) -> None:
    if stream is None:
        return
    with stream:
        for line in iter(stream.readline, b""):
            text = line.decode("utf-8", errors="replace")
            with lock:
                sink.write(prefix + text if text.endswith("\n") else prefix + text + "\n")
                sink.flush()


def _free_ports(count: int) -> int:
    """The first of ``count`` consecutive free TCP ports (torch's store, then JAX's)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("", 0))
            first: int = probe.getsockname()[1]
        if first + count <= 65536 and all(_is_free(first + n) for n in range(count)):
            return first


def _is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("", port))
        except OSError:
            return False
        return True


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
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value


def _port(text: str) -> int:
    value = _positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {text}")
    return value
