"""Checkpoint indexes: ``model.safetensors.index.json`` and its shard files.

An index maps each tensor name to the file holding it (``{"weight_map": {name:
file}}``, as Hugging Face writes them); the files must be next to the index. Nothing
here knows JAX.
"""

from __future__ import annotations

import errno
import io
import json
import os
from dataclasses import dataclass, field

from ..distributed.rendezvous import open_file_limit
from ..errors import CheckpointError, CheckpointFileNotFoundError
from . import paths
from .format import TensorBudget
from .messages import LIMIT, clipped, shown
from .source import PathLike, is_index

__all__ = [
    "MAX_INDEX_BYTES",
    "Shards",
    "is_index",
    "not_in_shard",
    "shard_files",
    "tensor_budget",
]

#: The largest index file read: 64 MiB holds the names of millions of tensors (a
#: 405B-parameter model's index is about 100 KB), and parsing one costs about 25 times
#: its size in memory.
MAX_INDEX_BYTES = 64 * 2**20


@dataclass
class Shards:
    """The files of a checkpoint, and the order its tensors are listed in.

    An index's shard files are open already (``opened``), each reached through the
    index's folder held open, so what is read is what was checked. Close it when done.
    """

    files: dict[str, list[str] | None]  # file -> its tensor names (None: all of them)
    names: list[str] | None  # an index's names in weight_map order; None for one file
    opened: dict[str, io.FileIO] = field(default_factory=dict)  # an index's shards

    def __enter__(self) -> Shards:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        for file in self.opened.values():
            file.close()

    def size(self, file: str) -> int:
        handle = self.opened.get(file)
        return os.path.getsize(file) if handle is None else os.fstat(handle.fileno()).st_size


def shard_files(path: PathLike) -> Shards:
    """The shard files of an index and their tensors; a single file holds all of its own.

    The index's folder is opened once and held; the index and every file it names are
    opened through it (``paths``), each shard only as a regular file in the folder (or
    below it), a symbolic link followed only while it stays inside, all checked on the
    open handle. So an index never makes a load read, or quote in an error, a file
    elsewhere, even if links are swapped while it loads.

    Raises:
        CheckpointError: the index is unreadable or larger than ``MAX_INDEX_BYTES``, or
            names something that is not a regular file in its folder (an empty name,
            ``"."``, a directory, a name with a NUL byte, a path or link leading outside
            the folder).
        CheckpointFileNotFoundError: a shard file is missing (a ``FileNotFoundError``, as
            opening it would raise).
    """
    path = os.fspath(path)
    if not is_index(path):
        return Shards({path: None}, None)
    folder_path = os.path.dirname(path)
    folder = paths.open_folder(folder_path)
    shards = Shards({}, None)
    try:
        weight_map = _weight_map(path, folder)
        for name, shard in weight_map.items():
            shard_path = os.path.join(folder_path, shard)
            if shard_path not in shards.files:
                shards.opened[shard_path] = _open_shard(path, folder, shard, name)
                shards.files[shard_path] = []
            names = shards.files[shard_path]
            assert names is not None
            names.append(name)
    except BaseException:
        shards.close()
        raise
    finally:
        os.close(folder)
    shards.names = list(weight_map)
    return shards


def _weight_map(path: str, folder: int) -> dict[str, str]:
    """The index's ``weight_map``, read through its folder's handle, size-capped."""
    try:
        with paths.open_regular(os.path.basename(path), "tj.load cannot read", at=folder) as file:
            text = file.read(MAX_INDEX_BYTES + 1)
        if len(text) > MAX_INDEX_BYTES:
            raise ValueError(
                f"it is larger than {MAX_INDEX_BYTES:,} bytes, the most an index of tensor "
                "names needs"
            )
        index = json.loads(text.decode("utf-8"))
        weight_map = index["weight_map"]
        if not isinstance(weight_map, dict) or not all(
            isinstance(name, str) and isinstance(shard, str) for name, shard in weight_map.items()
        ):
            raise TypeError("weight_map must map tensor names to file names")
    except RecursionError:
        raise CheckpointError(
            f"{path!r} is not a checkpoint index like model.safetensors.index.json: its JSON "
            "is nested too deep to read"
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CheckpointError(
            f"{path!r} is not a checkpoint index like model.safetensors.index.json "
            f'({{"weight_map": {{tensor name: shard file}}}}): {type(err).__name__}: {err}'
        ) from err
    return weight_map


def _open_shard(index: str, folder: int, shard: str, name: str) -> io.FileIO:
    """The shard ``shard``, opened through the index's ``folder``, if it is a regular file
    in it; else the library's error (nothing outside the folder is opened)."""
    problem = None
    if "\0" in shard:
        problem = "contains a NUL byte, which no file name can"
    elif not shard or os.path.normpath(shard) == os.curdir:
        problem = "names no file"
    else:
        try:
            opened = paths.open_regular(shard, "tj.load cannot read", within=folder)
        except paths.LeavesFolder as leaves:
            problem = (
                "is a symbolic link (or goes through one) to a file outside the index's "
                "folder; an index may only name files next to it. Copy the file into the "
                "folder, or load it by its own path"
                if leaves.through_link
                else "is outside the index's folder; an index may only name files next to it"
            )
        except IsADirectoryError:
            problem = "is a directory, not a checkpoint file"
        except FileNotFoundError:  # as opening it would raise, the name cut short
            missing = clipped(os.path.join(os.path.dirname(index), shard), 4 * LIMIT)
            raise CheckpointFileNotFoundError(
                f"[Errno {errno.ENOENT}] No such file or directory: the shard {shown(index)} "
                f"names for tensor {shown(name)}. Fix: an index and its shards must be in "
                f"one folder: copy the missing shard there: {missing!r}",
                missing,
            ) from None
        except CheckpointError:
            problem = "is not a regular file (a device, a FIFO or a socket)"
        except OSError as err:
            if err.errno in (errno.EMFILE, errno.ENFILE):
                raise CheckpointError(
                    f"{index!r} names more shard files than this process may have open at "
                    f"once (at {shown(shard)}: {err.strerror}{open_file_limit()}): a load holds "
                    "every shard of an index open, so that what it reads is what it checked. "
                    "Fix: raise the limit (`ulimit -n` in the shell, or resource.setrlimit("
                    "resource.RLIMIT_NOFILE, ...) in the script) above the number of shards, "
                    "or merge them"
                ) from None
            # A name too long, a loop of links, ...: the library's error, quoting the name
            # cut short (the OSError quoted all of it: 10 MB for a 10 MB name).
            problem = f"cannot be opened ({err.strerror or type(err).__name__})"
        else:
            return opened
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
    total = sum(shards.size(file) for file in shards.files)
    what = f"the {len(shards.files)} files {shown(os.fspath(path))} names" if shards.names else ""
    return TensorBudget(max_tensors, total, what=what, verb=verb)


def not_in_shard(index: str, shard: str, missing: list[str], keys: list[str]) -> CheckpointError:
    """The error for tensors ``missing`` that the index ``index`` lists in ``shard``, which
    holds ``keys`` instead: the index and the shard disagree, whichever is wrong."""
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    return CheckpointError(
        f"{index!r} lists tensor {shown(missing[0])} in shard {shown(shard)}{more}, which "
        f"has no such tensor; it has {len(keys)}: {', '.join(shown(key) for key in keys[:8])}"
        f"{', ...' if len(keys) > 8 else ''}. Fix: an index whose weight_map names, for each "
        "tensor, the shard that holds it; if both came from one place, copy or download "
        "them again (a damaged or mismatched shard reads like this)"
    )
