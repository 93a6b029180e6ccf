"""The launcher fuzzer's draws: torchrun command lines, written from torchrun's own parser.

A :class:`Line` is one command line a user copies from torchrun to ``torch2jax-device
run`` (``argv``, what follows the command's name) and variables set where it runs: the
``PET_*`` ones (torchrun reads each option's default from ``PET_<DEST>``: Kubeflow's PyTorchJob
sets them). :func:`draw` makes one from a seeded ``random.Random``: torchrun 2.13's
options (read from ``torch.distributed.run.get_args_parser()``, so an option a later
torch adds is drawn too) in random order, each in one of its spellings (dashes,
underscores, a prefix argparse completes, ``-r3``), ``=`` or a space before its value,
values torchrun takes and some it refuses; then ``--`` now and then, the script (or a
module with ``-m``), and script arguments that look like the launcher's options. Nothing
here knows what either launcher makes of a line (``launcher_fuzz_oracle`` asks both).
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Iterator
from typing import Any

from tests.support import fuzz_runs

ENDPOINTS = (
    "127.0.0.1:29400", "localhost:0", "localhost:29401", "127.0.0.1", "", "[::1]:29400",
    "10.0.0.1:29400",
)  # fmt: skip
#: Values drawn for each torchrun option (by its ``dest``): ones torchrun takes, and
#: some it or the launcher refuses. An option missing here is drawn with its default.
VALUES: dict[str, tuple[str, ...]] = {
    "nnodes": ("1", "1", "2", "1:1", "2:2", "1:2", "0", "2:1", "x", "1:2:3"),
    "nproc_per_node": ("1", "2", "2", "3", "cpu", "gpu", "auto", "xpu", "0", "-1", "x", "2.0"),
    "node_rank": ("0", "0", "1", "2", "-1"),
    "master_addr": ("127.0.0.1", "127.0.0.1", "localhost", "127.0.0.2", "10.0.0.1"),
    "master_port": ("29500", "29400", "29500", "1", "0", "65535", "x"),
    "rdzv_backend": ("static", "c10d", "c10d", "etcd", "etcd-v2"),
    "rdzv_endpoint": ENDPOINTS,
    "rdzv_id": ("job-42", "none", "7"),
    "rdzv_conf": ("timeout=60", ""),
    "max_restarts": ("0", "0", "00", "3", "-1", "x"),
    "monitor_interval": ("0.1", "5", "x"),
    "start_method": ("spawn", "fork", "forkserver", "thread"),
    "event_log_handler": ("null", "console"),
    "role": ("default", "trainer"),
    "log_dir": ("/tmp/logs",),
    "redirects": ("0", "3", "0:1"),
    "tee": ("0", "3"),
    "local_ranks_filter": ("0", "0,1", "x"),
    "duplicate_stdout_filters": ("loss",),
    "duplicate_stderr_filters": ("error",),
    "local_addr": ("127.0.0.1",),
    "logs_specs": ("default",),
    "numa_binding": ("node", "x"),
    "signals_to_handle": ("SIGTERM",),
    "shutdown_timeout": ("5", "x"),
}
#: How often an option is drawn (the rest ``RARE``): the ones of most copied lines.
WEIGHTS = {
    "nproc_per_node": 8, "nnodes": 5, "standalone": 5, "node_rank": 4, "master_addr": 4,
    "master_port": 4, "rdzv_backend": 4, "rdzv_endpoint": 4, "rdzv_id": 3, "module": 3,
    "max_restarts": 2, "role": 2, "monitor_interval": 1, "start_method": 1,
}  # fmt: skip
RARE = 0.3
#: Scripts (``train.py`` is there where lines are judged) and modules (``pkg.train`` is).
SCRIPTS = ("train.py", "train.py", "train.py", "./train.py", "missing.py", "-")
MODULES = ("pkg.train", "pkg.train", "nowhere.train", "train.py")
#: Script arguments, several of which spell the launcher's own options.
SCRIPT_ARGS = (
    "--lr", "0.1", "--nproc-per-node", "4", "--", "-m", "--standalone", "--master_port=1",
    "-r", "3", "train.py", "--local-rank=0", "x", "--nnodes=2",
)  # fmt: skip
#: Variables a host may carry: torchrun's ``PET_*`` defaults (Kubeflow's PyTorchJob sets
#: them), and the ones its workers' environment follows (``OMP_NUM_THREADS`` set is kept).
ENVIRONMENT = {
    "OMP_NUM_THREADS": ("4",),
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": ("0",),
    "PET_NPROC_PER_NODE": ("2", "cpu", "gpu", "0"),
    "PET_NNODES": ("2", "1", "1:2"),
    "PET_NODE_RANK": ("1", "0"),
    "PET_MASTER_ADDR": ("127.0.0.1",),
    "PET_MASTER_PORT": ("29501",),
    "PET_STANDALONE": ("1", "0"),
    "PET_MODULE": ("0",),
    "PET_RDZV_ID": ("env-job",),
    "PET_MAX_RESTARTS": ("2", "0"),
    "PET_LOG_DIR": ("/tmp/logs",),
}


@dataclasses.dataclass(frozen=True)
class Line:
    """A torchrun command line (what follows ``torchrun``) and variables set where it
    runs (``PET_*``, ``OMP_NUM_THREADS``, ...)."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    def expression(self) -> str:
        return fuzz_runs.expression(self)


