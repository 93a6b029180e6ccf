"""``save_file`` as a careful writer: modes, temporaries, long names, odd targets, kills.

Comparisons with ``torch.save`` (which writes in place, through ``open()``) live in
``tests/parity/test_checkpoints.py``; here the oracle is what ``open()`` does.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support.deadlines import MARK, DeadlineHit, deadline
from torch2jax_device import CheckpointError, CheckpointIsADirectoryError, load_file, save_file
from torch2jax_device._src.checkpoints import writer

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX modes, links and locks")
W = {"w": np.arange(16, dtype=np.float32)}


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@contextlib.contextmanager
def umask(value: int) -> Iterator[None]:
    previous = os.umask(value)
    try:
        yield
    finally:
        os.umask(previous)


def temporaries(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".tmp"))


@posix_only
@pytest.mark.parametrize("mode", [0o600, 0o640, 0o444, 0o755])
def test_an_existing_file_keeps_its_mode(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "model.safetensors"
    save_file(W, path)
    path.chmod(mode)
    save_file({"w": np.zeros(3, np.float32)}, path)
    assert mode_of(path) == mode
    assert np.asarray(load_file(path)["w"]).tolist() == [0.0, 0.0, 0.0]


@posix_only
@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_a_new_file_gets_what_the_umask_leaves_as_with_open(tmp_path: Path, mask: int) -> None:
    with umask(mask):
        save_file(W, tmp_path / "new.safetensors")
        (tmp_path / "by-open").open("wb").close()
    assert mode_of(tmp_path / "new.safetensors") == mode_of(tmp_path / "by-open")


@posix_only
def test_the_temporary_of_a_private_file_is_private_while_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "secret.safetensors"
    save_file(W, path)
    path.chmod(0o600)
    seen = []
    real_fsync = os.fsync

    def record_then_sync(descriptor: int) -> None:
        seen.extend(mode_of(tmp_path / name) for name in temporaries(tmp_path))
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", record_then_sync)
    with umask(0o022):
        save_file(W, path)
    assert seen == [0o600]


def test_a_failed_save_removes_its_temporary_and_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "model.safetensors"
    save_file(W, path)
    original = path.read_bytes()

    def disk_failure(descriptor: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", disk_failure)
    with pytest.raises(OSError, match="Input/output error"):
        save_file({"w": np.zeros(3, np.float32)}, path)
    assert path.read_bytes() == original
    assert os.listdir(tmp_path) == ["model.safetensors"]


@posix_only
def test_stale_temporaries_of_the_target_are_swept_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    stale = tmp_path / ".model.safetensors.0123456789ab.tmp"
    others = [
        tmp_path / ".model.safetensors.backup.tmp",  # not a name save_file makes
        tmp_path / ".other.safetensors.0123456789ab.tmp",  # another target's
        tmp_path / "model.safetensors.0123456789ab.tmp",  # not hidden
    ]
    for file in [stale, *others]:
        file.write_bytes(b"partial")
    live = tmp_path / ".model.safetensors.ba9876543210.tmp"
    live.write_bytes(b"being written")
    with open(live, "rb") as held:
        writer.fcntl.flock(held.fileno(), writer.fcntl.LOCK_EX)  # a save in progress holds it
        save_file(W, path)
    assert not stale.exists() and live.exists()
    assert all(file.exists() for file in others)
    assert np.asarray(load_file(path)["w"]).tolist() == W["w"].tolist()


@posix_only
def test_names_up_to_the_file_system_limit(tmp_path: Path) -> None:
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    longest = tmp_path / ("m" * (limit - len(".safetensors")) + ".safetensors")
    accented = tmp_path / ("é" * ((limit - 1) // 2))  # two bytes each in UTF-8
    for path in (longest, accented):
        save_file(W, path)
        save_file(W, path)  # again, over the existing file
        assert np.asarray(load_file(path)["w"]).tolist() == W["w"].tolist()
    assert temporaries(tmp_path) == []
    too_long = tmp_path / ("m" * (limit + 1))
    with pytest.raises(OSError) as theirs:
        too_long.open("wb")
    with pytest.raises(OSError) as ours:
        save_file(W, too_long)
    assert ours.value.errno == theirs.value.errno == errno.ENAMETOOLONG


@posix_only
def test_long_names_sharing_a_prefix_get_their_own_temporaries(tmp_path: Path) -> None:
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    first, second = ("p" * (limit - 1) + end for end in "12")
    assert writer._tag(first, limit) != writer._tag(second, limit)
    stale = tmp_path / f".{writer._tag(first, limit)}.0123456789ab.tmp"
    stale.write_bytes(b"partial")
    save_file(W, tmp_path / second)
    assert stale.exists()  # not the second target's
    save_file(W, tmp_path / first)
    assert not stale.exists()


@posix_only
def test_devices_fifos_and_sockets_are_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    listening = socket.socket(socket.AF_UNIX)
    sock = tmp_path / "sock"
    listening.bind(str(sock))
    cases = [("/dev/null", "a character device"), (fifo, "a FIFO"), (sock, "a socket")]
    for target, kind in cases:
        with pytest.raises(CheckpointError, match=f"refuses to write .*: it is {kind}. A save"):
            save_file(W, target)
    listening.close()
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and stat.S_ISSOCK(sock.lstat().st_mode)
    assert temporaries(tmp_path) == []


def test_a_directory_is_refused_as_open_refuses_it(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError) as theirs:
        tmp_path.open("wb")
    with pytest.raises(
        CheckpointIsADirectoryError, match=r"it is a directory\. Fix: name a file"
    ) as ours:
        save_file(W, tmp_path)
    assert ours.value.errno == theirs.value.errno


@posix_only
def test_symbolic_links_are_followed_as_open_follows_them(tmp_path: Path) -> None:
    target = tmp_path / "blobs" / "abc123"
    target.parent.mkdir()
    save_file({"w": np.zeros(2, np.float32)}, target)
    target.chmod(0o640)
    link = tmp_path / "model.safetensors"
    link.symlink_to(Path("blobs") / "abc123")
    save_file(W, link)
    assert link.is_symlink() and mode_of(target) == 0o640
    assert np.asarray(load_file(target)["w"]).tolist() == W["w"].tolist()
    dangling = tmp_path / "new.safetensors"
    dangling.symlink_to("created-through-the-link")
    save_file(W, dangling)
    assert dangling.is_symlink() and (tmp_path / "created-through-the-link").is_file()
    to_null = tmp_path / "null.safetensors"
    to_null.symlink_to("/dev/null")
    with pytest.raises(CheckpointError, match=r"null.safetensors' \(-> '/dev/null'\).*character"):
        save_file(W, to_null)
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    with pytest.raises(CheckpointError, match="it is a symbolic link that never reaches a file"):
        save_file(W, loop)
    assert temporaries(tmp_path) == [] and temporaries(target.parent) == []


OTHER_UID = 54321  # nobody's: a user who is not the one running the tests


def shared_sticky(path: Path, owner: int | None = None) -> Path:
    """A directory like /tmp: sticky and world-writable."""
    path.mkdir()
    path.chmod(0o1777)
    if owner is not None:
        os.chown(path, owner, -1)
    return path


needs_root = pytest.mark.skipif(
    os.name != "posix" or os.geteuid() != 0, reason="giving a link to another user needs root"
)


@needs_root
def test_another_users_link_in_a_sticky_shared_directory_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "passwd"
    victim.write_bytes(b"root:x:0:0")
    shared = shared_sticky(tmp_path / "tmp")
    planted = shared / "model.safetensors"
    planted.symlink_to(victim)
    os.lchown(planted, OTHER_UID, OTHER_UID)
    with pytest.raises(
        CheckpointError,
        match=r"goes through the symbolic link .*model.safetensors', owned by uid 54321, in "
        r"the sticky, world-writable directory .*fs.protected_symlinks.*Fix: use a "
        "directory only you can write",
    ):
        save_file(W, planted)
    assert victim.read_bytes() == b"root:x:0:0" and temporaries(shared) == []
    # A planted directory link on the way is refused the same way.
    (tmp_path / "elsewhere").mkdir()
    planted_dir = shared / "run"
    planted_dir.symlink_to(tmp_path / "elsewhere")
    os.lchown(planted_dir, OTHER_UID, OTHER_UID)
    with pytest.raises(CheckpointError, match=r"goes through the symbolic link .*run'"):
        save_file(W, planted_dir / "x" / ".." / "model.safetensors")
    assert list((tmp_path / "elsewhere").iterdir()) == []


@needs_root
def test_links_the_kernel_would_follow_are_followed(tmp_path: Path) -> None:
    shared = shared_sticky(tmp_path / "tmp")
    mine = shared / "mine.safetensors"
    mine.symlink_to(tmp_path / "mine-target")
    save_file(W, mine)  # our own link
    theirs = shared_sticky(tmp_path / "their-tmp", owner=OTHER_UID)
    owned_alike = theirs / "model.safetensors"
    owned_alike.symlink_to(tmp_path / "their-target")
    os.lchown(owned_alike, OTHER_UID, OTHER_UID)
    save_file(W, owned_alike)  # the directory's owner owns the link too
    private = tmp_path / "private"
    private.mkdir(mode=0o755)
    not_shared = private / "model.safetensors"
    not_shared.symlink_to(tmp_path / "private-target")
    os.lchown(not_shared, OTHER_UID, OTHER_UID)
    save_file(W, not_shared)  # not a sticky, world-writable directory
    for target in ("mine-target", "their-target", "private-target"):
        assert list(load_file(tmp_path / target)) == ["w"]


PAUSED_SAVE = """
import os, sys, time
import numpy as np
from torch2jax_device import save_file

