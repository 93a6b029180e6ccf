"""``scan`` by class on round seven's development set (label7a: DETR, kohya's sd-scripts,
LLaMA-Factory, InternVL, RWKV, ControlNet, whisperX, the alignment-handbook, axolotl): a
table of spellings x contexts per class, each with its non-device twin that stays silent.

The classes: a device's type compared where the device is handed in or returned by a
helper, or named by a member of the project's enum of device names; a launcher's settings
declared as command-line options, rewritten, multiplied and tested by name before the
launcher gets them; a parser of dataclasses given Transformers' or TRL's training
arguments; Lightning's ``trainer.save_checkpoint`` on a trainer handed in;
``mp.set_start_method("spawn")``; a torch scheduler's ``load_state_dict``; a loss
scaler's private members patched; DeepSpeed ZeRO-3's parameter probed and a parameter
counted in a loop; Accelerate's ``build_device_mesh("cuda")``, ``ParallelismConfig`` and
``DistributedDataParallelKwargs``; DDP's ``_ddp_params_and_buffers_to_ignore``; a
launcher or a DeepSpeed plugin built by a project's helper; ``if args.deepspeed:``;
``getattr(torch, device_name)``; ``device == "auto"`` and ``device[5:]``; Transformers'
``is_torch_*_available`` wherever it is imported from.
"""

from __future__ import annotations

import ast
import itertools
import re

import pytest

from tests.support.cli import scan_text
from torch2jax_device.porting import scanner


def rules_on(source: str, line: int) -> set[str]:
    return {f.rule for f in scan_text(source) if f.line == line}


def found_on(source: str, line: int, rule: str) -> scanner.Finding:
    (finding,) = [f for f in scan_text(source) if f.line == line and f.rule == rule]
    assert not finding.fixable, finding  # advice only: --diff leaves these lines alone
    assert is_code_or_instruction(finding.replacement), finding.replacement
    return finding


def is_code_or_instruction(advice: str) -> bool:
    """Python a porter can paste, or a sentence of instruction ("word: ...")."""
    try:
        ast.parse(advice)
    except SyntaxError:
        return re.match(r"^[a-z][a-z' ]*: ", advice) is not None
    return True


# -- a device's type compared: handed in, or a helper's, or named by an enum -----------------
_COMPARED = {
    '== "cuda"': 'device.type == "cuda"',
    "in a tuple": 'device.type in ("cuda", "xpu")',
    "not in a list": 'device.type not in ["cpu", "mps"]',
    '!= "cpu"': 'device.type != "cpu"',
    "reversed": '"mps" == device.type',
    "an enum member": "device.type == DeviceType.XPU",
    "an enum's value": "device.type == DeviceType.XPU.value",
}
_ENUM = 'class DeviceType(StrEnum):\n    CPU = "cpu"\n    XPU = "xpu"\n'
_HANDED_IN = {
    "converted when a name": (
        "def clean(device):\n"
        "    if isinstance(device, str):\n"
        "        device = torch.device(device)\n"
        "    if {test}:\n"
        "        pass\n"
    ),
    "annotated, converted when a name": (
        "def clean(device: Optional[Union[str, torch.device]]):\n"
        "    if device is None:\n"
        "        return\n"
        "    if isinstance(device, str):\n"
        "        device = torch.device(device)\n"
        "    if {test}:\n"
        "        pass\n"
    ),
}


def _compared_source(context: str, test: str) -> tuple[str, int]:
    head = f"import torch\nfrom enum import StrEnum\nfrom typing import Optional, Union\n{_ENUM}"
    body = _HANDED_IN[context].format(test=test)
    line = head.count("\n") + next(i for i, text in enumerate(body.splitlines(), 1) if test in text)
    return head + body, line


@pytest.mark.parametrize(("context", "test"), list(itertools.product(_HANDED_IN, _COMPARED)))
def test_the_type_of_a_device_handed_in_is_tensor_device_type(context: str, test: str) -> None:
    source, line = _compared_source(context, _COMPARED[test])
    finding = found_on(source, line, "tensor-device-type")
    assert "what hands device in must give one" in finding.replacement


