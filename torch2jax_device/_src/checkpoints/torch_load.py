"""``torch.load`` for JAX users: checkpoints as JAX arrays, ``map_location`` included.

``.safetensors`` files are read natively; PyTorch ``.pt`` / ``.bin`` checkpoints through
``torch.load(weights_only=True)`` (torch is imported only for them), whose tensors become
JAX arrays without copies where the memory allows. ``map_location`` is classified once,
by ``MapLocationRule``, for both formats.

The unpickled checkpoint is an object graph, not a tree: objects can be shared and can
refer to themselves, and nesting can be deeper than Python's recursion limit. It is
walked without recursion, each object once, and converted in place: containers keep
their identity, type and attributes (a state dict's ``_metadata``), so sharing and
cycles come out as ``torch.load`` returns them. Only tuples, which cannot change, are
rebuilt when they hold tensors.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Callable, Iterator
from typing import IO, Any, cast

import jax
import numpy as np

from .. import dtypes
from ..detect import is_torch_device
from ..device import Device, DeviceLike, resolve
from ..errors import (
    CheckpointError,
    DeviceTypeError,
    DeviceUnavailableError,
    Torch2JaxDeviceError,
    UnsupportedOperationError,
)
from ..interop import ALIGNMENT, to_jax
from . import transfer
from .progress import Progress
from .safetensors import PathLike, load_file

__all__ = ["FileLike", "MapLocation", "MapLocationRule", "load"]

#: What ``map_location`` accepts, as in ``torch.load``: a device, a dict from saved
#: location tags (``"cuda:0"``) to location strings, or a callable ``(storage, location)``.
MapLocation = DeviceLike | dict[Any, str] | Callable[[Any, str], Any] | None
#: What ``tj.load`` reads: a path or a binary file object open for reading, as ``torch.load``.
FileLike = PathLike | IO[bytes]

# Copies a load may make beyond the tensor data the file holds: this much, plus
# _COPY_FACTOR times that data. Views repeating their storage (stride 0), sparse tensors
# made dense and many unaligned views of one storage cost memory the file does not; a
# file crafted to exhaust memory that way is refused before anything is allocated.
_COPY_ALLOWANCE_BYTES = 2**30
_COPY_FACTOR = 4
# What the unpickler may produce that holds no tensors and needs no walking.
_ATOMS = frozenset({str, bytes, bytearray, int, float, bool, complex, type(None)})
# Containers whose instances have no attributes of their own.
_PLAIN = frozenset({dict, list, tuple, set, frozenset})
_ZIP_MAGIC = b"PK\x03\x04"


def load(
    f: FileLike,
    map_location: MapLocation = None,
    pickle_module: Any = None,
    *,
    weights_only: bool | None = None,
    mmap: bool | None = None,
    progress: bool | None = None,
    **pickle_load_args: Any,
) -> Any:
    """Equivalent to `torch.load`.

    Loads a checkpoint as ``torch.load(f, map_location, weights_only=True)`` does, with
    every tensor a committed JAX array. ``.safetensors`` files are read natively (see
    [`tj.load_file`][torch2jax_device.load_file]); PyTorch ``.pt`` / ``.bin`` files
    through ``torch.load(weights_only=True)``, which needs torch and never runs code
    from the file. Their tensors become JAX arrays without copies where the memory
    allows (``tj.to_jax``); everything else (ints, strings, nested dicts and lists such
    as nanoGPT's ``{'model', 'optimizer', 'iter_num', 'model_args'}``) is kept as
    ``torch.load`` returns it: containers keep their type and attributes (a state
    dict's ``_metadata`` with its BatchNorm versions), shared objects stay shared (a
    tensor saved twice is one array), and self-references and nesting of any depth
    load as they were saved.

    Tensors go where ``torch.load`` would put them: without ``map_location``, where they
    were saved (``cuda:0`` stays ``cuda:0``, and fails if there is no such GPU, as in
    torch; a safetensors file counts as saved on the CPU). ``map_location`` takes the
    forms ``torch.load`` takes, and refuses the ones it refuses:

    * a device: a string (``"cpu"``, ``"cuda:1"``), a ``torch.device``, a ``tj.device``
      or a ``jax.Device``: everything goes there;
    * a dict from saved location tags to location strings (``{"cuda:0": "cpu"}``); tags
      it does not list stay where they were saved;
    * a callable ``(storage, location) -> storage | None``, called with each CPU storage
      and its saved location: the tensor goes where the returned storage is, or to the
      saved location if it returns ``None`` (PyTorch checkpoints only).

    Note:
        Sparse tensors (COO, CSR, CSC, BSR, BSC) load **dense**, and quantized tensors
        **dequantized** to float32 (``tensor.dequantize()``): JAX has neither. Tensors
        JAX cannot hold at all (nested/jagged, ``meta`` tensors without data,
        ``complex32``, the ``quint``/``bits`` kinds) raise ``tj.CheckpointError`` naming
        their place in the checkpoint. Copies a load makes beyond the data in the file
        (dense sparse tensors, views that repeat their data) are bounded by 1 GiB plus
        4x that data: more is refused before it is allocated, as a file crafted to
        exhaust memory would ask. ``weights_only=False`` and ``pickle_module`` are
        refused: see Raises. ``map_location`` is checked before the file is read (torch
        checks it at the first tensor), and accepts ``tj.device`` spellings torch does
        not (``"gpu"``, ``"cpu:0"``).

    Args:
        f: A path (``str`` / ``os.PathLike``) or a binary file object open for reading
            and seekable (``open(path, "rb")``, ``io.BytesIO``), read from its current
            position, as ``torch.load`` reads it. Safetensors files need a path.
        map_location: Where tensors go, as above.
        pickle_module: Must be ``None``: the unpickler is always torch's weights-only one.
        weights_only: ``True`` or ``None`` (the same, as in torch since 2.6).
        mmap: Memory-map the file instead of reading it, as ``torch.load(mmap=True)``
            (needs a path to a zip checkpoint, torch's format since 1.6). On the CPU
            the arrays then use the mapped file in place: pages are read when first
            touched, and RAM holds only what was touched. Do not change the file while
            they live. No effect on safetensors files, which are read once into
            aligned memory.
        progress: Draw a progress bar on stderr (see [`tj.load_file`][torch2jax_device.load_file]);
            never with ``mmap=True``, which reads nothing up front.
        **pickle_load_args: ``encoding=`` for checkpoints pickled by Python 2, passed to
            torch's unpickler (torch warns that it is ignored; it is not).

    Returns:
        The checkpoint, with every tensor replaced by a committed JAX array.

    Raises:
        CheckpointError: the file is corrupted, truncated or not a checkpoint; holds
            objects ``weights_only=True`` refuses (nothing from it is executed; the
            message says how to allowlist classes you trust) or tensors JAX cannot
            hold; ``f`` is not a readable, seekable binary file; or torch is needed
            and not installed. The message names the file and, for a tensor, its path
            in the checkpoint (``['model']['0.weight']``).
        DeviceUnavailableError: a tensor's device does not exist here, e.g. a checkpoint
            saved on ``cuda:0`` loaded on a machine without one and no ``map_location``
            (torch raises ``RuntimeError``; this is one).
        DeviceTypeError: ``map_location`` is none of the forms above (torch raises
            ``TypeError``; this is one): an ``int``, a dict whose values are not
            strings, a callable returning something other than a storage or ``None``,
            or a callable for a safetensors file (which has no storages to pass it).
        InvalidDeviceError: ``map_location`` names no device (``"bogus"``).
        UnsupportedOperationError: ``weights_only=False``, a ``pickle_module``,
            ``mmap=True`` on a legacy (pre-zip) checkpoint, or unpickler arguments
            other than ``encoding`` (torch raises ``RuntimeError`` or ``TypeError``).
        OSError: the path cannot be opened (``FileNotFoundError``, ...), as in torch.

    Examples:
        >>> import io, os, tempfile
        >>> import torch
        >>> import torch2jax_device as tj
        >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
        >>> torch.save({"model": {"w": torch.ones(2)}, "iter_num": 7}, path)
        >>> checkpoint = tj.load(path, map_location="cpu", weights_only=True)
        >>> checkpoint["iter_num"], checkpoint["model"]["w"].device
        (7, CpuDevice(id=0))
        >>> buffer = io.BytesIO()
        >>> torch.save(torch.nn.LayerNorm(2).state_dict(), buffer)
        >>> _ = buffer.seek(0)
        >>> state = tj.load(buffer)
        >>> dict(state._metadata), state["weight"].tolist()
        ({'': {'version': 1}}, [1.0, 1.0])
    """
    from . import sharded  # a Sharding, a Mesh, a ShardingRule, or an index of shards

    source = _Source(f)
    _check_arguments(source.name, weights_only, pickle_module, pickle_load_args)
    if source.path is not None and sharded.handles_checkpoint(source.path, map_location):
        return sharded.load(source.path, map_location, progress=progress)
    rule = MapLocationRule(map_location)
    if source.kind == "safetensors":
        if source.path is None:
            raise CheckpointError(
                f"{source.name} holds a safetensors file, which tj.load reads from a path "
                "only: pass the path (tj.load(path) or tj.load_file(path))"
            )
        return load_file(source.path, rule.safetensors_device(source.name), progress=progress)
    if mmap and source.path is None:
        raise CheckpointError(
            f"mmap=True maps a file by its path, and {source.name} is a file object (torch "
            "raises ValueError here too). Fix: tj.load(path, mmap=True)"
        )
    if mmap and source.kind == "legacy":
        raise UnsupportedOperationError(
            f"{source.name} is in torch's legacy (pre-zip) format, which cannot be "
            "memory-mapped (torch raises RuntimeError here too). Fix: load it without "
            "mmap=True, or re-save it once with torch.save(torch.load(path), path)"
        )
    return _load_torch(source, rule, bool(mmap), progress, pickle_load_args)


def _check_arguments(
    name: str, weights_only: Any, pickle_module: Any, pickle_load_args: dict[str, Any]
) -> None:
    if weights_only is not None and not weights_only:
        raise UnsupportedOperationError(
            f"tj.load({name}, weights_only=False): tj.load never unpickles arbitrary "
            "objects, which can run code from the file. If the checkpoint holds classes "
            "you trust, allowlist them and keep weights_only=True: "
            "torch.serialization.add_safe_globals([MyClass]), or "
            "`with torch.serialization.safe_globals([MyClass]): tj.load(...)`. For a file "
            "you trust entirely: tj.to_device(torch.load(path, weights_only=False), device)"
        )
    if pickle_module is not None:
        raise UnsupportedOperationError(
            f"tj.load({name}, pickle_module=...): tj.load always uses torch's weights-only "
            "unpickler, which takes no pickle_module (torch raises RuntimeError: 'Can not "
            "safely load weights when explicit pickle_module is specified'). Drop it"
        )
    unknown = sorted(set(pickle_load_args) - {"encoding"})
    if unknown:
        raise UnsupportedOperationError(
            f"tj.load({name}) got {', '.join(f'{key}=' for key in unknown)}: torch's "
            "weights-only unpickler takes only encoding= (torch raises TypeError for the "
            "others). Drop them"
        )


class _Source:
    """What ``tj.load`` was given: a path or a binary file object, checked, and its format.

    ``kind`` is ``"safetensors"``, ``"zip"`` (torch's format since 1.6) or ``"legacy"``.
    A file object is read from its current position, which is restored.
    """

    def __init__(self, f: Any) -> None:
        self.path: str | None = None
        self.file: IO[bytes] | None = None
        if isinstance(f, (str, os.PathLike)):
            path = os.fspath(f)
            self.path = path if isinstance(path, str) else os.fsdecode(path)
            self.name = repr(self.path)
            with open(self.path, "rb") as file:
                head = file.read(9)
            suffix_says = self.path.endswith(".safetensors")
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
        problem = "is closed"
    elif isinstance(f, io.TextIOBase):
        problem = "is open in text mode; open it with open(path, 'rb')"
    elif callable(getattr(f, "readable", None)) and not f.readable():
        problem = "is not open for reading; open it with open(path, 'rb')"
    elif callable(getattr(f, "seekable", None)) and not f.seekable():
        problem = (
            "cannot seek (a pipe or a socket?), and torch.load needs to; read it into "
            "memory first: tj.load(io.BytesIO(stream.read()))"
        )
    if problem is not None:
        raise CheckpointError(f"{_describe(f)} {problem}")
    return f  # type: ignore[no-any-return]


class MapLocationRule:
    """One ``map_location``, classified once: a device, a dict of locations or a callable.

    The forms ``torch.load`` takes, checked before anything is read; ``tj.device``
    objects, ``jax.Device`` objects and the ``tj.device`` spellings torch lacks
    (``"gpu"``, ``"cpu:0"``) are accepted as devices too.

    Raises:
        DeviceTypeError: ``map_location`` is none of the forms ``torch.load`` takes.
        InvalidDeviceError: a device string names no device.
    """

    def __init__(self, map_location: MapLocation) -> None:
        self.device: Device | jax.Device | None = None
        self.mapping: dict[Any, Device] | None = None
        self.function: Callable[[Any, str], Any] | None = None
        # Devices first: a tj.device is callable (its decorator form).
        if isinstance(map_location, (str, Device)) or is_torch_device(map_location):
            self.device = Device(map_location)
        elif isinstance(map_location, jax.Device):
            self.device = map_location
        elif isinstance(map_location, dict):
            self.mapping = {key: _location(key, value) for key, value in map_location.items()}
        elif callable(map_location):
            self.function = map_location
        elif map_location is not None:
            raise DeviceTypeError(_wrong_form(map_location))

    def target(self, location: str) -> Any:
        """Where a tensor saved at ``location`` goes, for the device and dict forms."""
        if self.device is not None:
            return self.device
        if self.mapping is not None:
            return self.mapping.get(location, location)
        return location

    def safetensors_device(self, name: str) -> DeviceLike:
        """The device a safetensors file goes to: its tensors count as saved on ``cpu``."""
        if self.function is not None:
            raise DeviceTypeError(
                f"a callable map_location cannot place {name}: it receives torch storages, "
                "and a safetensors file has none. Pass a device, e.g. "
                "tj.load(path, map_location='cuda:0')"
            )
        return cast(DeviceLike, self.target("cpu"))


def _location(key: Any, value: Any) -> Device:
    """A dict ``map_location`` value: a location string, as ``torch.load`` requires."""
    if not isinstance(value, str):
        is_device = isinstance(value, (Device, jax.Device)) or is_torch_device(value)
        hint = f"{{{key!r}: {str(Device(value))!r}}}" if is_device else "a string"
        raise DeviceTypeError(
            f"map_location={{{key!r}: {value!r}}}: the values of a map_location dict are "
            f"location strings such as 'cpu' or 'cuda:1', not {type(value).__name__} "
            f"(torch raises TypeError: expected string). Write {hint}, or pass one device "
            "for every tensor: map_location=device"
        )
    return Device(value)


def _wrong_form(map_location: Any) -> str:
    message = (
        f"map_location={map_location!r:.80} is not a form torch.load takes (torch raises "
        "TypeError): it must be a device ('cpu', 'cuda:1', torch.device(...), "
        "tj.device(...)), a dict of location strings ({'cuda:0': 'cpu'}) or a callable "
        f"(storage, location) -> storage, not {type(map_location).__name__}"
    )
    if isinstance(map_location, int) and not isinstance(map_location, bool):
        message += (
            f". An int is not a device here: write map_location='cuda:{map_location}' "
            f"(or tj.device({map_location}) for accelerator {map_location})"
        )
    return message


class _LocationHook:
    """``torch.load``'s ``map_location``: keeps storages on the CPU, records their targets.

    torch calls it with each storage (on the CPU) and its saved location tag. Data stays
    on the CPU and is moved once, after conversion to JAX, to the device ``map_location``
    names, following torch's rules for each form. A callable's storage is used as is.
    """

    def __init__(self, rule: MapLocationRule, storage_type: Any) -> None:
        self._rule = rule
        self._storage_type: Any = storage_type
        # storage._cdata -> (saved location, where it goes)
        self.targets: dict[int, tuple[str, Any]] = {}
        self.data_bytes = 0
        self.failure: BaseException | None = None

    def __call__(self, storage: Any, location: str) -> Any:
        self.data_bytes += storage.nbytes()
        if self._rule.function is None:
            self.targets[storage._cdata] = (location, self._rule.target(location))
            return storage
        try:
            moved: Any = self._rule.function(storage, location)
            if moved is not None and not isinstance(moved, self._storage_type):
                raise DeviceTypeError(
                    f"the map_location callable returned {moved!r:.80} "
                    f"({type(moved).__name__}) for a storage saved on {location!r}; it must "
                    "return a storage (storage, storage.cpu(), ...) or None for the saved "
                    "location (torch raises TypeError here too). To send every tensor to "
                    "one device, pass that device: map_location='cpu'"
                )
        except BaseException as err:
            self.failure = err
            raise
        if moved is None:
            self.targets[storage._cdata] = (location, location)
            return storage
        self.targets[moved._cdata] = (location, moved.device)
        return moved


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


def _import_torch(name: str) -> Any:
    try:
        import torch
    except ImportError as err:
        raise CheckpointError(
            f"{name} is a PyTorch checkpoint, and reading one needs torch, which is not "
            "installed. Fix: pip install torch (safetensors files load without it)"
        ) from err
    return torch


def _load_torch(
    source: _Source,
    rule: MapLocationRule,
    mmap: bool,
    progress: bool | None,
    pickle_load_args: dict[str, Any],
) -> Any:
    torch = _import_torch(source.name)
    hook = _LocationHook(rule, torch.UntypedStorage)
    with contextlib.ExitStack() as stack:
        bar = stack.enter_context(
            Progress(source.label(), source.size(), False if mmap else progress)
        )
        opened: Any = source.path if source.file is None else source.file
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
            raise _unreadable(source.name, err) from err
        return _Conversion(source.name, hook, torch).run(checkpoint)


class _Graph:
    """Every object reachable from an unpickled checkpoint, found once each, iteratively.

    ``tensors`` are the distinct tensors; ``containers`` the objects holding others, in
    the order found. Each object remembers the first slot it was found in, from which
    ``path`` builds a leaf path for messages.
    """

    def __init__(self, root: Any, torch: Any) -> None:
        self._tensor = torch.Tensor
        atoms = _ATOMS | {torch.Size, torch.device, torch.dtype}
        self.objects: dict[int, Any] = {id(root): root}
        # id -> (parent id, slot kind, key)
        self._found_in: dict[int, tuple[int, str, Any]] = {}
        self.tensors: list[Any] = []
        self.containers: list[Any] = []
        if type(root) in atoms:
            return
        stack = [root]
        while stack:
            obj = stack.pop()
            if isinstance(obj, self._tensor):
                self.tensors.append(obj)
                continue
            children = list(_children(obj))
            if not children:
                continue
            self.containers.append(obj)
            parent = id(obj)
            for kind, key, child in children:
                if type(child) in atoms or id(child) in self.objects:
                    continue
                self.objects[id(child)] = child
                self._found_in[id(child)] = (parent, kind, key)
                stack.append(child)

    def path(self, obj: Any) -> str:
        """Where ``obj`` is, e.g. ``['model']['0.weight']``."""
        parts = []
        current = id(obj)
        while current in self._found_in:
            current, slot_kind, slot_key = self._found_in[current]
            parts.append(_slot(slot_kind, slot_key))
        return "".join(reversed(parts)) or "<root>"


def _children(obj: Any) -> Iterator[tuple[str, Any, Any]]:
    """``(kind, key, child)`` for what ``obj`` holds: items, keys, elements, attributes."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield "key", key, key
            yield "item", key, value
    elif isinstance(obj, (list, tuple)):
        yield from (("item", index, item) for index, item in enumerate(obj))
    elif isinstance(obj, (set, frozenset)):
        yield from (("element", None, element) for element in obj)
    elif isinstance(obj, (np.ndarray, np.generic)):
        return
    if type(obj) not in _PLAIN and _has_fields(obj):
        yield from (("attr", name, value) for name, value in _fields(obj))


def _has_fields(obj: Any) -> bool:
    return hasattr(obj, "__dict__") or hasattr(type(obj), "__slots__")


def _fields(obj: Any) -> Iterator[tuple[str, Any]]:
    """An object's attributes: its ``__dict__`` and its slots."""
    yield from getattr(obj, "__dict__", {}).items()
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                yield name, getattr(obj, name)


def _slot(kind: str, key: Any) -> str:
    if kind == "attr":
        return f".{key}"
    if kind == "key":
        return f"<a key {_short(key)}>"
    if kind == "element":
        return "<a set element>"
    return f"[{_short(key)}]"


def _short(value: Any) -> str:
    text = repr(value) if type(value) in _ATOMS else f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


class _Conversion:
    """Tensors of an unpickled checkpoint -> committed JAX arrays, in place."""

    def __init__(self, name: str, hook: _LocationHook, torch: Any) -> None:
        self._name = name
        self._hook = hook
        self._torch = torch
        self._devices: dict[Any, jax.Device] = {}
        self._dtypes: dict[Any, tuple[int, bool]] = {}
        self._copied = 0
        self._allowed = _COPY_ALLOWANCE_BYTES + _COPY_FACTOR * hook.data_bytes

    def run(self, root: Any) -> Any:
        graph = _Graph(root, self._torch)
        new = self._arrays(graph)
        self._rebuild_tuples(graph, new)
        for container in graph.containers:
            if not isinstance(container, tuple):
                self._substitute(graph, container, new)
        return new.get(id(root), root)

    def _arrays(self, graph: _Graph) -> dict[int, Any]:
        """``id(tensor) -> array`` for every tensor, moved in one transfer per device."""
        cpu = resolve("cpu")
        by_target: dict[jax.Device, list[tuple[Any, jax.Array]]] = {}
        for tensor in graph.tensors:
            try:
                host, location, target = self._host_tensor(tensor)
                array = to_jax(host)
                placed = self._device(location, target)
            except (DeviceUnavailableError, Warning):
                raise  # a warning the caller's filters made an error stays what it is
            except Exception as err:
                raise self._tensor_error(graph, tensor, err) from err
            by_target.setdefault(placed, []).append((tensor, array))
        new: dict[int, Any] = {}
        for target, pairs in by_target.items():
            arrays = [array for _, array in pairs]
            what = f"loading {self._name}"
            moved = arrays if target == cpu else transfer.send(arrays, target, what)
            new.update((id(tensor), array) for (tensor, _), array in zip(pairs, moved, strict=True))
        jax.block_until_ready(list(new.values()))
        return new

    def _host_tensor(self, tensor: Any) -> tuple[Any, str, Any]:
        """A dense tensor of a JAX dtype holding ``tensor``'s values, and where it goes."""
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
        if tensor.layout == torch.strided:
            values = tensor
        else:
            values = tensor._values() if tensor.layout == torch.sparse_coo else tensor.values()
        location, target = self._hook.targets.get(
            values.untyped_storage()._cdata, (str(tensor.device), tensor.device)
        )
        if tensor.is_quantized:
            self._charge(tensor.numel() * 4, "dequantized to float32")
            return tensor.dequantize(), location, target
        itemsize, kept = self._dtype(tensor.dtype)
        size = tensor.numel() * itemsize
        if tensor.layout != torch.strided:
            self._charge(size, f"a {tensor.layout} tensor made dense")
            return tensor.to_dense(), location, target
        if tensor.is_conj() or tensor.is_neg():
            self._charge(size, "its conjugate or negative bit resolved")
            return tensor.resolve_conj().resolve_neg(), location, target
        if not (kept and tensor.is_contiguous() and tensor.data_ptr() % ALIGNMENT == 0):
            self._charge(size, "copied")
        return tensor, location, target

    def _dtype(self, dtype: Any) -> tuple[int, bool]:
        """The item size a torch dtype has in JAX, and whether JAX keeps it (no narrowing)."""
        if dtype not in self._dtypes:
            source = dtypes.to_numpy_dtype(dtype)
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
                f"{self._hook.data_bytes:,} bytes of data in the file). Views that repeat "
                "their data (stride 0), sparse tensors made dense and many copies of one "
                "storage cost memory the file does not hold, as a file crafted to exhaust "
                "memory asks. If you trust the file: torch.load(path, weights_only=True), "
                "then convert what you need with tj.to_device"
            )

    def _device(self, location: str, target: Any) -> jax.Device:
        if target not in self._devices:
            try:
                self._devices[target] = resolve(target)
            except DeviceUnavailableError as err:
                raise DeviceUnavailableError(
                    f"cannot place the tensors {self._name} saved on {location!r}: {err} Or "
                    f"load them onto the CPU: map_location='cpu' (or {{{location!r}: 'cpu'}})."
                ) from err
        return self._devices[target]

    def _tensor_error(self, graph: _Graph, tensor: Any, error: Exception) -> CheckpointError:
        if isinstance(error, CheckpointError):
            reason = str(error)
        else:
            happened = (
                str(error)
                if isinstance(error, Torch2JaxDeviceError)
                else (f"converting it raised {type(error).__name__}: {error}")
            )
            reason = (
                f"{happened}. Fix: load it with torch.load(path, weights_only=True) and "
                "convert it to a dtype and layout JAX has (tensor.to(torch.complex64), "
                "tensor.to(torch.float32), ...) before tj.to_jax"
            )
        return CheckpointError(
            f"{self._name}: the tensor at {graph.path(tensor)} cannot be loaded: {reason}"
        )

    def _rebuild_tuples(self, graph: _Graph, new: dict[int, Any]) -> None:
        """Rebuild the tuples holding converted objects, inner ones first.

        Tuples cannot form a cycle among themselves (only through a mutable container,
        which keeps its identity), so each needs only its child tuples rebuilt first.
        """
        tuples = {id(obj): obj for obj in graph.containers if isinstance(obj, tuple)}
        done: set[int] = set()
        for start in tuples.values():
            stack: list[tuple[tuple[Any, ...], bool]] = [(start, False)]
            while stack:
                node, children_done = stack.pop()
                if children_done:
                    items = [new.get(id(item), item) for item in node]
                    if any(item is not old for item, old in zip(items, node, strict=True)):
                        new[id(node)] = self._tuple_like(graph, node, items)
                    continue
                if id(node) in done:
                    continue
                done.add(id(node))
                stack.append((node, True))
                stack.extend((item, False) for item in node if id(item) in tuples)

    def _tuple_like(self, graph: _Graph, old: tuple[Any, ...], items: list[Any]) -> Any:
        cls = type(old)
        if cls is tuple:
            return tuple(items)
        if hasattr(cls, "_make"):  # namedtuple
            return cls._make(items)
        raise CheckpointError(
            f"{self._name}: the {cls.__name__} at {graph.path(old)} holds tensors, and a "
            "tuple subclass cannot be rebuilt with JAX arrays in it. Load it with torch.load"
        )

    def _substitute(self, graph: _Graph, obj: Any, new: dict[int, Any]) -> None:
        """Put the converted objects into the mutable container ``obj``."""
        if isinstance(obj, dict):
            for key, value in list(obj.items()):
                if id(key) in new:
                    raise self._unhashable(graph, obj, "dict key")
                if id(value) in new:
                    obj[key] = new[id(value)]
        elif isinstance(obj, list):
            for index, item in enumerate(obj):
                if id(item) in new:
                    obj[index] = new[id(item)]
        elif isinstance(obj, (set, frozenset)):
            if any(id(element) in new for element in obj):
                raise self._unhashable(graph, obj, "set element")
        if type(obj) in _PLAIN or not _has_fields(obj):
            return
        attributes = getattr(obj, "__dict__", None)
        for name, value in list(_fields(obj)):
            if id(value) in new:
                if attributes is not None and name in attributes:
                    attributes[name] = new[id(value)]
                else:
                    object.__setattr__(obj, name, new[id(value)])

    def _unhashable(self, graph: _Graph, obj: Any, role: str) -> CheckpointError:
        return CheckpointError(
            f"{self._name}: a {role} in {graph.path(obj)} is a tensor (or holds one), and "
            "JAX arrays cannot be hashed, so it cannot become one. Load it with torch.load "
            "and keep it a torch tensor"
        )


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _unreadable(name: str, error: Exception) -> CheckpointError:
    message = " ".join(_ANSI.sub("", str(error)).split())
    # weights_only failures wrap the reason in several sentences of general advice.
    reason = message.partition("WeightsUnpickler error:")[2].partition("Check the documentation")[0]
    reason = reason.strip() or message or type(error).__name__
    if "Unsupported global" in reason:
        return CheckpointError(
            f"{name} holds objects that torch.load(weights_only=True) refuses to unpickle, "
            f"so nothing in it was run. {reason}"
        )
    return CheckpointError(
        f"{name} is not a readable PyTorch checkpoint (corrupted, truncated or not a "
        f"checkpoint): torch.load(weights_only=True) raised {type(error).__name__}: {reason}"
    )
