"""Every public callable, called with junk: the library's own error, naming the value and the fix.

``tests/support/junk_inputs.py`` walks tj's public surface, and gives each parameter of
each callable junk (``object()``, ``"nonsense"``, ``2**70``, ``nan``, a lambda, a torch
tensor, a closed file, a directory, ...) with the other arguments plausible. The call
either succeeds, leaving any file it writes whole, or raises a `tj.Torch2JaxDeviceError`
that names the value (or its type, or a leaf of it) and says the fix, leaving JAX's
options and the environment as they were; it never hangs. One test per callable, so a
failure names it. This in-process tier gives each parameter two kinds of junk (a pair
chosen by its name); ``TORCH2JAX_DEVICE_JUNK_KINDS=all`` gives every kind, as the slow
test's subprocess does (``python -m tests.support.junk_inputs`` prints that sweep).

A finding not yet fixed is a row of ``KNOWN``: the callable's parameter, and the request
for the module's owner. A row whose finding is gone fails the full sweep: delete it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import torch2jax_device as tj
from tests.support import junk_inputs
from tests.support.deadlines import deadline

ROOT = Path(__file__).resolve().parents[2]

_PORTING = "porting/: a request in junkfuzz-requests.md"

#: "target(parameter)" -> whose module it is in and where the fix is asked for.
KNOWN: dict[str, str] = {
    "tj.porting.scanner.read_python(path)": _PORTING,  # a missing file: FileNotFoundError
}

TARGETS = junk_inputs.targets()


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> junk_inputs.Sandbox:
    return junk_inputs.Sandbox(tmp_path_factory.mktemp("junk"))


def _unknown(target: str, findings: list[tuple[str, str]]) -> list[str]:
    return [finding for parameter, finding in findings if f"{target}({parameter})" not in KNOWN]


@pytest.mark.parametrize("target", TARGETS, ids=[target.path for target in TARGETS])
def test_junk_is_refused_by_the_library_naming_the_value_and_the_fix(
    target: junk_inputs.Target, box: junk_inputs.Sandbox
) -> None:
    every = os.environ.get(junk_inputs.KINDS_ENV) == "all"
    _, findings = junk_inputs.sweep(target, box, every=every)
    unknown = _unknown(target.path, findings)
    assert not unknown, "\n".join(unknown)


def test_the_walk_reaches_every_namespace_and_its_methods() -> None:
    paths = {target.path for target in TARGETS}
    for expected in (
        "tj.to_device",
        "tj.Device",
        "tj.cuda.mem_get_info",
        "tj.accelerator.set_device_index",
        "tj.backends.cuda.matmul.fp32_precision=",
        "tj.distributed.make_global_batch",
        "tj.optim.SGD",
        "tj.optim.lr_scheduler.StepLR.load_state_dict",
        "tj.optim.ParamGroup.__setitem__",
        "tj.safe_open.get_slice",
        "tj.Parameter.size()",
        "tj.porting.scanner.scan_source",
    ):
        assert expected in paths, expected
    assert len(TARGETS) > 150


def test_a_new_public_name_is_walked_without_editing_the_test(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def brand_new(device: tj.DeviceLike) -> None:
        tj.Device(device)

    monkeypatch.setattr(tj.accelerator, "brand_new", brand_new, raising=False)
    monkeypatch.setattr(tj.accelerator, "__all__", [*tj.accelerator.__all__, "brand_new"])
    walked = {target.path: target for target in junk_inputs.targets()}
    assert [p.name for p in walked["tj.accelerator.brand_new"].parameters] == ["device"]


def test_the_oracle_fails_a_raw_error_a_mute_error_and_a_refusal_that_changed_state(
    box: junk_inputs.Sandbox,
) -> None:
    """The oracle can fail: each way of breaking the rule is reported."""

    def raw(device: str) -> None:
        if device != "cpu":  # the plausible value passes: the junk is what is refused
            raise KeyError(device)

    def mute(device: str) -> None:
        if device != "cpu":
            raise tj.ConfigError("that is not right")

    def no_fix(device: str) -> None:
        if device != "cpu":
            raise tj.ConfigError(f"{device!r} is not right")

    def changes(device: str) -> None:
        if device != "cpu":
            os.environ["TORCH2JAX_DEVICE_JUNK_PROBE"] = "1"
            raise tj.ConfigError(f"{device!r} is not right. Fix: give 'cpu'")

    def good(device: str) -> None:
        if device != "cpu":
            raise tj.ConfigError(f"{device!r} is not right. Fix: give 'cpu'")

    def environment(device: str) -> None:  # refuses the machine whatever the value
        raise tj.ConfigError("this machine has no such thing. Fix: install it")

    verdicts = {}
    for function in (raw, mute, no_fix, changes, good, environment):
        target = junk_inputs.Target(
            function.__name__, lambda box, f=function: f, junk_inputs._parameters(function)
        )
        case = junk_inputs.Case(target, target.parameters[0], "nonsense-str")
        verdicts[function.__name__] = junk_inputs.judge(case, box)
    assert "raw KeyError" in verdicts["raw"]
    assert "names neither the value" in verdicts["mute"]
    assert "gives no fix" in verdicts["no_fix"]
    assert "changed os.environ['TORCH2JAX_DEVICE_JUNK_PROBE']" in verdicts["changes"]
    assert "TORCH2JAX_DEVICE_JUNK_PROBE" not in os.environ  # restored
    assert verdicts["good"] is None
    assert verdicts["environment"] is None


def test_exclusions_name_public_callables() -> None:
    """Each row of EXCLUDED still names something public (so the list cannot rot)."""
    every = junk_inputs.EXCLUDED.copy()
    saved = dict(junk_inputs.EXCLUDED)
    try:
        junk_inputs.EXCLUDED.clear()
        paths = {target.path for target in junk_inputs.targets()}
    finally:
        junk_inputs.EXCLUDED.update(saved)
    for key in every:
        pattern = key.replace(".", r"\.").replace("*", r"\w+")
        assert any(
            path == key or path.startswith(key) if key.endswith(".") else _matches(pattern, path)
            for path in paths
        ), key


def _matches(pattern: str, path: str) -> bool:
    import re

    return re.fullmatch(pattern, path) is not None


@pytest.mark.slow
def test_the_whole_sweep_finds_nothing_but_the_known_rows() -> None:
    """Every kind of junk on every parameter, in a process of its own (about 7,000 calls);
    a KNOWN row it no longer finds is reported, to be deleted."""
    process = subprocess.run(
        [sys.executable, "-m", "tests.support.junk_inputs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=deadline(600),
        check=False,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    lines = [json.loads(line) for line in process.stdout.splitlines() if line.startswith("{")]
    summary = lines.pop()
    assert summary["calls"] > 5000
    found = {f"{line['target']}({line['parameter']})": line["finding"] for line in lines}
    unknown = [finding for key, finding in found.items() if key not in KNOWN]
    fixed = sorted(key for key in KNOWN if key not in found)
    assert not unknown, "\n".join(unknown)
    assert not fixed, f"fixed, delete these rows of KNOWN: {fixed}"
