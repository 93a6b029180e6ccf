"""Shared test configuration, and where a new test goes.

Tests live in ``tests/<how it runs>/test_<catalog section>.py``:

* how it runs: ``unit`` (in this process, one CPU device), ``parity`` (side by side with
  PyTorch as the oracle, through ``parity/harness.py``), ``multidevice`` (4 simulated CPU
  devices, in its own pytest process), ``gpu`` (a real CUDA GPU; skipped elsewhere),
  ``cli`` (through the ``torch2jax-device`` command), ``examples`` (a script of
  ``examples/`` as a user runs it) and ``project`` (packaging, imports, test setup);
* the file is named after the catalog section the behaviour belongs to, the same word
  the package, the guide and the benchmarks use: ``devices``, ``availability``,
  ``default_device``, ``creation``, ``placement``, ``startup``, ``memory``,
  ``precision``, ``randomness``, ``kernels``, ``timing``, ``checkpoints``, ``feeding``,
  ``distributed`` (``platforms`` and ``catalog`` for the tables behind them);
  ``test_<section>_<aspect>.py`` when one file would be too long.
  ``cli`` and ``examples`` name the command or script instead; ``project`` names what
  it checks.

Helpers shared by several tests are in ``tests/support/`` (which holds no tests).

Two tiers (``CONTRIBUTING.md``): ``scripts/test.sh --fast`` runs the tests not marked
``slow``, for the edit-test loop; ``scripts/test.sh`` runs everything. A test is ``slow``
when it starts processes: every test in ``cli``, ``examples``, ``project`` and
``multidevice``, and elsewhere every test whose function or fixtures start one, directly
or through the module's helpers (``subprocess``, ``sys.executable``,
``multiprocessing``, DataLoader workers, or the helpers of ``tests/support/distributed``
and ``tests/support/examples``). Mark an in-process test
``@pytest.mark.slow`` by hand when it alone takes seconds (``SLOW_IN_PROCESS`` below
lists those measured so far).

``TORCH2JAX_DEVICE_TEST_PROXY=1`` runs the tests as on a GPU machine, on a CPU: JAX's
default device is a second CPU device standing in for the GPU, while torch's tensors
and ``tj.device("cpu")`` stay on the host's first (``tests/support/gpu_proxy.py``). A
test that compares placements with torch's asks ``gpu_proxy`` where JAX's default is,
and pins the CPU where it means the CPU.

``TORCH2JAX_DEVICE_TEST_REQUIRE`` (comma-separated) names frameworks that must be
importable; ``scripts/test.sh`` sets it so a broken torch install fails the run
instead of skipping every side-by-side test. ``cuda`` in the list requires a CUDA GPU
visible to both torch and JAX (``scripts/gpu-parity.sh``).
"""

from __future__ import annotations

import ast
import functools
import gc
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import hypothesis
import pytest

from tests.support import deadlines, gpu_proxy, optional_frameworks
from tests.support.optional_frameworks import REQUIRE_ENV
from tests.support.xla import quick_compile_flags

# Python's cycle collector: a full pass walks every tracked object, and with torch, JAX
# and flax imported that is about 270,000 of them (their imports alone run ~600 young
# passes and 4 full ones). Young passes run a fourteenth as often here, and what
# collection leaves alive (modules, test functions, parameters) is frozen out of every
# later pass (``pytest_collection_finish``). Measured on the 2-core machine: tests/unit's
# fast tier took 48.8 s of CPU before, 32.4 s after. A test that needs a collection
# still calls ``gc.collect()``, which frees everything the tests made.
gc.set_threshold(10_000, 10, 10)

# XLA's quickest CPU compilation (tests/support/xla.py), before JAX starts; every child
# process inherits it. Not on a GPU run (``cuda`` required), which tests the GPU as users
# run it.
if "cuda" not in os.environ.get(REQUIRE_ENV, "").split(","):
    os.environ["XLA_FLAGS"] = quick_compile_flags(os.environ.get("XLA_FLAGS", ""))

# The GPU machine's placement on a CPU (tests/support/gpu_proxy.py): JAX's default device
# moved off the CPU torch uses, before any test module places an array.
if gpu_proxy.requested():
    gpu_proxy.start()

# PyTorch scripts the scanner reads as text; importing them is not the point.
collect_ignore = ["support/fixtures"]
# --cpu-durations=N: the tests that cost the machine the most CPU, subprocesses included.
pytest_plugins = ["tests.support.cpu_durations"]


