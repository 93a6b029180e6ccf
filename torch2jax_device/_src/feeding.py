"""Feeding the device: prefetching loaders, pinned host memory, DataLoader workers.

A PyTorch training loop overlaps host-to-device copies with compute through
``DataLoader(pin_memory=True)`` and ``batch.to(device, non_blocking=True)``. Here:

* ``tj.prefetch_to_device`` moves the batches of any iterable to a device (or a
  ``jax.sharding.Sharding``) a few batches ahead of the loop; a slow source moves to a
  background thread, so that it and the device's compute overlap, while a fast one
  stays in the loop's thread, where no hand-off between threads costs time
  (``run_ahead`` decides).
* ``tj.DeviceLoader`` wraps a loader (a ``torch.utils.data.DataLoader`` or any iterable)
  the same way, once per epoch, with ``len()`` and the loader's attributes passed
  through and optional staging in pinned host memory.
* ``tj.pin_memory`` is ``Tensor.pin_memory()``: arrays in the device's ``pinned_host``
  memory kind, from which transfers to the device are direct DMA.
* A torch DataLoader whose workers would be forked after JAX started warns once
  (``tj.ForkAfterJaxWarning``), with the fix.

Batches stay NumPy arrays or torch tensors in DataLoader workers; placement happens in
the main process only, which is what makes ``num_workers > 0`` safe with JAX.
"""

from __future__ import annotations

import collections
import functools
import io
import multiprocessing
import sys
import threading
import warnings
from collections.abc import Callable, Generator, Iterable
from typing import Any

import jax
import numpy as np

from .detect import is_torch_tensor
from .device import Device, DeviceLike, is_index
from .distributed.batch_agreement import agreed_batches
from .distributed.mesh import global_batch
from .dtypes import caller_stacklevel
from .errors import ArgumentTypeError, ConfigError, DeviceTypeError, NoSuchAttributeError
from .host_staging import PINNED, has_pinned_host
from .placement import as_sharding, to_device
from .platforms import backends_initialized
from .run_ahead import THREAD_NAME, run_ahead

__all__ = ["DeviceLoader", "ForkAfterJaxWarning", "pin_memory", "prefetch_to_device"]

_HOST_MEMORY_KINDS = frozenset({PINNED, "unpinned_host"})


class ForkAfterJaxWarning(UserWarning):
    """A torch DataLoader is about to fork worker processes after JAX started.

    JAX's runtime is not fork-safe: forked workers can hang or crash (jax#9190). The
    fix is ``DataLoader(..., multiprocessing_context="spawn")`` (or ``"forkserver"``).
    [`tj.DeviceLoader`][torch2jax_device.DeviceLoader] and
    [`tj.prefetch_to_device`][torch2jax_device.prefetch_to_device] warn with it, once per
    process.

    Examples:
        >>> import warnings
        >>> import numpy as np
        >>> import torch2jax_device as tj
        >>> issubclass(tj.ForkAfterJaxWarning, UserWarning)
        True
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("error", tj.ForkAfterJaxWarning)  # in CI: fail, not warn
        ...     batches = list(tj.DeviceLoader(np.array([[1, 2], [3, 4]]), "cpu"))  # no fork
        >>> [batch.tolist() for batch in batches]
        [[1, 2], [3, 4]]
    """


