"""``scan`` on the idiom classes of issue 25: libraries built on torch, device strings as
data, devices held by objects, guarded imports, aliases, generators, the launcher's
environment, model-level lines, look-alikes, and ``--diff`` in a launcher's context."""

from __future__ import annotations

import textwrap

import pytest

from tests.support.cli import found_rules, port_text, scan_text
from torch2jax_device.porting import scanner

ACCELERATE = "from accelerate import Accelerator\n"
FABRIC = "from lightning.fabric import Fabric\n"


# -- libraries built on torch ---------------------------------------------------------------
@pytest.mark.idiom("library-launcher")
@pytest.mark.idiom("library-device")
@pytest.mark.idiom("library-prepare")
@pytest.mark.idiom("library-collective")
@pytest.mark.idiom("library-backward")
@pytest.mark.idiom("library-checkpoint")
@pytest.mark.idiom("library-process")
@pytest.mark.idiom("library-seed")
def test_accelerate_lines_are_reported_and_never_rewritten() -> None:
    source = ACCELERATE + textwrap.dedent(
        """\
        from accelerate.utils import set_seed

        def train(args, model, optimizer, loader):
            accelerator = Accelerator(cpu=args.cpu, mixed_precision="bf16")
            set_seed(0)
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            for x, y in loader:
                x = x.to(accelerator.device)
                accelerator.backward(model(x).sum())
                ys = accelerator.gather(y)
            accelerator.wait_for_everyone()
            if accelerator.is_main_process:
                accelerator.save_state("out")
            accelerator.print("done", ys)
            accelerator.log({"loss": 1.0})
        """
    )
    found = found_rules(source)
    assert (5, "library-launcher") in found and (6, "library-seed") in found
    assert (7, "library-prepare") in found and (9, "library-device") in found
    assert (10, "library-backward") in found and (11, "library-collective") in found
    assert (12, "library-collective") in found and (13, "library-process") in found
    assert (14, "library-checkpoint") in found
    assert not [line for line, _ in found if line in (15, 16)], "print and log are not device work"
    assert all(not f.fixable for f in scanner.scan_source(source) if f.rule.startswith("library-"))


@pytest.mark.idiom("library-to-device")
def test_fabric_lines_are_reported_for_a_fabric_passed_in() -> None:
    found = found_rules(
        FABRIC
        + textwrap.dedent(
            """\
            def evaluate(fabric, model, weights):
                weights = fabric.to_device(weights)
                loss = fabric.all_reduce(model(weights), reduce_op="sum")
                fabric.print(loss, fabric.device)
                return fabric.is_global_zero

            fabric = Fabric(accelerator="cuda", devices=2, precision="bf16-mixed")
            fabric.launch()
            """
        )
    )
    assert found == [
        (3, "library-to-device"),
        (4, "library-collective"),
        (5, "library-device"),
        (6, "library-process"),
        (8, "library-launcher"),
        (9, "library-launcher"),
    ]


def test_library_names_on_other_objects_are_not_reported() -> None:
    assert (
        found_rules(
            """\
        import numpy as np
        def gather(values):
            return np.concatenate(values)
        class Trainer:
            def prepare(self, batch):
                return batch
        trainer = Trainer()
        batch = trainer.prepare(gather([np.zeros(2)]))
        """
        )
        == []
    )


# -- device strings as data --------------------------------------------------------------------
@pytest.mark.idiom("device-string-logic")
@pytest.mark.idiom("device-string")
def test_device_strings_tested_and_assigned_are_reported() -> None:
    found = found_rules(
        """\
        import torch
        def pick(device, args):
            device_type = "cuda" if "cuda" in device else "cpu"
            if device.startswith("cuda") and args.device == "cuda":
                device = "mps"
            args.device = f"cuda:{args.rank}"
            mode = "train"
            if mode == "train" and device_type != "xla":
                return torch.zeros(2).to(device)
        """
    )
    assert (3, "device-string-logic") in found and (4, "device-string-logic") in found
    assert (5, "device-string") in found and (6, "device-indexed") in found
    assert (8, "device-string-logic") in found
    assert [rule for line, rule in found if line == 7] == []


def test_device_string_advice_points_at_the_lines_that_test_it() -> None:
    findings = scan_text(
        """\
        import torch
        device = "cuda"
        if "cuda" in device:
            print(torch.cuda.get_device_name())
        """
    )
    advice = next(f for f in findings if f.rule == "device-string")
    assert "line 3" in advice.reason and "tj.device(device).type" in advice.reason


