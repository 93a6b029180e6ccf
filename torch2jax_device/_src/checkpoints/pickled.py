"""A PyTorch (pickled) checkpoint onto devices: ``torch.load``, then its tensors as arrays.

``torch.load(weights_only=True)`` reads the file with a ``LocationHook`` as its
``map_location``, so every storage stays on the CPU; the tensors of the unpickled object
graph then become committed JAX arrays without copies where the memory allows
(``interop.to_jax``), one transfer per target device, and are put back in place:
containers keep their identity, type and attributes (a state dict's ``_metadata``), so
sharing and cycles come out as ``torch.load`` returns them. Only tuples, which cannot
change, are rebuilt when they hold tensors.
"""

from __future__ import annotations

import contextlib
import io
import struct
import zipfile
from collections.abc import Callable
from typing import IO, Any

import jax
import numpy as np

from .. import dtypes
from ..device import resolve
from ..errors import (
    CheckpointError,
    ConversionError,
    DeviceUnavailableError,
    DTypeError,
    Torch2JaxDeviceError,
)
from ..interop import ALIGNMENT, to_jax
from . import transfer
from .format import TensorBudget
from .map_location import LocationHook, MapLocationRule
from .messages import loading, shown
from .object_graph import PLAIN, Graph, TooManyTensorsError, fields, has_fields
from .progress import Progress
from .source import Source, import_torch, unreadable

__all__ = ["HostTensors", "load_pickled", "numpy_dtype", "rebuilt", "settle", "tensor_error"]

# Copies a load may make beyond the tensor data the file holds: this much, plus
# _COPY_FACTOR times that data. Views repeating their storage (stride 0), sparse tensors
# made dense and many unaligned views of one storage cost memory the file does not; a
# file crafted to exhaust memory that way is refused before anything is allocated.
_COPY_ALLOWANCE_BYTES = 2**30
_COPY_FACTOR = 4
# Entries of a checkpoint's zip besides its storages: data.pkl, version, byteorder,
# .data/serialization_id, .format_version, .storage_alignment, and room for more.
_OTHER_ENTRIES = 64
# The bytes of a zip's end-of-directory record before its comment.
_END_RECORD = 22
# The MS-DOS "directory" bit of a zip entry's external attributes: miniz (torch's zip
# reader) extracts nothing for an entry so marked, and torch.load then returns the
# storage's uninitialized memory as its data.
_DOS_DIRECTORY = 0x10
# The fewest bytes a zip entry takes: its directory record (46) and local header (30).
_ENTRY_BYTES = 76
# What to do with a tensor JAX cannot hold.
_CONVERT_FIX = (
    "Fix: load it with torch.load(path, weights_only=True) and convert it to a dtype and "
    "layout JAX has (tensor.to(torch.complex64), tensor.to(torch.float32), ...) before "
    "tj.to_jax"
)


def load_pickled(
    source: Source,
    rule: MapLocationRule,
    mmap: bool,
    progress: bool | None,
    pickle_load_args: dict[str, Any],
    budget: TensorBudget,
) -> Any:
    """The checkpoint ``source`` holds, each tensor a committed array where ``rule`` says.

    Its distinct tensors (each view counts: each becomes an array) are counted against
    ``budget`` before any is converted.

    Raises:
        CheckpointError: as ``tj.load`` documents; ``OSError`` for a path, as torch.
    """
    torch = import_torch(source.name)
    check_expansion(source, budget)
    hook = LocationHook(rule, torch.UntypedStorage)
    with contextlib.ExitStack() as stack:
        bar = stack.enter_context(
            Progress(source.label(), source.size(), False if mmap else progress)
        )
        # A path: the file the source opened, by a name that reaches that very file.
        opened: Any = source.by_name() if source.file is None else source.file
        if bar.enabled:
            if source.file is None:
                opened = stack.enter_context(open(opened, "rb"))
            opened = _CountingReader(opened, bar.advance)
        try:
            checkpoint = torch.load(
                opened, map_location=hook, weights_only=True, mmap=mmap, **pickle_load_args
            )
        except Exception as err:
            if err is hook.failure or isinstance(err, Warning):
                raise  # the caller's own error, or a warning their filters made one
            if isinstance(err, OSError) and source.file is None:
                raise  # the file system's own error about a path, as torch raises it
            raise unreadable(source.name, err) from err
        return rebuilt(source.name, checkpoint, torch, budget, _Conversion(source, hook, torch))


