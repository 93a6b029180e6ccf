"""Files named by a path, opened without a race between a check and its use.

The one rule every file the library reads or writes by name follows: the path is
walked one component at a time, each opened relative to a directory the walk already
holds open (``os.open(part, O_DIRECTORY | O_NOFOLLOW, dir_fd=...)``); a symbolic link
is read (``os.readlink(part, dir_fd=...)``) and checked by the walk itself before it is
followed; the file at the end is then used once, relative to the last directory: opened
with ``O_NOFOLLOW`` (and asked what it is on the open handle, ``os.fstat``) or renamed
over (``os.replace(..., src_dir_fd=..., dst_dir_fd=...)``, which never follows a link at
the target). Nothing is checked by name and then used by name again, so no other
process can swap a link in between: a link that appears after the walk makes the open
fail (``ELOOP``) and the walk start again, and one that appears before it is checked.

Two link policies:

- a path the caller gave (``held``, ``open_regular``): links are followed as the kernel
  follows them for ``open()`` with ``fs.protected_symlinks``: not another user's link in
  a sticky, world-writable directory (``/tmp``), unless that directory's owner owns it;
- a name inside a folder the library holds (``within=``: an index's shard names): links
  are followed only while they stay inside the folder; an absolute target or a ``..``
  above it raises ``LeavesFolder``, before anything outside is opened.

Where the platform cannot open relative to a directory (Windows), paths are used as they
are. Nothing here knows JAX.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import (
    ArgumentTypeError,
    CheckpointError,
    CheckpointFileNotFoundError,
    CheckpointIsADirectoryError,
    CheckpointNotADirectoryError,
)
from .messages import shown

__all__ = [
    "LeavesFolder",
    "Place",
    "by_handle",
    "checked_path",
    "held",
    "kind_of",
    "named",
    "open_folder",
    "open_regular",
]

#: The links one path may go through, as Linux allows (and the walks one open retries).
MAX_LINKS = 40
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC
#: Whether paths can be walked through held directories here (POSIX).
RELATIVE = (
    os.name == "posix"
    and bool(_NOFOLLOW)
    and {os.open, os.stat, os.readlink, os.rename, os.unlink} <= os.supports_dir_fd
)


#: The library's error for each ``open()`` failure torch's users catch by class.
_PATH_ERRORS = {
    errno.ENOENT: (CheckpointFileNotFoundError, "check the path (is it spelled right, relative "
                   "to the current directory?)"),
    errno.EISDIR: (CheckpointIsADirectoryError, "name a file in it (the path is a directory)"),
    errno.ENOTDIR: (CheckpointNotADirectoryError, "a part of the path that should be a "
                    "directory is a file, or a path ending in a separator names no directory"),
}  # fmt: skip


def named(err: OSError, path: str) -> OSError:
    """``err`` naming ``path`` (the caller's, never a component of it): the library's
    error that is also the builtin class (``FileNotFoundError``, ``IsADirectoryError``,
    ``NotADirectoryError``) with the fix, else an ``OSError`` of ``err``'s class (``err``
    itself where it names ``path`` or nothing, or is the library's already)."""
    if isinstance(err, CheckpointError):
        return err
    kind = _PATH_ERRORS.get(err.errno or 0)
    if kind is None:
        if err.filename in (None, path):
            return err
        return type(err)(err.errno, err.strerror, path)
    cls, fix = kind
    reason = err.strerror or os.strerror(cls._errno)
    return cls(f"[Errno {cls._errno}] {reason}: {shown(path)}. Fix: {fix}", path)


def checked_path(function: str, path: object) -> str:
    """``path`` as a ``str`` (a ``bytes`` path decoded), or the library's error naming it.

    Raises:
        ArgumentTypeError: not a str, bytes or os.PathLike (``open()``'s TypeError).
        CheckpointError: it holds a NUL byte, which no file name can.
    """
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise ArgumentTypeError(
            f"{function}: the path must be a str or os.PathLike, not {type(path).__name__} "
            f"{shown(path)}. Fix: pass the file's path"
        )
    text = os.fsdecode(os.fspath(path))
    if "\0" in text:
        raise CheckpointError(
            f"{function}: the path {shown(path)} ({type(path).__name__}) holds a NUL byte, "
            "which no file name can. "
            "Fix: pass the file's path"
        )
    return text


class LeavesFolder(Exception):
    """A name inside a held folder leads out of it (an absolute path, ``..``, a link)."""

    def __init__(self, through_link: bool) -> None:
        super().__init__("leaves the folder")
        self.through_link = through_link


@dataclass
class Place:
    """Where a path leads: a directory held open (``folder``) and a name in it.

    ``name`` is never a symbolic link when the walk ended (it may be missing). ``shown``
    is the path it resolved to, for messages. ``folder`` is ``None`` where directories
    cannot be held: then ``name`` is a whole path.
    """

    folder: int | None
    name: str
    shown: str

    def status(self) -> os.stat_result | None:
        """What ``name`` is now, not following a link (``None``: missing)."""
        try:
            return os.stat(self.name, dir_fd=self.folder, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def sibling(self, name: str) -> str:
        """``name`` next to the target, as the ``os`` calls taking ``dir_fd=folder`` want it."""
        if self.folder is None:
            return os.path.join(os.path.dirname(self.name), name)
        return name

    def listing(self) -> list[str]:
        """The names in the target's directory."""
        return os.listdir(self.folder if self.folder is not None else os.path.dirname(self.name))


@contextlib.contextmanager
def held(
    path: str, verb: str, *, within: int | None = None, at: int | None = None
) -> Iterator[Place]:
    """Walk ``path`` (see the module's rule) and hold the directory it ends in.

    A relative ``path`` starts at the held directory ``within`` (and may not leave it)
    or ``at`` (and may), else at the current directory. ``verb`` starts the message of a
    refused link, e.g. ``"save_file() refuses to write"``.

    Raises:
        CheckpointError: the path goes through another user's link in a sticky,
            world-writable directory.
        LeavesFolder: with ``within``, the name leads outside that folder.
        OSError: a directory on the way is missing or not one, a link loop (``ELOOP``);
            the error names ``path``.
    """
    path = os.fsdecode(path)  # a bytes path too, as every loader takes it
    if not RELATIVE:
        yield Place(None, os.path.realpath(path), os.path.realpath(path))
        return
    try:
        folder, name, where = _walk(path, within, at, verb)
    except OSError as err:  # name the path the caller gave, not a component of it
        raise named(err, path) from None
    try:
        yield Place(folder, name, where)
    finally:
        os.close(folder)


def open_folder(path: str) -> int:
    """A handle on the directory ``path`` (``""``: the current one), links followed as
    ``open()`` follows them. The caller closes it.

    Raises:
        OSError: missing, not a directory, not readable.
    """
    return os.open(path or os.curdir, _DIRECTORY)


def open_regular(
    path: str, verb: str, *, within: int | None = None, at: int | None = None
) -> io.FileIO:
    """``path`` opened for reading, once, after checking on the handle that it is a file.

    Opened without blocking, so a FIFO is refused rather than waited on.

    Raises:
        IsADirectoryError: it is a directory, as ``open()`` raises.
        CheckpointError: it is a device, a FIFO or a socket; or a link refused as for
            ``held``.
        LeavesFolder: with ``within``, as ``held`` (``at``: as there).
        OSError: missing, unreadable, a link loop.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | _CLOEXEC | _NOFOLLOW
    for _ in range(MAX_LINKS):
        with held(path, verb, within=within, at=at) as place:
            try:
                descriptor = os.open(place.name, flags, dir_fd=place.folder)
            except OSError as err:
                if err.errno == errno.ELOOP and RELATIVE:
                    continue  # a link appeared after the walk: walk again, checking it
                raise named(err, path) from None
        try:
            mode = os.fstat(descriptor).st_mode
            if stat.S_ISDIR(mode):
                raise named(IsADirectoryError(errno.EISDIR, "Is a directory"), path)
            if not stat.S_ISREG(mode):
                raise CheckpointError(
                    f"{verb} {shown(path)}: it is {kind_of(mode)}, not a file; give the path "
                    "of a checkpoint file"
                )
            if hasattr(os, "set_blocking"):
                os.set_blocking(descriptor, True)
            return io.FileIO(descriptor, "rb")
        except BaseException:
            os.close(descriptor)
            raise
    raise OSError(errno.ELOOP, "kept turning into a symbolic link while opened", path)


def by_handle(file: io.FileIO, path: str) -> str:
    """A name that opens the very file ``file`` holds, for a library that takes only
    names (``torch.load(mmap=True)``): ``/proc/self/fd/N`` where there is one (Linux),
    else ``path`` itself."""
    handle = f"/proc/self/fd/{file.fileno()}"
    return handle if RELATIVE and os.path.exists(handle) else path


def kind_of(mode: int) -> str:
    """What a file that is not regular is, for messages."""
    return {
        stat.S_IFDIR: "a directory",
        stat.S_IFCHR: "a character device",
        stat.S_IFBLK: "a block device",
        stat.S_IFIFO: "a FIFO",
        stat.S_IFSOCK: "a socket",
        stat.S_IFLNK: "a symbolic link",
    }.get(stat.S_IFMT(mode), "not a regular file")


def _walk(path: str, within: int | None, at: int | None, verb: str) -> tuple[int, str, str]:
    """The held directory ``path`` ends in, the last name, and the path shown for it."""
    if within is not None:
        folder, where = os.dup(within), ""
        if os.path.isabs(path):
            raise LeavesFolder(through_link=False)
    elif at is not None and not os.path.isabs(path):
        folder, where = os.dup(at), ""
    elif os.path.isabs(path):
        folder, where = os.open(os.sep, _DIRECTORY), os.sep
    else:
        folder, where = os.open(os.curdir, _DIRECTORY), os.path.abspath(os.curdir)
    depth = 0  # directories below ``within``
    pending = path.split(os.sep)
    turns = 0  # links followed, and retries of a name that changed under the walk
    try:
        while pending:
            part = pending.pop(0)
            if part in ("", os.curdir):
                continue
            if part == os.pardir:
                if within is not None and depth == 0:
                    raise LeavesFolder(through_link=turns > 0)
                parent = os.open(os.pardir, _DIRECTORY, dir_fd=folder)
                os.close(folder)
                folder, where, depth = parent, os.path.dirname(where), depth - 1
                continue
            last = all(rest in ("", os.curdir) for rest in pending)
            if last:
                status = _lstat(part, folder)
                if status is None or not stat.S_ISLNK(status.st_mode):
                    return folder, part, os.path.join(where, part)
            else:
                try:
                    child = os.open(part, _DIRECTORY | _NOFOLLOW, dir_fd=folder)
                except OSError as err:
                    if err.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    status = _lstat(part, folder)
                    if status is None or not (
                        stat.S_ISLNK(status.st_mode) or stat.S_ISDIR(status.st_mode)
                    ):
                        raise
                else:
                    os.close(folder)
                    folder, where, depth = child, os.path.join(where, part), depth + 1
                    continue
            # A link (or a name that changed under the walk): read it, check it, follow it.
            turns += 1
            if turns > MAX_LINKS:
                raise OSError(errno.ELOOP, "Too many levels of symbolic links")
            if not stat.S_ISLNK(status.st_mode):
                pending.insert(0, part)  # a directory again: open it again
                continue
            if within is None:
                _check_trusted(path, folder, where, part, status, verb)
            try:
                target = os.readlink(part, dir_fd=folder)
            except OSError as err:
                if err.errno not in (errno.EINVAL, errno.ENOENT):
                    raise
                pending.insert(0, part)  # no longer a link: look again
                continue
            again = _lstat(part, folder)
            if again is None or (again.st_dev, again.st_ino) != (status.st_dev, status.st_ino):
                pending.insert(0, part)  # swapped while read: look again
                continue
            if os.path.isabs(target):
                if within is not None:
                    raise LeavesFolder(through_link=True)
                root = os.open(os.sep, _DIRECTORY)
                os.close(folder)
                folder, where, depth = root, os.sep, 0
            pending[:0] = target.split(os.sep)
        # Only "", "." and ".." parts: the path is the directory held now.
        return folder, os.curdir, where
    except BaseException:
        os.close(folder)
        raise


def _lstat(name: str, folder: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _check_trusted(
    path: str, folder: int, where: str, part: str, link: os.stat_result, verb: str
) -> None:
    """Refuse a link the kernel's ``fs.protected_symlinks`` would not follow for ``open()``.

    A link is followed only if it is ours, or its directory's owner owns it too, or its
    directory is not both sticky and world-writable: in ``/tmp`` another user's link,
    planted at a predictable name, would otherwise make a root job overwrite any file.
    """
    directory = os.fstat(folder)
    sticky_and_shared = directory.st_mode & stat.S_ISVTX and directory.st_mode & stat.S_IWOTH
    if sticky_and_shared and link.st_uid not in (os.geteuid(), directory.st_uid):
        raise CheckpointError(
            f"{verb} {shown(path)}: it goes through the symbolic link "
            f"{shown(os.path.join(where, part))}, owned by uid {link.st_uid}, in the sticky, "
            f"world-writable directory {shown(where)}: another user could point such a link "
            "at any file, and the kernel's fs.protected_symlinks refuses to follow it for "
            "open() too. Fix: use a directory only you can write (or remove the link)"
        )
