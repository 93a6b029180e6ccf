"""``scan`` by class on round nine's held-out sets G and H (label9g, label9h: Chronos,
stable-dreamfusion, MiniCPM-V, MONAI, Open-Sora-Plan, PatchTST, Tacotron 2,
Time-Series-Library; AutoAWQ, AutoGPTQ, ColossalAI, gemma_pytorch, GPTQ, lighteval,
lingua, llm-awq, Optimum, SmoothQuant, TransformerEngine, trlx), measured blind at round
nine's end and then fixed against as the next round's development set: each class's
spellings, crossed with the places a script writes them, and its twin without device
meaning that stays silent.

The torch classes: other accelerators' plugins imported (``import torch_npu`` unguarded, ``from
torch_npu.contrib import transfer_to_npu``); a device mesh's ``mesh_dim_names`` read; a
loader's sampler told the epoch (``loader.sampler.set_epoch(e)``); a GradScaler's
``_get_scale_async()``; a device named as an absl flag's default
(``flags.DEFINE_string("device", "cpu", help)``).

The library classes: Accelerate's big-model hooks (``cpu_offload_with_hook``,
``AlignDevicesHook``, ``get_balanced_memory``, ``load_checkpoint_in_model``); ColossalAI's
Booster and plugin through the receivers a script keeps them in (a name, ``self.booster``,
``self.booster`` a base class of the file made), a plugin's options and loader, a boosted
model unwrapped; Transformers' Trainer internals in a subclass (``self._prepare_inputs``,
``self.compute_loss_context_manager()``) and the names ``from transformers.trainer import
*`` brings in (``unwrap_model``, ``smp_forward_backward``, ``is_sagemaker_mp_enabled``,
apex's ``amp``, ``safetensors``); PyTorch-Ignite's ``idist``, imported or through MONAI's
``optional_import``; Diffusers' ``EMAModel.from_pretrained``.

Each line that a class covers is marked in its snippet with ``# -> rule``, each twin with
``# silent`` (``tests/cli/test_scan_round7b_classes.py``'s marks).
"""

from __future__ import annotations

import itertools

import pytest

from tests.cli.test_scan_round7b_classes import advice_only, check
from tests.cli.test_scan_round7b_classes import marked as _marked
from tests.cli.test_scan_round7b_classes import silenced as _silenced

# -- Accelerate's big-model hooks -----------------------------------------------------------------
# name -> (the modules that export it, its row, a call of it)
_BIG_MODEL = {
    "cpu_offload_with_hook": (
        ("accelerate", "accelerate.hooks"),
        "library-to-device",
        "_, hook = {f}(module, execution_device=0, prev_module_hook=hook){mark}",
    ),
    "AlignDevicesHook": (
        ("accelerate.hooks",),
        "library-to-device",
        "hook = {f}(d, io_same_device=True, place_submodules=True){mark}",
    ),
    "get_balanced_memory": (
        ("accelerate.utils", "accelerate.utils.modeling"),
        "library-device",
        "max_memory = {f}({mark}\n        model, dtype=torch.float16, low_zero=False\n    )",
    ),
    "load_checkpoint_in_model": (
        ("accelerate", "accelerate.utils", "accelerate.utils.modeling"),
        "library-checkpoint",
        "{f}({mark}\n        model, checkpoint=path, offload_state_dict=True\n    )",
    ),
}
_SPELLINGS = ("from-import", "module attribute")


@pytest.mark.parametrize(
    ("name", "module", "spelling"),
    [
        (name, module, spelling)
        for name, (modules, _, _) in _BIG_MODEL.items()
        for module, spelling in itertools.product(modules, _SPELLINGS)
    ],
)
def test_accelerates_big_model_hooks_are_their_rows(name: str, module: str, spelling: str) -> None:
    _, rule, call = _BIG_MODEL[name]
    if spelling == "from-import":
        imported, func = f"from {module} import {name}\n", name
    else:
        imported, func = f"import {module}\n", f"{module}.{name}"
    source = (
        f"import torch\n{imported}"
        "def place(model, module, d, path, device_map, hook=None):\n"
        f"    {call.format(f=func, mark=f'  # -> {rule}')}\n"
    )
    _marked(source)
    # a project's own function of the same name
    twin = f"import torch\ndef {name}(*args, **kwargs):\n    return None\n" + source.split(
        imported, 1
    )[1].replace(func, name)
    check(_silenced(twin))


