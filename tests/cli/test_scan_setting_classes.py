"""``scan`` by class on what a script hands the libraries built on torch, and on devices
kept in settings: a table of shapes x spellings per class, each with its negative twin.

Round six's second development set (label6b: Composer and llm-foundry, Lightning's and
NeMo's scripts, Accelerate's memory maps in lm-eval and FastChat, Megatron's RNG
tracker, OLMo, speechbrain, minGPT) missed library lines by the dozen where the idiom
was one spelling away from a row: Composer's ``dist`` (a torch.distributed twin, as
DeepSpeed's ``deepspeed.comm`` is), a launcher's ``devices=``/``accelerator=`` chosen in
names or kept in a dict or config named for the trainer, a strategy class named in a
config string, budgets from ``get_max_memory()`` trimmed before ``max_memory=``, a
trainer run resumed from a checkpoint; and torch lines where a device was kept under a
longer name (``config.init_device = "cpu"``), as a type (``self.device_type =
"cuda"``), listed, or given its index by ``+=``.
"""

from __future__ import annotations

import itertools

import pytest

from tests.support.cli import scan_text
from torch2jax_device.porting import catalog
from torch2jax_device.porting._recognise.device_strings import DEVICE_TYPES


def rules_on(source: str, line: int) -> set[str]:
    return {f.rule for f in scan_text(source) if f.line == line}


def lines_of(source: str) -> set[int]:
    return {f.line for f in scan_text(source)}


# -- a library's torch.distributed twin: every twin x import spelling x function ------------
_TWINS = ("deepspeed.comm", "composer.utils.dist")
_TWIN_FUNCTIONS = {
    "get_global_rank()": "library-process",
    "get_rank()": "library-process",
    "get_local_rank()": "library-process",
    "get_world_size()": "library-process",
    "get_local_world_size()": "library-process",
    "get_node_rank()": "library-process",
    "barrier()": "library-collective",
    "all_reduce(t)": "library-collective",
    "broadcast_object_list(objs, src=0)": "library-collective",
    "all_gather_object(objs, obj)": "library-collective",
}


def _twin_imports(twin: str, function: str) -> dict[str, tuple[str, str]]:
    parent, leaf = twin.rsplit(".", 1)
    name = function.split("(")[0]
    return {
        "from parent import leaf": (f"from {parent} import {leaf}", f"{leaf}.{function}"),
        "import as dist": (f"import {twin} as dist", f"dist.{function}"),
        "from twin import function": (f"from {twin} import {name}", function),
    }


@pytest.mark.parametrize(
    ("twin", "function", "spelling"),
    list(
        itertools.product(
            _TWINS,
            _TWIN_FUNCTIONS,
            ("from parent import leaf", "import as dist", "from twin import function"),
        )
    ),
    ids=str,
)
def test_a_librarys_torch_distributed_twin_is_reported_by_what_each_call_does(
    twin: str, function: str, spelling: str
) -> None:
    imports, call = _twin_imports(twin, function)[spelling]
    source = f"{imports}\ndef f(t, objs, obj):\n    x = {call}\n"
    assert rules_on(source, 3) == {_TWIN_FUNCTIONS[function]}, source


@pytest.mark.parametrize("twin", _TWINS)
def test_a_twins_launcher_joins_and_another_module_named_dist_is_not_a_twin(twin: str) -> None:
    launcher = "init_distributed" if twin.startswith("deepspeed") else "initialize_dist"
    source = f"import {twin} as dist\ndist.{launcher}(timeout=60)\n"
    assert rules_on(source, 2) == {"library-launcher"}
    assert lines_of("from mylib import dist\nr = dist.get_global_rank()\ndist.barrier()\n") == set()


# -- a launcher's keywords x how the value reaches the call ------------------------------------
_LAUNCHERS = {
    "Lightning pl.Trainer": ("import pytorch_lightning as pl", "pl.Trainer"),
    "Lightning's trainer module": ("from pytorch_lightning.trainer import Trainer", "Trainer"),
    "lightning.pytorch": ("from lightning.pytorch import Trainer", "Trainer"),
    "Composer": ("from composer import Trainer", "Trainer"),
    "Fabric": ("from lightning.fabric import Fabric", "Fabric"),
}
_KEYWORDS = {
    "accelerator": ('"gpu"', "library-launcher"),
    "devices": ("[0]", "library-launcher"),
    "precision": ('"bf16-mixed"', "library-launcher"),
    "num_nodes": ("2", "library-launcher"),
    "strategy": ('"ddp"', "library-strategy"),
    "parallelism_config": ('{"fsdp": fsdp_config}', "library-strategy"),
}


