"""``scan`` reports the two DDP lines whose port computes something else unless told:
a plain BatchNorm (per-rank statistics under DDP) and a summed loss (DDP averages the
ranks' sums), each generated over its spellings and the ways a file wraps its model,
with the twins that must stay silent (no DDP, ``SyncBatchNorm``, a mean).

The oracle that the two differ is ``tests/parity/test_distributed_trainer_oracle.py``
(cases ``batch-norm`` and ``summed-loss``): torch's DDP under torchrun against the port.
"""

from __future__ import annotations

import itertools

import pytest

from tests.support.cli import found_rules

IMPORTS = (
    "import torch\n"
    "import torch.nn as nn\n"
    "import torch.nn.functional as F\n"
    "from torch.nn import BatchNorm2d\n"
    "from torch.nn.parallel import DistributedDataParallel as DDP\n"
)
WRAPS = (
    "model = DDP(model, device_ids=[rank])",
    "model = torch.nn.parallel.DistributedDataParallel(model)",
    "model = nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)",
)
BATCH_NORMS = (
    "nn.BatchNorm1d(64)",
    "nn.BatchNorm2d(64, momentum=0.01)",
    "torch.nn.BatchNorm3d(8)",
    "nn.LazyBatchNorm2d()",
    "BatchNorm2d(num_features=64)",
)
LAYERS = (
    "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.norm = {layer}\n",
    "model = nn.Sequential(nn.Linear(64, 64), {layer})\n",
)
LOSSES = (
    'F.cross_entropy(logits, y, reduction="sum")',
    'torch.nn.functional.mse_loss(out, target, reduction="sum")',
    'nn.CrossEntropyLoss(reduction="sum")',
    'nn.BCEWithLogitsLoss(reduction="sum")',
)


def _line_of(source: str, text: str) -> int:
    return next(n for n, line in enumerate(source.splitlines(), 1) if text in line)


def _rules(source: str) -> dict[int, set[str]]:
    found: dict[int, set[str]] = {}
    for line, rule in found_rules(source):
        found.setdefault(line, set()).add(rule)
    return found


@pytest.mark.idiom("ddp-batch-statistics")
@pytest.mark.parametrize(
    ("layer", "shape", "wrap"), list(itertools.product(BATCH_NORMS, LAYERS, WRAPS))
)
def test_a_batch_norm_in_a_file_that_wraps_its_model_in_ddp(
    layer: str, shape: str, wrap: str
) -> None:
    source = IMPORTS + shape.format(layer=layer) + wrap + "\n"
    found = _rules(source)
    assert "ddp-batch-statistics" in found.get(_line_of(source, layer), set()), found


@pytest.mark.parametrize("layer", BATCH_NORMS)
@pytest.mark.parametrize(
    "twin",
    [
        "",  # no DDP: one process's batch is the batch
        "model = nn.SyncBatchNorm.convert_sync_batchnorm(model)\n" + WRAPS[0],
        "model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)\n" + WRAPS[1],
    ],
)
def test_a_batch_norm_stays_silent_without_ddp_or_with_sync_batch_norm(
    layer: str, twin: str
) -> None:
    source = IMPORTS + LAYERS[1].format(layer=layer) + twin + "\n"
    found = _rules(source)
    assert all("ddp-batch-statistics" not in rules for rules in found.values()), found


@pytest.mark.idiom("ddp-summed-loss")
@pytest.mark.parametrize(("loss", "wrap"), list(itertools.product(LOSSES, WRAPS)))
def test_a_summed_loss_in_a_file_that_wraps_its_model_in_ddp(loss: str, wrap: str) -> None:
    source = IMPORTS + "model = Net()\n" + wrap + "\nloss = " + loss + "\n"
    found = _rules(source)
    assert "ddp-summed-loss" in found.get(_line_of(source, "reduction"), set()), found


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("twin", ["without DDP", "a mean"])
def test_a_loss_stays_silent_without_ddp_or_when_it_is_a_mean(loss: str, twin: str) -> None:
    if twin == "a mean":
        source = IMPORTS + WRAPS[0] + "\nloss = " + loss.replace('"sum"', '"mean"') + "\n"
    else:
        source = IMPORTS + "model = Net()\nloss = " + loss + "\n"
    found = _rules(source)
    assert all("ddp-summed-loss" not in rules for rules in found.values()), found
