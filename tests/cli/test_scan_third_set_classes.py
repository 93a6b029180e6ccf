"""``scan`` by class on round six's third development set (label6c: HiFi-GAN, Swin, Qwen,
LAVIS, nanotron, SAM 2, GPT-SoVITS, fairseq2, lightning-thunder, xFormers): a table of
shapes x spellings per class, each with its negative twin.

The classes: every scheduler ``tj.optim.lr_scheduler`` ports (``ExponentialLR`` was
missed, the row named five) and its ``step()`` on the name or attribute it is kept in; a
project's ``distributed`` module that re-exports torch.distributed; the type of a device
kept in a name or setting and made elsewhere; a checkpoint loader handed a device; a
launcher's variable read through a project's reader or kept under an underscore; DDP's
``no_sync`` kept in a name then entered; a device map built entry by entry or by a
helper; Thunder's ``ddp``/``fsdp``; ``transformers.trainer_utils.set_seed``.
"""

from __future__ import annotations

import itertools

import pytest

from tests.support.cli import scan_text
from torch2jax_device.porting import catalog


def rules_on(source: str, line: int) -> set[str]:
    return {f.rule for f in scan_text(source) if f.line == line}


# -- a torch scheduler: every class x import spelling x where it is kept ---------------------
_SCHEDULERS = [name.rsplit(".", 1)[1] for name in catalog.get("lr-scheduler").torch_api]
_ARGUMENTS = {
    "StepLR": "opt, 30",
    "MultiStepLR": "opt, [3, 5]",
    "CosineAnnealingLR": "opt, T_max=10",
    "LinearLR": "opt, total_iters=5",
    "LambdaLR": "opt, lambda e: 0.9**e",
    "ExponentialLR": "opt, gamma=0.99, last_epoch=-1",
    "ConstantLR": "opt, factor=0.5",
    "PolynomialLR": "opt, total_iters=4",
    "OneCycleLR": "opt, 0.1, total_steps=100",
    "ReduceLROnPlateau": "opt",
}
_SPELLINGS = {
    "torch.optim.lr_scheduler.": "import torch",
    "lr_scheduler.": "from torch.optim import lr_scheduler",
    "": "from torch.optim.lr_scheduler import {cls}",
}
# (kept as, stepped as): the scheduler's assignment and its step() two lines below.
_KEPT = {
    "a name": ("sched = {made}", "sched.step()"),
    "an attribute": ("self.sched = {made}", "self.sched.step()"),
}


@pytest.mark.parametrize(
    ("cls", "prefix", "kept"), list(itertools.product(_SCHEDULERS, _SPELLINGS, _KEPT))
)
def test_a_torch_scheduler_and_its_step_are_lr_scheduler(cls: str, prefix: str, kept: str) -> None:
    made = f"{prefix}{cls}({_ARGUMENTS[cls]})"
    assign, step = _KEPT[kept]
    source = (
        f"{_SPELLINGS[prefix].format(cls=cls)}\n"
        "class T:\n"
        "    def __init__(self, opt):\n"
        f"        {assign.format(made=made)}\n"
        "        other = 1\n"
        f"        {step}\n"
    )
    assert rules_on(source, 4) == {"lr-scheduler"}, source
    assert "lr-scheduler" in rules_on(source, 6), source


@pytest.mark.parametrize("kept", _KEPT)
def test_another_librarys_scheduler_stepped_is_not(kept: str) -> None:
    # A project's own schedule, in a file without torch (Transformers' get_scheduler is
    # a torch LambdaLR: lr-scheduler since round 9, tests/cli/test_scan_round9_classes.py).
    assign, step = _KEPT[kept]
    made = 'get_scheduler("linear", opt, num_warmup_steps=0, num_training_steps=9)'
    source = (
        "from mypackage.training import get_scheduler\n"
        "class T:\n"
        "    def __init__(self, opt):\n"
        f"        {assign.format(made=made)}\n"
        "        other = 1\n"
        f"        {step}\n"
    )
    assert rules_on(source, 4) == set() and rules_on(source, 6) == set(), source


def test_exponential_lr_advises_optax_exponential_decay() -> None:
    source = "import torch\nopt = torch.optim.SGD(m.parameters(), lr=0.5)\n" + (
        "s = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)\n"
    )
    (found,) = [f for f in scan_text(source) if f.rule == "lr-scheduler"]
    assert "optax.exponential_decay(0.5, transition_steps=1, decay_rate=0.9)" in found.jax


# -- a project's module that re-exports torch.distributed: import spelling x function ---------
_REEXPORTED = {
    "barrier()": "dist-barrier",
    "is_initialized()": "dist-is-initialized",
    "destroy_process_group()": "dist-destroy",
    "new_group(ranks=[0, 1])": "dist-other",
    "broadcast_object_list(objs, src=0)": "dist-other",
    "all_reduce(t, op=dist.ReduceOp.SUM)": "dist-all-reduce",
}
_REEXPORT_IMPORTS = {
    "import pkg.distributed as dist": "dist.{call}",
    "from pkg import distributed as dist": "dist.{call}",
    "import pkg.distributed": "pkg.distributed.{call}",
}


