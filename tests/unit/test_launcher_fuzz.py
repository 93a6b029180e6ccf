"""The launcher fuzzer: random torchrun command lines, planned by torchrun and by
``torch2jax-device run``, compared; no worker starts.

Each example draws a torchrun command line from torchrun's own parser (every option in
every spelling, argparse's prefixes, ``=`` or a space, values taken and refused, ``--``,
a script or ``-m`` module, script arguments that spell launcher options, ``PET_*``
defaults: ``tests/support/launcher_fuzz.py``), asks torch what it would launch
(``torch.distributed.run``'s ``parse_args`` and ``run`` with ``elastic_launch``
recorded) and ``run.plan`` what tj would, and compares world, ranks, rendezvous, run id,
the worker's command and environment (``tests/support/launcher_fuzz_oracle.py``). A
line tj refuses must be refused in its own words naming the option and the fix. A
difference no row of the oracle's ``DIFFERENCES`` covers fails the test with one
shrunk reproduction per kind.

The default run is the examples ``fuzz_runs.settings`` gives, from its seed, the same
every time. ``TORCH2JAX_DEVICE_LAUNCHER_FUZZ_EXAMPLES=N`` and
``TORCH2JAX_DEVICE_LAUNCHER_FUZZ_SEED=S`` make a longer or another run. Each line it
found, once fixed, stays below as a named case.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import fuzz_runs, launcher_fuzz_oracle
from tests.support.launcher_fuzz import Line
from tests.support.launcher_fuzz_oracle import DIFFERENCES, DOCS, fuzz, judge, report, shrink
from tests.support.optional_frameworks import needs
from torch2jax_device.cli import torchrun_compat

EXAMPLES, SEED = fuzz_runs.settings("LAUNCHER_FUZZ", 300)


@pytest.fixture(autouse=True)
def _torch() -> None:
    needs("torch")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return launcher_fuzz_oracle.workspace(tmp_path)


def test_run_plans_each_torchrun_line_as_torchrun_or_refuses_it_with_the_fix(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launcher_fuzz_oracle, "_FOLDER", [folder])
    found, tally = fuzz(EXAMPLES, SEED)
    assert tally.examples == EXAMPLES
    if found:
        pytest.fail(report(found, tally, SEED), pytrace=False)
    assert tally.alike + sum(tally.explained.values()) > EXAMPLES // 10  # lines compared


# Lines the fuzzer found, each fixed: what differed before.
FOUND = {
    # TORCHELASTIC_RUN_ID was a fresh UUID; torchrun's is --rdzv-id's default, "none"
    # (and it meets at localhost:29400, not a free port).
    "c10d without an endpoint": Line(("--rdzv-backend", "c10d", "train.py")),
    # --standalone replaces torchrun's rendezvous options: the port was taken as given.
    "standalone ignores --master-port": Line(("--master-port=1", "--stand", "train.py")),
    # ... and --rdzv-id: TORCHELASTIC_RUN_ID was "job-42", torchrun's a fresh UUID.
    "standalone ignores --rdzv-id": Line(("--standalone", "--rdzv-id", "job-42", "train.py")),
    # --master-port won over the endpoint; under torchrun the endpoint wins.
    "the endpoint wins": Line(
        ("--rdzv-endpoint", "127.0.0.1:29400", "--master-port", "29500", "train.py")
    ),
    # every host was host 0 (--node-rank's default); torchrun numbers them as they join.
    "c10d hosts without --node-rank": Line(
        ("--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "train.py")
    ),
    # taken and ignored; torchrun refuses what is not its start method, or not a number.
    "--start-method's choices": Line(("--start_=thread", "train.py")),
    # refused ("--master-port is required"); torchrun meets at its default port, 29500.
    "several hosts, no port": Line(("--nnodes", "2", "--node_rank=1", "train.py")),
    "--monitor-interval's number": Line(("--monitor-interval", "x", "train.py")),
    # refused; torchrun's --max-restarts is an int: 00 is 0.
    "--max-restarts 00": Line(("--max-restarts", "00", "train.py")),
    # torchrun reads each option's default from PET_<NAME> (Kubeflow sets them): tj ran 1
    # worker, and took PET_MAX_RESTARTS=2 as 0.
    "PET_NPROC_PER_NODE": Line(("train.py",), (("PET_NPROC_PER_NODE", "2"),)),
    "PET_MAX_RESTARTS": Line(("train.py",), (("PET_MAX_RESTARTS", "2"),)),
    "PET_STANDALONE": Line(("--rdzv-id", "j", "train.py"), (("PET_STANDALONE", "1"),)),
    # an empty endpoint is no endpoint to torchrun; tj refused it as not HOST:PORT.
    "empty endpoint": Line(("--rdzv-endpoint", "", "train.py")),
    # refused naming no fix.
    "a missing script": Line(("missing.py",)),
    "--node-rank past --nnodes": Line(("--node-rank", "1", "train.py")),
}


@pytest.mark.parametrize("name", FOUND)
def test_a_line_the_fuzzer_found_plans_as_under_torchrun(name: str, folder: Path) -> None:
    assert judge(FOUND[name], folder=folder) == []


@pytest.mark.parametrize(
    ("argv", "env", "refusal"),
    [
        (("--max-restarts", "00", "train.py"), (), None),
        (("--nnodes", "2", "--node_rank=1", "train.py"), (), None),  # torchrun's port 29500
        (("--rdzv-endpoint", "", "train.py"), (), None),
        (("-r0", "--tee", "0", "--rdzv-conf=", "--event-log-handler=null", "train.py"), (), None),
        (("-r3", "train.py"), (), "torchrun's --redirects is not supported"),
        (("train.py",), (("PET_LOG_DIR", "/tmp/logs"),), "PET_LOG_DIR is set"),
        (("train.py",), (("PET_NPROC_PER_NODE", "gpu"),), "Fix: unset PET_NPROC_PER_NODE"),
        (("train.py",), (("PET_MAX_RESTARTS", "x"),), "PET_MAX_RESTARTS='x'"),
        (("--nproc_per_node", "gpu", "train.py"), (), "Fix: pass the number"),
        (
            ("--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "train.py"),
            (),
            "Fix: give each host its --node-rank",
        ),
    ],
)
def test_a_line_is_planned_or_refused_naming_the_fix(
    argv: tuple[str, ...], env: tuple[tuple[str, str], ...], refusal: str | None, folder: Path
) -> None:
    """Beyond agreeing with torchrun: taken where torchrun takes it, or refused saying
    where the value came from and what to write."""
    with launcher_fuzz_oracle._where_judged(Line(argv, env), folder):
        planned = launcher_fuzz_oracle.tj_plan(Line(argv, env))
    if refusal is None:
        assert not isinstance(planned, str), planned
    else:
        assert isinstance(planned, str) and refusal in planned, planned


@pytest.fixture
def one_cpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process allowed one CPU (a container's, ``taskset``'s) on a larger machine."""
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity here")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    yield


