"""``scan`` by class on the misses round six left (issue 35): a table of spellings x
contexts per class, each with its non-device twin that must stay silent.

The classes: a catalog enum's member given on a line of its own inside a reported
multi-line call (OLMo's ``state_dict_type=StateDictType...``, llama-cookbook's
``ProfilerActivity.CUDA``); a DataLoader whose workers' start method comes from a
setting; a project's alias of torch.device (fairseq2's ``Device("cuda", index=0)``); a
device kept in a dict spread into torch's distributed call (``kwargs["device_id"] =
device``); DDP's ``register_comm_hook``; an ``accelerator`` parameter defaulting to a device
type; a model's parameters counted in a loop; Lightning's ``ModelCheckpoint`` subclass and
``use_distributed_sampler=``; ``distributed_state.distributed_type`` set; the type of a
kept device tested against a set or kept in its name; ``--local_rank`` as an argument; a
project's ``load_model(source, device)``; a project's factory of the launcher; a state
dict handed to a save function that forwards its arguments to ``torch.save``; torch's
private ``torch._C._get_accelerator()``; ``PYTORCH_ALLOC_CONF``; Accelerate's
``is_ccl_available``; and the seed advice built from the script's own seed.
"""

from __future__ import annotations

import itertools

import pytest

from tests.support.cli import scan_text
from torch2jax_device.porting import catalog


def rules_on(source: str, line: int) -> set[str]:
    return {f.rule for f in scan_text(source) if f.line == line}


def lines_of(source: str) -> set[int]:
    return {f.line for f in scan_text(source) if f.rule != "startup-order"}


# -- a catalog enum's member on a line of its own inside a reported multi-line call ----------
_OWN_LINE_MEMBERS = {
    "FSDP.state_dict_type": (
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType\n",
        "FSDP.state_dict_type(\n    model,\n    state_dict_type=StateDictType.{member},\n)",
        ("SHARDED_STATE_DICT", "FULL_STATE_DICT", "LOCAL_STATE_DICT"),
        "dist-checkpoint-state",
    ),
    "torch.profiler.profile": (
        "import torch\n",
        "torch.profiler.profile(\n    activities=[\n"
        "        torch.profiler.ProfilerActivity.{member},\n    ],\n)",
        ("CUDA", "XPU", "MTIA"),
        "profiler",
    ),
}
_HOLDERS = {"entered": "with {call}:\n    pass\n", "kept": "ctx = {call}\n"}
_MEMBER_CASES = [
    (call, member, holder)
    for call, (_, _, members, _) in _OWN_LINE_MEMBERS.items()
    for member in members
    for holder in _HOLDERS
]


def _member_source(call: str, member: str, holder: str) -> tuple[str, int]:
    imports, written, _, _ = _OWN_LINE_MEMBERS[call]
    source = imports + _HOLDERS[holder].format(call=written.format(member=member))
    line = next(n for n, text in enumerate(source.splitlines(), 1) if f".{member}" in text)
    return source, line


@pytest.mark.parametrize(("call", "member", "holder"), _MEMBER_CASES)
def test_an_enum_member_on_its_own_line_of_a_reported_call_is_reported_there(
    call: str, member: str, holder: str
) -> None:
    source, line = _member_source(call, member, holder)
    row = _OWN_LINE_MEMBERS[call][3]
    assert rules_on(source, 2) == {row}, source  # the call's own finding
    assert rules_on(source, line) == {row}, source


