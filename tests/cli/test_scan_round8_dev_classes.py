"""``scan`` by class on round eight's development set (label8a: torchtitan, torchtune, gpt-fast,
mistral-inference, timm, WeNet, Open-Sora on ColossalAI, Diffusers' text-to-image example on
Accelerate): each class's spellings, crossed with the places a script writes them, and its
twin without device meaning that stays silent.

The torch classes: the compiler's settings (``torch._inductor.config``,
``torch._functorch.config``), a compiled module asked for or unwrapped
(``is_compiled_module``, ``model._orig_mod``, torchtune's ``compile_model``);
``torch.utils.deterministic.fill_uninitialized_memory``;
torch's private ``_get_available_device_type()`` / ``_get_device_module(t)`` and the device
module they give, handed back in a tuple by a helper or imported from the project by its
name; ``pin_memory()`` on an object that holds a model's tensors (Diffusers' ``EMAModel``);
the legacy constructor ``loss.new([value])``; FSDP's own ``model.clip_grad_norm_(clip)``;
``with autocast:`` of a context chosen from a dict; the launcher's variables checked in a
loop over a list of their names.

The library classes: ColossalAI's ``Booster`` (its plugin, ``boost``, ``backward``,
``no_sync``, ``execute_pipeline``, ``checkpoint_io``) and ``DistCoordinator`` (kept in
``self`` from an annotated parameter), its ``set_seed``; Hugging Face's ``save_pretrained``
of a model or a pipeline, a pipeline's CPU offloading; Accelerate's save hooks and its
DeepSpeed plugin's
``zero3_init_context_manager``; DeepSpeed chosen by name (``train_engine ==
"deepspeed"``), its ``add_config_arguments``, ZeRO's memory estimates and
``convert_zero_checkpoint_to_fp32_state_dict``; torchtune's ``get_memory_stats`` and
activation offloading; and a table of the libraries' device functions by their qualified
names (ColossalAI's ``launch_from_torch``, torchtune's ``shard_model``, DeepSpeed's
``safe_get_full_grad``...), each imported three ways, with a project's function of the
same name silent.

Each line that a class covers is marked in its snippet with ``# -> rule``, each twin with
``# silent`` (``tests/cli/test_scan_round7b_classes.py``'s marks).
"""

from __future__ import annotations

import itertools

import pytest

from tests.cli.test_scan_round7b_classes import check
from tests.cli.test_scan_round7b_classes import marked as _marked
from tests.cli.test_scan_round7b_classes import silenced as _silenced

# -- the compiler's settings, a compiled module asked for --------------------------------------
_COMPILER_IMPORTS = {
    "import torch": ("import torch\n", "torch._inductor.config", "torch._functorch.config"),
    "import torch as th": ("import torch as th\n", "th._inductor.config", "th._functorch.config"),
    "config modules imported": (
        "import torch._inductor.config as inductor_config\n"
        "import torch._functorch.config as functorch_config\n",
        "inductor_config",
        "functorch_config",
    ),
}
_COMPILER_PLACES = {
    "module level": "{body}",
    "in a function": "def setup(args):\n{indented}",
    "in a branch": "def setup(args):\n    if args.compile:\n{indented2}",
}


@pytest.mark.parametrize(
    ("imported", "place"), list(itertools.product(_COMPILER_IMPORTS, _COMPILER_PLACES))
)
def test_the_compilers_settings_are_torch_compile(imported: str, place: str) -> None:
    header, inductor, functorch = _COMPILER_IMPORTS[imported]
    lines = [
        f"{inductor}.coordinate_descent_tuning = True  # -> torch-compile",
        f"{inductor}.triton.unique_kernel_names = True  # -> torch-compile",
        f"{functorch}.enable_autograd_cache = True  # -> torch-compile",
        "config.coordinate_descent_tuning = True  # silent",
    ]
    body = "".join(f"{line}\n" for line in lines)
    source = (
        header
        + "config = object()\n"
        + _COMPILER_PLACES[place].format(
            body=body,
            indented="".join(f"    {line}\n" for line in lines),
            indented2="".join(f"        {line}\n" for line in lines),
        )
    )
    _marked(source)