def check_expansion(source: Source, budget: TensorBudget) -> None:
    """Refuse a zip checkpoint whose entries expand past the copy bound, or that has more
    entries than ``budget`` has tensors left (each storage is an entry, and each storage
    is at least one tensor), counted from the zip's end record before its directory is
    read (600,000 empty entries in 68 MB made a load take 361 MiB and 17 s).

    ``torch.save`` stores entries uncompressed, but torch's reader inflates compressed
    ones: a 1 MB file of a deflated storage would make ``torch.load`` (and so ``tj.load``)
    allocate a gigabyte before any check could run. The zip's directory says what each
    entry expands to; the total may be 1 GiB plus ``_COPY_FACTOR`` times the file, the
    bound copies are held to.

    A directory that says what cannot be (a file record marked as a folder, a stored
    record whose sizes differ: one flipped bit or byte) is refused as damage: torch's
    reader would return uninitialized memory for the first.

    Raises:
        CheckpointError: the entries expand past that, or are too many, or more than the
            file can hold (a damaged end record), or the directory says what cannot be
            (``_zip_damage``).
    """
    if source.kind != "zip":
        return
    file: Any = source.handle if source.handle is not None else source.file
    size = source.size()  # from where the checkpoint starts, before anything moves
    start = file.tell()
    try:
        entries = _zip_entries(file)
        if entries <= budget.left + _OTHER_ENTRIES:
            with zipfile.ZipFile(file) as archive:
                infos = archive.infolist()
                expanded = sum(info.file_size for info in infos)
                damage = _zip_damage(infos, size)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError):
        return  # torch.load reports a broken or unsupported archive in its own words
    finally:
        file.seek(start)
    if entries * _ENTRY_BYTES > size:
        raise CheckpointError(
            f"{source.name} is not a readable PyTorch checkpoint (corrupted): its zip's end "
            f"record counts {entries:,} entries, more than its {size:,} bytes can "
            f"hold ({_ENTRY_BYTES} bytes each at least). Fix: copy or download the file again "
            "(its size and checksum should match the source's), or save it again with "
            "torch.save"
        )
    if entries > budget.left + _OTHER_ENTRIES:
        raise budget.refusal(
            source.name, f"{entries - _OTHER_ENTRIES:,} or more", " (its zip's entries)"
        )
    if damage:
        raise CheckpointError(
            f"{source.name} is not a readable PyTorch checkpoint (corrupted): its zip "
            f"directory {damage}. Fix: copy or download the file again (its size and "
            "checksum should match the source's), or save it again with torch.save"
        )
    allowed = _COPY_ALLOWANCE_BYTES + _COPY_FACTOR * source.size()
    if expanded > allowed:
        raise CheckpointError(
            f"{source.name} holds zip entries that expand to {expanded:,} bytes from a "
            f"{source.size():,}-byte file, more than the {allowed:,} a load may allocate (1 "
            f"GiB plus {_COPY_FACTOR}x the file): torch.save never compresses them, a file "
            "crafted to exhaust memory does, and torch.load would inflate them all first. If "
            "you trust the file: tj.to_device(torch.load(path, weights_only=True), device)"
        )


def _zip_damage(infos: list[zipfile.ZipInfo], size: int) -> str:
    """What the zip directory ``infos`` of a ``size``-byte file says that cannot be, or "".

    A file record marked as a folder: torch's reader extracts nothing into it and returns
    the storage's uninitialized memory. A stored (uncompressed, as ``torch.save`` writes)
    record whose two sizes differ, or any record longer than the file: a flipped byte,
    which the expansion bound would otherwise report as a file crafted to exhaust memory.
    """
    for info in infos:
        if info.external_attr & _DOS_DIRECTORY and not info.filename.endswith("/"):
            return (
                f"marks the record {shown(info.filename)} as a folder, so torch.load would "
                "read nothing into it and return uninitialized memory as its values"
            )
        stored = info.compress_type == zipfile.ZIP_STORED
        if info.compress_size > size or (stored and info.file_size != info.compress_size):
            return (
                f"says the record {shown(info.filename)} holds {info.file_size:,} bytes "
                f"({info.compress_size:,} as stored) in a {size:,}-byte file"
            )
    return ""