@pytest.mark.parametrize("holder", _HOLDERS)
def test_a_cpu_activity_or_a_member_on_the_calls_own_line_is_not_reported_again(
    holder: str,
) -> None:
    # ProfilerActivity.CPU chooses no device; a member on the call's line is covered by it.
    source, line = _member_source("torch.profiler.profile", "CPU", holder)
    assert rules_on(source, line) == set(), source
    inline = _OWN_LINE_MEMBERS["FSDP.state_dict_type"][0] + _HOLDERS[holder].format(
        call="FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT)"
    )
    assert len([f for f in scan_text(inline) if f.line == 2]) == 1, inline


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        ("dist.all_reduce", "op=dist.ReduceOp.SUM"),
        ("dist.init_process_group", "backend=dist.Backend.NCCL"),
        ("torch.distributed.all_reduce", "op=torch.distributed.ReduceOp.MAX"),
    ],
)
def test_a_calls_own_enum_argument_on_its_own_line_is_not_reported_again(
    call: str, argument: str
) -> None:
    # No row names ReduceOp or Backend: they are the call's arguments, its finding covers them.
    source = (
        f"import torch\nimport torch.distributed as dist\n{call}(\n    t,\n    {argument},\n)\n"
    )
    assert rules_on(source, 3) != set(), source
    assert rules_on(source, 5) == set(), source


# -- a DataLoader whose workers' start method comes from a setting ---------------------------
_FORKING_CONTEXTS = (
    "cfg.multiprocessing_context",
    "cfg.ctx if cfg.num_workers > 0 else None",
    "None",
    '"fork"',
    'multiprocessing.get_context("fork")',
)
_LOADERS = ("torch.utils.data.DataLoader", "DataLoader")
_WORKERS = ("cfg.num_workers", "4")


@pytest.mark.parametrize(
    ("context", "loader", "workers"),
    list(itertools.product(_FORKING_CONTEXTS, _LOADERS, _WORKERS)),
)
def test_workers_whose_context_may_fork_are_dataloader_workers(
    context: str, loader: str, workers: str
) -> None:
    source = (
        "import multiprocessing\nimport torch\nfrom torch.utils.data import DataLoader\n"
        f"loader = {loader}(\n    data,\n    num_workers={workers},\n"
        f"    multiprocessing_context={context},\n)\n"
    )
    (found,) = [f for f in scan_text(source) if f.rule == "dataloader-workers"]
    assert found.line == 6, source
    assert "spawn" in found.reason


@pytest.mark.parametrize(
    "context", ['"spawn"', '"forkserver"', 'multiprocessing.get_context("spawn")', "ctx"]
)
def test_workers_that_do_not_fork_are_not(context: str) -> None:
    source = (
        "import multiprocessing\nfrom torch.utils.data import DataLoader\n"
        'ctx = multiprocessing.get_context("spawn")\n'
        f"loader = DataLoader(data, num_workers=4, multiprocessing_context={context})\n"
    )
    assert rules_on(source, 4) == set(), source
    forking = source.replace('get_context("spawn")', 'get_context("fork")')
    changed = context == "ctx" or "get_context" in context
    assert rules_on(forking, 4) == ({"dataloader-workers"} if changed else set()), forking


# -- a project's alias of torch.device ---------------------------------------------------------
_DEVICE_ALIASES = {
    "from fairseq2.device import Device": "Device",
    "from mypkg.device import Device": "Device",
    "import mypkg.device as devices": "devices.Device",
}
_ALIAS_CALLS = {
    '"cuda", index=0': "device-type-index",
    '"cuda", 1': "device-type-index",
    '"cuda:1"': "device-indexed",
    '"cpu"': "device-type",
}


@pytest.mark.parametrize(
    ("imports", "arguments"), list(itertools.product(_DEVICE_ALIASES, _ALIAS_CALLS))
)
def test_a_projects_device_class_given_a_devices_name_is_a_device_row(
    imports: str, arguments: str
) -> None:
    source = f"import torch\n{imports}\ndevice = {_DEVICE_ALIASES[imports]}({arguments})\n"
    (found,) = [f for f in scan_text(source) if f.line == 3]
    assert found.rule == _ALIAS_CALLS[arguments], source
    assert found.rewrite is None and "tj.device(" in found.replacement  # never rewritten


@pytest.mark.parametrize(
    "line",
    [
        "from cupy.cuda import Device\nd = Device(0)",  # CuPy's own devices
        "from mypkg.device import Device\nd = Device(0)",  # no device's name
        'from mypkg.device import Device\nd = Device("train")',
        'from mypkg.device import DeviceMesh\nd = DeviceMesh("cuda")',  # another class
        'import jax\nd = jax.Device("cuda")',
    ],
)
def test_another_device_class_is_not(line: str) -> None:
    source = f"import torch\n{line}\n"
    assert rules_on(source, 3) == set(), source


