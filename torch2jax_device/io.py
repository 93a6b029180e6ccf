"""Checkpoints onto the device you name: safetensors files and PyTorch checkpoints.

:func:`load_file`, :func:`safe_open` and :func:`save_file` are safetensors' functions for
JAX, with the ``device=`` argument its Flax module lacks; :func:`load` is ``torch.load``
for JAX users, ``map_location`` included.

Data takes one path: file -> 64-byte-aligned host buffers (``readinto``, no intermediate
copy) -> ``jax.device_put`` onto the target device. Nothing goes through ``jnp.array``,
so nothing is ever created on JAX's default device first, and on the CPU the arrays
*are* the host buffers (JAX's CPU backend uses aligned host memory in place): a load
costs one read of the file and about its size in RAM.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Callable, Mapping
from typing import Any, cast

import jax
import numpy as np

from . import _dtypes
from ._detect import is_torch_device, is_torch_tensor, is_tracer
from ._device import Device, DeviceLike, resolve
from ._errors import (
    ConversionError,
    DeviceTypeError,
    DeviceUnavailableError,
    DTypeError,
    InvalidDeviceError,
)
from ._interop import to_jax
from ._progress import Progress
from ._safetensors import (
    DTYPES,
    CheckpointError,
    InvalidIndexError,
    Reader,
    TensorInfo,
    TensorSource,
    code_of,
    write_file,
)

__all__ = [
    "CheckpointError",
    "InvalidIndexError",
    "MapLocation",
    "TensorSlice",
    "load",
    "load_file",
    "safe_open",
    "save_file",
]

PathLike = str | os.PathLike[str]
#: What ``map_location`` accepts, as in ``torch.load``: a device, a dict from saved
#: location tags (``"cuda:0"``) to devices, or a callable ``(storage, location)``.
MapLocation = DeviceLike | Mapping[str, DeviceLike] | Callable[[Any, str], Any] | None

# safetensors.safe_open's second argument, which ported calls may still pass.
_FRAMEWORKS = frozenset({"pt", "torch", "np", "numpy", "flax", "jax", "tf", "mlx", "paddle"})
# Host memory is read in groups of about this size, each group its own buffer: on an
# accelerator a group is transferred while the next one is read, and freed after.
_GROUP_BYTES = 256 * 2**20


def load_file(
    path: PathLike, device: DeviceLike | None = "cpu", *, progress: bool | None = None
) -> dict[str, jax.Array]:
    """Load a safetensors file onto one device: ``safetensors.torch.load_file`` for JAX.

    Every array lands on ``device``, committed there. The default is the CPU, whatever
    the default device: ``with tj.device("cuda"):`` does not move a load, just as
    ``with torch.device("cuda"):`` does not move ``safetensors.torch.load_file``'s. The
    bytes go from the file into 64-byte-aligned host buffers and from there to the
    device; nothing is ever created on another device first. On the CPU the arrays are
    those buffers, so RAM use is about the file size. Arrays read together share a
    buffer, freed when the last of them is.

    Every safetensors dtype loads, BF16 and the FP8 kinds included, with no import-order
    tricks; only the packed sub-byte dtypes (F4, F6_*) are refused.

    Args:
        path: The ``.safetensors`` file.
        device: Anything ``tj.device`` accepts (``"cuda:0"``, ``0``, a ``tj.device``, a
            ``jax.Device`` or a ``torch.device``). ``None`` also means the CPU, as in
            safetensors.
        progress: Draw a progress bar on stderr. By default one is drawn for files of
            256 MiB or more when stderr is a terminal; ``TORCH2JAX_DEVICE_PROGRESS=0``
            turns that off and ``=1`` on everywhere.

    Returns:
        ``{name: array}`` with names sorted, as safetensors returns them.

    Raises:
        CheckpointError: the file is not valid safetensors (truncated, header length
            past the end, malformed JSON, offsets out of range, overlapping or leaving
            gaps, dtype and shape disagreeing with the bytes, unknown dtype); the message
            names the file and the problem, raised before any tensor memory is allocated.
        DeviceUnavailableError: ``device`` does not exist here (checked before reading).

    Warns:
        DtypeNarrowingWarning: I64, U64 and F64 tensors become 32-bit unless
            ``jax_enable_x64`` is on; they are narrowed chunk by chunk as they are read.

    Example:
        >>> import os, tempfile
        >>> import numpy as np
        >>> from torch2jax_device.io import load_file, save_file
        >>> path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
        >>> save_file({"w": np.ones((2, 3), np.float32)}, path)
        >>> tensors = load_file(path)
        >>> tensors["w"].shape, tensors["w"].device
        ((2, 3), CpuDevice(id=0))
    """
    target = _device(device)
    with Reader(path) as reader:
        infos = sorted(reader.tensors.values(), key=lambda info: info.start)
        total = sum(info.nbytes for info in infos)
        arrays: dict[str, jax.Array] = {}
        with Progress(f"Loading {os.path.basename(reader.path)}", total, progress) as bar:
            for group in reader.read_groups(infos, _dtypes.canonical, _GROUP_BYTES, bar.advance):
                placed = jax.device_put([host for _, host in group], target)
                arrays.update(zip([name for name, _ in group], placed, strict=True))
            jax.block_until_ready(list(arrays.values()))
    return dict(sorted(arrays.items()))


class safe_open:  # safetensors' name, lowercase, so ported code reads the same
    """A safetensors file opened for lazy reads: ``safetensors.safe_open`` for JAX.

    Only the header is read when the file is opened. :meth:`get_tensor` reads one
    tensor; :meth:`get_slice` reads only the bytes an index selects, so a training loop
    can take random windows of a token array far larger than RAM. Every array lands on
    ``device`` (the CPU unless you say otherwise, whatever the default device). Unlike
    ``safetensors.safe_open`` there is no ``framework`` argument: results are JAX arrays.

    Args:
        path: The ``.safetensors`` file.
        device: Anything ``tj.device`` accepts; ``None`` also means the CPU.

    Raises:
        CheckpointError: the header is invalid (see :func:`load_file`).
        DeviceUnavailableError: ``device`` does not exist here (checked before opening).
        InvalidDeviceError: ``device`` is a safetensors framework name (``"flax"``,
            ``"pt"``, ...), as a call ported from ``safetensors.safe_open`` passes.

    Example:
        >>> import os, tempfile
        >>> import numpy as np
        >>> from torch2jax_device.io import safe_open, save_file
        >>> path = os.path.join(tempfile.mkdtemp(), "tokens.safetensors")
        >>> save_file({"tokens": np.arange(10, dtype=np.uint16)}, path, {"vocab": "gpt2"})
        >>> with safe_open(path) as f:
        ...     window = f.get_slice("tokens")[2:5]
        ...     f.keys(), f.metadata(), window.tolist(), f.get_slice("tokens").get_shape()
        (['tokens'], {'vocab': 'gpt2'}, [2, 3, 4], [10])
    """

    def __init__(self, path: PathLike, device: DeviceLike | None = "cpu") -> None:
        if isinstance(device, str) and device in _FRAMEWORKS:
            raise InvalidDeviceError(
                f"safe_open({os.fspath(path)!r}, {device!r}): {device!r} is a safetensors "
                "framework, and this safe_open has none (it always returns JAX arrays). "
                "Drop it; pass device=... to choose where the arrays go"
            )
        self._device = _device(device)
        self._reader = Reader(path)

    def __enter__(self) -> safe_open:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file; reads after this raise :class:`CheckpointError`."""
        self._reader.close()

    def keys(self) -> list[str]:
        """The tensor names, sorted."""
        return sorted(self._reader.tensors)

    def metadata(self) -> dict[str, str] | None:
        """The header's ``__metadata__`` strings, or ``None`` if it has none."""
        return None if self._reader.metadata is None else dict(self._reader.metadata)

    def get_tensor(self, name: str) -> jax.Array:
        """The whole tensor ``name`` on the device.

        Raises:
            CheckpointError: the file has no tensor ``name`` (the message lists some
                that it has), or it was closed.
        """
        host = self._reader.read_tensor(self._reader.info(name), _dtypes.canonical)
        array: jax.Array = jax.device_put(host, self._device)
        return array

    def get_slice(self, name: str) -> TensorSlice:
        """A lazy view of tensor ``name``; index it to read part of it.

        Raises:
            CheckpointError: the file has no tensor ``name``.
        """
        return TensorSlice(self._reader, self._reader.info(name), self._device)


