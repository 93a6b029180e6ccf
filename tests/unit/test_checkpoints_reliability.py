"""Checkpoint files against a hostile file system: links raced in, odd paths, big inputs.

The race tests run a racer (another user's process, or a thread) for a bounded number of
rounds while the library saves or loads in a loop, and assert on outcomes only: the
victim file is untouched, nothing outside the folder is read. They never time anything.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import jax
import numpy as np
import pytest

import torch2jax_device as tj
from tests.support.deadlines import finished
from torch2jax_device import CheckpointError, load_file, save_file
from torch2jax_device._src.checkpoints import index, pickled, writer

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX links and dir_fd")
needs_root = pytest.mark.skipif(
    os.name != "posix" or os.geteuid() != 0, reason="racing as another user needs root"
)
W = {"w": np.arange(16, dtype=np.float32)}
OTHER_UID = 54321  # nobody's: a user who is not the one running the tests
VICTIM_BYTES = b"root:x:0:0:root:/root:/bin/sh\n"

# Another user's loop in a sticky, world-writable directory: plant a link to the victim
# at the name a root job saves to, remove it, again, for a bounded number of rounds.
RACER = """
import os, sys
link, victim, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
print("racing", flush=True)
for _ in range(rounds):
    try:
        os.symlink(victim, link)
    except OSError:
        pass
    try:
        os.unlink(link)
    except OSError:
        pass