def _zip_entries(file: IO[bytes]) -> int:
    """How many entries a zip's directory lists, read from its end record (and the ZIP64
    one it points to) alone; 0 where there is none (``zipfile`` then says what is wrong)."""
    size = file.seek(0, io.SEEK_END)
    tail_start = max(0, size - _END_RECORD - 0xFFFF)  # the record, then a comment
    file.seek(tail_start)
    tail = file.read(size - tail_start)
    at = tail.rfind(b"PK\x05\x06", 0, max(0, len(tail) - _END_RECORD + 4))
    if at < 0:
        return 0
    entries: int = struct.unpack_from("<H", tail, at + 10)[0]
    locator = at - 20  # a ZIP64 archive (past 65,535 entries) puts its locator first
    if locator >= 0 and tail[locator : locator + 4] == b"PK\x06\x07":
        offset = struct.unpack_from("<Q", tail, locator + 8)[0]
        if offset > size:  # a damaged locator: zipfile says what is wrong
            return entries
        file.seek(offset)
        record = file.read(56)
        if len(record) == 56 and record[:4] == b"PK\x06\x06":
            entries = struct.unpack_from("<Q", record, 32)[0]
    return entries


class _CountingReader(io.RawIOBase):
    """A read-only view of an open file that reports each byte read (``torch.load``'s bar)."""

    def __init__(self, file: IO[bytes], advance: Callable[[int], None]) -> None:
        super().__init__()
        self._file = file
        self._advance = advance

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._file.read(len(buffer))
        buffer[: len(data)] = data
        self._advance(len(data))
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()


def rebuilt(
    name: str,
    root: Any,
    torch: Any,
    budget: TensorBudget,
    arrays: Callable[[Graph], dict[int, Any]],
) -> Any:
    """The checkpoint ``root`` (unpickled from ``name``) with every tensor an array.

    Its distinct tensors are found (``Graph``: without recursion, each once) and counted
    against ``budget``; ``arrays(graph)`` gives each one's array by ``id``. They are put
    back in place: containers keep their identity, type and attributes, tuples holding
    them are rebuilt with their type.

    Raises:
        CheckpointError: more tensors than ``budget`` allows, a tensor as a dict key or
            set element, or a tuple subclass that cannot be rebuilt (the message names
            the file and the place).
    """
    try:
        graph = Graph(root, torch, budget.left)
    except TooManyTensorsError:
        raise budget.refusal(name, f"more than {budget.left:,}") from None
    budget.spend(len(graph.tensors), name)
    new = arrays(graph)
    _Rebuild(name, graph, new).run()
    return new.get(id(root), root)


class _Conversion:
    """Tensors of an unpickled checkpoint -> committed JAX arrays where its hook says."""

    def __init__(self, source: Source, hook: LocationHook, torch: Any) -> None:
        self._name = source.name
        self._path = source.path
        self._hook = hook
        self._torch = torch
        self._devices: dict[Any, jax.Device] = {}
        self._hosts = HostTensors(torch, hook.data_bytes)

    def __call__(self, graph: Graph) -> dict[int, Any]:
        """``id(tensor) -> array`` for every tensor, moved in one transfer per device.

        On any failure the conversions and transfers already started are waited for
        before the error propagates: an array dropped while its copy is in flight can
        abort the interpreter at exit.
        """
        cpu = resolve("cpu")
        by_target: dict[jax.Device, list[tuple[Any, jax.Array]]] = {}
        started: list[jax.Array] = []
        try:
            for tensor in graph.tensors:
                try:
                    host = self._hosts(tensor)
                    location, target = self._where(tensor)
                    array = to_jax(host)
                    started.append(array)
                    placed = self._device(location, target)
                except (DeviceUnavailableError, Warning):
                    raise  # a warning the caller's filters made an error stays what it is
                except Exception as err:
                    raise tensor_error(self._name, graph, tensor, err) from err
                by_target.setdefault(placed, []).append((tensor, array))
            new: dict[int, Any] = {}
            for target, pairs in by_target.items():
                arrays = [array for _, array in pairs]
                what = loading(len(pairs), self._path, self._name)
                moved = arrays if target == cpu else transfer.send(arrays, target, what)
                started.extend(moved)
                new.update(
                    (id(tensor), array) for (tensor, _), array in zip(pairs, moved, strict=True)
                )
            jax.block_until_ready(list(new.values()))
        except BaseException:
            settle(started)
            raise
        return new

    def _where(self, tensor: Any) -> tuple[str, Any]:
        """The location ``tensor`` was saved at, and where the hook says it goes."""
        torch = self._torch
        if tensor.layout == torch.strided:
            values = tensor
        else:
            values = tensor._values() if tensor.layout == torch.sparse_coo else tensor.values()
        found = self._hook.targets.get(values.untyped_storage()._cdata)
        return found if found is not None else self._hook.unrecorded(str(tensor.device))

    def _device(self, location: str, target: Any) -> jax.Device:
        if target not in self._devices:
            try:
                self._devices[target] = resolve(target)
            except DeviceUnavailableError as err:
                raise DeviceUnavailableError(
                    f"cannot place the tensors {self._name} saved on {shown(location)}: {err} Or "
                    f"load them onto the CPU: map_location='cpu' (or {{{shown(location)}: 'cpu'}})."
                ) from err
        return self._devices[target]


