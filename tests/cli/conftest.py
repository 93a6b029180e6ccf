"""Fixtures the command-line tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import excerpts
from tests.support.corpus import ScriptRunner
from tests.support.distributed.launch import worker_env

ROOT = Path(__file__).resolve().parents[2]

# The real code of the fixture folders, rebuilt from its repositories where clones are at
# hand, before any test module lists the fixtures (tests/support/excerpts.py).
for _folder in excerpts.FOLDERS:
    excerpts.materialize(_folder)


@pytest.fixture(scope="session")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScriptRunner]:
    """Runs ``python SCRIPT ARGS`` as a worker would (JAX on the CPU, one thread for
    torch), each script in its own process forked from one that imported torch once."""
    runner = ScriptRunner(
        worker_env(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT)),
        tmp_path_factory.mktemp("script-output"),
    )
    yield runner
    runner.close()
