"""Resident memory of this process from Linux ``/proc``, for the benchmarks' children.

``reset_peak`` starts a new peak (``VmHWM``) from the current resident size; ``kib``
reads a field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in KiB.
"""

from __future__ import annotations


def kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as file:
        file.write("5")