def _handed(way: str, launcher: str, key: str, value: str) -> tuple[str, int]:
    """(source, the line the setting is written on) for ``way`` of handing it over."""
    body = {
        "its own line of the call": [
            f"x = {launcher}(",
            "    max_epochs=1,",
            f"    {key}={value},",
            ")",
        ],
        "a name chosen in branches": [
            "if cuda:",
            f"    chosen = {value}",
            "else:",
            "    chosen = None",
            f"x = {launcher}({key}=chosen, max_epochs=1)",
        ],
        "a key set in a splatted dict": [
            "kw = dict()",
            f"kw[{key!r}] = {value}",
            f"x = {launcher}(max_epochs=1, **kw)",
        ],
        "a splatted dict literal": [
            "kw = {",
            f"    {key!r}: {value},",
            "}",
            f"x = {launcher}(**kw)",
        ],
    }[way]
    where = {
        "its own line of the call": 3,
        "a name chosen in branches": 2,
        "a key set in a splatted dict": 2,
        "a splatted dict literal": 2,
    }[way]
    lines = ["def build(cuda, fsdp_config):", *(f"    {line}" for line in body)]
    return "\n".join(lines) + "\n", where + 1


_WAYS = (
    "its own line of the call",
    "a name chosen in branches",
    "a key set in a splatted dict",
    "a splatted dict literal",
)


@pytest.mark.parametrize(
    ("launcher", "key", "way"), list(itertools.product(_LAUNCHERS, _KEYWORDS, _WAYS)), ids=str
)
def test_a_launchers_device_keyword_is_found_where_it_is_written(
    launcher: str, key: str, way: str
) -> None:
    imports, called = _LAUNCHERS[launcher]
    value, row = _KEYWORDS[key]
    source, line = _handed(way, called, key, value)
    source = f"{imports}\n{source}"
    assert row in rules_on(source, line + 1), source


@pytest.mark.parametrize("way", _WAYS)
def test_the_same_keywords_for_a_class_of_no_library_are_no_finding(way: str) -> None:
    for key, (value, _) in _KEYWORDS.items():
        source, _line = _handed(way, "Runner", key, value)
        source = f"class Runner:\n    def __init__(self, **kw):\n        pass\n{source}"
        assert lines_of(source) == set(), source
    source, _line = _handed(way, "pl.Trainer", "max_epochs", "3")  # no placement keyword
    found = scan_text(f"import pytorch_lightning as pl\n{source}")
    assert [f.rule for f in found] == ["library-launcher"], source  # the Trainer alone


# -- a launcher keyword kept in a config named for the trainer ---------------------------------
_CONTAINERS = ("trainer_config", "trainer_kwargs", "self.trainer_opt")
_USES = {
    "set": "{c}[{k!r}] = value",
    "read": "x = {c}[{k!r}]",
    "deleted": "del {c}[{k!r}]",
}


@pytest.mark.parametrize(
    ("container", "key", "use"), list(itertools.product(_CONTAINERS, _KEYWORDS, _USES)), ids=str
)
def test_a_launcher_keyword_kept_in_a_config_named_for_the_trainer(
    container: str, key: str, use: str
) -> None:
    statement = _USES[use].format(c=container, k=key)
    source = f"def f(self, value):\n    {statement}\n"
    assert _KEYWORDS[key][1] in rules_on(source, 2), source
    for other in ("model_config", "data_kwargs", "self.trainer"):  # not a trainer's settings
        assert lines_of(source.replace(container, other)) == set(), other


@pytest.mark.parametrize("config", ("lightning_config", "cfg", "opt", "args"))
def test_a_configs_trainer_section_read_for_its_devices(config: str) -> None:
    source = f"def f({config}):\n    n = len({config}.trainer.devices.split(','))\n"
    assert rules_on(source, 2) == {"library-launcher"}
    assert lines_of(source.replace(".trainer.", ".data.")) == set()


# -- a library class named in a string a config instantiates ------------------------------------
_NAMED = sorted(
    (name, row.id)
    for row in catalog.CATALOG
    if row.section == "Libraries built on torch"
    for name in row.torch_api
    if "." in name and name.split(".")[0].islower() and name.rsplit(".", 1)[-1][:1].isupper()
)