@pytest.mark.parametrize(
    ("module", "helper"),
    [
        ("diffusers.utils.torch_utils", "is_compiled_module"),
        ("accelerate.utils", "is_compiled_module"),
        ("torchtune.training", "compile_model"),
    ],
)
def test_a_compiled_module_asked_for_or_made_by_a_library_is_torch_compile(
    module: str, helper: str
) -> None:
    source = (
        f"from {module} import {helper}\n"
        "from mypackage.utils import is_compiled\n"
        "def unwrap(model):\n"
        f"    flag = {helper}(model)  # -> torch-compile\n"
        "    other = is_compiled(model)  # silent\n"
        "    return flag, other\n"
    )
    _marked(source)


_UNWRAPS = {
    "an attribute": "raw = model._orig_mod  # -> torch-compile",
    "an attribute of self": "raw = self.model._orig_mod  # -> torch-compile",
    "a choice": "raw = model._orig_mod if compiled else model  # -> torch-compile",
    "getattr": 'raw = getattr(model, "_orig_mod", model)  # -> torch-compile',
    "hasattr": 'raw = hasattr(model, "_orig_mod")  # -> torch-compile',
    "a project's attribute": "raw = model.orig_mod  # silent",
    "another getattr": 'raw = getattr(model, "module", model)  # silent',
}


@pytest.mark.parametrize(
    ("spelling", "place"), list(itertools.product(_UNWRAPS, ["a function", "a method"]))
)
def test_torch_compiles_wrapper_unwrapped_is_torch_compile(spelling: str, place: str) -> None:
    line = _UNWRAPS[spelling]
    if place == "a method":
        body = f"class Trainer:\n    def unwrap(self, model, compiled):\n        {line}\n"
    else:
        body = f"def unwrap(self, model, compiled):\n    {line}\n"
    _marked("import torch\n" + body)


def test_deterministic_fill_of_uninitialised_memory_is_deterministic() -> None:
    source = (
        "import torch\n"
        "def set_determinism(debug):\n"
        "    torch.utils.deterministic.fill_uninitialized_memory = False  # -> deterministic\n"
        "    debug.fill_uninitialized_memory = False  # silent\n"
    )
    _marked(source)


# -- torch's private device-type calls and the device module they give ------------------------
_MODULE_HELPERS = {
    "returned in a tuple": (
        "from torch._utils import _get_available_device_type, _get_device_module\n"
        "def get_device_info():\n"
        '    device_type = _get_available_device_type() or "cuda"  # -> accelerator-current\n'
        "    device_module = _get_device_module(device_type)  # -> accelerator-current\n"
        "    return device_type, device_module\n"
        "device_type, device_module = get_device_info()\n"
    ),
    "returned in a tuple, long-hand": (
        "import torch\n"
        "def info():\n"
        "    kind = torch._utils._get_available_device_type()  # -> accelerator-current\n"
        "    return kind, torch._utils._get_device_module(kind)  # -> accelerator-current\n"
        "kind, device_module = info()\n"
    ),
    "imported from the project": "from torchtitan.tools.utils import device_module\n",
    "torch.get_device_module": (
        "import torch\ndevice_module = torch.get_device_module('cuda')  # -> accelerator-current\n"
    ),
}
_MODULE_USES = (
    "def local_device():\n"
    "    count = device_module.device_count()  # -> accelerator-device-count\n"
    "    device_module.synchronize()  # -> cuda-synchronize\n"
    "    name = device_module.get_device_properties().name  # -> cuda-device-properties\n"
    "    return count, name\n"
)


@pytest.mark.parametrize("spelling", _MODULE_HELPERS)
def test_torchs_device_module_by_type_and_its_calls(spelling: str) -> None:
    _marked(_MODULE_HELPERS[spelling] + _MODULE_USES)


@pytest.mark.parametrize(
    "twin",
    [
        "from mypackage.settings import device_manager as device_module_settings\n"
        "device_module = device_module_settings\n",
        "def info():\n    return 'cuda', {}\nkind, device_module = info()\n",
    ],
)
def test_a_project_object_in_the_device_modules_place_is_silent(twin: str) -> None:
    source = "import torch\n" + twin + _silenced(_MODULE_USES)
    check(source)


# -- pin_memory of an object holding a model's tensors -----------------------------------------
_EMA_MADE = {
    "Diffusers' EMAModel": (
        "from diffusers.training_utils import EMAModel\nema_unet = EMAModel(unet.parameters())\n"
    ),
    "a copy of the model": "import copy\nema_unet = copy.deepcopy(unet)\n",
}


