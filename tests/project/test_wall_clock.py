"""No test depends on a wall-clock window: the suite fails for a reason, not a clock.

A busy machine (issue 37: load 15-21 on 2 cores) turned 120-second deadlines and a
10-second idle timer into coin tosses. The rules, checked here over every Python file
of ``tests/`` (the scanner's fixture scripts aside):

* a wait's limit goes through ``tests.support.deadlines.deadline`` (which grows with
  the load): no number literal as a ``timeout=``/``timeout_s=`` argument or as the
  limit of ``wait``/``join``/``communicate``/``result`` (``0``, a poll, aside), no
  module constant named for a deadline or limit that is a bare number, and no helper
  parameter named for a limit with a number default unless the helper calls
  ``deadline``;
* no ``time.sleep`` in a test function: wait on an event, or move a ``ManualClock``
  (``tests/support/clocks.py``);
* no assert on a clock reading (``time.monotonic()``, ``perf_counter()``, ``time()``);
* no real idle timer: no ``threading.Timer`` and no patching of ``IDLE_SECONDS``;
* no per-example time limit in property tests: hypothesis's ``deadline`` (200 ms by
  default, a busy machine's coin toss) is off in the suite's profile (tests/conftest.py),
  and no ``settings(deadline=<number>)`` brings it back.

A line (or a comment just above it) may carry ``# wall-clock: <why>`` where the rule does
not fit (a sleep that
stands for work, a hang simulated in a worker process); the reasons are listed by
``test_every_exemption_says_why``.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.support.deadlines import deadline

TESTS = Path(__file__).parents[1]
SKIPPED = {TESTS / "support" / "deadlines.py", Path(__file__)}
EXEMPT = re.compile(r"#\s*wall-clock:\s*(\S.*)?$")
LIMIT_KEYWORDS = {"timeout", "timeout_s"}
LIMIT_METHODS = {"wait", "join", "communicate", "result"}
LIMIT_PARAMETERS = re.compile(r"^(timeout|timeout_s|limit_s|deadline_s)$")
CLOCKS = {"monotonic", "perf_counter", "time"}
LIMIT_CONSTANTS = re.compile(r"^[A-Z_]*(DEADLINE|LIMIT_S)$")


class Finding(NamedTuple):
    path: str
    line: int
    rule: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}"


def _sources() -> list[Path]:
    return sorted(
        path
        for path in TESTS.rglob("*.py")
        if "fixtures" not in path.relative_to(TESTS).parts and path not in SKIPPED
    )


def _is_limit(node: ast.AST) -> bool:
    """A number written as a wait's limit (``0`` is a poll, not a limit)."""
    if not _is_number(node):
        return False
    return bool(eval(compile(ast.Expression(node), "<limit>", "eval")))  # numbers only


def _is_number(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp):
        return _is_number(node.operand)
    if isinstance(node, ast.BinOp):
        return _is_number(node.left) and _is_number(node.right)
    return isinstance(node, ast.Constant) and type(node.value) in (int, float)


def _attribute_call(node: ast.AST, owner: str, names: set[str]) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in names
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == owner
    )


def _calls_deadline(function: ast.AST) -> bool:
    return any(
        isinstance(node, ast.Call)
        and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) == "deadline"
        for node in ast.walk(function)
    )


