"""One exception hierarchy for the whole library.

Every error raised on purpose by torch2jax_device derives from
[`tj.Torch2JaxDeviceError`][torch2jax_device.Torch2JaxDeviceError], so
`except tj.Torch2JaxDeviceError` catches all of them. Each one also derives from the
builtin exception that PyTorch raises in the same situation, so `except RuntimeError`
(or `AssertionError`, `TypeError`) clauses ported from PyTorch code keep working
unchanged.
"""

from __future__ import annotations

import errno

__all__ = [
    "AlreadyInitializedError",
    "ArgumentTypeError",
    "BackendInitError",
    "CheckpointError",
    "CheckpointFileNotFoundError",
    "CheckpointIsADirectoryError",
    "CheckpointNotADirectoryError",
    "ConfigError",
    "ConversionError",
    "DTypeError",
    "DeviceTypeError",
    "DeviceUnavailableError",
    "DimensionNameError",
    "DistributedError",
    "EmptyTreeError",
    "InvalidDeviceError",
    "InvalidIndexError",
    "MemoryFormatError",
    "MissingFrameworkError",
    "MissingKeyError",
    "MixedDeviceError",
    "NoSuchAttributeError",
    "OutOfMemoryError",
    "SeedError",
    "StateDictError",
    "Torch2JaxDeviceError",
    "UnscannableFileError",
    "UnsupportedOperationError",
]


class Torch2JaxDeviceError(Exception):
    """Base class of every error raised by torch2jax_device.

    Examples:
        >>> import torch2jax_device as tj
        >>> try:
        ...     tj.device("cuda:01")
        ... except tj.Torch2JaxDeviceError as error:
        ...     print(type(error).__name__)
        InvalidDeviceError
    """


class InvalidDeviceError(Torch2JaxDeviceError, RuntimeError, ValueError):
    """A device specification is malformed or names the wrong kind of device.

    PyTorch raises `RuntimeError` for malformed strings (`torch.device("cuda:01")`)
    and `ValueError` when a `torch.cuda` function gets a non-CUDA device; this
    class is both.

    Examples:
        >>> import torch2jax_device as tj
        >>> try:
        ...     tj.device("cuda:01")
        ... except RuntimeError as error:  # the clause ported from PyTorch
        ...     print(error)  # doctest: +ELLIPSIS
        Invalid device string: 'cuda:01'. Fix: write a device type and an optional index, ...
    """


class DeviceTypeError(Torch2JaxDeviceError, TypeError):
    """A device argument has a Python type that cannot name a device (`True`, `1.5`).

    Examples:
        >>> import torch2jax_device as tj
        >>> try:
        ...     tj.device(1.5)
        ... except TypeError as error:  # torch raises TypeError too
        ...     print(error)
        device(): argument 'type' must be str, int, jax.Device or torch.device, not float
    """


class DeviceUnavailableError(Torch2JaxDeviceError, RuntimeError, AssertionError):
    """A well-formed device does not exist on this machine.

    PyTorch raises `RuntimeError` for this on builds with CUDA support and
    `AssertionError("Torch not compiled with CUDA enabled")` on CPU-only builds; this
    class is both, so ported `except` clauses catch it either way. The message
    names the devices that do exist and how to get the missing one.

    Examples:
        >>> import torch2jax_device as tj
        >>> try:
        ...     tj.resolve("cuda:1000")
        ... except tj.DeviceUnavailableError as error:
        ...     print(str(error).split(":")[0])
        Device 'cuda
        >>> issubclass(tj.DeviceUnavailableError, (RuntimeError, AssertionError))
        True
    """


class BackendInitError(Torch2JaxDeviceError, RuntimeError):
    """JAX could not initialize its backends (usually a `JAX_PLATFORMS` setting).

    Raised by the first call that starts JAX through torch2jax_device
    ([`tj.available_backends`][torch2jax_device.available_backends], `tj.resolve`, ...);
    the message carries JAX's reason and the fix. `torch2jax-device doctor` explains the
    same settings.

    Examples:
        >>> import torch2jax_device as tj
        >>> try:
        ...     backends = tj.available_backends()
        ... except tj.BackendInitError as error:  # e.g. JAX_PLATFORMS=cuda on a CPU machine
        ...     print(error)  # JAX's reason, and the fix
        >>> issubclass(tj.BackendInitError, RuntimeError)
        True
    """


