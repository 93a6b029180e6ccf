"""``torch2jax-device devices``: every backend and device, torch-style names first.

JAX is started in a probe process, never in the command's own: a setting that makes
JAX's start-up end the process (an unknown flag in ``XLA_FLAGS``, a crashing plugin)
then ends the probe, and the command reports it with the fix.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import textwrap
from typing import Any, TextIO

import jax

from .._src import platforms
from .._src.defaults import get_default_device
from .._src.device import Device
from .._src.errors import BackendInitError
from .._src.memory import card_memory
from .._src.precision import matmul_precision
from .._src.startup import (
    CRASHES_AT_START,
    Problem,
    check_environment,
    glog_messages,
    xla_failure_problems,
)

__all__ = [
    "PROBE_TIMEOUT_S",
    "add_parser",
    "inventory",
    "probe",
    "probe_report",
    "run",
    "start_problems",
]

#: How long the probe may take to start JAX: seconds on a GPU machine; more is a hang.
PROBE_TIMEOUT_S = 300.0

# The probe: start JAX with this process's environment, print one JSON document.
_PROBE = textwrap.dedent(
    """
    import json
    try:
        from torch2jax_device.cli import devices
    except Exception as error:  # JAX refused its environment when imported
        cause = error.__cause__ or error
        print(json.dumps({"stage": "import", "reason": f"{type(cause).__name__}: {cause}"}))
    else:
        print(json.dumps(devices.probe_report()))
    """
)
_TAIL_LINES = 5


def inventory() -> dict[str, Any]:
    """What JAX sees in this process, as plain data (the ``--json`` document).

    Starts JAX's backends in this process; the command line calls it in a probe
    process (see [`probe`][torch2jax_device.cli.devices.probe]).

    Raises:
        BackendInitError: JAX could not start its backends.
    """
    backends = platforms.jax_backends()
    default = platforms.default_platform()
    entries = []
    for name in platforms.available_platforms():
        devices = platforms.local_devices(name)
        entries.append(
            {
                "name": name,
                "default": name == default,
                "platform_version": str(backends[name].platform_version),
                "devices": [_describe(device) for device in devices],
            }
        )
    return {
        "jax": jax.__version__,
        "jaxlib": importlib.metadata.version("jaxlib"),
        "default_backend": default,
        "backends": entries,
    }


def probe_report() -> dict[str, Any]:
    """The probe's side: start JAX here and describe what it sees (never raises).

    Returns:
        ``{"stage": "started", "inventory": ..., "default_device": ..., "memory_stats":
        {device: stats}, "card_memory": {device: [free, total]}, "matmul_precision":
        torch's name}``, or ``{"stage": "start", "reason": ...}`` when JAX could not
        start its backends. ``card_memory`` lists the devices the CUDA driver reports.
    """
    try:
        data = inventory()
    except BackendInitError as error:
        return {"stage": "start", "reason": str(error)}
    devices = [
        device
        for backend in data["backends"]
        for device in platforms.local_devices(backend["name"])
    ]
    cards = {str(Device(device)): card_memory(device) for device in devices}
    return {
        "stage": "started",
        "inventory": data,
        "default_device": str(get_default_device()),
        "memory_stats": {str(Device(device)): device.memory_stats() or {} for device in devices},
        "card_memory": {name: list(card) for name, card in cards.items() if card is not None},
        "matmul_precision": matmul_precision(),
    }


def probe(
    timeout: float = PROBE_TIMEOUT_S, environment: dict[str, str] | None = None
) -> dict[str, Any]:
    """Start JAX in a new process (``environment``: this one's); what it saw, or how it failed.

    Returns:
        [`probe_report`][torch2jax_device.cli.devices.probe_report]'s document, or
        ``{"stage": "import", "reason": ...}`` (JAX refused its environment when
        imported), ``{"stage": "crashed", "reason": ..., "output": stderr}`` (the process
        ended without a report: XLA ended it, or it crashed) or ``{"stage": "timeout",
        "reason": ...}``.
    """
    try:
        result = subprocess.run(
            [sys.executable, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=environment,
        )
    except subprocess.TimeoutExpired:
        return {
            "stage": "timeout",
            "reason": f"JAX did not start within {timeout:g} s; the probe process was stopped",
        }
    lines = result.stdout.strip().splitlines()
    if result.returncode == 0 and lines:
        try:
            report: dict[str, Any] = json.loads(lines[-1])
        except json.JSONDecodeError:
            pass
        else:
            return report
    return {"stage": "crashed", "reason": _crash_reason(result), "output": result.stderr}


def _crash_reason(result: subprocess.CompletedProcess[str]) -> str:
    """How the probe ended, with the last lines it wrote (XLA's own reason, if any)."""
    if result.returncode < 0:
        number = -result.returncode
        ending = f"was killed by signal {number} ({signal.Signals(number).name})"
    else:
        ending = f"ended with exit status {result.returncode}"
    said = glog_messages(result.stderr, "FE") or [
        line.strip() for line in result.stderr.splitlines() if line.strip()
    ]
    tail = " / ".join(said[-_TAIL_LINES:]) or "nothing on standard error"
    return f"the process starting JAX {ending}; it said: {tail}"


def start_problems(result: dict[str, Any], known: list[Problem]) -> list[Problem]:
    """What a failed probe means, as problems with their fix.

    ``known`` are the problems already found in the environment: a reason they explain
    points to them instead of repeating them.
    """
    stage = result["stage"]
    if stage == "started":
        return []
    reason = result["reason"]
    refused = [problem for problem in known if problem.code == "jax-variable-invalid"]
    if stage == "import":
        fix = (
            "correct the variables reported above"
            if refused
            else "set the variable JAX names to a value it accepts, or unset it"
        )
        return [Problem("error", "jax-import-failed", f"import jax failed: {reason}", fix)]
    if stage == "start":  # a BackendInitError: the reason, what was attempted, the fix
        message, _, fix = reason.rstrip(".").partition(". Fix: ")
        return [Problem("error", "backend-init-failed", message, fix or "see the message")]
    if stage == "timeout":
        return [
            Problem(
                "error",
                "jax-start-timeout",
                reason,
                "check the accelerator (nvidia-smi), the distributed settings and "
                "JAX_NUM_CPU_DEVICES; JAX_PLATFORMS=cpu starts the CPU alone",
            )
        ]
    file_missing = any(problem.code == "xla-flags-file-missing" for problem in known)
    if file_missing:  # the environment's problems explain it already
        return []
    explained = xla_failure_problems(result["output"])
    if explained:
        return explained
    return [
        Problem(
            "error",
            "jax-start-crashed",
            reason,
            "run python -c 'import jax; jax.devices()' to see the whole output; unset "
            "XLA_FLAGS and the plugins' variables to find the setting that ends it",
        )
    ]


def _describe(device: jax.Device) -> dict[str, Any]:
    memories = [str(memory.kind) for memory in device.addressable_memories()]
    return {
        "device": str(Device(device)),
        "jax": repr(device),
        "id": device.id,
        "kind": str(device.device_kind),
        "compute_capability": getattr(device, "compute_capability", None),
        "memory_kinds": memories,
        "default_memory_kind": str(device.default_memory().kind),
    }


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _render(data: dict[str, Any]) -> str:
    backend_rows = [["backend", "default", "devices", "version"]]
    device_rows = [["device", "backend", "jax", "kind", "memory kinds (* default)"]]
    for backend in data["backends"]:
        backend_rows.append(
            [
                backend["name"],
                "yes" if backend["default"] else "",
                str(len(backend["devices"])),
                backend["platform_version"].splitlines()[0] if backend["platform_version"] else "",
            ]
        )
        for device in backend["devices"]:
            kinds = ", ".join(
                kind + ("*" if kind == device["default_memory_kind"] else "")
                for kind in device["memory_kinds"]
            )
            device_rows.append(
                [device["device"], backend["name"], device["jax"], device["kind"], kinds]
            )
    header = (
        f"JAX {data['jax']} (jaxlib {data['jaxlib']}), default backend: {data['default_backend']}"
    )
    return f"{header}\n\n{_table(backend_rows)}\n\n{_table(device_rows)}\n"


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Print the inventory; exit status 1, with each problem and its fix, if the
    environment has an error or JAX cannot start."""
    problems = [problem for problem in check_environment(os.environ) if problem.level == "error"]
    result: dict[str, Any] = {"stage": "not started"}
    if not any(problem.code in CRASHES_AT_START for problem in problems):
        result = probe()
        problems += start_problems(result, problems)
    for problem in problems:
        err.write(f"torch2jax-device: {problem.message}. Fix: {problem.fix}.\n")
    if result["stage"] == "started":
        out.write(
            json.dumps(result["inventory"], indent=2) + "\n"
            if args.json
            else _render(result["inventory"])
        )
    return 1 if problems else 0


def add_parser(commands: Any) -> None:
    """Register ``devices`` on the command line's subcommands."""
    parser = commands.add_parser(
        "devices",
        help="list every JAX backend and device, with torch-style names",
        description=(
            "List every backend JAX can use here (not only the default one, unlike "
            "jax.devices()), and each device's torch-style name. Respects JAX_PLATFORMS. "
            "JAX starts in a separate process; exit status 1, with the fix, if the "
            "environment has an error or JAX cannot start."
        ),
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(run=run)
