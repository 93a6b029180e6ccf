"""What a load was given: a path or a binary file object, checked, and the format it holds.

Also the two things every reader of PyTorch checkpoints shares: importing torch with the
library's error when it is missing, and turning ``torch.load``'s failures into one.
Nothing here knows JAX.
"""

from __future__ import annotations

import io
import os
import re
from typing import IO, Any

from ..errors import CheckpointError
from .messages import clipped
from .paths import by_handle, open_regular

__all__ = ["FileLike", "PathLike", "Source", "import_torch", "unreadable"]

#: A file named by its path, as safetensors' and torch's loaders take it.
PathLike = str | os.PathLike[str]
#: What ``tj.load`` reads: a path or a binary file object open for reading, as ``torch.load``.
FileLike = PathLike | IO[bytes]

_ZIP_MAGIC = b"PK\x03\x04"


def is_index(path: PathLike) -> bool:
    """Whether ``path`` names an index of shards rather than a checkpoint file."""
    return os.fspath(path).endswith(".json")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Source:
    """What ``tj.load`` was given: a path or a binary file object, checked, and its format.

    ``kind`` is ``"safetensors"``, ``"zip"`` (torch's format since 1.6) or ``"legacy"``.
    A file object is read from its current position, which is restored. A path is opened
    once (``paths.open_regular``, or ``opened``: the file already open under that name)
    and every reader reads that handle (``handle``, ``by_name``), so what was checked is
    what is read; ``close`` closes it. An index is not opened here (``index`` opens it).
    """

    def __init__(self, f: Any, opened: io.FileIO | None = None) -> None:
        self.path: str | None = None
        self.file: IO[bytes] | None = None
        self.handle: io.FileIO | None = None
        if isinstance(f, (str, os.PathLike)):
            path = os.fspath(f)
            self.path = path if isinstance(path, str) else os.fsdecode(path)
            self.name = repr(self.path)
            suffix_says = self.path.endswith(".safetensors")
            if is_index(self.path) and opened is None:
                self.kind = "index"
                return
            self.handle = opened or open_regular(self.path, "tj.load cannot read")
            try:
                head = os.pread(self.handle.fileno(), 9, 0)
            except BaseException:
                self.handle.close()
                raise
        else:
            self.file = _checked_file(f)
            self.name = _describe(f)
            head = self._peek(9)
            suffix_says = False
        if not isinstance(head, bytes):
            raise CheckpointError(
                f"{self.name} returns {type(head).__name__} from read(), not bytes: open the "
                "file in binary mode, open(path, 'rb')"
            )
        # safetensors: the 8-byte header length, then JSON; zip and pickle files never
        # have "{" there.
        if suffix_says or head[8:9] == b"{":
            self.kind = "safetensors"
        elif head.startswith(_ZIP_MAGIC):
            self.kind = "zip"
        else:
            self.kind = "legacy"

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file a path was opened as (a file object is the caller's)."""
        if self.handle is not None:
            self.handle.close()

    def by_name(self) -> str:
        """A name that opens the file this source holds, for readers that take only names
        (``torch.load(mmap=True)``): ``paths.by_handle``."""
        assert self.path is not None and self.handle is not None
        return by_handle(self.handle, self.path)

    def _peek(self, count: int) -> Any:
        assert self.file is not None
        try:
            start = self.file.tell()
            head = self.file.read(count)
            self.file.seek(start)
        except (OSError, ValueError) as err:
            raise CheckpointError(
                f"cannot read {self.name}: {type(err).__name__}: {err}. tj.load needs a "
                "binary file object open for reading and seekable, as torch.load does; "
                "for a stream, read it into memory first: io.BytesIO(stream.read())"
            ) from err
        return head

    def size(self) -> int:
        """The bytes left to read."""
        if self.handle is not None:
            return os.fstat(self.handle.fileno()).st_size
        if self.file is None:
            assert self.path is not None
            return os.path.getsize(self.path)
        start = self.file.tell()
        end = self.file.seek(0, io.SEEK_END)
        self.file.seek(start)
        return max(end - start, 0)

    def label(self) -> str:
        """The progress bar's label."""
        name = self.path if self.path is not None else getattr(self.file, "name", None)
        return f"Loading {os.path.basename(name) if isinstance(name, str) else 'checkpoint'}"


def _describe(f: Any) -> str:
    """A file object as messages name it: its file name, else its type."""
    name = getattr(f, "name", None)
    return repr(name) if isinstance(name, str) else f"the {type(f).__name__} object"


def _checked_file(f: Any) -> IO[bytes]:
    """``f`` if it is a binary file object ``torch.load`` can read, else a teaching error."""
    if isinstance(f, (bytes, bytearray, memoryview)):
        raise CheckpointError(
            f"tj.load() takes a path or a binary file object, not {type(f).__name__}. For "
            "checkpoint bytes in memory: tj.load(io.BytesIO(data)); for a path held as "
            "bytes: tj.load(os.fsdecode(path))"
        )
    if not all(callable(getattr(f, method, None)) for method in ("read", "seek", "tell")):
        raise CheckpointError(
            f"tj.load() takes a path (str or os.PathLike) or a binary file object with "
            f"read(), seek() and tell(), as torch.load does, not {type(f).__name__}"
        )
    problem = None
    if getattr(f, "closed", False):
        problem = "is closed. Fix: pass an open file (open(path, 'rb')), or the path"
    elif isinstance(f, io.TextIOBase):
        problem = "is open in text mode. Fix: open it with open(path, 'rb')"
    elif callable(getattr(f, "readable", None)) and not f.readable():
        problem = "is not open for reading. Fix: open it with open(path, 'rb')"
    elif callable(getattr(f, "seekable", None)) and not f.seekable():
        problem = (
            "cannot seek (a pipe or a socket?), and torch.load needs to; read it into "
            "memory first: tj.load(io.BytesIO(stream.read()))"
        )
    if problem is not None:
        raise CheckpointError(f"{_describe(f)} {problem}")
    return f  # type: ignore[no-any-return]


def import_torch(name: str) -> Any:
    """torch, or the library's error saying that reading ``name`` needs it."""
    try:
        import torch
    except ImportError as err:
        raise CheckpointError(
            f"{name} is a PyTorch checkpoint, and reading one needs torch, which is not "
            "installed. Fix: pip install torch (safetensors files load without it)"
        ) from err
    return torch


#: torch's words for a global whose module ``weights_only`` blocks outright.
_BLOCKED_MODULE = re.compile(r"Trying to load unsupported GLOBAL \S+ whose module \S+ is blocked\.")


def unreadable(name: str, error: Exception) -> CheckpointError:
    """``torch.load``'s failure to read ``name`` as the library's error, its reason kept."""
    message = " ".join(_ANSI.sub("", str(error)).split())
    # weights_only failures wrap the reason in several sentences of general advice.
    reason = message.partition("WeightsUnpickler error:")[2].partition("Check the documentation")[0]
    reason = clipped(reason.strip() or message or type(error).__name__)
    blocked = _BLOCKED_MODULE.search(message)
    if blocked:  # a global from a module weights_only never allows (os, posix, subprocess)
        reason = blocked.group(0)
    if "Unsupported global" in reason or blocked:
        fix = (
            ""
            if blocked
            else " Fix: allowlist the classes it names if you trust them "
            "(torch.serialization.add_safe_globals([...])); a name that is no class (cut "
            "short, garbled) means the file is damaged: copy or download it again"
        )
        return CheckpointError(
            f"{name} holds objects that torch.load(weights_only=True) refuses to unpickle, "
            f"so nothing in it was run. {reason}{fix}"
        )
    return CheckpointError(
        f"{name} is not a readable PyTorch checkpoint (corrupted, truncated or not a "
        f"checkpoint): torch.load(weights_only=True) raised {type(error).__name__}: "
        f"{reason.rstrip('. ')}. Fix: copy or download the file again (its size and checksum "
        "should match the source's), or save it again with torch.save"
    )