class MixedDeviceError(Torch2JaxDeviceError, RuntimeError, ValueError):
    """Arrays that must share one device are on several.

    PyTorch raises `RuntimeError("Expected all tensors to be on the same device ...")`
    and JAX `ValueError("Received incompatible devices ...")`; this class is both.
    The message names every device and a leaf path on each.

    Examples:
        >>> import numpy as np
        >>> import torch2jax_device as tj
        >>> batch = tj.to_device({"x": np.ones(2, np.float32), "y": np.zeros(2, np.int32)}, "cpu")
        >>> tj.check_same_device(batch)  # one device: no error
        device(type='cpu')
        >>> issubclass(tj.MixedDeviceError, (RuntimeError, ValueError))
        True
    """


class EmptyTreeError(Torch2JaxDeviceError, ValueError):
    """A tree, module or batch that should hold arrays holds none.

    Examples:
        >>> import torch2jax_device as tj
        >>> try:
        ...     tj.device_of({})
        ... except ValueError as error:
        ...     print(type(error).__name__)
        EmptyTreeError
    """


class DTypeError(Torch2JaxDeviceError, TypeError):
    """A dtype that JAX does not know (torch raises `TypeError` for bad dtypes).

    Examples:
        >>> import numpy as np
        >>> import torch2jax_device as tj
        >>> try:
        ...     tj.to_device(np.ones(2, np.float32), dtype="float99")
        ... except TypeError as error:
        ...     print(str(error).split(":")[0])
        unknown dtype 'float99'
    """


class ConversionError(Torch2JaxDeviceError, ValueError):
    """A value cannot be turned into a JAX array as asked.

    Raised for array-like leaves JAX cannot convert, deleted or donated arrays, and
    `strict=True` conversions that would need a copy. Names the leaf path and the fix.

    Examples:
        >>> import numpy as np
        >>> import torch2jax_device as tj
        >>> try:
        ...     tj.to_jax(np.arange(4, dtype=np.int64), strict=True)  # 64-bit JAX is off
        ... except tj.ConversionError as error:
        ...     print(str(error).split(";")[0])
        strict=True: the int64 array would be copied to int32 because jax_enable_x64 is off
    """


class AlreadyInitializedError(Torch2JaxDeviceError, RuntimeError):
    """A start-up setting was changed after JAX's backends started, when it cannot apply.

    JAX reads `JAX_PLATFORMS`, the `XLA_PYTHON_CLIENT_*` variables and the CPU
    device count once, when its backends start; later changes are ignored (silently, for
    some of them). The message names what is running and how to restart.

    Examples:
        >>> import torch2jax_device as tj
        >>> backends = tj.available_backends()  # starts JAX
        >>> try:
        ...     tj.configure(preallocate=False)
        ... except tj.AlreadyInitializedError as error:
        ...     print(str(error).split(",")[0])
        JAX's backends are already running (started: cpu)
    """


class ConfigError(Torch2JaxDeviceError, ValueError):
    """A configuration value JAX would reject or misread (bad allocator, fraction, ...).

    Examples:
        >>> import torch2jax_device as tj
        >>> try:
        ...     tj.configure(allocator="cuda_malloc")
        ... except ValueError as error:
        ...     print(type(error).__name__)
        ConfigError
    """


class UnsupportedOperationError(Torch2JaxDeviceError, NotImplementedError):
    """A PyTorch operation JAX has no way to perform (e.g. resetting peak memory stats).

    It is a `NotImplementedError`; the message says what to do instead.

    Examples:
        >>> import torch2jax_device as tj
        >>> import jax
        >>> @jax.jit
        ... def step(x):
        ...     return tj.get_device(x)  # traced arrays have no device
        >>> try:
        ...     step(jax.numpy.ones(2))
        ... except tj.UnsupportedOperationError as error:
        ...     print(str(error).split(":")[0])
        get_device() has no answer under jax.jit
        >>> issubclass(tj.UnsupportedOperationError, NotImplementedError)
        True
    """


