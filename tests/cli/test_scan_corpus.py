"""``scan`` on a corpus of real-world-shaped PyTorch scripts (tests/support/fixtures/corpus).

Each script has a ``.truth`` file, written from reading the script: every line that
holds a device idiom, with its catalog rule(s). The scanner must find them (recall by
line and by idiom class, reported in docs/cli.md), report nothing anywhere else
(comments, docstrings, help text and plain torch code included), and ``scan --diff``
plus the manual steps listed here must give a script that runs on this CPU machine,
single process and, for the DDP scripts, two processes under ``torch2jax-device run``.
"""

from __future__ import annotations

import collections
import contextlib
import io
import shutil
import subprocess
import tokenize
from pathlib import Path

import pytest

from tests.support import corpus
from tests.support.corpus import ScriptRunner
from tests.support.distributed.launch import launch_in
from tests.support.optional_frameworks import needs
from torch2jax_device.cli import main
from torch2jax_device.porting import scanner

CORPUS = Path(__file__).resolve().parents[1] / "support" / "fixtures" / "corpus"
SCRIPTS = sorted(path.stem for path in CORPUS.glob("*.py"))
ROOT = Path(__file__).resolve().parents[2]

# How each script runs here (tiny settings) and what it prints when it got to the end.
RUNS = {
    "cnn_example": (["--epochs", "1"], " * Acc@1 "),
    "diffusion_sample": (["--steps", "4"], "sampled 2 images of 8x8 on cpu"),
    "gpt_train": (["--max-iters", "2", "--eval-interval", "2"], "done: 3 iterations on cpu"),
    "multi_gpu_inference": (["--rows", "32"], '"rows": 32'),
    "ssl_pretrain": (["--steps", "2"], "epoch 0 it 1 loss"),
}
DDP = ("gpt_train", "ssl_pretrain")
# torch's gloo threads can abort a DDP script at interpreter exit, after it has finished,
# under torchrun too (tests/support/distributed/exit_after_script.py): seen with the model
# in a module-level variable (gpt_train) and, under load, with it local (ssl_pretrain).
EXIT_AFTER_SCRIPT = ROOT / "tests" / "support" / "distributed" / "exit_after_script.py"

# No script needs a manual step after `scan --diff`: they still compute with torch, and
# --diff leaves torch's objects to torch (test_scan_corpus_port.py ports the compute of
# one first, then runs --diff).


def truth(name: str) -> dict[int, set[str]]:
    return corpus.truth(CORPUS, name)


def findings(name: str) -> dict[int, set[str]]:
    return corpus.findings(CORPUS, name)


def recall() -> tuple[float, dict[str, tuple[int, int]]]:
    """Line recall over the corpus, and (found, annotated) per idiom class."""
    lines = found_lines = 0
    classes: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for name in SCRIPTS:
        expected, got = truth(name), findings(name)
        for line, rules in expected.items():
            lines += 1
            found_lines += bool(got.get(line))
            for rule in rules:
                classes[rule][0] += rule in got.get(line, set())
                classes[rule][1] += 1
    return found_lines / lines, {rule: (a, b) for rule, (a, b) in sorted(classes.items())}


def test_the_corpus_is_annotated() -> None:
    assert SCRIPTS == sorted(RUNS)
    assert all(truth(name) for name in SCRIPTS)
    annotated = {rule for name in SCRIPTS for rules in truth(name).values() for rule in rules}
    assert annotated <= scanner.RULES
    assert len(annotated) >= 45  # the classes the corpus exercises


def test_recall_by_line_and_by_idiom_class() -> None:
    by_line, by_class = recall()
    missed = {rule: counts for rule, counts in by_class.items() if counts[0] < counts[1]}
    assert by_line >= 0.95, missed
    found = sum(a for a, _ in by_class.values())
    annotated = sum(b for _, b in by_class.values())
    assert found / annotated >= 0.95, missed


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_idiom_line_is_found_and_nothing_else(name: str) -> None:
    expected, got = truth(name), findings(name)
    assert sorted(set(expected) - set(got)) == [], "idiom lines without a finding"
    assert sorted(set(got) - set(expected)) == [], "findings on lines without an idiom"


def _text_lines(source: str) -> set[int]:
    """Lines that hold only comments or string text (docstrings, help=, messages)."""
    code: set[int] = set()
    text: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        lines = range(token.start[0], token.end[0] + 1)
        if token.type in (tokenize.COMMENT, tokenize.STRING):
            text.update(lines)
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code.update(lines)
    return text - code


