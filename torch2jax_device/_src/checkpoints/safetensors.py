"""safetensors' verbs for JAX: ``load_file``, ``safe_open``, ``save_file``.

safetensors' own functions, with the ``device=`` argument its Flax module lacks. The
public entry points: a target that is one device goes to ``one_device``, a sharding, a
mesh, a per-tensor rule or an index of shards to ``sharded``; saving goes to ``writer``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from .. import dtypes
from ..detect import is_torch_tensor, is_tracer
from ..device import DeviceLike
from ..distributed.transfer import to_numpy
from ..errors import ArgumentTypeError, CheckpointError, ConversionError, DTypeError
from ..interop import check_data_tensor, numpy_data
from . import sharded
from .device_map import DeviceMap, planned_target
from .format import DTYPES, check_metadata, code_of
from .messages import shown
from .one_device import OnDevice, Placement, TensorSlice
from .one_device import load_file as load_file_on_device
from .options import check_framework, checked_staging, maps_file
from .paths import checked_path
from .reader import Reader
from .source import PathLike
from .transfer import STAGING_BYTES
from .writer import TensorSource, write_file

__all__ = ["load_file", "safe_open", "save_file"]


def load_file(
    filename: PathLike,
    device: DeviceLike | None = "cpu",
    *,
    backend: str = "mmap",
    staging_bytes: int = STAGING_BYTES,
    max_tensors: int | None = None,
    progress: bool | None = None,
    device_map: Mapping[str, Any] | str | None = None,
    max_memory: Mapping[Any, Any] | None = None,
) -> dict[str, jax.Array]:
    """Equivalent to `safetensors.torch.load_file`.

    Load a safetensors file onto one device (or, given a sharding, a mesh or a
    [`tj.ShardingRule`][torch2jax_device.ShardingRule], onto many, each process reading only
    its parts; an ``*.index.json`` of shard files loads as one file). Every array lands on
    ``device``, committed there. The default is the CPU, whatever the default device: ``with
    tj.device("cuda"):`` does not move a load, just as ``with torch.device("cuda"):`` does
    not move ``safetensors.torch.load_file``'s. Nothing is ever created on another device
    first.

    On a CPU device (the default ``backend="mmap"``), the file is memory-mapped, as
    ``safetensors.torch`` does: a tensor that starts 64-byte aligned in the file becomes
    an array over the mapping (no read, no copy; RAM grows as pages are touched), in
    O(1) time whatever the file size. Files [`tj.save_file`][torch2jax_device.save_file]
    writes are aligned throughout; ``safetensors`` aligns tensors only by chance, and
    those that are not are read once into aligned host memory the arrays own. The
    arrays keep the mapping alive after the load returns.

    On other devices the file is read through at most ``staging_bytes`` of host buffers
    while earlier ones transfer, so host memory stays at that budget, not the file size.
    Onto a mesh of GPUs, each part a process's devices hold is read piece by piece
    straight into pooled pinned buffers (32 MiB pieces, three in flight per device)
    and sent from them, so the host never holds a part whole; ``staging_bytes`` does
    not change those pieces.

    Every safetensors dtype loads, BF16 and the FP8 kinds included, with no import-order
    tricks; only the packed sub-byte dtypes (F4, F6_*) are refused.

    Args:
        filename: The ``.safetensors`` file (safetensors' name for it; a ``str``, ``bytes``
            or ``os.PathLike``).
        device: Anything ``tj.device`` accepts (``"cuda:0"``, ``0``, a ``tj.device``, a
            ``jax.Device`` or a ``torch.device``). ``None`` also means the CPU, as in
            safetensors. Or a ``jax.sharding.Sharding``, a ``Mesh`` (replicated), a
            ``tj.ShardingRule`` or a function ``(name, shape, dtype) -> Sharding``.
        backend: ``"mmap"`` (safetensors' default) maps the file; ``"pread"`` reads every
            tensor into memory the arrays own, for files that will be rewritten in place
            or live on file systems where a mapping fails midway.
        staging_bytes: Host memory for transfers to devices that do not use host memory
            in place (GPU, TPU); 256 MiB by default.
        max_tensors: The most tensors the load may read: of the file, or of all the
            files of an index together. By default one per 4 KiB of the files and at
            least 16,384, so that files of millions of tiny tensors cannot exhaust RAM
            (each JAX array costs 6 to 10 KiB of host memory, measured with 240,000).
        progress: Draw a progress bar of the bytes read on stderr (a mapped load reads
            none). By default one is drawn for reads of 256 MiB or more when stderr is a
            terminal; ``TORCH2JAX_DEVICE_PROGRESS=0`` turns that off and ``=1`` on
            everywhere.
        device_map: Where each tensor goes, as Accelerate's ``device_map``: ``"auto"``
            (the same as ``device="auto"``), an explicit ``{pattern: device}``, or a
            `tj.DeviceMap`. ``device="auto"`` fills the
            accelerators in the names' natural order (``layers.2`` before
            ``layers.10``: a file's own order is its writer's layout, not the
            model's), a module's tensors together, up to their budgets, then the first one's
            ``pinned_host`` memory, then the CPU; each tensor goes straight to its
            place. The plan is made from the header and checked (devices, budgets,
            every tensor placed) before a tensor byte is read; see
            [A model bigger than the GPU](how-to/big-models.md).
        max_memory: The budgets of ``device="auto"``: ``{"cuda:0": "20GiB", "cpu":
            "100GiB"}`` as in Accelerate (see ``tj.DeviceMap.plan``).

    Returns:
        ``{name: array}`` in the file's order (by data offset), as
        ``safetensors.torch.load_file`` returns it; an index of shards in the order its
        ``weight_map`` lists the names.

    Raises:
        CheckpointError: the file is not valid safetensors (truncated, header length
            past the end, malformed JSON, offsets out of range, overlapping or leaving
            gaps, dtype and shape disagreeing with the bytes, unknown dtype, impossible
            shape) or holds more than ``max_tensors`` tensors; the message names the
            file and the problem, raised before any tensor memory is allocated. Also
            when processes loading onto one mesh together read different shapes or
            dtypes for a tensor (all of them raise it, naming the tensor).
        CheckpointFileNotFoundError, CheckpointIsADirectoryError: no file at
            ``filename`` (a ``FileNotFoundError``), or a directory there.
        ArgumentTypeError: ``filename`` is not a str, bytes or os.PathLike.
        DeviceUnavailableError: ``device`` does not exist here (checked before reading).
        InvalidDeviceError: ``backend`` is not ``"mmap"`` or ``"pread"``; or a
            ``device_map`` that leaves a tensor unplaced (see ``tj.DeviceMap.plan`` for
            its other errors: a size that does not parse, a plan that cannot fit).

    Warns:
        DtypeNarrowingWarning: I64, U64 and F64 tensors become 32-bit unless
            ``jax_enable_x64`` is on; they are narrowed chunk by chunk as they are read.

    Note:
        A mapped array shows the file's current bytes. Replacing the file (a new file
        renamed over it, as ``tj.save_file`` and ``torch.save`` do) is safe: the arrays
        keep the old contents. Rewriting it in place (as ``safetensors.torch.save_file``
        does) changes the arrays, those already read included, and truncating it makes
        reading them crash the process with ``SIGBUS``, exactly as with
        ``safetensors.torch.load_file``. Use ``backend="pread"`` then.

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
    path = checked_path("load_file()", filename)  # bytes too, as tj.safe_open and tj.load
    device = planned_target(path, device, device_map=device_map, max_memory=max_memory)
    if sharded.handles_file(path, device):
        # Checked only: each process reads the parts its devices hold, mapped or not.
        maps_file(backend)
        checked_staging(staging_bytes)
        return sharded.load_file(path, device, max_tensors=max_tensors, progress=progress)
    return load_file_on_device(
        path,
        device,
        backend=backend,
        staging_bytes=staging_bytes,
        max_tensors=max_tensors,
        progress=progress,
    )


