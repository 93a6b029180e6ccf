"""The process group against hostile environments: huge world sizes, names that resolve
to nothing, a master host that answers nothing (through a fake dial and clock). Nothing
here starts JAX's coordinator, except the one test marked slow."""

from __future__ import annotations

import datetime
import errno
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.support.deadlines import deadline
from tests.support.distributed.launch import free_port
from torch2jax_device import DistributedError
from torch2jax_device._src.distributed import process_group, rendezvous
from torch2jax_device._src.distributed import roll_call as roll_call_module
from torch2jax_device._src.distributed.roll_call import roll_call


@pytest.mark.parametrize("world_size", [10**6, 10**8])
def test_the_missing_ranks_of_a_huge_world_are_summarised(world_size: int) -> None:
    environ = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    meeting = rendezvous.parse(None, world_size, 0, environ)
    with pytest.raises(DistributedError) as caught:
        roll_call(meeting, 0.0, environ)
    message = str(caught.value)
    assert message.startswith(f"Ranks 1-{world_size - 1} of WORLD_SIZE={world_size} never arrived")
    assert "rank 0 came" in message and len(message) < 1000


@pytest.mark.parametrize("host", ["256.1.1.1", "no-such-host.invalid", "bad host", "a" * 300])
def test_a_coordinator_host_that_resolves_to_nothing_is_the_librarys_error(host: str) -> None:
    environ = {"MASTER_ADDR": host, "MASTER_PORT": str(free_port())}
    meeting = rendezvous.parse(None, 1, 0, environ)
    with pytest.raises(DistributedError, match=r"names no address .*Fix: set it to rank 0's"):
        roll_call(meeting, 5.0, environ)


