"""``scan`` over a whole project: the files read together, their imports followed.

A device chosen in ``utils.py`` and used in ``train.py``, a model class defined in
``model.py``, a process group joined through a helper module: what one module does to a
value decides whether another's rewrite is correct. The generators here build the same
project in every import form Python offers (absolute, aliased, module attribute,
packages, relative, ``src/`` layout, re-exports, a function returning the device) and
check both directions: a value an importer hands to torch keeps torch's form in the
module that makes it, and one every importer takes is rewritten there. Files that do not
import one another are planned apart: each is found exactly as when scanned alone, and no
reason cites a file its own never reaches.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from torch2jax_device.cli import main
from torch2jax_device.porting import _flow, scanner
from torch2jax_device.porting._project import Project
from torch2jax_device.porting._source import SourceFile

ROOT = Path(__file__).resolve().parents[2]
# A module that runs code as it is imported (not a settings module): the scanner cannot
# assume only importers read its names, so only following them keeps a rewrite honest.
UTILS = 'import logging\nimport torch\n\nlogging.basicConfig()\ndevice = torch.device("cpu")\n'
GET_DEVICE = 'import torch\n\n\ndef get_device():\n    return torch.device("cpu")\n'
# (the files besides train.py, where train.py lies, its import, how it names the device)
FORMS = {
    "from-import": ({"utils.py": UTILS}, "train.py", "from utils import device", "device"),
    "alias": ({"utils.py": UTILS}, "train.py", "from utils import device as d", "d"),
    "module": ({"utils.py": UTILS}, "train.py", "import utils", "utils.device"),
    "module-alias": ({"utils.py": UTILS}, "train.py", "import utils as u", "u.device"),
    "package": (
        {"pkg/__init__.py": "", "pkg/utils.py": UTILS},
        "train.py",
        "import pkg.utils",
        "pkg.utils.device",
    ),
    "package-from": (
        {"pkg/__init__.py": "", "pkg/utils.py": UTILS},
        "train.py",
        "from pkg import utils",
        "utils.device",
    ),
    "relative": (
        {"pkg/__init__.py": "", "pkg/utils.py": UTILS},
        "pkg/train.py",
        "from .utils import device",
        "device",
    ),
    "relative-module": (
        {"pkg/__init__.py": "", "pkg/sub/__init__.py": "", "pkg/utils.py": UTILS},
        "pkg/sub/train.py",
        "from .. import utils",
        "utils.device",
    ),
    "src-layout": (
        {"src/pkg/__init__.py": "", "src/pkg/utils.py": UTILS},
        "train.py",
        "from pkg.utils import device",
        "device",
    ),
    "scripts-folder": ({"utils.py": UTILS}, "scripts/train.py", "import utils", "utils.device"),
    "namespace-package": (
        {"common/utils.py": UTILS},
        "train.py",
        "from common.utils import device",
        "device",
    ),
    # A relative import inside a namespace package (no __init__.py): Python resolves it
    # when a script above (run.py) imports the module as common.train.
    "namespace-relative": (
        {"common/utils.py": UTILS, "run.py": "import common.train\n"},
        "common/train.py",
        "from .utils import device",
        "device",
    ),
    "namespace-relative-up": (
        {"ns/pkg/__init__.py": "", "ns/utils.py": UTILS, "run.py": "import ns.pkg.train\n"},
        "ns/pkg/train.py",
        "from ..utils import device",
        "device",
    ),
    "re-export": (
        {"utils.py": UTILS, "common.py": "from utils import device\n"},
        "train.py",
        "from common import device",
        "device",
    ),
    "function": (
        {"utils.py": GET_DEVICE},
        "train.py",
        "from utils import get_device",
        "get_device()",
    ),
}
# How train.py uses the device: handed to torch, or only printed (which takes a tj.device).
USES = {
    "torch": "import torch\n{imp}\n\nx = torch.ones(2).to({dev})\nprint(x.sum().item())\n",
    "host": "{imp}\n\nprint({dev})\n",
}


def _project(form: str, use: str) -> dict[str, str]:
    others, train, imp, dev = FORMS[form]
    return {**others, train: USES[use].format(imp=imp, dev=dev)}


def _device_finding(found: dict[str, list[scanner.Finding]]) -> scanner.Finding:
    (finding,) = [
        f
        for path, findings in found.items()
        if path.endswith("utils.py")
        for f in findings
        if f.rule == "device-type"
    ]
    return finding


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_device_an_importer_hands_to_torch_stays_torch_where_it_is_made(form: str) -> None:
    sources = _project(form, "torch")
    found = scanner.scan_sources(sources)
    finding = _device_finding(found)
    assert not finding.fixable
    train = next(path for path in sources if path.endswith("train.py"))
    use = next(n for n, line in enumerate(sources[train].splitlines(), 1) if ".to(" in line)
    assert f"{train}:{use}: passed to torch.ones(2).to(" in finding.reason, finding.reason


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_device_every_importer_takes_is_rewritten_where_it_is_made(form: str) -> None:
    sources = _project(form, "host")
    finding = _device_finding(scanner.scan_sources(sources))
    assert finding.fixable, finding.reason
    assert finding.replacement == 'tj.device("cpu")'


def test_a_module_scanned_alone_keeps_a_device_it_cannot_see_used() -> None:
    """Without its importers, a settings module's device is held back (they may hand it
    to torch); a module that runs code as it is imported is taken as a script."""
    settings = 'import torch\n\ndevice = torch.device("cpu")\n'
    (finding,) = scanner.scan_source(settings, "utils.py")
    assert "modules that import it may hand it to torch" in finding.reason


def test_a_model_class_of_another_module_is_known_to_be_nnx() -> None:
    """``--diff`` ports a trainer consistently over its package: the NNX model defined in
    ``model.py`` is moved and saved with ``tj``, and the device chosen in ``utils.py`` that
    it is moved to becomes a ``tj.device`` in the same diff."""
    sources = {
        "src/app/__init__.py": "",
        "src/app/model.py": (
            "from flax import nnx\n\n\nclass MLP(nnx.Module):\n"
            "    def __init__(self, rngs):\n        self.linear = nnx.Linear(2, 2, rngs=rngs)\n"
        ),
        "src/app/utils.py": 'import torch\n\ndevice = torch.device("cpu")\n',
        "src/app/train.py": (
            "import torch\nfrom flax import nnx\n\n"
            "from .model import MLP\nfrom .utils import device\n\n\n"
            "def main(path):\n    model = MLP(rngs=nnx.Rngs(0))\n    model.to(device)\n"
            "    torch.save(model.state_dict(), path)\n"
        ),
    }
    found = scanner.scan_sources(sources)
    ported = {path: scanner.apply_edits(text, found[path]) for path, text in sources.items()}
    assert "    tj.to_device(model, device)\n" in ported["src/app/train.py"]
    assert 'torch.save(tj.state_dict(model, layout="torch"), path)' in ported["src/app/train.py"]
    assert 'device = tj.device("cpu")' in ported["src/app/utils.py"]
    # Scanned alone, train.py cannot know what MLP is, and leaves it.
    alone = scanner.scan_source(sources["src/app/train.py"], "src/app/train.py")
    assert not any(f.fixable for f in alone if f.rule == "module-to")


def test_a_name_another_module_assigns_is_not_known_by_its_own_binding() -> None:
    """``model.net = TorchNet()`` in train.py: ``model.net`` is no longer the NNX module
    ``model.py`` binds, so ``.to(device)`` on it is not rewritten as an NNX move."""
    model = "from flax import nnx\n\n\nclass MLP(nnx.Module):\n    pass\n\n\nnet = MLP()\n"
    train = "import torch\nimport model\n\n{}model.net.to(torch.device('cpu'))\n"
    assigned = "model.net = torch.nn.Linear(2, 2)\n"
    for write, fixable in (("", True), (assigned, False)):
        sources = {"model.py": model, "train.py": train.format(write)}
        (move,) = [f for f in scanner.scan_sources(sources)["train.py"] if f.rule == "module-to"]
        assert move.fixable is fixable, (write, move.reason)


def test_a_value_passed_to_a_function_of_another_module_is_followed_there() -> None:
    sources = {
        "steps.py": "def step(batch):\n    return batch.sum(dim=0)\n",
        "train.py": (
            "import jax\nimport torch\nfrom steps import step\n\n"
            "x = torch.ones(2).cuda()\nprint(step(x), jax.numpy.sum(x))\n"
        ),
    }
    (moved,) = [f for f in scanner.scan_sources(sources)["train.py"] if f.rule == "tensor-cuda"]
    assert not moved.fixable
    assert "line 6: passed to step(x), and in step of steps.py: steps.py:2:" in moved.reason


def test_a_join_in_a_helper_module_orders_the_start_up() -> None:
    """``init_distributed()`` of a helper module creates the process group: a query that
    would start JAX before it is not rewritten, and the reason names the helper's line."""
    sources = {
        "dist_utils.py": (
            "import torch\n\n\ndef init_distributed():\n"
            '    torch.distributed.init_process_group("gloo")\n'
        ),
        "train.py": (
            "import torch\nfrom dist_utils import init_distributed\n\n"
            "n = torch.cuda.device_count()\ninit_distributed()\nprint(n)\n"
        ),
    }
    found = scanner.scan_sources(sources)["train.py"]
    count = next(f for f in found if f.rule == "cuda-device-count")
    assert not count.fixable
    assert "before init_distributed(), which calls init_process_group (dist_utils.py:5)" in (
        count.reason
    )
    assert "(line 5)" in count.reason  # the call in train.py itself


