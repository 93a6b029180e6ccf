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
child it starts has them. An XLA that no longer knows a flag stops at once ("Unknown flag
in XLA_FLAGS"), so a JAX upgrade that drops one shows here.

Level 0 leaves the loops XLA emits unvectorized, which costs where a program moves
gigabytes: ``tests/multidevice`` stages 2**31-element tensors onto a device (a 2 GiB
``zeros`` and a ``dynamic_update_slice`` per piece), and those two tests took 32 s of
CPU at level 0 and 15 s at XLA's default level. That directory compiles at the default
level with the classic emitters (``optimized_loop_flags``); its whole process took 62.7 s
of CPU at level 0 and 52.7 s so, on the 2-core machine.
"""

from __future__ import annotations

UNOPTIMIZED = "--xla_backend_optimization_level=0"
QUICK_COMPILE = f"{UNOPTIMIZED} --xla_cpu_use_fusion_emitters=false"


def quick_compile_flags(flags: str) -> str:
    """``XLA_FLAGS`` value ``flags`` with ``QUICK_COMPILE`` added (once)."""
    return flags if QUICK_COMPILE in flags else f"{flags} {QUICK_COMPILE}".strip()


def optimized_loop_flags(flags: str) -> str:
    """``quick_compile_flags(flags)`` at XLA's default optimization level."""
    return quick_compile_flags(flags).replace(QUICK_COMPILE, QUICK_COMPILE[len(UNOPTIMIZED) :])
