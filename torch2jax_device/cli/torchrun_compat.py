"""What ``torch2jax-device run`` takes over from torchrun: its workers' environment, and
every option of its command line, taken with torchrun's meaning or refused with the fix.

A torchrun command line copied to ``torch2jax-device run`` must start the job torchrun
would start, or stop before any worker starts saying which option cannot work here and
what to write instead; never argparse's bare "unrecognized arguments".
``tests/unit/test_distributed_launcher_torchrun_forms.py`` reads torchrun's own parser
and checks every option it has.
"""

from __future__ import annotations

import argparse
import os
import uuid
from typing import Any

__all__ = [
    "add_torchrun_options",
    "apply_rendezvous",
    "nnodes",
    "nproc_per_node",
    "refused_option",
    "run_id",
    "worker_environment",
]

# torchrun's options that change nothing here: (option, what tj's launcher does instead).
_IGNORED = {
    "--monitor-interval": "the launcher watches its workers every 0.05 s",
    "--start-method": "each worker is a fresh Python process running the script, as under "
    "torchrun for a script",
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
_SHORT = {"--redirects": "-r", "--tee": "-t"}


def add_torchrun_options(parser: argparse.ArgumentParser) -> None:
    """torchrun's options that ``run`` does not own, each with torchrun's spellings."""
    for option, (meaning, target) in {
        "--rdzv-backend": ("static or c10d: one rendezvous either way", "rdzv_backend"),
        "--rdzv-endpoint": ("HOST:PORT of rank 0's host: --master-addr and --master-port",
                            "rdzv_endpoint"),
        "--rdzv-id": ("the job's TORCHELASTIC_RUN_ID", "rdzv_id"),
        "--role": ("the workers' ROLE_NAME (default 'default')", "role"),
        "--max-restarts": ("0: workers are never restarted", "max_restarts"),
    }.items():  # fmt: skip
        parser.add_argument(*_spellings(option), dest=target, default=None, help=meaning)
    for option, why in _IGNORED.items():
        parser.add_argument(
            *_spellings(option), dest=_dest(option), default=None, help=f"accepted: {why}"
        )
    for option, (nargs, why, _) in _REFUSED.items():
        kind: dict[str, Any] = (
            {"action": "store_true"} if nargs == 0 else {"nargs": nargs} if nargs else {}
        )
        parser.add_argument(
            *_spellings(option), dest=_dest(option), default=None, help=f"refused: {why}", **kind
        )


def refused_option(args: argparse.Namespace) -> str | None:
    """Why an option given cannot work here, with the fix; ``None`` when all can."""
    for option, (_, why, fix) in _REFUSED.items():
        if getattr(args, _dest(option)) not in (None, False):
            return f"torchrun's {option} is not supported: {why}. Fix: {fix}."
    if args.max_restarts not in (None, "0"):
        return (
            f"torchrun's --max-restarts {args.max_restarts} is not supported: a failed worker "
            "stops the job, which is never restarted. Fix: --max-restarts 0 (or drop it), and "
            "restart the job from its last checkpoint in the script that runs the launcher."
        )
    if args.rdzv_backend not in (None, "static", "c10d"):
        return (
            f"torchrun's --rdzv-backend {args.rdzv_backend} is not supported: the workers meet "
            "at rank 0's host. Fix: --rdzv-backend c10d (or static) with --rdzv-endpoint "
            "HOST:PORT of rank 0's host, or --master-addr and --master-port."
        )
    if args.rdzv_endpoint is not None:
        host, _, port = args.rdzv_endpoint.rpartition(":")
        if not host or not port.isdigit():
            return (
                f"--rdzv-endpoint {args.rdzv_endpoint!r} is not HOST:PORT. Fix: name rank 0's "
                "host and a port, as --rdzv-endpoint 10.0.0.1:29400."
            )
    return None


def apply_rendezvous(args: argparse.Namespace) -> None:
    """``--rdzv-endpoint HOST:PORT`` is rank 0's host and port, as ``--master-addr`` and
    ``--master-port`` say (those win where given too)."""
    if args.rdzv_endpoint is None:
        return
    host, _, port = args.rdzv_endpoint.rpartition(":")
    if args.master_addr == "127.0.0.1":
        args.master_addr = host.strip("[]") if host not in ("localhost",) else "127.0.0.1"
    if args.master_port is None and int(port) != 0:
        args.master_port = int(port)


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
    """``--nproc-per-node``: a number, or torchrun's ``cpu`` (one per CPU core); ``gpu``,
    ``xpu`` and ``auto`` are refused: counting GPUs would start JAX in the launcher."""
    if text == "cpu":
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
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return count


def run_id(args: argparse.Namespace) -> str:
    """The job's ``TORCHELASTIC_RUN_ID``, as torchrun gives it: ``--rdzv-id`` where given,
    else a fresh UUID for a job on one host that names no port (``--standalone``, or no
    ``--master-port``), else torchrun's default ``--rdzv-id``, ``"none"``."""
    if args.rdzv_id is not None:
        return str(args.rdzv_id)
    if args.standalone or (args.nnodes == 1 and args.master_port is None):
        return str(uuid.uuid4())
    return "none"


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