directory, target = sys.argv[1], sys.argv[2]
fetch = np.ascontiguousarray

def fetch_slowly(array, dtype=None):
    if array.size == 16:  # "z", fetched after "a" was written: pause the save here
        time.sleep(600)  # killed long before
    return fetch(array, dtype)

np.ascontiguousarray = fetch_slowly
save_file({"a": np.ones(2**22, np.float32), "z": np.zeros(16, np.float32)}, target)
"""


@posix_only
def test_a_killed_save_leaves_nothing_after_the_next_save(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    save_file(W, path)
    child = subprocess.Popen([sys.executable, "-c", PAUSED_SAVE, str(tmp_path), str(path)])
    try:
        limit = deadline(120)
        until = time.monotonic() + limit
        while not any(os.path.getsize(tmp_path / t) > 2**24 for t in temporaries(tmp_path)):
            assert child.poll() is None, "the save ended before its pause"
            if time.monotonic() > until:
                raise DeadlineHit(f"{MARK}: the save did not start within {limit:.0f} s")
            time.sleep(0.05)  # wall-clock: how often it looks; the limit is deadline()
        (partial,) = temporaries(tmp_path)
        save_file({"w": np.zeros(2, np.float32)}, path)  # the other save is alive: kept
        assert temporaries(tmp_path) == [partial]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert temporaries(tmp_path) == [partial]  # what a kill leaves behind
    save_file(W, path)
    assert temporaries(tmp_path) == []
    assert np.asarray(load_file(path)["w"]).tolist() == W["w"].tolist()
    assert os.listdir(tmp_path) == ["model.safetensors"]
