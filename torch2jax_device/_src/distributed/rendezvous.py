"""Who this process is in a multi-process job, read the way ``torch.distributed`` reads it.

``torchrun``, ``torch2jax-device run`` and SLURM batch scripts describe a job with
environment variables: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT``. ``init_process_group`` may get the same facts as
arguments and an ``init_method`` URL (``env://`` or ``tcp://HOST:PORT``). This module
turns either form into one validated ``Rendezvous`` and decides which local accelerators
the process owns (``roll_call`` then gathers the ranks before JAX starts).

JAX's coordinator runs on rank 0's host (``MASTER_ADDR``) at ``MASTER_PORT``, except
under torchrun, whose own store already listens on ``MASTER_PORT``
(``TORCHELASTIC_USE_AGENT_STORE=True``): there it uses ``MASTER_PORT + 1``.
``JAX_COORDINATOR_PORT`` (JAX's own variable) overrides both.

Nothing here starts JAX's backends.
"""

from __future__ import annotations

import dataclasses
import errno
import ipaddress
import math
import socket
import urllib.parse
from collections.abc import Mapping

from .. import platforms
from ..detect import is_torch_device
from ..device import Device, DeviceLike
from ..errors import DistributedError

__all__ = [
    "MAX_WAIT",
    "REACH_TIMEOUT_S",
    "REACH_VARIABLE",
    "Reach",
    "Rendezvous",
    "check_host",
    "local_device_ids",
    "open_file_limit",
    "parse",
    "reach_timeout",
    "whole_milliseconds",
    "whole_seconds",
]

#: How long a process waits for rank 0's host to answer a connection at all (accepting or
#: refusing it) before it gives up on that host: torchrun's static rendezvous reads with
#: the same 60 s. A host that refuses is up, and is waited for until the full timeout.
REACH_TIMEOUT_S = 60.0
#: The environment variable that lengthens (or shortens) ``REACH_TIMEOUT_S``, in seconds.
REACH_VARIABLE = "TORCH2JAX_DEVICE_RENDEZVOUS_TIMEOUT"
#: The most JAX's coordination service waits, in its unit (seconds to start, milliseconds
#: for a barrier): its timeouts are C++ 32-bit integers, which a longer one does not fit.
MAX_WAIT = 2**31 - 1
# Errors of a connection that reached the host: it is up, nobody listens on the port yet.
_ANSWERS = frozenset({errno.ECONNREFUSED, errno.ECONNRESET})

# Device types whose index is a CUDA/ROCm ordinal that
# jax.distributed.initialize(local_device_ids=...) can restrict a process to.
_GPU_TYPES = frozenset(
    name
    for platform in platforms.PLATFORMS
    if platform.hardware_ordinals
    for name in (platform.device_type, *platform.aliases)
)
_VISIBLE_DEVICES_VARIABLES = tuple(
    name for platform in platforms.PLATFORMS for name in platform.visible_devices_variables
)


@dataclasses.dataclass(frozen=True)
class Rendezvous:
    """Where JAX's coordinator is and who this process is.

    Attributes:
        host: The coordinator's host (``MASTER_ADDR``), which rank 0 runs on.
        port: The coordinator's TCP port.
        port_source: Where ``port`` came from, for messages (``"MASTER_PORT"``, ...).
        rank: This process's global rank (``RANK``), JAX's ``process_id``.
        world_size: How many processes the job has (``WORLD_SIZE``).
        local_rank: This process's rank on its host (``LOCAL_RANK``), or ``None``
            when the launcher did not say.
        local_world_size: Processes on this host (``LOCAL_WORLD_SIZE``), or ``None``.
    """

    host: str
    port: int
    port_source: str
    rank: int
    world_size: int
    local_rank: int | None
    local_world_size: int | None

    @property
    def coordinator_address(self) -> str:
        """``host:port`` as ``jax.distributed.initialize`` takes it (IPv6 bracketed)."""
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"{host}:{self.port}"


