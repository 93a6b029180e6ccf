"""``scan --diff`` never moves a line that reads the current device from torch's to tj's
(audit A6; docs/scan-diff.md, "torch's current device").

torch and tj each keep a current device. While a setting of torch's stays torch's
(``torch.cuda.set_device(1)`` with torch code still placing data, ``with
torch.cuda.device(1):``, ``torch.accelerator.set_device_index``, a device module chosen
by name, a helper of the project that sets it, a library that sets it for the process), a
rewrite of an index-less move (``jnp.ones(3).cuda()``) or of a query without a device
(``torch.cuda.memory_allocated()``) to ``tj`` would resolve through tj's current device,
``cuda:0``, where torch's is ``cuda:1``.

The generator: every catalog row that ``--diff`` rewrites, written so that it reads the
current device (a rename row's own ``torch`` column; a custom row's call with an
index-less accelerator, in the forms a script writes it), paired with every kind of setter
kept as torch's. A rewrite ``--diff`` still makes there must not resolve through tj's
current device, by an oracle independent of the scanner: tj's own signatures (a device
parameter left out, an index-less accelerator given). No GPU is needed: what is asserted
is the plan (which findings are held back, and that their reason cites the setter); the
execution oracle (``test_scan_oracle.py``) runs a script whose current device torch sets
and keeps (``fixtures/oracle/torch_current_device_kept.py``).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable

import pytest

import torch2jax_device as tj
from tests.support.cli import port_text, scan_text
from torch2jax_device.porting import catalog, scanner
from torch2jax_device.porting._current_device import CURRENT_DEVICE_TJ

PRELUDE = """\
import jax.numpy as jnp
import safetensors.torch
import torch
from flax import nnx
path = "weights.pt"
"""
# A device without an index, as scripts write it.
INDEX_FREE = ['"cuda"', 'torch.device("cuda")', '"cuda" if torch.cuda.is_available() else "cpu"']
# The custom rows that read the current device, each as lines whose result JAX reads
# (``{device}`` is each of INDEX_FREE in turn).
CUSTOM = {
    "device-select": ['device = torch.device("cuda" if torch.cuda.is_available() else "cpu")',
                      "y = jnp.ones(3).to(device)", "print(y)"],
    "device-type": ['device = torch.device("cuda")', "y = jnp.ones(3).to(device)", "print(y)"],
    "device-from-spec": ["spec = 'cuda'", "device = torch.device(spec)",
                         "y = jnp.ones(3).to(device)", "print(y)"],
    "device-string": ['device = "cuda"', "y = jnp.ones(3).to(device)", "print(y)"],
    "tensor-to-device": ["y = jnp.ones(3).to({device})", "print(y)"],
    "tensor-to-device-dtype": ["y = jnp.ones(3).to({device}, jnp.float16)", "print(y)"],
    "tensor-non-blocking": ["y = jnp.ones(3).to({device}, non_blocking=True)", "print(y)"],
    "tensor-to-copy": ["y = jnp.ones(3).to({device}, copy=True)", "print(y)"],
    "tensor-cuda": ["y = jnp.ones(3).cuda()", "print(y)"],
    "module-to": ["net = nnx.Linear(2, 2, rngs=nnx.Rngs(0))", "net.to({device})",
                  "net.cuda()", "print(net(jnp.ones(2)))"],
    "torch-load-map-location": ["state = torch.load(path, map_location={device})",
                                "print(jnp.sum(state['w']))"],
    "torch-load-map-location-dict": [
        "state = torch.load(path, map_location={{'cuda:1': {device}}})",
        "print(jnp.sum(state['w']))"],
    "default-device-context": ["with torch.device({device}):", "    y = jnp.ones(3)",
                               "print(y)"],
}  # fmt: skip
# The custom rows whose rewrite never reads the current device, and why.
NOT_CURRENT = {
    "device-indexed": "an index is written",
    "device-type-index": "an index is written",
    "device-accelerator-index": "an index is written",
    "device-string-logic": "tests a name, places nothing",
    "tensor-to-dtype": "changes the dtype only",
    "tensor-to-other": "the other array's own device, indexed",
    "tensor-cpu": "the CPU has no current device",
    "batch-encoding-to-device": "a Hugging Face batch: tensor-to-device's call",
    "tensor-device": "an array's own device, indexed",
    "module-to-dtype": "changes the dtype only",
    "parameters-device": "a parameter's own device, indexed",
    "tensor-to-jax": "an array's own device",
    "jax-to-tensor": "an array's own device",
    "parameter-count": "places nothing",
    "ddp-batch-statistics": "advice on what a layer computes, never rewritten",
    "ddp-summed-loss": "advice on what a loss computes, never rewritten",
    "tensor-device-type": "a type, no index",
    "factory-device": "advice, never rewritten",
    "factory-tensor-device": "advice, never rewritten",
    "tensor-new-factory": "advice, never rewritten",
    "module-device-kwarg": "advice, never rewritten",
    "startup-order": "a finding about order, never a rewrite",
    "cuda-visible-devices": "the environment, read at start-up",
    "cuda-alloc-conf": "the environment, read at start-up",
    "torch-load": "no map_location: where the file says",
    "torch-load-map-location-callable": "advice: the callable decides",
    "load-model-state": "where the model's arrays are",
    "save-model-torch-twin": "saves, places nothing",
    "dataloader-pin-memory": "pinned host memory",
    "tensor-pin-memory": "pinned host memory",
    "dataloader-workers": "places nothing",
    "dist-local-rank": "reads the environment",
    "dist-env": "reads the environment",
    "ddp-module": "places nothing",
    "ddp-no-sync": "places nothing",
}


def _custom_cases() -> list[tuple[str, list[str]]]:
    cases = []
    for rule, lines in CUSTOM.items():
        forms = INDEX_FREE if any("{device}" in line for line in lines) else ['"cuda"']
        cases += [(rule, [line.format(device=form) for line in lines]) for form in forms]
    return cases


def _rename_cases() -> list[tuple[str, list[str]]]:
    """Each rename row's own ``torch`` column (the setters themselves aside), its result
    printed."""
    cases = []
    for row in catalog.CATALOG:
        if row.rewrite != "rename" or row.id in ("cuda-set-device", "accelerator-set-device-index"):
            continue
        if row.id in ("cuda-device-context", "default-device-set", "load-safetensors"):
            continue  # a block, a default: CUSTOM-like cases below
        lines = row.torch.splitlines()
        if row.result:
            lines.append(f"print({row.result})")
        cases.append((row.id, lines))
    cases.append(("default-device-set", ['torch.set_default_device("cuda")', "y = jnp.ones(3)",
                                         "print(y)"]))  # fmt: skip
    cases.append(("load-safetensors", ['state = safetensors.torch.load_file(path, device="cuda")',
                                       "print(jnp.sum(state['w']))"]))  # fmt: skip
    return cases


CASES = _custom_cases() + _rename_cases()


def _indent(lines: list[str], by: str) -> str:
    return "".join(f"{by}{line}\n" for line in lines)


# Each kind of setting of torch's current device that stays torch's: the files, the file
# and line of the setting the reason cites, and the file the case's lines are in.
Setting = tuple[dict[str, str], str, int, str]
KEEP = "encoder = torch.nn.Linear(2, 2).cuda()\nprint(encoder(torch.ones(2).cuda()))\n"


def _set_device(lines: list[str]) -> Setting:
    source = PRELUDE + "torch.cuda.set_device(1)\n" + KEEP + _indent(lines, "")
    return {"main.py": source}, "main.py", PRELUDE.count("\n") + 1, "main.py"


def _accelerator(lines: list[str]) -> Setting:
    source = PRELUDE + "torch.accelerator.set_device_index(1)\n" + KEEP + _indent(lines, "")
    return {"main.py": source}, "main.py", PRELUDE.count("\n") + 1, "main.py"


def _context(lines: list[str]) -> Setting:
    source = (
        PRELUDE + "with torch.cuda.device(1):\n" + _indent([*KEEP.splitlines(), *lines], "    ")
    )
    return {"main.py": source}, "main.py", PRELUDE.count("\n") + 1, "main.py"


def _device_module(lines: list[str]) -> Setting:
    source = (
        PRELUDE + 'device_module = getattr(torch, "cuda")\ndevice_module.set_device(1)\n'
        + _indent(lines, "")
    )  # fmt: skip
    return {"main.py": source}, "main.py", PRELUDE.count("\n") + 2, "main.py"


def _created_only(lines: list[str]) -> Setting:
    """Held back only because torch still creates tensors (no placement finding)."""
    source = (
        PRELUDE + "torch.cuda.set_device(1)\nw = torch.zeros(3)\nprint(w)\n" + _indent(lines, "")
    )
    return {"main.py": source}, "main.py", PRELUDE.count("\n") + 1, "main.py"


def _in_a_function(lines: list[str]) -> Setting:
    """Set in one function, read in another called after it."""
    setup = "def setup():\n    torch.cuda.set_device(1)\n" + _indent(KEEP.splitlines(), "    ")
    main = "def main():\n" + _indent(lines, "    ") + "setup()\nmain()\n"
    source = PRELUDE + setup + main
    return {"main.py": source}, "main.py", PRELUDE.count("\n") + 2, "main.py"


def _helper_module(lines: list[str]) -> Setting:
    """A helper module of the project sets it; the script imports and calls it."""
    utils = "import torch\n\ndef setup(rank):\n    torch.cuda.set_device(rank)\n" + _indent(
        KEEP.splitlines(), "    "
    )
    main = PRELUDE + "from utils import setup\nsetup(1)\n" + _indent(lines, "")
    return {"utils.py": utils, "main.py": main}, "utils.py", 4, "main.py"


def _library(lines: list[str]) -> Setting:
    """A library that sets torch's current device for the process (Accelerate)."""
    source = PRELUDE + "from accelerate import Accelerator\naccelerator = Accelerator()\n"
    return {"main.py": source + _indent(lines, "")}, "main.py", PRELUDE.count("\n") + 1, "main.py"


