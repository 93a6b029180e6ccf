"""``scan --diff``'s contract (docs/cli.md), held on generated programs.

Programs are built from the idioms' call chains (``.to``, ``.cuda``, ``.cpu``,
``.pin_memory`` in every argument form, nested, split over lines, with comments),
in the places code puts them (module level, functions whose parameters shadow
imports, comprehensions, ``with`` blocks) and followed by the uses real scripts make of
the result (torch calls, JAX calls, methods, returns). For every program:

* the rewritten file compiles, and a second pass over it changes nothing;
* where the program runs on this machine, the rewritten one runs and prints the same;
* the unified diff of ``torch2jax-device scan --diff`` applies with ``git apply`` and
  gives the rewritten file, identically under ``PYTHONHASHSEED`` 0 to 9.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torch2jax_device as tj
from tests.support.deadlines import deadline
from torch2jax_device.porting import scanner
from torch2jax_device.porting._recognise.base import Recogniser
from torch2jax_device.porting._rewrites import Rewrite, compose

HEADER = [
    "import data",
    "import numpy as np",
    "import jax.numpy as jnp",
    "import torch",
    "import torch.distributed as dist",
    "from flax import nnx",
    "model = nnx.Linear(3, 3, rngs=nnx.Rngs(0))",
]
RECEIVERS = [
    "x",
    "batch['x']",
    "(a + b)",
    "torch.ones(3)",
    "np.ones(3, np.float32)",
    "get()",
    "model",
]
LINKS = [
    ".to(device)",
    ".to(torch.float16)",
    ".to(device, non_blocking=True)",
    ".to(device=device)",
    ".to(dtype=torch.float16)",
    ".to(device, copy=True)",
    ".to(device, torch.float16)",
    ".cuda()",
    ".cuda(0)",
    ".cuda(non_blocking=True)",
    ".cuda(gpu, non_blocking=True)",
    ".cpu()",
    ".pin_memory()",
    ".float()",
    ".detach()",
]
USES = [
    "print({v})",
    "model({v})",
    "jnp.sum({v})",
    "torch.sum({v})",
    "{v}.view(-1)",
    "out.append({v})",
    "print({v}.shape, {v}.tolist())",
    "[t for t in {v}]",
]
STARTS = [
    "n = torch.cuda.device_count()",
    "torch.cuda.set_device(0)",
    'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")',
    'dist.init_process_group("gloo")',
    "torch.cuda.manual_seed_all(0)",
]


class Choices(Protocol):
    """Where a program's choices come from: hypothesis, or a seeded ``random.Random``."""

    def pick(self, options: Sequence[str]) -> str: ...

    def number(self, low: int, high: int) -> int: ...


class _Drawn:
    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw

    def pick(self, options: Sequence[str]) -> str:
        return self.draw(st.sampled_from(options))

    def number(self, low: int, high: int) -> int:
        return self.draw(st.integers(low, high))


class _Seeded:
    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)

    def pick(self, options: Sequence[str]) -> str:
        return self.random.choice(list(options))

    def number(self, low: int, high: int) -> int:
        return self.random.randint(low, high)


def _chain(choices: Choices) -> str:
    """``receiver.link().link()...``, on one line or split over several."""
    receiver = choices.pick(RECEIVERS)
    links = [choices.pick(LINKS) for _ in range(choices.number(1, 3))]
    if choices.pick(["one line", "split"]) == "one line":
        return receiver + "".join(links)
    comment = choices.pick(["", "  # moved"])
    body = "\n".join(f"    {link}" for link in links)
    return f"(\n    {receiver}{comment}\n{body}\n)"


def program(choices: Choices) -> str:
    """A module using the idioms: header, start-up calls, chains in places, uses."""
    lines = list(HEADER)
    lines += [choices.pick(STARTS) for _ in range(choices.number(0, 2))]
    for number in range(choices.number(1, 4)):
        chain = _chain(choices)
        y = f"y{number}"
        use = choices.pick(USES).format(v=y)
        place = choices.pick(["module", "function", "shadowing", "comprehension", "with"])
        if place == "module":
            lines += [f"{y} = {chain}", use]
        elif place in ("function", "shadowing"):
            parameter = "data" if place == "shadowing" else "x"
            body = chain.replace("x", parameter) if chain.startswith("x") else chain
            lines += [f"def step{number}({parameter}, device):", f"    {y} = {_indent(body)}"]
            lines += [f"    {use}", f"    return {y}"]
            caller = choices.pick(["print", "model", "jnp.tanh", "torch.tanh"])
            lines.append(f"{caller}(step{number}(x, device))")
        elif place == "comprehension":
            lines += [f"{y} = [{chain.replace('x', 'item', 1)} for item in items]", use]
        else:
            lines += ["with torch.no_grad():", f"    {y} = {_indent(chain)}", f"    {use}"]
    lines += [choices.pick(STARTS) for _ in range(choices.number(0, 2))]
    return "\n".join(lines) + "\n"


@st.composite
def programs(draw: st.DrawFn) -> str:
    return program(_Drawn(draw))


def _indent(code: str) -> str:
    return code.replace("\n", "\n    ")


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(programs())
def test_every_rewrite_compiles_and_composes(source: str) -> None:
    findings = scanner.scan_source(source)
    rewritten = scanner.apply_edits(source, findings)
    compile(rewritten, "<rewritten>", "exec")
    assert scanner.apply_edits(source, list(reversed(findings))) == rewritten
    again = scanner.apply_edits(rewritten, scanner.scan_source(rewritten))
    assert again == rewritten, "one --diff reaches the fixed point: a second changes nothing"
    for finding in findings:
        assert finding.fixable != bool(finding.reason), finding