def test_nproc_per_node_cpu_counts_the_cpus_this_process_may_use_as_torchrun(
    one_cpu: None,
) -> None:
    from torch.distributed.run import determine_local_world_size

    assert torchrun_compat.nproc_per_node("cpu") == determine_local_world_size("cpu") == 1


def test_a_difference_fails_with_a_one_line_reproduction(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The oracle can fail: a launcher that lets --master-port win over the endpoint."""
    settle = torchrun_compat.settle_rendezvous

    def port_wins(args: argparse.Namespace) -> None:
        given = args.master_port
        settle(args)
        args.master_port = given or args.master_port

    monkeypatch.setattr(torchrun_compat, "settle_rendezvous", port_wins)
    monkeypatch.setattr(launcher_fuzz_oracle, "_FOLDER", [folder])
    line = Line(("--rdzv-endpoint", "127.0.0.1:29400", "--master-port", "29500", "train.py"))
    (finding,) = judge(line)
    assert (finding.aspect, finding.where) == ("rendezvous", "host:port")
    assert finding.reproduction().startswith("Line(argv=('--rdzv-endpoint', '127.0.0.1:29400'")
    assert shrink(finding).kind == finding.kind


def test_each_difference_by_design_is_on_the_docs_page() -> None:
    page = " ".join((Path(__file__).resolve().parents[2] / DOCS).read_text().split())
    missing = [row.id for row in DIFFERENCES if row.docs not in page]
    assert not missing, f"rows whose docs phrase is not on {DOCS}: {missing}"
