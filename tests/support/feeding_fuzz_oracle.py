"""The feeding fuzzer's oracle: a drawn loop through torch's DataLoader and through tj's.

``judge(draw)`` builds the torch DataLoader of one :class:`feeding_fuzz.Draw` twice
(each side its own, from the same seeds), runs the loop both ways and returns every
:class:`Finding`: a part of the answers that differs and that no row of
``DIFFERENCES`` explains. The torch side is what a training loop does:
``for batch in loader`` with every tensor moved by ``.to(device, non_blocking=True)``
(NumPy arrays through ``torch.from_numpy`` first, as a port's loop does; other leaves
kept). The port wraps its loader in ``tj.DeviceLoader`` or ``tj.prefetch_to_device``.

Compared, epoch by epoch (``set_epoch`` between them, an early ``break`` and a new
``iter()``): ``len()``, the number of batches and their order, each batch's structure
(container types, named tuple classes, key order), each array's dtype (through the
``x64-narrowing`` row), shape, values bit for bit (any NaN matches any NaN; ``-0.0`` is
not ``0.0``), placement (device, commitment, sharding, memory kind), other leaves'
types and values; an error raised at a batch (the same batch, the dataset's own class),
no prefetch thread left once an epoch ends however it ends, and the dataset's tensors
left unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
from typing import Any

import jax
import numpy as np
import torch

import torch2jax_device as tj
from tests.support import feeding_fuzz, fuzz_runs
from tests.support.feeding_fuzz import Draw, build_loader, dataset, smaller
from tests.support.fuzz_runs import Different, Row
from torch2jax_device._src.run_ahead import THREAD_NAME

#: The page that says each difference by design (``Row.docs``: a phrase of it).
DOCS = "docs/known-differences-feeding-distributed.md"

DIFFERENCES = (
    Row(
        "x64-narrowing",
        "torch keeps int64, float64 and complex128 batches; tj gives the 32-bit dtype "
        "with the values torch's .to(32-bit dtype) gives (JAX without x64)",
        "**int64 batches become int32**",
    ),
    Row(
        "int64-values-past-32-bits-refused",
        "a batch holding int64 values past the 32-bit range: tj raises tj.ConversionError "
        "at that batch, after the batches before it, where torch goes on",
        "values past the 32-bit range",
    ),
    Row(
        "float64-values-past-float32-refused",
        "a batch holding finite float64 (or complex128) values past float32's largest: tj "
        "raises tj.ConversionError at that batch, where torch goes on (narrowed, they "
        "would become inf)",
        "float64 values past float32's largest",
    ),
    Row(
        "sharding-must-divide",
        "a sharding that splits the batch axis: a batch whose leaf it cannot split (a "
        "ragged last batch, a 0-d leaf) raises tj.ConversionError at that batch",
        "**A sharding must divide the leaves it splits.**",
    ),
)


class Finding(fuzz_runs.Finding):
    @property
    def kind(self) -> tuple[str, ...]:
        return (self.aspect, self.draw.data.style)


class Tally:
    """What the rows explained, over a run, and what the draws exercised."""

    def __init__(self) -> None:
        self.examples = 0
        self.refused = 0  # DataLoader arguments torch refuses (nothing of tj's runs)
        self.raised = 0  # epochs ended by the dataset's error, on both sides alike
        self.batches = 0
        self.workers = 0
        self.explained: dict[str, int] = {row.id: 0 for row in DIFFERENCES}


# --- the target ------------------------------------------------------------------------------


def cpus() -> list[jax.Device]:
    return list(jax.local_devices(backend="cpu"))


def target(draw: Draw) -> Any:
    """What the port is given as ``device``."""
    name = draw.target
    if name == "default":
        return None
    if name == "torch.device":
        return torch.device("cpu")
    if name == "jax.Device":
        return cpus()[0]
    if name.startswith("cpu"):
        return name
    if name == "single:1":
        return jax.sharding.SingleDeviceSharding(cpus()[1])
    mesh = jax.sharding.Mesh(np.array(cpus()), ("batch",))
    spec = (
        jax.sharding.PartitionSpec("batch")
        if name == "mesh-split"
        else jax.sharding.PartitionSpec()
    )
    return jax.sharding.NamedSharding(mesh, spec)


def expected_sharding(draw: Draw) -> jax.sharding.Sharding:
    placed = target(draw)
    if isinstance(placed, jax.sharding.Sharding):
        return placed
    index = 1 if draw.target == "cpu:1" else 0
    return jax.sharding.SingleDeviceSharding(cpus()[index])


# --- the two loops ---------------------------------------------------------------------------


def torch_batch(batch: Any) -> Any:
    """A torch loop's batch on the device: a bare number or NumPy scalar (a batch
    ``default_convert`` leaves as it is) through ``torch.as_tensor(batch).to(device)``,
    as a port's loop moves it; anything else through :func:`torch_move`."""
    if isinstance(batch, (bool, int, float, np.generic)):
        return torch.as_tensor(batch).to("cpu", non_blocking=True)
    return torch_move(batch)