class CheckpointError(Torch2JaxDeviceError, ValueError):
    """A checkpoint file cannot be read: corrupted, truncated, unsafe or unsupported.

    The message names the file, what is wrong and, where there is one, the fix.

    Examples:
        >>> import pathlib, tempfile
        >>> import torch2jax_device as tj
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "broken.safetensors"
        >>> _ = path.write_bytes(b"not a checkpoint")
        >>> try:
        ...     tj.load_file(path)
        ... except tj.CheckpointError as error:
        ...     print("is not a valid safetensors file" in str(error))
        True
    """


class _PathError(CheckpointError, OSError):
    """A checkpoint path that cannot be opened, as the builtin ``OSError`` subclass torch
    raises there: ``errno`` and ``filename`` are set as ``open()`` sets them, and the
    message names the path and the fix."""

    _errno = 0

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.errno, self.strerror, self.filename = self._errno, message, path

    def __str__(self) -> str:
        return str(self.args[0])


class CheckpointFileNotFoundError(_PathError, FileNotFoundError):
    """A checkpoint path that names no file: torch's ``FileNotFoundError``, and a
    `tj.CheckpointError`, so ``except FileNotFoundError:`` ported from torch still catches it.

    Examples:
        >>> import torch2jax_device as tj
        >>> try:
        ...     tj.load("no-such-checkpoint.pt")
        ... except FileNotFoundError as error:
        ...     print(type(error).__name__, error.errno, error.filename)
        CheckpointFileNotFoundError 2 no-such-checkpoint.pt
    """

    _errno = errno.ENOENT


class CheckpointIsADirectoryError(_PathError, IsADirectoryError):
    """A checkpoint path that names a directory where a file belongs: the
    ``IsADirectoryError`` torch raises, and a `tj.CheckpointError`.

    Examples:
        >>> import tempfile
        >>> import torch2jax_device as tj
        >>> try:
        ...     tj.load_file(tempfile.mkdtemp())
        ... except IsADirectoryError as error:
        ...     print(type(error).__name__, "Fix:" in str(error))
        CheckpointIsADirectoryError True
    """

    _errno = errno.EISDIR


class CheckpointNotADirectoryError(_PathError, NotADirectoryError):
    """A checkpoint path that goes through a file as if it were a directory (``a.pt/b``,
    or a save to ``missing-dir/``): the ``NotADirectoryError`` torch raises, and a
    `tj.CheckpointError`.

    Examples:
        >>> import os, tempfile
        >>> import torch2jax_device as tj
        >>> try:
        ...     tj.save_file({}, os.path.join(tempfile.mkdtemp(), "missing", ""))
        ... except NotADirectoryError as error:
        ...     print(type(error).__name__)
        CheckpointNotADirectoryError
    """

    _errno = errno.ENOTDIR


class MissingKeyError(Torch2JaxDeviceError, KeyError):
    """A key a mapping of the library's does not hold (a ``tj.optim.ParamGroup``'s
    option): the ``KeyError`` of the ``Mapping`` protocol (``.get()`` and ``in`` rely on
    it), with a message naming the key, the keys there are and the fix.

    Examples:
        >>> from flax import nnx
        >>> import torch2jax_device as tj
        >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        >>> optimizer = nnx.Optimizer(model, tj.optim.SGD(lr=0.1), wrt=nnx.Param)
        >>> group = tj.optim.param_groups(optimizer)[0]
        >>> group.get("nonsense", "absent")  # the Mapping protocol: a KeyError underneath
        'absent'
        >>> try:
        ...     group["nonsense"]
        ... except KeyError as error:
        ...     print(type(error).__name__, str(error).split(":")[0])
        MissingKeyError param_groups[0] has no key 'nonsense'
    """

    def __str__(self) -> str:  # KeyError's repr()s its argument; this is a sentence
        return str(self.args[0]) if self.args else ""


class InvalidIndexError(Torch2JaxDeviceError, IndexError, ValueError):
    """An index into a stored tensor is out of range, has a zero step, or is not basic.

    NumPy and torch raise `IndexError` for the first and `ValueError` for a zero
    step; this class is both.

    Examples:
        >>> import pathlib, tempfile
        >>> import numpy as np
        >>> import torch2jax_device as tj
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "w.safetensors"
        >>> tj.save_file({"w": np.zeros((2, 3), np.float32)}, path)
        >>> with tj.safe_open(path) as f:
        ...     try:
        ...         f.get_slice("w")[5]
        ...     except IndexError as error:
        ...         print(str(error).split(": ")[1])
        index 5 is out of bounds for axis 0 with size 2
    """


