"""What ``torch2jax-device run`` takes over from torchrun: its workers' environment, and
every option of its command line, taken with torchrun's meaning or refused with the fix.

A torchrun command line copied to ``torch2jax-device run`` must start the job torchrun
would start, or stop before any worker starts saying which option cannot work here and
what to write instead; never argparse's bare "unrecognized arguments".
``tests/unit/test_distributed_launcher_torchrun_forms.py`` reads torchrun's own parser
and checks every option it has; ``tests/unit/test_launcher_fuzz.py`` draws whole command
lines from it and compares what torchrun would launch with ``run.plan``'s plan.
"""

from __future__ import annotations

import argparse
import os
import uuid
from collections.abc import Callable
from typing import Any

__all__ = [
    "add_torchrun_options",
    "environment_default",
    "from_environment",
    "nnodes",
    "nproc_per_node",
    "refused_option",
    "run_id",
    "settle_rendezvous",
    "worker_environment",
]

# torchrun's c10d endpoint port, and its --master-port default (a static rendezvous
# over several hosts).
C10D_PORT = 29400
STATIC_PORT = 29500
# The highest rendezvous port: JAX's coordinator takes the next one.
MAX_PORT = 65534

# torchrun's options that change nothing here: option -> (what tj's launcher does
# instead, the value torchrun's parser takes).
_IGNORED: dict[str, tuple[str, dict[str, Any]]] = {
    "--monitor-interval": ("the launcher watches its workers every 0.05 s", {"type": float}),
    "--start-method": (
        "each worker is a fresh Python process running the script, as under torchrun for a script",
        {"choices": ["spawn", "fork", "forkserver"]},
    ),
}
# torchrun's options that cannot work here: option -> (nargs, why, fix).
_REFUSED: dict[str, tuple[str | int | None, str, str]] = {
    "--rdzv-conf": (None, "its rendezvous settings belong to torch's elastic agent",
                    "drop it (the join's timeout is init_process_group(timeout=...))"),
    "--event-log-handler": (None, "torch's elastic events are not emitted", "drop it"),
    "--no-python": (0, "workers always run a Python script or module", "drop it"),
    "--run-path": (0, "each worker is its own process, not runpy in the launcher",
                   "drop it"),
    "--log-dir": (None, "output is relayed to the launcher's stdout and stderr",
                  "redirect the launcher's output (> job.log 2>&1); lines carry [rankN]:"),
    "--redirects": (None, "output is relayed, not redirected to files",
                    "redirect the launcher's output; lines carry [rankN]:"),
    "--tee": (None, "output is relayed, not copied to files",
              "pipe the launcher's output through tee; lines carry [rankN]:"),
    "--local-ranks-filter": (None, "every rank's output is relayed",
                             "filter the [rankN]: lines (grep '^\\[rank0\\]')"),
    "--duplicate-stdout-filters": (None, "output is not duplicated to files",
                                   "filter the launcher's output"),
    "--duplicate-stderr-filters": (None, "output is not duplicated to files",
                                   "filter the launcher's output"),
    "--local-addr": (None, "the launcher binds no address of its own but --master-addr",
                     "drop it"),
    "--logs-specs": (None, "torch's log specs are not read", "drop it"),
    "--numa-binding": (None, "workers are not bound to CPUs",
                       "bind them yourself (numactl in a wrapper script)"),
    "--signals-to-handle": (None, "SIGINT, SIGTERM and SIGHUP are forwarded, always",
                            "drop it"),
    "--shutdown-timeout": (None, "the wait before SIGKILL is tj's own option",
                           "--grace-period SECONDS"),
    "--virtual-local-rank": (0, "each worker sees LOCAL_RANK as its index on the host",
                             "drop it, or set CUDA_VISIBLE_DEVICES in a wrapper script"),
}  # fmt: skip
# Values of those options that are torchrun's defaults, so change nothing there either:
# taken (``-r 0``: no file gets a worker's output, as here).
_TORCHRUN_DEFAULTS = {
    "--rdzv-conf": "", "--event-log-handler": "null", "--redirects": "0", "--tee": "0",
    "--local-ranks-filter": "",
}  # fmt: skip
_SHORT = {"--redirects": "-r", "--tee": "-t"}


