"""A one-line progress bar on stderr for long loads, without a dependency.

It shows when stderr is a terminal and the load is at least ``THRESHOLD_BYTES``,
so pipes, log files and CI output stay clean. The environment variable
``TORCH2JAX_DEVICE_PROGRESS`` overrides that (``0`` never, ``1`` always), and a
loader's ``progress=`` argument overrides both.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

__all__ = ["ENV_VAR", "THRESHOLD_BYTES", "Progress", "wanted"]

ENV_VAR = "TORCH2JAX_DEVICE_PROGRESS"
THRESHOLD_BYTES = 256 * 2**20
_BAR_WIDTH = 24
_REDRAW_SECONDS = 0.1


def wanted(requested: bool | None, total: int, stream: TextIO | None) -> bool:
    """Whether to draw: the argument, else the environment, else terminal and size."""
    if stream is None:
        return False
    if requested is not None:
        return requested
    setting = os.environ.get(ENV_VAR, "").strip().lower()
    if setting in {"0", "false", "no", "off"}:
        return False
    if setting in {"1", "true", "yes", "on"}:
        return True
    isatty = getattr(stream, "isatty", None)
    return total >= THRESHOLD_BYTES and callable(isatty) and bool(isatty())


class Progress:
    """Draws ``label: 42% [#########...] 1.2 GiB / 2.9 GiB, 1.4 GiB/s`` on stderr.

    A context manager: leaving it draws the final state and ends the line, also when
    the load fails, so the traceback starts on a line of its own.
    """

    def __init__(self, label: str, total: int, requested: bool | None = None) -> None:
        self._stream = sys.stderr
        self.enabled = wanted(requested, total, self._stream)
        self._label = label
        self._total = total
        self._done = 0
        self._started = self._drawn = time.monotonic()
        self._width = 0

    def __enter__(self) -> Progress:
        if self.enabled:
            self._draw()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.enabled:
            self._draw()
            self._stream.write("\n")
            self._stream.flush()

    def advance(self, count: int) -> None:
        """Count ``count`` more bytes done (capped at the total)."""
        if not self.enabled:
            return
        self._done = min(self._total, self._done + count)
        if time.monotonic() - self._drawn >= _REDRAW_SECONDS:
            self._draw()

    def _draw(self) -> None:
        self._drawn = time.monotonic()
        fraction = self._done / self._total if self._total else 1.0
        filled = int(fraction * _BAR_WIDTH)
        rate = self._done / max(self._drawn - self._started, 1e-9)
        line = (
            f"{self._label}: {fraction:4.0%} [{'#' * filled}{'.' * (_BAR_WIDTH - filled)}] "
            f"{_size(self._done)} / {_size(self._total)}, {_size(rate)}/s"
        )
        self._stream.write("\r" + line.ljust(self._width))  # blank what a longer line left
        self._width = len(line)
        self._stream.flush()


def _size(count: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if count < 1024:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.2f} GiB"
