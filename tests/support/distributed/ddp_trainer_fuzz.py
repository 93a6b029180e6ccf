"""The DDP trainer fuzzer's draws: one whole trainer configuration, as plain data.

A :class:`TrainerDraw` is a DDP training loop over ``ddp_trainer_cases``'s model and data:
the data set's size against the world size and batch size, ``DistributedSampler``'s and
the DataLoader's ``drop_last``, shuffling with or without ``set_epoch``, gradient
accumulation under ``no_sync``, ``clip_grad_norm_``, the loss's reduction, the optimizer
and its scheduler (stepped per epoch), a ``BatchNorm1d``, how many epochs, a loop that
breaks early, how the port feeds (``tj.DeviceLoader`` or ``tj.prefetch_to_device`` and
their settings), and a rank-0 checkpoint that every rank resumes from after some epoch
(the port's own, or torch's). ``draw(rng)`` makes one from a
seeded ``random.Random``; ``ddp_trainer_fuzz_torch.py`` (torch's DDP, the oracle) and
``ddp_trainer_fuzz_port.py`` (the port on the mesh, and on one device with the global
batch) read the draws of a job from ``draws.json`` (:func:`write`, :func:`read`).

Imports nothing of the suite's: the worker scripts import it by its bare name.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: Every job of the fuzzer runs on this many ranks.
WORLD_SIZE = 2
#: DDP leaves each rank its own BatchNorm running statistics (rank 0's, broadcast before
#: every forward, then updated from the rank's rows); the port keeps rank 0's on every
#: rank, what rank 0 saves. Compared on rank 0 only.
RANK_OWN = frozenset({"bn.running_mean", "bn.running_var"})
#: The fewest rows of a rank's batch under BatchNorm: torch refuses 1 in training, and 2
#: normalize to +-1 whatever the first layer's weights (their gradient is rounding noise,
#: which Adam steps by its learning rate: the sides would part by rounding alone).
BATCH_NORM_ROWS = 3
#: How the port's loop takes its batches.
FEEDS = ("DeviceLoader", "prefetch_to_device")
#: Learning rates, momentum and decay by optimizer (torch's arguments).
OPTIMIZERS: dict[str, dict[str, float]] = {
    "sgd": {"lr": 0.1},
    "momentum": {"lr": 0.1, "momentum": 0.9},
    "adam": {"lr": 0.01},
    "adamw": {"lr": 0.01, "weight_decay": 0.1},
}
#: Schedulers, stepped once per epoch: torch's class and arguments (``T_max``: the epochs).
SCHEDULERS: dict[str, tuple[str, dict[str, float]]] = {
    "step": ("StepLR", {"step_size": 1, "gamma": 0.5}),
    "cosine": ("CosineAnnealingLR", {}),
}


@dataclasses.dataclass(frozen=True)
class TrainerDraw:
    """One DDP trainer: how it samples, batches, steps, clips, saves and resumes."""

    samples: int
    batch_size: int
    sampler_drop_last: bool = False
    loader_drop_last: bool = False
    shuffle: bool = True
    set_epoch: bool = True
    #: Micro-batches per optimizer step: all but the last under ``no_sync()``.
    micro_batches: int = 1
    #: ``clip_grad_norm_(model.parameters(), max_norm)`` before each step; ``None``: none.
    max_norm: float | None = None
    #: ``F.cross_entropy(..., reduction=...)``: ``"mean"`` or ``"sum"``.
    reduction: str = "mean"
    optimizer: str = "sgd"
    scheduler: str | None = None
    #: ``BatchNorm1d`` after the first layer, which then has no bias (its gradient is
    #: zero but for rounding, and Adam would step it by its learning rate on the noise's
    #: sign: tj and torch round differently, the steps would differ).
    batch_norm: bool = False
    epochs: int = 2
    #: The loop breaks once it has this many micro-batches of an epoch (``if i == limit:
    #: break``, as a trainer's ``max_steps``); ``None``: it takes them all.
    break_after: int | None = None
    #: How the port feeds: each epoch ``iter(tj.DeviceLoader(...))``, or
    #: ``tj.prefetch_to_device(loader, ...)``; its lookahead, pinned staging (the
    #: DeviceLoader's) and where the loader runs.
    feed: str = "DeviceLoader"
    prefetch: int = 2
    pin_memory: bool = False
    background: bool | None = None
    #: Epochs trained before rank 0 saves model, optimizer and scheduler and every rank
    #: resumes from that file in a fresh model; ``None``: no resume.
    resume_after: int | None = None
    #: Whose checkpoint the port resumes from: its own, or the one torch's DDP saved (a
    #: torch checkpoint resumes the port: docs/how-to/optimizers.md).
    resume_from: str = "port"

    def rows_per_batch(self) -> list[int]:
        """Each rank's rows in each of its batches of an epoch (the same on every rank)."""
        if self.sampler_drop_last:
            rows = self.samples // WORLD_SIZE
        else:
            rows = math.ceil(self.samples / WORLD_SIZE)
        full, short = divmod(rows, self.batch_size)
        return [self.batch_size] * full + ([short] if short and not self.loader_drop_last else [])