@pytest.mark.parametrize("made", _EMA_MADE)
def test_pin_memory_of_an_object_holding_a_models_tensors(made: str) -> None:
    source = (
        "import torch\n"
        "unet = torch.nn.Linear(2, 2)\n" + _EMA_MADE[made] + "def offload(args, device):\n"
        "    if args.offload_ema:\n"
        "        ema_unet.pin_memory()  # -> tensor-pin-memory\n"
        "    else:\n"
        "        ema_unet.to(device)\n"
    )
    _marked(source)


def test_pin_memory_of_another_frameworks_object_is_silent() -> None:
    source = "import paddle\nnet = paddle.nn.Linear(2, 2)\nnet.pin_memory()  # silent\n"
    check(source)


# -- the legacy constructor x.new(data) -----------------------------------------------------
_NEW_RECEIVERS = {
    "an unknown value": "loss = compute(batch)\n",
    "a known tensor": "loss = torch.zeros(())\n",
}


@pytest.mark.parametrize("receiver", _NEW_RECEIVERS)
def test_legacy_new_with_values_is_a_new_tensor_like_another(receiver: str) -> None:
    source = (
        "import hashlib\n"
        "import torch\n"
        + _NEW_RECEIVERS[receiver]
        + "avg = reduce_tensor(loss.new([loss_avg]), world_size).item()  # -> tensor-new-factory\n"
        "digest = hashlib.new('md5')  # silent\n"
        "entry = registry.new('resnet')  # silent\n"
    )
    _marked(source)


# -- FSDP's own clip_grad_norm_ ------------------------------------------------------------
_FSDP_IMPORTS = {
    "the class": "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n",
    "the package": "from torch.distributed import fsdp\n",
    "a module of it": "from torch.distributed.fsdp import sharded_grad_scaler\n",
}


@pytest.mark.parametrize("imported", _FSDP_IMPORTS)
def test_fsdps_clip_grad_norm_method_is_dist_fsdp(imported: str) -> None:
    source = (
        "import torch\n"
        "from torch.nn.utils import clip_grad_norm_\n"
        + _FSDP_IMPORTS[imported]
        + "def step(model, engine, clip):\n"
        "    if engine == 'torch_ddp':\n"
        "        norm = clip_grad_norm_(model.parameters(), clip)\n"
        "    else:\n"
        "        norm = model.clip_grad_norm_(clip)  # -> dist-fsdp\n"
        "    return norm\n"
    )
    _marked(source)
    # without FSDP in the file, a project's model's own method
    check(_silenced(source.replace(_FSDP_IMPORTS[imported], "")))


# -- with autocast: a context chosen from a dict ----------------------------------------------
def test_a_context_named_autocast_entered_is_autocast() -> None:
    source = (
        "from contextlib import nullcontext\n"
        "import torch\n"
        "def forward(model, batch, engine, dtype):\n"
        "    amp_autocast = torch.cuda.amp.autocast\n"
        "    autocast = {\n"
        '        "deepspeed": amp_autocast(enabled=dtype is not None, dtype=dtype),\n'
        '        "torch_ddp": nullcontext(),\n'
        "    }[engine]\n"
        "    with autocast:  # -> autocast\n"
        "        out = model(batch)\n"
        "    ctx = {'a': nullcontext()}[engine]\n"
        "    with ctx:  # silent\n"
        "        out = model(out)\n"
        "    return out\n"
    )
    _marked(source)


# -- the launcher's variables checked in a loop over a list of their names ---------------------
@pytest.mark.parametrize("check_form", ["all", "any", "for"])
def test_launcher_variables_checked_over_a_list_are_dist_env(check_form: str) -> None:
    checked = {
        "all": "    return all(var in os.environ for var in required_vars)  # -> dist-env\n",
        "any": "    return any(var not in os.environ for var in required_vars)  # -> dist-env\n",
        "for": (
            "    for var in required_vars:\n"
            "        if var not in os.environ:  # -> dist-env\n"
            "            return False\n"
            "    return True\n"
        ),
    }[check_form]
    source = (
        "import os\n"
        "def is_torchrun():\n"
        '    required_vars = ["MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"]  # -> dist-env\n'
        + checked
    )
    _marked(source)
    twin = source.replace('"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"', '"APP_HOME"')
    check(_silenced(twin))


