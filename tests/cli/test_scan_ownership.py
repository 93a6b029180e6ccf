"""``scan --diff`` in a process whose torch state another owner holds, and a ``--diff``
that runs to the end (issue 35, items 1 and 2).

One rule (docs/cli.md, "Mixed ownership"): where torch's process group, current device
or CUDA state is owned by torch (a ``torch.distributed`` call that stays torch's) or by
a library built on it (DeepSpeed, Megatron, accelerate, Fabric, torch_xla, torchtitan,
torchtune...), the calls on that state stay torch's: code built on torch reads their
answers, and the ``tj`` call would answer for JAX and start it (joining a JAX job under
a launcher) in a process torch initialises. ``tests/cli/test_scan_oracle.py`` runs the
scripts these snippets come from, before and after ``--diff``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import port_text, run_cli, scan_text
from torch2jax_device.cli import scan
from torch2jax_device.porting import _plan, scanner

# The shape of a Megatron/DeepSpeed initialize: every torch line in it is a query the
# library reads afterwards.
INITIALIZE = """\
import os
import torch
{library}

def initialize():
    device_count = torch.cuda.device_count()
    if torch.distributed.is_initialized():
        print("already initialized")
    else:
        if device_count > 0:
            torch.cuda.set_device(int(os.environ["RANK"]) % device_count)
        {init}
    assert torch.cuda.is_available(), "Megatron requires CUDA."
"""
OWNERS = [
    ("import deepspeed", 'deepspeed.init_distributed(dist_backend="nccl")'),
    ("from megatron.core import parallel_state as mpu", "mpu.initialize_model_parallel(2)"),
    ("from accelerate import PartialState", "PartialState()"),
    ("import lightning as L", "L.Fabric(devices=2).launch()"),
    ("import torch_xla.core.xla_model as xm", "xm.rendezvous('init')"),
    ("from torchtitan.distributed import utils as dist_utils", "dist_utils.init_distributed()"),
    ("from torchtune import training", "training.init_distributed()"),
]


@pytest.mark.parametrize(("library", "init"), OWNERS, ids=[o[0].split()[1] for o in OWNERS])
def test_a_library_that_owns_torchs_group_keeps_the_files_torch_queries(
    library: str, init: str
) -> None:
    source = INITIALIZE.format(library=library, init=init)
    findings = [f for f in scan_text(source) if f.rule != "startup-order"]
    held = {f.rule: f.reason for f in findings}
    for rule in ("cuda-device-count", "dist-is-initialized", "cuda-set-device"):
        assert "owned by" in held[rule] and library.split()[1] in held[rule], (rule, held[rule])
    assert held.get("cuda-is-available")
    assert "tj." not in port_text(source)


def test_without_an_owner_the_same_file_is_rewritten() -> None:
    """The rule is not a blanket refusal: the file without its library ports as before."""
    source = INITIALIZE.format(library="", init="torch.distributed.init_process_group()")
    assert "tj.distributed.is_initialized()" in port_text(source)


def test_a_torch_collective_that_stays_keeps_the_runtime_queries() -> None:
    """torch's own group: a device count taken before it joins is read by torch after
    (and ``tj.cuda.device_count`` would join a JAX job first, under a launcher)."""
    source = """\
        import torch
        import torch.distributed as dist
        count = torch.cuda.device_count()
        dist.init_process_group("gloo")
        total = torch.ones(1)
        dist.all_reduce(total)
        print(count, total)
        """
    count = next(f for f in scan_text(source) if f.rule == "cuda-device-count")
    assert not count.fixable and "owned by dist.all_reduce(total)" in count.reason


def test_nothing_that_starts_jax_moves_before_a_librarys_join() -> None:
    source = """\
        import deepspeed
        import jax.numpy as jnp
        import torch
        from flax import nnx
        model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
        model = model.to("cpu")
        deepspeed.init_distributed()
        """
    found = {f.rule: f for f in scan_text(source)}
    assert not found["module-to"].fixable
    assert "before deepspeed.init_distributed (line 7)" in found["module-to"].reason


# -- a --diff that runs to the end ---------------------------------------------------------
NNX = """\
import torch
from flax import nnx
model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
"""


def test_saving_an_nnx_model_keeps_the_file_the_torch_script_wrote() -> None:
    ported = port_text(NNX + "torch.save(model.state_dict(), path)\n")
    assert ported.endswith('torch.save(tj.state_dict(model, layout="torch"), path)\n')


def test_saving_a_model_that_may_be_torchs_stays_a_finding() -> None:
    source = "import torch\ntorch.save(model.state_dict(), path)\n"
    (finding,) = scan_text(source)
    assert finding.rule == "save-model-torch-twin" and not finding.fixable
    assert port_text(source) == source


@pytest.mark.parametrize(
    "line",
    [
        'torch.save(model.state_dict(), "model.pt")',
        "model.load_state_dict(torch.load(path))",
        "print(next(model.parameters()).device)",
        'on_cpu = next(model.parameters()).device.type == "cpu"',
        "index = next(model.parameters()).device.index",
        "model = model.to('cpu')",
    ],
)
def test_the_rewrite_of_an_nnx_models_lines_is_a_fixed_point_never_reported(line: str) -> None:
    """One call ports the line; scanning the result finds nothing (scan never flags its
    own output) and a second ``--diff`` changes nothing."""
    ported = port_text(NNX + line + "\n")
    assert ported != NNX + line + "\n", "the line was not rewritten"
    assert scan_text(ported) == [], [(f.rule, f.original) for f in scan_text(ported)]
    assert port_text(ported) == ported


def test_one_spelling_for_the_models_device() -> None:
    """What --diff writes is the README's and the catalog's spelling."""
    ported = port_text(NNX + "print(next(model.parameters()).device.type)\n")
    assert "next(tj.parameters(model)).device.type" in ported


def test_a_value_whose_only_torch_use_a_rewrite_removes_is_rewritten_in_the_same_call() -> None:
    """The tutorial's halfway file needed a second ``--diff`` for its device: its one
    torch use was ``torch.load(..., map_location=device)``, which ``tj.load_state``
    replaces."""
    source = """\
        import torch
        from flax import nnx
        device = torch.device("cpu")
        model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
        model = model.to(device)
        model.load_state_dict(torch.load(path, map_location=device))
        print(model(x))
        """
    ported = port_text(source)
    assert 'device = tj.device("cpu")' in ported and "tj.load_state(model, path)" in ported
    assert port_text(ported) == ported


TWO_ROUNDS = """\
import torch
from flax import nnx
device = torch.device("cpu")
model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
model = model.to(device)
model.load_state_dict(torch.load(path, map_location=device))
print(model(x))
"""


def _without_dropped_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planning as before the fix above: a rewrite that needs a second round."""
    monkeypatch.setattr(_plan, "_dropped_calls", lambda candidates: set())


