"""Limits that hold across a whole load: one tensor budget for every file it reads.

``max_tensors`` (or its default, one tensor per 4 KiB of all the files together) caps a
load of an index of shards, a PyTorch checkpoint of many views, and the sharded path,
not each file on its own. The files stay small: the tests lower the limit instead.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import torch

from torch2jax_device import CheckpointError, load, load_file, save_file
from torch2jax_device._src.checkpoints import format

SHARDS, PER_SHARD = 4, 6


def mesh() -> jax.sharding.Mesh:
    return jax.sharding.Mesh(np.array(jax.devices("cpu")[:1]), ("data",))


def _sharded(
    folder: Path, index_name: str, shard_name: str, save: Callable[[list[str], Path], None]
) -> Path:
    """An index of SHARDS shards of PER_SHARD one-element tensors each, each shard written
    by ``save(tensors, path)`` as ``folder/shard_name.format(shard)``."""
    weight_map = {}
    for shard in range(SHARDS):
        names = [f"s{shard}.t{i}" for i in range(PER_SHARD)]
        save(names, folder / shard_name.format(shard))
        weight_map.update(dict.fromkeys(names, shard_name.format(shard)))
    path = folder / index_name
    path.write_text(json.dumps({"weight_map": weight_map}))
    return path


@pytest.fixture
def index(tmp_path: Path) -> Path:
    """An index of 4 shards of 6 one-byte tensors each: 24 tensors in all."""

    def save(names: list[str], path: Path) -> None:
        save_file({name: np.ones(1, np.uint8) for name in names}, path)

    return _sharded(tmp_path, "model.safetensors.index.json", "{}.safetensors", save)


@pytest.fixture
def torch_index(tmp_path: Path) -> Path:
    """The same 24 tensors as PyTorch shards."""

    def save(names: list[str], path: Path) -> None:
        torch.save({name: torch.ones(1) for name in names}, path)

    return _sharded(tmp_path, "pytorch_model.bin.index.json", "{}.bin", save)


@pytest.fixture
def views(tmp_path: Path) -> Path:
    """A PyTorch checkpoint of 50 views of one small storage: 50 arrays from 200 bytes."""
    base = torch.arange(50, dtype=torch.float32)
    path = tmp_path / "views.pt"
    torch.save({"views": [base[i : i + 1] for i in range(50)]}, path)
    return path


def test_max_tensors_caps_an_index_of_shards_not_each_shard(index: Path) -> None:
    assert len(load_file(index, max_tensors=24)) == 24
    assert len(load(index, max_tensors=24)) == 24
    expected = r"3.safetensors' holds 6 tensors after 18 in the files this load read before it"
    for read in (
        lambda: load_file(index, max_tensors=23),
        lambda: load(index, max_tensors=23),
        lambda: load_file(index, device=mesh(), max_tensors=23),
        lambda: load(index, map_location=mesh(), max_tensors=23),
    ):
        with pytest.raises(CheckpointError, match=expected + "; max_tensors=23 allows no more"):
            read()


def test_the_default_limit_counts_every_file_of_an_index(
    index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(format, "MIN_TENSOR_LIMIT", 10)  # each shard alone is within it
    assert all(len(load_file(index.parent / f"{i}.safetensors")) == 6 for i in range(SHARDS))
    with pytest.raises(
        CheckpointError,
        match=r"1.safetensors' holds more than 4 tensors after 6 in the files.*10 is the most "
        r"read by default from the [\d,]+ bytes of the 4 files '.*index.json' names",
    ):
        load_file(index)
    with pytest.raises(CheckpointError, match=r"pass a larger max_tensors= to tj\.load to read"):
        load(index)


def test_max_tensors_caps_an_index_of_torch_shards(torch_index: Path) -> None:
    assert len(load(torch_index, max_tensors=24)) == 24
    with pytest.raises(CheckpointError, match=r"3.bin' holds more than 5 tensors after 18"):
        load(torch_index, max_tensors=23)
    with pytest.raises(CheckpointError, match=r"3.bin' holds more than 5 tensors after 18"):
        load(torch_index, map_location=mesh(), max_tensors=23)


def test_every_view_of_a_torch_checkpoint_counts(
    views: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert len(load(views, max_tensors=50)["views"]) == 50
    for read in (
        lambda: load(views, max_tensors=49),
        lambda: load(views, map_location=mesh(), max_tensors=49),
    ):
        with pytest.raises(
            CheckpointError,
            match=r"views.pt' holds more than 49 tensors; max_tensors=49 allows no more\. If "
            "you trust the file, pass a larger max_tensors= to tj.load to read it",
        ):
            read()
    monkeypatch.setattr(format, "MIN_TENSOR_LIMIT", 20)
    with pytest.raises(CheckpointError, match=r"20 is the most read by default from a [\d,]+-byte"):
        load(views)
    with open(views, "rb") as file:  # a file object too
        with pytest.raises(CheckpointError, match="holds more than 20 tensors"):
            load(file)


def test_tj_load_checks_max_tensors(views: Path) -> None:
    with pytest.raises(CheckpointError, match=r"max_tensors=-1: give the most tensors"):
        load(views, max_tensors=-1)
    with pytest.raises(CheckpointError, match=r"max_tensors='9': give the most tensors"):
        load(views, max_tensors="9")  # type: ignore[arg-type]


# ------------------------------------------------------------ header bombs and quotes


def craft(path: Path, header: str, data: bytes = b"") -> Path:
    raw = header.encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)
    return path


def peak_bytes(read: Callable[[], Any]) -> tuple[int, BaseException | None]:
    """The most Python memory ``read()`` held at once, and what it raised."""
    tracemalloc.start()
    try:
        read()
        raised = None
    except BaseException as err:
        raised = err
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak, raised


@pytest.mark.parametrize(
    "header",
    [
        pytest.param("[" + "[]," * 1_000_000 + "[]]", id="top-level"),
        pytest.param(
            '{"w": {"dtype": "F32", "shape": ['
            + "[]," * 1_000_000
            + '[]], "data_offsets": [0, 0]}}',
            id="in-a-shape",
        ),
        pytest.param('{"w": ' + "[" * 1_000_000 + "]" * 1_000_000 + "}", id="deep"),
    ],
)
def test_a_header_of_many_empty_lists_is_refused_before_it_is_parsed(
    tmp_path: Path, header: str
) -> None:
    path = craft(tmp_path / "bomb.safetensors", header)
    size = path.stat().st_size
    peak, raised = peak_bytes(lambda: load_file(path))
    assert isinstance(raised, CheckpointError), raised
    assert (
        "holds more than 16,384 tensors (or is not a safetensors file): its header opens "
        "more than 49,157 JSON arrays and objects" in str(raised)
    )
    assert len(str(raised)) < 1000
    # The header's bytes, then its text: never the millions of lists it describes.
    assert peak < 3 * size, (peak, size)


def test_brackets_inside_strings_do_not_count(tmp_path: Path) -> None:
    name = "layers[0]" + "[{" * 1000
    path = tmp_path / "brackets.safetensors"
    save_file({name: np.ones(4, np.float32)}, path, {"config": json.dumps([[{}]] * 1000)})
    assert list(load_file(path, max_tensors=1)) == [name]


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ({"dtype": "F32", "shape": [[]] * 40_000, "data_offsets": [0, 0]}, "the shape of"),
        ({"dtype": "F32", "shape": [0], "data_offsets": [[0]] * 40_000}, "the data_offsets of"),
        ({"dtype": "X" * 10**6, "shape": [0], "data_offsets": [0, 0]}, "unknown dtype"),
        ({"dtype": ["F32"] * 40_000, "shape": [0], "data_offsets": [0, 0]}, "the dtype of"),
        ({"dtype": "F32", "shape": [0, *[10**6] * 60], "data_offsets": [0, 0]}, "too large"),
        ({"dtype": "F32", "shape": [10**6] * 60, "data_offsets": [0, 0]}, "need 4000"),
    ],
)
def test_every_quoted_value_is_short(tmp_path: Path, entry: dict[str, Any], match: str) -> None:
    path = craft(tmp_path / "long.safetensors", json.dumps({"n" * 10**6: entry}))
    with pytest.raises(CheckpointError, match=match) as caught:
        load_file(path)
    assert len(str(caught.value)) < 1000, len(str(caught.value))


def test_a_long_name_in_a_layout_error_is_short(tmp_path: Path) -> None:
    header = {
        "a" * 10**6: {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
        "b" * 10**6: {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]},
    }
    path = craft(tmp_path / "overlap.safetensors", json.dumps(header), b"\0" * 3)
    with pytest.raises(CheckpointError, match="overlaps") as caught:
        load_file(path)
    assert len(str(caught.value)) < 1000
    duplicate = '{"' + "d" * 10**6 + '": 1, "' + "d" * 10**6 + '": 2}'
    with pytest.raises(CheckpointError, match="twice") as caught:
        load_file(craft(tmp_path / "twice.safetensors", duplicate))
    assert len(str(caught.value)) < 1000


def test_a_deep_path_in_a_torch_checkpoint_is_short(tmp_path: Path) -> None:
    root: dict[str, Any] = {}
    node = root
    for depth in range(300):
        node[f"level{depth}"] = node = {}
    node["meta"] = torch.empty(2, device="meta")
    path = tmp_path / "deep.pt"
    torch.save(root, path)
    with pytest.raises(CheckpointError, match=r"\['level0'\].*<289 more>.*\['meta'\]") as caught:
        load(path)
    assert len(str(caught.value)) < 1000
