"""Host memory of loads, measured in fresh processes: maps, staged loads, hostile files.

Each case runs in its own interpreter, which resets its peak resident set size
(``/proc/self/clear_refs``) after its imports and warm-up, loads, and reports the peak
growth over its resident size before the load. The figures are bounds, not timings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from torch2jax_device import save_file
from torch2jax_device._src.checkpoints.format import tensor_limit

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="measures peaks through Linux /proc"
)

MIB = 2**20
FILE_MIB = 128
STAGING_MIB = 24

MEASURE = """
import gc, json, os, sys
import jax, numpy as np

def kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])

def measure(load, warm_up=None):
    (warm_up or load)()  # imports, JAX's start, compilations: not the load's memory
    gc.collect()
    before = kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as file:
        file.write("5")  # the peak starts again from here
    result = load()
    return result, (kib("VmHWM") - before) / 1024
"""


def run(script: str, devices: int = 1) -> dict[str, float]:
    environment = {**os.environ, "JAX_NUM_CPU_DEVICES": str(devices)}
    result = subprocess.run(
        [sys.executable, "-c", MEASURE + textwrap.dedent(script)],
        cwd=Path(__file__).resolve().parents[2],  # where `tests` imports from
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    figures: dict[str, float] = json.loads(result.stdout.splitlines()[-1])
    return figures


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """128 MiB of uint16 tokens in one tensor, written aligned by tj.save_file."""
    path = tmp_path_factory.mktemp("memory") / "tokens.safetensors"
    save_file({"tokens": np.arange(FILE_MIB * MIB // 2, dtype=np.uint16)}, path)
    return path


def test_a_cpu_load_maps_the_file_and_reads_pages_only_when_touched(tokens: Path) -> None:
    figures = run(f"""
        from torch2jax_device import load_file
        path = {str(tokens)!r}
        small = path + ".small"
        from torch2jax_device import save_file
        save_file({{"tokens": np.arange(8, dtype=np.uint16)}}, small)
        loaded, grown = measure(lambda: load_file(path), lambda: load_file(small))
        array = loaded["tokens"]
        touched, read = measure(lambda: int(np.asarray(array)[::2048].sum()), lambda: None)
        print(json.dumps({{"load": grown, "touch": read, "sum": touched}}))
    """)
    assert figures["load"] <= 0.05 * FILE_MIB, figures  # before any access
    assert figures["touch"] >= 0.9 * FILE_MIB, figures  # the pages, as they are read
    assert figures["sum"] == int(np.arange(FILE_MIB * MIB // 2, dtype=np.uint16)[::2048].sum())


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_a_load_onto_a_second_cpu_device_stays_within_file_plus_staging(
    tokens: Path, backend: str
) -> None:
    figures = run(
        f"""
        from torch2jax_device import load_file
        loaded, grown = measure(lambda: load_file(
            {str(tokens)!r}, "cpu:1", backend={backend!r}, staging_bytes={STAGING_MIB * MIB}
        ))
        array = loaded["tokens"]
        assert array.devices() == {{jax.devices()[1]}}
        assert int(np.asarray(array)[-1]) == {FILE_MIB * MIB // 2 - 1} % 2**16
        print(json.dumps({{"load": grown}}))
        """,
        devices=2,
    )
    assert figures["load"] <= FILE_MIB + STAGING_MIB + 0.1 * FILE_MIB, figures


def test_a_device_that_copies_costs_the_staging_budget_on_the_host(tokens: Path) -> None:
    """Misaligned staging buffers make the CPU copy them, as a GPU does (see
    ``test_checkpoints_staging.py``). The arrays live in host memory here, and so do the
    pieces in transfer (device memory on a GPU): file + 2 x staging at most."""
    figures = run(
        f"""
        from tests.support.checkpoints import misaligned_empty
        from torch2jax_device import load_file
        from torch2jax_device._src.checkpoints import transfer

        transfer.aligned_empty = misaligned_empty
        load = lambda: load_file({str(tokens)!r}, "cpu:1", staging_bytes={STAGING_MIB * MIB})
        loaded, grown = measure(load)
        assert not transfer.uses_host_memory(jax.devices()[1])
        assert int(np.asarray(loaded["tokens"])[-1]) == {FILE_MIB * MIB // 2 - 1} % 2**16
        print(json.dumps({{"load": grown}}))
        """,
        devices=2,
    )
    assert figures["load"] <= FILE_MIB + 2 * STAGING_MIB + 0.1 * FILE_MIB, figures


def test_a_file_of_a_million_tiny_tensors_is_refused_within_a_few_times_its_size(
    tmp_path: Path,
) -> None:
    count = 1_000_000
    path = tmp_path / "bomb.safetensors"
    entries = ",".join(
        f'"t{i:07d}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{i + 1}]}}'
        for i in range(count)
    )
    header = ("{" + entries + "}").encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header + b"\1" * count)
    size_mib = path.stat().st_size / MIB
    figures = run(f"""
        from torch2jax_device import CheckpointError, load_file
        def refused():
            try:
                load_file({str(path)!r})
            except CheckpointError as error:
                return str(error)
        message, grown = measure(refused)
        print(json.dumps({{"load": grown, "message": message}}))
    """)
    limit = tensor_limit(path.stat().st_size)
    assert f"holds more than {limit:,} tensors" in str(figures["message"])
    assert figures["load"] <= 3 * size_mib, figures