def findings(source: str, path: str) -> list[Finding]:
    """Where ``source`` depends on a wall-clock window (the module's rules)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    found: list[Finding] = []

    def add(node: ast.AST, rule: str) -> None:
        line = node.lineno  # type: ignore[attr-defined]
        end = getattr(node, "end_lineno", None) or line
        # the pragma on the node's lines, or on the comment lines just above it
        above = line - 1
        while above >= 1 and lines[above - 1].strip().startswith("#"):
            above -= 1
        if not any(EXEMPT.search(lines[number - 1]) for number in range(above + 1, end + 1)):
            found.append(Finding(path, line, rule))

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg in LIMIT_KEYWORDS and _is_limit(keyword.value):
                    add(node, f"a number as {keyword.arg}=: use deadline(...)")
            method = getattr(node.func, "attr", None)
            if method in LIMIT_METHODS and node.args and _is_limit(node.args[0]):
                add(node, f"a number as the limit of .{method}(): use deadline(...)")
            for keyword in node.keywords:
                if keyword.arg == "deadline" and _is_limit(keyword.value):
                    add(node, "a per-example deadline= for hypothesis: leave it off")
            if _attribute_call(node, "threading", {"Timer"}):
                add(node, "a real timer: inject a clock (tests/support/clocks.py)")
            if any(
                isinstance(argument, ast.Constant) and argument.value == "IDLE_SECONDS"
                for argument in node.args
            ):
                add(node, "the pool's idle time patched: move its ManualClock instead")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            positional = arguments.posonlyargs + arguments.args
            with_defaults = positional[len(positional) - len(arguments.defaults) :]
            defaults = list(zip(with_defaults, arguments.defaults, strict=True))
            keywords = zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)
            defaults += [(argument, default) for argument, default in keywords if default]
            for argument, default in defaults:
                if (
                    LIMIT_PARAMETERS.match(argument.arg)
                    and _is_number(default)
                    and not _calls_deadline(node)
                ):
                    limit = f"{argument.arg}={ast.unparse(default)}"
                    add(node, f"{limit} not passed through deadline()")
            if node.name.startswith("test_"):
                for inner in ast.walk(node):
                    if _attribute_call(inner, "time", {"sleep"}):
                        add(inner, "time.sleep in a test: wait on an event or move a ManualClock")
        elif isinstance(node, ast.Assign) and _is_limit(node.value):
            for target in node.targets:
                if isinstance(target, ast.Name) and LIMIT_CONSTANTS.search(target.id):
                    add(node, f"{target.id} is a bare number: define it as deadline(...)")
        elif isinstance(node, ast.Assert):
            if any(_attribute_call(inner, "time", CLOCKS) for inner in ast.walk(node)):
                add(node, "an assert on a clock reading: assert the outcome, with a deadline")
    return found


def test_no_test_depends_on_a_wall_clock_window() -> None:
    found = [
        finding
        for path in _sources()
        for finding in findings(path.read_text(encoding="utf-8"), str(path.relative_to(TESTS)))
    ]
    assert not found, "\n".join(map(str, found))


def test_every_exemption_says_why() -> None:
    unexplained = [
        f"{path.relative_to(TESTS)}:{number}"
        for path in _sources()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if (match := EXEMPT.search(line)) and not match.group(1)
    ]
    assert not unexplained, unexplained


@pytest.mark.parametrize(
    ("source", "rule"),
    [
        ("subprocess.run(['x'], timeout=120)", "a number as timeout="),
        ("process.communicate(timeout=2 * 60)", "a number as timeout="),
        ("thread.join(5)", "the limit of .join()"),
        ("event.wait(0.5)", "the limit of .wait()"),
        ("future.result(30)", "the limit of .result()"),
        ("def helper(timeout=300):\n    return wait(timeout)", "not passed through deadline"),
        ("def helper(*, limit_s=10.0):\n    pass", "not passed through deadline"),
        ("def test_x():\n    time.sleep(0.1)\n    assert done", "time.sleep in a test"),
        ("assert time.monotonic() - began < 60", "an assert on a clock reading"),
        ("assert time.perf_counter() < end", "an assert on a clock reading"),
        ("threading.Timer(10, release).start()", "a real timer"),
        ("monkeypatch.setattr(staging, 'IDLE_SECONDS', 0.2)", "idle time patched"),
        ("DEADLINE = 10.0", "DEADLINE is a bare number"),
        ("PROCESS_LIMIT_S = 60", "PROCESS_LIMIT_S is a bare number"),
        ("@settings(max_examples=9, deadline=500)\ndef test_x(): pass", "deadline= for hyp"),
    ],
)
def test_each_rule_finds_its_case(source: str, rule: str) -> None:
    (finding,) = findings(source, "case.py")
    assert rule in finding.rule


@pytest.mark.parametrize(
    "source",
    [
        "subprocess.run(['x'], timeout=deadline(120))",
        "thread.join(deadline(5))",
        "thread.join()",
        "def helper(timeout=300):\n    return wait(deadline(timeout))",
        "def worker():\n    time.sleep(60)",  # a worker process's simulated hang, not a test
        "def test_x():\n    time.sleep(0.1)  # wall-clock: stands for a slow source",
        "assert waited == 3",
        "init(timeout=timedelta_s)",
        "process.wait(0)",  # a poll
        "DEADLINE = deadline(10.0)",
        "# wall-clock: a watchdog\nthreading.Timer(deadline(60), stop)",
    ],
)
def test_what_the_rules_allow(source: str) -> None:
    assert findings(source, "case.py") == []


def test_property_tests_have_no_per_example_deadline() -> None:
    """hypothesis's default 200 ms per example failed a property test at load 19
    (``FlakyFailure: Unreliable test timings``): the suite's profile turns it off."""
    hypothesis = pytest.importorskip("hypothesis")
    assert hypothesis.settings().deadline is None