def test_a_helper_module_query_called_before_the_join_is_not_rewritten() -> None:
    """``gpu_count()`` of ``utils.py`` asks ``torch.cuda.device_count()``; ``main.py``
    calls it before ``init_process_group``: as ``tj``'s it would start JAX (under a
    launcher, join a JAX job) before the group exists. The reason names main.py."""
    sources = {
        "utils.py": "import torch\n\n\ndef gpu_count():\n    return torch.cuda.device_count()\n",
        "main.py": (
            "import torch\n\nfrom utils import gpu_count\n\nn = gpu_count()\n"
            'torch.distributed.init_process_group("gloo")\nprint(n)\n'
        ),
    }
    found = scanner.scan_sources(sources)
    (count,) = [f for f in found["utils.py"] if f.rule == "cuda-device-count"]
    assert not count.fixable
    assert "before init_process_group (main.py:6, after gpu_count() (line 5 there)" in (
        count.reason
    )
    order = next(f for f in found["main.py"] if f.rule == "startup-order")
    assert order.line == 5
    assert _check_citations(sources, found)


def test_a_library_owning_the_group_through_a_helper_module_keeps_torch_queries() -> None:
    sources = {
        "dist_utils.py": "import deepspeed\n\n\ndef init():\n    deepspeed.init_distributed()\n",
        "train.py": (
            "import torch\nimport dist_utils\n\ndist_utils.init()\n"
            "print(torch.cuda.device_count())\n"
        ),
    }
    (count,) = [
        f for f in scanner.scan_sources(sources)["train.py"] if f.rule == "cuda-device-count"
    ]
    assert not count.fixable
    assert "owned by import deepspeed (dist_utils.py:1)" in count.reason