class DistributedError(Torch2JaxDeviceError, RuntimeError, ValueError):
    """A multi-process job is misconfigured, or a process group operation failed.

    `torch.distributed` raises `ValueError` for configuration mistakes (a missing
    `RANK`, an uninitialized or doubly initialized process group) and
    `RuntimeError` (`DistError`, `DistStoreError`) when a rendezvous or a
    collective times out; this class is both, so ported `except` clauses keep
    working.

    Examples:
        >>> from torch2jax_device import distributed as dist
        >>> try:
        ...     dist.get_rank()
        ... except ValueError as error:  # as torch.distributed raises
        ...     print(type(error).__name__)
        DistributedError
    """


class MissingFrameworkError(Torch2JaxDeviceError, ModuleNotFoundError):
    """An optional framework a call needs (torch, flax) is not installed.

    A ``ModuleNotFoundError``, as the bare import would raise, so ported ``except
    ImportError`` clauses keep working; the message names the call and the install
    command.

    Examples:
        >>> import torch2jax_device as tj
        >>> issubclass(tj.MissingFrameworkError, ImportError)  # `except ImportError` works
        True
        >>> try:
        ...     tensor = tj.to_torch([1.0])  # without torch: MissingFrameworkError
        ... except tj.MissingFrameworkError as error:
        ...     message = str(error)  # names the call and `pip install torch`
        ... except tj.ConversionError:
        ...     pass  # with torch installed, a list is simply not an array
    """


class NoSuchAttributeError(Torch2JaxDeviceError, AttributeError):
    """A torch-style object lacks an attribute its torch or JAX counterpart has.

    Raised by [`tj.device`][torch2jax_device.Device] when JAX code reads a
    ``jax.Device`` or ``Sharding`` attribute from it, and by
    [`tj.Parameter`][torch2jax_device.Parameter] for torch-only attributes; the
    message names the object to use instead.

    Examples:
        >>> import torch2jax_device as tj
        >>> device = tj.device("cpu")
        >>> try:
        ...     device.platform  # a jax.Device attribute
        ... except tj.NoSuchAttributeError as error:
        ...     print(str(error).split(": ")[0])
        tj.device('cpu') has no attribute 'platform'
        >>> device.jax_device.platform  # the JAX object has it
        'cpu'
        >>> try:
        ...     tj.cuda.Stream  # a torch.cuda name with no counterpart here
        ... except tj.NoSuchAttributeError as error:
        ...     print(str(error).split(":")[0])
        tj.cuda has no 'Stream' (torch.cuda.Stream)
    """

    @classmethod
    def unmapped(cls, namespace: str, name: str) -> AttributeError:
        """The error for ``tj.<namespace>.<name>`` where ``torch.<namespace>.<name>``
        has no counterpart in the module (a plain ``AttributeError`` for a private or
        dunder name, as Python raises: tools probe those)."""
        if name.startswith("_"):  # dunders and tools' probes (_repr_html_)
            return AttributeError(
                f"module 'torch2jax_device.{namespace}' has no attribute {name!r}"
            )
        return cls(
            f"tj.{namespace} has no {name!r} (torch.{namespace}.{name}): it maps only the "
            f"torch.{namespace} names that have a JAX meaning (the API reference lists them). Fix: "
            "run `torch2jax-device scan` on the file, which says what to write instead, or "
            "keep this line torch's"
        )


class SeedError(Torch2JaxDeviceError, TypeError, ValueError):
    """A random seed that is not an integer.

    ``torch.manual_seed`` and ``torch.cuda.manual_seed`` call ``int(seed)``, which raises
    ``ValueError`` for a string that is no number and ``TypeError`` for other types;
    this class is both.

    Examples:
        >>> import torch2jax_device as tj
        >>> try:
        ...     tj.cuda.manual_seed("x")
        ... except tj.SeedError as error:
        ...     print(str(error).split(";")[0])
        tj.cuda.manual_seed: the seed must be an integer, got 'x'
    """


