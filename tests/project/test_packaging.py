"""The distributions: a wheel and an sdist that build, pass ``twine check`` and run.

Both are built with ``python -m build --no-isolation`` (the wheel from the sdist, so the
sdist holds what a build needs). The wheel is then installed with ``pip --no-deps`` into
a fresh virtual environment without torch or flax; its dependencies are the ones this
environment has installed, exposed to the new one through a ``.pth`` file (nothing is
downloaded), and ``pip check`` confirms they satisfy what the wheel declares. An import
the wheel does not declare fails there, as it would for a user.
"""

from __future__ import annotations

import ast
import email
import importlib.metadata
import os
import re
import subprocess
import sys
import tarfile
import textwrap
import venv
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import torch2jax_device as tj
from tests.support.deadlines import deadline

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "torch2jax_device"
#: Frameworks the package imports only when given their objects: extras, not dependencies.
OPTIONAL = {"flax", "optax", "torch"}


def run(
    *command: str | Path, cwd: Path = ROOT, check: bool = True
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=deadline(300),
    )
    if check and result.returncode != 0:
        pytest.fail(f"{command} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


@dataclass(frozen=True)
class Dists:
    wheel: Path
    sdist: Path


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT)
    (wheel,), (sdist,) = out.glob("*.whl"), out.glob("*.tar.gz")
    return Dists(wheel, sdist)


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(archive.read(name))


def _closure(requirements: Iterable[str], extras: Iterable[str] = ()) -> set[str]:
    """Every installed distribution ``requirements`` need, transitively."""
    todo = [Requirement(r) for r in requirements]
    todo = [r for r in todo if r.marker is None or any(
        r.marker.evaluate({"extra": extra}) for extra in ("", *extras)
    )]  # fmt: skip
    found: set[str] = set()
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        found.add(name)
        for text in importlib.metadata.distribution(name).requires or ():
            nested = Requirement(text)
            wanted = nested.marker is None or any(
                nested.marker.evaluate({"extra": extra}) for extra in ("", *requirement.extras)
            )
            if wanted:
                todo.append(nested)
    return found


def fresh_environment(path: Path, wheel: Path, extras: Iterable[str] = ()) -> Path:
    """A virtual environment holding ``wheel`` and its dependencies (with ``extras``);
    returns its ``bin`` directory."""
    venv.create(path, with_pip=False)
    python = path / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps",
        "--no-index", wheel)  # fmt: skip
    site = Path(run(python, "-c", "import site; print(site.getsitepackages()[0])").stdout.strip())
    linked = path / "dependencies"
    linked.mkdir()
    for name in _closure(_metadata(wheel).get_all("Requires-Dist") or (), extras):
        distribution = importlib.metadata.distribution(name)
        tops = {f.parts[0] for f in distribution.files or () if f.parts[0] != ".."}
        for top in tops:
            source = Path(str(distribution.locate_file(top)))
            if source.exists() and not (linked / top).exists():
                (linked / top).symlink_to(source)
    (site / "_dependencies.pth").write_text(f"{linked}\n")
    run(sys.executable, "-m", "pip", "--python", python, "check")
    return path / "bin"


@pytest.fixture(scope="module")
def bare(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fresh_environment(tmp_path_factory.mktemp("bare") / "venv", dists.wheel)


def test_twine_check_passes(dists: Dists) -> None:
    run(sys.executable, "-m", "twine", "check", "--strict", dists.wheel, dists.sdist)


def test_the_wheel_declares_license_python_versions_and_typing(dists: Dists) -> None:
    metadata = _metadata(dists.wheel)
    assert metadata["Version"] == tj.__version__
    assert metadata["License-Expression"] == "Apache-2.0"
    with zipfile.ZipFile(dists.wheel) as archive:
        names = archive.namelist()
        license_name = next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))
        assert archive.read(license_name) == (ROOT / "LICENSE").read_bytes()
        assert "torch2jax_device/py.typed" in names
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    minimum = metadata["Requires-Python"].removeprefix(">=")
    versions = [c.rsplit(" ", 1)[1] for c in metadata.get_all("Classifier") or ()
                if c.startswith("Programming Language :: Python :: 3.")]  # fmt: skip
    assert versions and versions[0] == minimum


def _imported_distributions() -> set[str]:
    """The third-party distributions the package's modules import."""
    modules = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    third_party = modules - set(sys.stdlib_module_names) - {"__future__", PACKAGE.name}
    providers = importlib.metadata.packages_distributions()
    return {canonicalize_name(providers[module][0]) for module in third_party}


