"""The CPU test install takes PyTorch's CPU build from the project's own files.

``scripts/bootstrap.sh`` installs with the options ``scripts/torch_cpu_source.py`` prints
(``-c constraints-cpu.txt``, plus PyTorch's CPU wheel index when it is reachable). These
tests resolve torch with those options and this machine's pip configuration switched
off (``PIP_CONFIG_FILE=/dev/null``, no ``PIP_FIND_LINKS`` / index variables), as on a
fresh machine, with ``pip install --dry-run``: no ``nvidia-*`` or ``cuda-*`` wheel may
appear. Where the index is unreachable (an offline CI), pip must refuse (no distribution
satisfies ``torch==...+cpu``) rather than fall back to PyPI's CUDA build, and the pinned
local build must resolve when pip is pointed at it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.deadlines import deadline
from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
_SOURCES = ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX")


torch_cpu_source = load_script("torch_cpu_source")


def pinned_torch() -> str:
    """The torch version ``constraints-cpu.txt`` pins."""
    pins = re.findall(r"^torch==(\S+)", torch_cpu_source.CONSTRAINTS.read_text(), re.MULTILINE)
    assert len(pins) == 1, "constraints-cpu.txt pins torch once"
    return str(pins[0])


def cuda_wheels(report: dict[str, Any]) -> list[str]:
    """The CUDA runtime wheels a ``pip install --report`` would install."""
    names = [item["metadata"]["name"].lower() for item in report.get("install", [])]
    return [name for name in names if name.startswith(("nvidia-", "cuda-"))]


def dry_run(*options: str) -> tuple[dict[str, Any] | None, str]:
    """Resolve torch with ``options`` and no machine pip configuration: (report, output)."""
    env = {k: v for k, v in os.environ.items() if k not in _SOURCES}
    env["PIP_CONFIG_FILE"] = os.devnull
    with tempfile.TemporaryDirectory() as scratch:
        report_path = Path(scratch) / "report.json"
        result = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
             "--report", str(report_path), *options, "torch"],
            env=env, capture_output=True, text=True, timeout=deadline(600),
        )  # fmt: skip
        report = json.loads(report_path.read_text()) if result.returncode == 0 else None
    return report, result.stdout + result.stderr


def local_wheel_dirs() -> list[str]:
    """Directories this machine's pip configuration names with a copy of the pinned wheel."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    found = re.findall(r"find-links='([^']*)'", listed)
    found += os.environ.get("PIP_FIND_LINKS", "").split()
    dirs = [d for entry in found for d in entry.split() if Path(d).is_dir()]
    wheel = f"torch-{pinned_torch()}-*.whl"
    return sorted({d for d in dirs if any(Path(d).glob(wheel))})


def test_the_constraints_pin_the_cpu_build() -> None:
    assert pinned_torch().endswith("+cpu"), "a pin without +cpu lets PyPI's CUDA build in"


def test_a_fresh_machine_never_resolves_cuda_wheels() -> None:
    report, output = dry_run(*torch_cpu_source.pip_options())
    if report is None:  # no CPU source reachable: pip must refuse, not fall back to CUDA
        assert f"The user requested (constraint) torch=={pinned_torch()}" in output, output
        assert "nvidia" not in output
        return
    versions = {item["metadata"]["name"]: item["metadata"]["version"] for item in report["install"]}
    assert versions["torch"] == pinned_torch()
    assert cuda_wheels(report) == []


def test_the_pinned_local_build_resolves_without_cuda() -> None:
    dirs = local_wheel_dirs()
    if not dirs:
        pytest.skip(f"no local copy of torch {pinned_torch()} in this machine's pip configuration")
    options = [option for d in dirs for option in ("--find-links", d)]
    report, output = dry_run(*options, "-c", str(torch_cpu_source.CONSTRAINTS))
    assert report is not None, output
    assert cuda_wheels(report) == []
    torch = [item for item in report["install"] if item["metadata"]["name"] == "torch"]
    assert torch[0]["metadata"]["version"] == pinned_torch()


def test_the_check_sees_cuda_wheels() -> None:
    """A pip report for PyPI's torch, trimmed to a few of its entries."""
    report = {
        "install": [
            {"metadata": {"name": "torch", "version": "2.13.0"}},
            {"metadata": {"name": "nvidia-cublas", "version": "13.1.1.3"}},
            {"metadata": {"name": "cuda-toolkit", "version": "13.0.3.0"}},
            {"metadata": {"name": "sympy", "version": "1.14.0"}},
        ]
    }
    assert cuda_wheels(report) == ["nvidia-cublas", "cuda-toolkit"]


def test_the_index_probe_answers_false_for_an_unreachable_index() -> None:
    assert (
        torch_cpu_source.index_reachable("http://127.0.0.1:9/whl/cpu", timeout=deadline(2)) is False
    )


def readme_cpu_install() -> list[list[str]]:
    """The README's CPU-only install commands, each split into words."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("**CPU only**", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].split() for line in block.splitlines() if line.strip()]


def test_the_readme_installs_cpu_torch_before_the_package() -> None:
    """A library user following the README on a CPU machine gets PyTorch's CPU build: torch
    comes from PyTorch's CPU index before the package (whose ``[torch]`` extra would take
    PyPI's CUDA build)."""
    first, second = readme_cpu_install()
    assert first == ["pip", "install", "torch", "--index-url", torch_cpu_source.INDEX]
    assert second[:2] == ["pip", "install"] and "torch" not in " ".join(second[2:])


def test_the_readme_cpu_install_resolves_without_cuda() -> None:
    options = readme_cpu_install()[0][3:]  # ["--index-url", URL]
    if not torch_cpu_source.index_reachable(options[1]):
        pytest.skip(f"{options[1]} is unreachable from this machine")
    report, output = dry_run(*options)
    assert report is not None, output
    assert cuda_wheels(report) == []


def _links_libpython(python: str) -> bool | None:
    """Whether ``python`` (3.11 or newer) loads libpython as a shared library; ``None``
    where it is absent, older, or cannot tell."""
    probe = subprocess.run(
        [python, "-c", "import sys; assert sys.version_info >= (3, 11)\n"
         "print('/libpython' in open('/proc/self/maps').read())"],
        capture_output=True, text=True, timeout=deadline(60),
    )  # fmt: skip
    return {"True": True, "False": False}.get(probe.stdout.strip())


def test_bootstrap_makes_the_venv_from_a_python_with_libpython_linked_in() -> None:
    """``static_python`` in ``scripts/bootstrap.sh``: a Python 3.11+ whose libpython is
    part of the interpreter, when one is on PATH or at /usr/bin/python3, else python3."""
    source = (ROOT / "scripts" / "bootstrap.sh").read_text()
    found = re.search(r"^static_python\(\) \{$.*?^\}$", source, re.DOTALL | re.MULTILINE)
    assert found is not None
    chosen = subprocess.run(
        ["bash", "-c", f"{found.group(0)}\nstatic_python"],
        capture_output=True, text=True, timeout=deadline(120), check=True,
    ).stdout.strip()  # fmt: skip
    if chosen != "python3":
        assert _links_libpython(chosen) is False, chosen
        return
    candidates = [
        os.path.join(folder, name)
        for folder in os.environ["PATH"].split(os.pathsep)
        for name in ("python3", "python3.11")
        if os.access(os.path.join(folder, name), os.X_OK)
    ]
    assert all(
        _links_libpython(python) is not False for python in [*candidates, "/usr/bin/python3"]
    )