SETTINGS: dict[str, Callable[[list[str]], Setting]] = {
    "set_device": _set_device,
    "accelerator_index": _accelerator,
    "device_context": _context,
    "device_module": _device_module,
    "created_only": _created_only,
    "in_a_function": _in_a_function,
    "helper_module": _helper_module,
    "library": _library,
}


# -- the oracle: does a tj call resolve through tj's current device? ------------------
# tj's calls that have no device parameter and answer for the current device.
ALWAYS_CURRENT = {
    "tj.cuda.current_device",
    "tj.accelerator.current_device_index",
    "tj.get_default_device",
    "tj.cuda.is_bf16_supported",
}


def _tj_function(func: ast.expr) -> tuple[str, object] | None:
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not (isinstance(func, ast.Name) and func.id == "tj"):
        return None
    target: object = tj
    for part in reversed(parts):
        target = getattr(target, part)
    return ".".join(["tj", *reversed(parts)]), target


def _index_free(value: ast.expr, module: ast.Module) -> bool:
    """The device ``value`` may name has no index (unknown counts as index-free)."""
    if isinstance(value, ast.Constant):
        if not isinstance(value.value, str):
            return False
        kind, colon, _ = value.value.partition(":")
        return not colon and kind not in ("cpu", "meta")
    if isinstance(value, ast.IfExp):
        return _index_free(value.body, module) or _index_free(value.orelse, module)
    if isinstance(value, ast.Dict):
        return any(_index_free(v, module) for v in value.values if v is not None)
    if isinstance(value, ast.Call) and ast.unparse(value.func) in ("tj.device", "torch.device"):
        return len(value.args) < 2 and (not value.args or _index_free(value.args[0], module))
    if isinstance(value, ast.Name):
        assigned = [
            node.value
            for node in ast.walk(module)
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == value.id for t in node.targets)
        ]
        return not assigned or any(_index_free(v, module) for v in assigned)
    return True