def torch_move(tree: Any) -> Any:
    """A torch loop's ``.to(device, non_blocking=True)`` of every tensor of a batch."""
    if isinstance(tree, torch.Tensor):
        return tree.to("cpu", non_blocking=True)
    if isinstance(tree, np.ndarray):
        return torch.from_numpy(tree).to("cpu", non_blocking=True)
    if isinstance(tree, dict):
        return type(tree)((key, torch_move(value)) for key, value in tree.items())
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(torch_move(value) for value in tree))
    if isinstance(tree, (tuple, list)):
        return type(tree)(torch_move(value) for value in tree)
    return tree


@dataclasses.dataclass
class Epoch:
    batches: list[Any]
    error: BaseException | None = None
    #: The batch the loop took and left at (``break``), ``None`` if it went on.
    left_at: Any = None


@dataclasses.dataclass
class Loop:
    """One side's answers: ``len()`` (a number or the error), and each epoch's."""

    length: int | BaseException | None
    epochs: list[Epoch]
    #: Prefetch threads still alive after an epoch ended (the port only).
    threads_left: list[int] = dataclasses.field(default_factory=list)
    #: A TensorDataset's tensors hold what they held before the loop.
    dataset_intact: bool = True


def _attempt_len(loader: Any) -> int | BaseException:
    try:
        return len(loader)
    except Exception as error:
        return error


def _set_epoch(draw: Draw, loader: Any, epoch: int) -> None:
    if draw.sampler is not None and draw.sampler[0] == "distributed":
        loader.sampler.set_epoch(epoch)  # through a DeviceLoader, the wrapped sampler's


def run_loop(draw: Draw, port: bool) -> Loop:
    """The loop of ``draw``: torch's (``port=False``) or the port's."""
    loader = build_loader(draw)
    fed: Any = loader
    if port and draw.api == "DeviceLoader":
        fed = tj.DeviceLoader(
            loader, target(draw), prefetch=draw.size, pin_memory=draw.pin,
            background=draw.background,
        )  # fmt: skip
    length = _attempt_len(fed) if fed is not loader or not port else None
    before = _prefetch_threads()
    loop = Loop(length, [])
    for epoch in range(draw.epochs):
        _set_epoch(draw, fed, epoch)
        limit = draw.break_after if epoch == 0 else None
        if port and draw.api == "prefetch":
            batches = tj.prefetch_to_device(
                loader, target(draw), size=draw.size, background=draw.background
            )
        else:
            batches = iter(fed)
        taken = Epoch([])
        try:
            for batch in batches:
                if limit is not None and len(taken.batches) == limit:
                    taken.left_at = batch if port else torch_batch(batch)
                    break
                taken.batches.append(batch if port else torch_batch(batch))
        except Exception as error:
            taken.error = error
        del batches  # the loop's iterator goes, as a loop's does: its thread stops
        loop.epochs.append(taken)
        if port:
            loop.threads_left.extend(_prefetch_threads() - before)
    loop.dataset_intact = _intact(draw, loader.dataset)
    return loop


