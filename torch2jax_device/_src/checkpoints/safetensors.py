"""safetensors files onto the device you name: ``load_file``, ``safe_open``, ``save_file``.

safetensors' own functions for JAX, with the ``device=`` argument its Flax module lacks.

Data takes one path: file -> 64-byte-aligned host buffers (``readinto``, no intermediate
copy) -> ``jax.device_put`` onto the target device. Nothing goes through ``jnp.array``,
so nothing is ever created on JAX's default device first, and on the CPU the arrays
*are* the host buffers (JAX's CPU backend uses aligned host memory in place): a load
costs one read of the file and about its size in RAM.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from .. import dtypes
from ..detect import is_torch_tensor, is_tracer
from ..device import DeviceLike, resolve
from ..errors import ConversionError, DTypeError, InvalidDeviceError
from .format import DTYPES, TensorInfo, code_of
from .progress import Progress
from .reader import Reader
from .writer import TensorSource, write_file

__all__ = ["PathLike", "TensorSlice", "load_file", "resolve_target", "safe_open", "save_file"]

PathLike = str | os.PathLike[str]

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

    Examples:
        >>> import os, tempfile
        >>> import numpy as np
        >>> import torch2jax_device as tj
        >>> path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
        >>> tj.save_file({"w": np.ones((2, 3), np.float32)}, path)
        >>> tensors = tj.load_file(path)
        >>> tensors["w"].shape, tensors["w"].device
        ((2, 3), CpuDevice(id=0))
    """
    from . import sharded  # a Sharding, a Mesh, a per-tensor rule, or an index of shards

    if sharded.handles_file(path, device):
        return sharded.load_file(path, device, progress=progress)
    target = resolve_target(device)
    with Reader(path) as reader:
        infos = sorted(reader.tensors.values(), key=lambda info: info.start)
        total = sum(info.nbytes for info in infos)
        arrays: dict[str, jax.Array] = {}
        with Progress(f"Loading {os.path.basename(reader.path)}", total, progress) as bar:
            for group in reader.read_groups(infos, dtypes.canonical, _GROUP_BYTES, bar.advance):
                placed = jax.device_put([host for _, host in group], target)
                arrays.update(zip([name for name, _ in group], placed, strict=True))
            jax.block_until_ready(list(arrays.values()))
    return dict(sorted(arrays.items()))


class safe_open:  # safetensors' name, lowercase, so ported code reads the same
    """A safetensors file opened for lazy reads: ``safetensors.safe_open`` for JAX.

    Only the header is read when the file is opened. ``get_tensor`` reads one
    tensor; ``get_slice`` reads only the bytes an index selects, so a training loop
    can take random windows of a token array far larger than RAM. Every array lands on
    ``device`` (the CPU unless you say otherwise, whatever the default device). Unlike
    ``safetensors.safe_open`` there is no ``framework`` argument: results are JAX arrays.

    Args:
        path: The ``.safetensors`` file.
        device: Anything ``tj.device`` accepts; ``None`` also means the CPU.

    Raises:
        CheckpointError: the header is invalid (see [`tj.load_file`][torch2jax_device.load_file]).
        DeviceUnavailableError: ``device`` does not exist here (checked before opening).
        InvalidDeviceError: ``device`` is a safetensors framework name (``"flax"``,
            ``"pt"``, ...), as a call ported from ``safetensors.safe_open`` passes.

    Examples:
        >>> import os, tempfile
        >>> import numpy as np
        >>> import torch2jax_device as tj
        >>> path = os.path.join(tempfile.mkdtemp(), "tokens.safetensors")
        >>> tj.save_file({"tokens": np.arange(10, dtype=np.uint16)}, path, {"vocab": "gpt2"})
        >>> with tj.safe_open(path) as f:
        ...     window = f.get_slice("tokens")[2:5]
        ...     f.keys(), f.metadata(), window.tolist(), f.get_slice("tokens").get_shape()
        (['tokens'], {'vocab': 'gpt2'}, [2, 3, 4], [10])
    """

    def __new__(cls, path: PathLike, device: Any = "cpu") -> safe_open:
        from . import sharded  # a Sharding, a Mesh or a per-tensor rule

        if cls is safe_open and sharded.handles_open(device):
            return super().__new__(sharded.ShardedSafeOpen)
        return super().__new__(cls)

    def __init__(self, path: PathLike, device: DeviceLike | None = "cpu") -> None:
        if isinstance(device, str) and device in _FRAMEWORKS:
            raise InvalidDeviceError(
                f"safe_open({os.fspath(path)!r}, {device!r}): {device!r} is a safetensors "
                "framework, and this safe_open has none (it always returns JAX arrays). "
                "Drop it; pass device=... to choose where the arrays go"
            )
        self._device = resolve_target(device)
        self._reader = Reader(path)

    def __enter__(self) -> safe_open:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file; reads after this raise ``tj.CheckpointError``."""
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
        host = self._reader.read_tensor(self._reader.info(name), dtypes.canonical)
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
        dtype = dtypes.canonical(host.dtype)
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

    Examples:
        >>> import os, tempfile
        >>> import jax.numpy as jnp, numpy as np
        >>> from safetensors.numpy import load_file as numpy_load_file
        >>> import torch2jax_device as tj
        >>> path = os.path.join(tempfile.mkdtemp(), "mixed.safetensors")
        >>> tj.save_file({"jax": jnp.ones(2, jnp.bfloat16), "numpy": np.zeros(3)}, path)
        >>> numpy_load_file(path)["numpy"]
        array([0., 0., 0.])
    """
    from .module_state import named_arrays  # a model or nnx.State: its arrays, by name

    tensors = named_arrays(tensors)
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


def resolve_target(device: DeviceLike | None) -> jax.Device:
    """Where a loader puts its arrays: ``device``, with ``None`` meaning the CPU."""
    return resolve("cpu" if device is None else device)


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
        native = dtypes.to_numpy_dtype(dtype)
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