@pytest.mark.parametrize(("name", "row"), _NAMED, ids=str)
def test_a_library_class_named_in_a_config_string(name: str, row: str) -> None:
    source = f'config = {{"target": "{name}", "params": {{}}}}\n'
    assert rules_on(source, 1) == {row}
    assert lines_of(source.replace(name, f"myproject.{name.rsplit('.', 1)[-1]}")) == set()


# -- budgets for max_memory= built and trimmed before they are handed over -----------------------
_BUDGET_SOURCES = {
    "get_max_memory()": (
        ["from accelerate.utils import get_max_memory"],
        "budgets = get_max_memory()",
    ),
    "accelerate.utils.get_max_memory()": (
        ["import accelerate"],
        "budgets = accelerate.utils.get_max_memory()",
    ),
    "a dict handed as max_memory=": (
        ["from transformers import AutoModel"],
        "budgets = {0: '20GiB'}",
    ),
    "a dict set as kwargs['max_memory']": ([], "budgets = {0: '20GiB'}"),
    "a dict copied into one handed over": ([], "budgets = {0: '20GiB'}"),
}
_HANDED = {
    "get_max_memory()": "",
    "accelerate.utils.get_max_memory()": "",
    "a dict handed as max_memory=": "m = AutoModel.from_pretrained(name, max_memory=budgets)",
    "a dict set as kwargs['max_memory']": "kwargs['max_memory'] = budgets",
    "a dict copied into one handed over": "copied = dict(budgets)\nkwargs['max_memory'] = copied",
}
_TRIMS = {
    "del": 'del budgets["cpu"]',
    "pop": 'budgets.pop("cpu", None)',
    "set": 'budgets["cpu"] = "64GiB"',
    "update": 'budgets.update({"cpu": "64GiB"})',
}


@pytest.mark.parametrize(
    ("source_kind", "trim"), list(itertools.product(_BUDGET_SOURCES, _TRIMS)), ids=str
)
def test_budgets_trimmed_before_max_memory_takes_them(source_kind: str, trim: str) -> None:
    imports, made = _BUDGET_SOURCES[source_kind]
    handed = _HANDED[source_kind].splitlines()
    lines = [*imports, "def load(name, kwargs):", f"    {made}", f"    {_TRIMS[trim]}"]
    lines += [f"    {line}" for line in handed]
    source = "\n".join(lines) + "\n"
    trim_line = len(imports) + 3
    assert "library-device" in rules_on(source, trim_line), source
    unhanded = "\n".join(
        [*imports, "def load(name, kwargs):", "    budgets = {0: 1}", f"    {_TRIMS[trim]}"]
    )
    assert lines_of(unhanded + "\n") == set(), unhanded


def test_a_budget_map_built_for_max_memory_and_nested_budgets() -> None:
    source = (
        "def load(per_gpu, gpus, kwargs):\n"
        "    per_device = {\n"
        "        i: per_gpu for i in range(gpus)\n"
        "    }\n"
        "    kwargs['max_memory'] = dict(per_device)\n"
        "    kwargs['max_memory']['cpu'] = '64GiB'\n"
    )
    assert "library-device" in rules_on(source, 3)
    assert "library-device" in rules_on(source, 6)


# -- a trainer's run resumed from a checkpoint -------------------------------------------------
_RESUMED = {
    "transformers": (
        "from transformers import Trainer",
        "Trainer(model=m, args=a)",
        "train",
        "resume_from_checkpoint=True",
    ),
    "lightning": (
        "import lightning.pytorch as pl",
        "pl.Trainer(devices=1)",
        "fit",
        "ckpt_path=path",
    ),
    "composer": ("from composer import Trainer", "Trainer(model=m)", "fit", "ckpt_path=path"),
}


@pytest.mark.parametrize("library", _RESUMED)
def test_a_trainers_run_resumed_from_a_checkpoint(library: str) -> None:
    imports, built, run, keyword = _RESUMED[library]
    source = (
        f"{imports}\ndef go(m, a, data, path):\n"
        f"    trainer = {built}\n    trainer.{run}(data, {keyword})\n"
    )
    assert "library-checkpoint" in rules_on(source, 4), source
    assert "library-checkpoint" not in rules_on(source.replace(f", {keyword}", ""), 4)
    plain = f"def go(runner, data, path):\n    runner.{run}(data, {keyword})\n"
    assert lines_of(plain) == set()


