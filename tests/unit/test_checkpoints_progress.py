"""The load progress bar: on for big loads on a terminal, off in pipes, switchable."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import numpy as np
import pytest
import torch

from torch2jax_device import load, load_file, save_file
from torch2jax_device._src.checkpoints import progress as _progress

BIG = _progress.THRESHOLD_BYTES


@pytest.fixture
def terminal() -> Iterator[TextIO]:
    """A stream that is a terminal (the slave end of a pseudo-terminal)."""
    leader, follower = os.openpty()
    stream = os.fdopen(follower, "w")
    yield stream
    stream.close()
    os.close(leader)


@pytest.fixture(autouse=True)
def _no_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_progress.ENV_VAR, raising=False)


def test_shown_for_big_loads_on_a_terminal_only(terminal: TextIO) -> None:
    assert _progress.wanted(None, BIG, terminal)
    assert not _progress.wanted(None, BIG - 1, terminal)
    assert not _progress.wanted(None, BIG, io.StringIO())  # a pipe or a log file
    assert not _progress.wanted(None, BIG, None)  # no stderr at all (pythonw)


@pytest.mark.parametrize("setting", ["0", "false", "off"])
def test_the_environment_turns_it_off(
    monkeypatch: pytest.MonkeyPatch, terminal: TextIO, setting: str
) -> None:
    monkeypatch.setenv(_progress.ENV_VAR, setting)
    assert not _progress.wanted(None, BIG, terminal)
    assert _progress.wanted(True, BIG, terminal)  # the argument wins


@pytest.mark.parametrize("setting", ["1", "true", "on"])
def test_the_environment_turns_it_on_anywhere(
    monkeypatch: pytest.MonkeyPatch, setting: str
) -> None:
    monkeypatch.setenv(_progress.ENV_VAR, setting)
    assert _progress.wanted(None, 1, io.StringIO())
    assert not _progress.wanted(False, 1, io.StringIO())  # the argument wins


def test_load_file_draws_to_stderr_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "model.safetensors"
    save_file({"w": np.ones(1024, np.float32)}, path)
    load_file(path, progress=True)  # mapped, nothing read: nothing to draw
    assert capsys.readouterr().err == ""
    load_file(path, backend="pread", progress=True)
    drawn = capsys.readouterr().err.split("\r")
    assert drawn[0] == "" and drawn[1].startswith(f"Loading model.safetensors:   0% [{'.' * 24}]")
    assert drawn[-1].startswith(f"Loading model.safetensors: 100% [{'#' * 24}] 4.0 KiB / 4.0 KiB")
    assert drawn[-1].endswith("/s\n")
    load_file(path, backend="pread")  # not a terminal: nothing
    assert capsys.readouterr().err == ""


def test_torch_checkpoints_count_the_bytes_torch_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ckpt.pt"
    torch.save({"w": torch.ones(4096)}, path)
    monkeypatch.setenv(_progress.ENV_VAR, "1")
    assert np.asarray(load(path)["w"]).sum() == 4096
    final = capsys.readouterr().err.rsplit("\r", 1)[1]
    size = f"{path.stat().st_size / 1024:.1f} KiB"
    assert final.startswith(f"Loading ckpt.pt: 100% [{'#' * 24}] {size} / {size}, ")


def test_a_failed_load_still_ends_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ckpt.pt"
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(ValueError, match="not a readable PyTorch checkpoint"):
        load(path, progress=True)
    assert capsys.readouterr().err.endswith("\n")
