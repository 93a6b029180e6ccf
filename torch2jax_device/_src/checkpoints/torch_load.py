"""``torch.load`` for JAX users: checkpoints as JAX arrays, ``map_location`` included.

``.safetensors`` files are read natively; PyTorch ``.pt`` / ``.bin`` checkpoints through
``torch.load(weights_only=True)`` (torch is imported only for them), whose tensors become
JAX arrays without copies where the memory allows. ``map_location`` is classified once,
by ``MapLocationRule``, for both formats.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Callable, Mapping
from typing import Any, cast

import jax

from ..detect import is_torch_device, is_torch_tensor
from ..device import Device, DeviceLike, resolve
from ..errors import CheckpointError, DeviceTypeError, DeviceUnavailableError
from ..interop import to_jax
from .progress import Progress
from .safetensors import PathLike, load_file

__all__ = ["MapLocation", "MapLocationRule", "load"]

#: What ``map_location`` accepts, as in ``torch.load``: a device, a dict from saved
#: location tags (``"cuda:0"``) to devices, or a callable ``(storage, location)``.
MapLocation = DeviceLike | Mapping[str, DeviceLike] | Callable[[Any, str], Any] | None


def load(path: PathLike, map_location: MapLocation = None, *, progress: bool | None = None) -> Any:
    """Load a checkpoint as JAX arrays: ``torch.load`` for JAX users, ``map_location`` too.

    ``.safetensors`` files are read natively (see [`tj.load_file`][torch2jax_device.load_file]);
    PyTorch ``.pt`` / ``.bin`` files through ``torch.load(weights_only=True)``, which needs torch
    and never runs code from the file. Their tensors become JAX arrays without copies where the
    memory allows (``tj.to_jax``); everything else (ints, floats, strings, nested dicts and lists
    such as nanoGPT's ``{'model', 'optimizer', 'iter_num', 'model_args'}``) is kept as it is.

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
        progress: Draw a progress bar on stderr (see [`tj.load_file`][torch2jax_device.load_file]).

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

    Examples:
        >>> import os, tempfile
        >>> import torch
        >>> import torch2jax_device as tj
        >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
        >>> torch.save({"model": {"w": torch.ones(2)}, "iter_num": 7}, path)
        >>> checkpoint = tj.load(path, map_location="cpu")
        >>> weights = checkpoint["model"]
        >>> checkpoint["iter_num"], weights["w"].device
        (7, CpuDevice(id=0))
    """
    from . import sharded  # a Sharding, a Mesh, a ShardingRule, or an index of shards

    if sharded.handles_checkpoint(path, map_location):
        return sharded.load(path, map_location, progress=progress)
    path = os.fspath(path)
    rule = MapLocationRule(map_location)
    if _is_safetensors(path):
        return load_file(path, rule.safetensors_device(path), progress=progress)
    return _load_torch(path, rule, progress)


class MapLocationRule:
    """One ``map_location``, classified once: a device, a dict of locations or a callable.

    Raises:
        DeviceTypeError: ``map_location`` is none of the forms ``torch.load`` takes.
    """

    def __init__(self, map_location: MapLocation) -> None:
        self.device: DeviceLike | None = None
        self.mapping: Mapping[str, DeviceLike] | None = None
        self.function: Callable[[Any, str], Any] | None = None
        # Devices first: a tj.device is callable (its decorator form).
        if isinstance(map_location, (str, int, Device, jax.Device)) or is_torch_device(
            map_location
        ):
            self.device = map_location
        elif isinstance(map_location, Mapping):
            self.mapping = map_location
        elif callable(map_location):
            self.function = cast(Callable[[Any, str], Any], map_location)
        elif map_location is not None:
            raise DeviceTypeError(
                f"map_location must be a device, a dict of locations or a callable, not "
                f"{type(map_location).__name__}"
            )

    def target(self, location: str) -> Any:
        """Where a tensor saved at ``location`` goes, for the device and dict forms."""
        if self.device is not None:
            return self.device
        if self.mapping is not None:
            return self.mapping.get(location, location)
        return location

    def safetensors_device(self, path: str) -> DeviceLike:
        """The device a safetensors file goes to: its tensors count as saved on ``cpu``."""
        if self.function is not None:
            raise DeviceTypeError(
                f"a callable map_location cannot place {path!r}: it receives torch storages, "
                "and a safetensors file has none. Pass a device, e.g. "
                "tj.load(path, map_location='cuda:0')"
            )
        return self.target("cpu")


def _is_safetensors(path: str) -> bool:
    if path.endswith(".safetensors"):
        return True
    with open(path, "rb") as file:
        head = file.read(9)
    # The 8-byte header length, then JSON; zip and pickle files never have "{" there.
    return head[8:9] == b"{"


class _LocationHook:
    """``torch.load``'s ``map_location``: keeps storages on the CPU, records their targets.

    torch calls it with each storage (on the CPU) and its saved location tag. Data stays
    on the CPU and is moved once, after conversion to JAX, to the device ``map_location``
    names, following torch's rules for each form. A callable's result is used as is.
    """

    def __init__(self, rule: MapLocationRule) -> None:
        self._rule = rule
        # storage._cdata -> (saved location, where it goes)
        self.targets: dict[int, tuple[str, Any]] = {}
        self.failure: BaseException | None = None

    def __call__(self, storage: Any, location: str) -> Any:
        target = self._rule.target(location)
        if self._rule.function is not None:
            try:
                moved = self._rule.function(storage, location)
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


def _load_torch(path: str, rule: MapLocationRule, progress: bool | None) -> Any:
    try:
        import torch
    except ImportError as err:
        raise CheckpointError(
            f"{path!r} is a PyTorch checkpoint, and reading one needs torch, which is not "
            "installed. Fix: pip install torch (safetensors files load without it)"
        ) from err
    hook = _LocationHook(rule)
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