"""


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory like /tmp (sticky, world-writable) that another user can reach."""
    path = Path(tempfile.mkdtemp(prefix="tj-race-", dir="/tmp"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@needs_root
@pytest.mark.slow  # starts the racing process
def test_a_link_raced_into_a_save_never_redirects_it(tmp_path: Path, shared_tmp: Path) -> None:
    victim = tmp_path / "passwd"
    victim.write_bytes(VICTIM_BYTES)
    victim.chmod(0o600)
    target = shared_tmp / "model.safetensors"
    try:
        racer = subprocess.Popen(
            [sys.executable, "-c", RACER, str(target), str(victim), "300000"],
            user=OTHER_UID,
            stdout=subprocess.PIPE,
            text=True,
        )
    except PermissionError:  # e.g. a Python under /root, a folder closed to other users
        pytest.skip(f"uid {OTHER_UID} may not run this Python ({sys.executable})")
    try:
        assert racer.stdout is not None and racer.stdout.readline() == "racing\n"
        saves = refused = 0
        while racer.poll() is None:
            try:
                save_file(W, target)
            except CheckpointError as err:  # the link was there when the walk read it
                assert "owned by uid 54321" in str(err)
                refused += 1
                continue
            saves += 1
            assert victim.read_bytes() == VICTIM_BYTES, f"overwritten after {saves} saves"
            if target.is_file() and not target.is_symlink():
                target.unlink()  # ours, and the racer may not remove it: let it race on
    finally:
        racer.kill()
        racer.wait()
        racer.stdout.close()
    print(f"{saves} saves, {refused} refused while the racer ran")
    assert victim.read_bytes() == VICTIM_BYTES and oct(victim.stat().st_mode)[-3:] == "600"
    assert saves + refused > 0


def _index(folder: Path) -> Path:
    tj.save_file({"w": np.ones(4, np.float32)}, folder / "w.safetensors")
    path = folder / "model.safetensors.index.json"
    path.write_text(json.dumps({"weight_map": {"w": "w.safetensors"}}))
    return path


@posix_only
def test_a_shard_swapped_for_an_outside_link_is_never_read(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    path = _index(folder)
    good = tmp_path / "good.safetensors"
    shutil.copy(folder / "w.safetensors", good)
    secret = tmp_path / "secret.safetensors"
    tj.save_file({"w": np.full(4, 666, np.float32)}, secret)
    shard, staged = folder / "w.safetensors", folder / "staged"
    rounds, done = 3000, threading.Event()

    def swap() -> None:  # the shard is always there: a file, or a link out of the folder
        try:
            for _ in range(rounds):
                os.symlink(secret, staged)
                os.replace(staged, shard)
                os.link(good, staged)
                os.replace(staged, shard)
        finally:
            done.set()

    racer = threading.Thread(target=swap)
    racer.start()
    loads = refused = 0
    try:
        while not done.is_set():
            try:
                loaded = load_file(path)
            except CheckpointError as err:
                assert "outside the index's folder" in str(err) and "666" not in str(err)
                refused += 1
                continue
            assert np.asarray(loaded["w"]).tolist() == [1.0] * 4, "read the outside file"
            loads += 1
    finally:
        racer.join()
    assert loads + refused > 0


@posix_only
def test_a_shard_linked_inside_the_folder_still_loads(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    (folder / "blobs").mkdir(parents=True)
    path = _index(folder)
    os.replace(folder / "w.safetensors", folder / "blobs" / "abc")
    (folder / "w.safetensors").symlink_to(Path("blobs") / ".." / "blobs" / "abc")
    assert np.asarray(load_file(path)["w"]).tolist() == [1.0] * 4
    assert np.asarray(tj.load(path)["w"]).tolist() == [1.0] * 4


# --------------------------------------------------------------- paths save_file refuses


@pytest.mark.parametrize("existing", [True, False])
def test_a_path_ending_in_a_separator_is_refused_as_torch_refuses_it(
    tmp_path: Path, existing: bool
) -> None:
    import torch

    folder = tmp_path / "out"
    if existing:
        folder.mkdir()
    given = str(folder) + os.sep
    with pytest.raises(RuntimeError, match="invalid file name"):
        torch.save({}, given)
    kind = IsADirectoryError if existing else NotADirectoryError
    with pytest.raises(kind, match=r"names a directory .*name a file") as caught:
        save_file(W, given)
    assert caught.value.filename == given
    assert os.path.isdir(folder) == existing and os.listdir(tmp_path) == (
        ["out"] if existing else []
    )


def test_save_file_errors_name_the_users_path_not_a_temporary(tmp_path: Path) -> None:
    given = tmp_path / "missing" / "model.safetensors"
    with pytest.raises(FileNotFoundError) as caught:
        save_file(W, given)
    assert caught.value.filename == str(given) and ".tmp" not in str(caught.value)


@posix_only
def test_a_fifo_is_refused_rather_than_waited_on_when_loading(tmp_path: Path) -> None:
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(CheckpointError, match="it is a FIFO, not a file"):
        load_file(fifo)
    with pytest.raises(CheckpointError, match="it is a FIFO, not a file"):
        tj.load(fifo)


# --------------------------------------------------------------- bounds on an index


def test_an_index_larger_than_the_cap_is_refused_unparsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index, "MAX_INDEX_BYTES", 1024)
    path = tmp_path / "model.safetensors.index.json"
    names = {f"layer.{i}.weight": "w.safetensors" for i in range(100)}
    path.write_text(json.dumps({"weight_map": names}))
    with pytest.raises(CheckpointError, match="larger than 1,024 bytes, the most an index"):
        load_file(path)


def test_an_index_nested_too_deep_is_the_librarys_error(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors.index.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    for read in (lambda: load_file(path), lambda: tj.load(path)):
        with pytest.raises(CheckpointError, match="nested too deep"):
            read()


def test_the_index_cap_leaves_room_for_real_indexes() -> None:
    # A 405B-parameter model's index names ~2,000 tensors in ~100 KB; the cap is 640 times that.
    assert index.MAX_INDEX_BYTES >= 64 * 2**20


def test_errno_of_a_refused_directory_target_matches_open(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError) as caught:
        save_file(W, tmp_path)
    assert caught.value.errno == errno.EISDIR


# --------------------------------------------------------------- bounds on a header


def _raw_safetensors(path: Path, header: str) -> Path:
    data = header.encode()
    path.write_bytes(len(data).to_bytes(8, "little") + data)
    return path


@pytest.mark.parametrize(
    "values",
    [
        '"k{i}":"v"',  # many short strings: about 15 times their text in memory
        '"k{i}":{i}',  # numbers in the metadata (refused as values only after parsing)
    ],
)
def test_a_header_of_many_metadata_values_is_refused_before_parsing(
    tmp_path: Path, values: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch2jax_device._src.checkpoints import format as safetensors_format

    parsed: list[str] = []
    monkeypatch.setattr(
        safetensors_format.json,
        "loads",
        lambda text, **kwargs: parsed.append(text) or json.loads(text, **kwargs),
    )
    entries = ",".join(values.format(i=i) for i in range(2_000_000))
    path = _raw_safetensors(tmp_path / "m.safetensors", f'{{"__metadata__":{{{entries}}}}}')
    with pytest.raises(CheckpointError, match="JSON strings and numbers, at most 72 per tensor"):
        load_file(path)
    assert parsed == []


def test_metadata_over_the_caps_is_refused_on_load_and_on_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch2jax_device._src.checkpoints import format as safetensors_format

    monkeypatch.setattr(safetensors_format, "MAX_METADATA_ENTRIES", 4)
    monkeypatch.setattr(safetensors_format, "MAX_METADATA_BYTES", 64)
    many = {f"k{i}": "v" for i in range(5)}
    large = {"k": "v" * 64}
    for metadata, problem in (
        (many, "holds 5 entries, more than the 4"),
        (large, "holds 65 bytes of text"),
    ):
        target = tmp_path / "out.safetensors"
        with pytest.raises(CheckpointError, match=f"save_file\\(\\): '__metadata__' {problem}"):
            save_file(W, target, metadata)
        assert not target.exists()
        path = _raw_safetensors(tmp_path / "m.safetensors", json.dumps({"__metadata__": metadata}))
        with pytest.raises(CheckpointError, match=f"'__metadata__' {problem}"):
            load_file(path)


@pytest.mark.parametrize(
    ("tensors", "metadata", "what"),
    [
        ({"w\udc80": W["w"]}, None, "the tensor name"),
        (W, {"k\udcff": "v"}, "the metadata key"),
        (W, {"k": "v\udcff"}, "the metadata value of 'k'"),
    ],
)
def test_a_lone_surrogate_in_a_name_is_the_librarys_error(
    tmp_path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None, what: str
) -> None:
    target = tmp_path / "out.safetensors"
    with pytest.raises(tj.ConversionError, match=f"{what}.* lone surrogate .*nothing was written"):
        save_file(tensors, target, metadata)
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------- compressed storages


def _deflated_copy(stored: Path, out: Path) -> Path:
    """``stored`` (as torch.save writes it: entries stored) with every entry deflated."""
    import zipfile

    with zipfile.ZipFile(stored) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            target.writestr(info.filename, source.read(info), zipfile.ZIP_DEFLATED)
    return out


def test_storages_that_inflate_past_the_copy_bound_are_refused_before_torch_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from torch2jax_device._src.checkpoints import pickled

    stored = tmp_path / "stored.pt"
    torch.save({"w": torch.zeros(2**20)}, stored)  # 4 MiB of zeros
    deflated = _deflated_copy(stored, tmp_path / "deflated.pt")
    assert deflated.stat().st_size < 2**16
    # torch inflates it whole: what a bound must stop before torch.load runs.
    assert torch.load(deflated, weights_only=True)["w"].shape == (2**20,)
    monkeypatch.setattr(pickled, "_COPY_ALLOWANCE_BYTES", 2**20)
    with pytest.raises(CheckpointError, match=r"zip entries that expand to 4,19\d,\d{3} bytes"):
        tj.load(deflated)
    with open(deflated, "rb") as file, pytest.raises(CheckpointError, match="expand to"):
        tj.load(file)
    assert np.asarray(tj.load(stored)["w"]).shape == (2**20,)  # stored entries: as before


@pytest.mark.parametrize("kind", ["fifo", "directory", "link-to-fifo", "socket"])
def test_a_non_file_planted_under_a_temporarys_name_never_stops_a_save(
    tmp_path: Path, kind: str
) -> None:
    # Anyone who can write the target's folder (another user in /tmp) can name a thing
    # as the save's sweep of stale temporaries looks for them. Before: a FIFO made
    # save_file wait forever in open() for a writer.
    planted = tmp_path / (".model.safetensors." + "a" * writer._TOKEN_CHARS + writer._SUFFIX)
    fifo, server = tmp_path / "fifo", socket.socket(socket.AF_UNIX)
    if kind == "directory":
        planted.mkdir()
    elif kind == "socket":
        server.bind(str(planted))
    else:
        os.mkfifo(fifo if kind == "link-to-fifo" else planted)
        if kind == "link-to-fifo":
            planted.symlink_to(fifo)
    saving = threading.Thread(
        target=save_file, args=({"x": np.ones(2, np.float32)}, tmp_path / "model.safetensors")
    )
    saving.start()
    try:
        finished(saving, 60)
    finally:
        for stuck in (planted, fifo):  # a reader blocked on a FIFO returns once one opens it
            if stuck.exists() and stat.S_ISFIFO(stuck.lstat().st_mode):
                with contextlib.suppress(OSError):
                    os.close(os.open(stuck, os.O_WRONLY | os.O_NONBLOCK))
        saving.join()
        server.close()
    np.testing.assert_array_equal(np.asarray(load_file(tmp_path / "model.safetensors")["x"]), 1)
    assert planted.is_symlink() or planted.exists()  # left as it was


def _zip_of_entries(path: Path, count: int) -> None:
    """A checkpoint-shaped zip: an empty dict's pickle, then ``count`` empty storages."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        archive.writestr("archive/version", b"3\n")
        for number in range(count):
            archive.writestr(f"archive/data/{number}", b"")


def test_a_zip_of_more_entries_than_tensors_allowed_is_refused_before_its_directory_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: the whole zip directory was listed first (600,000 empty entries in 68 MB:
    # 361 MiB and 17 s in tj.load, 101 MiB and 3 s in torch.load).
    pytest.importorskip("torch")  # without it, tj.load says so first
    path = tmp_path / "entries.pt"
    _zip_of_entries(path, 20_000)  # a 2.5 MB file: 16,384 tensors allowed by default
    listed = []
    real_zip = pickled.zipfile.ZipFile
    monkeypatch.setattr(
        pickled.zipfile, "ZipFile", lambda *a, **k: listed.append(a) or real_zip(*a, **k)
    )
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("d",))
    for target in ("cpu", mesh):  # a load onto one device, and onto a mesh
        with pytest.raises(CheckpointError, match=r"holds 19,938 or more tensors \(its zip's"):
            tj.load(path, map_location=target)
    assert listed == []  # refused from the end record alone
    import torch

    assert tj.load(path, max_tensors=20_000) == torch.load(path, weights_only=True) == {}


@pytest.mark.parametrize(("count", "comment"), [(0, b""), (3, b""), (3, b"x" * 300), (65_536, b"")])
def test_a_zips_entries_are_counted_as_zipfile_lists_them(count: int, comment: bytes) -> None:
    # The oracle is zipfile's own directory; 65,536 entries is past the classic record's
    # 16 bits, so the count comes from the ZIP64 record.
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as archive:
        for number in range(count):
            archive.writestr(str(number), b"")
        archive.comment = comment
    with zipfile.ZipFile(data) as archive:
        assert pickled._zip_entries(data) == len(archive.infolist()) == count