# Directories whose tests all start processes (a command, an example, an install, four
# simulated devices); what in a function's source says it starts one; the helper modules
# whose functions start them.
SLOW_DIRECTORIES = ("cli", "examples", "project", "multidevice")
STARTS_PROCESSES = re.compile(
    r"\bsubprocess\b|\bsys\.executable\b|\bmultiprocessing\b|\bnum_workers=[1-9]"
)
PROCESS_HELPERS = ("tests.support.distributed", "tests.support.examples")
# In-process tests that take 2 s of CPU or more each (measured on the 2-core machine,
# 2026-11-26): slow by hand, from here because their files are mid-edit elsewhere.
# Prefer `@pytest.mark.slow` in the test's own file.
SLOW_IN_PROCESS = frozenset(
    {
        "tests/parity/test_checkpoints.py::test_load_puts_tensors_where_they_were_saved",
        "tests/parity/test_devices.py::test_property_parses_like_torch",
        "tests/parity/test_placement.py::test_equinox_module_to_returns_the_moved_module",
        "tests/unit/test_checkpoints.py::test_get_slice_matches_numpy_for_every_basic_index",
        "tests/unit/test_checkpoints_bad_input.py::test_corrupted_valid_files_raise_only_checkpoint_errors",
        "tests/unit/test_checkpoints_bad_input.py::test_fuzzed_headers_raise_only_checkpoint_errors",
        "tests/unit/test_checkpoints_staging.py::test_pieces_assembled_on_a_copying_device_give_the_tensors",
    }
)


@functools.cache
def process_starters(module: Path) -> frozenset[str] | None:
    """The top-level names of a test module that start processes, directly or through
    another such name (``None``: every test of the module does)."""
    tests = Path(__file__).parent
    if not module.is_relative_to(tests) or module.suffix != ".py":
        return frozenset()  # a doctest of the package
    if module.relative_to(tests).parts[0] in SLOW_DIRECTORIES:
        return None
    source = module.read_text(encoding="utf-8")
    tree = ast.parse(source)
    starters: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PROCESS_HELPERS):
            starters.update(alias.asname or alias.name for alias in node.names)
        if isinstance(node, ast.ImportFrom) and node.module == "tests.support":
            starters.update(
                alias.asname or alias.name
                for alias in node.names
                if f"tests.support.{alias.name}".startswith(PROCESS_HELPERS)
            )
    definitions = [  # and classes: a class whose methods start processes starts them
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    ]
    uses = {
        definition.name: {node.id for node in ast.walk(definition) if isinstance(node, ast.Name)}
        for definition in definitions
    }
    lines = source.splitlines()  # once: ast.get_source_segment splits the file per call
    starters.update(
        definition.name
        for definition in definitions
        if STARTS_PROCESSES.search("\n".join(lines[definition.lineno - 1 : definition.end_lineno]))
    )
    while more := {name for name, used in uses.items() if name not in starters and used & starters}:
        starters |= more  # through helpers that call helpers
    return frozenset(starters)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        starters = process_starters(item.path)
        function = getattr(item, "originalname", None)
        if (
            starters is None
            or item.nodeid.split("[")[0] in SLOW_IN_PROCESS
            or (function is not None and {function, *getattr(item, "fixturenames", ())} & starters)
        ):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _restore_default_devices() -> Iterator[None]:
    """Every test starts and ends with no default device set, in torch and in tj."""
    import torch2jax_device as tj

    yield
    tj.set_default_device(None)
    torch = sys.modules.get("torch")  # a test that set torch's default imported torch
    if torch is not None:
        torch.set_default_device(None)


def pytest_configure(config: pytest.Config) -> None:
    # No per-example time limit in property tests: hypothesis's 200 ms deadline is a
    # race with the machine's load (tests/project/test_wall_clock.py).
    hypothesis.settings.register_profile("torch2jax_device", deadline=None)
    hypothesis.settings.load_profile("torch2jax_device")
    # Tests of a framework that is not installed skip (tests/support/optional_frameworks.py),
    # the package's doctests too: a plugin's hooks reach beyond this directory. (Listed in
    # pytest_plugins, the module this file imported would warn that it is not rewritten.)
    if not config.pluginmanager.is_registered(optional_frameworks):
        config.pluginmanager.register(optional_frameworks)
    # A deadline hit is named as one in the summary (tests/support/deadlines.py).
    if not config.pluginmanager.is_registered(deadlines):
        config.pluginmanager.register(deadlines)


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.freeze()  # see gc.set_threshold above