@pytest.mark.parametrize("test", _COMPARED)
def test_a_device_converted_on_every_path_is_reported_where_it_is_made(test: str) -> None:
    # demucs: device = mix.device if None else th.device(device): no device handed in
    # reaches the test, and each binding is a finding of its own
    source = (
        f"import torch\nfrom enum import StrEnum\n{_ENUM}"
        "def apply(mix, device=None):\n"
        "    if device is None:\n"
        "        device = mix.device\n"
        "    else:\n"
        "        device = torch.device(device)\n"
        f"    if {_COMPARED[test]}:\n"
        "        pass\n"
    )
    assert "tensor-device-type" not in rules_on(source, source.count("\n") - 1)


_HELPERS = {
    "annotated": (
        "def current() -> torch.device:\n    return accelerator_or_none() or torch.device('cpu')\n"
    ),
    "from torch.accelerator": (
        "def current():\n"
        "    found = torch.accelerator.current_accelerator()\n"
        "    return found or torch.device(DeviceType.CPU.value)\n"
    ),
}
_HELPER_TESTS = {
    "kept in a name": "    device = current()\n    return device.type == DeviceType.XPU\n",
    "return": "    return current().type == DeviceType.XPU\n",
    "if": "    if current().type != DeviceType.CPU:\n        pass\n",
    "a string": '    return current().type == "xpu"\n',
}


@pytest.mark.parametrize(("helper", "use"), list(itertools.product(_HELPERS, _HELPER_TESTS)))
def test_the_type_of_a_helpers_device_is_tensor_device_type(helper: str, use: str) -> None:
    source = f"import torch\nfrom enum import StrEnum\n{_ENUM}{_HELPERS[helper]}def use():\n"
    line = source.count("\n") + _HELPER_TESTS[use].count("\n") - ("pass" in _HELPER_TESTS[use])
    source += _HELPER_TESTS[use]
    finding = found_on(source, line, "tensor-device-type")
    assert "current must return one" in finding.replacement


@pytest.mark.parametrize(
    "source",
    [
        # an enum of other names, on a helper's object
        "import torch\nfrom enum import Enum\nclass Kind(Enum):\n    TRAIN = 'train'\n"
        "def use():\n    return current_task().type == Kind.TRAIN\n",
        # a node's type, named like no device
        "import torch\nclass NodeType:\n    CUDA = 'cuda'\ndef use(node):\n"
        "    return node.type == NodeType.CUDA\n",
        # a helper returning something else than a device
        "import torch\ndef current():\n    return lookup()\ndef use():\n"
        "    return current().type == 'cuda'\n",
        # a helper's device made here alone: reported where torch.device makes it
        "import torch\ndef current():\n    return torch.device('cuda')\ndef use():\n"
        "    device = current()\n    return device.type == 'cuda'\n",
    ],
)
def test_other_types_compared_are_not_device_types(source: str) -> None:
    assert rules_on(source, source.count("\n")) == set(), source


# -- a launcher's settings declared, rewritten, multiplied and tested ------------------------
_LIGHTNING_SCRIPT = """\
from argparse import ArgumentParser
from pytorch_lightning import Trainer
parser = ArgumentParser()
parser.add_argument("--accelerator", default="gpu", type=str)
parser.add_argument("--strategy", default="auto", type=str)
parser.add_argument("--devices", default=1, type=int)
parser.add_argument("--num_nodes", default=1, type=int)
parser.add_argument("--precision", default="fp16", type=str)
parser.add_argument("--micro_bsz", default=8, type=int)
args = parser.parse_args()
{work}
trainer = Trainer(accelerator=args.accelerator, strategy=args.strategy, devices=args.devices,
    num_nodes=args.num_nodes, precision=args.precision)
"""
_OPTIONS = {4: "library-launcher", 5: "library-strategy", 6: "library-launcher"}
_OPTIONS |= {7: "library-launcher", 8: "library-launcher"}
_WORK = {
    "precision mapped": 'if args.precision == "fp16":\n    args.precision = 16',
    "strategy tested": 'if "deepspeed" in args.strategy:\n    import deepspeed',
    "global batch": "args.real_bsz = int(args.num_nodes) * int(args.devices) * args.micro_bsz",
}


@pytest.mark.parametrize(("work", "line"), list(itertools.product(_WORK, _OPTIONS)))
def test_options_a_script_works_on_before_its_launcher_are_the_launchers(
    work: str, line: int
) -> None:
    source = _LIGHTNING_SCRIPT.format(work=_WORK[work])
    finding = found_on(source, line, _OPTIONS[line])
    assert is_code_or_instruction(finding.replacement)
    assert rules_on(source, 9) == set()  # --micro_bsz: no launcher keyword


