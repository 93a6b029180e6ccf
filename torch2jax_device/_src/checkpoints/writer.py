"""Write a safetensors file atomically, with every tensor it can align 64-byte aligned.

The layout: the header is padded with spaces (the format allows trailing whitespace) so
the data starts on a 64-byte boundary, then come the tensors whose sizes are multiples
of 64 bytes (which keeps every one of them aligned), then the others, largest first (so
the largest of them is aligned too). Within each group tensors keep safetensors' own
order (dtype rank, then name). ``safetensors`` reads such files like its own; a CPU load
maps them without a copy.

The file is written under a temporary name next to the target, flushed and renamed over
it, both relative to the target's directory held open (``paths``: no link swapped in
after a check can redirect the write). Nothing Python can catch leaves the temporary
behind, and a save that was killed leaves one that the next save of the same target
removes (a live save holds a lock on its own). Nothing here knows JAX.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import (
    CheckpointError,
    CheckpointIsADirectoryError,
    CheckpointNotADirectoryError,
)
from ..interop import ALIGNMENT
from . import paths
from .format import code_of, write_rank

_flock: Callable[[int, int], Any] | None
try:
    import fcntl

    _flock = fcntl.flock
except ImportError:  # Windows: no advisory locks, so stale temporaries are not swept
    _flock = None

__all__ = ["TensorSource", "write_file"]

_TOKEN_CHARS = 12  # hex digits that make a temporary name unique
_SUFFIX = ".tmp"
# What a temporary name adds to the target's: ".", ".", the token and the suffix.
_ADDED = 2 + _TOKEN_CHARS + len(_SUFFIX)
_HASH_CHARS = 16  # a shortened name keeps this much of a hash of the full one
_NAME_MAX = 255  # where the file system does not say


@dataclass(frozen=True)
class TensorSource:
    """A tensor to write: its dtype and shape now, its bytes when ``fetch()`` is called."""

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    fetch: Callable[[], np.ndarray[Any, Any]]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def write_file(
    path: str | os.PathLike[str],
    tensors: Mapping[str, TensorSource],
    metadata: Mapping[str, str] | None,
) -> None:
    """Write a safetensors file atomically: a temporary file in the same directory, renamed.

    Each tensor is fetched just before its bytes are written, so host memory holds one
    tensor at a time. The file is flushed to disk before the rename: the final name
    shows the old file or the complete new one, never a partial write, even across a
    crash. An existing target keeps its permission bits (and, where allowed, its owner);
    a new one gets those the umask leaves. A symbolic link is followed, as ``open()``
    follows it: the file it points to is replaced and the link stays; but not another
    user's link in a sticky, world-writable directory. The path is walked and the file
    written and renamed relative to directories held open (``paths.held``), so no link
    swapped in meanwhile can redirect the write.

    Raises:
        CheckpointError: the target exists and is not a regular file (a device, a FIFO,
            a socket, a symbolic link loop), or the path goes through another user's
            link in a sticky, world-writable directory.
        CheckpointIsADirectoryError: the target is a directory (``IsADirectoryError``, as
            ``torch.save`` raises), or the path ends in a separator and names one
            (``CheckpointNotADirectoryError`` if not).
        OSError: the directory is missing or not writable, the disk is full, ...
    """
    order = _layout(tensors)
    header = _header(order, tensors, metadata)
    user = os.fspath(path)
    if user.endswith(tuple(sep for sep in (os.sep, os.altsep) if sep)):
        kind = CheckpointIsADirectoryError if os.path.isdir(user) else CheckpointNotADirectoryError
        raise kind(
            f"save_file() cannot write {user!r}: a path ending in {user[-1]!r} names a "
            "directory (torch.save and safetensors refuse it too). Fix: name a file",
            user,
        )
    try:
        for _ in range(paths.MAX_LINKS):
            with paths.held(user, "save_file() refuses to write") as place:
                existing = place.status()
                if existing is not None and stat.S_ISLNK(existing.st_mode):
                    continue  # a link appeared after the walk: walk again, checking it
                _check_regular(user, place, existing)
                _write_at(place, existing, header, order, tensors)
                return
        raise OSError(errno.ELOOP, "kept turning into a symbolic link", user)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise CheckpointError(
                f"save_file() refuses to write {user!r}: it is a symbolic link that never "
                "reaches a file (a loop). Fix: remove the link, or save to another path"
            ) from None
        renamed = paths.named(err, user)  # the user's path, never a temporary file's
        if renamed is err:
            raise
        raise renamed from err


def _write_at(
    place: paths.Place,
    existing: os.stat_result | None,
    header: bytes,
    order: list[str],
    tensors: Mapping[str, TensorSource],
) -> None:
    """Write the file under a temporary name in ``place``'s folder and rename it over the
    target there (``os.replace`` never follows a link at the target)."""
    tag = _tag(place.name, _name_max(place))
    _sweep(place, tag)
    # Private while written: an existing target's bits are applied once it is complete.
    with _temporary(place, tag, 0o666 if existing is None else 0o600) as (temporary, file):
        file.write(len(header).to_bytes(8, "little"))
        file.write(header)
        for name in order:
            array = tensors[name].fetch()
            file.write(array.reshape(-1).view(np.uint8).data)
            del array  # gone before the next fetch: one tensor on the host at a time
        file.flush()
        if existing is not None:
            _keep_mode_and_owner(file.fileno(), existing)
        os.fsync(file.fileno())
        target = place.sibling(place.name)
        os.replace(temporary, target, src_dir_fd=place.folder, dst_dir_fd=place.folder)
    _sync_directory(place)


def _layout(tensors: Mapping[str, TensorSource]) -> list[str]:
    """The order to write tensors in: as many as possible start 64-byte aligned."""
    order = sorted(tensors, key=lambda name: (-write_rank(_code(tensors[name])), name))
    aligned = [name for name in order if tensors[name].nbytes % ALIGNMENT == 0]
    others = [name for name in order if tensors[name].nbytes % ALIGNMENT]
    others.sort(key=lambda name: -tensors[name].nbytes)  # stable: ties keep the order
    return aligned + others


def _header(
    order: list[str], tensors: Mapping[str, TensorSource], metadata: Mapping[str, str] | None
) -> bytes:
    """The JSON header, padded with spaces so the data starts 64-byte aligned."""
    entries: dict[str, Any] = {} if metadata is None else {"__metadata__": dict(metadata)}
    offset = 0
    for name in order:
        source = tensors[name]
        entries[name] = {
            "dtype": _code(source),
            "shape": list(source.shape),
            "data_offsets": [offset, offset + source.nbytes],
        }
        offset += source.nbytes
    header = json.dumps(entries, separators=(",", ":"), ensure_ascii=False).encode()
    return header + b" " * (-(8 + len(header)) % ALIGNMENT)


def _check_regular(path: str, place: paths.Place, status: os.stat_result | None) -> None:
    """Refuse a target that exists and is not a regular file."""
    if status is None or stat.S_ISREG(status.st_mode):
        return
    if stat.S_ISDIR(status.st_mode):
        raise CheckpointIsADirectoryError(
            f"save_file() cannot write {path!r}: it is a directory. Fix: name a file in it",
            path,
        )
    kind = paths.kind_of(status.st_mode)
    where = repr(path) if place.shown == os.path.abspath(path) else f"{path!r} (-> {place.shown!r})"
    raise CheckpointError(
        f"save_file() refuses to write {where}: it is {kind}. A save writes a new file and "
        "renames it over the target, which would replace the node itself; save to a "
        "regular file path instead"
    )


def _keep_mode_and_owner(descriptor: int, existing: os.stat_result) -> None:
    if os.name != "posix":
        return
    if (existing.st_uid, existing.st_gid) != (os.geteuid(), os.getegid()):
        with contextlib.suppress(PermissionError):  # only root may give files away
            os.fchown(descriptor, existing.st_uid, existing.st_gid)
    os.fchmod(descriptor, stat.S_IMODE(existing.st_mode))


def _name_max(place: paths.Place) -> int:
    try:
        if place.folder is not None:
            return os.fpathconf(place.folder, "PC_NAME_MAX")
        return os.pathconf(os.path.dirname(place.name), "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # no pathconf (Windows) or no answer
        return _NAME_MAX


def _tag(base: str, name_max: int) -> str:
    """What temporary names for ``base`` start with: ``base``, shortened if too long.

    A shortened tag keeps a hash of ``base``, so targets sharing a long prefix still get
    their own temporaries (and sweep only their own).
    """
    if len(os.fsencode(base)) + _ADDED <= name_max:
        return base
    digest = hashlib.sha256(os.fsencode(base)).hexdigest()[:_HASH_CHARS]
    prefix = base
    while len(os.fsencode(prefix)) + 1 + _HASH_CHARS + _ADDED > name_max:
        prefix = prefix[:-1]
    return f"{prefix}~{digest}"


@contextlib.contextmanager
def _temporary(place: paths.Place, tag: str, mode: int) -> Iterator[tuple[str, Any]]:
    """A new temporary file next to the target, locked while it is written.

    Its name is relative to ``place.folder``. Removed on any failure. The lock tells a
    concurrent sweep that the file is alive.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        temporary = place.sibling(f".{tag}.{secrets.token_hex(_TOKEN_CHARS // 2)}{_SUFFIX}")
        descriptor = os.open(temporary, flags, mode, dir_fd=place.folder)
        if _flock is None:
            break
        _flock(descriptor, fcntl.LOCK_EX)
        if _same_file(place, temporary, descriptor):
            break
        os.close(descriptor)  # a sweep removed it before the lock was taken: start over
    try:
        with open(descriptor, "wb") as file:
            yield temporary, file
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=place.folder)
        raise