@pytest.mark.parametrize(
    ("call", "spelling"), list(itertools.product(_REEXPORTED, _REEXPORT_IMPORTS))
)
def test_a_projects_distributed_module_is_read_as_torch_distributed(
    call: str, spelling: str
) -> None:
    name = call.split("(")[0]
    used = _REEXPORT_IMPORTS[spelling].format(call=call, name=name)
    source = f"import torch\n{spelling.format(name=name)}\nimport pkg.distributed as dist\n{used}\n"
    assert _REEXPORTED[call] in rules_on(source, 4), source


@pytest.mark.parametrize(
    "line",
    [
        "import nanotron.distributed as dist\ndist.find_free_port()",  # the project's own
        "import paddle.distributed as dist\ndist.barrier()",  # another framework's
        "import torch2jax_device as tj\ntj.distributed.barrier()",  # the port's own
        "import fairseq.distributed.utils as du\ndu.get_rank()",  # no re-export module
        "from pkg import distributed_utils as dist\ndist.barrier()",
        # a name imported from it: SAM 2's barrier() is the project's own wrapper
        "from training.utils.distributed import barrier\nbarrier()",
    ],
)
def test_a_distributed_module_without_torchs_names_is_not(line: str) -> None:
    source = f"import torch\n{line}\n"
    assert rules_on(source, 3) == set(), source


# -- the type of a device kept in a name or setting, compared with a type's name ------------
_KEPT_DEVICES = {
    "a device made elsewhere": ("device = get()", "device"),
    "a container's element": ("device = pair[0]", "device"),
    "a private setting": ("self._device = get()", "self._device"),
    "a longer name": ("torch_device = get()", "torch_device"),
}
_COMPARISONS = ('{d}.type == "cuda"', '{d}.type != "cpu"', '"mps" == {d}.type')


@pytest.mark.parametrize(
    ("kept", "comparison"), list(itertools.product(_KEPT_DEVICES, _COMPARISONS))
)
def test_a_kept_devices_type_compared_is_tensor_device_type(kept: str, comparison: str) -> None:
    made, device = _KEPT_DEVICES[kept]
    source = (
        "import torch\nclass T:\n    def f(self):\n"
        f"        {made}\n        if {comparison.format(d=device)}:\n            pass\n"
    )
    assert rules_on(source, 5) == {"tensor-device-type"}, source


@pytest.mark.parametrize(
    "line",
    [
        'if layer.type == "cuda":',  # not a device
        'if device.type == "linear":',  # no device type's name
        'if print(f"{device.type}"):',  # read, not tested
        "if device.index is None:",
        'if made.type == "cuda":',  # made by torch.device here: a tj.device's .type is torch's
        'if any(device.type == "cuda" for device in devices):',  # the list's, where made
    ],
)
def test_a_type_not_a_devices_or_not_tested_against_one_is_not(line: str) -> None:
    source = "import torch\ndevice = get()\nmade_device = torch.device('cuda')\n"
    source += f"{line.replace('made', 'made_device')}\n    pass\n"
    assert rules_on(source, 4) == set(), source


# -- a checkpoint loader handed a device: torch.load's map_location, one call away -----------
_LOADERS = ("load_checkpoint", "load_ckpt", "_load_weights", "load_pretrained")
_DEVICES = {
    "a name": ("", "device"),
    "a setting": ("", "args.device"),
    "a torch.device": ('dev = torch.device("cuda")\n', "dev"),
}


@pytest.mark.parametrize(("loader", "device"), list(itertools.product(_LOADERS, _DEVICES)))
def test_another_files_loader_handed_a_device_is_torch_load_map_location(
    loader: str, device: str
) -> None:
    made, value = _DEVICES[device]
    source = f"import torch\nfrom utils import {loader}\n{made}state = {loader}(path, {value})\n"
    line = source.count("\n")
    assert rules_on(source, line) == {"torch-load-map-location"}, source


_HERE = "def {name}(filepath, where):\n    return torch.load(filepath, map_location=where)\n"


@pytest.mark.parametrize(
    ("name", "device", "keyword"),
    list(itertools.product(("load_checkpoint", "restore"), _DEVICES, (False, True))),
)
def test_this_files_function_handing_its_parameter_to_map_location_is_too(
    name: str, device: str, keyword: bool
) -> None:
    made, value = _DEVICES[device]
    given = f"where={value}" if keyword else value
    source = f"import torch\n{_HERE.format(name=name)}{made}state = {name}(path, {given})\n"
    line = source.count("\n")
    assert rules_on(source, line) == {"torch-load-map-location"}, source


@pytest.mark.parametrize(
    "call",
    [
        "load_checkpoint(path)",  # no device handed
        "load_checkpoint(path, strict)",  # no device value
        "load_dataset(path, device)",  # not named for a checkpoint
    ],
)
def test_a_loader_without_a_device_or_another_load_is_not(call: str) -> None:
    source = f"import torch\nfrom utils import load_checkpoint, load_dataset\nstate = {call}\n"
    assert "torch-load-map-location" not in rules_on(source, 3), source