def test_lightning_1s_from_argparse_args_hands_over_the_trainers_own_options() -> None:
    source = (
        "from argparse import ArgumentParser\nfrom pytorch_lightning import Trainer\n"
        "parser = ArgumentParser()\n"
        'parser.add_argument("--precision", default="fp16")\n'
        'parser.add_argument("--device", default="cuda")\n'
        "args = parser.parse_args()\n"
        'if args.precision == "fp16":\n    args.precision = 16\n'
        "device = torch.device(args.device)\n"
        "trainer = Trainer.from_argparse_args(args)\n"
    )
    assert "library-launcher" in rules_on(source, 4)
    assert "library-launcher" not in rules_on(source, 5)  # no Trainer keyword: the script's


def test_options_only_handed_through_are_the_launcher_calls_finding() -> None:
    # the Fabric classifier of the wild corpus: Fabric(accelerator=hparams.accelerator...)
    source = _LIGHTNING_SCRIPT.format(work="print(args.micro_bsz)")
    assert all(rules_on(source, line) == set() for line in _OPTIONS)


def test_options_of_a_script_without_a_launcher_are_not_the_launchers() -> None:
    source = _LIGHTNING_SCRIPT.format(work='if args.precision == "fp16":\n    pass').replace(
        "trainer = Trainer(", "run = simulate("
    )
    assert all(rules_on(source, line) == set() for line in _OPTIONS)


@pytest.mark.parametrize(
    ("work", "rule"),
    [
        ('args.precision = "bf16"', "library-launcher"),
        ("args.precision = 32", "library-launcher"),
        ("args.devices = 2", "library-launcher"),
        ('args.strategy = "deepspeed_stage_2"', "library-strategy"),
    ],
)
def test_a_setting_rewritten_before_its_launcher_is_the_launchers(work: str, rule: str) -> None:
    source = _LIGHTNING_SCRIPT.format(work=work)
    assert rule in rules_on(source, 11), source


def test_another_objects_setting_rewritten_is_not() -> None:
    source = _LIGHTNING_SCRIPT.format(work='other.precision = "bf16"')
    assert rules_on(source, 11) == set()


_STRATEGY_TESTS = [
    '"deepspeed" in args.strategy',
    "'deepspeed_stage_3' in args.strategy",
    'cfg.strategy == "fsdp"',
    'self.args.strategy.startswith("ddp") or "ddp_spawn" == self.args.strategy',
    '"fsdp" not in strategy',
]


@pytest.mark.parametrize("test", _STRATEGY_TESTS)
def test_a_strategy_tested_by_its_name_is_library_strategy(test: str) -> None:
    source = f"def f(args, cfg, strategy, self):\n    if {test}:\n        pass\n"
    found_on(source, 2, "library-strategy")


@pytest.mark.parametrize(
    "test", ['"beam" in args.strategy', 'cfg.strategy == "greedy"', '"deepspeed" in args.name']
)
def test_other_strategies_tested_are_not(test: str) -> None:
    source = f"def f(args, cfg):\n    if {test}:\n        pass\n"
    assert rules_on(source, 2) == set()


_PRODUCTS = [
    "args.num_nodes * args.devices",
    "int(args.num_nodes) * int(args.devices) * args.micro_bsz",
    "args.micro_bsz * args.gpus * args.num_nodes",
    "args.devices * args.num_nodes",
]


@pytest.mark.parametrize(
    ("product", "imported"),
    list(itertools.product(_PRODUCTS, ["import pytorch_lightning as pl", "import lightning as L"])),
)
def test_nodes_times_devices_is_the_launchers(product: str, imported: str) -> None:
    source = f"{imported}\ndef f(args, cfg):\n    batch = {product}\n"
    finding = found_on(source, 3, "library-launcher")
    assert "tj.distributed.get_world_size()" in finding.replacement


@pytest.mark.parametrize(
    "source",
    [
        "def f(args):\n    batch = args.num_nodes * args.devices\n",  # no Lightning
        "import lightning as L\ndef f(args):\n    size = args.num_nodes * args.hidden\n",
    ],
)
def test_other_products_are_not(source: str) -> None:
    assert rules_on(source, source.count("\n")) == set()


# -- a parser of dataclasses given training arguments ----------------------------------------
_PARSERS = {
    "from trl import TrlParser": "TrlParser",
    "import trl": "trl.TrlParser",
    "from transformers import HfArgumentParser": "HfArgumentParser",
    "import transformers": "transformers.HfArgumentParser",
}
_CONFIGS = ["SFTConfig", "DPOConfig", "GRPOConfig", "ParlerTTSTrainingArguments"]