# -- devices held by objects ---------------------------------------------------------------------
def test_devices_held_by_objects_are_reported() -> None:
    found = found_rules(
        """\
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            @property
            def device(self) -> torch.device:
                return self.head.weight.device
            def forward(self, x):
                b, t, device = *x.shape, self.device
                return to_host(x, device=x.device)
        class Recipe:
            def setup(self):
                with self._device:
                    self.model = Model()
        """
    )
    assert (6, "tensor-device") in found and (8, "tensor-device") in found
    assert (9, "tensor-device") in found and (12, "default-device-context") in found
    assert [rule for line, rule in found if line == 5] == [], "an annotation is not a call"


def test_a_device_read_inside_jitted_code_is_deleted_not_ported() -> None:
    finding = next(
        f
        for f in scan_text(
            """\
            import jax
            @jax.jit
            def step(x):
                device = x.device
                return x * 2
            """
        )
        if f.rule == "tensor-device"
    )
    assert "delete" in finding.replacement and not finding.fixable


# -- imports behind a guard, aliases, generators, the launcher's environment, DTensor -------------
@pytest.mark.idiom("dtensor-full-tensor")
def test_guarded_imports_aliases_generators_environment_and_dtensor() -> None:
    found = found_rules(
        """\
        import os
        import torch
        try:
            import torch_xla.core.xla_model as xm
        except ImportError:
            xm = None
        autocast = torch.cuda.amp.autocast
        RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
        os.environ["NCCL_ASYNC_ERROR_HANDLING"] = "1"
        if xm is not None:
            device = xm.xla_device()
        with autocast():
            g = torch.Generator()
            g.manual_seed(0)
        full = weight.full_tensor()
        """
    )
    assert (7, "autocast") in found and (8, "dist-env") in found and (9, "dist-env") in found
    assert (11, "xla-device") in found and (12, "autocast") in found
    assert (13, "generator-device") in found and (14, "generator-device") in found
    assert (15, "dtensor-full-tensor") in found
    assert [line for line, _ in found if line in (4, 6, 10)] == []


# -- model-level lines ---------------------------------------------------------------------------
@pytest.mark.idiom("load-model-state")
def test_load_state_dict_of_torch_load_is_reported_and_not_half_rewritten() -> None:
    source = """\
        import torch
        model = Net()
        model.load_state_dict(torch.load(path))
        """
    assert found_rules(source) == [(3, "load-model-state")]
    assert "tj.load(" not in port_text(source), "model.load_state_dict(tj.load(p)) fails on NNX"
    finding = scan_text(source)[0]
    assert finding.replacement == "model = tj.load_state(model, path)"


def test_load_state_dict_of_an_nnx_model_becomes_tj_load_state() -> None:
    ported = port_text(
        """\
        import torch
        from flax import nnx
        model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
        model.load_state_dict(torch.load(path))
        print(model(x))
        """
    )
    assert "tj.load_state(model, path)\n" in ported and "load_state_dict" not in ported


@pytest.mark.idiom("save-model-torch-twin")
@pytest.mark.idiom("parameter-count")
@pytest.mark.idiom("optimizer-parameters")
@pytest.mark.idiom("dataloader-workers")
def test_model_level_lines_every_trainer_has() -> None:
    findings = scan_text(
        """\
        import torch
        from torch.utils.data import DataLoader
        torch.save(model.state_dict(), "model.pt")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        n = sum(p.numel() for p in model.parameters())
        loader = DataLoader(data, batch_size=8, num_workers=4)
        quiet = DataLoader(data, batch_size=8, num_workers=0)
        spawned = DataLoader(data, num_workers=4, multiprocessing_context="spawn")
        for p in model.parameters():
            p.requires_grad_(False)
        """
    )
    found = [(f.line, f.rule) for f in findings]
    assert found == [
        (3, "save-model-torch-twin"),
        (4, "optimizer-torch-rules"),
        (4, "optimizer-parameters"),
        (5, "parameter-count"),
        (6, "dataloader-workers"),
    ]
    save = findings[0]
    assert "tj.save_file(model" in save.replacement and "tj.state_dict(model" in save.replacement
    assert "ForkAfterJaxWarning" in findings[4].reason
    # The script's own optimizer and learning rate, in each of the line's two findings.
    assert all("tj.optim.AdamW(lr=1e-3)" in f.replacement for f in findings[1:3])


# -- false findings gone ---------------------------------------------------------------------------
def test_look_alikes_get_no_finding() -> None:
    assert (
        found_rules(
            """\
        import torch
        version = torch.version.__version__
        def profile(x) -> torch.profiler.profile:
            return x
        def where(x) -> torch.device:
            return x
        """
        )
        == []
    )