def resolves_through_tj_current(call: ast.Call, module: ast.Module) -> bool:
    """``call`` (a tj call of the rewritten script) resolves through tj's current device,
    by tj's own signature: its device parameter left out where it defaults to the current
    device (``None``, in ``tj.cuda``/``tj.accelerator``), or given without an index."""
    found = _tj_function(call.func)
    if found is None:
        return False
    name, function = found
    if name in ALWAYS_CURRENT:
        return True
    try:
        signature = inspect.signature(function)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    parameters = list(signature.parameters)
    for wanted in ("device", "map_location", "type"):
        if wanted not in parameters:
            continue
        position = parameters.index(wanted)
        given = next((k.value for k in call.keywords if k.arg == wanted), None)
        if given is None and len(call.args) > position:
            given = call.args[position]
        if given is None:
            default = signature.parameters[wanted].default
            return default is None and name.startswith(("tj.cuda.", "tj.accelerator."))
        if name == "tj.device" and (len(call.args) > 1 or call.keywords):
            return False  # tj.device(type, index)
        return _index_free(given, module)
    return False


def _rewritten_reads(files: dict[str, str], path: str, lines: range) -> list[str]:
    """The tj calls on ``lines`` of ``path`` after ``--diff`` that resolve through tj's
    current device."""
    found = scanner.scan_sources(files)
    ported = scanner.apply_edits(files[path], found[path])
    module = ast.parse(ported)
    shift = ported.count("\n") - files[path].count("\n")  # the tj import line
    return [
        ast.unparse(node)
        for node in ast.walk(module)
        if isinstance(node, ast.Call)
        and node.lineno - shift in lines
        and resolves_through_tj_current(node, module)
    ]