class safe_open:  # safetensors' name, lowercase, so ported code reads the same
    """A safetensors file opened for lazy reads: ``safetensors.safe_open`` for JAX.

    Only the header is read when the file is opened. ``get_tensor`` gives one
    tensor; ``get_slice`` gives only the part an index selects, so a training loop
    can take random windows of a token array far larger than RAM. Every array lands on
    ``device`` (the CPU unless you say otherwise, whatever the default device). On a CPU
    device, tensors and contiguous slices that start 64-byte aligned are arrays over a
    memory map of the file, as in [`tj.load_file`][torch2jax_device.load_file]; other
    reads copy only the bytes they select. Onto a device that copies (a GPU), each tensor
    or slice is checked against the device's free memory before it is read, as
    ``tj.load_file`` checks a load, and refused with ``tj.OutOfMemoryError`` and the fix.

    Args:
        filename: The ``.safetensors`` file (safetensors' name for it).
        framework: safetensors' ``framework`` (``"flax"``, ``"numpy"``, ``"pt"``, ...),
            accepted so that ported calls run unchanged; the results are JAX arrays
            whatever it says.
        device: Anything ``tj.device`` accepts; ``None`` also means the CPU. Or a
            sharding, a mesh, a ``tj.ShardingRule`` or a function, as for
            ``tj.load_file``: each process then reads only its parts.
            ``"auto"`` (with ``max_memory``) or a `tj.DeviceMap`: a plan, made from the
            header when the file is opened (``plan`` holds it), places each tensor
            ``get_tensor`` reads, as ``tj.load_file(path, device="auto")`` would place
            it; a slice goes where its tensor goes.
        backend: ``"mmap"`` or ``"pread"``, as for ``tj.load_file``.
        max_tensors: The most tensors the file may hold, as for ``tj.load_file``.
        device_map: An explicit map (``{pattern: device}``), as for ``tj.load_file``.
        max_memory: The budgets of ``device="auto"``, as for ``tj.load_file``.

    Attributes:
        plan: The `tj.DeviceMap` tensors are placed by, or ``None`` without one.

    Raises:
        CheckpointError: the header is invalid (see [`tj.load_file`][torch2jax_device.load_file]).
        CheckpointFileNotFoundError, CheckpointIsADirectoryError: no file at
            ``filename`` (a ``FileNotFoundError``), or a directory there.
        ArgumentTypeError: ``filename`` is not a str, bytes or os.PathLike.
        DeviceUnavailableError: ``device`` does not exist here (checked before opening).
        ConfigError, InvalidDeviceError, OutOfMemoryError: a plan that cannot be made,
            as ``tj.DeviceMap.plan`` says (before a tensor byte is read).
        InvalidDeviceError: ``framework`` is not one safetensors knows (for instance a
            device passed in its place), or ``backend`` is neither ``"mmap"`` nor
            ``"pread"``.

    Examples:
        >>> import os, tempfile
        >>> import numpy as np
        >>> import torch2jax_device as tj
        >>> path = os.path.join(tempfile.mkdtemp(), "tokens.safetensors")
        >>> tj.save_file({"tokens": np.arange(10, dtype=np.uint16)}, path, {"vocab": "gpt2"})
        >>> with tj.safe_open(path, framework="flax") as f:
        ...     window = f.get_slice("tokens")[2:5]
        ...     f.keys(), f.metadata(), window.tolist(), f.get_slice("tokens").get_shape()
        (['tokens'], {'vocab': 'gpt2'}, [2, 3, 4], [10])

        Each tensor placed by a plan made from the header (on a GPU machine,
        ``max_memory={"cuda:0": "20GiB", "cpu": "100GiB"}``):

        >>> with tj.safe_open(path, framework="flax", device="auto",
        ...                   max_memory={"cpu": "1GiB"}) as f:
        ...     f.plan.modules(), f.get_tensor("tokens").sharding.memory_kind
        ({'': 'cpu'}, 'device')
    """

    def __init__(
        self,
        filename: PathLike,
        framework: str | None = None,
        device: Any = "cpu",
        *,
        backend: str = "mmap",
        max_tensors: int | None = None,
        device_map: Mapping[str, Any] | str | None = None,
        max_memory: Mapping[Any, Any] | None = None,
    ) -> None:
        path = checked_path("safe_open()", filename)
        check_framework(path, framework)
        self._placement: Placement
        device = planned_target(path, device, device_map=device_map, max_memory=max_memory)
        self.plan = device if isinstance(device, DeviceMap) else None
        if sharded.handles_open(device):
            maps_file(backend)  # checked only: each process reads the parts it holds
            self._placement = sharded.OnMesh(device)
        else:
            self._placement = OnDevice(device, backend)
        self._reader = Reader(path, max_tensors=max_tensors)
        self._torch_indexing = framework == "pt"

    def __enter__(self) -> safe_open:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file; reads after this raise ``tj.CheckpointError``.

        Arrays already returned stay valid (mapped ones keep the mapping alive).
        """
        self._reader.close()

    def keys(self) -> list[str]:
        """The tensor names, sorted, as safetensors' ``keys()`` gives them."""
        return sorted(self._reader.tensors)

    def offset_keys(self) -> list[str]:
        """The tensor names in the file's order (by data offset), as safetensors 0.8 gives them."""
        return list(self._reader.tensors)

    def metadata(self) -> dict[str, str] | None:
        """The header's ``__metadata__`` strings, or ``None`` if it has none."""
        return None if self._reader.metadata is None else dict(self._reader.metadata)

    def get_tensor(self, name: str) -> jax.Array:
        """The whole tensor ``name`` on the device.

        Raises:
            ArgumentTypeError: ``name`` is not a string (safetensors raises ``TypeError``).
            CheckpointError: the file has no tensor ``name`` (the message lists some
                that it has), or it was closed.
            OutOfMemoryError: the tensor cannot fit the device's free memory (checked
                before reading, as ``tj.load_file`` checks), or the device ran out.
        """
        return self._placement.tensor(self._reader, self._reader.info(name))

    def get_tensors(self) -> dict[str, jax.Array]:
        """Every tensor, by name in the file's order: safetensors 0.8's ``get_tensors()``."""
        return {name: self.get_tensor(name) for name in self.offset_keys()}

    def get_slice(self, name: str) -> TensorSlice:
        """A lazy view of tensor ``name``; index it to read part of it.

        Opened with ``framework="pt"``, an index with lists, arrays, tensors or bools in
        it follows torch's rules, as safetensors' ``"pt"`` slices do (the whole tensor
        is read); other frameworks take basic indices only, as safetensors' do.

        Raises:
            ArgumentTypeError: ``name`` is not a string (safetensors raises ``TypeError``).
            CheckpointError: the file has no tensor ``name``.

        Examples:
            >>> import os, tempfile
            >>> import numpy as np
            >>> import torch2jax_device as tj
            >>> path = os.path.join(tempfile.mkdtemp(), "rows.safetensors")
            >>> tj.save_file({"rows": np.arange(6, dtype=np.int32).reshape(3, 2)}, path)
            >>> with tj.safe_open(path, framework="pt") as f:
            ...     f.get_slice("rows")[1:].tolist(), f.get_slice("rows")[[2, 0]].tolist()
            ([[2, 3], [4, 5]], [[4, 5], [0, 1]])
        """
        info = self._reader.info(name)
        return TensorSlice(self._reader, info, self._placement, torch_indexing=self._torch_indexing)


