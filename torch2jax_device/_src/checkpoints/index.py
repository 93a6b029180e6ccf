"""Checkpoint indexes: ``model.safetensors.index.json`` and its shard files.

An index maps each tensor name to the file holding it (``{"weight_map": {name:
file}}``, as Hugging Face writes them); the files must be next to the index. Nothing
here knows JAX.
"""

from __future__ import annotations

import json
import os
from typing import NamedTuple

from ..errors import CheckpointError
from .format import TensorBudget
from .messages import shown
from .source import PathLike

__all__ = ["Shards", "is_index", "shard_files", "tensor_budget"]


class Shards(NamedTuple):
    """The files of a checkpoint, and the order its tensors are listed in."""

    files: dict[str, list[str] | None]  # file -> its tensor names (None: all of them)
    names: list[str] | None  # an index's names in weight_map order; None for one file


def is_index(path: PathLike) -> bool:
    """Whether ``path`` names an index of shards rather than a checkpoint file."""
    return os.fspath(path).endswith(".json")


def shard_files(path: PathLike) -> Shards:
    """The shard files of an index and their tensors; a single file holds all of its own.

    Raises:
        CheckpointError: the index is unreadable or names a file outside its folder.
    """
    path = os.fspath(path)
    if not is_index(path):
        return Shards({path: None}, None)
    try:
        with open(path, encoding="utf-8") as file:
            index = json.load(file)
        weight_map = index["weight_map"]
        if not isinstance(weight_map, dict) or not all(
            isinstance(name, str) and isinstance(shard, str) for name, shard in weight_map.items()
        ):
            raise TypeError("weight_map must map tensor names to file names")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CheckpointError(
            f"{path!r} is not a checkpoint index like model.safetensors.index.json "
            f'({{"weight_map": {{tensor name: shard file}}}}): {type(err).__name__}: {err}'
        ) from err
    folder = os.path.dirname(path)
    files: dict[str, list[str] | None] = {}
    for name, shard in weight_map.items():
        if os.path.isabs(shard) or os.path.normpath(shard).startswith(os.pardir):
            raise CheckpointError(
                f"{path!r} names shard {shown(shard)} for tensor {shown(name)}, outside the "
                "index's folder; an index may only name files next to it"
            )
        names = files.setdefault(os.path.join(folder, shard), [])
        assert names is not None
        names.append(name)
    return Shards(files, list(weight_map))


def tensor_budget(
    shards: Shards, path: PathLike, max_tensors: int | None, verb: str
) -> TensorBudget:
    """One tensor budget for every file of ``shards`` together (see ``TensorBudget``).

    Raises:
        CheckpointError: ``max_tensors`` is not a non-negative int or ``None``.
        OSError: a file cannot be found, as opening it would raise.
    """
    total = sum(os.path.getsize(file) for file in shards.files)
    what = f"the {len(shards.files)} files {shown(os.fspath(path))} names" if shards.names else ""
    return TensorBudget(max_tensors, total, what=what, verb=verb)