class OutOfMemoryError(Torch2JaxDeviceError, RuntimeError):
    """Equivalent to `torch.OutOfMemoryError`.

    A transfer or load needs more device (or pinned host) memory than is free. Like
    ``torch.OutOfMemoryError`` (``torch.cuda.OutOfMemoryError``) it is a
    ``RuntimeError``, so ``except RuntimeError`` clauses ported from PyTorch still catch
    it. A device load raises it *before reading a byte* when the device's free memory
    (``Device.memory_stats()``: ``bytes_limit - bytes_in_use``) cannot hold the tensors,
    and the library's own transfers raise it, chained from JAX's ``RESOURCE_EXHAUSTED``
    error, when an allocation fails midway. The message gives the bytes needed, the bytes
    free, the limit and where it comes from, and the fix.

    Examples:
        >>> import torch2jax_device as tj
        >>> issubclass(tj.OutOfMemoryError, RuntimeError)
        True
    """


class MemoryFormatError(Torch2JaxDeviceError, TypeError, RuntimeError):
    """A ``memory_format=`` torch would refuse: not a ``torch.memory_format``, or a rank it needs.

    ``Tensor.to(memory_format=...)`` raises ``TypeError`` for a value that is no memory
    format and ``RuntimeError`` for ``torch.channels_last`` on a tensor that is not 4-d;
    this class is both. (The format itself changes nothing in JAX: arrays have no strides.)

    Examples:
        >>> import numpy as np, torch
        >>> import torch2jax_device as tj
        >>> try:
        ...     tj.to_device(np.ones(3), "cpu", memory_format=torch.channels_last)
        ... except tj.MemoryFormatError as error:
        ...     print(str(error).split(",")[0])
        required rank 4 tensor to use channels_last format
    """


class UnscannableFileError(Torch2JaxDeviceError, ValueError):
    """A file ``torch2jax-device scan`` will not read or cannot follow.

    Not a regular file (a FIFO, a device, a directory), larger than the size limit,
    not decodable as Python decodes it, nested deeper than the scanner follows, or
    changed while it was scanned. ``scan`` reports it for that file and goes on.

    Examples:
        >>> from torch2jax_device.porting.scanner import scan_source
        >>> try:
        ...     scan_source("x = torch" + ".cuda" * 2000)
        ... except UnscannableFileError as error:
        ...     print(str(error).split(";")[0])
        <string>: nested 2003 levels deep
    """


class StateDictError(CheckpointError, RuntimeError):
    """A state does not fit the model: ``tj.load_state``'s ``load_state_dict`` errors.

    Missing or unexpected names, a shape that differs, or a whole training checkpoint
    where a state dict belongs. ``Module.load_state_dict`` raises ``RuntimeError`` for
    these, so this class is one (and a `tj.CheckpointError`): ported ``except
    RuntimeError:`` clauses keep catching it.

    Examples:
        >>> from flax import nnx
        >>> import torch2jax_device as tj
        >>> try:
        ...     tj.load_state(nnx.Linear(2, 3, rngs=nnx.Rngs(0)), {"kernel": nnx.Rngs(0)})
        ... except RuntimeError as error:
        ...     print(type(error).__name__, str(error).split(":")[0])
        StateDictError Error(s) in loading the state into Linear
    """


class ArgumentTypeError(Torch2JaxDeviceError, TypeError):
    """An argument of a type the torch or safetensors call it mirrors refuses with ``TypeError``.

    A dimension that is not an int (``p.size(1.0)``), a tensor name or ``metadata`` entry
    of `tj.save_file` that is not a string. The message names the value and the fix.

    Examples:
        >>> import jax.numpy as jnp
        >>> import torch2jax_device as tj
        >>> try:
        ...     tj.Parameter(jnp.ones((2, 3))).size(1.0)
        ... except TypeError as error:  # torch raises TypeError too
        ...     print(str(error).split(";")[0])
        size(): argument 'dim' must be int, not float
    """


class DimensionNameError(ArgumentTypeError, RuntimeError):
    """A ``str`` dimension (``p.size("0")``): a dimension *name* to torch, which 2.13 refuses
    with ``TypeError`` and 2.11 with ``RuntimeError`` (its named-dimension lookup). It is
    both, so ``except`` clauses ported from either torch catch it.

    Examples:
        >>> import jax.numpy as jnp
        >>> import torch2jax_device as tj
        >>> try:
        ...     tj.Parameter(jnp.ones((2, 3))).size("0")
        ... except RuntimeError as error:  # torch 2.11's class; TypeError catches it too
        ...     print(isinstance(error, TypeError))
        True
    """