# -- ColossalAI: the Booster's members through a receiver, a plugin's options and loader ---------
_COLOSSAL_IMPORTS = (
    "from colossalai.booster import Booster\n"
    "from colossalai.booster.plugin import HybridParallelPlugin\n"
    "from colossalai.initialize import launch\n"
)
_COLOSSAL_USES = (
    "        {model}, {optimizer}, *_ = {booster}.boost(  # -> library-prepare\n"
    "            {model}, {optimizer}\n"
    "        )\n"
    "        ctx = {booster}.no_sync({model}, {optimizer})  # -> library-backward\n"
    "        {booster}.backward(loss, {optimizer})  # -> library-backward\n"
    "        unwrapped = {model}.unwrap()  # -> library-prepare\n"
    "        loader = {plugin}.prepare_dataloader(ds, batch_size=2)  # -> library-prepare\n"
)
_SELF_RECEIVERS = {
    "model": "self.model",
    "optimizer": "self.opt",
    "booster": "self.booster",
    "plugin": "self.plugin",
}
# where the booster and plugin are made -> (the class statements before the uses, receivers)
_COLOSSAL_PLACES = {
    "names in the method": (
        "class Consumer:\n"
        "    def step(self, ds, loss, model, optimizer):\n"
        "        plugin = HybridParallelPlugin(tp_size=1)  # -> library-strategy\n"
        "        booster = Booster(plugin=plugin)  # -> library-launcher\n",
        {"model": "model", "optimizer": "optimizer", "booster": "booster", "plugin": "plugin"},
    ),
    "attributes of the class": (
        "class Consumer:\n"
        "    def setup(self):\n"
        "        launch(self.rank, self.world_size, 'h', 29500)  # -> library-launcher\n"
        "        self.plugin = HybridParallelPlugin(tp_size=1)  # -> library-strategy\n"
        "        self.booster = Booster(plugin=self.plugin)  # -> library-launcher\n"
        "    def step(self, ds, loss):\n",
        _SELF_RECEIVERS,
    ),
    "attributes a base class of the file made": (
        "class Base:\n"
        "    def setup(self):\n"
        "        self.plugin = HybridParallelPlugin(tp_size=1)  # -> library-strategy\n"
        "        self.booster = Booster(plugin=self.plugin)  # -> library-launcher\n"
        "class Consumer(Base):\n"
        "    def step(self, ds, loss):\n",
        _SELF_RECEIVERS,
    ),
}


@pytest.mark.parametrize("place", _COLOSSAL_PLACES)
def test_colossalais_booster_and_plugin_through_their_receivers(place: str) -> None:
    made, receivers = _COLOSSAL_PLACES[place]
    source = _COLOSSAL_IMPORTS + made + _COLOSSAL_USES.format(**receivers)
    _marked(source)
    # a project's own booster and plugin: no ColossalAI class made them
    own = "class Booster:\n    def __init__(self, plugin=None):\n        pass\n" + (
        "class HybridParallelPlugin:\n    def __init__(self, tp_size=1):\n        pass\n"
    )
    twin = (
        "def launch(*args, **kwargs):\n    pass\n" + own + made + _COLOSSAL_USES.format(**receivers)
    )
    check(_silenced(twin))


_PLUGIN_OPTIONS = {
    "given to the plugin": (
        "plugin = HybridParallelPlugin(  # -> library-strategy\n"
        "    tp_size=2,\n"
        "    zero_stage=1,\n"
        "    cpu_offload=True,  # -> library-strategy\n"
        ")\n"
    ),
    "a dict splatted into it": (
        "config = dict(tp_size=1, pp_size=1, zero_stage=2)  # -> library-strategy\n"
        'config["microbatch_size"] = 4\n'
        "plugin = HybridParallelPlugin(**config)  # -> library-strategy\n"
    ),
}


@pytest.mark.parametrize("options", _PLUGIN_OPTIONS)
def test_a_colossalai_plugins_options(options: str) -> None:
    source = (
        "from colossalai.booster.plugin import HybridParallelPlugin\n" + _PLUGIN_OPTIONS[options]
    )
    _marked(source)
    twin = source.replace(
        "from colossalai.booster.plugin import HybridParallelPlugin\n",
        "def HybridParallelPlugin(**kwargs):\n    return kwargs\n",
    )
    check(_silenced(twin))