@pytest.mark.parametrize(
    ("call", "start"),
    [
        ("utils.setup()", "jnp.ones(3)"),
        ("utils.Helper()", "jax.devices()"),
        ("utils.Helper().run()", "jax.jit(lambda a: a + 1)(1)"),
        ("utils.setup()", "jax.lax.add(1, 2)"),
    ],
)
def test_direct_jax_use_in_another_modules_functions_orders_the_start_up(
    call: str, start: str
) -> None:
    """JAX started inside another module's function, class or method called before the
    join: a ``startup-order`` finding at the call (each would start JAX's backends, under a
    launcher joining a JAX job, before torch's group exists)."""
    sources = {
        "utils.py": (
            "import jax\nimport jax.numpy as jnp\n\n\ndef setup():\n"
            f"    return {start}\n\n\nclass Helper:\n    def __init__(self):\n"
            f"        self.x = {start if call == 'utils.Helper()' else 'None'}\n\n"
            f"    def run(self):\n        return {start}\n"
        ),
        "main.py": (
            f"import torch\nimport utils\n\nx = {call}\n"
            'torch.distributed.init_process_group("gloo")\n'
        ),
    }
    found = scanner.scan_sources(sources)["main.py"]
    assert [f.line for f in found if f.rule == "startup-order"] == [4], found


