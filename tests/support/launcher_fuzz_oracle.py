"""The launcher fuzzer's judge: what torchrun would start for a line, and what
``torch2jax-device run`` plans for it, compared; no worker starts on either side.

torchrun's side is torch itself: ``torch.distributed.run.parse_args`` and ``run`` (its
``--standalone`` and one-host rewrites, the default port, ``config_from_args``), with
``elastic_launch`` replaced by a recorder, so the oracle is the ``LaunchConfig`` and the
worker command torch would launch. The workers' environment follows from it as torchrun
2.13's agent sets it for one role on hosts of equal size (``LocalElasticAgent``'s
``_start_workers`` and ``_assign_worker_ranks``: ``RANK = GROUP_RANK * nproc +
LOCAL_RANK``, ...); the slow tests of ``test_distributed_launcher_torchrun_forms`` check
that model against real torchrun workers. tj's side is the command line's own parser
(``torch2jax_device.cli``) and ``run.plan``, the function the launcher starts from.

For each line: both refuse it; or tj refuses it with its own message, naming an option
and the fix; or both take it and plan the same world, ranks, rendezvous, run id, command
and environment; or a row of ``DIFFERENCES`` (each on the ``run`` section of
``docs/cli.md``) says why not. Anything else is a finding.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import io
import logging
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from tests.support import fuzz_runs, launcher_fuzz
from tests.support.fuzz_runs import Different, Explained, Row
from tests.support.launcher_fuzz import Line
from torch2jax_device import cli
from torch2jax_device.cli import run as tj_run
from torch2jax_device.cli import torchrun_compat

DOCS = "docs/cli.md"
DIFFERENCES = (
    Row(
        "c10d-master-addr",
        "under a c10d rendezvous (--standalone too) torchrun's workers get MASTER_ADDR "
        "= the FQDN of rank 0's host (or its --local-addr), tj's the endpoint's host, "
        "the same host by the name the command line gave",
        "the endpoint's host as `MASTER_ADDR`",
    ),
    Row(
        "c10d-master-port",
        "under a c10d rendezvous at an endpoint with a port, torchrun's workers get "
        "MASTER_PORT = another free port of rank 0's host, tj's the endpoint's port (where "
        "tj's launcher hosts torch's store; JAX's coordinator takes the next)",
        "the endpoint's port as `MASTER_PORT`",
    ),
    Row(
        "c10d-host-order",
        "a c10d rendezvous of several hosts: torchrun numbers the hosts in the order "
        "they join (--node-rank ignored); tj takes each host's --node-rank",
        "numbers the hosts in the order they join",
    ),
    Row(
        "one-host-master-addr",
        "--standalone, or one host and no port: torchrun meets at localhost whatever "
        "--master-addr says; tj meets at --master-addr, refused unless it is this host's",
        "meets at `--master-addr` (refused unless",
    ),
    Row(
        "localhost",
        "a rendezvous host named localhost is 127.0.0.1 for tj's workers",
        "`localhost` is `127.0.0.1`",
    ),
)
#: The workers compared on a host: the first few local ranks (the rest follow the rule).
RANKS = 3
#: A port chosen free when the job starts (torchrun's ``localhost:0``, tj's default).
FREE = "<free>"
#: A run id made fresh for each job (a UUID, torchrun's and tj's alike).
FRESH = "<fresh uuid>"
#: A c10d host's rank, given in order of joining (torchrun ignores the line's
#: --node-rank; tj takes it: a row) or where the line names none (tj must refuse).
JOINED, AS_THEY_JOIN = "<as hosts join; --node-rank given>", "<as hosts join>"
#: The port torchrun's rank 0 agent picks for MASTER_PORT under a c10d endpoint.
PICKED = "<a free port rank 0's agent picks>"
#: rank 0's host under a c10d rendezvous, as torchrun's workers name it.
FQDN = "<rank 0's FQDN>"
#: argparse's own messages: a refusal that is one of these names no fix.
_ARGPARSE = ("unrecognized arguments", "ambiguous option", "expected one argument",
             "invalid choice", "the following arguments are required", "invalid int value",
             "invalid float value", "ignored explicit argument")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a launcher starts for a line, in words both launchers share."""

    nnodes: tuple[int, int]
    nproc: int
    backend: str
    #: Where the hosts meet: (host, port or FREE).
    rendezvous: tuple[str, str]
    run_id: str
    #: ``("-m", module, *args)`` or ``(script, *args)``: the worker's ``sys.argv``.
    command: tuple[str, ...]
    #: The first ``RANKS`` workers' variables (of the ones torchrun's agent sets).
    environments: tuple[dict[str, str], ...]


