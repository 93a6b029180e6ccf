"""torchrun command lines people copy run unchanged under ``torch2jax-device run``.

``--standalone`` (torchrun's one-host rendezvous, in most copied command lines) and
``-m module`` run as under torchrun, side by side: the same lines from the same ranks.
What cannot work is the library's error with the fix, before any worker starts.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.deadlines import deadline
from tests.support.distributed.launch import TORCHRUN, launch_in, run_bounded, worker_env
from tests.support.optional_frameworks import needs
from torch2jax_device.cli import run as _run
from torch2jax_device.cli import torchrun_compat

pytestmark = pytest.mark.slow

# One write per line: torchrun's workers share its stdout, and under PYTHONUNBUFFERED=1 a
# print of several items is several writes, which two ranks interleave ("rankrank 1").
MODULE = (
    "import os, sys\n"
    "line = f\"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} {sys.argv[1:]}\\n\"\n"
    "sys.stdout.write(line)\n"
)


@pytest.fixture
def package(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(MODULE)
    return tmp_path


def _lines(output: str) -> list[str]:
    return sorted(line.split("]: ", 1)[-1] for line in output.splitlines() if "rank" in line)


def test_standalone_and_a_module_run_as_under_torchrun(package: Path) -> None:
    needs("torch")
    argv = ["--standalone", "--nproc_per_node", "2", "-m", "pkg.train", "--lr", "0.1"]
    status, ours, err = launch_in(package, *argv, limit_s=120)
    assert status == 0, err
    with contextlib.chdir(package):
        theirs_status, theirs, theirs_err = run_bounded(
            [str(TORCHRUN), *argv], env=worker_env(OMP_NUM_THREADS="1"), timeout=deadline(120)
        )
    assert theirs_status == 0, theirs_err
    assert (
        _lines(ours)
        == _lines(theirs)
        == [
            "rank 0 of 2 ['--lr', '0.1']",
            "rank 1 of 2 ['--lr', '0.1']",
        ]
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--standalone", "--nnodes", "2", "--master-port", "29400", "-m", "pkg.train"],
            "--standalone is a job on one host",
        ),
        (["-m", "nowhere.train"], "module 'nowhere.train' not found"),
        (["-m", "pkg/train.py"], "module 'pkg/train.py' not found"),
    ],
)
def test_what_cannot_run_is_said_before_any_worker_starts(
    package: Path, argv: list[str], message: str
) -> None:
    status, out, err = launch_in(package, *argv, limit_s=60)
    assert status == 2 and message in err and out == ""
    assert os.getcwd() != str(package)


# Prints what the launcher added to (or changed in) the environment it was started in.
PROBE = (
    "import json, os, sys\n"
    "parent = json.loads(os.environ['PROBE_PARENT'])\n"
    "added = {k: v for k, v in os.environ.items() if parent.get(k) != v and k != 'PROBE_PARENT'}\n"
    "print('ENV ' + json.dumps(added, sort_keys=True))\n"
)
# torchrun's variables tj's launcher does not give: the files and signals of torch's own
# elastic agent (its @record error files, the signals its agent handles).
TORCH_AGENT_ONLY = {"TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_SIGNALS_TO_HANDLE"}
# tj's own: output relayed unbuffered.
TJ_ONLY = {"PYTHONUNBUFFERED"}
# Different per job by design: the rendezvous address and port, torchrun's random run id.
PER_JOB = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"}


def _environments(output: str) -> list[dict[str, str]]:
    found = [json.loads(line.split("ENV ", 1)[1]) for line in output.splitlines() if "ENV " in line]
    return sorted(found, key=lambda env: int(env["RANK"]))


@pytest.mark.parametrize(
    "argv",
    [["--standalone", "--nproc_per_node", "2"], ["--nproc_per_node", "1"]],
    ids=["standalone-2", "default-1"],
)
def test_every_variable_torchrun_gives_its_workers_is_given_alike(
    tmp_path: Path, argv: list[str]
) -> None:
    """The oracle is torchrun's whole worker environment: a variable a later torchrun adds
    fails here by name. Scripts branch on them (``"TORCHELASTIC_RUN_ID" in os.environ``:
    launched, else ``mp.spawn``; ``torch.distributed.is_torchelastic_launched()``)."""
    needs("torch")
    (tmp_path / "probe.py").write_text(PROBE)
    env = worker_env()
    env.pop("OMP_NUM_THREADS", None)  # torchrun sets 1 for several workers when unset
    env["PROBE_PARENT"] = json.dumps(env)
    with contextlib.chdir(tmp_path):
        status, ours, err = run_bounded(
            [sys.executable, "-m", "torch2jax_device", "run", *argv, "probe.py"],
            env=env, timeout=deadline(120),
        )  # fmt: skip
        assert status == 0, err
        theirs_status, theirs, theirs_err = run_bounded(
            [str(TORCHRUN), *argv, "probe.py"], env=env, timeout=deadline(120)
        )
    assert theirs_status == 0, theirs_err
    tj_envs, torch_envs = _environments(ours), _environments(theirs)
    assert len(tj_envs) == len(torch_envs) == int(argv[-1])
    for mine, torchs in zip(tj_envs, torch_envs, strict=True):
        assert set(mine) - TJ_ONLY == set(torchs) - TORCH_AGENT_ONLY
        assert {k: v for k, v in mine.items() if k not in PER_JOB | TJ_ONLY} == {
            k: v for k, v in torchs.items() if k not in PER_JOB | TORCH_AGENT_ONLY
        }
        assert str(uuid.UUID(mine["TORCHELASTIC_RUN_ID"])) == mine["TORCHELASTIC_RUN_ID"]
    assert len({env["TORCHELASTIC_RUN_ID"] for env in tj_envs}) == 1  # one job, one id


# A value torchrun takes for each option, other than its default where that means
# something; an option missing here is passed its default (a new torchrun option is
# still checked).
TORCHRUN_VALUES = {
    "nnodes": "1:1",
    "nproc_per_node": "2",
    "rdzv_backend": "c10d",
    "rdzv_endpoint": "127.0.0.1:29400",
    "rdzv_id": "job-42",
    "rdzv_conf": "timeout=60",
    "max_restarts": "3",
    "monitor_interval": "1",
    "start_method": "fork",
    "event_log_handler": "console",
    "role": "trainer",
    "log_dir": "/tmp/logs",
    "redirects": "3",
    "tee": "3",
    "local_ranks_filter": "0",
    "duplicate_stdout_filters": "loss",
    "duplicate_stderr_filters": "error",
    "node_rank": "0",
    "master_addr": "127.0.0.1",
    "master_port": "29400",
    "local_addr": "127.0.0.1",
    "logs_specs": "default",
    "numa_binding": "node",
    "signals_to_handle": "SIGTERM",
    "shutdown_timeout": "5",
}


def _torchrun_options() -> list[Any]:
    """torchrun's options (none where torch is not installed: nothing to compare with)."""
    if importlib.util.find_spec("torch") is None:
        return []
    from torch.distributed.run import get_args_parser

    return [
        action
        for action in get_args_parser()._actions
        if action.option_strings and action.dest != "help"
    ]


