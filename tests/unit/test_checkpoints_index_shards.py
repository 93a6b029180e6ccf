"""An index's shards as the index assigns them: each tensor from the shard the index
names for it, whatever else the shards hold, and an index of more shards than the
process may open is the library's error (issue 36, the round's own attack pass)."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import torch2jax_device as tj
from torch2jax_device._src.checkpoints import paths


def _index(folder: Path, seed: int) -> tuple[Path, dict[str, str]]:
    """A random index of .pt and .safetensors shards, each shard also holding stale copies
    (other values) of tensors the index assigns to another shard, and tensors it names
    nowhere. Returns the index and its weight_map."""
    rng = np.random.default_rng(seed)
    shards = [f"part-{i}.{rng.choice(['pt', 'safetensors'])}" for i in range(rng.integers(2, 5))]
    names = [f"layer{i}.weight" for i in range(rng.integers(3, 9))]
    weight_map = {name: str(rng.choice(shards)) for name in names}
    for shard in shards:
        held = {
            name: rng.standard_normal(int(rng.integers(1, 5))).astype(np.float32)
            for name in names
            if weight_map[name] == shard or rng.random() < 0.5  # a stale copy
        }
        held[f"unlisted.{shard}"] = np.zeros(2, np.float32)
        if shard.endswith(".pt"):
            torch.save({k: torch.from_numpy(v) for k, v in held.items()}, folder / shard)
        else:
            tj.save_file(held, folder / shard)
    index = folder / "model.index.json"
    index.write_text(json.dumps({"weight_map": weight_map}))
    return index, weight_map


def _from_shard(folder: Path, shard: str, name: str) -> np.ndarray:
    """The oracle: tensor ``name`` as torch / safetensors read it from ``shard`` alone."""
    if shard.endswith(".pt"):
        return torch.load(folder / shard, weights_only=True)[name].numpy()
    import safetensors.numpy

    return safetensors.numpy.load_file(folder / shard)[name]


@pytest.mark.parametrize("seed", range(6))
def test_each_tensor_comes_from_the_shard_the_index_names(tmp_path: Path, seed: int) -> None:
    # Before: tj.load joined whole .pt shards in file order, so a stale copy in a later
    # shard replaced the tensor the index names, and tensors it lists nowhere came too.
    index, weight_map = _index(tmp_path, seed)
    loaded = tj.load(index)
    assert list(loaded) == list(weight_map)
    for name, shard in weight_map.items():
        np.testing.assert_array_equal(np.asarray(loaded[name]), _from_shard(tmp_path, shard, name))


def test_a_name_the_index_lists_that_its_pt_shard_lacks_is_refused(tmp_path: Path) -> None:
    # Before: the missing tensor was left out with no error (a safetensors shard refuses it).
    torch.save({"w": torch.ones(2)}, tmp_path / "a.pt")
    index = tmp_path / "pytorch_model.bin.index.json"
    index.write_text(json.dumps({"weight_map": {"w": "a.pt", "b": "a.pt"}}))
    with pytest.raises(tj.CheckpointError, match=r"lists tensor 'b' in shard .*a\.pt', which has"):
        tj.load(index)


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE])
def test_more_shards_than_open_files_is_the_librarys_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    # Before: a raw OSError "Too many open files" (measured: 300 shards under a limit of
    # 200 open files). The limit is simulated: the third shard cannot be opened.
    weight_map = {}
    for i in range(4):
        tj.save_file({f"t{i}": np.ones(1, np.float32)}, tmp_path / f"s{i}.safetensors")
        weight_map[f"t{i}"] = f"s{i}.safetensors"
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": weight_map}))
    opened = paths.open_regular

    def open_two(name: str, *args: object, **kwargs: object) -> object:
        if name == "s2.safetensors":
            raise OSError(code, "Too many open files")
        return opened(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(paths, "open_regular", open_two)
    for load in (tj.load_file, tj.load):
        with pytest.raises(tj.CheckpointError) as caught:
            load(index)
        message = str(caught.value)
        assert "names more shard files than this process may have open at once" in message
        assert "'s2.safetensors'" in message and "Fix: raise the limit (`ulimit -n`" in message


def test_a_missing_shard_names_the_index_and_the_tensor(tmp_path: Path) -> None:
    # Before: Python's bare "No such file or directory: '.../nope.safetensors'", which
    # named neither the index that listed it nor a tensor that needed it.
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"lm_head.weight": "nope.safetensors"}}))
    for load in (tj.load_file, tj.load):
        with pytest.raises(FileNotFoundError) as caught:
            load(index)
        message = str(caught.value)
        assert "model.safetensors.index.json" in message and "'lm_head.weight'" in message
        assert "copy the missing shard there" in message and "nope.safetensors" in message


@pytest.mark.parametrize(
    ("shard", "error", "says"),
    [
        ("a" * 10_000_000, tj.CheckpointError, "cannot be opened (File name too long)"),
        ("loop", tj.CheckpointError, "cannot be opened (Too many levels of symbolic links)"),
        ("loop/" * 2_000_000 + "x", tj.CheckpointError, "Too many levels of symbolic links"),
        ("nosuch/" * 1_000_000 + "x", FileNotFoundError, "No such file or directory"),
    ],
    ids=["10-MB-name", "link-loop", "4-MB-path-through-a-loop", "7-MB-missing-path"],
)
def test_a_shard_name_that_cannot_be_opened_gets_a_short_error(
    tmp_path: Path, shard: str, error: type[Exception], says: str
) -> None:
    # Before: a raw OSError quoting the whole name (10,000,033 characters for a 10 MB
    # name), and a FileNotFoundError of 7 MB for a long missing path.
    (tmp_path / "loop").symlink_to("loop")
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"w": shard}}))
    for load in (tj.load_file, tj.load):
        with pytest.raises(error) as caught:
            load(index)
        assert says in str(caught.value) and len(str(caught.value)) < 1200