class Finding(fuzz_runs.Finding):
    @property
    def kind(self) -> tuple[str, ...]:
        return (self.aspect,)


class Tally:
    """What a run's lines did: refused by both, by tj alone (by the option it names),
    planned alike, and the rows that explained a difference."""

    def __init__(self) -> None:
        self.examples = 0
        self.both_refused = 0
        self.alike = 0
        self.tj_refused: collections.Counter[str] = collections.Counter()
        self.explained: collections.Counter[str] = collections.Counter()


# --- both sides ----------------------------------------------------------------------------


@contextlib.contextmanager
def _where_judged(line: Line, folder: Path) -> Iterator[None]:
    """In ``folder`` (``train.py`` and the package ``pkg`` are there), with the line's
    variables and no other ``PET_*`` or drawn ones; the environment restored after
    (torchrun sets ``OMP_NUM_THREADS`` in its own)."""
    saved, here = dict(os.environ), os.getcwd()
    for name in [n for n in os.environ if n.startswith("PET_") or n in launcher_fuzz.ENVIRONMENT]:
        del os.environ[name]
    os.environ.update(line.env)
    os.chdir(folder)  # contextlib.chdir is Python 3.11's
    try:
        yield
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(saved)


def workspace(folder: Path) -> Path:
    """``folder`` with what lines name: ``train.py`` and the module ``pkg.train``."""
    (folder / "train.py").write_text("")
    (folder / "pkg").mkdir(exist_ok=True)
    (folder / "pkg" / "__init__.py").write_text("")
    (folder / "pkg" / "train.py").write_text("")
    return folder


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def torchrun_plan(line: Line) -> Plan | str:
    """What torchrun would launch for ``line``, or ``"refused: why"``."""
    import torch.distributed.run as torchrun
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

    recorded: dict[str, Any] = {}

    def launch(config: Any, entrypoint: Any) -> Any:
        recorded.update(config=config, entrypoint=entrypoint)
        return lambda *args: recorded.update(args=args)

    err = io.StringIO()
    inherited = set(os.environ)  # the workers' too: compared are the variables torchrun adds
    try:
        with (
            contextlib.redirect_stderr(err),
            _quiet_torchrun(),
            mock.patch.multiple(torchrun, elastic_launch=launch),
            mock.patch("torch.multiprocessing._set_thread_name"),
        ):
            args = torchrun.parse_args(list(line.argv))
            given_id = args.rdzv_id
            torchrun.run(args)
    except SystemExit:
        return f"refused: {_last_line(err.getvalue())}"
    except Exception as error:
        return f"refused: {type(error).__name__}: {error}"
    config, entrypoint, command = recorded["config"], recorded["entrypoint"], recorded["args"]
    if entrypoint != os.getenv("PYTHON_EXEC", sys.executable):  # --no-python, --run-path
        command = ("<not python>", *command)
    else:
        command = command[1:]  # -u: unbuffered, as tj's PYTHONUNBUFFERED=1
    backend = config.rdzv_backend
    host, port = parse_rendezvous_endpoint(
        config.rdzv_endpoint, -1 if backend == "static" else 29400
    )
    nnodes = (config.min_nodes, config.max_nodes)
    group_rank: int | str = args.node_rank
    if backend != "static":  # c10d numbers the hosts as they join
        group_rank = 0 if nnodes[1] == 1 else JOINED if _names_node_rank(line) else AS_THEY_JOIN
    run_id = FRESH if config.run_id != given_id else config.run_id
    environments = tuple(
        {
            name: value
            for name, value in _torchrun_environment(
                config, group_rank, local_rank, host, port, run_id
            ).items()
            if name not in inherited or name in _AGENT_SETS
        }
        for local_rank in range(min(config.nproc_per_node, RANKS))
    )
    return Plan(
        nnodes, config.nproc_per_node, backend,
        (host, FREE if port == 0 else str(port)), run_id, tuple(command), environments,
    )  # fmt: skip