def _outcome(argv: list[str], script: Path | str) -> tuple[str, Any]:
    """``run ARGV script``: ("taken", args), or ("refused", the launcher's message)."""
    parser = argparse.ArgumentParser(prog="torch2jax-device")
    _run.add_parser(parser.add_subparsers(dest="command", required=True))
    error = io.StringIO()
    try:
        with contextlib.redirect_stderr(error):
            args = parser.parse_args(["run", *argv, str(script)])
    except SystemExit:
        return "refused", error.getvalue()
    problem = _run.plan(args)
    return ("refused", problem) if problem else ("taken", args)


@pytest.mark.parametrize(
    "spelling",
    [spelling for action in _torchrun_options() for spelling in action.option_strings],
)
def test_every_torchrun_option_is_taken_or_refused_with_the_fix(
    spelling: str, tmp_path: Path
) -> None:
    """The oracle is torchrun's own parser: each of its options (each spelling), copied
    to ``torch2jax-device run``, starts the job or stops before any worker with the
    launcher's message naming the option and the fix; never argparse's "unrecognized
    arguments"."""
    (action,) = [a for a in _torchrun_options() if spelling in a.option_strings]
    value = TORCHRUN_VALUES.get(action.dest, str(action.default))
    argv = [spelling] if action.nargs == 0 else [spelling, value]
    script = tmp_path / "train.py"
    script.write_text("")
    verdict, detail = _outcome(argv, "json" if action.dest == "module" else script)
    if verdict == "refused":
        assert "unrecognized" not in detail and "Fix" in detail, detail
        canonical = "--" + action.dest.replace("_", "-")
        assert canonical in detail or spelling in detail or "torchrun's" in detail, detail


