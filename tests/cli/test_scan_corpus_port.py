"""The porting order the guide gives, on a corpus script: port the compute by hand,
then ``scan --diff`` ports the device plumbing, and the script runs on JAX.

``multi_gpu_inference.py`` keeps its torch ``DataLoader`` (a mixed codebase); the
manual steps below replace only the model (``nn.Module`` -> Flax NNX) and the weight
file's state-dict calls, keeping every ``.to(device)``, ``.cpu()`` and
``safetensors.torch`` call as the torch script had them: ``--diff`` rewrites those,
because now JAX code reads what they produce.

A torch tutorial's DDP start-up (query the GPU, set it, join) with JAX compute is then
ported by ``--diff`` alone and run on two processes: the process group becomes
``tj.distributed``'s and every JAX-starting call before the join stays torch's.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.corpus import ScriptRunner
from tests.support.optional_frameworks import needs
from torch2jax_device.porting import scanner

from .test_scan_corpus import CORPUS, _launched, _ported, _script

NAME = "multi_gpu_inference"

STEPS: list[tuple[str, str, str]] = [
    (
        "import Flax, JAX and torch2jax_device",
        "import torch.nn as nn\n",
        "import torch.nn as nn\nimport flax\nimport jax.numpy as jnp\nfrom flax import nnx\n"
        "import torch2jax_device as tj\n",
    ),
    (
        "a stage is a Flax NNX module",
        """class Stage(nn.Module):
    def __init__(self, inputs, outputs):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(inputs, 32), nn.ReLU(), nn.Linear(32, outputs))

    def forward(self, x):
        return self.net(x)
""",
        """class Stage(nnx.Module):
    def __init__(self, inputs, outputs):
        rngs = nnx.Rngs(0)
        self.hidden = nnx.Linear(inputs, 32, rngs=rngs)
        self.out = nnx.Linear(32, outputs, rngs=rngs)

    def __call__(self, x):
        return self.out(nnx.relu(self.hidden(x)))
""",
    ),
    (
        "so is the two-stage model (its .to calls stay: --diff ports them)",
        '''class TwoStageModel(nn.Module):
    """First stage on devices[0], second on devices[-1] (the same device when there is one)."""

    def __init__(self, devices):
        super().__init__()
        self.devices = devices''',
        '''class TwoStageModel(nnx.Module):
    """First stage on devices[0], second on devices[-1] (the same device when there is one)."""

    def __init__(self, devices):
        self.devices = devices''',
    ),
    (
        "forward is __call__",
        "    def forward(self, x):\n        hidden",
        "    def __call__(self, x):\n        hidden",
    ),
    (
        "the weight file holds the NNX state, flattened (safetensors calls stay: --diff "
        "ports them)",
        "        safetensors.torch.save_file({k: v.contiguous() for k, v in "
        "model.state_dict().items()}, path)\n"
        '    state = safetensors.torch.load_file(path, device="cpu")\n'
        "    model.load_state_dict(state)",
        "        flat = flax.traverse_util.flatten_dict("
        'nnx.to_pure_dict(nnx.state(model)), sep=".")\n'
        "        safetensors.torch.save_file(flat, path)\n"
        '    state = safetensors.torch.load_file(path, device="cpu")\n'
        "    graph = nnx.state(model)\n"
        '    nnx.replace_by_pure_dict(graph, flax.traverse_util.unflatten_dict(state, sep="."))\n'
        "    nnx.update(model, graph)",
    ),
    (
        "half precision is a cast",
        "        model = model.half()",
        "        model = tj.to_device(model, jnp.float16)",
    ),
]


def _manual(source: str) -> str:
    for why, old, new in STEPS:
        assert source.count(old) == 1, why
        source = source.replace(old, new)
    return source


def test_after_the_compute_is_ported_diff_ports_the_plumbing_and_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scripts: ScriptRunner
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "source").mkdir()
    staged = tmp_path / "source" / f"{NAME}.py"
    staged.write_text(_manual((CORPUS / f"{NAME}.py").read_text()))
    monkeypatch.setattr("tests.cli.test_scan_corpus.CORPUS", tmp_path / "source")
    script = _ported(NAME, tmp_path)
    ported = script.read_text()
    for line in (
        "import torch2jax_device as tj",
        "        self.first = tj.to_device(Stage(16, 32), devices[0])",
        "        hidden = self.first(tj.to_device(x, self.devices[0], non_blocking=True))",
        "        return self.second(tj.to_device(hidden, self.devices[-1]))",
        "        tj.save_file(flat, path)",
        '    state = tj.load_file(path, device="cpu")',
        '    model = load_weights(tj.to_device(model, "cpu"), args.weights)',
        "    tj.to_device(model.first, devices[0])",
        '            labels += tj.to_device(logits.argmax(-1), "cpu").tolist()',
    ):
        assert line in ported.splitlines(), line
    ast.parse(ported)
    output = _script(scripts, script.name, "--rows", "32", cwd=tmp_path)
    assert '"rows": 32' in output and '"devices": ["cpu"]' in output
    # What is left is torch's on purpose (the DataLoader, events on a GPU) or advice.
    left = {f.rule for f in scanner.scan_source(ported) if f.fixable}
    assert left == set()


# A torch tutorial's start-up (query the GPU, set it, then join), with the compute
# already in JAX: --diff ports the process group and must leave every JAX-starting call
# before the join as torch's, or the ported job would fail on every rank.
TUTORIAL = """\
import os

import jax.numpy as jnp
import torch
import torch.distributed as dist


def setup():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return local_rank


def main():
    local_rank = setup()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    total = float((jnp.arange(3.0) * (rank + 1)).sum())
    dist.barrier()
    print(f"rank {rank} of {world_size} (local {local_rank}): {total}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def test_the_ported_job_joins_before_it_starts_jax(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    needs("torch")  # the ported tutorial still imports torch (torch.distributed)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / "tutorial.py").write_text(TUTORIAL)
    order = [f.line for f in scanner.scan_source(TUTORIAL) if f.rule == "startup-order"]
    assert order == [10, 11, 12]  # is_available, set_device, the backend's is_available
    monkeypatch.setattr("tests.cli.test_scan_corpus.CORPUS", tmp_path / "source")
    script = _ported("tutorial", tmp_path)
    ported = script.read_text().splitlines()
    assert (
        '    tj.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")'
        in ported
    )
    assert "    if torch.cuda.is_available():" in ported  # before the join: stays torch's
    assert (
        "    rank, world_size = tj.distributed.get_rank(), tj.distributed.get_world_size()"
        in ported
    )
    output = _launched(script.name, cwd=tmp_path)
    assert "rank 0 of 2 (local 0): 3.0" in output and "rank 1 of 2 (local 1): 6.0" in output