@functools.cache
def torchrun_actions() -> tuple[Any, ...]:
    """torchrun's options (``argparse`` actions), as its installed parser defines them."""
    from torch.distributed.run import get_args_parser

    return tuple(
        action
        for action in get_args_parser()._actions
        if action.option_strings and action.dest != "help"
    )


@functools.cache
def _all_spellings() -> tuple[str, ...]:
    return tuple(s for action in torchrun_actions() for s in action.option_strings)


def spellings(action: Any) -> tuple[list[str], list[str]]:
    """An option's own spellings, and the prefixes of its long ones argparse completes
    to it alone (``--nproc_per`` for ``--nproc_per_node``; ``--nproc`` is ambiguous)."""
    prefixes = []
    for option in action.option_strings:
        if not option.startswith("--"):
            continue
        for end in range(4, len(option)):
            prefix = option[:end]
            if [s for s in _all_spellings() if s.startswith(prefix)] == [option]:
                prefixes.append(prefix)
    return list(action.option_strings), prefixes


def _option(rng: random.Random, action: Any) -> list[str]:
    own, prefixes = spellings(action)
    roll = rng.random()
    if roll < 0.12 and prefixes:
        name = rng.choice(prefixes)
    elif roll < 0.16:  # any prefix: argparse may find it ambiguous
        name = rng.choice(own)
        name = name[: rng.randint(min(len(name), 4), len(name))]
    else:
        name = rng.choice(own)
    if action.nargs == 0:
        return [name]
    value = rng.choice(VALUES.get(action.dest, (str(action.default),)))
    if not name.startswith("--") and rng.random() < 0.5:
        return [name + value]  # -r3
    if rng.random() < 0.3 and name.startswith("--"):
        return [f"{name}={value}"]
    return [name, value]


def draw(rng: random.Random) -> Line:
    """One torchrun command line, and now and then ``PET_*`` variables."""
    actions = torchrun_actions()
    weights = [WEIGHTS.get(action.dest, RARE) for action in actions]
    chosen = {id(a): a for a in rng.choices(actions, weights, k=rng.randint(0, 6))}
    words: list[str] = []
    for action in chosen.values():
        words += _option(rng, action)
    module = any(action.dest == "module" for action in chosen.values())
    if module and rng.random() < 0.3:  # -m with a short option after it: -mr3, -mt 3
        short = [i for i, word in enumerate(words) if word[:2] in ("-r", "-t")]
        if short and "-m" in words:
            words.remove("-m")
            words = [("-m" + word[1:]) if word[:2] in ("-r", "-t") else word for word in words]
    if rng.random() < 0.1:  # "--": what follows is the script and its arguments
        words.insert(rng.randint(0, len(words)), "--")
    words.append(rng.choice(MODULES if module else SCRIPTS))
    script_args = rng.choices(SCRIPT_ARGS, k=rng.choice((0, 0, 1, 2, 3, 5)))
    if rng.random() < 0.15:  # a launcher option after the script: the script's
        script_args += _option(rng, rng.choice(actions))
    env: list[tuple[str, str]] = []
    if rng.random() < 0.15:
        names = rng.sample(sorted(ENVIRONMENT), rng.randint(1, 2))
        env = [(name, rng.choice(ENVIRONMENT[name])) for name in names]
    return Line(tuple(words + script_args), tuple(sorted(env)))


def smaller(line: Line) -> Iterator[Line]:
    """Lines with one word or one variable less (the script stays: torchrun needs it)."""
    for index in range(len(line.env)):
        yield dataclasses.replace(line, env=line.env[:index] + line.env[index + 1 :])
    for index in range(len(line.argv)):
        yield dataclasses.replace(line, argv=line.argv[:index] + line.argv[index + 1 :])
