"""The checkpoint fuzzer: random checkpoints written and read by torch / safetensors and by tj.

Each example draws named tensors (every dtype the format holds, edge values, views of
one storage), a writer (``torch.save`` in either format, ``safetensors.torch.save_file``,
``tj.save_file``, shards with an index), a reader with its arguments (``tj.load_file``,
``tj.safe_open``, ``tj.load``) and at times damage to the written bytes
(``tests/support/checkpoint_fuzz.py``), then reads the files both ways and compares
(``tests/support/checkpoint_fuzz_oracle.py``). A difference that no row of the oracle's
``DIFFERENCES`` covers fails the test with one shrunk reproduction per kind. Two more
tests load twins' state dicts into models (``checkpoint_fuzz_state``: ``tj.load_state``
against ``load_state_dict``) and torch optimizers' state dicts into ports
(``checkpoint_fuzz_optimizer``: ``tj.optim.load_state_dict`` against torch's), each
changed as checkpoints go wrong; ``..._STATE_EXAMPLES`` and ``..._OPTIMIZER_EXAMPLES``
run them longer.

The default run is the examples ``fuzz_runs.settings`` gives, from its seed, the same every
time. ``TORCH2JAX_DEVICE_CHECKPOINT_FUZZ_EXAMPLES=N`` and
``TORCH2JAX_DEVICE_CHECKPOINT_FUZZ_SEED=S`` make a longer or another run; the slow test
runs it in a process with two CPU devices (``"cpu:1"``, ``device_map=``), where a crash
names the example it died in. Each finding, once fixed, stays as a draw in
``tests/parity/test_checkpoint_fuzz_findings.py``; differences by design are the
oracle's ``DIFFERENCES`` rows, each said on docs/known-differences-checkpoints.md (or,
for device maps, docs/how-to/big-models.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import pytest

import torch2jax_device as tj
from tests.support import checkpoint_fuzz, fuzz_runs
from tests.support.checkpoint_fuzz import Draw, Entry
from tests.support.checkpoint_fuzz_optimizer import (
    OPTIMIZER_DIFFERENCES,
    OptimizerTally,
    draw_optimizer,
    judge_optimizer,
    shrink_optimizer,
)
from tests.support.checkpoint_fuzz_oracle import DIFFERENCES, Finding, Tally, judge, shrink
from tests.support.checkpoint_fuzz_state import (
    STATE_DIFFERENCES,
    StateTally,
    draw_state,
    judge_state,
    shrink_state,
)
from tests.support.deadlines import deadline
from tests.support.gpu_proxy import jax_default_is_torch_cpu

pytestmark = pytest.mark.skipif(
    not jax_default_is_torch_cpu(),
    reason="the fuzzer's oracle is torch's CPU; JAX's default device is another here",
)

EXAMPLES, SEED = fuzz_runs.settings("CHECKPOINT_FUZZ", 300)
#: State draws build two models and load twice each: fewer by default.
STATE_EXAMPLES, _ = fuzz_runs.settings("CHECKPOINT_FUZZ_STATE", 12)
OPTIMIZER_EXAMPLES, _ = fuzz_runs.settings("CHECKPOINT_FUZZ_OPTIMIZER", 10)
SHOWN = 8
ROOT = Path(__file__).resolve().parents[2]


def fuzz(examples: int, seed: int) -> tuple[dict[tuple[str, ...], list[Finding]], Tally]:
    """Run ``examples`` draws from ``seed``; the unexplained findings by kind, and the tally."""
    tally = Tally()
    devices = len(jax.devices("cpu"))
    return (
        fuzz_runs.run(
            examples, seed, lambda rng: checkpoint_fuzz.draw(rng, devices=devices), judge, tally
        ),
        tally,
    )


def report(found: dict[tuple[str, ...], list[Finding]], tally: Tally, seed: int) -> str:
    lines = [
        f"{sum(map(len, found.values()))} differences from torch / safetensors that no row "
        f"of checkpoint_fuzz_oracle.DIFFERENCES covers, in {len(found)} kinds "
        f"({tally.examples} examples, TORCH2JAX_DEVICE_CHECKPOINT_FUZZ_SEED={seed}):"
    ]
    lines += fuzz_runs.listed(found, shrink, SHOWN)
    lines.append(f"Refused alike: {tally.refused}; rows: {tally.explained}.")
    return "\n".join(lines)


@pytest.mark.idiom("load-safetensors")
def test_tj_reads_checkpoints_as_torch_and_safetensors_do() -> None:
    found, tally = fuzz(EXAMPLES, SEED)
    assert tally.examples == EXAMPLES
    if found:
        pytest.fail(report(found, tally, SEED), pytrace=False)


def test_tj_load_state_loads_as_torchs_load_state_dict() -> None:
    """Twins' state dicts, changed (keys dropped or added, shapes and dtypes changed,
    nested in a training checkpoint), written by torch.save, safetensors or passed as a
    mapping, loaded with strict= or without: torch's ``load_state_dict`` is the oracle."""
    found = fuzz_runs.run(STATE_EXAMPLES, SEED, draw_state, judge_state, StateTally())
    if found:
        pytest.fail(_listed(found, shrink_state, "load_state_dict"), pytrace=False)