def test_torchruns_rendezvous_options_mean_what_they_mean_there(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    verdict, args = _outcome(
        ["--nnodes", "2:2", "--node-rank", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
         "127.0.0.1:29400", "--rdzv-id", "job-42", "--role", "trainer"],
        script,
    )  # fmt: skip
    assert verdict == "taken", args
    assert (args.nnodes, args.master_addr, args.master_port) == (2, "127.0.0.1", 29400)
    env = torchrun_compat.worker_environment(args, 0, 29400, torchrun_compat.run_id(args))
    assert (env["TORCHELASTIC_RUN_ID"], env["ROLE_NAME"], env["RANK"]) == (
        "job-42",
        "trainer",
        "1",
    )
    assert (env["GROUP_WORLD_SIZE"], env["WORLD_SIZE"]) == ("2", "2")


# PROBE, written to a file per rank: torchrun's workers share its stdout, where two
# ranks' lines can interleave.
PROBE_TO_FILE = PROBE.replace(
    "print('ENV ' + json.dumps(added, sort_keys=True))",
    "open(f\"env-{os.environ['RANK']}.json\", 'w').write(json.dumps(added))",
)
# Lines whose workers' environment the launcher fuzzer's model of torchrun's agent
# (tests/support/launcher_fuzz_oracle.py) predicts; {port} is a free port pair.
MODELLED = {
    "one host, no port": ["--nproc_per_node", "2", "--rdzv-id", "ignored"],
    "static": ["--nproc_per_node=2", "--master-port", "{port}", "--rdzv-id", "job-42",
               "--role", "trainer"],
    "c10d endpoint": ["--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:{port}",
                      "--nproc_per_node", "2"],
}  # fmt: skip


@pytest.mark.parametrize("name", MODELLED)
def test_the_fuzzers_model_of_torchruns_workers_is_what_torchrun_gives_them(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fuzzer compares ``run.plan`` with a model of the variables torchrun's agent
    gives its workers, computed from torch's own ``LaunchConfig``; here real torchrun
    workers say what they got."""
    needs("torch")
    from tests.support.distributed.launch import free_port_pair
    from tests.support.launcher_fuzz import Line
    from tests.support.launcher_fuzz_oracle import FQDN, FREE, FRESH, PICKED, torchrun_plan

    port = free_port_pair()
    argv = [word.format(port=port) for word in MODELLED[name]]
    (tmp_path / "probe.py").write_text(PROBE_TO_FILE)
    env = worker_env()
    env.pop("OMP_NUM_THREADS", None)
    env["PROBE_PARENT"] = json.dumps(env)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    modelled = torchrun_plan(Line((*argv, "probe.py")))
    assert not isinstance(modelled, str), modelled
    with contextlib.chdir(tmp_path):
        status, _, err = run_bounded(
            [str(TORCHRUN), *argv, "probe.py"], env=env, timeout=deadline(120)
        )
    assert status == 0, err
    workers = [json.loads((tmp_path / f"env-{rank}.json").read_text()) for rank in (0, 1)]
    for real, model in zip(workers, modelled.environments, strict=True):
        for variable, value in model.items():
            if value == FQDN:  # rank 0's host, by the name torchrun's agent looks up
                assert real[variable] not in ("", "127.0.0.1"), real[variable]
            elif value in (FREE, PICKED):
                assert real[variable].isdigit(), real[variable]
                assert value == FREE or real[variable] != str(port), real[variable]
            elif value == FRESH:
                assert str(uuid.UUID(real[variable])) == real[variable]
            else:
                assert real[variable] == value, variable