def _intact(draw: Draw, source: Any) -> bool:
    """Whether a TensorDataset's tensors still hold the values it was built with."""
    if not isinstance(source, torch.utils.data.TensorDataset):
        return True
    built = dataset(draw.data)
    assert isinstance(built, torch.utils.data.TensorDataset)
    return all(
        _same_bits(_host(mine), _host(fresh))
        for mine, fresh in zip(source.tensors, built.tensors, strict=True)
    )


def _prefetch_threads() -> set[int]:
    return {
        thread.ident or 0
        for thread in threading.enumerate()
        if thread.name == THREAD_NAME and thread.is_alive()
    }


# --- judging ---------------------------------------------------------------------------------


def x64() -> bool:
    return bool(jax.config.read("jax_enable_x64"))


#: torch dtype -> the dtype tj gives without x64 (the row ``x64-narrowing``).
NARROWED = {
    torch.int64: torch.int32,
    torch.float64: torch.float32,
    torch.complex128: torch.complex64,
}


def judge(draw: Draw, tally: Tally | None = None) -> list[Finding]:
    """The differences between torch and tj on ``draw`` that no row explains (a crash on
    either side is one, named)."""
    tally = tally if tally is not None else Tally()
    return fuzz_runs.outcome(draw, _judge, tally, Finding, crashes=True)


def _judge(draw: Draw, tally: Tally) -> None:
    try:
        theirs = run_loop(draw, port=False)
    except Exception:  # DataLoader arguments torch refuses: nothing of tj's
        tally.refused += 1
        return
    ours = run_loop(draw, port=True)
    _compare(draw, theirs, ours, tally)
    tally.workers += bool(draw.workers)


def _compare(draw: Draw, theirs: Loop, ours: Loop, tally: Tally) -> None:
    if ours.length is not None:
        _compare_len(theirs.length, ours.length)
    if not ours.dataset_intact:
        raise Different("source changed", "the dataset's tensors", "unchanged", "changed")
    if ours.threads_left:
        raise Different("thread left", "after an epoch", "none", f"{len(ours.threads_left)} alive")
    sharding = expected_sharding(draw)
    for number, (torch_epoch, tj_epoch) in enumerate(zip(theirs.epochs, ours.epochs, strict=True)):
        expected, refusal = _expected(draw, torch_epoch, sharding, tally)
        where = f"epoch {number}"
        tally.batches += len(tj_epoch.batches)
        if len(tj_epoch.batches) != len(expected):
            theirs_then = _error(refusal or torch_epoch.error)
            raise Different(
                "batch count",
                where,
                f"{len(expected)} batches then {theirs_then}",
                f"{len(tj_epoch.batches)} then {_error(tj_epoch.error)}",
            )
        for index, (torch_batch, tj_batch) in enumerate(
            zip(expected, tj_epoch.batches, strict=True)
        ):
            compare_tree(torch_batch, tj_batch, f"{where} batch {index}", sharding, tally)
        if refusal is not None:
            if not isinstance(tj_epoch.error, tj.ConversionError):
                raise Different(
                    "error", f"{where} batch {len(expected)}", refusal, _error(tj_epoch.error)
                )
            # The refusal ends the run where a user's loop ends: torch's loop went on
            # through the epoch, drawing from the DataLoader's generator, so the epochs
            # after it start from other states and are not compared.
            break
        _compare_errors(torch_epoch.error, tj_epoch.error, f"{where} batch {len(expected)}")
        tally.raised += torch_epoch.error is not None
        if (torch_epoch.left_at is None) != (tj_epoch.left_at is None):
            raise Different(
                "break", where, torch_epoch.left_at is not None, tj_epoch.left_at is not None
            )
        if torch_epoch.left_at is not None:
            compare_tree(torch_epoch.left_at, tj_epoch.left_at, f"{where} left at", sharding, tally)


def _error(error: BaseException | str | None) -> str:
    if error is None:
        return "no error"
    if isinstance(error, str):
        return error
    return f"{type(error).__name__}: {error}"