def test_the_engine_a_transformers_trainer_wraps_and_the_models_parallel_flags() -> None:
    source = (
        "from transformers import Trainer\n"
        "def go(model, args):\n"
        "    model.is_parallelizable = True\n"
        "    model.model_parallel = True\n"
        "    trainer = Trainer(model=model, args=args)\n"
        "    sd = trainer.model_wrapped._zero3_consolidated_16bit_state_dict()\n"
    )
    assert rules_on(source, 3) == rules_on(source, 4) == {"library-strategy"}
    assert rules_on(source, 6) == {"library-checkpoint"}
    own = "class GPT2:\n    def __init__(self):\n        self.model_parallel = False\n"
    assert lines_of(own) == set()


# -- devices kept in settings: target x value ----------------------------------------------------
_SETTINGS = (
    "config.init_device",
    "cfg.model.init_device",
    "args.target_device",
    "self.device",
    "C.device",
)
_VALUES = ('"cpu"', '"cuda:1"', '"mps"', '"auto"')


@pytest.mark.parametrize(("target", "value"), list(itertools.product(_SETTINGS, _VALUES)), ids=str)
def test_a_device_kept_in_a_setting(target: str, value: str) -> None:
    source = f"def f(self, config, cfg, args, C):\n    {target} = {value}\n"
    assert rules_on(source, 2) == {"device-string"}, source
    assert lines_of(source.replace(value, '"train"')) == set()


@pytest.mark.parametrize("value", sorted(DEVICE_TYPES))
def test_a_device_type_kept_in_a_setting(value: str) -> None:
    for target in ("self.device_type", "device_type", "self._device_type"):
        source = f"def f(self):\n    {target} = {value!r}\n"
        assert rules_on(source, 2) == {"device-string"}, source
    assert lines_of(f"def f(self):\n    self.loss_type = {value!r}\n") == set()


@pytest.mark.parametrize(
    ("statement", "found"),
    [
        ("self.device = config.device", True),  # a config's device handed to an object
        ("config.init_device = device", True),  # a device handed into a config
        ("cfg.model.params.init_device = args.device", True),
        ("self.device = device", False),  # a name kept: the value is reported where it is made
        ("device = args.device", False),
        ("device = self._device", False),
        ("self.device = self.device", False),
    ],
)
def test_a_device_handed_from_one_setting_to_another(statement: str, found: bool) -> None:
    source = f"def f(self, config, cfg, args, device):\n    {statement}\n"
    assert (rules_on(source, 2) == {"device-string"}) is found, source


@pytest.mark.parametrize("setting", ("config.device", "self.device", "args.device"))
def test_the_auto_device_tested(setting: str) -> None:
    source = f"def f(self, config, args):\n    if {setting} == 'auto':\n        pass\n"
    assert rules_on(source, 2) == {"device-string-logic"}
    assert lines_of(source.replace(setting, "config.mode")) == set()


@pytest.mark.parametrize("kind", sorted(DEVICE_TYPES))
def test_device_names_listed_indexed_and_tested(kind: str) -> None:
    source = (
        "def f(device, gpus):\n"
        "    accepted = set(\n"
        f"        [{kind!r}, 'cpu']\n"
        f"        + [f'{kind}:{{i}}' for i in range(gpus)]\n"
        "    )\n"
        "    if device in accepted:\n"
        "        pass\n"
    )
    assert rules_on(source, 3) == {"device-string"}, source
    assert rules_on(source, 4) == {"device-indexed"}, source
    assert rules_on(source, 6) == {"device-string-logic"}, source
    assert (
        lines_of("def f(mode):\n    modes = ['train', 'eval']\n    ok = mode in modes\n") == set()
    )


@pytest.mark.parametrize("index", ('f":{local_rank}"', '":0"'))
def test_an_index_appended_to_a_devices_name(index: str) -> None:
    source = f"def f(local_rank):\n    device = 'cuda'\n    device += {index}\n"
    assert rules_on(source, 3) == {"device-indexed"}, source
    assert lines_of(f"def f(local_rank):\n    path = 'a'\n    path += {index}\n") == set()


# -- the launcher's variables read through a parameter or a table's items ----------------------
_VARIABLES = {"WORLD_SIZE": "dist-env", "NODE_RANK": "dist-env", "MASTER_ADDR": "dist-env"}