def test_a_method_of_an_instance_kept_in_a_name_orders_the_start_up() -> None:
    sources = {
        "utils.py": (
            "import jax\n\n\nclass Helper:\n    def run(self):\n        return jax.devices()\n"
        ),
        "main.py": (
            "import torch\nimport utils\n\nhelper = utils.Helper()\nx = helper.run()\n"
            'torch.distributed.init_process_group("gloo")\n'
        ),
    }
    found = scanner.scan_sources(sources)["main.py"]
    assert [f.line for f in found if f.rule == "startup-order"] == [5], found


@pytest.mark.parametrize(
    ("use", "held"),
    [
        ("from cuda import DEVICE\nprint(DEVICE)\n", False),
        ("import torch\nfrom cuda import DEVICE\nx = torch.ones(2).to(DEVICE)\n", True),
        ("import torch\nimport cuda\nm = torch.nn.Linear(2, 2).to(cuda.DEVICE)\n", True),
    ],
)
def test_an_exported_runtime_answer_follows_its_importers(use: str, held: bool) -> None:
    """``__all__ = ["DEVICE"]`` with ``DEVICE = "cuda" if torch.cuda.is_available() else
    "cpu"``: scanned alone the query stays torch's (an importer may hand it to torch); with
    its importers scanned, it is held back exactly when one does, naming where."""
    cuda = (
        "import torch\n__all__ = ['DEVICE']\n"
        "DEVICE = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
    )
    (alone,) = [f for f in scanner.scan_source(cuda, "cuda.py") if f.rule == "cuda-is-available"]
    assert not alone.fixable and "exports (__all__)" in alone.reason
    found = scanner.scan_sources({"cuda.py": cuda, "main.py": use})
    (query,) = [f for f in found["cuda.py"] if f.rule == "cuda-is-available"]
    assert query.fixable is not held, query.reason
    if held:
        assert "read in main.py, which imports it: main.py:3: passed to" in query.reason


_HELPERS = {
    "return x.to(device)": "tensor-to-device",
    "return {k: v.to(device) for k, v in x.items()}": "tensor-to-device",
    "return x.cuda(device)": "tensor-cuda",
    "return torch.load(x, map_location=device)": "torch-load-map-location",
    '"""Move it."""\n    x = x.to(device)\n    return x': "tensor-to-device",
}


@pytest.mark.parametrize("body", list(_HELPERS))
@pytest.mark.parametrize("imported", ["import utils", "from utils import move as m"])
def test_a_call_of_another_modules_device_helper_is_found_at_the_call(
    body: str, imported: str
) -> None:
    """``utils.move(batch, device)``, a helper of the project whose short body is a device
    idiom: the call is the importer's placement (advice; the helper is ported where it is)."""
    call = "utils.move" if imported == "import utils" else "m"
    sources = {
        "utils.py": f"import torch\n\n\ndef move(x, device):\n    {body}\n",
        "train.py": f"import torch\n{imported}\n\nbatch = {call}(batch, 'cuda')\n",
    }
    found = scanner.scan_sources(sources)["train.py"]
    (finding,) = [f for f in found if f.line == 4]
    assert finding.rule == _HELPERS[body] and not finding.fixable
    assert "(utils.py:4) wraps" in finding.reason
    assert _check_citations(sources, scanner.scan_sources(sources))


