"""``torch2jax-device scan`` on any file a repository can hold: special files, huge or
deeply nested files, names bound thousands of times, other encodings, CRLF line ends,
files that change while they are scanned, and what ``--diff`` says when it holds back."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.deadlines import deadline
from torch2jax_device.porting import _values, _written
from torch2jax_device.porting.scanner import SourceFile, scan_files, scan_source


# -- names bound many times ---------------------------------------------------------------
def test_a_name_bound_many_times_is_worked_out_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read of ``x`` sees the same bindings: their kinds are asked for once each,
    not once per read (which made a 1.7 MB file take 44 s)."""
    asked = []
    real = _values.Values.binding_kinds

    def counting(self: _values.Values, binding: object) -> set[str]:
        asked.append(binding)
        return real(self, binding)  # type: ignore[arg-type]

    monkeypatch.setattr(_values.Values, "binding_kinds", counting)
    lines = "x = torch.ones(2).cuda()\ny = jnp.sum(x)\nx.device\n"
    findings = scan_source("import torch\nimport jax.numpy as jnp\n" + lines * 300)
    assert len([f for f in findings if f.rule == "tensor-cuda"]) == 300
    assert len(asked) <= 2 * 300  # was 300 * 300


def test_a_name_rebound_from_itself_many_times_does_not_recurse() -> None:
    """``x = x.cuda()`` 1,500 times: one cycle, not 1,500 levels of recursion."""
    findings = scan_source("import torch\nx = torch.zeros(1)\n" + "x = x.cuda()\n" * 1500)
    assert [f.rule for f in findings] == ["tensor-cuda"] * 1500


def _scan_process(*argv: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """The command in a fresh process (real byte streams; a hang fails, not blocks)."""
    return subprocess.run(
        [sys.executable, "-m", "torch2jax_device", "scan", *argv],
        cwd=cwd,
        capture_output=True,
        timeout=deadline(120),
    )


# A script whose device the diff rewrites (a module that only binds it, read nowhere,
# keeps torch's: the modules importing it may hand it to torch).
GOOD = "import torch\nd = torch.device('cpu')\nprint(d)\n"


# -- only regular files, at most --max-bytes, nested at most MAX_DEPTH ---------------------
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_and_a_device_named_py_are_skipped_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "a_pipe.py")  # opening it for reading would wait for a writer
    (tmp_path / "b_zero.py").symlink_to("/dev/zero")  # reading it never ends
    (tmp_path / "c_good.py").write_text(GOOD)
    (tmp_path / "named").mkdir()
    (tmp_path / "named" / "zero.py").symlink_to("/dev/zero")  # named: the link is followed
    done = _scan_process(str(tmp_path), str(tmp_path / "named" / "zero.py"), cwd=tmp_path)
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert f"cannot scan {tmp_path / 'a_pipe.py'}: not a regular file (a FIFO)" in err
    assert f"cannot scan {tmp_path / 'b_zero.py'}: a symbolic link to '/dev/zero'" in err
    zero = tmp_path / "named" / "zero.py"
    assert f"cannot scan {zero}: not a regular file (a character device)" in err
    assert b"c_good.py:2:5: device-type" in done.stdout  # the other file is still scanned


