"""``torch2jax-device doctor``: what JAX sees here, where new data goes, and known traps.

The environment is judged first, by the start-up rules (``_src/startup.py``), without
starting JAX: every variable JAX or XLA would refuse or misread, with its fix. JAX is
then started in a probe process (see ``devices.probe``), so that a setting which ends
JAX's start-up (an unknown flag in ``XLA_FLAGS``, a crashing plugin) ends the probe
and is reported, never the doctor. ``--json`` prints the same report as a stable
document (see docs/cli.md).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import json
import os
import platform as python_platform
from pathlib import Path
from typing import Any, TextIO

from jax._src import hardware_utils

from .._src import platforms
from .._src.startup import (
    CRASHES_AT_START,
    FRACTION_VARIABLES,
    PREALLOCATE_OFF,
    VARIABLES,
    Problem,
    check_environment,
    fraction_problem,
)
from . import devices

__all__ = ["add_parser", "report", "run"]

_DISTRIBUTIONS = ("jax", "jaxlib", "torch", "flax", "safetensors", "numpy", "ml_dtypes")
# The share of a GPU's memory JAX takes when nothing says otherwise.
_JAX_FRACTION = 0.75
# From this compute capability on, NVIDIA GPUs have TensorFloat-32 units (Ampere).
_TF32_CAPABILITY = (8, 0)
# A JAX variable JAX refuses at import (its check's message starts with "NAME=").
_REFUSED = "jax-variable-invalid"
# Variables listed beyond VARIABLES when set: JAX's options and XLA's settings.
_LISTED_PREFIXES = ("JAX", "XLA_")


def _versions() -> dict[str, Any]:
    versions: dict[str, Any] = {"python": python_platform.python_version()}
    versions.update({name: platforms.installed_version(name) for name in _DISTRIBUTIONS})
    versions["plugins"] = platforms.installed_plugins()
    return versions


def _memory_pool(environment: dict[str, str | None]) -> dict[str, Any]:
    """JAX's GPU pool as the environment sets it: the fraction, preallocation, and why."""
    fraction, fraction_from = _JAX_FRACTION, "JAX's default"
    for name in FRACTION_VARIABLES:  # the new name first: JAX reads it first
        text = environment.get(name)
        if text and fraction_problem(text, name) is None:
            fraction, fraction_from = float(text), name
            break
    preallocate_text = environment.get("XLA_PYTHON_CLIENT_PREALLOCATE")
    return {
        "fraction": fraction,
        "fraction_from": fraction_from,
        "preallocate": preallocate_text not in PREALLOCATE_OFF,
        "preallocate_from": (
            "XLA_PYTHON_CLIENT_PREALLOCATE" if preallocate_text else "JAX's default"
        ),
    }


def _torch_cuda() -> dict[str, Any] | None:
    """What torch sees, if torch is installed.

    A torch built for no GPU (``torch.version.cuda`` and ``.hip`` both ``None``) sees
    none, which its version file says without importing torch (about 3.5 s of CPU on a
    2-core machine); any other build is imported and asked.
    """
    spec = importlib.util.find_spec("torch")
    if spec is None:
        return None
    folders = list(spec.submodule_search_locations or [])
    if folders and _built_for_gpu(Path(folders[0]) / "version.py") is False:
        return {"cuda_available": False, "cuda_version": None, "device_count": 0}
    import torch

    return {
        "cuda_available": bool(torch.cuda.is_available()),
        "cuda_version": torch.version.cuda,
        "device_count": int(torch.cuda.device_count()),
    }


