"""XLA's quickest CPU compilation, for the tests' processes and their children.

The tests compile thousands of small programs that run a few steps, so LLVM's
optimisation passes and the MLIR fusion pipeline cost most of their time and buy nothing:
optimisation level 0 and the classic fusion emitters (``QUICK_COMPILE``) build them in a
third of the CPU (80 small programs: 17.9 s by default, 9.9 s at level 0, 5.6 s with the
classic emitters too; the one-process GPT port run: 22 s, 13 s, 10 s; the MNIST port,
whose convolutions run longest, 14.5 s, 10.7 s, 10.1 s). The GPT losses agree to float32
rounding, and are the same bits at level 0 with either emitters. The library does not
depend on XLA's optimisations; users, the benchmarks and the GPU run keep the defaults.

``tests/conftest.py`` sets the flags before JAX starts, so every pytest process and every
child it starts has them. An XLA that does not know a flag ends the process as JAX
starts ("Unknown flag in XLA_FLAGS", and under pytest's capture not even that shows):
jaxlib 0.11 no longer has ``--xla_cpu_use_fusion_emitters``. So ``known_flags`` asks a
child XLA which of the flags it knows (about 0.3 s of CPU, once: the answer is kept in
``UNKNOWN_ENV`` for the processes started after it), and only those are set.

Level 0 leaves the loops XLA emits unvectorized, which costs where a program moves
gigabytes: ``tests/multidevice`` stages 2**31-element tensors onto a device (a 2 GiB
``zeros`` and a ``dynamic_update_slice`` per piece), and those two tests took 32 s of
CPU at level 0 and 15 s at XLA's default level. That directory compiles at the default
level with the classic emitters (``optimized_loop_flags``); its whole process took 62.7 s
of CPU at level 0 and 52.7 s so, on the 2-core machine.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys

from tests.support.deadlines import deadline

UNOPTIMIZED = "--xla_backend_optimization_level=0"
QUICK_COMPILE = (UNOPTIMIZED, "--xla_cpu_use_fusion_emitters=false")
# The flags of QUICK_COMPILE this XLA does not know (space-separated; empty: none), as
# the first process that asked found them.
UNKNOWN_ENV = "TORCH2JAX_DEVICE_TEST_UNKNOWN_XLA_FLAGS"
# Starts XLA's CPU client, which reads XLA_FLAGS, without the rest of JAX where jaxlib
# has the shortcut.
_START_XLA = (
    "from jaxlib import xla_client\n"
    "if hasattr(xla_client, 'make_cpu_client'): xla_client.make_cpu_client()\n"
    "else: import jax; jax.devices('cpu')\n"
)


def quick_compile_flags(flags: str) -> str:
    """``XLA_FLAGS`` value ``flags`` with the flags of ``QUICK_COMPILE`` that XLA knows
    added (once)."""
    words = flags.split()
    return " ".join(words + [flag for flag in known_flags() if flag not in words])


def optimized_loop_flags(flags: str) -> str:
    """``quick_compile_flags(flags)`` at XLA's default optimization level."""
    return " ".join(word for word in quick_compile_flags(flags).split() if word != UNOPTIMIZED)


@functools.cache
def known_flags() -> tuple[str, ...]:
    """The flags of ``QUICK_COMPILE`` that this XLA knows, asked of a child process
    (above) unless an earlier process left the answer in ``UNKNOWN_ENV``."""
    if UNKNOWN_ENV not in os.environ:
        os.environ[UNKNOWN_ENV] = " ".join(_unknown_flags(QUICK_COMPILE))
    unknown = os.environ[UNKNOWN_ENV].split()
    return tuple(flag for flag in QUICK_COMPILE if flag not in unknown)


def _unknown_flags(flags: tuple[str, ...]) -> list[str]:
    """The flags a child XLA names as unknown, one start per unknown flag it reports;
    none when the child fails for another reason (the tests then show that reason)."""
    unknown: list[str] = []
    while remaining := [flag for flag in flags if flag not in unknown]:
        env = dict(os.environ, XLA_FLAGS=" ".join(remaining), JAX_PLATFORMS="cpu")
        child = subprocess.run(
            [sys.executable, "-c", _START_XLA], env=env, capture_output=True, text=True,
            timeout=deadline(300), check=False,
        )  # fmt: skip
        named = re.search(r"Unknown flags? in XLA_FLAGS: (.*)", child.stderr)
        if child.returncode == 0 or named is None:
            return unknown
        unknown += [flag for flag in named.group(1).split() if flag in remaining] or remaining
    return unknown