def test_tj_optim_load_state_dict_loads_as_torchs_optimizer_does() -> None:
    """Torch optimizers' state dicts (SGD with momentum, Adam, amsgrad, AdamW, RMSprop;
    two groups listed by the twin's names), changed (a parameter's state dropped, a
    buffer of another shape or dtype, a group dropped, a rate changed), through
    torch.save / tj.load or passed as they are: torch's ``load_state_dict`` and then
    ``state_dict()`` are the oracle."""
    tally = OptimizerTally()
    found = fuzz_runs.run(OPTIMIZER_EXAMPLES, SEED, draw_optimizer, judge_optimizer, tally)
    if found:
        pytest.fail(_listed(found, shrink_optimizer, "optimizer.load_state_dict"), pytrace=False)


def _listed(found: dict[tuple[str, ...], list[Any]], shrink_: Any, oracle: str) -> str:
    lines = [f"{sum(map(len, found.values()))} differences from torch's {oracle} (seed {SEED}):"]
    return "\n".join(lines + fuzz_runs.listed(found, shrink_))


# A draw the fuzzer made, fixed: what each example checks, kept small and readable.
VIEWS_OF_ONE_STORAGE = Draw(
    writer="torch.save",
    entries=(
        Entry(name="w", dtype="bfloat16", shape=(2, 3), seed=1, view="transposed"),
        Entry(name="tied", dtype="bfloat16", shape=(2, 3), view="same", of="w"),
        Entry(name="tail", dtype="bfloat16", shape=(2, 3), view="view", of="w"),
        Entry(name="ids", dtype="int64", shape=(0,)),
    ),
    reader="load",
    container="nested",
    device="{'cpu': 'cpu'}",
    weights_only=True,
    mmap=True,
)


def test_a_draw_the_fuzzer_made_agrees() -> None:
    assert judge(VIEWS_OF_ONE_STORAGE) == []


def test_a_difference_fails_with_a_one_line_reproduction(monkeypatch: pytest.MonkeyPatch) -> None:
    """The oracle can fail: a tj.load_file that drops a tensor's last element."""
    load_file = tj.load_file
    monkeypatch.setattr(
        tj, "load_file", lambda *a, **k: {n: v[:-1] for n, v in load_file(*a, **k).items()}
    )
    altered = Draw(
        writer="safetensors",
        entries=(Entry(name="w", dtype="float32", shape=(3,)),),
        reader="load_file",
    )
    (finding,) = judge(altered)
    assert (finding.aspect, finding.where) == ("shape", "<root>['w']")
    assert finding.reproduction().startswith("Draw(writer='safetensors', entries=(Entry(")
    assert shrink(finding).kind == finding.kind


def test_each_difference_by_design_is_on_the_checkpoints_page() -> None:
    pages = ("docs/known-differences-checkpoints.md", "docs/how-to/big-models.md")
    page = "\n".join((ROOT / name).read_text() for name in pages)
    rows = (*DIFFERENCES, *STATE_DIFFERENCES, *OPTIMIZER_DIFFERENCES)
    missing = [row.id for row in rows if row.docs and row.docs not in page]
    assert not missing, f"rows whose docs phrase is not on the checkpoints page: {missing}"


@pytest.mark.slow
def test_two_cpu_devices_place_as_asked_and_damage_never_kills_the_process() -> None:
    """The fuzzer in a process with two CPU devices (``"cpu:1"``, ``device_map=``), where a
    load that crashes the process (a damaged file mapped past its end) is caught and
    named, rather than ending the test run."""
    examples = max(EXAMPLES // 2, 1)
    command = [
        sys.executable,
        "-m",
        "tests.support.checkpoint_fuzz_worker",
        str(examples),
        str(SEED),
    ]
    environment = {**os.environ, "JAX_NUM_CPU_DEVICES": "2", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=deadline(300)
    )
    last = done.stdout.strip().splitlines()[-1:] or ["nothing"]
    assert done.returncode == 0, f"exit {done.returncode} at {last[0]}\n{done.stderr[-3000:]}"
    assert last[0].startswith(f"{examples} examples"), done.stdout[-3000:]
