"""Print the pip options that install the CPU build of PyTorch for the test suite.

``constraints-cpu.txt`` pins torch to a ``+cpu`` version: only PyTorch's CPU wheel index
(and copies of its wheels) has it, while PyPI's torch of the same version is the CUDA
build, which pulls about 2 GB of ``nvidia-*`` wheels and can never satisfy the pin.
This prints, one per line, ``-c constraints-cpu.txt`` and, when the index answers,
``--extra-index-url`` with its address (``TORCH_CPU_INDEX`` overrides it). Where the
index is unreachable (an offline CI, a sandbox), the wheel must come from pip's own
configuration, e.g. ``PIP_FIND_LINKS`` naming a directory that holds it; without one the
install stops (no distribution satisfies ``torch==...+cpu``) instead of downloading
CUDA.

Used by ``scripts/bootstrap.sh`` and ``tests/project/test_install.py``.
"""

from __future__ import annotations

import os
import ssl
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints-cpu.txt"
INDEX = "https://download.pytorch.org/whl/cpu"


def index_url() -> str:
    return os.environ.get("TORCH_CPU_INDEX", INDEX).rstrip("/")


def index_reachable(url: str, timeout: float = 5.0) -> bool:
    """Whether the wheel index at ``url`` lists torch (with pip's certificate, if set)."""
    context = ssl.create_default_context(cafile=os.environ.get("PIP_CERT") or None)
    try:
        with urllib.request.urlopen(f"{url}/torch/", timeout=timeout, context=context):
            return True
    except (OSError, ValueError):  # URLError and SSL errors are OSErrors
        return False


def pip_options() -> list[str]:
    options = ["-c", str(CONSTRAINTS)]
    if index_reachable(index_url()):
        options += ["--extra-index-url", index_url()]
    return options


if __name__ == "__main__":
    sys.stdout.write("".join(f"{option}\n" for option in pip_options()))