# -- a device kept in a dict that is spread into torch's distributed call --------------------
_SPREAD_CALLS = {
    "dist.init_process_group(backend, **{kw})": ("device_id", "dist-init-process-group"),
    "torch.distributed.init_process_group(**{kw})": ("device_id", "dist-init-process-group"),
    "DDP(model, **{kw})": ("device_ids", "dist-ddp-gradient"),
    "DistributedDataParallel(model, **{kw})": ("output_device", "dist-ddp-gradient"),
    "FSDP(model, **{kw})": ("device_id", "dist-fsdp"),
}
_KEPT_KEYS = {
    "set by key": 'kwargs: dict = {{}}\nkwargs["{key}"] = device\n',
    "a dict literal": 'kwargs = {{"timeout": t, "{key}": device}}\n',
}
_SPREAD_IMPORTS = (
    "import torch\nimport torch.distributed as dist\n"
    "from torch.nn.parallel import DistributedDataParallel\n"
    "from torch.nn.parallel import DistributedDataParallel as DDP\n"
    "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
)


@pytest.mark.parametrize(("call", "kept"), list(itertools.product(_SPREAD_CALLS, _KEPT_KEYS)))
def test_a_device_key_spread_into_torchs_call_is_its_row(call: str, kept: str) -> None:
    key, row = _SPREAD_CALLS[call]
    source = (
        _SPREAD_IMPORTS
        + "def setup(backend, device, model, t):\n"
        + "".join(f"    {text}\n" for text in _KEPT_KEYS[kept].format(key=key).splitlines())
        + f"    return {call.format(kw='kwargs')}\n"
    )
    line = next(n for n, text in enumerate(source.splitlines(), 1) if f'"{key}"' in text)
    assert row in rules_on(source, line), source


@pytest.mark.parametrize(
    ("kept", "call"),
    [
        ('kwargs["device_id"] = device', "setup_project(**kwargs)"),  # a project's call
        ('kwargs["timeout"] = device', "dist.init_process_group(**kwargs)"),  # no device key
        ('kwargs["device_id"] = device', "print(kwargs)"),  # not spread
    ],
)
def test_a_key_not_spread_into_torchs_call_or_no_device_key_is_not(kept: str, call: str) -> None:
    source = _SPREAD_IMPORTS + f"kwargs = {{}}\n{kept}\n{call}\n"
    assert rules_on(source, 7) == set(), source


# -- DDP's (and FSDP's) register_comm_hook -------------------------------------------------
@pytest.mark.parametrize(
    ("receiver", "arguments"),
    list(
        itertools.product(
            ("model", "self.model", "ddp_model"),
            ("None, hook", "process_group, default_hooks.fp16_compress_hook", "state=s, hook=h"),
        )
    ),
)
def test_register_comm_hook_is_ddps_gradient_reduction(receiver: str, arguments: str) -> None:
    source = f"import torch\n{receiver}.register_comm_hook({arguments})\n"
    (found,) = [f for f in scan_text(source) if f.line == 2]
    assert found.rule == "dist-ddp-gradient", source
    assert "all-reduce" in found.replacement


@pytest.mark.parametrize("method", ["register_forward_hook", "register_hook", "register_buffer"])
def test_other_hooks_are_not(method: str) -> None:
    assert rules_on(f"import torch\nmodel.{method}(hook)\n", 2) == set()


# -- an accelerator parameter defaulting to a device type -----------------------------------
_ACCELERATOR_DEFAULTS = (
    'def f(accelerator="cuda"):',
    'def f(self, accelerator: str = "cuda", seed: int = 0):',
    'def f(*, accelerator="mps"):',
    'def f(_accelerator="xpu"):',
    'async def f(accelerator="gpu"):',
)