def test_this_files_function_whose_map_location_is_no_parameter_is_not() -> None:
    source = (
        "import torch\ndef restore(filepath, device):\n"
        "    return torch.load(filepath, map_location='cpu')\nstate = restore(path, device)\n"
    )
    assert rules_on(source, 4) == set(), source


# -- a launcher's variable read through a project's reader, or kept under an underscore ------
_VARIABLES = {
    "CUDA_VISIBLE_DEVICES": "cuda-visible-devices",
    "RANK": "dist-env",
    "LOCAL_RANK": "dist-local-rank",
    "SLURM_PROCID": "dist-env",
    "USE_LIBUV": "dist-env",
}
_READERS = (
    'self._env.maybe_get("{v}")',
    'env.get_int("{v}")',
    'environ.get("{v}", "0")',
    'self.environment.get_str("{v}")',
    '"_{v}" in os.environ',
    'os.environ.get("_{v}")',
)


@pytest.mark.parametrize(("variable", "reader"), list(itertools.product(_VARIABLES, _READERS)))
def test_a_variable_read_through_a_projects_reader_is_reported(variable: str, reader: str) -> None:
    source = f"import os\nimport torch\nvalue = {reader.format(v=variable)}\n"
    assert _VARIABLES[variable] in rules_on(source, 3), source


@pytest.mark.parametrize(
    "line",
    [
        'value = self._env.maybe_get("HOME")',  # no variable the scanner knows
        'value = config.get("RANK")',  # not named for the environment
        "value = env.get(key)",  # no literal
        'value = "_PATH" in os.environ',
    ],
)
def test_another_read_is_not(line: str) -> None:
    source = f"import os\nimport torch\n{line}\n"
    assert rules_on(source, 3) == set(), source


# -- DDP's no_sync kept unentered in a name, then entered through it -------------------------
_HOLDERS = ("self.model", "model", "self._ddp_model", "engine.module")


@pytest.mark.parametrize(("holder", "chosen"), list(itertools.product(_HOLDERS, (False, True))))
def test_no_sync_kept_in_a_name_then_entered_is_ddp_no_sync(holder: str, chosen: bool) -> None:
    kept = (
        f"ctx = {holder}.no_sync if skip else nullcontext"
        if chosen
        else (f"ctx = {holder}.no_sync")
    )
    source = f"import torch\nfrom contextlib import nullcontext\n{kept}\nwith ctx():\n    pass\n"
    assert rules_on(source, 3) == {"ddp-no-sync"}, source
    assert rules_on(source, 4) == {"ddp-no-sync"}, source


def test_another_context_kept_in_a_name_is_not() -> None:
    source = (
        "import torch\nfrom contextlib import nullcontext\n"
        "ctx = self.model.sync_context\nwith ctx():\n    pass\n"
    )
    assert rules_on(source, 3) == set() and rules_on(source, 4) == set(), source


# -- library lines: a device map built entry by entry or by a helper; Thunder's wrappers; ----
# -- a library's function imported from the submodule that defines it ------------------------
_MAP_WRITES = {
    "an entry set": "device_map[f'transformer.h.{i}'] = gpu",
    "an entry of a setting": "self.device_map['lm_head'] = 0",
    "a helper's map": "device_map = _device_map(num_gpus, num_layers)",
    "a helper's map, kept": "self.device_map = build_device_map(model)",
}


@pytest.mark.parametrize("write", _MAP_WRITES)
def test_a_device_map_built_is_library_device(write: str) -> None:
    source = f"import torch\nfrom accelerate import dispatch_model\n{_MAP_WRITES[write]}\n"
    assert rules_on(source, 3) == {"library-device"}, source


@pytest.mark.parametrize(
    "line",
    [
        "gpu = device_map['lm_head']",  # read
        "layer_map[f'h.{i}'] = gpu",  # another map
        "device_map = _layers(num_gpus)",  # a helper not named for it
    ],
)
def test_a_map_read_or_another_map_is_not(line: str) -> None:
    source = f"import torch\n{line}\n"
    assert rules_on(source, 2) == set(), source


@pytest.mark.parametrize(
    ("imported", "call", "rule"),
    [
        (
            "from thunder.distributed import ddp",
            "model = ddp(model, broadcast_from=0)",
            "library-prepare",
        ),
        ("from thunder.distributed import fsdp", "model = fsdp(model)", "library-prepare"),
        ("import thunder.distributed as td", "model = td.fsdp(model)", "library-prepare"),
        ("from transformers.trainer_utils import set_seed", "set_seed(0)", "library-seed"),
        ("from transformers import trainer_utils", "trainer_utils.set_seed(0)", "library-seed"),
    ],
)
def test_a_librarys_wrapper_or_seed_is_its_row(imported: str, call: str, rule: str) -> None:
    source = f"import torch\n{imported}\n{call}\n"
    assert rule in rules_on(source, 3), source


def test_a_projects_own_ddp_or_seed_is_not() -> None:
    source = "import torch\nfrom utils import ddp, set_seed\nmodel = ddp(model)\nset_seed(0)\n"
    assert rules_on(source, 3) == set() and rules_on(source, 4) == set(), source