@contextlib.contextmanager
def _quiet_torchrun() -> Iterator[None]:
    logger = logging.getLogger("torch.distributed.run")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


#: What torchrun's agent sets whatever the launcher's environment holds.
_AGENT_SETS = frozenset({
    "RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
    "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
})  # fmt: skip


def _names_node_rank(line: Line) -> bool:
    """Whether the line (or ``PET_NODE_RANK``) gives the host's rank."""
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.set_defaults(node_rank=None)
    with contextlib.redirect_stderr(io.StringIO()):
        given = parser.parse_args(list(line.argv)).node_rank
    return given is not None or "PET_NODE_RANK" in os.environ


def _torchrun_environment(
    config: Any, group_rank: int | str, local_rank: int, host: str, port: int, run_id: str
) -> dict[str, str]:
    """torchrun 2.13's agent's variables for a worker (one role, hosts of equal size);
    the ranks are ``group_rank`` (JOINED, AS_THEY_JOIN) where the hosts are numbered as
    they join."""
    nproc, nnodes = config.nproc_per_node, config.min_nodes
    rank = group_rank if isinstance(group_rank, str) else str(group_rank * nproc + local_rank)
    env = {
        "RANK": rank,
        "LOCAL_RANK": str(local_rank),
        "GROUP_RANK": str(group_rank),
        "ROLE_RANK": rank,
        "ROLE_NAME": config.role,
        "LOCAL_WORLD_SIZE": str(nproc),
        "WORLD_SIZE": str(nnodes * nproc),
        "GROUP_WORLD_SIZE": str(nnodes),
        "ROLE_WORLD_SIZE": str(nnodes * nproc),
        "MASTER_ADDR": host if config.rdzv_backend == "static" else FQDN,
        "MASTER_PORT": FREE
        if port == 0
        else str(port)
        if config.rdzv_backend == "static"
        else PICKED,
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": str(config.max_restarts),
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    }
    if "OMP_NUM_THREADS" in os.environ:  # set by config_from_args for several workers
        env["OMP_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"]
    return env


def tj_plan(line: Line) -> Plan | str:
    """What ``torch2jax-device run`` plans for ``line``, or ``"refused: why"``."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = cli._parser([tj_run]).parse_args(["run", *line.argv])
    except SystemExit:
        return f"refused: {_last_line(err.getvalue())}"
    problem = tj_run.plan(args)
    if problem:
        return f"refused: {problem}"
    run_id = torchrun_compat.run_id(args)
    if run_id != torchrun_compat.run_id(args):
        run_id = FRESH
    port = FREE if args.master_port is None else str(args.master_port)
    environments = []
    for local_rank in range(min(args.nproc_per_node, RANKS)):
        env = torchrun_compat.worker_environment(args, local_rank, 0, run_id)
        env["MASTER_PORT"] = port
        environments.append(env)
    return Plan(
        (args.nnodes, args.nnodes), args.nproc_per_node, args.rdzv_backend or "static",
        (args.master_addr, port), run_id, tuple(tj_run.script_command(args)[1:]),
        tuple(environments),
    )  # fmt: skip


# --- the judge -----------------------------------------------------------------------------


def judge(line: Line, tally: Tally | None = None, folder: Path | None = None) -> list[Finding]:
    """The line's finding, if any (none when the plans agree or a row explains them)."""
    where = folder or _default_folder()
    return fuzz_runs.outcome(
        line, lambda drawn, count: _judge(drawn, count, where), tally, Finding, crashes=True
    )


def _judge(line: Line, tally: Tally | None, folder: Path) -> None:
    with _where_judged(line, folder):
        theirs = torchrun_plan(line)
    with _where_judged(line, folder):
        ours = tj_plan(line)
    if isinstance(theirs, str):
        if not isinstance(ours, str):
            raise Different("taken, torchrun refuses", "the line", theirs, "taken")
        if tally is not None:
            tally.both_refused += 1
        return
    if isinstance(ours, str):
        _check_refusal(ours)
        if tally is not None:
            tally.tj_refused[_named_option(ours)] += 1
        return
    _compare(theirs, ours)
    if tally is not None:
        tally.alike += 1


