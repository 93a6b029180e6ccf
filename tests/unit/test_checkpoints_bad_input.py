"""Corrupted, truncated, hostile and unsupported files: a ``CheckpointError`` naming the
file and the problem; never a crash, an allocation larger than the file, code from the
file running, or a partly written output."""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch2jax_device as tj
from tests.support.deadlines import deadline
from torch2jax_device import CheckpointError, load, load_file, safe_open, save_file
from torch2jax_device._src.checkpoints import format

F32x4 = {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}


def craft(path: Path, header: Any, data: bytes = b"\0" * 16, length: int | None = None) -> Path:
    """Write a safetensors file byte by byte: any header (object or raw bytes), any length."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes((len(raw) if length is None else length).to_bytes(8, "little") + raw + data)
    return path


def _every_reader(path: Path) -> list[Callable[[], Any]]:
    return [lambda: load_file(path), lambda: safe_open(path).close(), lambda: load(path)]


CASES: list[tuple[str, Any, bytes, int | None, str]] = [
    ("length-past-end", {"w": F32x4}, b"\0" * 16, 1000, r"says 1000 bytes but only \d+ follow"),
    ("length-huge", {"w": F32x4}, b"", 2**63, "above safetensors' limit"),
    ("not-utf8", b"\xff\xfe{}", b"", None, "not UTF-8"),
    ("malformed-json", b'{"w": {"dtype": "F32",', b"", None, "not valid JSON"),
    ("deeply-nested", b"[" * 100_000 + b"]" * 100_000, b"", None, "opens more than 49,157 JSON"),
    ("deep-under-cap", b"[" * 40_000 + b"]" * 40_000, b"", None, "not valid JSON"),
    ("not-an-object", [1, 2], b"", None, "is a JSON list, not an object"),
    ("duplicate-name", b'{"w": {}, "w": {}}', b"", None, "names 'w' twice"),
    ("entry-not-object", {"w": [1]}, b"", None, "entry of tensor 'w' is not a JSON object"),
    ("unknown-dtype", {"w": {**F32x4, "dtype": "F7"}}, b"\0" * 16, None, "unknown dtype 'F7'"),
    ("packed-dtype", {"w": {**F32x4, "dtype": "F4"}}, b"\0" * 16, None, "packed sub-byte"),
    ("shape-negative", {"w": {**F32x4, "shape": [-4]}}, b"\0" * 16, None, "not a list of sizes"),
    ("shape-float", {"w": {**F32x4, "shape": [4.0]}}, b"\0" * 16, None, "not a list of sizes"),
    ("shape-bool", {"w": {**F32x4, "shape": [True]}}, b"\0" * 16, None, "not a list of sizes"),
    ("offsets-short", {"w": {**F32x4, "data_offsets": [0]}}, b"", None, "not \\[begin, end\\]"),
    ("offsets-negative", {"w": {**F32x4, "data_offsets": [-16, 0]}}, b"", None, "not \\[begin"),
    (
        "offsets-reversed",
        {"w": {**F32x4, "data_offsets": [16, 0]}},
        b"\0" * 16,
        None,
        "\\[16, 0\\] \\(-16 bytes\\) but dtype F32 and shape \\[4\\] need 16 bytes",
    ),
    (
        "dtype-disagrees",
        {"w": {**F32x4, "dtype": "F64"}},
        b"\0" * 16,
        None,
        "dtype F64 and shape \\[4\\] need 32 bytes",
    ),
    (
        "shape-disagrees-hugely",
        {"w": {**F32x4, "shape": [2**40, 2**40]}},
        b"\0" * 16,
        None,
        "need 4835703278458516698824704 bytes",
    ),
    (
        "offsets-out-of-bounds",
        {"w": {"dtype": "U8", "shape": [2**40], "data_offsets": [0, 2**40]}},
        b"\0" * 16,
        None,
        "cover 1099511627776 data bytes but the file holds 16: it is truncated",
    ),
    (
        "overlapping",
        {"a": F32x4, "b": {**F32x4, "data_offsets": [8, 24]}},
        b"\0" * 24,
        None,
        "tensor 'b' starts at data offset 8, which overlaps tensor 'a' \\(ends at 16\\)",
    ),
    (
        "gap",
        {"a": F32x4, "b": {**F32x4, "data_offsets": [20, 36]}},
        b"\0" * 36,
        None,
        "starts at data offset 20, which leaves a gap after tensor 'a'",
    ),
    ("trailing-bytes", {"w": F32x4}, b"\0" * 20, None, "followed by bytes no tensor owns"),
    ("truncated-data", {"w": F32x4}, b"\0" * 10, None, "holds 10: it is truncated"),
    ("bad-metadata", {"__metadata__": {"step": 3}}, b"", None, "must map strings to strings"),
    (
        "dtype-list",
        {"w": {**F32x4, "dtype": ["F32"]}},
        b"\0" * 16,
        None,
        r"the dtype of tensor 'w' is \['F32'\], not a string",
    ),
    ("dtype-missing", {"w": {"shape": [4], "data_offsets": [0, 16]}}, b"", None, "is None, not"),
    (
        "empty-dimension-past-int64",
        {"w": {"dtype": "F32", "shape": [0, 2**63], "data_offsets": [0, 0]}},
        b"",
        None,
        "the shape of 'w' is .* not a list of sizes",
    ),
    (
        "empty-but-too-big",
        {"w": {"dtype": "F32", "shape": [0, 2**62, 4], "data_offsets": [0, 0]}},
        b"",
        None,
        "too large for an array even when empty",
    ),
    (
        "rank-65",
        {"w": {"dtype": "U8", "shape": [1] * 65, "data_offsets": [0, 1]}},
        b"\0",
        None,
        "has 65 dimensions, more than the 64",
    ),
    ("shape-nan", b'{"w": {"dtype": "F32", "shape": [NaN]}}', b"", None, "not a list of sizes"),
    ("5000-digit-number", b'{"w": {"shape": [' + b"9" * 5000 + b"]}}", b"", None, "not valid JSON"),
]


@pytest.mark.parametrize(
    "header, data, length, match", [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_invalid_files_raise_checkpoint_error_naming_file_and_problem(
    tmp_path: Path, header: Any, data: bytes, length: int | None, match: str
) -> None:
    path = craft(tmp_path / "bad.safetensors", header, data, length)
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for read in _every_reader(path):
        with pytest.raises(CheckpointError, match=match) as caught:
            read()
        assert str(path) in str(caught.value)
        assert isinstance(caught.value, ValueError)
        assert isinstance(caught.value, tj.Torch2JaxDeviceError)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert grown_kib < 64 * 1024  # no allocation of what the header claims


def test_a_file_shorter_than_the_length_field(tmp_path: Path) -> None:
    path = tmp_path / "tiny.safetensors"
    path.write_bytes(b"\x10\0\0")
    for read in _every_reader(path):
        with pytest.raises(CheckpointError, match="it is 3 bytes long, shorter than the 8-byte"):
            read()


def test_a_file_truncated_after_opening_raises(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    save_file({"w": np.ones(1000, np.float32)}, path)
    with safe_open(path) as f:
        os.truncate(path, path.stat().st_size - 100)
        with pytest.raises(CheckpointError, match="truncated after it was opened"):
            f.get_tensor("w")


class RunsCodeWhenUnpickled:
    """Unpickling this creates a file: proof that code from the checkpoint ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.marker), "w"))


