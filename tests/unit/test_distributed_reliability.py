"""The process group against hostile environments: huge world sizes, names that resolve
to nothing. Nothing here starts JAX's coordinator, except the one test marked slow."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tests.support.deadlines import deadline
from torch2jax_device import DistributedError
from torch2jax_device._src.distributed import rendezvous
from torch2jax_device._src.distributed.roll_call import roll_call


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("world_size", [10**6, 10**8])
def test_the_missing_ranks_of_a_huge_world_are_summarised(world_size: int) -> None:
    environ = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    meeting = rendezvous.parse(None, world_size, 0, environ)
    with pytest.raises(DistributedError) as caught:
        roll_call(meeting, 0.0, environ)
    message = str(caught.value)
    assert message.startswith(f"Ranks 1-{world_size - 1} of WORLD_SIZE={world_size} never arrived")
    assert "rank 0 came" in message and len(message) < 1000


@pytest.mark.parametrize("host", ["256.1.1.1", "no-such-host.invalid", "bad host", "a" * 300])
def test_a_coordinator_host_that_resolves_to_nothing_is_the_librarys_error(host: str) -> None:
    environ = {"MASTER_ADDR": host, "MASTER_PORT": str(_free_port())}
    meeting = rendezvous.parse(None, 1, 0, environ)
    with pytest.raises(DistributedError, match=r"names no address .*Fix: set it to rank 0's"):
        roll_call(meeting, 5.0, environ)


@pytest.mark.slow  # starts a process: JAX's coordinator aborted it before the check
def test_world_size_1_with_an_unresolvable_master_addr_raises_instead_of_aborting() -> None:
    code = (
        "import torch2jax_device as tj\n"
        "try:\n"
        "    tj.distributed.init_process_group()\n"
        "except tj.DistributedError as err:\n"
        "    print('refused:', err)\n"
    )
    environ = dict(os.environ, MASTER_ADDR="no-such-host.invalid", MASTER_PORT=str(_free_port()))
    environ.update(RANK="0", WORLD_SIZE="1", JAX_PLATFORMS="cpu")
    result = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True,
        timeout=deadline(300),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "refused: MASTER_ADDR (or init_method's host)='no-such-host.invalid'" in result.stdout