def test_scan_never_leaves_the_folder_it_was_given_through_a_link(tmp_path: Path) -> None:
    """Issue 36: a ``*.py`` link to a file outside the tree was read, and its first line
    printed; a link to a folder outside it is not entered either."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("import torch\nTOKEN = torch.device('cuda:7')\n")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a_good.py").write_text(GOOD)
    (tree / "b_secret.py").symlink_to(outside / "secret.py")
    (tree / "c_folder").symlink_to(outside)
    status, out, err = run_cli("scan", str(tree))
    assert status == 2
    assert (
        f"cannot scan {tree / 'b_secret.py'}: a symbolic link to '{outside / 'secret.py'}'" in err
    )
    assert f"cannot scan {tree / 'c_folder'}: a symbolic link to a folder" in err
    assert "a_good.py:2:5: device-type" in out
    assert "TOKEN" not in out + err and "cuda:7" not in out + err
    status, out, err = run_cli("scan", "--diff", str(tree))
    assert status == 2 and "secret" not in out and "cuda:7" not in out + err


def test_a_file_over_max_bytes_is_skipped_with_the_limit_named(tmp_path: Path) -> None:
    (tmp_path / "a_big.py").write_text(GOOD + "x = 1\n" * 20)
    (tmp_path / "b_good.py").write_text(GOOD)
    status, out, err = run_cli("scan", "--max-bytes", "100", str(tmp_path))
    assert status == 2
    limit = "larger than the 100-byte limit (Fix: raise it, max_bytes= or --max-bytes)"
    assert f"a_big.py: 166 bytes, {limit}" in err
    assert "b_good.py:2:5: device-type" in out and "a_big.py:" not in out
    with pytest.raises(SystemExit) as refused:  # argparse's usage error
        run_cli("scan", "--max-bytes", "0", str(tmp_path))
    assert refused.value.code == 2


def test_the_default_size_limit_is_documented() -> None:
    from torch2jax_device.porting.scanner import MAX_BYTES

    docs = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    assert MAX_BYTES == 2 * 1024 * 1024 and "`--max-bytes N` (default 2 MiB" in docs


def test_a_deeply_nested_file_is_skipped_and_the_others_are_printed(tmp_path: Path) -> None:
    (tmp_path / "a_deep.py").write_text("import torch\nx = torch" + ".cuda" * 100_000 + "\n")
    (tmp_path / "b_deeper_than_the_scanner.py").write_text("x = torch" + ".cuda" * 1500 + "\n")
    (tmp_path / "c_good.py").write_text(GOOD)
    status, out, err = run_cli("scan", str(tmp_path))
    assert status == 2  # never 1, the "idioms found" status, because of an error
    assert "a_deep.py: nested deeper than Python's parser follows" in err
    assert "b_deeper_than_the_scanner.py: nested 1503 levels deep; the scanner follows 1000" in err
    assert "Traceback" not in err and "RecursionError" not in err
    assert "c_good.py:2:5: device-type" in out


def test_a_file_nested_as_deep_as_the_limit_is_scanned() -> None:
    findings = scan_source("import torch\nx = torch.zeros(1)" + ".cuda()" * 300 + "\n")
    assert {f.rule for f in findings} == {"tensor-cuda"}


def test_a_long_chain_of_moves_is_walked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ``.cuda()`` of a chain asks what the tensor moved is, and each answer walks
    down the chain: kept per node, the walk costs the chain's length once, not once per
    call and per planning pass (a chain of 300 took 7 s, and 2.7 million steps at 200)."""
    steps = []
    real = _written._view_call

    def counting(node: ast.Call) -> bool:
        steps.append(node)
        return real(node)

    monkeypatch.setattr(_written, "_view_call", counting)
    findings = scan_source("import torch\nx = torch.zeros(1)" + ".cuda()" * 200 + "\n")
    assert [f.rule for f in findings] == ["tensor-cuda"] * 200
    assert len(steps) <= 2 * 200


def test_running_out_of_stack_on_one_file_skips_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch2jax_device.porting import scanner

    real = scanner.detect

    def detect(file: scanner.SourceFile) -> list[object]:
        if file.path.endswith("a.py"):
            raise RecursionError("maximum recursion depth exceeded")
        return real(file)

    monkeypatch.setattr(scanner, "detect", detect)
    (tmp_path / "a.py").write_text(GOOD)
    (tmp_path / "b.py").write_text(GOOD)
    status, out, err = run_cli("scan", str(tmp_path))
    assert status == 2
    assert "a.py: it is chained or nested deeper than the scanner's stack allows" in err
    assert "please report" not in err and "b.py:2:5: device-type" in out


