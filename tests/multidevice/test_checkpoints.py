"""Loading onto a chosen device among 4 simulated CPU devices.

The default device (``with tj.device("cpu:2")``) must never move a load off the device
asked for, as ``with torch.device(...)`` never moves ``safetensors.torch.load_file`` or
``torch.load``; and the data must go from the host straight to that device. The
transfer guards prove the second point: an implicit host-to-device transfer
(``jnp.array``) or any device-to-device copy (materializing elsewhere first) fails.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import safetensors.torch
import torch

import torch2jax_device as tj
from tests.support.checkpoints import misaligned_empty
from torch2jax_device import load, load_file, safe_open, save_file
from torch2jax_device._src.checkpoints import transfer

from ..parity.harness import assert_same_outcome, run

CPUS = jax.local_devices(backend="cpu")


@contextlib.contextmanager
def host_to_target_only() -> Iterator[None]:
    with (
        jax.transfer_guard_host_to_device("disallow"),
        jax.transfer_guard_device_to_device("disallow_explicit"),
    ):
        yield


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("weights") / "model.safetensors"
    save_file(
        {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(5, np.float16)}, path
    )
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ckpt") / "ckpt.pt"
    torch.save({"model": {"w": torch.arange(4.0)}, "iter_num": 3}, path)
    return path


def on(device: jax.Device, arrays: Any) -> bool:
    return all(a.committed and a.devices() == {device} for a in arrays)


@pytest.mark.idiom("load-safetensors-default-device")
def test_load_file_stays_on_the_cpu_whatever_the_default_device(weights: Path) -> None:
    def theirs() -> Any:
        with torch.device("meta"):
            return sorted(safetensors.torch.load_file(str(weights)).items())

    def ours() -> Any:
        with tj.device("cpu:2"), host_to_target_only():
            return sorted(load_file(weights).items())

    assert_same_outcome(run(theirs), run(ours))
    assert on(CPUS[0], [array for _, array in ours()])


def test_load_file_goes_straight_to_the_device_asked_for(weights: Path) -> None:
    with tj.device("cpu:2"), host_to_target_only():
        loaded = load_file(weights, device="cpu:1")
    assert on(CPUS[1], loaded.values())
    assert loaded["w"].unsafe_buffer_pointer() % 64 == 0  # aliases the read buffer
    np.testing.assert_array_equal(np.asarray(loaded["w"]), np.arange(12).reshape(3, 4))


def test_safe_open_reads_onto_its_device(weights: Path) -> None:
    with tj.device("cpu:2"), host_to_target_only(), safe_open(weights, device="cpu:3") as f:
        tensor, window = f.get_tensor("w"), f.get_slice("w")[1:, ::2]
    assert on(CPUS[3], [tensor, window])
    assert np.asarray(window).tolist() == [[4.0, 6.0], [8.0, 10.0]]


@pytest.mark.parametrize(
    "map_location, expected",
    [
        (None, 0),  # where it was saved: "cpu", the first CPU device
        ("cpu:2", 2),
        (tj.device("cpu", 3), 3),
        (CPUS[1], 1),
        ({"cpu": "cpu:1"}, 1),
        ({"cuda:0": "cpu:1"}, 0),  # tags it does not list stay where they were saved
        (lambda storage, location: None, 0),
        (lambda storage, location: storage, 0),
    ],
    ids=["none", "string", "tj-device", "jax-device", "dict", "dict-other", "none-fn", "keep-fn"],
)
def test_load_places_torch_checkpoints(checkpoint: Path, map_location: Any, expected: int) -> None:
    with tj.device("cpu:3"):
        loaded = load(checkpoint, map_location=map_location)
    assert on(CPUS[expected], [loaded["model"]["w"]])
    assert loaded["iter_num"] == 3


@pytest.mark.parametrize(
    "map_location, expected", [(None, 0), ("cpu:2", 2), ({"cpu": "cpu:3"}, 3), ({}, 0)]
)
def test_load_places_safetensors_files(weights: Path, map_location: Any, expected: int) -> None:
    with tj.device("cpu:1"), host_to_target_only():
        loaded = load(weights, map_location=map_location)
    assert on(CPUS[expected], loaded.values())


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tokens") / "tokens.safetensors"
    save_file({"tokens": np.arange(2**16, dtype=np.uint16).reshape(256, 256)}, path)
    return path


def test_a_load_onto_another_cpu_device_maps_the_file_too(tokens: Path) -> None:
    with host_to_target_only():
        loaded = load_file(tokens, device="cpu:2")
    array = loaded["tokens"]
    assert on(CPUS[2], [array])
    maps = Path("/proc/self/maps").read_text() if Path("/proc/self/maps").exists() else ""
    ranges = [
        [int(part, 16) for part in line.split()[0].split("-")]
        for line in maps.splitlines()
        if line.endswith(str(tokens))
    ]
    if ranges:
        assert any(low <= array.unsafe_buffer_pointer() < high for low, high in ranges)
    np.testing.assert_array_equal(np.asarray(array), np.arange(2**16).reshape(256, 256))


def test_a_staged_load_sends_pieces_straight_to_the_device(
    tokens: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A device that copies host buffers (simulated by misaligned staging buffers, see
    ``tests/unit/test_checkpoints_staging.py``): pieces go host -> cpu:3 and are assembled
    there; nothing is computed on another device and moved over."""
    monkeypatch.setattr(transfer, "aligned_empty", misaligned_empty)
    transfer.uses_host_memory.cache_clear()
    try:
        with tj.device("cpu:1"), host_to_target_only():
            loaded = load_file(tokens, device="cpu:3", staging_bytes=3 * 4096)
            with safe_open(tokens, device="cpu:2") as f:
                tensor = f.get_tensor("tokens")
    finally:
        transfer.uses_host_memory.cache_clear()
    assert on(CPUS[3], loaded.values()) and on(CPUS[2], [tensor])
    np.testing.assert_array_equal(np.asarray(loaded["tokens"]), np.asarray(tensor))
    np.testing.assert_array_equal(np.asarray(tensor), np.arange(2**16).reshape(256, 256))