def test_the_summary_of_test_sh_tells_deadlines_from_failures(tmp_path: Path) -> None:
    """``scripts/test.sh`` ends with each failed group's deadlines apart from its other
    failures (its ``summarize_failures``, run here on a made-up group's log)."""
    script = (TESTS.parent / "scripts" / "test.sh").read_text()
    function = re.search(r"^summarize_failures\(\) \{.*?^\}$", script, re.M | re.S)
    assert function is not None
    (tmp_path / "slow-jobs.log").write_text(
        "FAILED tests/unit/a.py::test_hung - subprocess.TimeoutExpired: ...\n"
        "FAILED tests/unit/a.py::test_wrong - assert 1 == 2\n"
        "FAILED tests/unit/a.py::test_case[a b] - AssertionError: x - y\n"
        "ERROR tests/unit/b.py::test_setup - RuntimeError\n"
        "DEADLINE HIT: tests/unit/a.py::test_hung\n"
    )
    (tmp_path / "checks.log").write_text("mypy: 1 error\n")
    result = subprocess.run(
        ["bash", "-c", f'{function.group(0)}\nlogs="$1"\nsummarize_failures slow-jobs checks',
         "summary", str(tmp_path)],
        capture_output=True, text=True, check=True, timeout=deadline(60),
    )  # fmt: skip
    assert result.stdout == (
        "test.sh: failed: slow-jobs checks (each group's output is above)\n"
        "  slow-jobs:\n"
        "    deadlines hit (a hang, or a machine too busy: re-run with"
        " TORCH2JAX_DEVICE_TEST_DEADLINE_SCALE=4 ./scripts/test.sh NODEID):\n"
        "      tests/unit/a.py::test_hung\n"
        "    failures:\n"
        "      tests/unit/a.py::test_case[a b]\n"
        "      tests/unit/a.py::test_wrong\n"
        "      tests/unit/b.py::test_setup\n"
        "  checks:\n"
        "    no test failed: the group's own command did (its output is above)\n"
    )


def test_a_deadline_hit_is_named_in_pytests_summary(tmp_path: Path) -> None:
    """The plugin of ``tests/support/deadlines.py`` marks a test that ran past a deadline
    (its own ``DeadlineHit`` or a subprocess's ``TimeoutExpired``), and only those."""
    (tmp_path / "test_cases.py").write_text(
        "import subprocess, sys\n"
        "from tests.support.deadlines import DeadlineHit\n"
        "def test_hung():\n"
        "    subprocess.run([sys.executable, '-c', 'import time; time.sleep(60)'], timeout=0.01)\n"
        "def test_thread():\n"
        "    raise DeadlineHit('DEADLINE HIT: a thread')\n"
        "def test_wrong():\n"
        "    assert 1 == 2\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.support.deadlines", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path / "test_cases.py")],
        capture_output=True, text=True, cwd=TESTS.parent, timeout=deadline(120),
    )  # fmt: skip
    hits = sorted(line for line in result.stdout.splitlines() if line.startswith("DEADLINE HIT: "))
    assert hits == [
        "DEADLINE HIT: test_cases.py::test_hung",
        "DEADLINE HIT: test_cases.py::test_thread",
    ], result.stdout[-3000:]
    assert "Re-run it with more time: TORCH2JAX_DEVICE_TEST_DEADLINE_SCALE=4" in result.stdout


def test_busy_sh_runs_a_command_beside_burners_and_keeps_its_status() -> None:
    """``scripts/busy.sh``, the busy machine the suite must pass on (CONTRIBUTING.md)."""
    busy = str(TESTS.parent / "scripts" / "busy.sh")
    # the command sees its burners as siblings: busy.sh's other children, spinning
    count = "ps -o pid= --ppid $PPID | wc -l"
    result = subprocess.run(
        [busy, "3", "bash", "-c", f"echo $({count}); exit 7"],
        capture_output=True, text=True, timeout=deadline(60),
    )  # fmt: skip
    assert result.returncode == 7
    assert int(result.stdout.split()[0]) >= 4  # 3 burners and this command (and ps)
    assert "beside 3 burners: exit 7 after" in result.stdout