@pytest.mark.parametrize("definition", _ACCELERATOR_DEFAULTS)
def test_an_accelerator_defaulting_to_a_device_type_is_device_string(definition: str) -> None:
    source = f"import torch\n{definition}\n    return accelerator\n"
    assert rules_on(source, 2) == {"device-string"}, source


@pytest.mark.parametrize(
    "definition",
    ['def f(accelerator="auto"):', "def f(accelerator=None):", 'def f(name="cuda"):'],
)
def test_an_accelerator_choice_left_open_or_another_parameter_is_not(definition: str) -> None:
    assert rules_on(f"import torch\n{definition}\n    pass\n", 2) == set()


# -- a model's parameters counted in a loop ---------------------------------------------------
_COUNTED = ("n += p.numel()", "num_parameters += p.data.nelement()", "total_params += p.nelement()")
_ITERATED = {
    "model.parameters()": "for p in model.parameters():",
    "a group's params": 'for p in group["params"]:',
    "named_parameters()": "for name, p in self.model.named_parameters():",
}


@pytest.mark.parametrize(("counted", "iterated"), list(itertools.product(_COUNTED, _ITERATED)))
def test_parameters_counted_in_a_loop_are_parameter_count(counted: str, iterated: str) -> None:
    source = f"import torch\nn = 0\n{_ITERATED[iterated]}\n    {counted}\n"
    assert rules_on(source, 4) == {"parameter-count"}, source


@pytest.mark.parametrize(
    ("loop", "counted"),
    [
        ("for p in model.parameters():", "offset += p.numel()"),  # an offset, not a count
        ("for x in batch:", "total += x.numel()"),  # not parameters
        ("for p in model.parameters():", "total += target.numel()"),  # not the loop's
    ],
)
def test_other_sums_of_sizes_are_not(loop: str, counted: str) -> None:
    assert rules_on(f"import torch\n{loop}\n    {counted}\n", 3) == set()


# -- Lightning's ModelCheckpoint subclass and the Trainer's sampler switch -------------------
_CHECKPOINT_IMPORTS = (
    "from pytorch_lightning.callbacks import ModelCheckpoint",
    "from lightning.pytorch.callbacks import ModelCheckpoint",
    "from lightning.pytorch.callbacks.model_checkpoint import ModelCheckpoint",
)
_CHECKPOINT_USES = {
    "self._save_topk_checkpoint(trainer, candidates)": "library-checkpoint",
    "self._save_last_checkpoint(trainer, candidates)": "library-checkpoint",
    "state = trainer.strategy._lightning_module.state_dict()": "library-strategy",
}


@pytest.mark.parametrize(
    ("imported", "use"), list(itertools.product(_CHECKPOINT_IMPORTS, _CHECKPOINT_USES))
)
def test_a_model_checkpoint_subclass_saves_through_lightning(imported: str, use: str) -> None:
    source = (
        f"{imported}\nclass Saver(ModelCheckpoint):\n"
        f"    def on_train_epoch_end(self, trainer, pl_module):\n        {use}\n"
    )
    assert _CHECKPOINT_USES[use] in rules_on(source, 4), source
    plain = source.replace("(ModelCheckpoint)", "").replace(imported, "import os")
    assert rules_on(plain, 4) == set(), plain


_TRAINERS = {
    "import pytorch_lightning as pl": "pl.Trainer",
    "import lightning as L": "L.Trainer",
    "from lightning.pytorch import Trainer": "Trainer",
}


@pytest.mark.parametrize(
    ("imported", "keyword"),
    list(itertools.product(_TRAINERS, ("use_distributed_sampler", "replace_sampler_ddp"))),
)
def test_the_trainers_sampler_switch_is_library_launcher(imported: str, keyword: str) -> None:
    trainer = _TRAINERS[imported]
    source = f"{imported}\ntrainer = {trainer}(\n    max_epochs=3,\n    {keyword}=False,\n)\n"
    assert rules_on(source, 4) == {"library-launcher"}, source
    plain = f"import os\nrun = setup(\n    max_epochs=3,\n    {keyword}=False,\n)\n"
    assert rules_on(plain, 4) == set(), plain


