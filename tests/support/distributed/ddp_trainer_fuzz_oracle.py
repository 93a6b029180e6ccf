"""The DDP trainer fuzzer's oracle: run a batch of draws through both jobs, then judge.

:func:`run` writes the draws to a folder and starts one job per side over all of them
(process start-up, imports and the gloo and JAX groups cost more than a draw's
training): torch's DDP under torchrun (2 ranks, the oracle) and the port under
``torch2jax-device run`` (2 ranks; each draw again on one device with the global batch).
:func:`judge` compares, for every draw and rank, the port with torch's DDP and the
one-device run with the port: each micro-batch's global batch, each step's loss and
gradient norm, the final parameters and buffers, the optimizer's state dict (torch's
format on both sides), and rank 0's checkpoint loading as the model it saved.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tests.support import fuzz_runs
from tests.support.distributed import ddp_trainer_fuzz
from tests.support.distributed.ddp_trainer_fuzz import RANK_OWN, WORLD_SIZE, TrainerDraw
from tests.support.distributed.launch import SCRIPTS, launch, torchrun

#: float32 on every side: relative for losses, absolute for norms and states.
LOSS_RTOL, ATOL = 2e-5, 2e-5
#: torch's BatchNorm1d counts its batches; nnx.BatchNorm keeps no such count.
TORCH_ONLY = frozenset({"bn.num_batches_tracked"})

Results = dict[tuple[str, str, int], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Finding:
    """A difference between two sides of one draw."""

    name: str
    draw: TrainerDraw
    sides: str  # "torch DDP / port" or "port / one device"
    aspect: str
    where: str
    expected: str
    found: str

    @property
    def kind(self) -> tuple[str, ...]:
        return (self.sides, self.aspect)

    def reproduction(self) -> str:
        return (
            f"{fuzz_runs.expression(self.draw)}  # {self.name}, {self.sides}: {self.aspect} "
            f"differs at {self.where}: {self.expected} / {self.found}"
        )


def run(draws: dict[str, TrainerDraw], limit_s: float) -> Results:
    """Both jobs over ``draws``: each result by (variant, draw name, rank); the variants
    are ``torch``, ``port`` and ``one-device`` (on one rank per draw)."""
    with tempfile.TemporaryDirectory(prefix="ddp-fuzz-") as name:
        folder = Path(name)
        ddp_trainer_fuzz.write(folder, draws)
        started = time.perf_counter()
        torchrun("ddp_trainer_fuzz_torch.py", str(folder), nproc=WORLD_SIZE, limit_s=limit_s)
        status, out, err = launch(
            "--nproc-per-node", str(WORLD_SIZE), "--cpu-devices", "1",
            str(SCRIPTS / "ddp_trainer_fuzz_port.py"), str(folder), limit_s=limit_s,
        )  # fmt: skip
        assert status == 0, out[-3000:] + err[-4000:]
        print(f"jobs: {time.perf_counter() - started:.1f} s")
        found: Results = {}
        for path in sorted(folder.glob("*-*.jsonl")):
            for line in path.read_text().splitlines():
                result = json.loads(line)
                variant = result.get("variant", "torch")
                found[variant, result["draw"], result["rank"]] = result
        return found


def judge(draws: dict[str, TrainerDraw], results: Results) -> list[Finding]:
    """Every difference of every draw (none: DDP is torch's, and one device's)."""
    findings = []
    for number, (name, drawn) in enumerate(draws.items()):
        for rank in range(WORLD_SIZE):
            skip = set(TORCH_ONLY) | (RANK_OWN if drawn.batch_norm and rank else set())
            findings += _compare(
                name, drawn, "torch DDP / port", rank,
                results.get(("torch", name, rank)), results.get(("port", name, rank)), skip,
            )  # fmt: skip
        alone = number % WORLD_SIZE  # the rank that ran it on one device
        findings += _compare(
            name, drawn, "port / one device", alone, results.get(("port", name, alone)),
            results.get(("one-device", name, alone)), set(),
        )  # fmt: skip
    return findings


def _compare(
    name: str,
    drawn: TrainerDraw,
    sides: str,
    rank: int,
    expected: dict[str, Any] | None,
    found: dict[str, Any] | None,
    skip: set[str],
) -> list[Finding]:
    def finding(aspect: str, where: str, theirs: Any, ours: Any) -> list[Finding]:
        theirs, ours = fuzz_runs.short(theirs), fuzz_runs.short(ours)
        return [Finding(name, drawn, sides, aspect, f"rank {rank} {where}", theirs, ours)]

    if expected is None or found is None:
        return finding("result", "", expected is not None, found is not None)
    for result in (expected, found):
        if "error" in result:
            return finding("error", "", expected.get("error"), found.get("error"))
    if found["batches"] != expected["batches"]:
        index = next(
            (
                i
                for i, (a, b) in enumerate(zip(expected["batches"], found["batches"], strict=False))
                if a != b
            ),
            min(len(found["batches"]), len(expected["batches"])),
        )
        return finding(
            "global batch", f"micro-batch {index} of {len(expected['batches'])}",
            expected["batches"][index : index + 1], found["batches"][index : index + 1],
        )  # fmt: skip
    if found["lengths"] != expected["lengths"]:
        return finding("len(batches)", "each epoch", expected["lengths"], found["lengths"])
    for aspect, rtol in (("losses", LOSS_RTOL), ("norms", 0.0)):
        if not _close(expected[aspect], found[aspect], rtol):
            step = _first_apart(expected[aspect], found[aspect], rtol)
            return finding(aspect, f"step {step}", expected[aspect], found[aspect])
    state = set(expected["state"]) - skip
    if set(found["state"]) - skip != state:
        return finding("state keys", "", sorted(state), sorted(set(found["state"]) - skip))
    for key in sorted(state):
        if not _close(expected["state"][key], found["state"][key], 0.0):
            return finding("state", key, expected["state"][key], found["state"][key])
    apart = _optimizer_apart(expected["optimizer"], found["optimizer"])
    if apart is not None:
        return finding("optimizer state", *apart)
    if not found["loaded_is_final"] or not expected["loaded_is_final"]:
        return finding("checkpoint", "final", expected["loaded_is_final"], found["loaded_is_final"])
    return []


def _close(expected: Any, found: Any, rtol: float) -> bool:
    a, b = np.asarray(expected, dtype=np.float64), np.asarray(found, dtype=np.float64)
    return a.shape == b.shape and bool(np.allclose(b, a, rtol=rtol, atol=ATOL))


def _first_apart(expected: list[float], found: list[float], rtol: float) -> int:
    for step, (a, b) in enumerate(zip(expected, found, strict=False)):
        if not np.isclose(b, a, rtol=rtol, atol=ATOL):
            return step
    return min(len(expected), len(found))


def _optimizer_apart(
    expected: dict[str, Any], found: dict[str, Any]
) -> tuple[str, Any, Any] | None:
    """Where two optimizer state dicts (torch's format) differ: each parameter's state
    (momentum buffers, moments, step counts) and each group's learning rate."""
    if set(expected["state"]) != set(found["state"]):
        return "state's parameters", sorted(expected["state"]), sorted(found["state"])
    for index, theirs in expected["state"].items():
        ours = found["state"][index]
        if set(theirs) != set(ours):
            return f"state[{index}]'s keys", sorted(theirs), sorted(ours)
        for key, value in theirs.items():
            if (value is None) != (ours[key] is None) or (
                value is not None and not _close(value, ours[key], LOSS_RTOL)
            ):
                return f"state[{index}][{key!r}]", value, ours[key]
    groups = [(group["lr"], sorted(group["params"])) for group in expected["param_groups"]]
    ours = [(group["lr"], sorted(group["params"])) for group in found["param_groups"]]
    same_rates = _close([lr for lr, _ in groups], [lr for lr, _ in ours], LOSS_RTOL)
    if [params for _, params in groups] != [params for _, params in ours] or not same_rates:
        return "param_groups (lr, params)", groups, ours
    return None


def report(findings: list[Finding], examples: int, seed: int) -> str:
    """The findings by kind, each kind with its first draw as a one-line reproduction."""
    kinds: dict[tuple[str, ...], list[Finding]] = {}
    for one in findings:
        kinds.setdefault(one.kind, []).append(one)
    lines = [
        f"{len(findings)} differences in {len({f.name for f in findings})} draws "
        f"({examples} drawn from seed {seed}, with the named ones):"
    ]
    for kind, found in sorted(kinds.items()):
        lines.append(f"- {' / '.join(kind)} ({len(found)}x): {found[0].reproduction()}")
    return "\n".join(lines)
