"""Host memory of loads, measured in a fresh process: maps, staged loads, hostile files.

One interpreter runs every case: for each, it resets its peak resident set size
(``/proc/self/clear_refs``) after the case's warm-up (imports, JAX's start,
compilations, a first load), loads, and reports the peak growth over its resident size
before the load. The figures are bounds, not timings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.deadlines import deadline
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


# The cases, in one interpreter with two CPU devices, each measured after its own warm-up
# (a load of its own, so memory an earlier load freed is there to reuse, as it already is
# after the warm-up) and printed as one JSON line: {case: figures}. The misaligned
# staging buffers of the copying case replace the aligned ones for good, so it runs last.
CASES = """
from torch2jax_device import CheckpointError, load_file, save_file
from torch2jax_device._src.checkpoints import transfer
path, bomb = sys.argv[1], sys.argv[2]
figures = {{}}

small = path + ".small"
save_file({{"tokens": np.arange(8, dtype=np.uint16)}}, small)
loaded, grown = measure(lambda: load_file(path), lambda: load_file(small))
array = loaded["tokens"]
assert array.devices() == {{jax.devices()[0]}}
touched, read = measure(lambda: int(np.asarray(array)[::2048].sum()), lambda: None)
figures["cpu"] = {{"load": grown, "touch": read, "sum": touched}}
del loaded, array
gc.collect()

for backend in ("mmap", "pread"):
    loaded, grown = measure(lambda: load_file(
        path, "cpu:1", backend=backend, staging_bytes={staging}
    ))
    array = loaded["tokens"]
    assert array.devices() == {{jax.devices()[1]}}
    assert int(np.asarray(array)[-1]) == {last}
    figures[backend] = {{"load": grown}}
    del loaded, array
    gc.collect()

def refused():
    try:
        load_file(bomb)
    except CheckpointError as error:
        return str(error)
message, grown = measure(refused)
figures["bomb"] = {{"load": grown, "message": message}}

from tests.support.checkpoints import misaligned_empty
transfer.aligned_empty = misaligned_empty
transfer.uses_host_memory.cache_clear()
load = lambda: load_file(path, "cpu:1", staging_bytes={staging})
loaded, grown = measure(load)
assert not transfer.uses_host_memory(jax.devices()[1])
assert int(np.asarray(loaded["tokens"])[-1]) == {last}
figures["copying"] = {{"load": grown}}
print(json.dumps(figures))
""".format(staging=STAGING_MIB * MIB, last=(FILE_MIB * MIB // 2 - 1) % 2**16)

BOMB_TENSORS = 1_000_000


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file of a million one-byte tensors: a header far larger than its data."""
    path = tmp_path_factory.mktemp("bomb") / "bomb.safetensors"
    entries = ",".join(
        f'"t{i:07d}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{i + 1}]}}'
        for i in range(BOMB_TENSORS)
    )
    header = ("{" + entries + "}").encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header + b"\1" * BOMB_TENSORS)
    return path


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """128 MiB of uint16 tokens in one tensor, written aligned by tj.save_file."""
    path = tmp_path_factory.mktemp("memory") / "tokens.safetensors"
    save_file({"tokens": np.arange(FILE_MIB * MIB // 2, dtype=np.uint16)}, path)
    return path


@pytest.fixture(scope="module")
def figures(tokens: Path, bomb: Path) -> dict[str, dict[str, Any]]:
    """Every case's figures, measured in one fresh process with two CPU devices."""
    result = subprocess.run(
        [sys.executable, "-c", MEASURE + CASES, str(tokens), str(bomb)],
        cwd=Path(__file__).resolve().parents[2],  # where `tests` imports from
        capture_output=True,
        text=True,
        timeout=deadline(300),
        # Blocks of 1 MiB and more come from mmap and go back when freed: glibc otherwise
        # raises its mmap threshold after the first free and keeps freed staging buffers
        # in per-thread arenas, which added up to 24 MiB of reuse misses to the peak (152
        # to 184 MiB for the copying case over runs of the same code; 160 to 166 so).
        env={**os.environ, "JAX_NUM_CPU_DEVICES": "2", "MALLOC_MMAP_THRESHOLD_": str(MIB)},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    measured: dict[str, dict[str, Any]] = json.loads(result.stdout.splitlines()[-1])
    return measured


def test_a_cpu_load_maps_the_file_and_reads_pages_only_when_touched(
    figures: dict[str, dict[str, Any]],
) -> None:
    cpu = figures["cpu"]
    assert cpu["load"] <= 0.05 * FILE_MIB, cpu  # before any access
    assert cpu["touch"] >= 0.9 * FILE_MIB, cpu  # the pages, as they are read
    assert cpu["sum"] == int(np.arange(FILE_MIB * MIB // 2, dtype=np.uint16)[::2048].sum())


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_a_load_onto_a_second_cpu_device_stays_within_file_plus_staging(
    figures: dict[str, dict[str, Any]], backend: str
) -> None:
    assert figures[backend]["load"] <= FILE_MIB + STAGING_MIB + 0.1 * FILE_MIB, figures[backend]


def test_a_device_that_copies_costs_the_staging_budget_on_the_host(
    figures: dict[str, dict[str, Any]],
) -> None:
    """Misaligned staging buffers make the CPU copy them, as a GPU does (see
    ``test_checkpoints_staging.py``). The arrays live in host memory here, and so do the
    pieces in transfer (device memory on a GPU): file + 2 x staging at most."""
    copying = figures["copying"]
    assert copying["load"] <= FILE_MIB + 2 * STAGING_MIB + 0.1 * FILE_MIB, copying


def test_a_file_of_a_million_tiny_tensors_is_refused_within_a_few_times_its_size(
    figures: dict[str, dict[str, Any]], bomb: Path
) -> None:
    size_mib = bomb.stat().st_size / MIB
    limit = tensor_limit(bomb.stat().st_size)
    assert f"holds more than {limit:,} tensors" in str(figures["bomb"]["message"])
    assert figures["bomb"]["load"] <= 3 * size_mib, figures["bomb"]