def test_the_command_settles_what_planning_alone_would_leave_for_a_second_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command's own guarantee, whatever planning misses: it scans its result again
    and prints the fixed point."""
    _without_dropped_uses(monkeypatch)
    assert 'tj.device("cpu")' not in port_text(TWO_ROUNDS), "the case would be vacuous"
    (tmp_path / "a.py").write_text(TWO_ROUNDS)
    monkeypatch.chdir(tmp_path)
    status, diff, err = run_cli("scan", "--diff", "a.py")
    assert status == 0 and "run again" not in err
    assert '+device = tj.device("cpu")' in diff and "+tj.load_state(model, path)" in diff


def test_the_command_says_run_again_when_it_cannot_settle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _without_dropped_uses(monkeypatch)
    monkeypatch.setattr(scan, "_ROUNDS", 1)
    (tmp_path / "a.py").write_text(TWO_ROUNDS)
    monkeypatch.chdir(tmp_path)
    status, diff, err = run_cli("scan", "--diff", "a.py")
    assert status == 0 and "+tj.load_state(model, path)" in diff
    assert "run again: 1 more rewrite(s) become possible once this diff is applied" in err


@pytest.mark.parametrize(
    "call",
    [
        "torch.cuda.manual_seed_all(seed)",
        "torch.cuda.manual_seed(seed)",
        "torch.cuda.set_device(seed)",
        "torch.cuda.empty_cache()",
    ],
)
def test_a_module_of_definitions_scanned_alone_keeps_torchs_runtime_calls(call: str) -> None:
    # mingpt/utils.py's set_seed: the module only defines names, so its functions run in
    # the scripts that import it; scanned without them, those may keep torch's CUDA state
    # (the GPU's dropout seeded by torch.cuda.manual_seed_all), and tj's call seeds
    # nothing there. Scanned with an importer that has no torch left, it is rewritten.
    utils = f"import torch\n\n\ndef set_seed(seed):\n    torch.manual_seed(seed)\n    {call}\n"
    runtime = [f for f in scanner.scan_source(utils, "utils.py") if f.line == 6]
    assert runtime and not any(f.fixable for f in runtime)
    assert all("only defines names" in f.reason for f in runtime), runtime
    script = "from utils import set_seed\nset_seed(0)\n"  # a twin: a script that runs it
    alone = scanner.scan_source(utils + "\nset_seed(0)\n", "train.py")
    assert not any("only defines names" in f.reason for f in alone)
    together = scanner.scan_sources({"utils.py": utils, "train.py": script})["utils.py"]
    assert not any("only defines names" in f.reason for f in together)