# -- Accelerate's distributed type set on Transformers' arguments ----------------------------
_ARGUMENTS_HELD = {
    "training_args": "training_args = parse()",
    "trainer.args": "trainer = Trainer(model=model, args=training_args)",
    "self.training_args": "pass",
}


@pytest.mark.parametrize("owner", _ARGUMENTS_HELD)
def test_the_distributed_type_set_is_library_strategy(owner: str) -> None:
    source = (
        "from accelerate.utils import DistributedType\nfrom transformers import Trainer\n"
        f"{_ARGUMENTS_HELD[owner]}\n"
        f"{owner}.distributed_state.distributed_type = DistributedType.DEEPSPEED\n"
    )
    assert "library-strategy" in rules_on(source, 4), source
    plain = source.replace(f"{owner}.", "config.")
    assert rules_on(plain, 4) == set(), plain


# -- the type of a kept device tested against a set, or kept in the device's name ------------
_KEPT = ("device", "self._device", "torch_device")
_TYPE_TESTS = (
    '{d}.type in {{"cpu", "mps"}}',
    '{d}.type not in ("cuda", "xpu")',
    '{d}.type in ["cuda"]',
)


@pytest.mark.parametrize(("kept", "test"), list(itertools.product(_KEPT, _TYPE_TESTS)))
def test_a_kept_devices_type_tested_against_types_is_tensor_device_type(
    kept: str, test: str
) -> None:
    source = (
        f"import torch\nclass T:\n    def f(self, device):\n        {kept} = get()\n"
        f"        if {test.format(d=kept)}:\n            pass\n"
    )
    assert rules_on(source, 5) == {"tensor-device-type"}, source


@pytest.mark.parametrize("kept", _KEPT)
def test_a_kept_device_replaced_by_its_type_is_tensor_device_type(kept: str) -> None:
    source = (
        "import torch\nclass T:\n    def f(self, device: str | torch.device):\n"
        f"        if isinstance({kept}, torch.device):\n            {kept} = {kept}.type\n"
    )
    assert rules_on(source, 5) == {"tensor-device-type"}, source


@pytest.mark.parametrize(
    "line",
    [
        'if device.type in {"train", "eval"}:',  # no device types
        "kind = device.type",  # read into another name
        'if made_device.type in {"cpu", "mps"}:',  # made here: a tj.device's .type
    ],
)
def test_other_reads_of_a_type_are_not(line: str) -> None:
    body = "\n    pass\n" if line.endswith(":") else "\n"
    source = f"import torch\ndevice = get()\nmade_device = torch.device('cuda')\n{line}{body}"
    assert rules_on(source, 4) == set(), source


# -- the launcher's --local_rank argument -----------------------------------------------------
@pytest.mark.parametrize(
    ("parser", "argument"),
    list(
        itertools.product(
            ("parser", "self.parser", "group"),
            (
                '"--local_rank", type=int, default=0',
                '"--local-rank", type=int, default=-1',
                '"--local_rank", default=os.getenv("SOMETHING", 0), type=int',
            ),
        )
    ),
)
def test_a_local_rank_argument_is_dist_local_rank(parser: str, argument: str) -> None:
    source = f"import os\nimport torch\n{parser}.add_argument({argument})\n"
    (found,) = [f for f in scan_text(source) if f.line == 3]
    assert found.rule == "dist-local-rank", source
    assert "tj.distributed.get_local_rank()" in found.replacement


@pytest.mark.parametrize("argument", ['"--rank"', '"--local_batch_size"', '"--local_rank_file"'])
def test_other_arguments_are_not(argument: str) -> None:
    assert rules_on(f"import torch\nparser.add_argument({argument}, type=int)\n", 2) == set()