def test_tj_load_takes_file_objects_and_mmap() -> None:
    findings = scan_text(
        """\
        import torch
        with open(path, "rb") as f:
            state = torch.load(f)
        mapped = torch.load(path, mmap=True)
        """
    )
    reasons = " ".join(f.reason for f in findings)
    assert "takes a path" not in reasons and "mmap" not in reasons


# -- --diff in a launcher's context ---------------------------------------------------------
LAUNCHER = """\
import os
import jax.numpy as jnp
import torch
import torch.distributed as dist

def init_distributed():
    if torch.cuda.is_available():
        backend = "nccl"
    else:
        backend = "gloo"
    dist.init_process_group(backend=backend)
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    return local_rank

def main():
    local_rank = init_distributed()
    head = torch.nn.Linear(2, 2)
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, float(jnp.ones(3).sum()))
    print(local_rank, head, gathered)
"""


@pytest.mark.parametrize(
    "entry", ["if __name__ == '__main__':\n    main()\n", "fire.Fire(main)\n", ""]
)
def test_nothing_starts_jax_before_a_launcher_joins_the_group(entry: str) -> None:
    """The call order a launcher makes (``main`` from ``__main__``, handed to a launcher
    of its own, or never called by the file) is followed into functions."""
    findings = scanner.scan_source(LAUNCHER + entry)
    available = next(f for f in findings if f.rule == "cuda-is-available")
    assert not available.fixable
    # Its reason is the process group's owner (torch, whose collective stays); where the
    # query runs before the join is a finding of its own.
    order = next(f for f in findings if f.rule == "startup-order")
    assert order.line == available.line and "before init_process_group" in order.reason
    ported = scanner.apply_edits(LAUNCHER + entry, findings)
    assert "tj.cuda.is_available" not in ported


def test_set_device_stays_torchs_while_torch_uses_the_device() -> None:
    findings = scanner.scan_source(LAUNCHER)
    set_device = next(f for f in findings if f.rule == "cuda-set-device")
    assert not set_device.fixable and "torch" in set_device.reason


def test_trainers_built_on_the_libraries_and_inherited_model_devices() -> None:
    found = found_rules(
        """\
        import lightning as L
        import torch.nn as nn
        from transformers import Trainer, TrainingArguments
        class Head(nn.Module):
            def forward(self, x):
                return x.to(self.device)
        class Settings(nn.Module):
            def __init__(self, device):
                super().__init__()
                self.device = device
            def forward(self, x):
                return x, self.device
        args = TrainingArguments(output_dir="out", fp16=True)
        trainer = Trainer(model=model, args=args)
        fabric = L.Fabric(accelerator="cuda", devices=2)
        with fabric.init_module():
            net = Head()
        """
    )
    assert (6, "tensor-device") in found, "a torch module's inherited device property"
    assert [rule for line, rule in found if line == 12] == [], "a device the class stores"
    assert (13, "library-launcher") in found and (14, "library-launcher") in found
    assert (15, "library-launcher") in found and (16, "library-device") in found


def test_a_device_name_handed_to_a_call_is_no_finding_of_its_own() -> None:
    assert (
        found_rules(
            """\
        import torch2jax_device as tj
        device = tj.device("cuda" if tj.cuda.is_available() else "cpu")
        """
        )
        == []
    )


def test_device_maps_pipelines_and_deepspeed_engines() -> None:
    found = found_rules(
        """\
        import deepspeed
        from accelerate import init_empty_weights
        from transformers import AutoModelForCausalLM, pipeline
        model = AutoModelForCausalLM.from_pretrained("gpt2", device_map="auto")
        pipe = pipeline("text-generation", model=model, device=0)
        with init_empty_weights():
            big = AutoModelForCausalLM.from_config(config)
        model_engine, optimizer, _, _ = deepspeed.initialize(model=net, config=config)
        model_engine.backward(model_engine(batch))
        model_engine.step()
        model_engine.save_checkpoint("ckpt")
        def run(x, device):
            return helper(x, device=device)
        """
    )
    assert found == [
        (4, "library-device"),
        (5, "library-device"),
        (6, "library-device"),
        (8, "library-prepare"),
        (9, "library-backward"),
        (10, "library-backward"),
        (11, "library-checkpoint"),
    ]


def test_the_runtimes_debug_variables_are_reported() -> None:
    findings = scan_text(
        """\
        import os
        os.environ["CUDA_LAUNCH_BLOCKING"] = "1"
        os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "1"
        os.environ.setdefault("TORCH_DISTRIBUTED_DEBUG", "DETAIL")
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        """
    )
    assert [(f.line, f.rule) for f in findings] == [
        (2, "cuda-other"),
        (3, "dist-env"),
        (4, "dist-env"),
    ]
    assert "jax.block_until_ready" in findings[0].replacement