# -- decoding as Python does, and diffs that apply to the bytes on disk --------------------
ENCODED = [
    pytest.param(
        GOOD.replace("\n", "\r\n").encode(),
        b"import torch\r\nimport torch2jax_device as tj\r\nd = tj.device('cpu')\r\nprint(d)\r\n",
        id="crlf",
    ),
    pytest.param(
        b"\xef\xbb\xbf" + GOOD.encode(),
        b"\xef\xbb\xbfimport torch\nimport torch2jax_device as tj\nd = tj.device('cpu')\n"
        b"print(d)\n",
        id="utf-8-bom",
    ),
    pytest.param(
        b"# -*- coding: latin-1 -*-\nimport torch\nname = '\xe9t\xe9'\nd = torch.device('cpu')\n"
        b"print(d)\n",
        b"# -*- coding: latin-1 -*-\nimport torch\nimport torch2jax_device as tj\n"
        b"name = '\xe9t\xe9'\nd = tj.device('cpu')\nprint(d)\n",
        id="latin-1-cookie",
    ),
    pytest.param(  # issue 36: old Mac line ends; patch and git cut lines at \n only
        GOOD.replace("\n", "\r").encode(),
        b"import torch\rimport torch2jax_device as tj\rd = tj.device('cpu')\rprint(d)\r",
        id="cr-only",
    ),
    pytest.param(
        GOOD.rstrip("\n").encode(),
        b"import torch\nimport torch2jax_device as tj\nd = tj.device('cpu')\nprint(d)",
        id="no-newline-at-end",
    ),
]


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[bytes, bytes]]:
    """Each case of ``ENCODED`` as ``CASE/a.py``; the command's diff of them all (one
    process), applied by ``git apply`` and by ``patch -p1`` to two copies: the file each
    gives, by case."""
    for tool in ("git", "patch"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    root = tmp_path_factory.mktemp("encodings")
    names = [f"{case.id}/a.py" for case in ENCODED]
    for tool in ("git", "patch"):
        for case, name in zip(ENCODED, names, strict=True):
            (root / tool / name).parent.mkdir(parents=True)
            (root / tool / name).write_bytes(case.values[0])  # type: ignore[arg-type]
    done = _scan_process("--diff", *names, cwd=root / "git")
    assert done.returncode == 0, done.stderr.decode()
    for tool, command in (
        ("git", ["git", "apply", "change.diff"]),
        ("patch", ["patch", "-p1", "-i", "change.diff"]),
    ):
        (root / tool / "change.diff").write_bytes(done.stdout)
        applied = subprocess.run(
            command, cwd=root / tool, capture_output=True, timeout=deadline(60)
        )
        assert applied.returncode == 0, applied.stdout.decode() + applied.stderr.decode()
    return {
        str(case.id): ((root / "git" / name).read_bytes(), (root / "patch" / name).read_bytes())
        for case, name in zip(ENCODED, names, strict=True)
    }


@pytest.mark.parametrize(("data", "expected"), ENCODED)
def test_the_diff_applies_with_git_and_patch_whatever_the_encoding_and_line_ends(
    request: pytest.FixtureRequest,
    applied: dict[str, tuple[bytes, bytes]],
    data: bytes,
    expected: bytes,
) -> None:
    by_git, by_patch = applied[request.node.callspec.id]
    assert by_git != data, "nothing was rewritten: the check would be vacuous"
    assert by_git == by_patch == expected


def test_a_file_python_cannot_decode_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_bytes(b"# -*- coding: no-such-codec -*-\nx = 1\n")
    (tmp_path / "b.py").write_bytes(b"x = '\xe9'\n")  # not UTF-8, and no cookie
    status, _, err = run_cli("scan", str(tmp_path))
    assert status == 2
    assert "a.py: cannot be decoded as Python source: unknown encoding" in err
    assert "b.py: cannot be decoded as Python source" in err


def test_a_file_that_changes_while_it_is_scanned_is_not_diffed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch2jax_device.cli import scan

    (tmp_path / "a.py").write_text(GOOD)
    (tmp_path / "b.py").write_text(GOOD.replace("d =", "e ="))
    real = scan.scan_files

    def rewritten_meanwhile(files: list[object]) -> object:
        (tmp_path / "a.py").write_text(GOOD + "x = 1\n")  # an editor saves it meanwhile
        return real(files)  # type: ignore[arg-type]

    monkeypatch.setattr(scan, "scan_files", rewritten_meanwhile)
    status, out, err = run_cli("scan", "--diff", str(tmp_path))
    assert status == 2
    assert f"cannot scan {tmp_path / 'a.py'}: it changed while it was scanned" in err
    assert "a/" + str(tmp_path / "a.py") not in out and "+e = tj.device('cpu')" in out


# -- what --diff holds back -----------------------------------------------------------------
def test_a_diff_that_rewrites_nothing_says_how_many_findings_were_held_back(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.py").write_text(
        "import torch\nmodel = torch.nn.Linear(2, 2)\nmodel.to('cuda')\n"
    )
    status, out, err = run_cli("scan", "--diff", str(tmp_path / "a.py"))
    assert status == 0 and out == ""
    assert "1 of 1 finding(s) not rewritten" in err
    assert "`torch2jax-device scan PATH` lists them with the reason" in err
    assert "`torch2jax-device scan --explain RULE`" in err


def test_a_diff_that_rewrites_everything_says_nothing_more(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(GOOD)
    status, out, err = run_cli("scan", "--diff", str(tmp_path / "a.py"))
    assert status == 0 and "+d = tj.device('cpu')" in out and err == ""


def test_the_files_unseen_calls_are_looked_for_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every default-device candidate asks, in every planning pass, whether the file calls
    code the scanner does not follow: the whole file was walked per question (3,000
    calls of an unknown library and 20 set_default_device lines took 10 s)."""
    from torch2jax_device.porting import _plan

    walks = []
    real = _plan._first_unseen_code_call

    def counting(file: object) -> object:
        walks.append(file)
        return real(file)  # type: ignore[arg-type]

    monkeypatch.setattr(_plan, "_first_unseen_code_call", counting)
    calls = "".join(f"mylib.f{i}()\n" for i in range(50))
    source = "import torch\nimport mylib\n" + calls + 'torch.set_default_device("cuda")\n' * 20
    findings = scan_source(source)
    assert [f.rule for f in findings] == ["default-device-set"] * 20
    assert all("runs code the scanner does not follow" in str(f.reason) for f in findings)
    assert len(walks) == 1


# -- names are data: a patch header carries any file name -----------------------------------
# A folder name for every byte a patch header cannot carry as it is (each control
# character, a quote, a backslash, a space), one that forges a header of its own if
# written raw (issue 36: `patch -p1` then created `pwned.py`), and non-ASCII.
HOSTILE_NAMES = [
    *(f"c{byte:02x}{chr(byte)}end" for byte in [*range(1, 0x20), 0x7F]),
    'quote"d',
    "back\\slash",
    "with space",
    " leading and trailing ",
    "x\n+++ b/pwned.py\n@@ -0,0 +1 @@\n+import os\n",
    "\u00e9t\u00e9",
]


@pytest.mark.parametrize("tool", ["git", "patch"])
def test_the_diff_names_any_file_so_that_applying_it_touches_only_that_file(
    tool: str, tmp_path: Path
) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")
    names = [os.path.join(folder, "a.py") for folder in HOSTILE_NAMES]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True)
        (tmp_path / name).write_text(GOOD)
    done = _scan_process("--diff", *names, cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    (tmp_path / "change.diff").write_bytes(done.stdout)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    command = ["git", "apply"] if tool == "git" else ["patch", "-p1", "--batch", "-i"]
    applied = subprocess.run([*command, "change.diff"], cwd=tmp_path, capture_output=True)
    assert applied.returncode == 0, applied.stdout.decode() + applied.stderr.decode()
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    for name in names:
        assert "tj.device('cpu')" in (tmp_path / name).read_text(), repr(name)


def test_a_folder_tree_deeper_than_pythons_stack_is_walked(tmp_path: Path) -> None:
    """Issue 36: a tree 1,100 folders deep ended ``scan`` in a RecursionError traceback
    (Python 3.11's directory walks recurse)."""
    folders = [tmp_path / "d"]
    for _ in range(1099):
        folders.append(folders[-1] / "d")
    for folder in folders:
        folder.mkdir()
    (folders[-1] / "a.py").write_text(GOOD)
    try:
        status, out, err = run_cli("scan", str(tmp_path))
    finally:  # bottom up: pytest's own clean-up recurses, and would not get this deep
        (folders[-1] / "a.py").unlink()
        for folder in reversed(folders):
            folder.rmdir()
    assert (status, err) == (1, "")
    assert "a.py:2:5: device-type" in out


class _CountedBytes(bytes):
    """A file's bytes that count how many of them slices copy out."""

    copied = 0

    def __getitem__(self, key):  # type: ignore[no-untyped-def]
        part = super().__getitem__(key)
        if isinstance(key, slice):
            _CountedBytes.copied += len(part)
        return part


class _CountedList(list):  # type: ignore[type-arg]
    """A display's elements that count how many of them searches walk past."""

    searched = 0

    def index(self, item, *bounds):  # type: ignore[no-untyped-def]
        position = super().index(item, *bounds)
        _CountedList.searched += position + 1
        return position


def _work_on_one_line(idioms: int) -> int:
    """Bytes sliced and elements searched scanning ``idioms`` idioms on one line, in a
    display and as statements (issue 36: 90,000 of them on one 1.9 MB line took 10
    minutes: each column decoded the line up to it, each element searched its display)."""
    source = (
        "import torch\nfrom flax import nnx\nm = nnx.Linear(1, 1, rngs=nnx.Rngs(0))\n"
        f"a = [{'x.cuda(), ' * idioms}]\n" + "m.to('cpu'); " * idioms + "\n"
    )
    file = SourceFile("long.py", source)
    file.data = _CountedBytes(file.data)
    for node in ast.walk(file.tree):
        if isinstance(node, (ast.List, ast.Tuple)):
            node.elts = _CountedList(node.elts)
    _CountedBytes.copied = _CountedList.searched = 0
    found = scan_files([file])["long.py"]
    assert len(found) == 2 * idioms
    return _CountedBytes.copied + _CountedList.searched


def test_many_idioms_on_one_line_cost_what_as_many_lines_cost() -> None:
    """The work grows with the line, not with its square (counted, not timed)."""
    small, large = _work_on_one_line(500), _work_on_one_line(2000)
    assert large <= 4.5 * small, (small, large)


def test_a_name_that_is_not_utf8_is_printed_escaped_on_a_strict_utf8_stream(
    tmp_path: Path,
) -> None:
    """Issue 36: ``caf\\xe9.py`` with ``PYTHONIOENCODING=utf-8:strict`` ended ``scan`` in a
    UnicodeEncodeError traceback."""
    (tmp_path / os.fsdecode(b"caf\xe9.py")).write_text(GOOD)
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}
    printed = {}
    for argv in ([], ["--diff"]):
        done = subprocess.run(
            [sys.executable, "-m", "torch2jax_device", "scan", *argv, "."],
            cwd=tmp_path, capture_output=True, timeout=deadline(120), env=env, check=False,
        )  # fmt: skip
        assert b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
        assert done.returncode == (0 if argv else 1)
        printed[bool(argv)] = done.stdout
    assert b"caf\\udce9.py:2:5: device-type" in printed[False]
    assert b"--- a/caf\xe9.py\n" in printed[True]  # the diff names the file's own bytes


# -- each file once -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "given",
    [
        ["b.py", "b.py"],
        ["b.py", "./b.py", "{tmp}/b.py"],
        ["{tmp}", "b.py"],
        ["b.py", "{tmp}"],
        ["a.py", "{tmp}"],  # a link named, then its folder: read once, as named
        ["{tmp}", "a.py"],
    ],
)
def test_a_file_given_twice_is_read_once_and_its_diff_applies_once(
    given: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "b.py").write_text(GOOD)
    (tmp_path / "a.py").symlink_to("b.py")
    monkeypatch.chdir(tmp_path)
    paths = [path.format(tmp=tmp_path) for path in given]
    status, out, err = run_cli("scan", *paths)
    assert out.count(": device-type ") == 1 and "1 idiom(s) found" in out
    # The link met in the folder, not named, is refused as ever (and said).
    refused = "{tmp}" in given and "a.py" not in given
    assert (status, "a symbolic link" in err) == ((2, True) if refused else (1, False))
    status, diff, err = run_cli("scan", "--diff", *paths)
    assert diff.count("+++ ") == 1, diff
    if "a.py" not in given:  # patch does not write through a link
        patched = subprocess.run(
            ["patch", "-p1", "--dry-run"], input=diff.encode(), capture_output=True, cwd=tmp_path
        )
        assert patched.returncode == 0, patched.stdout


def test_a_folder_walk_leaves_out_installed_packages_and_tools_folders(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(GOOD)
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "train_copy.py").write_text(GOOD)  # a project's own folder
    for folder in (
        "myenv/lib/python3.11/site-packages/torch",  # a venv by any name: its pyvenv.cfg
        "venv/lib/python3.11/site-packages/torch",
        "conda/lib/python3.11/site-packages/torch",  # no pyvenv.cfg: by site-packages
        ".git/hooks",
        ".tox/py311",
        "node_modules/pkg",
        "__pycache__",
    ):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "cuda.py").write_text(GOOD)
    (tmp_path / "myenv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    status, out, err = run_cli("scan", str(tmp_path))
    assert (status, err) == (1, "")
    reported = sorted({line.split(":")[0] for line in out.splitlines() if ": device-type " in line})
    assert reported == [str(tmp_path / "build" / "train_copy.py"), str(tmp_path / "train.py")]
    # Named, such a folder is scanned: naming it is asking for it.
    status, out, err = run_cli("scan", str(tmp_path / "venv/lib/python3.11/site-packages"))
    assert status == 1 and "cuda.py" in out