class HostTensors:
    """Tensors of a checkpoint as dense tensors of JAX dtypes, their copies bounded.

    ``data_bytes`` is the tensor data the file holds: the copies made (dense sparse
    tensors, views that repeat their data, dequantized tensors) may total 1 GiB plus
    ``_COPY_FACTOR`` times that, as a file crafted to exhaust memory would ask for more.
    """

    def __init__(self, torch: Any, data_bytes: int) -> None:
        self._torch = torch
        self._data_bytes = data_bytes
        self._dtypes: dict[Any, tuple[int, bool]] = {}
        self._copied = 0
        self._allowed = _COPY_ALLOWANCE_BYTES + _COPY_FACTOR * data_bytes

    def __call__(self, tensor: Any) -> Any:
        """A dense tensor of a JAX dtype holding ``tensor``'s values.

        Raises:
            CheckpointError: JAX cannot hold it, or the copies would pass the bound (the
                reason, for ``tensor_error``).
        """
        torch = self._torch
        if tensor.is_nested:
            raise CheckpointError(
                "it is a nested (jagged) tensor, which JAX cannot hold. Fix: load it with "
                "torch.load and convert its parts (tensor.unbind()) or a padded copy "
                "(tensor.to_padded_tensor(0.0)) with tj.to_jax"
            )
        if tensor.is_meta:
            raise CheckpointError(
                f"it is a meta tensor (shape {tuple(tensor.shape)}, {tensor.dtype}) with no "
                "data, and JAX has no meta device. Fix: describe it with "
                "jax.ShapeDtypeStruct(shape, dtype), or save real data"
            )
        if tensor.is_quantized:
            self._charge(tensor.numel() * 4, "dequantized to float32")
            return tensor.dequantize()
        itemsize, kept = self._dtype(tensor.dtype)
        size = tensor.numel() * itemsize
        if tensor.layout != torch.strided:
            self._charge(size, f"a {tensor.layout} tensor made dense")
            return tensor.to_dense()
        if tensor.is_conj() or tensor.is_neg():
            self._charge(size, "its conjugate or negative bit resolved")
            return tensor.resolve_conj().resolve_neg()
        if not (kept and tensor.is_contiguous() and tensor.data_ptr() % ALIGNMENT == 0):
            self._charge(size, "copied")
        return tensor

    def _dtype(self, dtype: Any) -> tuple[int, bool]:
        """The item size a torch dtype has in JAX, and whether JAX keeps it (no narrowing)."""
        if dtype not in self._dtypes:
            source = numpy_dtype(dtype)
            target = dtypes.canonical(source)
            self._dtypes[dtype] = (target.itemsize, target == source)
        return self._dtypes[dtype]

    def _charge(self, nbytes: int, how: str) -> None:
        self._copied += nbytes
        if self._copied > self._allowed:
            raise CheckpointError(
                f"it would be {how}, bringing the memory this load allocates beyond the "
                f"file's tensor data to {self._copied:,} bytes, over the "
                f"{self._allowed:,} allowed (1 GiB plus {_COPY_FACTOR}x the "
                f"{self._data_bytes:,} bytes of data in the file). Views that repeat "
                "their data (stride 0), sparse tensors made dense and many copies of one "
                "storage cost memory the file does not hold, as a file crafted to exhaust "
                "memory asks. If you trust the file: torch.load(path, weights_only=True), "
                "then convert what you need with tj.to_device"
            )


def tensor_error(
    name: str, graph: Graph, tensor: Any, error: Exception
) -> CheckpointError | ConversionError:
    """Why ``tensor`` of the checkpoint ``name`` cannot become an array: its place in the
    graph, the reason (``error``'s, without its own fix, which is for another context)
    and the fix for a checkpoint.

    A ``ConversionError`` (int64 values past the 32-bit range without x64) stays one,
    with its own fix, as ``tj.load_file`` and ``tj.to_device`` raise it: the checkpoint
    is fine, and x64 or values in range are the fix.
    """
    if isinstance(error, ConversionError):
        return ConversionError(
            f"{name}: the tensor at {graph.path(tensor)} cannot be loaded: {error}"
        )
    if isinstance(error, CheckpointError):
        reason = str(error)
    else:
        happened = (
            str(error).partition(" Fix:")[0]
            if isinstance(error, Torch2JaxDeviceError)
            else (f"converting it raised {type(error).__name__}: {error}")
        )
        reason = f"{happened.rstrip('. ')}. {_CONVERT_FIX}"
    return CheckpointError(f"{name}: the tensor at {graph.path(tensor)} cannot be loaded: {reason}")


