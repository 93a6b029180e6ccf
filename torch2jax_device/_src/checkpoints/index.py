"""Checkpoint indexes: ``model.safetensors.index.json`` and its shard files.

An index maps each tensor name to the file holding it (``{"weight_map": {name:
file}}``, as Hugging Face writes them); the files must be next to the index. Nothing
here knows JAX.
"""

from __future__ import annotations

import json
import os
import stat
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

    Every file the index names is checked before any is opened: it must be a regular
    file in the index's folder (or below it), also once symbolic links are resolved, so
    an index never makes a load read, or quote in an error, a file elsewhere.

    Raises:
        CheckpointError: the index is unreadable, or names something that is not a
            regular file in its folder (an empty name, ``"."``, a directory, a name with
            a NUL byte, a path or link leading outside the folder).
        FileNotFoundError: a shard file is missing, as opening it would raise.
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
        shard_path = os.path.join(folder, shard)
        if shard_path not in files:
            _check_shard(path, folder, shard, name)
        names = files.setdefault(shard_path, [])
        assert names is not None
        names.append(name)
    return Shards(files, list(weight_map))


def _check_shard(index: str, folder: str, shard: str, name: str) -> None:
    """Refuse a shard name that is not a regular file in the index's folder."""
    problem = None
    if "\0" in shard:
        problem = "contains a NUL byte, which no file name can"
    elif not shard or os.path.normpath(shard) == os.curdir:
        problem = "names no file"
    elif os.path.isabs(shard) or os.path.normpath(shard).split(os.sep)[0] == os.pardir:
        problem = "is outside the index's folder; an index may only name files next to it"
    else:
        real_folder = os.path.realpath(folder or os.curdir)
        real = os.path.realpath(os.path.join(folder, shard))
        if os.path.commonpath([real, real_folder]) != real_folder:
            problem = (
                "is a symbolic link (or goes through one) to a file outside the index's "
                "folder; an index may only name files next to it. Copy the file into the "
                "folder, or load it by its own path"
            )
        else:
            try:
                mode = os.stat(real).st_mode
            except FileNotFoundError:
                return  # reported when the load opens it, as for any missing file
            if stat.S_ISDIR(mode):
                problem = "is a directory, not a checkpoint file"
            elif not stat.S_ISREG(mode):
                problem = "is not a regular file (a device, a FIFO or a socket)"
    if problem is not None:
        raise CheckpointError(
            f"{index!r} names shard {shown(shard)} for tensor {shown(name)}, which {problem}"
        )


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