def parse(
    init_method: str | None, world_size: int, rank: int, environ: Mapping[str, str]
) -> Rendezvous:
    """The job description from ``init_process_group``'s arguments and the environment.

    As in torch: ``init_method=None`` means ``"env://"``, which reads ``MASTER_ADDR``
    and ``MASTER_PORT``; ``"tcp://HOST:PORT"`` names the coordinator itself. ``rank``
    and ``world_size`` come from the arguments when they are not ``-1``, else from the
    URL's query (``?rank=0&world_size=2``), else (``env://`` only) from ``RANK`` and
    ``WORLD_SIZE``. ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` are always read from the
    environment.

    Raises:
        DistributedError: something is missing, not an integer or out of range; the
            message names the variable or argument and its value.
    """
    url = urllib.parse.urlsplit("env://" if init_method is None else init_method)
    if url.scheme not in ("env", "tcp"):
        raise DistributedError(
            f"init_method {init_method!r} is not supported: JAX's processes meet at a TCP "
            "coordinator that rank 0 starts, so there is no file or store rendezvous. Fix: "
            "use 'env://' (what torchrun sets up) or 'tcp://HOST:PORT'."
        )
    query = urllib.parse.parse_qs(url.query)
    scheme, from_environment = f"{url.scheme}://", url.scheme == "env"
    resolved_rank = _job_integer("rank", rank, query, environ, "RANK", scheme, from_environment)
    resolved_size = _job_integer(
        "world_size", world_size, query, environ, "WORLD_SIZE", scheme, from_environment
    )
    if from_environment:
        host = _required(environ, "MASTER_ADDR", scheme)
        port_text, port_source = _coordinator_port(environ)
    else:
        host, port_text, port_source = _tcp_address(url, str(init_method))
    if environ.get("JAX_COORDINATOR_PORT", "").strip():
        port_text, port_source = environ["JAX_COORDINATOR_PORT"], "JAX_COORDINATOR_PORT"
    port = _integer(port_text, port_source)
    local_rank = _optional_integer(environ, "LOCAL_RANK")
    local_world_size = _optional_integer(environ, "LOCAL_WORLD_SIZE")
    _check_ranges(
        host, port, port_source, resolved_rank, resolved_size, local_rank, local_world_size
    )
    return Rendezvous(
        host, port, port_source, resolved_rank, resolved_size, local_rank, local_world_size
    )