@pytest.mark.parametrize(
    ("variable", "handed"),
    list(itertools.product(_VARIABLES, ("positional", "keyword"))),
    ids=str,
)
def test_a_launcher_variable_named_by_a_parameter(variable: str, handed: str) -> None:
    argument = f"{variable!r}" if handed == "positional" else f"env_var={variable!r}"
    source = (
        "import os\n"
        "def config_var(env_var, default):\n"
        "    return int(os.environ[env_var])\n"
        f"world = config_var({argument}, default=1)\n"
    )
    assert rules_on(source, 3) == {_VARIABLES[variable]}, source
    other = source.replace(repr(variable), "'HOME'")
    assert 3 not in lines_of(other), other


@pytest.mark.parametrize("read", ("os.environ.get(k, v) == v", "os.environ.setdefault(k, v)"))
def test_a_launcher_variable_read_over_a_tables_items(read: str) -> None:
    source = (
        "import os\n"
        "defaults = {'WORLD_SIZE': '1', 'RANK': '0'}\n"
        f"ok = all({read} for (k, v) in defaults.items())\n"
    )
    assert "dist-env" in rules_on(source, 3), source
    plain = source.replace("'WORLD_SIZE'", "'HOME'").replace("'RANK'", "'USER'")
    assert lines_of(plain) == set()


@pytest.mark.parametrize(
    ("variable", "row"),
    [
        ("CUDA_MODULE_LOADING", "cuda-alloc-conf"),
        ("CUDA_DEVICE_MAX_CONNECTIONS", "cuda-alloc-conf"),
        ("PYTORCH_NO_CUDA_MEMORY_CACHING", "cuda-alloc-conf"),
        ("CUDA_DEVICE_ORDER", "cuda-visible-devices"),
    ],
)
def test_the_cuda_runtimes_variables(variable: str, row: str) -> None:
    for statement in (f"os.environ[{variable!r}] = '1'", f"x = os.getenv({variable!r})"):
        assert rules_on(f"import os\n{statement}\n", 2) == {row}, statement
    assert lines_of("import os\nos.environ['CUDA_HOME'] = '/usr/local/cuda'\n") == set()


# -- a tensor's host copy, a module compiled, an autocast held, an optimizer named optim -------
@pytest.mark.parametrize("receiver", ("logits", "out.logits", "model(x)[0]"))
def test_a_forced_numpy_copy_leaves_the_device(receiver: str) -> None:
    source = f"def f(model, x, out, logits):\n    a = {receiver}.numpy(force=True)\n"
    assert rules_on(source, 2) == {"tensor-cpu"}, source
    assert lines_of(source.replace("force=True", "")) == set()


@pytest.mark.parametrize(
    "arguments", ("", 'mode="max-autotune"', "fullgraph=True, dynamic=False", "**options")
)
def test_a_module_compiled_in_place(arguments: str) -> None:
    source = f"def f(block, options):\n    block.compile({arguments})\n"
    if not arguments:
        assert lines_of(source) == set()  # bare: too like Keras' compile() to tell
        return
    assert rules_on(source, 2) == {"torch-compile"}, source
    keras = "def f(model):\n    model.compile(optimizer='adam', loss='mse')\n"
    assert lines_of(keras) == set()


@pytest.mark.parametrize("held", ("self.training_ctx", "ctx"))
def test_an_autocast_of_the_projects_held_then_entered(held: str) -> None:
    source = (
        "class Brain:\n"
        "    def fit(self, device_type, dtype):\n"
        f"        {held} = TorchAutocast(device_type=device_type, dtype=dtype)\n"
        f"        with {held}:\n"
        "            pass\n"
    )
    assert rules_on(source, 4) == {"autocast"}, source
    assert 4 not in lines_of(source.replace("TorchAutocast", "Timer"))


@pytest.mark.parametrize("name", ("optim", "self.optim", "base_optim", "optimizer"))
def test_an_optimizers_state_loaded_by_the_name_it_is_given(name: str) -> None:
    source = f"def f(self, optim, base_optim, optimizer, sd):\n    {name}.load_state_dict(sd)\n"
    assert rules_on(source, 2) == {"optimizer-state-dict"}, source
    assert lines_of(source.replace(name, "optimism")) == set()