class TensorSlice:
    """One tensor of an open file, read on indexing: safetensors' ``PySafeSlice``.

    ``slice[index]`` takes a basic NumPy index (ints, slices with any step, ``...``,
    ``None``) and reads only the bytes it selects: one read for a window such as
    ``[a:b]``, row by row for selections that are sparse at a coarse grain.
    """

    def __init__(self, reader: Reader, info: TensorInfo, device: jax.Device) -> None:
        self._reader = reader
        self._info = info
        self._device = device

    def get_shape(self) -> list[int]:
        """The tensor's shape, as a list (safetensors' convention)."""
        return list(self._info.shape)

    def get_dtype(self) -> str:
        """The tensor's safetensors dtype code, e.g. ``"BF16"``."""
        return self._info.code

    def __getitem__(self, index: Any) -> jax.Array:
        """``tensor[index]``, read from the file onto the device.

        Raises:
            InvalidIndexError: out of range or a zero step (an ``IndexError`` /
                ``ValueError``, as NumPy and torch raise), or not a basic index.
        """
        host = self._reader.read_selection(self._info, index)
        dtype = _dtypes.canonical(host.dtype)
        array: jax.Array = jax.device_put(
            host if dtype == host.dtype else host.astype(dtype), self._device
        )
        return array


def save_file(
    tensors: Mapping[str, Any], path: PathLike, metadata: Mapping[str, str] | None = None
) -> None:
    """Write arrays to a safetensors file, atomically: ``safetensors.torch.save_file``.

    Values may be JAX arrays (on any device, also sharded), NumPy arrays and torch
    tensors (on any device), mixed. The file is written under a temporary name in the
    same directory, flushed to disk and renamed: a crash or error never leaves a partial
    file under ``path`` (an existing file stays intact). Host memory holds one tensor at
    a time. The bytes are those ``safetensors.torch.save_file`` writes (up to the order
    of several metadata keys, which safetensors leaves unspecified), so every safetensors
    loader reads the file. Tensors sharing memory are each written in full.

    Args:
        tensors: ``{name: array}``.
        path: Where to write.
        metadata: Strings to store in the header's ``__metadata__``.

    Raises:
        ConversionError: a value is not an array (or is a tracer, or deleted), a name is
            not a string, or ``metadata`` does not map strings to strings.
        DTypeError: an array has a dtype safetensors cannot store (names the tensor).

    Example:
        >>> import os, tempfile
        >>> import jax.numpy as jnp, numpy as np
        >>> from safetensors.numpy import load_file as numpy_load_file
        >>> from torch2jax_device.io import save_file
        >>> path = os.path.join(tempfile.mkdtemp(), "mixed.safetensors")
        >>> save_file({"jax": jnp.ones(2, jnp.bfloat16), "numpy": np.zeros(3)}, path)
        >>> numpy_load_file(path)["numpy"]
        array([0., 0., 0.])
    """
    if not isinstance(tensors, Mapping):
        raise ConversionError(
            f"save_file() takes a mapping of names to arrays, not {type(tensors).__name__}"
        )
    if metadata is not None and not (
        isinstance(metadata, Mapping)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise ConversionError(
            f"metadata must map str to str, got {metadata!r}; convert values with str()"
        )
    sources = {}
    for name, value in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise ConversionError(
                f"tensor names must be strings other than '__metadata__', got {name!r}"
            )
        sources[name] = _source(name, value)
    write_file(path, sources, metadata)


def load(path: PathLike, map_location: MapLocation = None, *, progress: bool | None = None) -> Any:
    """Load a checkpoint as JAX arrays: ``torch.load`` for JAX users, ``map_location`` too.

    ``.safetensors`` files are read natively (see :func:`load_file`); PyTorch ``.pt`` /
    ``.bin`` files through ``torch.load(weights_only=True)``, which needs torch and never
    runs code from the file. Their tensors become JAX arrays without copies where the
    memory allows (``tj.to_jax``); everything else (ints, floats, strings, nested dicts
    and lists such as nanoGPT's ``{'model', 'optimizer', 'iter_num', 'model_args'}``) is
    kept as it is.

    Tensors go where ``torch.load`` would put them: without ``map_location``, where they
    were saved (``cuda:0`` stays ``cuda:0``, and fails if there is no such GPU, as in
    torch; a safetensors file counts as saved on the CPU). ``map_location`` takes every
    form torch documents:

    * a device (``"cpu"``, ``"cuda:1"``, ``tj.device(...)``, ``torch.device(...)``,
      ``jax.Device``): everything goes there;
    * a dict from saved location tags to devices (``{"cuda:0": "cpu"}``); tags it does
      not list stay where they were saved;
    * a callable ``(storage, location) -> storage | None``, called with each CPU storage
      and its saved location: the tensor goes where the returned storage is, or to the
      saved location if it returns ``None`` (PyTorch checkpoints only).

    Args:
        path: A ``.safetensors`` file or a PyTorch checkpoint.
        map_location: Where tensors go, as above.
        progress: Draw a progress bar on stderr (see :func:`load_file`).

    Returns:
        The checkpoint, with every tensor replaced by a committed JAX array.

    Raises:
        CheckpointError: the file is corrupted, truncated or not a checkpoint; holds
            objects ``weights_only=True`` refuses (nothing from it is executed); or is a
            PyTorch checkpoint and torch is not installed.
        DeviceUnavailableError: a tensor's device does not exist here, e.g. a checkpoint
            saved on ``cuda:0`` loaded on a machine without one and no ``map_location``
            (torch raises ``RuntimeError``; this is one).
        DeviceTypeError: ``map_location`` is none of the forms above, or a callable for
            a safetensors file (which has no storages to pass it).

    Example:
        >>> import os, tempfile
        >>> import torch
        >>> from torch2jax_device.io import load
        >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
        >>> torch.save({"model": {"w": torch.ones(2)}, "iter_num": 7}, path)
        >>> checkpoint = load(path, map_location="cpu")
        >>> weights = checkpoint["model"]
        >>> checkpoint["iter_num"], weights["w"].device
        (7, CpuDevice(id=0))
    """
    path = os.fspath(path)
    if _is_safetensors(path):
        return load_file(path, _safetensors_device(map_location, path), progress=progress)
    return _load_torch(path, map_location, progress)


def _device(device: DeviceLike | None) -> jax.Device:
    return resolve("cpu" if device is None else device)


def _names_device(value: Any) -> bool:
    # Before any callable() test: a tj.device is callable (its decorator form).
    return isinstance(value, (str, int, Device, jax.Device)) or is_torch_device(value)


def _source(name: str, value: Any) -> TensorSource:
    """How to write ``value``: dtype and shape now, host bytes on demand."""
    if is_torch_tensor(value):
        return _torch_source(name, value)
    if isinstance(value, jax.Array):
        if is_tracer(value) or value.is_deleted():
            raise ConversionError(
                f"tensor {name!r} is a {'tracer' if is_tracer(value) else 'deleted array'}: "
                "save_file needs concrete arrays; call it outside jax.jit, on live results"
            )
        return _numpy_source(name, np.dtype(value.dtype), value.shape, lambda: np.asarray(value))
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        return _numpy_source(name, array.dtype, array.shape, lambda: array)
    raise ConversionError(
        f"tensor {name!r} is a {type(value).__name__}; save_file takes JAX arrays, NumPy "
        "arrays and torch tensors (wrap numbers with np.asarray)"
    )


def _checked_dtype(name: str, dtype: Any) -> np.dtype[Any]:
    """The little-endian NumPy dtype to store ``dtype`` (NumPy or torch) as, or raise."""
    try:
        native = _dtypes.to_numpy_dtype(dtype)
    except DTypeError:
        native = None
    if native is not None and native.byteorder == ">":
        native = native.newbyteorder("=")
    if native is None or code_of(native) is None:
        stored = ", ".join(str(d) for d in DTYPES.values())
        raise DTypeError(
            f"tensor {name!r} has dtype {dtype}, which safetensors cannot store (it stores "
            f"{stored}); cast it first"
        )
    return native


def _numpy_source(
    name: str, dtype: np.dtype[Any], shape: tuple[int, ...], host: Callable[[], Any]
) -> TensorSource:
    native = _checked_dtype(name, dtype)
    return TensorSource(native, tuple(shape), lambda: np.ascontiguousarray(host(), native))


def _torch_source(name: str, tensor: Any) -> TensorSource:
    import torch

    if tensor.layout != torch.strided or tensor.device.type == "meta":
        raise ConversionError(
            f"tensor {name!r} is a {tensor.layout} tensor on {tensor.device}; save_file "
            "writes dense tensors with data (call .to_dense() / materialize it first)"
        )
    dtype = _checked_dtype(name, tensor.dtype)
    shape = tuple(tensor.shape)

    def fetch() -> np.ndarray[Any, Any]:
        host = tensor.detach().resolve_conj().resolve_neg().to("cpu").contiguous()
        # Through bytes, so dtypes torch.Tensor.numpy() refuses (bf16, fp8, ...) work too.
        array: np.ndarray[Any, Any] = host.reshape(-1).view(torch.uint8).numpy()
        return array.view(dtype).reshape(shape)

    return TensorSource(dtype, shape, fetch)


def _is_safetensors(path: str) -> bool:
    if path.endswith(".safetensors"):
        return True
    with open(path, "rb") as file:
        head = file.read(9)
    # The 8-byte header length, then JSON; zip and pickle files never have "{" there.
    return head[8:9] == b"{"


def _safetensors_device(map_location: MapLocation, path: str) -> DeviceLike:
    """The device a safetensors file goes to: its tensors count as saved on ``cpu``."""
    if map_location is None:
        return "cpu"
    if _names_device(map_location):
        return map_location
    if isinstance(map_location, Mapping):
        return map_location.get("cpu", "cpu")
    raise DeviceTypeError(
        f"map_location={map_location!r} cannot place {path!r}: a callable map_location "
        "receives torch storages, and a safetensors file has none. Pass a device, e.g. "
        "tj.load(path, map_location='cuda:0')"
    )


class _LocationHook:
    """``torch.load``'s ``map_location``: keeps storages on the CPU, records their targets.

    torch calls it with each storage (on the CPU) and its saved location tag. Data stays
    on the CPU and is moved once, after conversion to JAX, to the device ``map_location``
    names, following torch's rules for each form. A callable's result is used as is.
    """

    def __init__(self, map_location: MapLocation) -> None:
        self._device: DeviceLike | None = None
        self._mapping: Mapping[str, DeviceLike] | None = None
        self._function: Callable[[Any, str], Any] | None = None
        if _names_device(map_location):
            self._device = map_location
        elif isinstance(map_location, Mapping):
            self._mapping = map_location
        elif callable(map_location):
            self._function = cast(Callable[[Any, str], Any], map_location)  # not a Device
        elif map_location is not None:
            raise DeviceTypeError(
                f"map_location must be a device, a dict of locations or a callable, not "
                f"{type(map_location).__name__}"
            )
        # storage._cdata -> (saved location, where it goes)
        self.targets: dict[int, tuple[str, Any]] = {}
        self.failure: BaseException | None = None

    def __call__(self, storage: Any, location: str) -> Any:
        target: Any = location
        if self._device is not None:
            target = self._device
        elif self._mapping is not None:
            target = self._mapping.get(location, location)
        elif self._function is not None:
            try:
                moved = self._function(storage, location)
            except BaseException as err:
                self.failure = err
                raise
            if moved is not None:
                self.targets[moved._cdata] = (location, moved.device)
                return moved
        self.targets[storage._cdata] = (location, target)
        return storage


class _CountingReader(io.RawIOBase):
    """A read-only view of an open file that reports each byte read (``torch.load``'s bar)."""

    def __init__(self, file: io.BufferedReader, advance: Callable[[int], None]) -> None:
        super().__init__()
        self._file = file
        self._advance = advance

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count = self._file.readinto(buffer)
        self._advance(count)
        return count

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()


def _load_torch(path: str, map_location: MapLocation, progress: bool | None) -> Any:
    try:
        import torch
    except ImportError as err:
        raise CheckpointError(
            f"{path!r} is a PyTorch checkpoint, and reading one needs torch, which is not "
            "installed. Fix: pip install torch (safetensors files load without it)"
        ) from err
    hook = _LocationHook(map_location)
    with contextlib.ExitStack() as stack:
        bar = stack.enter_context(
            Progress(f"Loading {os.path.basename(path)}", os.path.getsize(path), progress)
        )
        source: Any = path
        if bar.enabled:
            source = _CountingReader(stack.enter_context(open(path, "rb")), bar.advance)
        try:
            checkpoint = torch.load(source, map_location=hook, weights_only=True)
        except OSError:
            raise
        except Exception as err:
            if err is hook.failure:
                raise
            raise _unreadable(path, err) from err
        converted: dict[int, jax.Array] = {}

        def convert(tensor: Any) -> jax.Array:
            if id(tensor) not in converted:
                saved = (str(tensor.device), tensor.device)  # storages the hook never saw
                location, target = hook.targets.get(tensor.untyped_storage()._cdata, saved)
                converted[id(tensor)] = to_jax(tensor, _place(path, location, target))
            return converted[id(tensor)]

        result = _map_tensors(checkpoint, convert)
        jax.block_until_ready(list(converted.values()))
    return result


def _place(path: str, location: str, target: Any) -> jax.Device:
    try:
        return resolve(target)
    except DeviceUnavailableError as err:
        raise DeviceUnavailableError(
            f"cannot place the tensors {path!r} saved on {location!r}: {err} Or load them "
            f"onto the CPU: map_location='cpu' (or {{{location!r}: 'cpu'}})."
        ) from err


def _map_tensors(obj: Any, convert: Callable[[Any], jax.Array]) -> Any:
    """``obj`` with each torch tensor inside dicts, lists and tuples converted."""
    if is_torch_tensor(obj):
        return convert(obj)
    if isinstance(obj, dict):
        copied = obj.copy()  # keeps OrderedDict and defaultdict (with its factory)
        for key, value in copied.items():
            copied[key] = _map_tensors(value, convert)
        return copied
    if isinstance(obj, list):
        return [_map_tensors(item, convert) for item in obj]
    if type(obj) is tuple:
        return tuple(_map_tensors(item, convert) for item in obj)
    return obj


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _unreadable(path: str, error: Exception) -> CheckpointError:
    message = " ".join(_ANSI.sub("", str(error)).split())
    # weights_only failures wrap the reason in several sentences of general advice.
    reason = message.partition("WeightsUnpickler error:")[2].partition("Check the documentation")[0]
    reason = reason.strip() or message or type(error).__name__
    if "Unsupported global" in reason:
        return CheckpointError(
            f"{path!r} holds objects that torch.load(weights_only=True) refuses to unpickle, "
            f"so nothing in it was run. {reason}"
        )
    return CheckpointError(
        f"{path!r} is not a readable PyTorch checkpoint (corrupted, truncated or not a "
        f"checkpoint): torch.load(weights_only=True) raised {type(error).__name__}: {reason}"
    )