@pytest.mark.parametrize("name", SCRIPTS)
def test_no_finding_on_comments_strings_or_help_text(name: str) -> None:
    source = (CORPUS / f"{name}.py").read_text()
    quiet = (
        _text_lines(source)
        | {number for number, line in enumerate(source.splitlines(), 1) if "help=" in line}
    ) - set(truth(name))  # a labelled line's code names a device beside its help text
    mentions = [
        n for n in quiet if any(w in source.splitlines()[n - 1] for w in ("cuda", "device"))
    ]
    assert mentions, "the script should mention devices in text, or this test proves nothing"
    assert sorted(quiet & set(findings(name))) == []


# -- the ported scripts run ------------------------------------------------------------------
def _ported(name: str, directory: Path) -> Path:
    """``name``.py in ``directory`` (the working directory), after ``scan --diff | git
    apply``; it must still compile."""
    script = directory / f"{name}.py"
    shutil.copy(CORPUS / f"{name}.py", script)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["scan", "--diff", script.name]) == 0
    if out.getvalue():
        (directory / "change.diff").write_text(out.getvalue())
        git = shutil.which("git") or pytest.fail("git is needed to apply the diff")
        subprocess.run([git, "apply", "change.diff"], cwd=directory, check=True)
    compile(script.read_text(), str(script), "exec")
    return script


def _script(scripts: ScriptRunner, *argv: str, cwd: Path) -> str:
    """``python ARGV...`` in ``cwd`` (a fork of the runner's server): it must succeed."""
    status, out, err = scripts.run(*argv, cwd=cwd)
    assert status == 0, out[-3000:] + err[-3000:]
    return out


def _launched(*argv: str, cwd: Path) -> str:
    """``torch2jax-device run --nproc-per-node 2 --cpu-devices 1 ARGV...`` in ``cwd``,
    the launcher called in this process with a worker's environment: it must succeed."""
    status, out, err = launch_in(
        cwd, "--nproc-per-node", "2", "--cpu-devices", "1", *argv, limit_s=300
    )  # fmt: skip
    assert status == 0, out[-3000:] + err[-3000:]
    return out


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("name", [n for n in SCRIPTS if n not in DDP])
def test_the_ported_script_runs(name: str, in_tmp: Path, scripts: ScriptRunner) -> None:
    script = _ported(name, in_tmp)
    arguments, marker = RUNS[name]
    assert marker in _script(scripts, script.name, *arguments, cwd=in_tmp)


@pytest.mark.parametrize("name", DDP)
def test_the_ported_ddp_script_runs_on_one_and_two_processes(
    name: str, in_tmp: Path, scripts: ScriptRunner
) -> None:
    needs("torch")  # the ported script still imports torch (torch.distributed)
    script = _ported(name, in_tmp)
    arguments, marker = RUNS[name]
    command = [script.name, *arguments]
    if name in DDP:
        command = [str(EXIT_AFTER_SCRIPT), *command]
    launched = _launched(*command, cwd=in_tmp)
    assert marker in launched and "[rank0]:" in launched
    if name == "gpt_train":  # one process, resuming from the checkpoint the job wrote
        resumed = _script(
            scripts, script.name, "--init-from", "resume", "--max-iters", "3",
            "--eval-interval", "2", cwd=in_tmp,
        )  # fmt: skip
        assert "done: 4 iterations on cpu" in resumed
    else:
        assert marker in _script(scripts, script.name, *arguments, cwd=in_tmp)


def test_the_citation_check_flags_code_quoted_from_another_line_only() -> None:
    source = (
        "model = Net()\n"
        "batch = load()\n"
        "images = (\n"
        "    batch.detach()\n"
        "    .clamp_(min=-1, max=1)\n"
        "    .add(1)\n"
        "    .mul(255)\n"
        "    .type(torch.uint8)\n"
        ")\n"
        "model.to(device)\n"
    )
    fair = [
        (10, "line 10: passed to model.to(device)"),
        # A statement over many lines, quoted from a line inside it, cut short by "...".
        (3, "line 4: batch.detach().clamp_(min=-1, max=1).add(1).mul(... calls a torch method"),
        (2, "line 10: passed to model.to(dev..."),
        # The finding's own statement may be named beside the line it cites.
        (3, "line 10: passed to model.to(device), which may write into batch.detach() here"),
    ]
    assert corpus.off_their_lines(source, fair) == []
    quoted_from_elsewhere = [(2, "line 1: passed to model.to(device)")]
    assert corpus.off_their_lines(source, quoted_from_elsewhere) == quoted_from_elsewhere