def add_torchrun_options(parser: argparse.ArgumentParser) -> None:
    """torchrun's options that ``run`` does not own, each with torchrun's spellings, its
    type and its ``PET_<NAME>`` default (``environment_default``)."""
    for option, (meaning, target) in {
        "--rdzv-backend": ("static or c10d: one rendezvous either way", "rdzv_backend"),
        "--rdzv-endpoint": ("HOST[:PORT] of rank 0's host (c10d's PORT: 29400)",
                            "rdzv_endpoint"),
        "--rdzv-id": ("the job's TORCHELASTIC_RUN_ID", "rdzv_id"),
        "--role": ("the workers' ROLE_NAME (default 'default')", "role"),
    }.items():  # fmt: skip
        parser.add_argument(
            *_spellings(option), dest=target, default=environment_default(target), help=meaning
        )
    parser.add_argument(
        *_spellings("--max-restarts"),
        dest="max_restarts",
        type=from_environment(int),
        default=environment_default("max_restarts"),
        help="0: workers are never restarted",
    )
    for option, (why, kind) in _IGNORED.items():
        taken: dict[str, Any] = {
            key: from_environment(value) if key == "type" else value for key, value in kind.items()
        }
        parser.add_argument(
            *_spellings(option),
            dest=_dest(option),
            default=environment_default(_dest(option)),
            help=f"accepted: {why}",
            **taken,
        )
    for option, (nargs, why, _) in _REFUSED.items():
        flag = nargs == 0
        parser.add_argument(
            *_spellings(option),
            dest=_dest(option),
            default=environment_default(_dest(option), flag=flag),
            help=f"refused: {why}",
            **({"action": "store_true"} if flag else {"nargs": nargs} if nargs else {}),
        )


def environment_default(dest: str, default: Any = None, *, flag: bool = False) -> Any:
    """An option's default as torchrun reads it: ``PET_<NAME>`` where set (its
    ``argparse_util.env``; Kubeflow's PyTorchJob sets ``PET_NNODES``, ``PET_NODE_RANK``,
    ``PET_MASTER_ADDR``, ...), else ``default``. A flag's ``PET_<NAME>`` is a number,
    true unless 0. A value read is parsed as one given on the command line (argparse
    parses a string default with the option's type), so a bad one is refused naming the
    option. ``PET_NPROC_PER_NODE=2``: ``--nproc-per-node`` is 2 unless given."""
    name = f"PET_{dest.removeprefix('torchrun_').upper()}"
    text = os.environ.get(name)
    if text is None:
        return default
    if flag:
        try:
            return bool(int(text))
        except ValueError:
            return True  # torchrun fails to start on it
    return _FromEnvironment(name, text)


class _FromEnvironment(str):
    """A default read from ``PET_<NAME>``: a refusal of it names the variable."""

    variable: str

    def __new__(cls, variable: str, text: str) -> _FromEnvironment:
        value = super().__new__(cls, text)
        value.variable = variable
        return value