def test_a_call_of_another_modules_other_helper_is_not() -> None:
    sources = {
        "utils.py": "def add(x, device):\n    return x + 1\n",
        "train.py": "import utils\n\ny = utils.add(1, 'cuda')\n",
    }
    assert [f for f in scanner.scan_sources(sources)["train.py"] if f.line == 3] == []


# -- what is followed, and what is not ----------------------------------------------------
def test_an_import_cycle_ends_and_still_follows_the_value() -> None:
    sources = {
        "utils.py": 'import torch\nimport train\n\ndevice = torch.device("cpu")\n',
        "train.py": "import torch\nimport utils\n\nx = torch.ones(2).to(utils.device)\nprint(x)\n",
    }
    finding = _device_finding(scanner.scan_sources(sources))
    assert "train.py:4: passed to torch.ones(2).to(utils.device)" in finding.reason


def test_a_module_that_was_not_scanned_is_third_party_code() -> None:
    """``from helpers import device`` with no ``helpers.py`` among the files: not the
    project's, so train.py is a program of its own and its device is unknown."""
    files = [SourceFile("train.py", "from helpers import device\nprint(device)\n")]
    project = Project(files)
    assert project.resolve(files[0], "helpers.device") is None
    assert [len(program) for program in project.programs()] == [1]


def test_a_module_name_two_roots_hold_resolves_to_the_importers_own() -> None:
    files = [
        SourceFile("a/utils.py", "x = 1\n"),
        SourceFile("b/utils.py", "x = 2\n"),
        SourceFile("a/train.py", "from utils import x\n"),
        SourceFile("c/train.py", "from utils import x\n"),
    ]
    project = Project(files)
    assert project.resolve(files[2], "utils.x") == (files[0], "x")
    assert project.resolve(files[3], "utils.x") is None  # neither is on c's path
    assert sorted(len(p) for p in project.programs()) == [1, 1, 2]


@pytest.mark.parametrize(
    "link",
    [
        "from m{before:03d} import device\n",
        "import m{before:03d}\n\ndevice = m{before:03d}.device\n",
    ],
    ids=["re-export", "assigned"],
)
def test_a_long_chain_of_modules_is_bounded_and_cautious(link: str) -> None:
    """200 modules each taking the device of the one before: re-exports are walked
    without recursion, each module once; a chain of assignments is followed 64 modules
    deep and then gets the cautious answer. Either way the device, handed to torch at the
    end of the chain, is not rewritten."""
    sources = {"m000.py": 'import torch\n\ndevice = torch.device("cpu")\n'}
    for n in range(1, 200):
        sources[f"m{n:03d}.py"] = link.format(before=n - 1)
    sources["train.py"] = (
        "import torch\nfrom m199 import device\n\nprint(torch.ones(2).to(device))\n"
    )
    found = scanner.scan_sources(sources)
    finding = next(f for f in found["m000.py"] if f.rule == "device-type")
    assert not finding.fixable
    assert _check_citations(sources, found)


def test_the_work_on_a_project_grows_with_its_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """N modules each importing the device of ``utils.py`` and the value of the module
    before: the uses the escape analysis follows grow with N, not with its square."""
    followed = []
    real = _flow.Flow._use

    def counting(self: _flow.Flow, *args: object) -> str | None:
        followed.append(1)
        return real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(_flow.Flow, "_use", counting)
    counts = []
    for size in (100, 400):
        followed.clear()
        sources = {"utils.py": 'import torch\n\ndevice = torch.device("cpu")\n'}
        for n in range(size):
            sources[f"m{n:03d}.py"] = (
                f"import torch\nimport utils\nfrom m{max(n - 1, 0):03d} import y as before\n\n"
                "y = torch.ones(2).to(utils.device)\nprint(utils.device, before)\n"
            )
        found = scanner.scan_sources(sources)
        assert not _device_finding(found).fixable
        counts.append(len(followed))
    assert counts[1] <= 5 * counts[0], counts