# -- the rewritten program does what the original does ---------------------------------------
RUNNABLE_LINKS = [link for link in LINKS if ".cuda" not in link and "pin_memory" not in link]
RUNNABLE_USES = [
    "print(float(y.sum()))",
    "print(y.tolist())",
    "print(tuple(y.shape))",
    "print(float(torch.sum(y)))",
    "print(y.float().tolist())",
    "print(y.numpy().tolist())",
    "print(float(jnp.sum(np.asarray(y))))",
    "print([float(t) for t in y])",
    "print(float(jnp.asarray(y).sum()))",
    "print(tj.to_jax(y).tolist())",
]


@st.composite
def runnable_programs(draw: st.DrawFn) -> str:
    device = draw(st.sampled_from(['torch.device("cpu")', '"cpu"']))
    lines = ["import numpy as np", "import jax.numpy as jnp", "import torch", f"device = {device}"]
    lines.append(
        draw(
            st.sampled_from(
                ["x = torch.arange(4.0)", "x = torch.from_numpy(np.arange(4.0, dtype=np.float32))"]
            )
        )
    )
    for _ in range(draw(st.integers(1, 3))):
        links = draw(st.lists(st.sampled_from(RUNNABLE_LINKS), min_size=1, max_size=3))
        where = draw(st.sampled_from(["module", "function"]))
        use = draw(st.sampled_from(RUNNABLE_USES))
        if where == "module":
            lines += [f"y = x{''.join(links)}", use]
        else:
            lines += [
                "def step(x, device):",
                f"    y = x{''.join(links)}",
                f"    {use}",
                "    return y",
            ]
            lines.append(
                draw(st.sampled_from(["step(x, device)", "print(step(x, device).tolist())"]))
            )
    return "\n".join(lines) + "\n"


def _output(source: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, "<program>", "exec"), {"__name__": "program", "tj": tj})
    return out.getvalue()


@settings(max_examples=60, deadline=None)
@given(runnable_programs())
def test_the_rewritten_program_prints_what_the_original_prints(source: str) -> None:
    rewritten = scanner.apply_edits(source, scanner.scan_source(source))
    assert _output(rewritten) == _output(source), rewritten


def test_the_runnable_programs_do_get_rewritten() -> None:
    """The property above is not vacuous: the JAX-safe uses are rewritten (not
    ``jnp.asarray(y)``: it put the tensor on JAX's default device, and would leave the
    array on the CPU)."""
    source = (
        "import torch\nimport torch2jax_device as tj\ndevice = 'cpu'\nx = torch.arange(4.0)\n"
        "y = x.to(device)\nprint(tj.to_jax(y).tolist())\n"
    )
    assert "y = tj.to_device(x, device)" in scanner.apply_edits(source, scanner.scan_source(source))


# -- the command line's diff: applies, and never depends on the hash seed ----------------------
def test_the_diff_applies_and_is_the_same_under_every_hash_seed(tmp_path: Path) -> None:
    """A seeded batch of the same grammar, through the command line in fresh processes."""
    batch = [program(_Seeded(seed)) for seed in range(24)]
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    (tmp_path / "src").mkdir()
    for number, source in enumerate(batch):
        (tmp_path / "src" / f"program_{number:02d}.py").write_text(source)
    diffs = set()
    for seed in range(10):
        done = subprocess.run(
            [sys.executable, "-m", "torch2jax_device", "scan", "--diff", "src"],
            cwd=tmp_path, env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True, text=True, timeout=deadline(300),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        diffs.add(done.stdout)
    (diff,) = diffs
    assert diff, "nothing was rewritten: the property would be vacuous"
    (tmp_path / "change.diff").write_text(diff)
    applied = subprocess.run(
        [git, "apply", "change.diff"], cwd=tmp_path, capture_output=True, text=True
    )
    assert applied.returncode == 0, applied.stderr
    # The command line plans the files together (one program): so does the expectation.
    sources = {f"src/program_{number:02d}.py": source for number, source in enumerate(batch)}
    planned = scanner.scan_sources(sources)
    for name, source in sources.items():
        assert (tmp_path / name).read_text() == scanner.apply_edits(source, planned[name])


# -- rewrites that cannot be composed become findings -----------------------------------------
def test_overlapping_rewrites_are_rejected_not_guessed() -> None:
    data = b"abcdef"
    outer = Rewrite(0, 6, ("<", (1, 5), ">"))
    inside = Rewrite(2, 4, ("XY",))
    straddling = Rewrite(4, 6, ("Z",))  # crosses the outer template's literal ">"
    same_span = Rewrite(0, 6, ("other",))
    result, rejected = compose(data, [straddling, inside, same_span, outer])
    assert result == compose(data, [outer, inside, straddling, same_span])[0]  # any order
    assert result == b"<bXYe>"  # the inner rewrite sits in the outer one's hole
    assert set(rejected) == {straddling, same_span}


def test_a_rewrite_that_would_not_parse_is_reported_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = Recogniser.rename

    def broken(self: Recogniser, func: object, new_name: str) -> Rewrite:
        rewrite = real(self, func, new_name)  # type: ignore[arg-type]
        return Rewrite(rewrite.start, rewrite.end, ("tj.device(((",))

    monkeypatch.setattr(Recogniser, "rename", broken)
    source = "import torch\nd = torch.device('cpu')\nprint(d)\n"
    (finding,) = scanner.scan_source(source)
    assert not finding.fixable
    assert finding.reason == "the rewritten line would not parse; please report this"
    assert scanner.apply_edits(source, [finding]) == source