# -- Transformers' Trainer internals in a subclass, its star import's names -----------------------
_TRAINER_STEP = (
    "class StepTrainer(Trainer):\n"
    "    def training_step(self, model, inputs):\n"
    "        inputs = self._prepare_inputs(inputs)  # -> library-to-device\n"
    "        if is_sagemaker_mp_enabled():  # -> library-strategy\n"
    "            loss_mb = smp_forward_backward(model, inputs, 1)  # -> library-backward\n"
    "            return loss_mb\n"
    "        with self.compute_loss_context_manager():  # -> library-backward\n"
    "            loss = self.compute_loss(model, inputs)\n"
    "        with amp.scale_loss(loss, self.optimizer) as scaled_loss:  # -> autocast\n"
    "            scaled_loss.backward()\n"
    "        return loss\n"
    "    def _save(self, output_dir, state_dict=None):\n"
    "        if isinstance(unwrap_model(self.model), PreTrainedModel):  # -> library-prepare\n"
    "            return\n"
    "        safetensors.torch.save_file(state_dict, output_dir)  # -> save-safetensors\n"
)
_TRAINER_IMPORTS = {
    "the Trainer module's star import": (
        "from transformers import Trainer, PreTrainedModel\nfrom transformers.trainer import *\n"
    ),
    "each imported by name": (
        "import safetensors.torch\n"
        "from apex import amp\n"
        "from transformers import Trainer, PreTrainedModel\n"
        "from transformers.modeling_utils import unwrap_model\n"
        "from transformers.trainer_pt_utils import smp_forward_backward\n"
        "from transformers.utils import is_sagemaker_mp_enabled\n"
    ),
}


@pytest.mark.parametrize("imports", _TRAINER_IMPORTS)
def test_a_trainer_subclasss_internals_and_its_star_imports_names(imports: str) -> None:
    source = _TRAINER_IMPORTS[imports] + _TRAINER_STEP
    check(source)
    # the save through safetensors is rewritten (tj.save_file); the rest is advice
    advice_only(source.rsplit("        safetensors", 1)[0])
    # a project's own trainer and helpers of the same names, no Transformers in the file
    own = (
        "class Trainer:\n    pass\n"
        "class PreTrainedModel:\n    pass\n"
        "def is_sagemaker_mp_enabled():\n    return False\n"
        "def smp_forward_backward(*args):\n    return None\n"
        "def unwrap_model(model):\n    return model\n"
        "amp = safetensors = None\n"
    )
    check(_silenced(own + _TRAINER_STEP))


# -- PyTorch-Ignite's idist, imported or through MONAI's optional_import --------------------------
_IDIST_IMPORTS = {
    "imported": "import ignite.distributed as idist\n",
    "MONAI's optional_import": (
        "from monai.utils import min_version, optional_import\n"
        'idist, has_ignite = optional_import("ignite", "0.4.11", min_version, "distributed")\n'
    ),
    "optional_import's name=": (
        "from monai.utils import optional_import\n"
        'idist, _ = optional_import("ignite", name="distributed")\n'
    ),
}
_IDIST_CALLS = {
    "all_gather": "library-collective",
    "all_reduce": "library-collective",
    "broadcast": "library-collective",
    "barrier": "library-collective",
    "get_rank": "library-process",
    "get_local_rank": "library-process",
    "get_world_size": "library-process",
    "get_nproc_per_node": "library-process",
    "get_nnodes": "library-process",
    "get_node_rank": "library-process",
}


@pytest.mark.parametrize(
    ("imported", "name"), list(itertools.product(_IDIST_IMPORTS, _IDIST_CALLS))
)
def test_ignites_idist_functions_are_their_rows(imported: str, name: str) -> None:
    call = (
        f"idist.{name}(data)" if _IDIST_CALLS[name] == "library-collective" else f"idist.{name}()"
    )
    body = (
        "def evenly(data):\n"
        f"    if {call} is None:  # -> {_IDIST_CALLS[name]}\n"
        "        return data\n"
    )
    source = _IDIST_IMPORTS[imported] + body
    _marked(source)
    # another package's module by MONAI's guarded import, a project's own idist
    # (a project's module named distributed re-exports torch's: its helpers are not that)
    other = (
        _IDIST_IMPORTS[imported]
        .replace('"ignite"', '"mypackage"')
        .replace('"distributed"', '"helpers"')
        .replace("ignite.distributed", "mypackage.helpers")
    )
    check(_silenced(other + body))


# -- other accelerators' torch plugins imported ---------------------------------------------------
_PLUGIN_NAMES = ("torch_npu", "torch_mlu", "torch_musa", "habana_frameworks.torch.core")