# -- a member of a class an advice row names: an enum's value ------------------------------------
_MEMBERS = {
    "from torch.distributed.fsdp import StateDictType": "StateDictType.SHARDED_STATE_DICT",
    "from torch.distributed.fsdp.api import StateDictType": "StateDictType.FULL_STATE_DICT",
    "import torch.distributed.fsdp as fsdp": "fsdp.StateDictType.LOCAL_STATE_DICT",
}


@pytest.mark.parametrize("imports", _MEMBERS)
def test_an_enum_value_of_a_catalog_class(imports: str) -> None:
    source = (
        f"{imports}\n"
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "from torch.distributed.fsdp import ShardedOptimStateDictConfig\n"
        "def f(model):\n"
        f"    kind = {_MEMBERS[imports]}\n"
        "    with FSDP.state_dict_type(\n"
        "        model,\n"
        f"        state_dict_type={_MEMBERS[imports]},\n"
        "        optim_state_dict_config=ShardedOptimStateDictConfig(offload_to_cpu=True),\n"
        "    ):\n"
        "        pass\n"
    )
    # The member given on a line of its own inside the call reported on line 6 is reported
    # there too (round six's OLMo labels: the layout chosen on that line).
    for line in (5, 6, 8, 9):
        assert rules_on(source, line) == {"dist-checkpoint-state"}, (line, source)
    inline = source.replace(
        "(\n        model,\n        state_dict_type=", "(model, state_dict_type="
    )
    assert rules_on(inline, 6) == {"dist-checkpoint-state"}, inline
    assert len([f for f in scan_text(inline) if f.line == 6]) == 1, inline
    assert lines_of("import enum\nclass Kind(enum.Enum):\n    A = 1\nk = Kind.A\n") == set()


def test_autocasts_state_read() -> None:
    source = "import torch\nkwargs = {'cache_enabled': torch.is_autocast_cache_enabled()}\n"
    assert rules_on(source, 2) == {"autocast"}


# -- a project's checkpoint loader, defined in another file ---------------------------------------
@pytest.mark.parametrize(
    ("call", "row"),
    [
        ("model, name = setup_model(cfg, map_location)", "torch-load-map-location"),
        ("model = load_model(path, map_location=device)", "torch-load-map-location"),
        ("model = restore(path, map_location='cpu')", "torch-load-map-location"),
        ("state = safe_torch_load(path)", "torch-load"),
        ("state = utils._torch_load(path, weights_only=True)", "torch-load"),
    ],
)
def test_a_projects_checkpoint_loader_handed_a_map_location(call: str, row: str) -> None:
    source = (
        "from project.utils import setup_model, load_model, restore, safe_torch_load, utils\n"
        f"def f(cfg, map_location, path, device):\n    {call}\n"
    )
    assert rules_on(source, 3) == {row}, source
    plain = (
        "from project.utils import setup_model\ndef f(cfg, path):\n    m = setup_model(cfg, path)\n"
    )
    assert lines_of(plain) == set()
    here = "def setup_model(cfg, map_location):\n    return cfg\nm = setup_model(1, map_location)\n"
    assert lines_of(here) == set()  # defined here: its own body says what it does


# -- a model's state put in a checkpoint dict another file's save writes -------------------------
@pytest.mark.parametrize(
    "save",
    ("save_if_main(state, path)", "dist_cp.save_state_dict(state, writer)", "ckpt.save(state)"),
)
def test_a_models_state_in_a_dict_another_files_save_writes(save: str) -> None:
    source = (
        "import torch\n"
        "import torch.distributed.checkpoint as dist_cp\n"
        "from project.misc import save_if_main, ckpt\n"
        "def f(model, optimizer, path, writer):\n"
        "    state = {\n"
        '        "model": model.state_dict(),\n'
        '        "optimizer": optimizer.state_dict(),\n'
        "    }\n"
        f"    {save}\n"
    )
    assert rules_on(source, 6) == {"save-model-torch-twin"}, source
    assert "save-model-torch-twin" not in rules_on(source, 7)  # the optimizer's: its own row
    torch_save = source.replace(save, "torch.save(state, path)")
    assert rules_on(torch_save, 6) == set()  # reported where torch.save writes it
    defined = source.replace("from project.misc import save_if_main, ckpt\n", "") + (
        "def save_if_main(state, path):\n    torch.save(state, path)\n"
    )
    if save.startswith("save_if_main"):
        assert rules_on(defined, 5) == set()  # this file's save: reported in its body
    kept = source.replace(f"    {save}\n", "    return state\n")
    assert rules_on(kept, 6) == set()  # a dict not saved