@pytest.mark.parametrize(("imported", "config"), list(itertools.product(_PARSERS, _CONFIGS)))
def test_a_parser_of_training_arguments_is_the_launcher(imported: str, config: str) -> None:
    source = (
        f"{imported}\nfrom project import ScriptArguments, ModelConfig, {config}\n"
        f"parser = {_PARSERS[imported]}((ScriptArguments, {config}, ModelConfig))\n"
    )
    found_on(source, 3, "library-launcher")


@pytest.mark.parametrize("imported", _PARSERS)
def test_a_parser_of_other_dataclasses_or_of_a_class_defined_here_is_not(imported: str) -> None:
    others = (
        f"{imported}\nfrom project import ScriptArguments, ModelConfig\n"
        f"parser = {_PARSERS[imported]}((ScriptArguments, ModelConfig))\n"
    )
    assert rules_on(others, 3) == set()
    defined = (  # the subclass's definition is the finding (round 6's LLaVA, FastChat, Qwen)
        f"{imported}\nimport transformers\n"
        "class TrainingArguments(transformers.TrainingArguments):\n    pass\n"
        f"parser = {_PARSERS[imported]}((ModelArguments, TrainingArguments))\n"
    )
    assert "library-launcher" in rules_on(defined, 3)
    assert rules_on(defined, 5) == set()


# -- Lightning's save_checkpoint on a trainer handed in --------------------------------------
@pytest.mark.parametrize(
    ("imported", "receiver"),
    list(
        itertools.product(
            ["import pytorch_lightning as pl", "from lightning.pytorch import Callback"],
            ["trainer", "self.trainer"],
        )
    ),
)
def test_lightnings_save_checkpoint_is_library_checkpoint(imported: str, receiver: str) -> None:
    source = (
        f"{imported}\ndef save(self, trainer, path):\n"
        f"    {receiver}.save_checkpoint(path, weights_only=True)\n"
    )
    found_on(source, 3, "library-checkpoint")


def test_save_checkpoint_of_a_file_without_lightning_is_not() -> None:
    source = "def save(trainer, path):\n    trainer.save_checkpoint(path)\n"
    assert rules_on(source, 2) == set()


# -- multiprocessing's start method ---------------------------------------------------------
_MP = {
    "import torch.multiprocessing as mp": "mp",
    "from torch import multiprocessing as mp": "mp",
    "import torch": "torch.multiprocessing",
}


@pytest.mark.parametrize("imported", _MP)
def test_the_spawn_start_method_is_mp_spawn(imported: str) -> None:
    mp = _MP[imported]
    source = (
        f"{imported}\nif {mp}.get_start_method(allow_none=True) is None:\n"
        f"    {mp}.set_start_method('spawn')\nlog.info(f'method: {{{mp}.get_start_method()}}')\n"
    )
    for line in (2, 3):
        assert "cannot be used in a forked child" in found_on(source, line, "mp-spawn").replacement
    assert rules_on(source, 4) == set()  # logged: no choice made


def test_the_standard_librarys_start_method_is_not() -> None:
    source = "import multiprocessing as mp\nmp.set_start_method('spawn')\n"
    assert rules_on(source, 2) == set()


# -- a torch scheduler restored --------------------------------------------------------------
@pytest.mark.parametrize("kept", ["sched", "self.sched"])
def test_a_torch_schedulers_load_state_dict_is_lr_scheduler(kept: str) -> None:
    source = (
        "import torch\nclass T:\n    def __init__(self, opt, ck):\n"
        f"        {kept} = torch.optim.lr_scheduler.StepLR(opt, 30)\n"
        f"        {kept}.load_state_dict(ck['lr_scheduler'])\n"
    )
    assert "torch's state dict" in found_on(source, 5, "lr-scheduler").replacement


def test_another_librarys_scheduler_restored_is_not_lr_scheduler() -> None:
    source = (
        "from transformers import get_scheduler\n"
        "sched = get_scheduler('linear', opt, num_warmup_steps=0, num_training_steps=9)\n"
        "sched.load_state_dict(ck['lr_scheduler'])\n"
    )
    assert "lr-scheduler" not in rules_on(source, 3)


