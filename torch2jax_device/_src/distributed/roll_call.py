"""Every rank checks in with rank 0 before JAX's distributed runtime starts.

``jax.distributed.initialize`` answers the common start-up failures badly: a busy
coordinator port is a segfault, and a rank that never starts makes JAX abort the
others (SIGABRT, "another task died") once its timeout has passed, with no Python
exception. So before calling it, rank 0 opens the coordinator's port itself and
waits for the other ranks to check in there, each saying who it is; once all have,
it tells them to go, closes the port and starts JAX's coordinator on it. When the
timeout passes first, every rank that did come gets a ``DistributedError`` naming
the ranks that never arrived, and so does rank 0.

The exchange is one JSON line each way over TCP. A rank's line is
``{"rank": r, "world_size": w, "host": ..., "pid": ...}``; rank 0 answers
``{"ok": true}`` or ``{"error": "..."}``. Rank 0 also refuses a second process
claiming a rank that has checked in, and a rank that was given another world size.

Nothing here starts JAX's backends.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import selectors
import socket
import time
from collections.abc import Mapping

from ..errors import DistributedError
from .rendezvous import Reach, Rendezvous, check_host, open_file_limit, reach_timeout

__all__ = ["roll_call"]

_PROBE_INTERVAL_S = 0.1
# A check-in line is a few dozen bytes; anything longer is not one of ours.
_MAX_LINE_BYTES = 4096
# After "go", how long rank 0 waits for the ranks to hang up first (so that the
# port's TIME_WAIT sockets are theirs and JAX can bind it at once).
_HANG_UP_S = 5.0
# How much longer than its own timeout a rank waits for rank 0's verdict: rank 0's
# deadline can be a little later than the moment the rank checked in.
_VERDICT_GRACE_S = 2.0
# Runs of ranks (and refused processes) a message lists before it counts the rest.
_SHOWN = 8
# How a rank dials rank 0 and keeps time while it retries (tests replace them).
_dial = socket.create_connection
_clock = time.monotonic
_sleep = time.sleep


def roll_call(rendezvous: Rendezvous, timeout_s: float, environ: Mapping[str, str]) -> float:
    """Meet every rank at rank 0's coordinator port before JAX starts.

    Rank 0 listens on the port (so a busy port is found here) until all ranks have
    checked in; the other ranks connect (retrying while rank 0 is not up yet), check
    in and wait for rank 0's answer.

    Returns:
        The seconds left of ``timeout_s``, for ``jax.distributed.initialize``.

    Raises:
        DistributedError: the coordinator's host does not resolve (JAX would abort the
            process); the port is taken (rank 0); rank 0 cannot be reached; a rank
            did not arrive in time (every rank that did, naming the missing ones); two
            processes claim one rank; a rank's world size differs from rank 0's; rank 0's
            host answered none of a rank's connections for
            ``rendezvous.reach_timeout(environ)`` seconds (60 s by default).
    """
    deadline = time.monotonic() + timeout_s
    check_host(rendezvous.host, "MASTER_ADDR (or init_method's host)")
    if rendezvous.world_size > 1:
        if rendezvous.rank == 0:
            _Host(rendezvous, timeout_s, deadline, environ).run()
        else:
            _check_in(rendezvous, timeout_s, reach_timeout(environ))
    elif not environ.get("JAX_COORDINATOR_BIND_ADDRESS"):
        _listen(rendezvous, environ).close()  # a busy port would crash JAX
    return max(deadline - time.monotonic(), 0.0)


@dataclasses.dataclass
class _Guest:
    """One connection to rank 0, and what it has said so far."""

    connection: socket.socket
    received: bytes = b""
    rank: int | None = None
    who: str = ""


class _Host:
    """Rank 0's side: listen, collect check-ins, answer all of them at the end."""

    def __init__(
        self,
        rendezvous: Rendezvous,
        timeout_s: float,
        deadline: float,
        environ: Mapping[str, str],
    ) -> None:
        self.rendezvous, self.timeout_s, self.deadline = rendezvous, timeout_s, deadline
        self.server = _listen(rendezvous, environ)
        self.selector = selectors.DefaultSelector()
        self.arrived: dict[int, _Guest] = {}
        # Ranks refused for a wrong world size, for the message if they never come right.
        self.refused: dict[int, str] = {}

    def run(self) -> None:
        self.server.setblocking(False)
        self.selector.register(self.server, selectors.EVENT_READ)
        try:
            try:
                missing = self._collect()
            except DistributedError as error:  # the ranks that came learn why at once
                self._answer_all({"error": str(error)})
                raise
            if missing:
                message = self._missing_message(missing)
                self._answer_all({"error": message})
                raise DistributedError(message)
            self._answer_all({"ok": True})
            self._wait_for_hang_ups()
        finally:
            for key in list(self.selector.get_map().values()):
                key.fileobj.close()  # type: ignore[union-attr]
            self.selector.close()

    def _collect(self) -> list[range]:
        """The ranks that never arrived, as runs (none: all came). Counted, never listed
        one by one, so a WORLD_SIZE of millions costs nothing until it is reported."""
        while len(self.arrived) < self.rendezvous.world_size - 1:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                return _gaps(self.arrived, self.rendezvous.world_size)
            for key, _ in self.selector.select(timeout=min(remaining, 1.0)):
                if key.fileobj is self.server:
                    self._accept()
                else:
                    self._read(key.data)
        return []

    def _accept(self) -> None:
        try:
            connection, address = self.server.accept()
        except BlockingIOError:
            return
        except OSError as error:
            if error.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            raise DistributedError(
                f"Rank 0 cannot take the connection of another rank: {error.strerror} "
                f"({len(self.arrived)} of the WORLD_SIZE={self.rendezvous.world_size} ranks had "
                f"checked in{open_file_limit()}). Every rank holds a connection to rank 0, "
                "here and to JAX's coordinator after. Fix: raise the limit on open files above "
                "WORLD_SIZE plus what the process opens itself, where rank 0 is started "
                f"(`ulimit -n {2 * self.rendezvous.world_size + 1024}` before the launcher)."
            ) from None
        connection.setblocking(False)
        guest = _Guest(connection, who=f"{address[0]}:{address[1]}")
        self.selector.register(connection, selectors.EVENT_READ, guest)

    def _read(self, guest: _Guest) -> None:
        try:
            chunk = guest.connection.recv(_MAX_LINE_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:  # hung up: a rank that died after checking in must come again
            self._drop(guest)
            return
        guest.received += chunk
        if b"\n" not in guest.received:
            if len(guest.received) > _MAX_LINE_BYTES:
                self._drop(guest)
            return
        line = guest.received.split(b"\n", 1)[0]
        try:
            hello = json.loads(line)
            rank, world_size = int(hello["rank"]), int(hello["world_size"])
            who = f"{hello.get('host', '?')} (pid {hello.get('pid', '?')})"
        except (ValueError, TypeError, KeyError):
            self._drop(guest)  # not a rank: a port scanner, a health check
            return
        if world_size != self.rendezvous.world_size:
            self.refused[rank] = f"{who} with WORLD_SIZE={world_size}"
            self._refuse(
                guest,
                f"WORLD_SIZE={world_size} on rank {rank}, but rank 0 started the job with "
                f"WORLD_SIZE={self.rendezvous.world_size}. Fix: give every process the same "
                "WORLD_SIZE (torchrun and `torch2jax-device run` do).",
            )
            return
        if not 0 < rank < self.rendezvous.world_size:
            self._refuse(
                guest,
                f"Rank {rank} ({who}) tried to join, but the job's ranks are 1 to "
                f"{self.rendezvous.world_size - 1} besides rank 0 (WORLD_SIZE="
                f"{self.rendezvous.world_size}). Fix: give every process a RANK below WORLD_SIZE.",
            )
            return
        if rank in self.arrived:
            self._refuse(
                guest,
                f"Rank {rank} ({who}) tried to join, but rank {rank} already checked in from "
                f"{self.arrived[rank].who}. Fix: give every process a different RANK.",
            )
            return
        guest.rank, guest.who = rank, who
        self.arrived[rank] = guest

    def _drop(self, guest: _Guest) -> None:
        if guest.rank is not None and self.arrived.get(guest.rank) is guest:
            del self.arrived[guest.rank]
        self.selector.unregister(guest.connection)
        guest.connection.close()

    def _refuse(self, guest: _Guest, message: str) -> None:
        _send(guest.connection, {"error": message})
        self._drop(guest)

    def _answer_all(self, answer: dict[str, object]) -> None:
        for guest in self.arrived.values():
            _send(guest.connection, answer)

    def _wait_for_hang_ups(self) -> None:
        until = time.monotonic() + _HANG_UP_S
        while self.arrived and time.monotonic() < until:
            for key, _ in self.selector.select(timeout=0.1):
                if key.fileobj is not self.server:
                    self._read(key.data)

    def _missing_message(self, missing: list[range]) -> str:
        count = sum(len(run) for run in missing)
        came = _runs([0, *sorted(self.arrived)])
        arrived = sum(len(run) for run in came)
        refused = [
            f" A process claiming rank {rank} came from {who} and was refused."
            for rank, who in sorted(self.refused.items())
            if any(rank in run for run in missing)
        ]
        if len(refused) > _SHOWN:
            refused[_SHOWN:] = [f" {len(refused) - _SHOWN:,} more were refused."]
        return (
            f"Rank{'s' if count > 1 else ''} {summarized(missing)} of WORLD_SIZE="
            f"{self.rendezvous.world_size} never arrived: init_process_group waited "
            f"{self.timeout_s:g} s at {self.rendezvous.coordinator_address} (port: "
            f"{self.rendezvous.port_source}); rank{'s' if arrived > 1 else ''} "
            f"{summarized(came)} came.{''.join(refused)} Fix: check "
            "that every rank was started (a launcher with the same --nproc-per-node and "
            "--nnodes on every host), that it reached init_process_group, and that it "
            f"can reach {self.rendezvous.host} on port {self.rendezvous.port}."
        )


def _runs(ranks: list[int]) -> list[range]:
    """Sorted ``ranks`` as runs of consecutive ones."""
    runs: list[range] = []
    for rank in ranks:
        if runs and runs[-1].stop == rank:
            runs[-1] = range(runs[-1].start, rank + 1)
        else:
            runs.append(range(rank, rank + 1))
    return runs


def _gaps(arrived: Mapping[int, object], world_size: int) -> list[range]:
    """The ranks 1 to ``world_size - 1`` not in ``arrived``, as runs."""
    gaps, start = [], 1
    for rank in sorted(arrived):
        if rank > start:
            gaps.append(range(start, rank))
        start = rank + 1
    if start < world_size:
        gaps.append(range(start, world_size))
    return gaps


def summarized(runs: list[range]) -> str:
    """Runs of ranks as a message shows them: ``"1, 3-9, 12, 13"``, at most ``_SHOWN`` runs,
    then how many ranks more; a message about a million ranks stays one line."""
    shown = [
        ", ".join(map(str, run)) if len(run) <= 2 else f"{run.start}-{run.stop - 1}" for run in runs
    ]
    if len(shown) > _SHOWN:
        rest = sum(len(run) for run in runs[_SHOWN:])
        shown[_SHOWN:] = [f"and {rest:,} more"]
    return ", ".join(shown)


def _listen(rendezvous: Rendezvous, environ: Mapping[str, str]) -> socket.socket:
    """The coordinator's port, bound where JAX's coordinator will bind it."""
    port = rendezvous.port
    bind = environ.get("JAX_COORDINATOR_BIND_ADDRESS", "").strip()
    try:
        if bind:
            host = bind.rsplit(":", 1)[0].strip("[]") if ":" in bind else bind
            return socket.create_server((host, port), family=_family(host))
        if socket.has_dualstack_ipv6():
            return socket.create_server(("::", port), family=socket.AF_INET6, dualstack_ipv6=True)
        return socket.create_server(("", port))
    except OSError as err:
        reason = (
            "another job, or an earlier run that is still exiting, holds it"
            if err.errno == errno.EADDRINUSE
            else err.strerror or str(err)
        )
        raise DistributedError(
            f"Port {port} ({rendezvous.port_source}) cannot be used on this host ({reason}), "
            "so rank 0 cannot start JAX's coordinator there. Fix: choose a free port for "
            "every process, with MASTER_PORT or JAX_COORDINATOR_PORT (`torch2jax-device run` "
            "picks one when --master-port is left out)."
        ) from err


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _send(connection: socket.socket, message: dict[str, object]) -> None:
    try:
        connection.setblocking(True)
        connection.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        pass  # it hung up; it learns nothing more from rank 0


def _check_in(rendezvous: Rendezvous, timeout_s: float, reach_s: float) -> None:
    """A rank other than 0: reach rank 0, say who this is, wait for its answer."""
    connection = _connect(rendezvous, timeout_s, reach_s)
    with connection:
        hello = {
            "rank": rendezvous.rank,
            "world_size": rendezvous.world_size,
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }
        connection.sendall(json.dumps(hello).encode() + b"\n")
        # Rank 0 was listening before this rank connected, so its deadline comes
        # before this one's end (plus the grace).
        connection.settimeout(timeout_s + _VERDICT_GRACE_S)
        answer = _read_line(connection)
    if answer is None:
        raise DistributedError(
            f"Rank {rendezvous.rank} checked in with rank 0 at "
            f"{rendezvous.coordinator_address}, which hung up without an answer: rank 0 "
            "failed or was stopped during init_process_group (its own error says why)."
        )
    if "error" in answer:
        raise DistributedError(f"Rank {rendezvous.rank}: {answer['error']}")


def _read_line(connection: socket.socket) -> dict[str, object] | None:
    received = b""
    try:
        while b"\n" not in received:
            chunk = connection.recv(_MAX_LINE_BYTES)
            if not chunk:
                return None
            received += chunk
        answer = json.loads(received.split(b"\n", 1)[0])
    except (OSError, ValueError):  # timed out, reset, or not rank 0 speaking
        return None
    return answer if isinstance(answer, dict) else None


def _connect(rendezvous: Rendezvous, timeout_s: float, reach_s: float) -> socket.socket:
    """A connection to rank 0, retried while rank 0 is not listening yet: until
    ``timeout_s`` while its host refuses, ``reach_s`` while it answers nothing."""
    address = (rendezvous.host.strip("[]"), rendezvous.port)
    start = _clock()
    deadline = start + timeout_s
    reach = Reach(rendezvous.host, rendezvous.port, f"Rank {rendezvous.rank}", reach_s, start)
    while True:
        remaining = deadline - _clock()
        try:
            return _dial(address, timeout=max(min(remaining, 1.0), 0.01))
        except OSError as err:
            reach.failed(err, _clock())
            if _clock() + _PROBE_INTERVAL_S >= deadline:
                raise DistributedError(
                    f"Rank {rendezvous.rank} could not reach JAX's coordinator at "
                    f"{rendezvous.coordinator_address} (port: {rendezvous.port_source}) within "
                    f"{timeout_s:g} s: {err.strerror or err}. Rank 0 starts the coordinator in "
                    "init_process_group. Fix: check that rank 0 is running and was given the "
                    "same MASTER_ADDR and port, and that this host can reach "
                    f"{rendezvous.host} on port {rendezvous.port}."
                ) from err
            _sleep(_PROBE_INTERVAL_S)