def check_host(host: str, source: str) -> None:
    """Refuse a coordinator host that names no address (``256.1.1.1``, a typo).

    JAX's coordinator aborts the whole process (``SIGABRT``) on an address it cannot
    resolve, and a launcher would wait for ranks that can never meet; this asks the
    resolver once, first. ``source`` names where ``host`` came from (``MASTER_ADDR``).

    Raises:
        DistributedError: the name does not resolve; the message names it and the fix.
    """
    try:
        socket.getaddrinfo(host.strip("[]"), None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as err:
        reason = getattr(err, "strerror", None) or str(err) or type(err).__name__
        raise DistributedError(
            f"{source}={host!r} names no address this host can resolve ({reason}), so no "
            "process could reach JAX's coordinator there. Fix: set it to rank 0's hostname "
            "or IP address (127.0.0.1 or localhost when every process runs on this host)."
        ) from None


def reach_timeout(environ: Mapping[str, str]) -> float:
    """How long to wait for rank 0's host to answer at all: ``REACH_VARIABLE``'s seconds,
    else ``REACH_TIMEOUT_S``.

    Raises:
        DistributedError: the variable is not a positive number of seconds.
    """
    text = environ.get(REACH_VARIABLE, "").strip()
    if not text:
        return REACH_TIMEOUT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise DistributedError(
            f"{REACH_VARIABLE}={text!r} is not a number of seconds: it bounds how long a "
            "process waits for rank 0's host to answer. Fix: a positive number, e.g. "
            f"{REACH_VARIABLE}=300, or unset it for {REACH_TIMEOUT_S:g} s."
        )
    return seconds


class Reach:
    """How long rank 0's host has not answered this process's connections.

    A connection refused or reset reached the host: it is up and nobody listens on the
    port yet (rank 0 is still starting), which only the caller's own timeout bounds. A
    connection that times out, or finds no route (a host that is down, unroutable or
    behind a firewall that drops packets), got no answer; after ``seconds`` of nothing
    but those, ``failed`` raises, instead of leaving the process waiting the whole
    timeout (JAX's 300 s, torch's 30 minutes) for a host it may never reach.
    """

    def __init__(self, host: str, port: int, who: str, seconds: float, now: float) -> None:
        self.host, self.port, self.who, self.seconds = host, port, who, seconds
        self._silent_since: float | None = now

    def failed(self, error: OSError, now: float) -> bool:
        """Count one failed connection made at ``now`` (seconds of a monotonic clock);
        return whether the host answered it (refused or reset: it is up).

        Raises:
            DistributedError: the host has not answered for ``seconds``; the message
                names the host, the port, how long, the last error and the fixes.
        """
        if error.errno in _ANSWERS:
            self._silent_since = None
            return True
        if self._silent_since is None:
            self._silent_since = now
        waited = now - self._silent_since
        if waited < self.seconds:
            return False
        reason = error.strerror or str(error) or type(error).__name__
        raise DistributedError(
            f"{self.who} could not reach {self.host} on port {self.port}: for {waited:.0f} s "
            f"the host answered no connection, neither accepting nor refusing it ({reason}), as "
            "a host that is down, unroutable from here or behind a firewall that drops "
            "packets does. Fix: set MASTER_ADDR (--master-addr) to the address of rank 0's "
            f"host that this host can reach (`nc -vz {self.host} {self.port}` run here must "
            f"answer), or open the port; for a host that takes longer to come up, set "
            f"{REACH_VARIABLE} to the seconds to wait (now {self.seconds:g})."
        ) from None


def local_device_ids(
    rendezvous: Rendezvous, device_id: DeviceLike | None, environ: Mapping[str, str]
) -> list[int] | None:
    """The GPU ordinals this process owns, for ``jax.distributed.initialize``.

    ``None`` means "every GPU this process can see". The rules, first match wins:

    1. ``device_id`` (torch's argument of the same name) names a GPU: that ordinal;
       it names the CPU: ``None``.
    2. ``JAX_LOCAL_DEVICE_IDS`` is set: ``None``, so that JAX applies it.
    3. Several processes share this host (``LOCAL_WORLD_SIZE`` > 1, or
       ``LOCAL_RANK`` without ``LOCAL_WORLD_SIZE``): ``[LOCAL_RANK]``, one GPU per
       process, as ``cuda:{LOCAL_RANK}`` in a torchrun script. Unless
       ``CUDA_VISIBLE_DEVICES`` (or the ROCm equivalents) already lists fewer GPUs
       than there are processes here: then the launcher has split them and each
       process keeps what it sees.
    4. Otherwise ``None``: one process per host owns all of its GPUs, JAX's
       preferred layout.

    JAX applies the list only to CUDA and ROCm devices, so it is harmless on CPU and
    TPU hosts.
    """
    if device_id is not None:
        return _ids_from_device(device_id)
    if environ.get("JAX_LOCAL_DEVICE_IDS"):
        return None
    local_rank, local_world_size = rendezvous.local_rank, rendezvous.local_world_size
    if local_rank is None or local_world_size == 1:
        return None
    expected = local_world_size if local_world_size is not None else local_rank + 1
    for name in _VISIBLE_DEVICES_VARIABLES:
        visible = environ.get(name)
        if visible is not None and len([v for v in visible.split(",") if v.strip()]) < expected:
            return None
    return [local_rank]


def open_file_limit() -> str:
    """``"; RLIMIT_NOFILE N"``, this process's limit on open files, for a message about
    running out of them; ``""`` where there is no such limit (Windows)."""
    try:
        import resource
    except ImportError:
        return ""
    return f"; RLIMIT_NOFILE {resource.getrlimit(resource.RLIMIT_NOFILE)[0]:,}"


def whole_seconds(seconds: float) -> int:
    """``seconds`` rounded up to a whole number, at least 1 and at most ``MAX_WAIT``
    (JAX takes integer timeouts)."""
    return min(max(1, math.ceil(seconds)), MAX_WAIT)


def whole_milliseconds(seconds: float) -> int:
    """``seconds`` in whole milliseconds, at least 1 and at most ``MAX_WAIT`` (about 24.8
    days): the timeout of a barrier or a key's value in JAX's coordination service."""
    return min(max(1, math.ceil(seconds * 1000)), MAX_WAIT)


def _required(environ: Mapping[str, str], name: str, scheme: str) -> str:
    value = environ.get(name)
    if value is None or not value.strip():
        raise DistributedError(
            f"Error initializing torch2jax_device.distributed using {scheme} rendezvous: "
            f"environment variable {name} expected, but not set. Fix: launch with torchrun "
            f"or `torch2jax-device run`, which set it, or export {name} yourself."
        )
    return value.strip()


def _tcp_address(url: urllib.parse.SplitResult, init_method: str) -> tuple[str, str, str]:
    """Host, port text and port source of a ``tcp://HOST:PORT`` init_method."""
    try:
        host, port = url.hostname, url.port
    except ValueError as err:  # a port that is not a number or out of range
        raise DistributedError(f"init_method {init_method!r}: {err}.") from err
    if not host or port is None:
        raise DistributedError(
            f"init_method {init_method!r} must name the coordinator as 'tcp://HOST:PORT', "
            "e.g. 'tcp://10.1.1.20:29500'."
        )
    return host, str(port), f"init_method {init_method!r}"


def _coordinator_port(environ: Mapping[str, str]) -> tuple[str, str]:
    """The coordinator's port under ``env://`` and how to name it in messages."""
    master_port = _required(environ, "MASTER_PORT", "env://")
    if environ.get("TORCHELASTIC_USE_AGENT_STORE", "").strip().lower() != "true":
        return master_port, "MASTER_PORT"
    port = _integer(master_port, "MASTER_PORT") + 1
    return str(port), "MASTER_PORT+1, as torchrun's own store listens on MASTER_PORT"


def _job_integer(
    argument: str,
    given: int,
    query: dict[str, list[str]],
    environ: Mapping[str, str],
    variable: str,
    scheme: str,
    from_environment: bool,
) -> int:
    if isinstance(given, bool) or not isinstance(given, int):
        raise DistributedError(f"{argument} must be an int, not {type(given).__name__}.")
    if given != -1:
        return given
    if argument in query:
        return _integer(query[argument][-1], f"{argument} in the init_method query")
    if from_environment:
        return _integer(_required(environ, variable, scheme), variable)
    raise DistributedError(
        f"Error initializing torch2jax_device.distributed using {scheme} rendezvous: "
        f"{argument.replace('_', ' ')} parameter missing. Fix: pass {argument}= to "
        f"init_process_group or add ?{argument}=N to init_method."
    )


def _integer(text: str, where: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise DistributedError(f"{text!r} ({where}) is not an integer.") from None


def _optional_integer(environ: Mapping[str, str], name: str) -> int | None:
    value = environ.get(name)
    return None if value is None or not value.strip() else _integer(value, name)


def _check_ranges(
    host: str,
    port: int,
    port_source: str,
    rank: int,
    world_size: int,
    local_rank: int | None,
    local_world_size: int | None,
) -> None:
    if not 1 <= port <= 65535:
        raise DistributedError(
            f"Port {port} ({port_source}) is not a TCP port: use a free port between 1024 "
            "and 65535 that every process agrees on."
        )
    if world_size < 1:
        raise DistributedError(f"WORLD_SIZE (world_size) must be at least 1, got {world_size}.")
    if not 0 <= rank < world_size:
        raise DistributedError(
            f"RANK (rank) must be in [0, {world_size - 1}] for WORLD_SIZE={world_size}, got "
            f"{rank}. Every process needs a different rank below the world size."
        )
    if local_rank is not None and local_rank < 0:
        raise DistributedError(f"LOCAL_RANK must not be negative, got {local_rank}.")
    if local_world_size is not None and local_world_size < 1:
        raise DistributedError(f"LOCAL_WORLD_SIZE must be at least 1, got {local_world_size}.")
    if local_rank is not None and local_world_size is not None and local_rank >= local_world_size:
        raise DistributedError(
            f"LOCAL_RANK={local_rank} must be below LOCAL_WORLD_SIZE={local_world_size}."
        )
    if local_world_size is not None and local_world_size > world_size:
        raise DistributedError(
            f"LOCAL_WORLD_SIZE={local_world_size} is larger than WORLD_SIZE={world_size}."
        )
    if world_size > 1 and _is_loopback(host) and local_world_size not in (None, world_size):
        raise DistributedError(
            f"MASTER_ADDR={host} is a loopback address, which only processes on the "
            f"coordinator's host can reach, but LOCAL_WORLD_SIZE={local_world_size} says "
            f"only part of the WORLD_SIZE={world_size} processes run here. Fix: set "
            "MASTER_ADDR to rank 0's hostname or IP address for a multi-host job."
        )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _ids_from_device(device_id: DeviceLike) -> list[int] | None:
    if isinstance(device_id, int) and not isinstance(device_id, bool):
        if device_id < 0:
            raise DistributedError(f"device_id must not be negative, got {device_id}.")
        return [device_id]
    if not isinstance(device_id, (str, Device)) and not is_torch_device(device_id):
        raise DistributedError(
            f"device_id must be an int, a device string or a torch/tj device naming this "
            f"process's device, not {type(device_id).__name__}."
        )
    device = Device(device_id)
    if device.type == "cpu":
        return None
    if device.type not in _GPU_TYPES or device.index is None:
        raise DistributedError(
            f"device_id={str(device)!r} must name one GPU with its index, e.g. "
            "'cuda:0', or the CPU."
        )
    return [device.index]