# -- a loss scaler's private members ---------------------------------------------------------
_SCALER_USES = {
    "taken": "org = {s}._unscale_grads_",
    "patched": "{s}._unscale_grads_ = replacer",
    "called": "{s}._unscale_grads_(opt, inv, found, True)",
    "its scale read": "value = {s}._scale",
}


@pytest.mark.parametrize(
    ("receiver", "use"),
    list(itertools.product(["accelerator.scaler", "self.grad_scaler", "scaler"], _SCALER_USES)),
)
def test_a_scalers_private_members_are_grad_scaler(receiver: str, use: str) -> None:
    source = f"def patch(self, accelerator, scaler):\n    {_SCALER_USES[use].format(s=receiver)}\n"
    assert "no scaler to patch" in found_on(source, 2, "grad-scaler").replacement


@pytest.mark.parametrize(
    "source",
    [
        "from sklearn.preprocessing import StandardScaler\nscaler = StandardScaler()\n"
        "x = scaler._scale\n",
        "def f(accelerator):\n    x = accelerator.scaler._mean_\n",
        "def f(self):\n    x = self.tokenizer._scale\n",
    ],
)
def test_other_objects_private_members_are_not(source: str) -> None:
    assert rules_on(source, source.count("\n")) == set()


# -- ZeRO-3's parameter probed; a parameter counted in a loop --------------------------------
@pytest.mark.parametrize(
    ("probe", "name"),
    list(
        itertools.product(
            ["hasattr(param, {n})", "getattr(param, {n}, None)"], ["ds_numel", "ds_id", "ds_shape"]
        )
    ),
)
def test_a_zero3_parameter_probed_is_library_strategy(probe: str, name: str) -> None:
    source = f"def count(param):\n    if {probe.format(n=repr(name))}:\n        n = param.{name}\n"
    assert "x.size" in found_on(source, 2, "library-strategy").replacement


def test_a_probe_that_guards_deepspeeds_gather_is_the_gathers_finding() -> None:
    source = (
        "from deepspeed import zero\ndef maybe_zero_3(param):\n"
        "    if hasattr(param, 'ds_id'):\n        with zero.GatheredParameters([param]):\n"
        "            param = param.data.detach().cpu().clone()\n"
    )
    assert rules_on(source, 3) == set()
    assert "library-collective" in rules_on(source, 4)


def test_another_attribute_probed_is_not() -> None:
    assert rules_on("def f(row):\n    if hasattr(row, 'ds_name'):\n        pass\n", 2) == set()


_COUNTED = {
    "assigned": "num_params = {p}.numel()",
    "added": "total += {p}.numel()",
    "data.nelement": "n_trainable += {p}.data.nelement()",
}
_LOOPS = {
    "parameters()": "for param in model.parameters():",
    "named_parameters()": "for name, param in model.named_parameters():",
}


@pytest.mark.parametrize(("loop", "counted"), list(itertools.product(_LOOPS, _COUNTED)))
def test_a_parameter_counted_in_a_loop_is_parameter_count(loop: str, counted: str) -> None:
    source = (
        f"def count(model):\n    total = 0\n    {_LOOPS[loop]}\n"
        f"        {_COUNTED[counted].format(p='param')}\n"
    )
    found_on(source, 4, "parameter-count")


@pytest.mark.parametrize(
    "body",
    [
        "    for param in model.parameters():\n        offset += param.numel()\n",  # an offset
        "    for buf in model.buffers():\n        total += buf.numel()\n",  # not parameters
        "    for x in batch:\n        total += x.numel()\n",
    ],
)
def test_other_numel_in_loops_are_not(body: str) -> None:
    source = f"def f(model, batch, offset, total):\n{body}"
    assert rules_on(source, 3) == set()


# -- Accelerate's parallelism: the config, its mesh, DDP's settings --------------------------
@pytest.mark.parametrize(
    "imported", ["from accelerate import {c}", "from accelerate.utils import {c}"]
)
@pytest.mark.parametrize(
    "made",
    [
        "ParallelismConfig(tp_size=2, dp_shard_size=4)",
        "DistributedDataParallelKwargs(static_graph=True)",
    ],
)
def test_accelerates_parallelism_settings_are_library_strategy(imported: str, made: str) -> None:
    source = f"{imported.format(c=made.split('(')[0])}\nsettings = {made}\n"
    assert "library-strategy" in rules_on(source, 2)