# -- ColossalAI: the Booster and its plugin, the coordinator, the seed ----------------------------
_COLOSSAL_IMPORTS = {
    "from the package": (
        "from colossalai.booster import Booster\n"
        "from colossalai.booster.plugin import LowLevelZeroPlugin\n"
        "from colossalai.utils import set_seed\n",
        "Booster",
        "LowLevelZeroPlugin",
        "set_seed",
    ),
    "module imported": (
        "import colossalai.booster as cb\nimport colossalai.booster.plugin as cp\n"
        "import colossalai.utils as cu\n",
        "cb.Booster",
        "cp.LowLevelZeroPlugin",
        "cu.set_seed",
    ),
}
_COLOSSAL_SCRIPT = (
    "def main(cfg, model, optimizer, dataloader, lr_scheduler, loss_fn, data_iter):\n"
    "    {seed}(cfg.get('seed', 1024))  # -> library-seed\n"
    "    if cfg.plugin == 'zero2':\n"
    "        plugin = {plugin_class}(stage=2)  # -> library-strategy\n"
    "    else:\n"
    "        plugin = create_colossalai_plugin(plugin=cfg.plugin)  # -> library-strategy\n"
    "    booster = {booster}(plugin=plugin)  # -> library-launcher\n"
    "    model, optimizer, _, dataloader, lr_scheduler = booster.boost(  # -> library-prepare\n"
    "        model=model, optimizer=optimizer, lr_scheduler=lr_scheduler, dataloader=dataloader\n"
    "    )\n"
    "    def run_iter(loss):\n"
    "        if cfg.pipeline:\n"
    "            out = booster.execute_pipeline(  # -> library-backward\n"
    "                data_iter, model, loss_fn, optimizer)\n"
    "            return out['loss']\n"
    "        with booster.no_sync(model, optimizer):  # -> library-backward\n"
    "            booster.backward(loss=loss, optimizer=optimizer)  # -> library-backward\n"
    "        booster.checkpoint_io.synchronize()  # -> library-checkpoint\n"
    "        booster.save_model(model, 'ckpt')  # -> library-checkpoint\n"
    "        return loss\n"
    "    return run_iter\n"
)


@pytest.mark.parametrize("imported", _COLOSSAL_IMPORTS)
def test_colossalais_booster_and_its_plugin(imported: str) -> None:
    header, booster, plugin_class, seed = _COLOSSAL_IMPORTS[imported]
    script = _COLOSSAL_SCRIPT.format(booster=booster, plugin_class=plugin_class, seed=seed)
    _marked(header + script)


def test_a_projects_booster_is_silent() -> None:
    # a class of the project's own named Booster (a gradient booster), and its plugin
    header = "from mypackage.boosting import Booster, LowLevelZeroPlugin, set_seed\n"
    script = _COLOSSAL_SCRIPT.format(
        booster="Booster", plugin_class="LowLevelZeroPlugin", seed="set_seed"
    )
    check(_silenced(header + script))


_COORDINATOR_IMPORTS = {
    "its module": "from colossalai.cluster.dist_coordinator import DistCoordinator\n",
    "the package": "from colossalai.cluster import DistCoordinator\n",
}


@pytest.mark.parametrize(
    ("imported", "annotation"),
    list(itertools.product(_COORDINATOR_IMPORTS, ["DistCoordinator | None", "DistCoordinator"])),
)
def test_colossalais_coordinator_kept_in_self(imported: str, annotation: str) -> None:
    source = (
        "import torch\n" + _COORDINATOR_IMPORTS[imported] + "class Timer:\n"
        f"    def __init__(self, name, coordinator: {annotation} = None, other=None):\n"
        "        self.coordinator = coordinator\n"
        "        self.other = other\n"
        "    def __exit__(self, *exc):\n"
        "        if self.coordinator is not None:\n"
        "            self.coordinator.block_all()  # -> library-collective\n"
        "        if self.other is not None:\n"
        "            self.other.block_all()  # silent\n"
        "def main():\n"
        "    coordinator = DistCoordinator()  # -> library-process\n"
        "    if coordinator.is_master():  # -> library-process\n"
        "        print('master')\n"
    )
    _marked(source)


# -- Hugging Face's save_pretrained -------------------------------------------------------------
_PRETRAINED_IMPORTS = {
    "Diffusers": "from diffusers import StableDiffusionPipeline\n",
    "Transformers": "import transformers\n",
    "PEFT": "from peft import get_peft_model\n",
}
_SAVES = (
    "def save(args, pipeline, ema_unet, models, tokenizer, output_dir):\n"
    "    pipeline.save_pretrained(args.output_dir)  # -> library-checkpoint\n"
    "    ema_unet.save_pretrained(os.path.join(output_dir, 'unet_ema'))  # -> library-checkpoint\n"
    "    for model in models:\n"
    "        model.save_pretrained(os.path.join(output_dir, 'unet'))  # -> library-checkpoint\n"
    "        model.config.save_pretrained(output_dir)  # silent\n"
    "    tokenizer.save_pretrained(output_dir)  # silent\n"
    "    pipeline.scheduler.save_pretrained(output_dir)  # silent\n"
)