def numpy_dtype(dtype: Any) -> np.dtype[Any]:
    """The NumPy dtype of the torch dtype of a checkpoint's tensor, as it is in the file.

    Raises:
        CheckpointError: JAX has no such dtype (``torch.bits8``, packed float4, ...); the
            message is the reason ``tensor_error`` gives, with the fix.
    """
    try:
        return dtypes.array_dtype(dtype)
    except DTypeError:
        raise CheckpointError(
            f"its dtype, {dtype}, has no JAX dtype whose data JAX {jax.__version__} can hold "
            f"(NumPy's, bfloat16 and the float8 kinds). {_CONVERT_FIX}"
        ) from None


class _Rebuild:
    """Arrays put in place of the tensors of a checkpoint's object graph."""

    def __init__(self, name: str, graph: Graph, new: dict[int, Any]) -> None:
        self._name, self._graph, self._new = name, graph, new

    def run(self) -> None:
        self._rebuild_tuples()
        for container in self._graph.containers:
            if not isinstance(container, tuple):
                self._substitute(container)

    def _rebuild_tuples(self) -> None:
        """Rebuild the tuples holding converted objects, inner ones first.

        Tuples cannot form a cycle among themselves (only through a mutable container,
        which keeps its identity), so each needs only its child tuples rebuilt first.
        """
        tuples = {id(obj): obj for obj in self._graph.containers if isinstance(obj, tuple)}
        done: set[int] = set()
        for start in tuples.values():
            stack: list[tuple[tuple[Any, ...], bool]] = [(start, False)]
            while stack:
                node, children_done = stack.pop()
                if children_done:
                    items = [self._new.get(id(item), item) for item in node]
                    if any(item is not old for item, old in zip(items, node, strict=True)):
                        self._new[id(node)] = self._tuple_like(node, items)
                    continue
                if id(node) in done:
                    continue
                done.add(id(node))
                stack.append((node, True))
                stack.extend((item, False) for item in node if id(item) in tuples)

    def _tuple_like(self, old: tuple[Any, ...], items: list[Any]) -> Any:
        cls = type(old)
        if cls is tuple:
            return tuple(items)
        if hasattr(cls, "_make"):  # namedtuple
            return cls._make(items)
        raise CheckpointError(
            f"{self._name}: the {cls.__name__} at {self._graph.path(old)} holds tensors, and a "
            "tuple subclass cannot be rebuilt with JAX arrays in it. Load it with torch.load"
        )

    def _substitute(self, obj: Any) -> None:
        """Put the converted objects into the mutable container ``obj``."""
        if isinstance(obj, dict):
            for key, value in list(obj.items()):
                if id(key) in self._new:
                    raise self._unhashable(obj, "dict key")
                if id(value) in self._new:
                    obj[key] = self._new[id(value)]
        elif isinstance(obj, list):
            for index, item in enumerate(obj):
                if id(item) in self._new:
                    obj[index] = self._new[id(item)]
        elif isinstance(obj, (set, frozenset)):
            if any(id(element) in self._new for element in obj):
                raise self._unhashable(obj, "set element")
        if type(obj) in PLAIN or not has_fields(obj):
            return
        attributes = getattr(obj, "__dict__", None)
        for name, value in list(fields(obj)):
            if id(value) in self._new:
                if attributes is not None and name in attributes:
                    attributes[name] = self._new[id(value)]
                else:
                    object.__setattr__(obj, name, self._new[id(value)])

    def _unhashable(self, obj: Any, role: str) -> CheckpointError:
        return CheckpointError(
            f"{self._name}: a {role} in {self._graph.path(obj)} is a tensor (or holds one), and "
            "JAX arrays cannot be hashed, so it cannot become one. Load it with torch.load "
            "and keep it a torch tensor"
        )


def settle(arrays: list[jax.Array]) -> None:
    """Wait for ``arrays``' conversions and transfers, whatever became of them."""
    for array in arrays:
        with contextlib.suppress(Exception):  # a failed transfer has nothing in flight
            array.block_until_ready()