def _compare_len(theirs: int | BaseException | None, ours: int | BaseException) -> None:
    if isinstance(theirs, BaseException) or isinstance(ours, BaseException):
        if not (isinstance(theirs, TypeError) and isinstance(ours, TypeError)):
            raise Different("len()", "loader", _answer(theirs), _answer(ours))
        if not isinstance(ours, tj.Torch2JaxDeviceError):
            raise Different("len() error", "loader", _error(theirs), _error(ours))
        return
    if theirs != ours:
        raise Different("len()", "loader", theirs, ours)


def _answer(length: int | BaseException | None) -> str:
    return _error(length) if isinstance(length, BaseException) else str(length)


def _compare_errors(theirs: BaseException | None, ours: BaseException | None, where: str) -> None:
    if theirs is None and ours is None:
        return
    if theirs is None or ours is None or type(ours) is not type(theirs):
        raise Different("error", where, _error(theirs), _error(ours))


def _expected(
    draw: Draw, epoch: Epoch, sharding: jax.sharding.Sharding, tally: Tally
) -> tuple[list[Any], str | None]:
    """The batches tj must yield, and the refusal a row explains ending the epoch early."""
    pulled = epoch.batches if epoch.left_at is None else [*epoch.batches, epoch.left_at]
    for index, batch in enumerate(pulled):
        refusal = _refusal(batch, sharding)
        if refusal is not None:
            tally.explained[refusal] += 1
            return epoch.batches[:index], f"tj.ConversionError ({refusal})"
    return epoch.batches, None


def _refusal(batch: Any, sharding: jax.sharding.Sharding) -> str | None:
    """The row under which tj refuses ``batch``, or ``None``."""
    leaves = [leaf for leaf in _leaves(batch) if isinstance(leaf, torch.Tensor)]
    if not x64():
        for leaf in leaves:
            if leaf.dtype == torch.int64 and leaf.numel():
                if int(leaf.max()) > 2**31 - 1 or int(leaf.min()) < -(2**31):
                    return "int64-values-past-32-bits-refused"
            narrow = {torch.float64: torch.float32, torch.complex128: torch.complex64}
            if leaf.dtype in narrow and leaf.numel():
                made = torch.isinf(leaf.to(narrow[leaf.dtype])) & ~torch.isinf(leaf)
                if bool(made.any()):
                    return "float64-values-past-float32-refused"
    if isinstance(sharding, jax.sharding.NamedSharding) and any(sharding.spec):
        devices = len(sharding.device_set)
        for leaf in leaves:
            if leaf.dim() == 0 or leaf.shape[0] % devices:
                return "sharding-must-divide"
    return None


def _leaves(tree: Any) -> list[Any]:
    if isinstance(tree, dict):
        return [leaf for value in tree.values() for leaf in _leaves(value)]
    if isinstance(tree, (tuple, list)):
        return [leaf for value in tree for leaf in _leaves(value)]
    return [tree]


def compare_tree(
    theirs: Any, ours: Any, where: str, sharding: jax.sharding.Sharding, tally: Tally
) -> None:
    """A torch batch (tensors moved) against the port's, part by part."""
    if isinstance(theirs, torch.Tensor):
        _compare_array(theirs, ours, where, sharding, tally)
        return
    if type(ours) is not type(theirs):
        raise Different("structure", where, type(theirs).__name__, type(ours).__name__)
    if isinstance(theirs, dict):
        if list(theirs) != list(ours):
            raise Different("keys", where, list(theirs), list(ours))
        for key in theirs:
            compare_tree(theirs[key], ours[key], f"{where}[{key!r}]", sharding, tally)
        return
    if isinstance(theirs, (tuple, list)):
        if len(theirs) != len(ours):
            raise Different("length", where, len(theirs), len(ours))
        for position, (mine, other) in enumerate(zip(theirs, ours, strict=True)):
            compare_tree(mine, other, f"{where}[{position}]", sharding, tally)
        return
    if not _same_scalar(theirs, ours):
        raise Different("leaf value", where, repr(theirs), repr(ours))


def _same_scalar(theirs: Any, ours: Any) -> bool:
    if isinstance(theirs, (float, np.floating)) and math.isnan(theirs):
        return bool(math.isnan(ours))
    if isinstance(theirs, (float, np.floating)):
        return bool(theirs == ours) and math.copysign(1, theirs) == math.copysign(1, ours)
    return bool(theirs == ours)