@pytest.mark.parametrize("imported", _PRETRAINED_IMPORTS)
def test_save_pretrained_of_a_model_or_pipeline_is_library_checkpoint(imported: str) -> None:
    _marked("import os\n" + _PRETRAINED_IMPORTS[imported] + _SAVES)


def test_save_pretrained_without_hugging_faces_libraries_is_silent() -> None:
    check(_silenced("import os\nimport torch\n" + _SAVES))


# -- Accelerate: its save hooks, its DeepSpeed plugin's ZeRO-3 init context ------------------------
def test_accelerates_save_hooks_and_zero3_init_context() -> None:
    source = (
        "import accelerate\n"
        "from accelerate import Accelerator\n"
        "from accelerate.state import AcceleratorState\n"
        "accelerator = Accelerator()\n"
        "def zero_init_disabled():\n"
        "    plugin = AcceleratorState().deepspeed_plugin if accelerate.state.is_initialized() "
        "else None\n"
        "    if plugin is None:\n"
        "        return []\n"
        "    return [plugin.zero3_init_context_manager(enable=False)]  # -> library-strategy\n"
        "accelerator.register_save_state_pre_hook(save_model_hook)  # -> library-checkpoint\n"
        "accelerator.register_load_state_pre_hook(load_model_hook)  # -> library-checkpoint\n"
        "hooks.register_save_state_pre_hook(save_model_hook)  # silent\n"
    )
    _marked(source)
    # a project's objects of the same names: its registry's hooks, its own plugin
    twin = (
        "import torch\n"
        "def zero_init_disabled(plugin):\n"
        "    return [plugin.zero3_init_context_manager(enable=False)]  # silent\n"
        "registry.register_save_state_pre_hook(save_model_hook)  # silent\n"
    )
    check(twin)


# -- a Diffusers pipeline's offloading to host memory ------------------------------------------
@pytest.mark.parametrize(
    ("method", "made"),
    list(
        itertools.product(
            ["enable_model_cpu_offload()", "enable_sequential_cpu_offload(gpu_id=1)"],
            [
                "DiffusionPipeline.from_pretrained(name, torch_dtype=torch.float16)",
                "make_pipeline(args)",
            ],
        )
    ),
)
def test_a_pipelines_offloading_is_library_prepare(method: str, made: str) -> None:
    source = (
        "import torch\n"
        "from diffusers import DiffusionPipeline\n"
        "def load(name, args):\n"
        f"    pipe = {made}\n"
        f"    pipe.{method}  # -> library-prepare\n"
        "    return pipe\n"
    )
    _marked(source)
    # a project's pipeline in a file without Diffusers
    check(_silenced(source.replace("from diffusers import DiffusionPipeline", "import mylib")))


# -- DeepSpeed chosen by name, its options, estimates and offline conversion -------------------
_ENGINE_TESTS = {
    "a subscript": 'if info_dict["train_engine"] == "deepspeed":  # -> library-strategy',
    "an attribute": 'if args.train_engine == "deepspeed":  # -> library-strategy',
    "a name, not equal": 'if train_engine != "deepspeed":  # -> library-strategy',
    "a tuple": 'if engine in ("deepspeed", "deepspeed_stage_3"):  # -> library-strategy',
    "a stage name": 'if cfg.strategy_name == "deepspeed_stage_2":  # -> library-strategy',
    "torch's engines": 'if train_engine in ["torch_ddp", "torch_fsdp"]:  # silent',
}


@pytest.mark.parametrize(
    ("test", "imported"),
    list(itertools.product(_ENGINE_TESTS, ["import deepspeed", "from accelerate import state"])),
)
def test_deepspeed_chosen_by_name_is_library_strategy(test: str, imported: str) -> None:
    source = (
        f"{imported}\n"
        "def step(args, cfg, info_dict, train_engine, engine):\n"
        f"    {_ENGINE_TESTS[test]}\n"
        "        return 1\n"
        "    return 0\n"
    )
    _marked(source)
    check(_silenced(source.replace(f"{imported}\n", "import torch\n")))