def test_the_dependencies_are_what_the_package_imports(dists: Dists) -> None:
    metadata = _metadata(dists.wheel)
    required = [Requirement(r) for r in metadata.get_all("Requires-Dist") or ()]
    hard = {canonicalize_name(r.name) for r in required if r.marker is None}
    imported = _imported_distributions()
    assert hard == imported - OPTIONAL
    extras = set(metadata.get_all("Provides-Extra") or ())
    assert OPTIONAL <= extras, "each optional framework has its extra"


def test_the_sdist_holds_the_repository(dists: Dists) -> None:
    """The README's commands (scripts/, mkdocs.yml, constraints-cpu.txt, tests/, ...)
    need the whole repository: every file git knows of is in the sdist."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to compare the sdist with")
    listed = run("git", "ls-files", "--cached", "--others", "--exclude-standard").stdout
    tracked = {name for name in listed.splitlines() if (ROOT / name).is_file()}
    with tarfile.open(dists.sdist) as archive:
        members = {m.name.split("/", 1)[1]: m for m in archive.getmembers() if "/" in m.name}
    packed = set(members)
    assert tracked - packed == set()
    commands = [name for name in packed if name.endswith(".sh") or name == ".ci/run"]
    assert commands and all(members[name].mode & 0o111 for name in commands)
    for needed in ("scripts/test.sh", "scripts/demo.sh", "mkdocs.yml", "constraints-cpu.txt",
                   "LICENSE", ".ci/run"):  # fmt: skip
        assert needed in packed


def test_the_readme_renders_on_pypi_without_dead_links() -> None:
    """PyPI shows the README without the repository: a relative link would be dead there,
    and the project has no site to link to absolutely."""
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)]*)\)", readme) + re.findall(
        r"^\[[^\]]+\]:\s*(\S+)", readme, re.M
    )
    assert [t for t in targets if not t.startswith("https://")] == []


def test_the_command_line_runs_without_torch_or_flax(bare: Path, tmp_path: Path) -> None:
    command = bare / "torch2jax-device"
    assert run(command, "--version").stdout.strip() == f"torch2jax-device {tj.__version__}"
    assert "cpu" in run(command, "devices").stdout
    script = tmp_path / "train.py"
    script.write_text("import torch\nif torch.cuda.is_available():\n    pass\n")
    scan = run(command, "scan", script, check=False)
    assert scan.returncode == 1 and "cuda-is-available" in scan.stdout, scan


_SMOKE = """
import importlib.util, sys
import numpy as np
import torch2jax_device as tj

missing = [name for name in ("torch", "flax", "safetensors") if importlib.util.find_spec(name)]
assert missing == [], missing
assert tj.__file__.startswith(sys.prefix), tj.__file__
assert not tj.cuda.is_available() or tj.cuda.device_count() > 0
x = tj.to_device(np.arange(6, dtype=np.float32).reshape(2, 3), "cpu")
assert tj.device_of(x) == tj.device("cpu") and x.dtype == np.float32
with tj.device("cpu"):
    assert tj.get_default_device() == tj.device("cpu")
tj.save_file({"w": x}, "w.safetensors")
assert (np.asarray(tj.load_file("w.safetensors")["w"]) == np.asarray(x)).all()
assert (np.asarray(tj.load("w.safetensors", map_location="cpu")["w"]) == np.asarray(x)).all()
try:
    tj.device("cuda:01")
except tj.InvalidDeviceError:
    pass
print("ok", tj.available_backends())
"""


def test_the_package_works_without_torch_or_flax(bare: Path, tmp_path: Path) -> None:
    (tmp_path / "smoke.py").write_text(textwrap.dedent(_SMOKE))
    result = run(bare / "python", "smoke.py", cwd=tmp_path)
    assert result.stdout.startswith("ok ['cpu'"), result.stdout


def test_the_demo_install_has_what_the_quickstart_imports(dists: Dists, tmp_path: Path) -> None:
    """``scripts/demo.sh`` installs the package with its ``flax`` extra, nothing else; the
    quickstart's imports all resolve there (``tests/examples`` runs the quickstart)."""
    assert 'extras="[flax]"' in (ROOT / "scripts" / "bootstrap.sh").read_text()
    bin_dir = fresh_environment(tmp_path / "venv", dists.wheel, extras=["flax"])
    load = (
        "import importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location('quickstart', sys.argv[1])\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "print(sorted(name for name in ('torch', 'mypy', 'ruff', 'mkdocs') if name in sys.modules"
        " or importlib.util.find_spec(name)))\n"
    )
    quickstart = ROOT / "examples" / "quickstart.py"
    assert run(bin_dir / "python", "-c", load, quickstart, cwd=tmp_path).stdout.strip() == "[]"