def _same_file(place: paths.Place, name: str, descriptor: int) -> bool:
    try:
        named = os.stat(name, dir_fd=place.folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    opened = os.fstat(descriptor)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


def _sweep(place: paths.Place, tag: str) -> None:
    """Remove temporaries of this target left by saves that were killed.

    A save in progress holds an exclusive lock on its temporary; one that nobody locks
    belongs to a dead process. Without ``fcntl`` nothing is removed.
    """
    if _flock is None:
        return
    pattern = re.compile(re.escape(f".{tag}.") + f"[0-9a-f]{{{_TOKEN_CHARS}}}" + re.escape(_SUFFIX))
    try:
        names = [name for name in place.listing() if pattern.fullmatch(name)]
    except OSError:
        return
    for name in names:
        stale = place.sibling(name)
        try:
            # Without blocking: a FIFO planted under a temporary's name (a target in /tmp
            # is predictable) would make open() wait forever for a writer.
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
            descriptor = os.open(stale, flags, dir_fd=place.folder)
        except OSError:
            continue  # gone already, a symbolic link, or not ours to open
        try:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                continue
            try:
                _flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live save holds it
            if _same_file(place, stale, descriptor):
                with contextlib.suppress(OSError):
                    os.unlink(stale, dir_fd=place.folder)
        finally:
            os.close(descriptor)


def _sync_directory(place: paths.Place) -> None:
    """Make the rename itself durable (POSIX); a no-op where directories cannot be opened."""
    if place.folder is not None:
        with contextlib.suppress(OSError):
            os.fsync(place.folder)


def _code(source: TensorSource) -> str:
    code = code_of(source.dtype)
    assert code is not None  # sources are checked when they are made
    return code