def _named_option(message: str) -> str:
    found = re.search(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", message)
    return found.group(1) if found else ""


def _check_refusal(message: str) -> None:
    """tj's refusal of a line torchrun takes: its own words, an option and the fix."""
    if any(phrase in message for phrase in _ARGPARSE):
        raise Different("refused in argparse's words", "the refusal", "taken", message)
    if not _named_option(message) or "fix" not in message.lower():
        raise Different("refused without the option and the fix", "the refusal", "taken", message)


def _compare(theirs: Plan, ours: Plan) -> None:
    rows = []
    for field in ("nnodes", "nproc", "command", "run_id"):
        if getattr(theirs, field) != getattr(ours, field):
            raise Different(field, field, getattr(theirs, field), getattr(ours, field))
    host, port = theirs.rendezvous
    if host == "localhost" and ours.rendezvous[0] == "127.0.0.1":
        host = "127.0.0.1"
        rows.append("localhost")
    if host == "localhost" and theirs.backend == "c10d" and port == FREE == ours.rendezvous[1]:
        host = ours.rendezvous[0]
        rows.append("one-host-master-addr")
    if (host, port) != ours.rendezvous:
        raise Different("rendezvous", "host:port", theirs.rendezvous, ours.rendezvous)
    if len(theirs.environments) != len(ours.environments):
        raise Different("workers", "local ranks", len(theirs.environments), len(ours.environments))
    pairs = zip(theirs.environments, ours.environments, strict=True)
    for local_rank, (them, us) in enumerate(pairs):
        them = dict(them)
        if them["MASTER_ADDR"] == FQDN:
            them["MASTER_ADDR"] = us["MASTER_ADDR"]
            rows.append("c10d-master-addr")
        elif them["MASTER_ADDR"] == "localhost" and us["MASTER_ADDR"] == "127.0.0.1":
            them["MASTER_ADDR"] = "127.0.0.1"
            rows.append("localhost")
        if them["MASTER_PORT"] == PICKED:
            them["MASTER_PORT"] = us["MASTER_PORT"]
            rows.append("c10d-master-port")
        if them["GROUP_RANK"] == JOINED:
            for name in ("GROUP_RANK", "RANK", "ROLE_RANK"):
                them[name] = us[name]
            rows.append("c10d-host-order")
        for name in sorted(set(them) | set(us)):
            if them.get(name) != us.get(name):
                raise Different(
                    f"environment {name}", f"local rank {local_rank}", them.get(name), us.get(name)
                )
    if rows:
        raise Explained(rows[-1])


# --- a run ---------------------------------------------------------------------------------

#: How many kinds of findings a report shows with a shrunk reproduction.
SHOWN = 8
_FOLDER: list[Path] = []


def _default_folder() -> Path:
    if not _FOLDER:
        import tempfile

        _FOLDER.append(workspace(Path(tempfile.mkdtemp(prefix="tj-launcher-fuzz-"))))
    return _FOLDER[0]


def shrink(finding: Finding, budget: int = 30) -> Finding:
    """A shorter line showing the same kind of difference."""
    return fuzz_runs.shrink(finding, judge, launcher_fuzz.smaller, budget)


def fuzz(examples: int, seed: int) -> tuple[dict[tuple[str, ...], list[Finding]], Tally]:
    """Judge ``examples`` lines drawn from ``seed``; the unexplained findings by kind."""
    tally = Tally()
    return fuzz_runs.run(examples, seed, launcher_fuzz.draw, judge, tally), tally


def report(found: dict[tuple[str, ...], list[Finding]], tally: Tally, seed: int) -> str:
    lines = [
        f"{sum(map(len, found.values()))} command lines torch2jax-device run takes "
        f"otherwise than torchrun, that no row of launcher_fuzz_oracle.DIFFERENCES covers, "
        f"in {len(found)} kinds ({tally.examples} lines, "
        f"TORCH2JAX_DEVICE_LAUNCHER_FUZZ_SEED={seed}):"
    ]
    lines += fuzz_runs.listed(found, shrink, SHOWN)
    lines.append(
        f"Refused by both: {tally.both_refused}; planned alike: {tally.alike}; refused by tj "
        f"with the fix: {dict(tally.tj_refused)}; rows: {dict(tally.explained)}."
    )
    return "\n".join(lines)