def test_deepspeeds_options_estimates_and_conversion() -> None:
    source = (
        "import deepspeed\n"
        "from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs_all_live\n"
        "from deepspeed.runtime.zero.stage_1_and_2 import (\n"
        "    estimate_zero2_model_states_mem_needs_all_live,\n"
        ")\n"
        "from deepspeed.utils.zero_to_fp32 import convert_zero_checkpoint_to_fp32_state_dict\n"
        "def get_parser(parser):\n"
        "    parser = deepspeed.add_config_arguments(parser)  # -> library-launcher\n"
        "    parser = add_my_arguments(parser)  # silent\n"
        "    return parser\n"
        "def estimate(model, per_node, world_size):\n"
        "    estimate_zero2_model_states_mem_needs_all_live(  # -> library-strategy\n"
        "        model, num_gpus_per_node=per_node, num_nodes=world_size // per_node)\n"
        "    estimate_zero3_model_states_mem_needs_all_live(  # -> library-strategy\n"
        "        model, num_gpus_per_node=per_node, num_nodes=world_size // per_node)\n"
        "def save(model_dir, path, tag):\n"
        "    convert_zero_checkpoint_to_fp32_state_dict(  # -> library-checkpoint\n"
        "        model_dir, path, tag=tag)\n"
    )
    _marked(source)


# -- torchtune: memory statistics, activation offloading ---------------------------------------
@pytest.mark.parametrize("device", ["self._device", "device=self._device"])
def test_torchtunes_memory_stats_and_activation_offloading(device: str) -> None:
    source = (
        "from torchtune import training\n"
        "class Recipe:\n"
        "    def setup(self, model, enable_activation_offloading):\n"
        "        self.ctx = training.get_act_offloading_ctx_manager(  # -> library-strategy\n"
        "            model, enable_activation_offloading\n"
        "        )\n"
        "    def log(self, log_dict):\n"
        f"        log_dict.update(training.get_memory_stats({device}))  # -> library-device\n"
        "        log_dict.update(training.get_lr(self.optimizer))  # silent\n"
    )
    _marked(source)


# -- the libraries' functions by their qualified names: each spelling, and a project's twin -----
_LIBRARY_FUNCTIONS = [
    # (module, name, call arguments, row)
    ("colossalai", "launch_from_torch", "", "library-launcher"),
    ("colossalai.utils", "get_current_device", "", "library-device"),
    ("colossalai.checkpoint_io", "GeneralCheckpointIO", "", "library-checkpoint"),
    ("stable_baselines3.common.utils", "get_device", '"auto"', "library-device"),
    ("torchtune.training", "get_distributed_backend", "device_type", "library-launcher"),
    ("torchtune.training", "shard_model", "model, shard_conditions", "library-strategy"),
    ("torchtune.training", "prepare_mha_for_tp", "model, tp_mesh", "library-strategy"),
    ("torchtune.training", "cleanup_before_training", "", "library-device"),
    (
        "torchtune.training",
        "get_full_optimizer_state_dict",
        "model, optimizer",
        "library-checkpoint",
    ),
    ("deepspeed.utils", "safe_get_full_grad", "param", "library-collective"),
    ("deepspeed.runtime.utils", "set_random_seed", "seed", "library-seed"),
    ("deepspeed.pipe", "PipelineModule", "layers=layers, num_stages=2", "library-strategy"),
    ("diffusers.training_utils", "free_memory", "", "library-device"),
]


@pytest.mark.parametrize(
    ("entry", "spelling"),
    list(itertools.product(range(len(_LIBRARY_FUNCTIONS)), ["imported", "module", "alias"])),
)
def test_the_libraries_functions_by_name(entry: int, spelling: str) -> None:
    module, name, arguments, row = _LIBRARY_FUNCTIONS[entry]
    package, _, last = module.rpartition(".")
    head, called = {
        "imported": (f"from {module} import {name}\n", name),
        "module": (f"import {module}\n", f"{module}.{name}"),
        "alias": (
            f"from {package} import {last} as lib\n" if package else f"import {module} as lib\n",
            f"lib.{name}",
        ),
    }[spelling]
    source = (
        head
        + "from mypackage import helpers\n"
        + "def setup(model, opt, param, seed, layers, shard_conditions, tp_mesh, device_type):\n"
        + f"    value = {called}({arguments})  # -> {row}\n"
        + f"    other = helpers.{name}({arguments})  # silent\n"
        + "    return value, other\n"
    )
    _marked(source)
