"""``torch2jax-device devices``: every backend and device, torch-style names first."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
from typing import Any, TextIO

import jax

from .._src import platforms
from .._src.device import Device
from .._src.errors import BackendInitError

__all__ = ["add_parser", "inventory", "run"]


def inventory() -> dict[str, Any]:
    """What JAX sees in this process, as plain data (the ``--json`` document).

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


def _describe(device: jax.Device) -> dict[str, Any]:
    memories = [str(memory.kind) for memory in device.addressable_memories()]
    return {
        "device": str(Device(device)),
        "jax": repr(device),
        "id": device.id,
        "kind": str(device.device_kind),
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
    """Print the inventory; exit status 1 with the fix if JAX cannot start."""
    try:
        data = inventory()
    except BackendInitError as error:
        err.write(f"torch2jax-device: {error}\n")
        return 1
    out.write(json.dumps(data, indent=2) + "\n" if args.json else _render(data))
    return 0


def add_parser(commands: Any) -> None:
    """Register ``devices`` on the command line's subcommands."""
    parser = commands.add_parser(
        "devices",
        help="list every JAX backend and device, with torch-style names",
        description=(
            "List every backend JAX can use here (not only the default one, unlike "
            "jax.devices()), and each device's torch-style name. Respects JAX_PLATFORMS."
        ),
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.set_defaults(run=run)