def _case_lines(source: str, lines: list[str]) -> range:
    """The lines of ``source`` the case's lines are on (1-based)."""
    text = source.splitlines()
    first = next(i for i, line in enumerate(text) if line.strip() == lines[0].strip())
    return range(first + 1, first + len(lines) + 1)


@pytest.mark.parametrize(
    ("rule", "lines"), CASES, ids=[f"{r}-{i}" for i, (r, _) in enumerate(CASES)]
)
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_no_rewrite_reads_tjs_current_device_while_torchs_is_kept(
    setting: str, rule: str, lines: list[str]
) -> None:
    files, setter_path, setter_line, path = SETTINGS[setting](lines)
    where = _case_lines(files[path], lines)
    assert not _rewritten_reads(files, path, where)
    cited = f"line {setter_line}" if setter_path == path else f"{setter_path}:{setter_line}"
    for finding in scanner.scan_sources(files)[path]:
        if finding.line in where and "torch's current device (" in finding.reason:
            assert f"torch's current device ({cited}" in finding.reason, finding.reason


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_each_kind_of_setter_holds_the_moves_back_itself(setting: str) -> None:
    """Not vacuous: under each kind of setter, the moves rewritten without it are held
    back for the current device (not only for another reason)."""
    held = set()
    for rule, lines in _custom_cases():
        files, _, _, path = SETTINGS[setting](lines)
        where = _case_lines(files[path], lines)
        if any(
            f.line in where and "torch's current device (" in f.reason
            for f in scanner.scan_sources(files)[path]
        ):
            held.add(rule)
    assert {"tensor-cuda", "tensor-to-device", "device-type", "torch-load-map-location"} <= held


def test_every_case_is_live_without_a_setter() -> None:
    """Each CUSTOM case, scanned alone, is rewritten to a call that reads tj's current
    device (else the generator tests nothing for it)."""
    dead = []
    for rule, lines in _custom_cases():
        alone = {"main.py": PRELUDE + _indent(lines, "")}
        if not _rewritten_reads(alone, "main.py", _case_lines(alone["main.py"], lines)):
            dead.append((rule, lines))
    assert not dead


def test_every_rewritten_row_is_classified() -> None:
    """A new catalog row that ``--diff`` rewrites gets a case here or says why it never
    reads the current device."""
    renames = {rule for rule, _ in _rename_cases()}
    for row in catalog.CATALOG:
        if row.rewrite == "custom":
            assert row.id in CUSTOM or row.id in NOT_CURRENT, row.id
        elif row.rewrite == "rename":
            setters = ("cuda-set-device", "accelerator-set-device-index", "cuda-device-context")
            assert row.id in renames or row.id in setters, row.id


def test_the_scanners_table_is_tjs_signatures() -> None:
    """``CURRENT_DEVICE_TJ`` is every tj.cuda/tj.accelerator call whose device parameter
    defaults to the current device, at its position, and the calls that always answer
    for it."""
    expected: dict[str, tuple[int, str] | None] = dict.fromkeys(ALWAYS_CURRENT)
    for module, prefix in ((tj.cuda, "tj.cuda."), (tj.accelerator, "tj.accelerator.")):
        for name in module.__all__:
            function = getattr(module, name)
            if not inspect.isfunction(function):
                continue
            parameters = inspect.signature(function).parameters
            device = parameters.get("device")
            if device is not None and device.default is None:
                expected[prefix + name] = (list(parameters).index("device"), "device")
    assert CURRENT_DEVICE_TJ == expected