@pytest.mark.parametrize("plugin", _PLUGIN_NAMES)
def test_an_accelerators_plugin_imported_unguarded_or_patching_cuda(plugin: str) -> None:
    source = (
        "import torch\n"
        "try:\n"
        f"    import {plugin}  # silent\n"
        "    from torch_npu.contrib import transfer_to_npu  # -> xpu-npu-other\n"
        "    available = True\n"
        "except ImportError:\n"
        "    available = False\n"
        "def run():\n"
        f"    import {plugin} as plugin  # -> xpu-npu-other\n"
    )
    _marked(source)
    # a project's module of a similar name, another name from the plugin's package
    twin = source.replace(f"import {plugin}", f"import my_{plugin.replace('.', '_')}").replace(
        "import transfer_to_npu", "import other_helper"
    )
    check(_silenced(twin))


# -- a device mesh's dimension names read ---------------------------------------------------------
_MESHES = {
    "a parameter named as a mesh": ("def ranks(device_mesh):\n", "device_mesh"),
    "a mesh built": (
        "def ranks():\n"
        '    mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("dp", "tp"))'
        "  # -> dist-device-mesh\n",
        "mesh",
    ),
    "a mesh kept in an attribute": ("def ranks(self):\n", "self.world_mesh"),
}
_NAMES_READ = (
    '    if "tp" in {mesh}.mesh_dim_names:  # -> dist-mesh-queries\n'
    "        pass\n"
    "    names = list({mesh}.mesh_dim_names)  # -> dist-mesh-queries\n"
)


@pytest.mark.parametrize("mesh", _MESHES)
def test_a_device_meshs_dimension_names_read(mesh: str) -> None:
    header, receiver = _MESHES[mesh]
    source = (
        "from torch.distributed.device_mesh import init_device_mesh\n"
        + header
        + _NAMES_READ.format(mesh=receiver)
    )
    _marked(source)
    # a config's field of the same name is no mesh
    twin = "def ranks(cfg):\n" + _NAMES_READ.format(mesh="cfg")
    check(_silenced(twin))


# -- a loader's sampler told the epoch; a GradScaler's private scale; an absl flag's default ------
@pytest.mark.parametrize(
    "loader", ["loader", "self.train_loader", "loaders['train']", "get_loader()"]
)
@pytest.mark.parametrize("sampler", ["sampler", "batch_sampler"])
def test_a_loaders_sampler_told_the_epoch(loader: str, sampler: str) -> None:
    source = (
        "import torch\n"
        "def epoch(self, loader, loaders, get_loader, e):\n"
        f"    {loader}.{sampler}.set_epoch(e)  # -> dist-sampler-global-batch\n"
    )
    _marked(source)
    # the loader's own method of the name (a project's), another method of the sampler
    check(_silenced(source.replace(f".{sampler}.set_epoch", ".set_epoch")))
    check(_silenced(source.replace(".set_epoch", ".reset")))


@pytest.mark.parametrize("scaler", ["self.scaler", "scaler", "self.grad_scaler"])
def test_a_grad_scalers_scale_read_asynchronously(scaler: str) -> None:
    source = (
        "import torch\n"
        "def clip(self, scaler, grad):\n"
        f"    scale = {scaler}._get_scale_async()  # -> grad-scaler\n"
        "    return grad * scale\n"
    )
    _marked(source)
    check(_silenced(source.replace(scaler + ".", "self.normaliser.")))


@pytest.mark.parametrize("define", ["DEFINE_string", "DEFINE_enum"])
@pytest.mark.parametrize("name", ["cpu", "cuda", "cuda:0", "xla"])
def test_a_device_as_an_absl_flags_default(define: str, name: str) -> None:
    source = (
        "import torch\n"
        "from absl import flags\n"
        f"flags.{define}('device', '{name}', 'Device to run the model on.')  # -> device-string\n"
    )
    _marked(source)
    check(_silenced(source.replace(f"'{name}'", "'bf16'")))  # another flag's default


# -- Diffusers' EMA copy of a model loaded ---------------------------------------------------------
@pytest.mark.parametrize(
    "imported",
    [
        ("from diffusers.training_utils import EMAModel\n", "EMAModel"),
        ("import diffusers\n", "diffusers.training_utils.EMAModel"),
    ],
)
def test_a_diffusers_ema_model_loaded(imported: tuple[str, str]) -> None:
    header, ema = imported
    source = (
        "import torch\n" + header + "def resume(input_dir, model_cls):\n"
        f"    load_model = {ema}.from_pretrained(  # -> library-checkpoint\n"
        '        os.path.join(input_dir, "model_ema"), model_cls\n'
        "    )\n"
    )
    _marked(source)
    # a project's own EMA class of the same name
    own = "import torch\nclass EMAModel:\n    @classmethod\n    def from_pretrained(cls, *a):\n"
    check(
        _silenced(
            own + "        return cls()\n" + source.split(header, 1)[1].replace(ema, "EMAModel")
        )
    )
