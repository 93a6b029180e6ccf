"""A worker for the launcher's clean-up tests: it says who it is, then does MODE.

Usage (under ``torch2jax-device run`` or torchrun): ``signal_worker.py MODE [FLAG_FILE]``.
Every mode prints ``PID <rank> <pid>`` on its own line (after ignoring signals, if it does).

* ``sleep``: sleep 60 s.
* ``one-stubborn``: sleep 60 s; rank 1 ignores SIGINT, SIGTERM and SIGHUP (only SIGKILL
  ends it).
* ``stubborn``: every rank ignores them, then sleeps 60 s.
* ``grandchild``: start a process that sleeps an hour holding this one's stdout and stderr,
  print ``GRANDCHILD <pid>``, and exit 0 at once.
* ``progress``: write ``\\rprogress 50%`` with no newline, wait (at most 60 s) until
  FLAG_FILE exists, then write ``\\rprogress 100%`` and a newline.
* ``long-line``: once the launcher's torch store answers (if it hosts one), print
  ``READY``, wait (at most 60 s) until FLAG_FILE exists, then write 64 MiB of ``x`` in
  1 MiB pieces and one newline.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from tests.support.deadlines import deadline


def _ignore_stop_signals() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)


def _wait_for(path: str) -> None:
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)


def _wait_for_store() -> None:
    """Until the launcher's torch store listens (it imports torch first), at most 60 s."""
    address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    deadline = time.monotonic() + 60
    while not _answers(address) and time.monotonic() < deadline:
        time.sleep(0.1)


def _answers(address: tuple[str, int]) -> bool:
    try:
        socket.create_connection(address, timeout=deadline(1)).close()
    except OSError:
        return False
    return True


def main() -> None:
    mode = sys.argv[1]
    rank = int(os.environ["RANK"])
    if mode == "stubborn" or (mode == "one-stubborn" and rank == 1):
        _ignore_stop_signals()  # before saying who it is: the test signals right after
    print(f"PID {rank} {os.getpid()}", flush=True)
    if mode in ("sleep", "one-stubborn", "stubborn"):
        time.sleep(60)
    elif mode == "grandchild":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        print(f"GRANDCHILD {child.pid}", flush=True)
    elif mode == "progress":
        sys.stdout.write("\rprogress 50%")
        sys.stdout.flush()
        _wait_for(sys.argv[2])
        sys.stdout.write("\rprogress 100%\n")
    elif mode == "long-line":
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE"):
            _wait_for_store()
        print("READY", flush=True)
        _wait_for(sys.argv[2])
        piece = b"x" * 2**20
        for _ in range(64):
            sys.stdout.buffer.write(piece)
            sys.stdout.buffer.flush()
        sys.stdout.buffer.write(b"\n")
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
