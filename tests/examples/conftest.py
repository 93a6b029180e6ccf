"""The examples' runner, shared by the session (``tests/support/examples.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.examples import ExampleRunner


@pytest.fixture(scope="session")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExampleRunner]:
    runner = ExampleRunner(tmp_path_factory.mktemp("examples"))
    yield runner
    runner.close()