def test_a_pickle_weights_only_refuses_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "code-ran"
    path = tmp_path / "hostile.pt"
    torch.save({"w": torch.ones(2), "payload": RunsCodeWhenUnpickled(marker)}, path)
    with pytest.raises(CheckpointError, match="refuses to unpickle, so nothing in it was run"):
        load(path)
    assert not marker.exists()
    with pytest.raises(CheckpointError, match=r"Unsupported global: GLOBAL io\.open"):
        load(path)


def test_opening_an_index_as_a_safetensors_file_says_how_to_load_an_index(
    tmp_path: Path,
) -> None:
    # Before: "the header length field says 7017841271895827067 bytes", the JSON's first
    # 8 characters read as a length.
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": {"w": "a.safetensors"}}))
    with pytest.raises(CheckpointError, match=r"JSON text, such as an index.*tj\.load_file"):
        safe_open(index)


class RunsACommandWhenUnpickled:
    """Unpickling this would run a shell command (``os.system``): torch blocks its module."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("true",))


def test_a_global_from_a_blocked_module_is_named_not_called_corruption(tmp_path: Path) -> None:
    path = tmp_path / "hostile.pt"
    torch.save({"w": torch.ones(2), "payload": RunsACommandWhenUnpickled()}, path)
    with pytest.raises(CheckpointError) as raised:
        load(path)
    message = str(raised.value)
    assert "refuses to unpickle, so nothing in it was run" in message
    assert re.search(r"unsupported GLOBAL \S+system whose module \S+ is blocked", message)
    assert "corrupted" not in message


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda data: data[: len(data) // 2],  # truncated zip
        lambda data: b"not a checkpoint at all",
        lambda data: b"hello world garbage",
        lambda data: data[:200] + bytes(256) + data[456:],  # zeroed middle
    ],
    ids=["truncated", "text", "garbage", "zeroed"],
)
def test_corrupted_torch_checkpoints(tmp_path: Path, corrupt: Callable[[bytes], bytes]) -> None:
    path = tmp_path / "ckpt.pt"
    torch.save({"w": torch.arange(100.0)}, path)
    path.write_bytes(corrupt(path.read_bytes()))
    with pytest.raises(CheckpointError, match="is not a readable PyTorch checkpoint") as caught:
        load(path)
    assert str(path) in str(caught.value)


def test_missing_files_raise_file_not_found_like_torch(tmp_path: Path) -> None:
    readers = _every_reader(tmp_path / "missing.safetensors")
    for read in [*readers, lambda: load(tmp_path / "missing.pt")]:
        with pytest.raises(FileNotFoundError):
            read()


def test_a_file_of_more_tensors_than_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "many.safetensors"
    save_file({f"t{i}": np.ones(1, np.uint8) for i in range(12)}, path)
    assert len(load_file(path, max_tensors=12)) == 12
    with pytest.raises(CheckpointError, match="holds 12 tensors; max_tensors=11 allows no more"):
        load_file(path, max_tensors=11)
    with pytest.raises(CheckpointError, match=r"more than 5 tensors .*; max_tensors=5 allows"):
        safe_open(path, max_tensors=5)  # stops parsing early: the count is a lower bound
    monkeypatch.setattr(format, "MIN_TENSOR_LIMIT", 10)
    for read in _every_reader(path):
        with pytest.raises(CheckpointError, match=r"more than 10 tensors .*; 10 is the most "):
            read()
    with pytest.raises(CheckpointError, match="pass a larger max_tensors="):
        load_file(path)
    with pytest.raises(CheckpointError, match=r"max_tensors='12': give the most tensors"):
        load_file(path, max_tensors="12")  # type: ignore[arg-type]


def test_the_default_limit_grows_with_the_file() -> None:
    assert format.tensor_limit(0) == format.MIN_TENSOR_LIMIT
    assert format.tensor_limit(10 * 2**30) == 10 * 2**30 // format.BYTES_PER_TENSOR


# Headers of every JSON shape, and entries close enough to valid to reach deep checks.
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
SIZES = st.integers(min_value=-2, max_value=2**64) | st.sampled_from([0, 1, 2, 3, 4, 2**63 - 1])
ENTRY = st.fixed_dictionaries(
    {},
    optional={
        "dtype": st.sampled_from([*format.DTYPES, "F4", "F7", "f32"]) | JSON,
        "shape": st.lists(SIZES | JSON, max_size=66) | JSON,
        "data_offsets": st.lists(SIZES, max_size=3) | JSON,
        "extra": JSON,
    },
)
HEADERS = st.dictionaries(
    st.sampled_from(["w", "b", "__metadata__", "x" * 3, ""]) | st.text(max_size=6),
    ENTRY | JSON,
    max_size=4,
)


def _read_everything(path: Path) -> None:
    """Every entry point, and every tensor through each kind of read."""
    load_file(path)
    load_file(path, backend="pread")
    load(path)
    with safe_open(path) as f:
        f.metadata()
        for name in f.keys():
            f.get_tensor(name)
            f.get_slice(name)[...]


def _only_library_errors(path: Path) -> None:
    try:
        _read_everything(path)
    except CheckpointError:
        pass


@settings(max_examples=400, deadline=None)
@given(header=HEADERS, data=st.binary(max_size=40))
def test_fuzzed_headers_raise_only_checkpoint_errors(
    tmp_path_factory: pytest.TempPathFactory, header: dict[str, Any], data: bytes
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "fuzz.safetensors"
    _only_library_errors(craft(path, json.dumps(header).encode(), data))


VALID = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(5, np.uint8)}


@settings(max_examples=400, deadline=None)
@given(
    edits=st.lists(
        st.tuples(st.integers(min_value=0, max_value=400), st.binary(min_size=0, max_size=3)),
        min_size=1,
        max_size=4,
    ),
    length_shift=st.sampled_from([0, 0, 0, -1, 1, -8, 2**32]),
)
def test_corrupted_valid_files_raise_only_checkpoint_errors(
    tmp_path_factory: pytest.TempPathFactory, edits: list[tuple[int, bytes]], length_shift: int
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "fuzz.safetensors"
    save_file(VALID, path)
    data = bytearray(path.read_bytes())
    length = int.from_bytes(data[:8], "little") + length_shift
    data[:8] = max(length, 0).to_bytes(8, "little")
    for position, replacement in edits:
        where = 8 + position % (len(data) - 8)
        data[where : where + len(replacement)] = replacement
    path.write_bytes(bytes(data))
    _only_library_errors(path)


# ------------------------------------------------------------------ indexes of shards


def index_naming(folder: Path, shard: str) -> Path:
    tensors = {"w": np.ones(4, np.float32), "v": np.zeros(2, np.float32)}
    tj.save_file(tensors, folder / "real.safetensors")
    path = folder / "model.safetensors.index.json"
    path.write_text(json.dumps({"weight_map": {"w": shard, "v": "real.safetensors"}}))
    return path


@pytest.mark.parametrize(
    ("shard", "problem"),
    [
        ("", "names no file"),
        (".", "names no file"),
        ("./", "names no file"),
        ("sub", "is a directory, not a checkpoint file"),
        ("real\0.safetensors", "contains a NUL byte"),
        ("../real.safetensors", "is outside the index's folder"),
        ("sub/../../real.safetensors", "is outside the index's folder"),
        ("/etc/passwd", "is outside the index's folder"),
    ],
)
def test_an_index_naming_no_shard_file_is_refused(tmp_path: Path, shard: str, problem: str) -> None:
    (tmp_path / "sub").mkdir()
    path = index_naming(tmp_path, shard)
    map_location = jax.sharding.Mesh(np.array(jax.devices("cpu")[:1]), ("data",))
    for read in (lambda: load_file(path), lambda: load(path), lambda: load(path, map_location)):
        with pytest.raises(
            CheckpointError, match=f"names shard .* for tensor 'w', which {problem}"
        ):
            read()


def test_a_shard_linked_outside_the_folder_is_refused_unread(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"SECRETS!" + b"\0" * 64)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "w.safetensors").symlink_to(secret)
    path = index_naming(folder, "w.safetensors")
    for read in (lambda: load_file(path), lambda: load(path)):
        with pytest.raises(
            CheckpointError, match=r"is a symbolic link .* outside the index"
        ) as caught:
            read()
        assert "SECRETS" not in str(caught.value)
        assert str(int.from_bytes(b"SECRETS!", "little")) not in str(caught.value)
    inside = folder / "inside.safetensors"
    inside.symlink_to("real.safetensors")  # a link within the folder is a file next to it
    assert list(load_file(index_naming(folder, "inside.safetensors"))) == ["w", "v"]


# --------------------------------------------------------------- the error path


def test_a_failed_load_waits_for_the_conversions_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch2jax_device._src.checkpoints import pickled

    settled: list[int] = []
    settle = pickled.settle
    monkeypatch.setattr(
        pickled, "settle", lambda arrays: (settled.append(len(arrays)), settle(arrays))[1]
    )
    path = tmp_path / "bad.pt"
    # Walked last to first: ten tensors are converted before the meta one fails.
    torch.save([torch.empty(2, device="meta"), *(torch.ones(2**16) for _ in range(10))], path)
    with pytest.raises(CheckpointError, match="meta tensor"):
        load(path)
    assert settled == [10]


def test_a_failed_load_leaves_the_interpreter_able_to_exit(tmp_path: Path) -> None:
    path = tmp_path / "bad.pt"
    torch.save([torch.empty(2, device="meta"), *(torch.ones(2**16) for _ in range(50))], path)
    code = (
        "import sys, torch2jax_device as tj\n"
        "for _ in range(5):\n"
        "    try:\n"
        f"        tj.load({str(path)!r})\n"
        "    except tj.CheckpointError:\n"
        "        pass\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=deadline(120)
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
