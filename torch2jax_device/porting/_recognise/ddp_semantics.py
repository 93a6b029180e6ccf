"""What a DDP script computes that its port computes otherwise unless told (audit7's
trainer oracle, ``tests/parity/test_distributed_trainer_oracle.py``).

DDP's forward sees one rank's rows; the port's step sees every rank's at once (a global
batch). Two lines then mean something else, and nothing at run time can tell which was
meant, only the torch source:

- ``ddp-batch-statistics``: a BatchNorm layer, in a file that wraps a model in DDP and
  converts nothing to ``SyncBatchNorm`` (per-rank statistics in torch, every rank's in
  the port);
- ``ddp-summed-loss``: a torch loss given ``reduction="sum"`` in such a file (DDP
  averages the ranks' sums).
"""

from __future__ import annotations

import ast

from .base import Recogniser

__all__ = ["batch_statistics", "summed_loss"]

_DDP = frozenset(
    {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
    }
)
_SYNC = frozenset(
    {
        "torch.nn.SyncBatchNorm",
        "torch.nn.SyncBatchNorm.convert_sync_batchnorm",
        "apex.parallel.SyncBatchNorm",
        "apex.parallel.convert_syncbn_model",
    }
)
_BATCH_NORMS = frozenset(
    f"torch.nn.{lazy}BatchNorm{rank}d" for lazy in ("", "Lazy") for rank in (1, 2, 3)
)
_BATCH_NORM_ADVICE = (
    "DDP normalizes each rank's rows with their own statistics; nnx.BatchNorm over a "
    "global batch (tj.distributed.make_global_batch) computes SyncBatchNorm's: keep "
    "per-rank statistics (PerRankBatchNorm, docs/how-to/ddp.md) or mean SyncBatchNorm"
)
_SUMMED_ADVICE = (
    "DDP averages the ranks' gradients: the port's step sums every rank's rows, so "
    "divide the global sum by tj.distributed.get_world_size() to train as DDP does"
)


def batch_statistics(r: Recogniser, call: ast.Call) -> None:
    """``ddp-batch-statistics``: ``nn.BatchNorm2d(...)`` in a file that wraps a model in
    DDP and converts nothing to ``SyncBatchNorm``."""
    if r.qualname(call.func) in _BATCH_NORMS and _per_rank_under_ddp(r):
        r.add(call, "ddp-batch-statistics", _BATCH_NORM_ADVICE)


def summed_loss(r: Recogniser, call: ast.Call) -> None:
    """``ddp-summed-loss``: a torch loss (``F.cross_entropy``, ``nn.MSELoss``...) given
    ``reduction="sum"`` in a file that wraps a model in DDP."""
    name = r.qualname(call.func) or ""
    if not (name.startswith("torch.nn.functional.") or name.startswith("torch.nn.")):
        return
    for keyword in call.keywords:
        value = keyword.value
        if (
            keyword.arg == "reduction"
            and isinstance(value, ast.Constant)
            and value.value == "sum"
            and _file_facts(r)[0]
        ):
            position = (keyword.lineno, keyword.col_offset)
            r.add(value, "ddp-summed-loss", _SUMMED_ADVICE, position=position)


def _per_rank_under_ddp(r: Recogniser) -> bool:
    wraps, converts = _file_facts(r)
    return wraps and not converts


#: The last file's facts: (the file, (wraps in DDP, converts to SyncBatchNorm)).
_last: list[tuple[object, tuple[bool, bool]]] = []


def _file_facts(r: Recogniser) -> tuple[bool, bool]:
    """(the file wraps a model in DDP, it converts to SyncBatchNorm), read once a file."""
    if _last and _last[0][0] is r.file:
        return _last[0][1]
    names = {r.qualname(node.func) for node in ast.walk(r.file.tree) if isinstance(node, ast.Call)}
    facts = (bool(names & _DDP), bool(names & _SYNC))
    _last[:] = [(r.file, facts)]
    return facts