def _compare_array(
    theirs: torch.Tensor, ours: Any, where: str, sharding: jax.sharding.Sharding, tally: Tally
) -> None:
    if not isinstance(ours, jax.Array):
        raise Different("structure", where, f"Tensor {theirs.dtype}", type(ours).__name__)
    wanted = theirs
    if not x64() and theirs.dtype in NARROWED:
        wanted = theirs.to(NARROWED[theirs.dtype])
        tally.explained["x64-narrowing"] += 1
    wanted_dtype = str(wanted.dtype).removeprefix("torch.")
    if str(ours.dtype) != wanted_dtype:
        raise Different("dtype", where, wanted_dtype, ours.dtype)
    if tuple(ours.shape) != tuple(wanted.shape):
        raise Different("shape", where, tuple(wanted.shape), tuple(ours.shape))
    if not ours.committed:
        raise Different("placement", where, "committed", "uncommitted")
    if ours.sharding.memory_kind != "device" or not ours.sharding.is_equivalent_to(
        sharding, ours.ndim
    ):
        raise Different("placement", where, sharding, ours.sharding)
    if not _same_bits(_host(wanted), np.asarray(ours)):
        raise Different("values", where, wanted.tolist(), np.asarray(ours).tolist())


def _host(tensor: torch.Tensor) -> np.ndarray[Any, Any]:
    name = str(tensor.dtype).removeprefix("torch.")
    if name == "bfloat16" or name.startswith("float8"):  # dtypes NumPy has through ml_dtypes
        bits = torch.int16 if name == "bfloat16" else torch.uint8
        as_bits: np.ndarray[Any, Any] = tensor.view(bits).numpy()
        return as_bits.view(np.dtype(name))
    host: np.ndarray[Any, Any] = tensor.numpy()
    return host


def _same_bits(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    """Equal bit for bit, except that any NaN matches any NaN."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "fcV":  # bfloat16 and float8 (ml_dtypes) are of kind V
        if a.dtype.kind == "c":
            return _same_bits(a.real.copy(), b.real.copy()) and _same_bits(
                a.imag.copy(), b.imag.copy()
            )
        nan_a, nan_b = np.isnan(a.astype(np.float32)), np.isnan(b.astype(np.float32))
        if not np.array_equal(nan_a, nan_b):
            return False
        a, b = np.where(nan_a, 0, a).astype(a.dtype), np.where(nan_b, 0, b).astype(b.dtype)
    return a.tobytes() == b.tobytes()


def shrink(finding: Finding, budget: int = 30) -> Finding:
    """A smaller draw showing the same kind of difference."""
    return fuzz_runs.shrink(finding, judge, smaller, budget)


# --- a run ---------------------------------------------------------------------------------

#: How many kinds of findings a report shows with a shrunk reproduction.
SHOWN = 8


def fuzz(
    examples: int, seed: int, *, devices: int = 1, workers: bool = False
) -> tuple[dict[tuple[str, ...], list[Finding]], Tally]:
    """Run ``examples`` draws from ``seed``; the unexplained findings by kind, and the tally."""
    tally = Tally()
    drawing = functools.partial(feeding_fuzz.draw, devices=devices, workers=workers)
    return fuzz_runs.run(examples, seed, drawing, judge, tally), tally


def report(found: dict[tuple[str, ...], list[Finding]], tally: Tally, seed: int) -> str:
    lines = [
        f"{sum(map(len, found.values()))} differences from torch's DataLoader loop that no "
        f"row of feeding_fuzz_oracle.DIFFERENCES covers, in {len(found)} kinds "
        f"({tally.examples} examples, TORCH2JAX_DEVICE_FEEDING_FUZZ_SEED={seed}):"
    ]
    lines += fuzz_runs.listed(found, shrink, SHOWN)
    lines.append(
        f"Refused by torch: {tally.refused}; epochs ended by the dataset's error: "
        f"{tally.raised}; batches compared: {tally.batches}; with workers: {tally.workers}; "
        f"rows: {tally.explained}."
    )
    return "\n".join(lines)