@pytest.mark.parametrize(
    "call",
    [
        'parallelism_config.build_device_mesh("cuda")',
        "config.build_device_mesh(device_type=device_type)",
        "self.pc.build_device_mesh(device.type)",
    ],
)
def test_a_mesh_built_from_a_config_for_a_device_type_is_dist_device_mesh(call: str) -> None:
    source = (
        f"def build(parallelism_config, config, device_type, device, self):\n    mesh = {call}\n"
    )
    assert "tj.distributed.init_device_mesh" in found_on(source, 2, "dist-device-mesh").replacement


def test_a_mesh_built_from_other_arguments_is_not() -> None:
    source = (
        "def f(topology, shape):\n"
        "    a = topology.build_device_mesh()\n"
        "    b = topology.build_device_mesh(shape)\n"
    )
    assert rules_on(source, 2) == set() and rules_on(source, 3) == set()


# -- DDP's buffers left out ------------------------------------------------------------------
@pytest.mark.parametrize("model", ["model", "self.model"])
def test_ddps_ignored_buffers_set_for_a_library_are_dist_ddp_gradient(model: str) -> None:
    source = (
        "import torch\ndef f(self, model):\n"
        f"    {model}._ddp_params_and_buffers_to_ignore = [n for n, b in {model}.named_buffers()]\n"
    )
    assert "sharding" in found_on(source, 3, "dist-ddp-gradient").replacement


def test_ddps_ignored_buffers_of_a_model_wrapped_here_are_the_wraps_finding() -> None:
    source = (
        "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
        "model._ddp_params_and_buffers_to_ignore = {'freqs_cis'}\n"
        "model = DDP(model, device_ids=[0])\n"
    )
    assert rules_on(source, 3) == set()
    assert rules_on(source, 4)


# -- a launcher or a plugin built by the project's helpers; a flag choosing DeepSpeed --------
_FACTORIES = [
    *itertools.product(
        ["accelerator", "self.accelerator"],
        ["train_util.prepare_accelerator(args)", "build_accelerator(cfg)", "_create_accelerator()"],
    ),
    ("fabric", "setup_fabric(cfg)"),
]


@pytest.mark.parametrize(("target", "call"), _FACTORIES)
def test_a_launcher_built_by_a_projects_factory_is_library_launcher(target: str, call: str) -> None:
    source = f"def main(self, args, cfg):\n    {target} = {call}\n"
    found_on(source, 2, "library-launcher")


@pytest.mark.parametrize(
    "statement",
    [
        "accelerator = pick_accelerator_name(args)",
        "model = prepare_accelerator(args)",
        "accelerator = torch.accelerator.current_accelerator()",
    ],
)
def test_other_accelerator_names_are_not_a_launcher(statement: str) -> None:
    source = f"import torch\ndef main(args):\n    {statement}\n"
    assert "library-launcher" not in rules_on(source, 3)


@pytest.mark.parametrize("keyword", ["deepspeed_plugin", "fsdp_plugin"])
def test_a_plugin_built_by_a_projects_helper_for_the_accelerator_is_library_strategy(
    keyword: str,
) -> None:
    source = (
        "from accelerate import Accelerator\n"
        f"plugin = deepspeed_utils.prepare_plugin(args)\n"
        f"accelerator = Accelerator({keyword}=plugin)\n"
    )
    found_on(source, 2, "library-strategy")
    untouched = source.replace(f"Accelerator({keyword}=plugin)", "Accelerator()")
    assert rules_on(untouched, 2) == set()


@pytest.mark.parametrize(
    "test",
    ["args.deepspeed", "not cfg.use_deepspeed", "args.fsdp and args.train", "self.args.use_fsdp"],
)
@pytest.mark.parametrize("imported", ["from accelerate import Accelerator", "import deepspeed"])
def test_a_flag_choosing_deepspeed_or_fsdp_tested_is_library_strategy(
    test: str, imported: str
) -> None:
    source = f"{imported}\ndef main(self, args, cfg):\n    if {test}:\n        pass\n"
    found_on(source, 3, "library-strategy")


@pytest.mark.parametrize(
    "source",
    [
        "def main(args):\n    if args.deepspeed:\n        pass\n",  # no library imported
        "import deepspeed\ndef main(args):\n    config = args.deepspeed\n",  # kept, not tested
    ],
)
def test_the_flag_elsewhere_is_not(source: str) -> None:
    assert rules_on(source, 3 if "import" in source else 2) == set()