def _one_rank(code: str, master_addr: str) -> subprocess.CompletedProcess[str]:
    """``code`` run as rank 0 of a one-process job (on the CPU, a free port); it must
    exit 0."""
    environ = dict(os.environ, MASTER_ADDR=master_addr, MASTER_PORT=str(free_port()))
    environ.update(RANK="0", WORLD_SIZE="1", JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True,
        timeout=deadline(300),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    return result


@pytest.mark.slow  # starts a process: JAX's coordinator aborted it before the check
def test_world_size_1_with_an_unresolvable_master_addr_raises_instead_of_aborting() -> None:
    code = (
        "import torch2jax_device as tj\n"
        "try:\n"
        "    tj.distributed.init_process_group()\n"
        "except tj.DistributedError as err:\n"
        "    print('refused:', err)\n"
    )
    result = _one_rank(code, "no-such-host.invalid")
    assert "refused: MASTER_ADDR (or init_method's host)='no-such-host.invalid'" in result.stdout


class _Network:
    """A fake dial and clock: every connection fails with ``errors`` in turn (the last
    repeats), each attempt costing the time it waits; sleeping advances the clock."""

    def __init__(self, *errors: OSError) -> None:
        self.errors, self.now, self.dials = list(errors), 0.0, 0

    def dial(self, address: tuple[str, int], timeout: float) -> socket.socket:
        self.dials += 1
        error = self.errors.pop(0) if len(self.errors) > 1 else self.errors[0]
        if error.errno is None:  # a timeout: nothing answered for the dial's whole wait
            self.now += timeout
        raise error

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _silent() -> OSError:
    return TimeoutError("timed out")


def _unreachable() -> OSError:
    return OSError(errno.EHOSTUNREACH, os.strerror(errno.EHOSTUNREACH))


def _refused() -> OSError:
    return ConnectionRefusedError(errno.ECONNREFUSED, os.strerror(errno.ECONNREFUSED))


def _rank_1_meets(
    network: _Network, monkeypatch: pytest.MonkeyPatch, give_up_s: float, **extra: str
) -> str:
    """The message of rank 1's failed roll call to 10.1.2.3 through ``network``."""
    monkeypatch.setattr(roll_call_module, "_dial", network.dial)
    monkeypatch.setattr(roll_call_module, "_clock", lambda: network.now)
    monkeypatch.setattr(roll_call_module, "_sleep", network.sleep)
    environ = {"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "29500", **extra}
    meeting = rendezvous.parse(None, 2, 1, environ)
    with pytest.raises(DistributedError) as caught:
        roll_call(meeting, give_up_s, environ)  # in the fake clock's seconds
    return str(caught.value)


@pytest.mark.parametrize("error", [_silent, _unreachable], ids=["timeout", "no-route"])
def test_a_rank_gives_up_on_a_master_host_that_answers_nothing(
    error: Callable[[], OSError], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: the rank retried for the whole init timeout (300 s here; torch's default 30
    # minutes), with a message blaming rank 0 (issue 36: "a remote rank waits until its
    # init_process_group timeout").
    network = _Network(error())
    message = _rank_1_meets(network, monkeypatch, give_up_s=300.0)
    assert re.match(r"Rank 1 could not reach 10.1.2.3 on port 29500: for 6[01] s the host", message)
    assert "nc -vz 10.1.2.3 29500" in message
    assert "set TORCH2JAX_DEVICE_RENDEZVOUS_TIMEOUT to the seconds to wait (now 60)" in message
    assert rendezvous.REACH_TIMEOUT_S <= network.now < rendezvous.REACH_TIMEOUT_S + 2


def test_the_variable_lengthens_the_wait_for_a_silent_host(monkeypatch: pytest.MonkeyPatch) -> None:
    network = _Network(_silent())
    message = _rank_1_meets(
        network, monkeypatch, give_up_s=1000.0, TORCH2JAX_DEVICE_RENDEZVOUS_TIMEOUT="240"
    )
    assert re.search(r"for 24[01] s the host answered no connection", message)
    assert 240 <= network.now < 242


def test_a_host_that_refuses_is_up_and_is_waited_for_until_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Rank 0 not listening yet: the host refuses. Refusals reset the silence, so a host
    # that once answered and then fell silent has a whole reach bound again.
    network = _Network(*[_refused()] * 1000, _silent())
    message = _rank_1_meets(network, monkeypatch, give_up_s=90.0)
    assert message.startswith("Rank 1 could not reach JAX's coordinator at 10.1.2.3:29500")
    assert "within 90 s" in message
    network = _Network(*[_refused()] * 500, _silent())
    message = _rank_1_meets(network, monkeypatch, give_up_s=1000.0)
    assert re.search(r"for 6[01] s the host answered no connection", message)
    assert 50 + 60 <= network.now < 50 + 62  # 500 refusals 0.1 s apart, then 60 s of silence


def test_a_closed_port_on_a_live_host_is_the_librarys_error_naming_everything() -> None:
    # The real network: 127.0.0.2 is up (loopback) and nothing listens on the port.
    port = free_port()
    environ = {"MASTER_ADDR": "127.0.0.2", "MASTER_PORT": str(port)}
    meeting = rendezvous.parse(None, 2, 1, environ)
    with pytest.raises(DistributedError) as caught:
        roll_call(meeting, 0.3, environ)
    message = str(caught.value)
    assert f"Rank 1 could not reach JAX's coordinator at 127.0.0.2:{port}" in message
    assert "within 0.3 s" in message and "Fix: check that rank 0 is running" in message


@pytest.mark.parametrize("value", ["soon", "0", "-5", "inf", "nan"])
def test_a_reach_timeout_that_is_not_seconds_is_refused(value: str) -> None:
    environ = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    environ["TORCH2JAX_DEVICE_RENDEZVOUS_TIMEOUT"] = value
    meeting = rendezvous.parse(None, 2, 1, environ)
    with pytest.raises(DistributedError, match=r"is not a number of seconds.*Fix: a positive"):
        roll_call(meeting, 5.0, environ)


class _ServerOutOfFiles(socket.socket):
    """A listening socket whose third ``accept`` finds the process out of files."""

    accepted = 0

    def accept(self) -> tuple[socket.socket, object]:
        if self.accepted == 2:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        self.accepted += 1
        return super().accept()


def test_rank_0_out_of_open_files_is_the_librarys_error_told_to_the_ranks_that_came(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before: a raw "OSError: [Errno 24] Too many open files" on rank 0 (measured: a
    # WORLD_SIZE of 200 against a limit of 64 open files), and the ranks that had come
    # were told only that rank 0 hung up.
    real = socket.create_server(("127.0.0.1", 0))
    server = _ServerOutOfFiles(real.family, real.type, fileno=real.detach())
    monkeypatch.setattr(roll_call_module, "_listen", lambda meeting, environ: server)
    port = server.getsockname()[1]
    ranks = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]  # queued
    for rank, connection in enumerate(ranks, start=1):
        connection.sendall(json.dumps({"rank": rank, "world_size": 5}).encode() + b"\n")
    environ = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    with pytest.raises(DistributedError) as caught:
        roll_call(rendezvous.parse(None, 5, 0, environ), 60.0, environ)
    message = str(caught.value)
    assert message.startswith("Rank 0 cannot take the connection of another rank: Too many")
    assert "WORLD_SIZE=5" in message and "Fix: raise the limit on open files" in message
    told = []
    for connection in ranks:
        with connection:
            try:
                answer = connection.makefile("rb").readline()
            except ConnectionResetError:  # the one never accepted: reset as rank 0 closed
                continue
            told.append(json.loads(answer))
    assert told and all(answer == {"error": message} for answer in told)


@pytest.mark.parametrize(
    "timeout", [1e300, 3e9, datetime.timedelta.max, datetime.timedelta(days=10**8)]
)
def test_a_timeout_past_what_jax_takes_waits_as_long_as_jax_can(
    timeout: float | datetime.timedelta,
) -> None:
    # torch takes any timedelta; JAX's timeouts are 32-bit ints (seconds to start,
    # milliseconds at a barrier). Before: a raw TypeError from JAX's runtime service.
    seconds = process_group._seconds(timeout)
    assert seconds == rendezvous.MAX_WAIT == 2**31 - 1
    assert rendezvous.whole_seconds(seconds) == 2**31 - 1
    assert rendezvous.whole_milliseconds(seconds) == 2**31 - 1
    assert rendezvous.whole_milliseconds(0.0001) == 1 and rendezvous.whole_seconds(0.2) == 1


@pytest.mark.slow  # starts JAX's coordinator in a process of its own
def test_init_process_group_and_barrier_take_timedelta_max() -> None:
    code = (
        "import datetime, torch2jax_device as tj\n"
        "tj.distributed.init_process_group(timeout=datetime.timedelta.max)\n"
        "tj.distributed.barrier()\n"
        "tj.distributed.destroy_process_group()\n"
        "print('joined and passed the barrier')\n"
    )
    result = _one_rank(code, "127.0.0.1")
    assert "joined and passed the barrier" in result.stdout