def prefetch_to_device(
    iterable: Iterable[Any],
    device: DeviceLike | jax.sharding.Sharding | None = None,
    size: int = 2,
    *,
    background: bool | None = None,
) -> Generator[Any, None, None]:
    """Yield each batch of ``iterable`` already on ``device``, transferred ahead of time.

    ``for batch in batches: batch = batch.to(device, non_blocking=True)`` with the copies
    started early: the transfers of the next ``size`` batches are under way (JAX
    transfers are asynchronous) while the loop works on the current one, and a slow
    source runs in a background thread, so that it overlaps the device's compute too.
    A batch is anything [`tj.to_device`][torch2jax_device.to_device] accepts (torch tensors,
    NumPy and JAX arrays, nested containers); its arrays arrive committed to the device.

    Where the source runs (``background``): handing a batch from a thread to the loop
    costs a thread wake-up (25-100 µs on a loaded machine), more than a small batch's
    whole transfer. By default the source starts in the calling thread, which pulls
    and transfers ``size`` batches ahead between its steps, and moves to a background
    thread once pulling and placing a batch and the loop's own work per batch both take
    a quarter of a millisecond or more (medians over the last few batches): from there
    the overlap gains more than the hand-off costs.

    Batches come in the source's order. An exception raised by the source (or by the
    transfer) is raised here, with its traceback, after the batches before it.
    Closing the generator (``close()``, ``break``, or dropping it) stops the thread,
    waits for a ``next()`` already running in the source to return, and closes the
    source iterator if it has ``close()`` (so a generator passed in is closed). A torch
    ``DataLoader`` that shuffles or samples with a seeded ``generator=`` has it put back
    where torch's own loop would leave it (before the batches pulled ahead and never
    taken), so the next epoch comes in torch's order.

    Unlike ``flax.jax_utils.prefetch_to_device(iterator, size)``, the second argument
    is the device (an ``int`` there is refused, see Raises), batches need no leading
    device axis and are not copied on the host first; a ``Sharding`` splits each batch.

    Args:
        iterable: The batches; ``iter(iterable)`` is called once, at the first ``next()``.
        device: Anything [`tj.device`][torch2jax_device.Device] accepts except a bare
            ``int``, or a ``jax.sharding.Sharding`` to split every array over several
            devices. ``None`` means the default device of the calling thread, read now.
            A sharding over devices of several processes builds global batches from
            each process's own rows, as ``make_global_batch`` does.
        size: How many batches may be pulled and transferred ahead of the consumer.
            ``0`` moves each batch when it is asked for, in the calling thread.
        background: ``None`` (the default) moves the source to a background thread
            when that pays, as above; ``True`` runs it there from the first batch (a
            source that waits, on a disk or a queue, whatever the step does);
            ``False`` keeps it in the calling thread (a source bound to its thread,
            such as a SQLite connection), transfers still ``size`` batches ahead.

    Returns:
        A generator of the placed batches. Nothing runs before its first ``next()``.
        ``len()`` of it is the source's, as ``len(iter(data_loader))`` is the
        DataLoader's (for ``tqdm(batches)``); a source without one (a generator, an
        ``IterableDataset``'s loader) raises ``ArgumentTypeError`` there.

    Raises:
        DeviceTypeError: ``device`` is an ``int``: Flax's call shape
            ``prefetch_to_device(it, 2)`` means a lookahead of 2, torch's ``.to(2)``
            means ``cuda:2``; write ``size=2`` or ``tj.device(2)``.
        InvalidDeviceError: ``device`` is a malformed device string.
        DeviceUnavailableError: the device does not exist here.
        ArgumentTypeError: ``iterable`` is not iterable, ``size`` is not an int or
            ``background`` is not a bool or ``None`` (a ``TypeError``).
        ConfigError: ``size`` is negative, or ``0`` with ``background=True`` (a
            ``ValueError``, as torch's ``DataLoader`` raises for ``prefetch_factor``).

    Warns:
        ForkAfterJaxWarning: once, when ``iterable`` is a torch DataLoader that will
            fork worker processes after JAX started.

    Note:
        The source may run in a background thread, so thread-local state of the
        caller (``with tj.device(...)``, ``jax.default_device``) may not apply inside
        it: make host data (NumPy, torch) there, as DataLoader workers do. The source
        must not modify a batch it has yielded: transfers read it later.

    Examples:
        >>> import numpy as np
        >>> import torch2jax_device as tj
        >>> batches = ({"x": np.full(2, i, np.float32), "step": i} for i in range(3))
        >>> for batch in tj.prefetch_to_device(batches, "cpu"):
        ...     print(batch["step"], batch["x"], batch["x"].device == tj.device("cpu"))
        0 [0. 0.] True
        1 [1. 1.] True
        2 [2. 2.] True
        >>> len(tj.prefetch_to_device([np.zeros(2), np.ones(2)], "cpu"))
        2
    """
    if is_index(device):  # also NumPy integers, which torch takes as indices too
        device = int(device)  # type: ignore[arg-type]
        raise DeviceTypeError(
            f"prefetch_to_device(iterable, {device!r}): the second argument is the device, "
            f"and a bare int there is ambiguous: flax.jax_utils.prefetch_to_device(iterator, "
            f"size) reads it as the lookahead, torch's .to({device!r}) as cuda:{device}. "
            f"Write prefetch_to_device(iterable, size={device!r}) for {device!r} batches "
            f"ahead on the default device, or prefetch_to_device(iterable, "
            f"tj.device({device!r})) for that accelerator"
        )
    return _prefetch(
        iterable,
        device,
        size,
        "size",
        pinned=False,
        background=background,
        caller="prefetch_to_device",
    )