def from_environment(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """An option's ``type``, whose refusal of a value read from ``PET_<NAME>`` says so
    (the option was not on the command line): ``PET_NPROC_PER_NODE=gpu`` is refused
    naming ``PET_NPROC_PER_NODE``."""

    def checked(text: str) -> Any:
        try:
            return convert(text)
        except (argparse.ArgumentTypeError, ValueError) as error:
            if not isinstance(text, _FromEnvironment):
                raise
            why = str(error) if isinstance(error, argparse.ArgumentTypeError) else "invalid"
            raise argparse.ArgumentTypeError(
                f"{text.variable}={str(text)!r}, torchrun's default for this option, is "
                f"refused: {why}. Fix: unset {text.variable}, or set it to a value the "
                "option takes"
            ) from None

    checked.__name__ = getattr(convert, "__name__", "value")  # argparse's "invalid int value"
    return checked


def refused_option(args: argparse.Namespace) -> str | None:
    """Why an option given cannot work here, with the fix; ``None`` when all can."""
    for option, (_, why, fix) in _REFUSED.items():
        value = getattr(args, _dest(option))
        if value not in (None, False) and value != _TORCHRUN_DEFAULTS.get(option):
            where = _from_environment(option)
            return f"torchrun's {option} is not supported{where}: {why}. Fix: {fix}."
    if args.max_restarts not in (None, 0):
        return (
            f"torchrun's --max-restarts {args.max_restarts} is not supported"
            f"{_from_environment('--max-restarts')}: a failed worker stops the job, which is "
            "never restarted. Fix: --max-restarts 0 (or drop it), and restart the job from "
            "its last checkpoint in the script that runs the launcher."
        )
    if args.standalone:
        return None  # torchrun's --standalone replaces the rendezvous options
    if args.rdzv_backend not in (None, "static", "c10d"):
        return (
            f"torchrun's --rdzv-backend {args.rdzv_backend} is not supported: the workers meet "
            "at rank 0's host. Fix: --rdzv-backend c10d (or static) with --rdzv-endpoint "
            "HOST:PORT of rank 0's host, or --master-addr and --master-port."
        )
    if args.rdzv_endpoint:
        host, port = _endpoint(args)
        if not host or port is None or not 0 <= port <= MAX_PORT:
            return (
                f"--rdzv-endpoint {args.rdzv_endpoint!r} is not HOST:PORT with a port from 0 "
                f"to {MAX_PORT} (JAX's coordinator takes PORT + 1). Fix: name rank 0's host "
                "and a port, as --rdzv-endpoint 10.0.0.1:29400."
            )
    return None


def _from_environment(option: str) -> str:
    name = "PET_" + option[2:].replace("-", "_").upper()
    if name not in os.environ:
        return ""
    return f" ({name} is set: torchrun reads it as the option's default)"


def _endpoint(args: argparse.Namespace) -> tuple[str, int | None]:
    """``--rdzv-endpoint``'s host and port (c10d's default 29400; ``None``: not a port)."""
    text = args.rdzv_endpoint.strip()
    host, colon, port = text.rpartition(":")
    if not colon or (text.startswith("[") and not host.endswith("]")):  # no port, or IPv6
        host, port = text, "" if args.rdzv_backend != "c10d" else str(C10D_PORT)
    return host.strip("[]"), int(port) if port.isdigit() else None


def settle_rendezvous(args: argparse.Namespace) -> None:
    """Where the hosts meet and the run's id, as torchrun 2.13's ``run`` decides them
    (``refused_option`` has passed): ``--standalone``, or a one-host job that names no
    endpoint, no port and no backend, meets on a free port of this host under a fresh
    run id (torchrun then ignores ``--master-port``, ``--rdzv-endpoint`` and
    ``--rdzv-id``, and meets at localhost; here at ``--master-addr``, which ``run.plan``
    checks is this host's); else at ``--rdzv-endpoint HOST:PORT`` where
    given (over ``--master-addr`` and ``--master-port``), else at c10d's
    ``localhost:29400``, or at ``--master-addr:--master-port``. Afterwards
    ``master_port`` ``None`` is a free port (with several hosts and none given, 29500,
    torchrun's default), ``rdzv_id`` ``None`` a fresh id."""
    backend = args.rdzv_backend or "static"
    if args.standalone or (
        backend == "static" and not args.rdzv_endpoint and args.master_port is None
        and args.nnodes == 1
    ):  # fmt: skip
        args.rdzv_backend, args.master_port, args.rdzv_id = "c10d", None, None
        return
    args.rdzv_backend = backend
    if args.rdzv_id is None:
        args.rdzv_id = "none"  # torchrun's default
    if args.rdzv_endpoint:
        host, port = _endpoint(args)
        args.master_addr = "127.0.0.1" if host == "localhost" else host
        args.master_port = port or None
    elif backend == "c10d":
        args.master_addr, args.master_port = "127.0.0.1", C10D_PORT
    elif args.master_port is None:  # several hosts, static: torchrun's --master-port default
        args.master_port = STATIC_PORT


def nnodes(text: str) -> int:
    """``--nnodes``: ``N``, or torchrun's range ``N:N``; an elastic ``N:M`` is refused."""
    low, _, high = text.partition(":")
    try:
        count = int(low)
        top = int(high) if high else count
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of hosts: {text!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    if top != count:
        raise argparse.ArgumentTypeError(
            f"{text} is an elastic range (between {count} and {top} hosts), which is not "
            "supported: the job has a fixed number of hosts. Fix: --nnodes N, the hosts "
            "the job runs on"
        )
    return count


def nproc_per_node(text: str) -> int:
    """``--nproc-per-node``: a number, or torchrun's ``cpu`` (one per CPU this process
    may run on, as ``torch._utils.cpu_count``: a container's or ``taskset``'s, not the
    machine's); ``gpu``, ``xpu`` and ``auto`` are refused: counting GPUs would start JAX
    in the launcher."""
    if text == "cpu":
        if hasattr(os, "sched_getaffinity"):
            return len(os.sched_getaffinity(0))
        return os.cpu_count() or 1
    if text in ("gpu", "xpu", "auto"):
        raise argparse.ArgumentTypeError(
            f"torchrun's {text!r} (one process per accelerator) is not supported: the "
            "launcher does not open the accelerators to count them. Fix: pass the number, "
            "e.g. --nproc-per-node $(nvidia-smi -L | wc -l)"
        )
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(
            f"must be at least 1, got {text}: no worker would start. Fix: the number of "
            "processes on this host"
        )
    return count


def run_id(args: argparse.Namespace) -> str:
    """The job's ``TORCHELASTIC_RUN_ID``, as torchrun gives it (``settle_rendezvous``
    has run): ``--rdzv-id`` (``"none"`` by default), or a fresh UUID for a job on a
    free port (``--standalone``, or one host and no port)."""
    return str(uuid.uuid4()) if args.rdzv_id is None else str(args.rdzv_id)


def worker_environment(
    args: argparse.Namespace, local_rank: int, port: int, run_id: str
) -> dict[str, str]:
    """What torchrun 2.13's agent puts in a worker's environment (its
    ``LocalElasticAgent._start_workers``), with the same values: ranks, sizes, the
    rendezvous address, the elastic run's id and counts (one worker group, role
    ``--role``, no restarts), so ``torch.distributed.is_torchelastic_launched()`` is True
    and scripts that read ``GROUP_WORLD_SIZE`` or ``ROLE_RANK`` see torchrun's answers.
    ``OMP_NUM_THREADS`` is 1 for several workers per host unless set, as torchrun sets
    it (each torch CPU op then uses one thread per worker)."""
    rank = args.node_rank * args.nproc_per_node + local_rank
    world_size = args.nnodes * args.nproc_per_node
    env = {
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "GROUP_RANK": str(args.node_rank),
        "ROLE_RANK": str(rank),
        "ROLE_NAME": args.role if args.role is not None else "default",
        "LOCAL_WORLD_SIZE": str(args.nproc_per_node),
        "WORLD_SIZE": str(world_size),
        "GROUP_WORLD_SIZE": str(args.nnodes),
        "ROLE_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": args.master_addr,
        "MASTER_PORT": str(port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    }
    if args.nproc_per_node > 1 and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = "1"
    return env


def _spellings(option: str) -> list[str]:
    """torchrun's spellings of an option: dashes, underscores, and a short form."""
    names = [option, "--" + option[2:].replace("-", "_")]
    return [*dict.fromkeys(names), *([_SHORT[option]] if option in _SHORT else [])]


def _dest(option: str) -> str:
    return "torchrun_" + option[2:].replace("-", "_")
