"""``scan`` by class on round nine's held-out sets G and H (label9g, label9h: Chronos,
stable-dreamfusion, MiniCPM-V, MONAI, Open-Sora-Plan, PatchTST, Tacotron 2,
Time-Series-Library; AutoAWQ, AutoGPTQ, ColossalAI, gemma_pytorch, GPTQ, lighteval,
lingua, llm-awq, Optimum, SmoothQuant, TransformerEngine, trlx), measured blind at round
nine's end and then fixed against as the next round's development set: each class's
spellings, crossed with the places a script writes them, and its twin without device
meaning that stays silent.

The library classes: Accelerate's big-model hooks (``cpu_offload_with_hook``,
``AlignDevicesHook``, ``get_balanced_memory``, ``load_checkpoint_in_model``).

Each line that a class covers is marked in its snippet with ``# -> rule``, each twin with
``# silent`` (``tests/cli/test_scan_round7b_classes.py``'s marks).
"""

from __future__ import annotations

import itertools
import re

import pytest

from tests.cli.test_scan_round7b_classes import advice_only, check


def _marked(source: str) -> None:
    check(source)
    advice_only(source)


def _silenced(source: str) -> str:
    """``source`` with every mark made ``# silent``."""
    return re.sub(r"#\s*->\s*[\w-]+\s*$", "# silent", source, flags=re.MULTILINE)


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