# -- citations: a reason cites its own file, or names the other one -------------------------
_CITED = re.compile(r"(?:(?P<path>[\w./-]+\.py):|\bline )(?P<line>\d+)")


def _check_citations(sources: dict[str, str], found: dict[str, list[scanner.Finding]]) -> int:
    """Every line a reason cites exists in the file it names (its own when it names
    none), a named file is one of the program the finding is in, and what the reason
    says is there is there: ``passed to f(...)`` names a call on that line, ``(PATH:N:
    RULE)`` a finding of that rule at that line, ``owned by import X (PATH:N)`` that
    import. Returns how many citations were checked."""
    files = [SourceFile(path, text) for path, text in sources.items()]
    program_of = {f.path: i for i, program in enumerate(Project(files).programs()) for f in program}
    checked = 0
    for path, findings in found.items():
        for finding in findings:
            context = (path, finding.line, finding.reason)
            for cited in _CITED.finditer(finding.reason):
                where, line = cited.group("path") or path, int(cited.group("line"))
                assert where in sources, context
                assert program_of[where] == program_of[path], context
                lines = sources[where].splitlines()
                assert 1 <= line <= len(lines), context
                after = finding.reason[cited.end() :]
                call = re.match(r": passed to ([\w.]+)\(", after)
                if call:
                    name = call.group(1).rsplit(".", 1)[-1]
                    assert name in "\n".join(lines[line - 1 : line + 2]), context
                rule = re.match(r": ([a-z0-9-]+)\)", after)
                if rule and cited.group("path"):
                    assert (line, rule.group(1)) in {(f.line, f.rule) for f in found[where]}, (
                        context
                    )
                owner = re.search(r"owned by import ([\w.]+) \($", finding.reason[: cited.start()])
                if owner:
                    assert owner.group(1) in lines[line - 1], context  # import or from-import
                checked += 1
    return checked


def test_every_cited_line_of_the_projects_is_in_the_file_it_names() -> None:
    checked = 0
    for form in FORMS:
        for use in USES:
            sources = _project(form, use)
            checked += _check_citations(sources, scanner.scan_sources(sources))
    assert checked > len(FORMS)


def test_files_that_do_not_import_one_another_are_found_as_when_scanned_alone() -> None:
    """Every script the tests hold, scanned together (``scan examples/ tests/support/``):
    a file in a program of its own is found exactly as alone, and every citation is of
    its own program (when all files were one program, over 120 reasons cited a
    line of an unrelated file)."""
    paths = sorted(
        [*(ROOT / "examples").glob("*.py"), *(ROOT / "tests/support/fixtures").rglob("*.py")]
    )
    sources = {str(p.relative_to(ROOT)): p.read_text() for p in paths}
    found = scanner.scan_sources(sources)
    assert _check_citations(sources, found)
    files = [SourceFile(path, text) for path, text in sources.items()]
    alone = [program[0].path for program in Project(files).programs() if len(program) == 1]
    assert len(alone) > len(sources) // 2
    for path in alone:
        expected = scanner.scan_source(sources[path], path)
        assert [(f.line, f.rule, f.fixable, f.reason) for f in found[path]] == [
            (f.line, f.rule, f.fixable, f.reason) for f in expected
        ], path


# -- the command line ---------------------------------------------------------------------
def test_scan_diff_of_a_folder_rewrites_a_project_consistently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for path, text in _project("relative", "host").items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["scan", "--diff", "pkg"]) == 0
    assert '+device = tj.device("cpu")' in out.getvalue()
    assert "+++ b/pkg/utils.py" in out.getvalue()