# -- the device module by name; "auto" and the index cut out of a name -----------------------
@pytest.mark.parametrize(
    "name",
    ["device_name", "device_type", "device.type", "get_device_type()", "'npu'", "self.device_type"],
)
@pytest.mark.parametrize("kept", ["return {g}", "module = {g}"])
def test_torchs_module_by_a_device_types_name_is_accelerator_current(name: str, kept: str) -> None:
    looked_up = kept.format(g=f"getattr(torch, {name})")
    source = f"import torch\ndef f(self, device_name, device_type, device):\n    {looked_up}\n"
    assert "tj.cuda" in found_on(source, 3, "accelerator-current").replacement


@pytest.mark.parametrize("name", ["dtype", "'float16'", "args.torch_dtype", "name"])
def test_torchs_other_attributes_by_name_are_not(name: str) -> None:
    source = f"import torch\ndef f(args, dtype, name):\n    x = getattr(torch, {name})\n"
    assert rules_on(source, 3) == set()


@pytest.mark.parametrize("subject", ["device", "args.device", "self.init_device"])
@pytest.mark.parametrize("op", ["==", "!="])
def test_a_device_tested_for_auto_is_device_string_logic(subject: str, op: str) -> None:
    source = f"def f(self, args, device):\n    if {subject} {op} 'auto':\n        pass\n"
    assert "resolve it" in found_on(source, 2, "device-string-logic").replacement


@pytest.mark.parametrize(
    "sliced", ["device[5:]", 'device[len("cuda:"):]', "args.device[4:]", "self.device[4:]"]
)
def test_the_index_cut_out_of_a_devices_name_is_device_string_logic(sliced: str) -> None:
    source = f"def f(self, args, device):\n    index = int({sliced})\n"
    assert ".index" in found_on(source, 2, "device-string-logic").replacement


@pytest.mark.parametrize(
    "stripped",
    [
        'device.replace("cuda:", "")',
        'args.device.removeprefix("cuda:")',
        'self.device.lstrip("xpu:")',
    ],
)
def test_the_index_left_once_a_devices_type_is_stripped_is_device_string_logic(
    stripped: str,
) -> None:
    source = f"def f(self, args, device):\n    index = int({stripped})\n"
    assert ".index" in found_on(source, 2, "device-string-logic").replacement


@pytest.mark.parametrize(
    "source",
    [
        "def f(device):\n    name = device.replace('cuda:', 'gpu:')\n",
        "def f(path):\n    rest = path.removeprefix('cuda:')\n",
        "def f(device):\n    rest = device.replace('model.', '')\n",
        "def f(mode):\n    if mode == 'auto':\n        pass\n",
        "def f(text):\n    rest = text[5:]\n",
        "def f(device):\n    rest = device[1:]\n",
    ],
)
def test_other_auto_tests_and_slices_are_not(source: str) -> None:
    assert rules_on(source, 2) == set()


# -- Transformers' availability helpers, wherever imported from ------------------------------
@pytest.mark.parametrize(
    ("module", "kind"),
    list(
        itertools.product(
            ["transformers.utils", "transformers.utils.import_utils", "transformers"],
            ["cuda", "mps", "npu", "xpu", "bf16_gpu"],
        )
    ),
)
def test_transformers_availability_helpers_are_library_is_available(module: str, kind: str) -> None:
    helper = f"is_torch_{kind}_available"
    source = f"from {module} import {helper}\nif {helper}():\n    pass\n"
    found_on(source, 2, "library-is-available")


def test_whether_torch_is_installed_is_not() -> None:
    source = (
        "from transformers.utils import is_torch_available\nif is_torch_available():\n    pass\n"
    )
    assert rules_on(source, 2) == set()


# -- another accelerator's random state, saved and restored -----------------------------------
@pytest.mark.parametrize(
    ("kind", "call"),
    list(itertools.product(["xpu", "npu", "mps"], ["get_rng_state()", "set_rng_state(state)"])),
)
def test_another_accelerators_random_state_is_rng_state(kind: str, call: str) -> None:
    source = f"import torch\ndef f(state):\n    if torch.{kind}.is_available():\n"
    source += f"        kept = torch.{kind}.{call}\n"
    assert "the key is the state" in found_on(source, 4, "rng-state").replacement


def test_another_accelerators_other_calls_stay_its_modules() -> None:
    source = "import torch\nx = torch.xpu.memory_allocated()\n"
    assert rules_on(source, 2) == {"xpu-npu-other"}