# -- a project's model loader handed a device ------------------------------------------------
@pytest.mark.parametrize(
    ("imported", "call"),
    list(
        itertools.product(
            ("from nanochat.checkpoint_manager import load_model", "from pkg import load_models"),
            ('load_model("sft", device, phase="eval")', "load_model(path, self.device)"),
        )
    ),
)
def test_a_projects_model_loader_given_a_device_is_its_map_location(
    imported: str, call: str
) -> None:
    if "load_models" in imported:
        call = call.replace("load_model(", "load_models(")
    source = f"import torch\n{imported}\nmodel = {call}\n"
    assert rules_on(source, 3) == {"torch-load-map-location"}, source


@pytest.mark.parametrize(
    "line",
    [
        'from pkg import load_model\nmodel = load_model("sft", phase="eval")',  # no device
        'from pkg import build_model\nmodel = build_model("sft", device)',  # not a loader
    ],
)
def test_a_loader_without_a_device_or_another_helper_is_not(line: str) -> None:
    assert rules_on(f"import torch\n{line}\n", 3) == set()


# -- a project's factory of the launcher ------------------------------------------------------
@pytest.mark.parametrize(
    ("factory", "kept"),
    list(
        itertools.product(
            ("make_accelerator", "build_accelerator", "create_fabric", "setup_fabric"),
            ("accelerator", "self.accelerator", "fabric"),
        )
    ),
)
def test_a_projects_launcher_factory_is_library_launcher(factory: str, kept: str) -> None:
    source = f"import torch\nfrom pkg.distributed import {factory}\n{kept} = {factory}(cfg)\n"
    (found,) = [f for f in scan_text(source) if f.line == 3]
    assert found.rule == "library-launcher", source
    assert factory in found.reason


@pytest.mark.parametrize(
    "line",
    [
        "accelerator = make_model(cfg)",  # not a launcher's factory
        "acc = helper(cfg)",
        "from deepspeed.accelerator import get_accelerator\naccel = get_accelerator()",
    ],
)
def test_other_factories_are_not_launchers(line: str) -> None:
    source = f"import torch\n{line}\n"
    assert not any(f.rule == "library-launcher" for f in scan_text(source)), source


# -- a state dict handed to a save function that forwards its arguments ----------------------
_FORWARDING = {
    "starred": "def save_if_main(*args, **kwargs):\n    if rank() == 0:\n"
    "        torch.save(*args, **kwargs)\n",
    "starred, positional first": "def save_if_main(*args):\n    torch.save(*args)\n",
}


@pytest.mark.parametrize(
    ("saver", "state"),
    list(itertools.product(_FORWARDING, ("bare_model.state_dict()", "self.model.state_dict()"))),
)
def test_a_state_dict_saved_through_a_forwarding_saver_is_reported_where_built(
    saver: str, state: str
) -> None:
    source = (
        f"import torch\n{_FORWARDING[saver]}"
        f'def save(self, bare_model, path):\n    state = {{\n        "model": {state},\n'
        '        "epoch": 1,\n    }\n    save_if_main(state, path)\n'
    )
    line = next(n for n, text in enumerate(source.splitlines(), 1) if '"model"' in text)
    assert rules_on(source, line) == {"save-model-torch-twin"}, source


def test_a_state_dict_saved_through_a_saver_that_names_it_is_reported_at_its_save() -> None:
    # The saver's torch.save(state, path) is reported in its body: not again where built.
    source = (
        "import torch\ndef save_checkpoint(state, path):\n    torch.save(state, path)\n"
        'def save(model, path):\n    save_checkpoint({\n        "model": model.state_dict(),\n'
        "    }, path)\n"
    )
    assert rules_on(source, 6) == set(), source
    assert rules_on(source, 3) != set(), source


# -- torch's private twin of current_accelerator --------------------------------------------
@pytest.mark.parametrize(
    "line",
    [
        "device_type = torch._C._get_accelerator().type",
        "accelerator = torch._C._get_accelerator()",
        "from torch._C import _get_accelerator\naccelerator = _get_accelerator()",
    ],
)
def test_torchs_private_get_accelerator_is_accelerator_current(line: str) -> None:
    source = f"import torch\n{line}\n"
    (found,) = [f for f in scan_text(source) if f.line == source.count("\n")]
    assert found.rule == "accelerator-current", source
    assert found.rewrite is None and 'tj.device("cpu")' in found.replacement