#: Draws earlier runs found a difference in, by what they found; each fixed since, and
#: run by every run of the fuzzer. The first two were the check's own (seed 1, 12 draws):
FOUND: dict[str, TrainerDraw] = {
    # Adam on weights before a BatchNorm over 2 rows per rank (and on a bias before it):
    # gradients of rounding noise, stepped by the whole learning rate, parted the sides.
    # Since then the first layer has no bias under BatchNorm and a batch at least 3 rows.
    "adam-before-batch-norm": TrainerDraw(
        samples=18, batch_size=3, loader_drop_last=True, optimizer="adam", batch_norm=True,
        epochs=1,
    ),
    # torch's rank 1 keeps its own running statistics, so rank 0's checkpoint is not its
    # model: compared on rank 0 alone since. With a resume, accumulation and a sum.
    "rank-1-batch-statistics": TrainerDraw(
        samples=12, batch_size=3, micro_batches=2, max_norm=1.0, reduction="sum",
        optimizer="momentum", scheduler="step", batch_norm=True, resume_after=1,
    ),
    # DeviceLoader(pin_memory=True) over a mesh of one device per process raised
    # ConversionError "Memory kind mismatch" on every batch of torch tensors: their
    # zero-copy arrays, already on the process's device, were taken as its shard as they
    # were, in device memory, for a pinned_host sharding (seed 4: draws 2 and 16).
    "pinned-one-device-per-process": TrainerDraw(
        samples=18, batch_size=2, micro_batches=2, epochs=3, break_after=2, pin_memory=True,
    ),
}  # fmt: skip


def draw(rng: random.Random) -> TrainerDraw:
    """A trainer from ``rng``; the small and the awkward sizes drawn often."""
    epochs = rng.choice((1, 2, 2, 3))
    prefetch = rng.choice((0, 1, 2, 2, 3))
    drawn = TrainerDraw(
        samples=rng.choice((0, 1, 2, 3, 5, 7, *(rng.randint(4, 20) for _ in range(4)))),
        batch_size=rng.randint(1, 4),
        sampler_drop_last=rng.random() < 0.3,
        loader_drop_last=rng.random() < 0.3,
        shuffle=rng.random() < 0.7,
        set_epoch=rng.random() < 0.7,
        micro_batches=rng.choice((1, 1, 2, 3)),
        max_norm=rng.choice((None, None, 0.5, 1.0, 5.0)),
        reduction=rng.choice(("mean", "mean", "sum")),
        optimizer=rng.choice(tuple(OPTIMIZERS)),
        scheduler=rng.choice((None, *SCHEDULERS)),
        batch_norm=rng.random() < 0.3,
        epochs=epochs,
        break_after=rng.choice((1, 2, 3)) if rng.random() < 0.25 else None,
        feed=rng.choice(FEEDS),
        prefetch=prefetch,
        pin_memory=rng.random() < 0.3,
        background=rng.choice((None, False) if prefetch == 0 else (None, False, True)),
        resume_after=rng.randint(1, epochs - 1) if epochs > 1 and rng.random() < 0.5 else None,
        resume_from=rng.choice(("port", "torch")),
    )
    if drawn.batch_norm and min(drawn.rows_per_batch(), default=BATCH_NORM_ROWS) < BATCH_NORM_ROWS:
        drawn = dataclasses.replace(drawn, batch_size=max(drawn.batch_size, BATCH_NORM_ROWS))
        if min(drawn.rows_per_batch(), default=BATCH_NORM_ROWS) < BATCH_NORM_ROWS:
            drawn = dataclasses.replace(drawn, loader_drop_last=True)
        if min(drawn.rows_per_batch(), default=BATCH_NORM_ROWS) < BATCH_NORM_ROWS:
            drawn = dataclasses.replace(drawn, batch_norm=False)
    return drawn


def taken(batches: Iterable[Any], limit: int | None) -> list[Any]:
    """An epoch's micro-batches as the loop takes them: every one, or the first ``limit``
    (the loop breaks when handed one more, as ``for i, batch in enumerate(loader): if i
    == limit: break`` does)."""
    micro: list[Any] = []
    for batch in batches:
        if len(micro) == limit:
            break
        micro.append(batch)
    return micro


def write(folder: Path, draws: dict[str, TrainerDraw]) -> None:
    """The job's draws, by name, for both sides' scripts."""
    (folder / "draws.json").write_text(
        json.dumps({name: dataclasses.asdict(one) for name, one in draws.items()})
    )


def read(folder: Path) -> dict[str, TrainerDraw]:
    return {
        name: TrainerDraw(**fields)
        for name, fields in json.loads((folder / "draws.json").read_text()).items()
    }


def plain(value: Any) -> Any:
    """A state dict (tensors, arrays, numbers, nested dicts and lists) as JSON values."""
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if hasattr(value, "tolist"):
        return value.tolist()
    return value