def save_file(
    tensors: Mapping[str, Any], filename: PathLike, metadata: Mapping[str, str] | None = None
) -> None:
    """Equivalent to `safetensors.torch.save_file`.

    Write arrays to a safetensors file, atomically. Values may be JAX arrays (on any device,
    also sharded), NumPy arrays and torch tensors (on any device), mixed. The file is
    written under a temporary name in the same directory, flushed to disk and renamed: a
    crash or error never leaves a partial file under ``path`` (an existing file stays
    intact), and a temporary left by a save that was killed is removed by the next save to
    the same path. An existing file keeps its permission bits; a new one gets those the
    umask leaves. A symbolic link is followed, as ``open()`` follows it, except another
    user's link in a sticky, world-writable directory such as ``/tmp``, which the
    kernel's ``fs.protected_symlinks`` refuses ``open()`` too. Host memory holds
    one tensor at a time. Tensors sharing memory are each written in full.

    An array on a GPU (any device with pinned host memory) is copied through the
    device's ``pinned_host`` memory, at the bus's speed where ``np.asarray`` copies at
    about 2 GB/s; a sharded array is put together on the host from each distinct shard,
    copied once (a shard already in host memory is read in place). An array sharded over
    several processes must be gathered first (``tj.to_device(array, "cpu")`` on every
    process).

    The file is laid out for loading without copies: the header is padded with spaces
    so the data starts 64-byte aligned, and tensors whose sizes are multiples of 64
    bytes come first, so every one of them is aligned (then the others, largest first).
    Every safetensors loader reads it; the bytes differ from ``safetensors.torch``'s only
    in that padding and order.

    Args:
        tensors: ``{name: array}``, or a Flax NNX module or ``nnx.State`` (saved under
            dotted names, as [`tj.state_dict`][torch2jax_device.state_dict] gives them).
        filename: Where to write (safetensors' name for it; a ``str``, ``bytes`` or
            ``os.PathLike``).
        metadata: Strings to store in the header's ``__metadata__``.

    Raises:
        ArgumentTypeError: a name is not a string, or ``metadata`` does not map strings
            to strings (a ``TypeError``, as ``safetensors.torch.save_file`` raises);
            nothing is written.
        ConversionError: a value is not an array (or is a tracer, or deleted, or sharded
            over processes and only partly here), or a name is ``'__metadata__'``, or a
            name or metadata string holds a lone surrogate (UTF-8 cannot encode it).
        DTypeError: an array has a dtype save_file cannot write (names the tensor).
        CheckpointError: ``metadata`` holds more than 65,536 entries or 16 MiB of text
            (loads refuse such headers); ``filename`` is a device, a FIFO or a socket
            (``safetensors`` and ``torch.save`` write into them; a rename would replace
            the node), or goes through another user's link in a sticky, world-writable
            directory.
        CheckpointIsADirectoryError: ``filename`` is a directory (an
            ``IsADirectoryError``, as with ``torch.save``), or ends in ``/``
            (``CheckpointNotADirectoryError`` where no such directory exists; torch and
            safetensors refuse it too).
        ArgumentTypeError: ``filename`` is not a str, bytes or os.PathLike.

    Examples:
        >>> import os, tempfile
        >>> import jax.numpy as jnp, numpy as np
        >>> from safetensors.numpy import load_file as numpy_load_file
        >>> import torch2jax_device as tj
        >>> path = os.path.join(tempfile.mkdtemp(), "mixed.safetensors")
        >>> tj.save_file({"jax": jnp.ones(2, jnp.bfloat16), "numpy": np.zeros(3)}, path)
        >>> numpy_load_file(path)["numpy"]
        array([0., 0., 0.])

        A sharded array is saved whole, each shard copied to the host once:

        >>> from jax.sharding import NamedSharding, PartitionSpec as P
        >>> mesh = tj.distributed.init_device_mesh("cpu", (1,), mesh_dim_names=("model",))
        >>> rows = tj.to_device(np.arange(6.0).reshape(3, 2), NamedSharding(mesh, P("model")))
        >>> tj.save_file({"rows": rows}, path)
        >>> numpy_load_file(path)["rows"].tolist()
        [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    """
    from .module_state import named_arrays  # a model or nnx.State: its arrays, by name

    path = checked_path("save_file()", filename)
    tensors = named_arrays(tensors)
    if not isinstance(tensors, Mapping):
        raise ConversionError(
            f"save_file() takes a mapping of names to arrays, not {type(tensors).__name__}"
        )
    if metadata is not None and not (
        isinstance(metadata, Mapping)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise ArgumentTypeError(
            f"metadata must map str to str, got {metadata!r}; convert keys and values with "
            "str() (safetensors raises TypeError too); nothing was written"
        )
    if metadata is not None:
        for key, text in metadata.items():
            _check_text(key, "the metadata key")
            _check_text(text, f"the metadata value of {shown(key)}:")
        check_metadata(
            dict(metadata),
            lambda problem: CheckpointError(f"save_file(): {problem}; nothing was written"),
        )
    sources = {}
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise ArgumentTypeError(
                f"tensor names must be strings, got {name!r} ({type(name).__name__}); "
                "convert it with str() (safetensors raises TypeError too); nothing was written"
            )
        if name == "__metadata__":
            raise ConversionError(
                "tensor names must be strings other than '__metadata__', the header's "
                "metadata entry; rename the tensor"
            )
        _check_text(name, "the tensor name")
        sources[name] = _source(name, value)
    write_file(path, sources, metadata)


def _check_text(text: str, what: str) -> None:
    """Refuse a string UTF-8 cannot encode (a lone surrogate), which a header cannot hold."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ConversionError(
            f"{what} {shown(text)} is not valid Unicode text: it holds the lone surrogate "
            f"{text[err.start]!r} at position {err.start} (os.fsdecode makes one from a "
            "file name that is not UTF-8), and a safetensors header is UTF-8. Fix: rename "
            "it, e.g. text.encode('utf-8', 'surrogateescape').decode('utf-8', 'replace'); "
            "nothing was written"
        ) from None


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
        return _numpy_source(
            name, np.dtype(value.dtype), value.shape, lambda: _fetched(name, value)
        )
    if isinstance(value, (np.ndarray, np.generic)):
        try:
            array = numpy_data(value)
        except ConversionError as error:
            raise ConversionError(f"tensor {name!r}: {error}") from None
        return _numpy_source(name, array.dtype, array.shape, lambda: array)
    raise ConversionError(
        f"tensor {name!r} is a {type(value).__name__}; save_file takes JAX arrays, NumPy "
        "arrays and torch tensors (wrap numbers with np.asarray)"
    )


def _fetched(name: str, array: jax.Array) -> np.ndarray[Any, Any]:
    """The value of ``array`` on the host, from an accelerator at pinned speed.

    Each distinct shard is copied once, through its device's pinned host memory where it
    has one (``distributed.transfer.to_numpy``); an array on a CPU device is read in place.
    """
    host = to_numpy(array)
    if host is None:
        raise ConversionError(
            f"tensor {name!r} is sharded over processes and this one holds only part of it; "
            "save it from a value every process holds whole: tj.to_device(array, 'cpu') "
            "on every process first (it gathers the parts), then save on one"
        )
    return host


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
            f"tensor {shown(name)} has dtype {dtype}, which save_file cannot write (it writes "
            f"{stored}; safetensors' packed sub-byte F4/F6 kinds are neither written nor read "
            "yet); cast it first, e.g. to float8_e4m3fn or bfloat16"
        )
    return native


def _numpy_source(
    name: str, dtype: np.dtype[Any], shape: tuple[int, ...], host: Callable[[], Any]
) -> TensorSource:
    native = _checked_dtype(name, dtype)
    return TensorSource(native, tuple(shape), lambda: np.ascontiguousarray(host(), native))


def _torch_source(name: str, tensor: Any) -> TensorSource:
    import torch

    try:
        check_data_tensor(tensor)
    except ConversionError as error:
        raise ConversionError(f"tensor {name!r}: {error}") from None
    if tensor.layout != torch.strided or tensor.device.type == "meta":
        raise ConversionError(
            f"tensor {name!r} is a {tensor.layout} tensor on {tensor.device}; save_file "
            "writes dense tensors with data (call .to_dense() / materialize it first)"
        )
    dtype = _checked_dtype(name, tensor.dtype)
    shape = tuple(tensor.shape)

    def fetch() -> np.ndarray[Any, Any]:
        host = tensor.detach().resolve_conj().resolve_neg().to("cpu").reshape(-1)
        # torch calls a tensor of at most one element contiguous whatever its stride,
        # and the byte view below needs a stride of 1: a dense copy is made where needed.
        host = (
            host.contiguous()
            if host.numel() > 1
            else host.clone(memory_format=torch.contiguous_format)
        )
        # Through bytes, so dtypes torch.Tensor.numpy() refuses (bf16, fp8, ...) work too.
        array: np.ndarray[Any, Any] = host.view(torch.uint8).numpy()
        return array.view(dtype).reshape(shape)

    return TensorSource(dtype, shape, fetch)