class DeviceLoader:
    """A loader whose batches arrive on a device, prefetched: ``DataLoader`` for JAX.

    Wraps any iterable of batches, a ``torch.utils.data.DataLoader`` included. Each ``iter()`` (each
    epoch) starts a new [`tj.prefetch_to_device`][torch2jax_device.prefetch_to_device] over
    ``iter(loader)``; ``len()`` is the wrapped loader's. The wrapped loader is ``loader``,
    and its attributes read through, so ported code keeps working:
    ``device_loader.dataset``, ``len(device_loader.dataset)``, ``.batch_size``,
    ``.sampler.set_epoch(epoch)``. Setting one of them sets it on the wrapped loader
    (where a DataLoader refuses, as for ``batch_size``, it raises torch's error). The
    settings of the DeviceLoader itself (``loader``, ``device``, ``prefetch``,
    ``pin_memory``, ``background``) are its own: ``device_loader.pin_memory`` is the
    staging asked for here, not the DataLoader's flag. An epoch left early (``break``)
    leaves the loader's seeded generators where torch's loop leaves them, so the next
    epoch shuffles alike.

    ``pin_memory=True`` is ``DataLoader(pin_memory=True)``: every batch is first placed
    in the target device's ``pinned_host`` memory, then moved to the device from
    there. Where the device has no ``pinned_host`` memory (a backend that lists none in
    ``device.addressable_memories()``), or the target is already a host memory kind,
    batches go straight to the target: JAX stages pageable host memory itself. On the
    CPU, pinned host memory exists but is ordinary RAM, so staging is one more host
    copy; it is kept so that a script behaves the same on CPU and GPU. (A CPU-only
    torch warns and skips pinning instead.)

    Args:
        loader: The batches: a DataLoader, a list, any iterable. With worker processes,
            its dataset must return NumPy arrays or torch tensors, never JAX arrays.
        device: Anything [`tj.device`][torch2jax_device.Device] accepts, or a
            ``jax.sharding.Sharding``. ``None`` means the default device of the thread
            that starts an epoch, read when it starts. A sharding over a mesh that spans
            processes (DDP under the launcher) takes each process's batches as its rows
            (its ``DistributedSampler`` shard) and yields the global batch, as
            [`make_global_batch`][torch2jax_device.distributed.make_global_batch] builds
            it: 2 processes loading 4 rows each give arrays of 8 rows.
        prefetch: How many batches may be pulled and transferred ahead of the loop
            (``0``: none, each batch moves when it is asked for).
        pin_memory: Stage batches in pinned host memory before the transfer.
        background: Where the wrapped loader runs, as for
            [`tj.prefetch_to_device`][torch2jax_device.prefetch_to_device]: ``None``
            moves it to a background thread when overlapping pays, decided anew each
            epoch; ``True`` from the first batch; ``False`` never.

    Raises:
        ArgumentTypeError: ``loader`` is not iterable, ``prefetch`` is not an int, or
            ``background`` is not a bool or ``None`` (a ``TypeError``).
        ConfigError: ``prefetch`` is negative, or ``0`` with ``background=True`` (a
            ``ValueError``, as torch's ``DataLoader`` raises for ``prefetch_factor``).
        InvalidDeviceError: ``device`` is a malformed device string.

    Warns:
        ForkAfterJaxWarning: once, when ``loader`` is a torch DataLoader with
            ``num_workers > 0`` whose workers would be forked after JAX started
            (checked here and when an epoch starts).

    Examples:
        >>> import torch
        >>> from torch.utils.data import DataLoader, TensorDataset
        >>> import torch2jax_device as tj
        >>> dataset = TensorDataset(torch.arange(6.0))
        >>> loader = tj.DeviceLoader(DataLoader(dataset, batch_size=4), "cpu", pin_memory=True)
        >>> len(loader), len(loader.dataset), loader.batch_size
        (2, 6, 4)
        >>> for epoch in range(2):
        ...     print(*(float(batch.sum()) for (batch,) in loader))
        6.0 9.0
        6.0 9.0
    """

    def __init__(
        self,
        loader: Iterable[Any],
        device: DeviceLike | jax.sharding.Sharding | None = None,
        prefetch: int = 2,
        pin_memory: bool = False,
        *,
        background: bool | None = None,
    ) -> None:
        if not _is_iterable(loader):
            raise ArgumentTypeError(
                f"DeviceLoader wraps an iterable of batches (a torch DataLoader, a list, a "
                f"generator), not a {type(loader).__name__} object"
            )
        _check_size(prefetch, "prefetch")
        _check_background(background, prefetch, "prefetch")
        if not (device is None or isinstance(device, (jax.Device, jax.sharding.Sharding))):
            Device(device)  # a malformed device string fails now, without starting JAX
        self.loader = loader
        self.device = device
        self.prefetch = prefetch
        self.pin_memory = pin_memory
        self.background = background
        _warn_if_forking(loader)

    def __iter__(self) -> Generator[Any, None, None]:
        return _prefetch(
            self.loader,
            self.device,
            self.prefetch,
            "prefetch",
            self.pin_memory,
            background=self.background,
            caller="DeviceLoader",
        )

    def __len__(self) -> int:
        return _length(self.loader, "a DeviceLoader", "it wraps", "wrap")

    def __getattr__(self, name: str) -> Any:
        """The wrapped loader's attribute (called only for names the DeviceLoader lacks)."""
        if name in _OWN_ATTRIBUTES or name.startswith("__"):
            # Not set yet (copy, pickle) or a protocol probe: never the wrapped loader's.
            raise AttributeError(f"'DeviceLoader' object has no attribute '{name}'")
        loader = self.loader
        try:
            return getattr(loader, name)
        except AttributeError:
            kind = type(loader).__name__
            raise NoSuchAttributeError(
                f"'DeviceLoader' object has no attribute '{name}', nor has the {kind} it "
                f"wraps (device_loader.loader, {_short_repr(loader)}); a DeviceLoader "
                f"reads attributes through to its loader, so wrap the DataLoader (or the "
                f"object) that has '{name}'"
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        """Its own settings here; an attribute the wrapped loader has, on the loader."""
        if name not in _OWN_ATTRIBUTES and hasattr(self.loader, name):
            setattr(self.loader, name, value)
        else:
            super().__setattr__(name, value)

    def __repr__(self) -> str:
        background = "" if self.background is None else f", background={self.background}"
        return (
            f"DeviceLoader({self.loader!r}, device={self.device!r}, "
            f"prefetch={self.prefetch}, pin_memory={self.pin_memory}{background})"
        )


#: What a DeviceLoader keeps for itself; every other attribute is the wrapped loader's.
_OWN_ATTRIBUTES = frozenset({"loader", "device", "prefetch", "pin_memory", "background"})


def _short_repr(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def pin_memory(tree: Any, device: DeviceLike | None = None) -> Any:
    """Equivalent to `Tensor.pin_memory`.

    Copy the arrays of ``tree`` into pinned host memory. Every array leaf (NumPy, torch,
    JAX) becomes a JAX array in the ``pinned_host`` memory kind of ``device``
    (``jax.memory.Space.Host``), committed there, so that ``tj.to_device(pinned, device,
    non_blocking=True)`` is a direct DMA. Arrays already pinned there are returned as they
    are (as torch returns a pinned tensor itself); other leaves pass through. The copy is
    complete when this returns, so the source buffers may be reused, as after torch's
    ``pin_memory()``.

    Where the device has no ``pinned_host`` memory (its backend lists none in
    ``device.addressable_memories()``), the tree is returned unchanged: JAX then stages
    transfers from pageable memory itself. The CPU backend has ``pinned_host`` memory
    (ordinary RAM there), so on a CPU-only machine this copies, where a CPU-only torch
    raises.

    Args:
        tree: An array, tensor or container of them.
        device: The device whose pinned host memory to use (transfers to it are the
            fast ones); ``None`` means the current default device.

    Returns:
        The tree with array leaves in pinned host memory, or ``tree`` itself.

    Raises:
        DeviceUnavailableError: the device does not exist here.

    Note:
        On CUDA, pinned host memory comes from XLA's host allocator, capped at 64 GB by
        default (``XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB``); pin batches, not datasets.

        A pinned array is for sending. Torch computes on a pinned tensor as on any CPU
        tensor; JAX refuses to mix an array in host memory with other arrays in one
        computation ("memory_space of all inputs ... must be the same"), so compute on
        ``tj.to_device(pinned, device)``.

    Examples:
        >>> import numpy as np
        >>> import torch2jax_device as tj
        >>> pinned = tj.pin_memory({"x": np.arange(3, dtype=np.float32), "step": 7})
        >>> pinned["x"].sharding.memory_kind, pinned["x"].committed, pinned["step"]
        ('pinned_host', True, 7)
        >>> tj.pin_memory(pinned)["x"] is pinned["x"]
        True
    """
    staging = _pinned_staging(as_sharding(device))
    if staging is None:
        return tree
    return to_device(tree, staging)


def _prefetch(
    iterable: Iterable[Any],
    device: DeviceLike | jax.sharding.Sharding | None,
    size: int,
    size_name: str,
    pinned: bool,
    *,
    background: bool | None,
    caller: str,
) -> Generator[Any, None, None]:
    """Check the arguments and resolve the target in the calling thread; nothing runs yet.

    A target whose devices belong to several processes (a multi-process mesh) makes each
    batch a global one: the batches this process loads are its rows of it, and the
    processes compare each batch's shapes when the loop takes it (``agreed_batches``).
    """
    if not _is_iterable(iterable):
        raise ArgumentTypeError(
            f"prefetch_to_device() takes an iterable of batches (a torch DataLoader, a list, a "
            f"generator), not a {type(iterable).__name__} object: "
            f"'{type(iterable).__name__}' object is not iterable"
        )
    _check_size(size, size_name)
    _check_background(background, size, size_name)
    target = as_sharding(device)
    staging = _pinned_staging(target) if pinned else None
    _warn_if_forking(iterable)
    place: Callable[[Any], Any]
    if not target.is_fully_addressable:
        place = functools.partial(_place_global, staging=staging, target=target, caller=caller)
    elif staging is not None:
        place = functools.partial(_place_staged, staging=staging, target=target)
    else:
        place = functools.partial(to_device, device=target, non_blocking=True)
    rewind = _GeneratorRewind.of(iterable)
    placed = run_ahead(
        iterable if rewind is None else rewind.pull(iterable),
        place,
        size,
        background,
        functools.partial(_place_group, place=place),
    )
    if rewind is not None:
        placed = rewind.deliver(placed)
    if not target.is_fully_addressable:  # the processes compare each batch as it is taken
        placed = agreed_batches(placed, target, caller)
    return _Prefetched(placed, iterable)


class _Prefetched(Generator[Any, None, None]):
    """The placed batches: a generator whose ``len()`` is its source's, as
    ``len(iter(data_loader))`` is the DataLoader's (the whole epoch's batches, however
    many were taken). ``bool()`` is ``True``, as for any generator, whatever the length.
    """

    __slots__ = ("__weakref__", "_batches", "_source")

    def __init__(self, batches: Generator[Any, None, None], source: Iterable[Any]) -> None:
        self._batches = batches
        self._source = source

    def __next__(self) -> Any:
        return next(self._batches)

    def send(self, value: None) -> Any:
        return self._batches.send(value)

    def throw(self, *error: Any) -> Any:
        return self._batches.throw(*error)

    def close(self) -> None:
        self._batches.close()

    def __len__(self) -> int:
        return _length(self._source, "prefetch_to_device(...)", "its batches come from", "pass")

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"<prefetch_to_device generator over {_short_repr(self._source)}>"


def _length(source: object, what: str, relation: str, verb: str) -> int:
    """``len(source)``, or, where it has none, the library's ``TypeError`` naming the fix."""
    try:
        return len(source)  # type: ignore[arg-type]
    except TypeError as error:  # a TypeError still, as len() raises
        kind = type(source).__name__
        raise ArgumentTypeError(
            f"len() of {what} is the length of the {kind} {relation}, which has "
            f"none ({error}); count the batches as you iterate, or {verb} a loader with a "
            "length (a DataLoader over a map-style dataset, a list)"
        ) from None


class _GeneratorRewind:
    """Leaves a DataLoader's seeded generators where torch's own loop would leave them.

    Pulling ahead draws from the generators a ``DataLoader`` samples with
    (``shuffle=True, generator=g``, a sampler's ``generator=``) for batches the loop may
    never take. A loop left early (``break``) would then start its next epoch from
    another generator state than torch's loop, and come in another order. So the state
    before each pull is kept until its batch is handed over, and an epoch closed early
    puts back the state from before the first batch not handed over: the state after
    the pulls the loop took, as in torch (whose workers' own lookahead included).
    """

    def __init__(self, generators: list[Any]) -> None:
        self._generators = generators
        #: The generators' states before each pull whose batch is not handed over yet
        #: (appended by the puller, maybe a background thread; popped by the loop).
        self._states: collections.deque[list[Any]] = collections.deque()

    @classmethod
    def of(cls, loader: object) -> _GeneratorRewind | None:
        """The rewind for a torch DataLoader that samples with generators; else ``None``."""
        data = sys.modules.get("torch.utils.data")
        generator_class = getattr(sys.modules.get("torch"), "Generator", None)
        dataloader_class = getattr(data, "DataLoader", None)
        if not (isinstance(dataloader_class, type) and isinstance(loader, dataloader_class)):
            return None
        batch_sampler = getattr(loader, "batch_sampler", None)
        sampler = getattr(loader, "sampler", None)
        owners = (loader, sampler, batch_sampler, getattr(batch_sampler, "sampler", None))
        generators = {}
        for owner in owners:
            generator = getattr(owner, "generator", None)
            if isinstance(generator_class, type) and isinstance(generator, generator_class):
                generators[id(generator)] = generator
        return cls(list(generators.values())) if generators else None

    def pull(self, loader: Iterable[Any]) -> Generator[Any, None, None]:
        """The loader's batches, each pull's generator states kept."""
        iterator = iter(loader)
        while True:
            self._states.append([generator.get_state() for generator in self._generators])
            try:
                batch = next(iterator)
            except StopIteration:
                return
            yield batch

    def deliver(self, placed: Generator[Any, None, None]) -> Generator[Any, None, None]:
        """``placed``, rewinding the generators when the loop leaves it before its end."""
        try:
            for batch in placed:
                self._states.popleft()
                yield batch
        except GeneratorExit:  # left early: the loop took the pulls handed over
            placed.close()  # joins the thread: no pull after this
            self._restore(0)
            raise
        except BaseException:
            # The source raised (its pull was the last one, as in torch's loop) or a batch
            # could not be placed (its pull was taken; later ones were not).
            placed.close()
            self._restore(1)
            raise

    def _restore(self, index: int) -> None:
        # A loop dropped without closing may be finalized in the producer thread, which
        # then still finishes its pull: the generators are left as they are.
        if len(self._states) > index and threading.current_thread().name != THREAD_NAME:
            for generator, state in zip(self._generators, self._states[index], strict=True):
                generator.set_state(state)
        self._states.clear()


def _place_staged(batch: Any, staging: jax.sharding.Sharding, target: jax.sharding.Sharding) -> Any:
    return to_device(to_device(batch, staging, non_blocking=True), target, non_blocking=True)


def _place_global(
    batch: Any, staging: jax.sharding.Sharding | None, target: jax.sharding.Sharding, caller: str
) -> Any:
    """The global batch of ``target`` whose rows here are ``batch`` (this process's rows)."""
    if staging is None:
        return global_batch(batch, target, caller)
    return to_device(global_batch(batch, staging, caller), target, non_blocking=True)


def _place_group(batches: list[Any], place: Callable[[Any], Any]) -> list[Any]:
    """``[place(batch) for batch in batches]``, in one batched transfer where that is the same.

    It is for containers and arrays: ``to_device`` of a list of them places each as it
    would alone. Other batches (a bare number or NumPy scalar becomes a 0-d array only
    at the top, a Flax module moves in place) are placed one by one.
    """
    for batch in batches:  # a loop, not all(...): this runs for every small batch
        if not (isinstance(batch, _GROUPABLE) or is_torch_tensor(batch)):
            return [place(batch) for batch in batches]
    placed: list[Any] = place(batches)
    return placed


#: Batches that ``to_device`` places the same inside a list as alone (no top-level rule).
_GROUPABLE = (dict, list, tuple, np.ndarray, jax.Array)


def _is_iterable(value: object) -> bool:
    """What ``iter()`` accepts, without calling it (which may consume or fork); a closed
    file is refused here, naming the fix (its ``iter()`` would be ``ValueError``)."""
    if isinstance(value, io.IOBase) and value.closed:
        raise ArgumentTypeError(
            f"the batches come from a closed file ({value!r:.80}): its lines cannot be read. "
            "Fix: iterate the file while it is open (inside its with block), or pass the "
            "lines read from it"
        )
    return isinstance(value, Iterable) or hasattr(value, "__getitem__")


def _check_size(size: object, name: str) -> None:
    if isinstance(size, bool) or not isinstance(size, int):
        raise ArgumentTypeError(
            f"{name} must be an int (how many batches to transfer ahead), not "
            f"{type(size).__name__} {size!r}"
        )
    if not 0 <= size <= sys.maxsize:
        raise ConfigError(
            f"{name} must be >= 0 and at most sys.maxsize (how many batches to transfer "
            f"ahead; 0 transfers each batch when it is asked for), got {size}. Fix: pass "
            "a small count, 2 by default"
        )


def _check_background(background: object, size: int, size_name: str) -> None:
    if not (background is None or isinstance(background, bool)):
        raise ArgumentTypeError(
            f"background must be None (a background thread when it pays), True or False, "
            f"not {type(background).__name__} {background!r}"
        )
    if background and size == 0:
        raise ConfigError(
            f"background=True runs the source ahead of the loop in a thread, and "
            f"{size_name}=0 allows nothing ahead; use {size_name} >= 1 (e.g. 2), or leave "
            f"background unset"
        )


def _pinned_staging(target: jax.sharding.Sharding) -> jax.sharding.Sharding | None:
    """Where to stage batches for ``target`` in pinned host memory; ``None``: nowhere.

    ``None`` when the target already is host memory, or when one of its devices has no
    pinned host memory kind.
    """
    if target.memory_kind in _HOST_MEMORY_KINDS:
        return None
    if not all(has_pinned_host(device) for device in target.device_set):
        return None
    return target.with_memory_kind(PINNED)


_fork_warned = False
_fork_warning_lock = threading.Lock()


def _warn_if_forking(loader: object) -> None:
    """Warn once if ``loader`` is a torch DataLoader that will fork workers after JAX started."""
    global _fork_warned
    if not backends_initialized():
        return
    dataloader_class = getattr(sys.modules.get("torch.utils.data"), "DataLoader", None)
    if not (isinstance(dataloader_class, type) and isinstance(loader, dataloader_class)):
        return
    workers: int = getattr(loader, "num_workers", 0)
    method = _start_method(getattr(loader, "multiprocessing_context", None))
    if workers == 0 or method != "fork":
        return
    with _fork_warning_lock:  # once, even when two threads start loaders together
        if _fork_warned:
            return
        _fork_warned = True
    warnings.warn(
        f"this DataLoader forks {workers} worker process(es) with the 'fork' start method "
        "after JAX started its backends; JAX's runtime is not fork-safe and forked "
        "workers can hang or crash (jax#9190). Fix: "
        "DataLoader(..., multiprocessing_context='spawn') (or 'forkserver'), with a "
        "Dataset that returns NumPy arrays or torch tensors, never JAX arrays; "
        "DeviceLoader places batches in the main process.",
        ForkAfterJaxWarning,
        stacklevel=caller_stacklevel(),
    )


def _start_method(context: Any) -> str:
    """The start method a DataLoader's workers use (its own context, else the default)."""
    if context is not None:
        return str(context.get_start_method())
    # get_start_method() without allow_none would fix the default context for good.
    chosen = multiprocessing.get_start_method(allow_none=True)
    return chosen if chosen is not None else multiprocessing.get_all_start_methods()[0]