def test_other_private_calls_of_torch_c_are_not() -> None:
    assert rules_on("import torch\nstate = torch._C._get_tracing_state()\n", 2) == set()


# -- PYTORCH_ALLOC_CONF, the allocator setting's newer name ----------------------------------
@pytest.mark.parametrize(
    "line",
    [
        'os.environ["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"',
        'os.environ.setdefault("PYTORCH_ALLOC_CONF", "expandable_segments:True")',
        'conf = os.getenv("PYTORCH_ALLOC_CONF")',
    ],
)
def test_the_allocator_settings_new_name_is_cuda_alloc_conf(line: str) -> None:
    assert rules_on(f"import os\nimport torch\n{line}\n", 3) == {"cuda-alloc-conf"}
    twin = line.replace("PYTORCH_ALLOC_CONF", "MY_ALLOC_CONF")
    assert rules_on(f"import os\nimport torch\n{twin}\n", 3) == set(), twin


# -- Accelerate's is_ccl_available ------------------------------------------------------------
@pytest.mark.parametrize(
    ("imported", "called"),
    [
        ("from accelerate.utils import is_ccl_available", "is_ccl_available()"),
        ("import accelerate.utils.imports as imports", "imports.is_ccl_available()"),
    ],
)
def test_is_ccl_available_is_library_is_available(imported: str, called: str) -> None:
    source = f"import torch\n{imported}\nif {called}:\n    pass\n"
    (found,) = [f for f in scan_text(source) if f.line == 3]
    assert found.rule == "library-is-available", source
    assert "no backend" in found.replacement
    own = "import torch\ndef is_ccl_available():\n    return 0\nif is_ccl_available():\n    pass\n"
    assert rules_on(own, 4) == set(), own


# -- the seed advice: the script's own seed ---------------------------------------------------
_SEEDERS = {
    "torch.manual_seed({s})": "DataLoader's shuffle",
    "torch.random.manual_seed({s})": "DataLoader's shuffle",
    "torch.manual_seed(seed={s})": "DataLoader's shuffle",
    "set_seed({s})": "Python, NumPy and torch",
    "L.seed_everything({s}, workers=True)": "Python, NumPy and torch",
}
_SEEDS = ("args.seed", "cfg.seed + rank", "0", "SEED")


@pytest.mark.parametrize(("seeder", "seed"), list(itertools.product(_SEEDERS, _SEEDS)))
def test_the_seed_advice_keys_jax_with_the_scripts_own_seed(seeder: str, seed: str) -> None:
    source = (
        "import torch\nimport lightning as L\nfrom accelerate.utils import set_seed\n"
        f"{seeder.format(s=seed)}\n"
    )
    (found,) = [f for f in scan_text(source) if f.line == 4]
    assert found.rule in ("manual-seed", "library-seed"), source
    assert found.replacement.startswith(f"key = jax.random.key({seed})"), found.replacement
    assert _SEEDERS[seeder] in found.replacement
    assert found.rewrite is None


def test_a_seed_read_not_set_keeps_the_rows_advice() -> None:
    (found,) = [f for f in scan_text("import torch\ns = torch.initial_seed()\n") if f.line == 2]
    assert found.rule == "manual-seed"
    assert found.replacement == catalog.get("manual-seed").tj


@pytest.mark.parametrize(
    ("made", "line"),
    [
        ("g = torch.Generator().manual_seed({s})", 2),
        ('g = torch.Generator(device="cpu").manual_seed({s})', 2),
        ("g = torch.Generator()\ng.manual_seed({s})", 3),
    ],
)
@pytest.mark.parametrize("seed", _SEEDS)
def test_a_generators_seed_keys_jax(made: str, line: int, seed: str) -> None:
    source = f"import torch\n{made.format(s=seed)}\n"
    found = [f for f in scan_text(source) if f.line == line]
    assert [f.rule for f in found] == ["generator-device"], source
    assert found[0].replacement.startswith(f"key = jax.random.key({seed})"), found[0]