# -- the cases the audit found, and the other way round --------------------------------
def test_the_audits_scripts_keep_the_moves_torchs_current_device_decides() -> None:
    source = """\
        import torch
        import jax.numpy as jnp

        with torch.cuda.device(1):
            encoder = torch.nn.Linear(2, 2).cuda()
            feats = encoder(torch.ones(2).cuda())
            x = jnp.ones(3).cuda()
        print(feats, x)
        """
    found = {f.line: f for f in scan_text(source)}
    assert not found[7].fixable
    assert "torch's current device (line 4: with torch.cuda.device(1)" in found[7].reason
    assert "tj's would be cuda:0" in found[7].reason
    assert port_text(source) == textwrap.dedent(source)


def test_an_explicit_index_is_still_rewritten() -> None:
    source = """\
        import torch
        import jax.numpy as jnp

        torch.cuda.set_device(1)
        encoder = torch.nn.Linear(2, 2).cuda()
        x = jnp.ones(3).to("cuda:1")
        y = jnp.ones(3).cpu()
        other = jnp.ones(2)
        z = jnp.ones(3).to(other)
        w = jnp.ones(3).to(other.device)
        print(encoder, x, y, z, w)
        """
    ported = port_text(source)
    assert 'x = tj.to_device(jnp.ones(3), "cuda:1")' in ported
    assert 'y = tj.to_device(jnp.ones(3), "cpu")' in ported
    assert "z = tj.to_device(jnp.ones(3), other)" in ported  # another array's own device
    assert "w = tj.to_device(jnp.ones(3), other.device)" in ported


def test_code_that_runs_before_the_setter_is_rewritten() -> None:
    """Module-level code above a module-level setter runs once, before it."""
    source = """\
        import torch
        import jax.numpy as jnp

        x = jnp.ones(3).cuda()
        torch.cuda.set_device(1)
        encoder = torch.nn.Linear(2, 2).cuda()
        y = jnp.ones(3).cuda()
        print(encoder, x, y)
        """
    found = {f.line: f for f in scan_text(source)}
    assert found[4].fixable
    assert not found[7].fixable and "line 5" in found[7].reason


def test_a_setter_is_kept_while_a_line_kept_as_torchs_reads_the_current_device() -> None:
    """The other way round: ``tj.cuda.set_device`` would not set what torch's kept
    query reads (here kept because the module exports its answer)."""
    source = """\
        import torch

        __all__ = ["index"]
        torch.cuda.set_device(1)
        index = torch.cuda.current_device()
        """
    found = {f.line: f for f in scan_text(source)}
    assert not found[5].fixable
    assert not found[4].fixable
    assert "line 5: cuda-current-device" in found[4].reason


READERS = [
    (rule, lines)
    for rule, lines in _rename_cases()
    if _rewritten_reads(
        {"main.py": PRELUDE + _indent(lines, "")},
        "main.py",
        _case_lines(PRELUDE + _indent(lines, ""), lines),
    )
]


@pytest.mark.parametrize(("rule", "lines"), READERS, ids=[rule for rule, _ in READERS])
@pytest.mark.parametrize(
    "setter", ["torch.cuda.set_device(1)", "torch.accelerator.set_device_index(1)"]
)
def test_no_setter_is_rewritten_while_a_reader_stays_torchs(
    setter: str, rule: str, lines: list[str]
) -> None:
    """The generator the other way round: each rename row that reads the current device,
    kept as torch's (its module exports the answer), keeps the setter above it torch's."""
    name = lines[0].split("=")[0].strip() if "=" in lines[0] else None
    if name is None or not name.isidentifier():
        pytest.skip("the row's call keeps no answer to export")
    source = f"{PRELUDE}__all__ = [{name!r}]\n{setter}\n{lines[0]}\n"
    at = PRELUDE.count("\n") + 2
    found = {f.line: f for f in scanner.scan_sources({"main.py": source})["main.py"]}
    assert not found[at + 1].fixable, found[at + 1]
    assert not found[at].fixable
    assert f"{at + 1}: {rule}" in found[at].reason  # this reason, or "torch still places"


def test_a_module_imported_inside_the_block_runs_under_it() -> None:
    """A module first imported inside ``with torch.cuda.device(1):`` runs its top level
    there."""
    files = {
        "main.py": "import torch\n\nwith torch.cuda.device(1):\n"
        "    encoder = torch.nn.Linear(2, 2).cuda()\n    import features\n",
        "features.py": "import jax.numpy as jnp\n\nx = jnp.ones(3).cuda()\nprint(x)\n",
    }
    found = {f.line: f for f in scanner.scan_sources(files)["features.py"]}
    assert not found[3].fixable
    assert "torch's current device (main.py:3: with torch.cuda.device(1)" in found[3].reason