def _built_for_gpu(version_file: Path) -> bool | None:
    """Whether torch's ``version.py`` names a CUDA or ROCm build; ``None`` when the file
    is missing or does not say it in literals (then torch itself is asked).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> folder = Path(tempfile.mkdtemp())
        >>> _ = (folder / "version.py").write_text("cuda: Optional[str] = None\\nhip = None\\n")
        >>> _built_for_gpu(folder / "version.py")
        False
        >>> _ = (folder / "version.py").write_text("cuda = '12.8'\\nhip = None\\n")
        >>> _built_for_gpu(folder / "version.py")
        True
    """
    try:
        tree = ast.parse(version_file.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    found: dict[str, object] = {}
    value: ast.expr | None
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in ("cuda", "hip"):
            if not isinstance(value, ast.Constant):
                return None
            found[target.id] = value.value
    if found.keys() != {"cuda", "hip"}:
        return None
    return any(value is not None for value in found.values())


def _tf32_check(result: dict[str, Any]) -> list[Problem]:
    """JAX's float32 matmuls use TF32 on this GPU, where torch's default does not."""
    if result.get("matmul_precision") == "highest":
        return []
    gpus = [
        (device["device"], device["compute_capability"])
        for backend in result["inventory"]["backends"]
        if backend["name"] == "cuda"
        for device in backend["devices"]
        if _capability(device.get("compute_capability")) >= _TF32_CAPABILITY
    ]
    if not gpus:
        return []
    name, capability = gpus[0]
    return [
        Problem(
            "info",
            "tf32-matmul",
            f"float32 matmuls and convolutions on {name} (compute capability {capability}) "
            "use TensorFloat-32 at JAX's default precision: a relative error near 1e-4, where "
            "PyTorch's default (allow_tf32=False) computes in float32 (near 1e-6)",
            "for PyTorch's numbers, tj.configure(matmul_precision='highest') at the top of "
            "the script (or JAX_DEFAULT_MATMUL_PRECISION=highest); keep TF32 for speed",
            setting="JAX_DEFAULT_MATMUL_PRECISION",
        )
    ]


def _capability(text: object) -> tuple[int, ...]:
    parts = str(text or "").split(".")
    return tuple(int(part) for part in parts) if all(p.isdigit() for p in parts) else ()


def _hardware_checks(backends: list[str], torch_cuda: dict[str, Any] | None) -> list[Problem]:
    checks = []
    has_cuda = "cuda" in backends
    if torch_cuda and torch_cuda["cuda_available"] and not has_cuda:
        major = str(torch_cuda["cuda_version"] or "12").split(".")[0]
        checks.append(
            Problem(
                "warning",
                "torch-cuda-jax-cpu",
                f"torch sees {torch_cuda['device_count']} CUDA GPU(s) but JAX has no cuda "
                "backend: JAX will compute on the CPU",
                f"pip install 'torch2jax-device[cuda{major}]' (jax[cuda{major}], matching "
                f"torch's CUDA {torch_cuda['cuda_version']})",
            )
        )
    elif not has_cuda and hardware_utils.has_visible_nvidia_gpu():
        checks.append(
            Problem(
                "warning",
                "nvidia-gpu-jax-cpu",
                "an NVIDIA GPU is present but JAX has no cuda backend",
                "pip install 'jax[cuda12]' (or 'jax[cuda13]'); in the checkout: "
                "pip install '.[cuda12]'",
            )
        )
    if backends and backends[0] != "cpu":
        checks.append(
            Problem(
                "info",
                "arrays-default-to-accelerator",
                f"new JAX arrays go to {backends[0]}:0 (PyTorch would use the CPU); a dataset "
                "larger than GPU memory fails there",
                "create host data under `with tj.device('cpu'):` and load with "
                "tj.load_file(..., device='cpu')",
            )
        )
    return checks


def report(timeout: float = devices.PROBE_TIMEOUT_S) -> dict[str, Any]:
    """Everything ``doctor`` prints, as the ``--json`` document.

    Judges the environment without starting JAX, then starts JAX in a probe process
    (at most ``timeout`` seconds) unless a setting would crash it.
    """
    checks = check_environment(os.environ)
    document: dict[str, Any] = {
        "versions": _versions(),
        "environment": _environment(),
        "backends": [],
        "default_backend": None,
        "default_device": None,
        "torch": _torch_cuda(),
    }
    document["memory_pool"] = _memory_pool(document["environment"])
    if any(check.code in CRASHES_AT_START for check in checks):
        checks.append(
            Problem(
                "info",
                "jax-not-started",
                "JAX was not started: a setting above would crash it",
                "correct that setting, then run torch2jax-device doctor again",
            )
        )
    else:
        # Without the variables JAX refuses at import, the probe gets as far as XLA's own
        # checks (XLA_FLAGS), and shows what JAX will see once they are corrected.
        refused = [check.setting for check in checks if check.code == _REFUSED and check.setting]
        environment = {k: v for k, v in os.environ.items() if k not in refused}
        result = devices.probe(timeout, environment)
        if refused:
            checks.append(
                Problem(
                    "info",
                    "jax-started-without",
                    f"to check the rest, JAX was started without {', '.join(refused)}, which "
                    "it refuses: what it shows is what it will see once they are corrected",
                    "correct the variables reported above",
                )
            )
        checks += devices.start_problems(result, checks)
        if result["stage"] == "started":
            inventory = result["inventory"]
            for backend in inventory["backends"]:
                for device in backend["devices"]:
                    device["memory_stats"] = result["memory_stats"].get(device["device"], {})
                    device["card_memory"] = result["card_memory"].get(device["device"])
            document["backends"] = inventory["backends"]
            document["default_backend"] = inventory["default_backend"]
            document["default_device"] = result["default_device"]
            names = [backend["name"] for backend in inventory["backends"]]
            checks += _hardware_checks(names, document["torch"]) + _tf32_check(result)
    document["checks"] = [dataclasses.asdict(check) for check in checks]
    return document


def _environment() -> dict[str, str | None]:
    """The variables the rules read by name, then every other JAX or XLA variable set."""
    others = sorted(
        name for name in os.environ if name.startswith(_LISTED_PREFIXES) and name not in VARIABLES
    )
    return {name: os.environ.get(name) for name in (*VARIABLES, *others)}


def _render(document: dict[str, Any]) -> str:
    versions = document["versions"]
    lines = ["Versions"]
    lines += [
        f"  {name:12} {versions.get(name) or 'not installed'}"
        for name in ("python", *_DISTRIBUTIONS)
    ]
    lines += [
        f"  {name:12} {version}  (plugin)" for name, version in sorted(versions["plugins"].items())
    ]
    lines += ["", "Environment JAX reads at start-up"]
    for name, value in document["environment"].items():
        lines.append(f"  {name:31} {'(unset)' if value is None else repr(value)}")
    lines.append("")
    if document["default_backend"] is None:
        lines.append("JAX did not start here (see the checks)")
    else:
        lines.append(
            f"Default backend: {document['default_backend']}, "
            f"new arrays go to: {document['default_device']}"
        )
    for backend in document["backends"]:
        lines.append(f"  {backend['name']}: {len(backend['devices'])} device(s)")
        for device in backend["devices"]:
            kinds = ", ".join(device["memory_kinds"])
            lines.append(f"    {device['device']:8} {device['jax']:20} {device['kind']}  [{kinds}]")
            lines += _memory_lines(device, document["memory_pool"])
    torch = document["torch"]
    if torch is not None:
        lines.append(
            f"  torch sees: {torch['device_count']} CUDA GPU(s)"
            + (f" (CUDA {torch['cuda_version']})" if torch["cuda_version"] else " (CPU build)")
        )
    lines += ["", "Checks"]
    if not document["checks"]:
        lines.append("  no known trap found")
    for check in document["checks"]:
        lines.append(f"  {check['level'].upper():7} [{check['code']}] {check['message']}")
        lines.append(f"          fix: {check['fix']}")
    return "\n".join(lines) + "\n"


def _memory_lines(device: dict[str, Any], pool: dict[str, Any]) -> list[str]:
    """The card's memory (the driver's) and JAX's pool in it, on two lines."""
    lines = []
    if device.get("card_memory"):
        free, total = device["card_memory"]
        lines.append(
            f"{'':13}card: {free / 2**20:.0f} of {total / 2**20:.0f} MiB free (CUDA driver)"
        )
    stats = device["memory_stats"]
    if "bytes_in_use" in stats and "bytes_limit" in stats:
        allocation = "preallocated" if pool["preallocate"] else "grows as needed"
        lines.append(
            f"{'':13}JAX pool: {stats['bytes_in_use'] / 2**20:.0f} of "
            f"{stats['bytes_limit'] / 2**20:.0f} MiB in use; {pool['fraction']:g} of the card "
            f"({pool['fraction_from']}), {allocation} ({pool['preallocate_from']})"
        )
    return lines


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Print the report; exit status 1 if a check is an error, else 0."""
    document = report()
    out.write(json.dumps(document, indent=2) + "\n" if args.json else _render(document))
    return 1 if any(check["level"] == "error" for check in document["checks"]) else 0


def add_parser(commands: Any) -> None:
    """Register ``doctor`` on the command line's subcommands."""
    parser = commands.add_parser(
        "doctor",
        help="versions, backends, devices, memory and the environment traps, with fixes",
        description=(
            "Report what JAX sees on this machine and where new data goes, and warn about "
            "settings that do not do what they seem to (with the fix). Exit status 1 if a "
            "check is an error."
        ),
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(run=run)
