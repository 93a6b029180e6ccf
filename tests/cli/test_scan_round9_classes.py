"""``scan`` by class, round nine: the classes behind the lines round 8's held-out sets B and
C (and round 7's leftovers) still missed, once those sets were measured. Each class is its
spellings crossed with the places a script writes them, each with a twin of the same
shape and no torch meaning, which stays silent.

The torch classes: a learning-rate scheduler the file did not make, known by its name
(``self.scheduler.step()``, ``scheduler.state_dict()``, a dict of them), torch's
schedulers with no port (``SequentialLR``...) and Transformers' and Diffusers'
``get_scheduler``; a ``DataParallel`` subclass, its ``self.module``, a ``.module`` read
where the code handles a wrapped and a bare model, and DDP's ``"module."`` prefix on a
state dict's keys; torch's device module chosen at import and kept in a module's name
(``None`` where torch has none); a variable's name held in a module's constant or an
f-string (``os.environ[f"{CUDA_ENVVAR}"]``); torch.compile's and MPS's switches in the
environment (``os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")``); ``x.type(dtype)``; a
loss scaler handed to another object (``self.accelerator.scaler = scaler``); Click's
``--local_rank``; a torch name read through ``getattr`` (``torch.version.hip``);
Diffusers' xformers switch; a device-named default of a parameter used as a device
(``loc="cpu"``). The library classes: Lightning's ``rank_zero_only`` at its old path and
its ``ModelCheckpoint`` callback, Lhotse's ``fix_random_seed``, Whisper's ``load_model``.
Every finding here is advice: ``--diff`` leaves its line.

Marks: ``# -> rule`` and ``# silent`` (``tests/cli/test_scan_round7b_classes.py``).
"""

from __future__ import annotations

import itertools

import pytest

from tests.cli.test_scan_round7b_classes import advice_only, check
from tests.support.cli import scan_text


def _marked(source: str) -> None:
    check(source)
    advice_only(source)


def _advice(source: str, line: int, rule: str) -> str:
    (found,) = [f for f in scan_text(source) if f.line == line and f.rule == rule]
    return found.replacement


# -- a scheduler known by its name ------------------------------------------------------------
_SCHEDULER_CALLS = {
    "stepped": ("{s}.step()", ".step()  # unchanged"),
    "stepped on a metric": ("{s}.step(val_loss)", ".step(val_loss)  # unchanged"),
    "saved": ('state["scheduler"] = {s}.state_dict()', "torch's layout"),
    "restored": ('{s}.load_state_dict(ckpt["scheduler"])', "torch's state dict"),
    "its rate read": ("lr = {s}.get_last_lr()[0]", "torch's layout"),
}
_SCHEDULER_HELD = {
    "a parameter": (
        "def train(model, optimizer, scheduler, ckpt, state, val_loss):\n",
        "scheduler",
    ),
    "a helper's": (
        "def train(model, optimizer, args, ckpt, state, val_loss):\n"
        "    lr_scheduler = build_lr_scheduler(optimizer, args)\n",
        "lr_scheduler",
    ),
    "prepared by Accelerate": (
        "def train(model, optimizer, accelerator, ckpt, state, val_loss):\n"
        "    lr_sched = torch.optim.lr_scheduler.StepLR(optimizer, 30)\n"
        "    model, lr_sched = accelerator.prepare(model, lr_sched)\n",
        "lr_sched",
    ),
    "an attribute": (
        "class Trainer:\n"
        "    def fit(self, ckpt, state, val_loss):\n"
        "        self.scheduler = self.accelerator.prepare(self.scheduler)\n",
        "self.scheduler",
    ),
}


@pytest.mark.parametrize(
    ("call", "held"), list(itertools.product(_SCHEDULER_CALLS, _SCHEDULER_HELD))
)
def test_a_scheduler_known_by_its_name_is_lr_scheduler(call: str, held: str) -> None:
    head, name = _SCHEDULER_HELD[held]
    indent = "        " if head.startswith("class") else "    "
    line, fits = _SCHEDULER_CALLS[call]
    source = "import torch\n" + head + f"{indent}{line.format(s=name)}  # -> lr-scheduler\n"
    _marked(source)
    assert fits in _advice(source, len(source.splitlines()), "lr-scheduler")


_NOT_A_LEARNING_RATE = {
    "a noise scheduler stepped": "latents = scheduler.step(noise_pred, t, latents).prev_sample",
    "a noise scheduler by its name": "noise_scheduler.step()",
    "its timesteps set": "scheduler.set_timesteps(50)",
    "an EMA's warm-up": "ema_sched.step()",
    "a model's state": 'state["model"] = model.state_dict()',
}


@pytest.mark.parametrize("twin", _NOT_A_LEARNING_RATE)
def test_a_scheduler_of_something_else_is_silent(twin: str) -> None:
    source = (
        "import torch\n"
        "from k_diffusion.utils import EMAWarmup\n"
        "def sample(scheduler, noise_scheduler, noise_pred, t, latents, model, state):\n"
        "    ema_sched = EMAWarmup(power=0.75)\n"
        f"    {_NOT_A_LEARNING_RATE[twin]}  # silent\n"
    )
    check(source)


def test_a_scheduler_in_a_file_without_torch_is_silent() -> None:
    check("import optax\ndef train(scheduler):\n    scheduler.step()  # silent\n")


def test_each_of_a_dict_of_schedulers_and_optimizers_is_reported() -> None:
    source = (
        "import torch\n"
        "class Trainer:\n"
        "    def save(self, path):\n"
        "        torch.save({\n"
        '            "optimizers": {k: v.state_dict() for k, v in self.optim.optimizers.items()},'
        "  # -> optimizer-state-dict\n"
        '            "schedulers": {k: v.state_dict() for k, v in self.optim.schedulers.items()},'
        "  # -> lr-scheduler\n"
        '            "metrics": {k: v.compute() for k, v in self.metrics.items()},  # silent\n'
        "        }, path)\n"
    )
    _marked(source)


_UNPORTED = ("SequentialLR", "ChainedScheduler", "CyclicLR", "CosineAnnealingWarmRestarts")
_SCHEDULER_SPELLINGS = {
    "torch.optim.lr_scheduler.": "import torch\n",
    "lr_scheduler.": "from torch.optim import lr_scheduler\n",
    "": "from torch.optim.lr_scheduler import {cls}\n",
}


@pytest.mark.parametrize(
    ("cls", "prefix"), list(itertools.product(_UNPORTED, _SCHEDULER_SPELLINGS))
)
def test_a_torch_scheduler_with_no_port_says_what_to_write(cls: str, prefix: str) -> None:
    source = (
        _SCHEDULER_SPELLINGS[prefix].format(cls=cls)
        + "from mypackage.schedules import SequentialLR as ProjectSequence\n"
        + "def build(optimizer, warmup, decay):\n"
        + f"    scheduler = {prefix}{cls}(optimizer, [warmup, decay])  # -> lr-scheduler\n"
        + "    other = ProjectSequence(optimizer, [warmup, decay])  # silent\n"
        + "    return scheduler, other\n"
    )
    _marked(source)
    advice = _advice(source, 4, "lr-scheduler")
    assert "LambdaLR" in advice or "join_schedules" in advice


_LIBRARY_SCHEDULES = {
    "transformers": "get_scheduler",
    "transformers.optimization": "get_scheduler",
    "diffusers.optimization": "get_scheduler",
}
_SHAPES = {
    '"cosine"': "warmup_cosine_decay_schedule",
    '"linear"': "join_schedules",
    '"constant"': "constant_schedule",
}


@pytest.mark.parametrize(("module", "shape"), list(itertools.product(_LIBRARY_SCHEDULES, _SHAPES)))
def test_a_librarys_schedule_is_torch_lambda_lr_and_gets_optax_of_its_shape(
    module: str, shape: str
) -> None:
    source = (
        f"from {module} import get_scheduler\n"
        "import torch\n"
        "optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)\n"
        "lr_scheduler = get_scheduler(  # -> lr-scheduler\n"
        f"    {shape}, optimizer=optimizer, num_warmup_steps=500, num_training_steps=10000\n"
        ")\n"
    )
    _marked(source)
    advice = _advice(source, 4, "lr-scheduler")
    assert f"optax.{_SHAPES[shape]}" in advice and "3e-4" in advice
    assert "500" in advice or shape == '"constant"'  # the warm-up, where the shape has one


@pytest.mark.parametrize(
    "factory", ["get_linear_schedule_with_warmup", "get_cosine_schedule_with_warmup"]
)
def test_transformers_warmup_schedules_are_lr_scheduler(factory: str) -> None:
    source = (
        f"from transformers import {factory}\n"
        "from mypackage.training import get_scheduler\n"
        f"sched = {factory}(opt, num_warmup_steps=10, num_training_steps=100)  # -> lr-scheduler\n"
        'other = get_scheduler("linear", opt, num_warmup_steps=10)  # silent\n'
    )
    _marked(source)


# -- a DataParallel subclass, .module where both are handled, DDP's key prefix ---------------
_WRAPPER_BASES = {
    "torch.nn.DataParallel": ("import torch\n", "torch.nn.DataParallel", "dist-data-parallel"),
    "nn.DataParallel": ("from torch import nn\n", "nn.DataParallel", "dist-data-parallel"),
    "DDP": (
        "from torch.nn.parallel import DistributedDataParallel as DDP\n",
        "DDP",
        "dist-ddp-gradient",
    ),
}
_SUBCLASS_USES = {
    "a name": "    net = MyDataParallel(net)  # -> {rule}\n",
    "an entry": "    nets[key] = MyDataParallel(nets[key])  # -> {rule}\n",
    "a project's module": "    other = Wrapper(net)  # silent\n",
}


@pytest.mark.parametrize(("base", "use"), list(itertools.product(_WRAPPER_BASES, _SUBCLASS_USES)))
def test_a_wrappers_subclass_wraps_as_its_base_and_its_self_module_is_the_model(
    base: str, use: str
) -> None:
    header, name, rule = _WRAPPER_BASES[base]
    source = (
        header
        + f"class MyDataParallel({name}):  # -> {rule}\n"
        + "    def __getattr__(self, name):\n"
        + "        try:\n"
        + "            return super().__getattr__(name)\n"
        + "        except AttributeError:\n"
        + "            return getattr(self.module, name)  # -> ddp-module\n"
        + "class Wrapper:\n"
        + "    def __init__(self, module):\n"
        + "        self.module = module\n"
        + "    def __call__(self, x):\n"
        + "        return self.module(x)  # silent\n"
        + "def wrap(net, nets, key):\n"
        + _SUBCLASS_USES[use].format(rule=rule)
    )
    _marked(source)


_BOTH_HANDLED = {
    "a choice on hasattr": (
        'sd = model.module.state_dict() if hasattr(model, "module") else model.state_dict()'
        "  # -> ddp-module"
    ),
    "an if on hasattr": (
        'if hasattr(self.pipeline, "module"):\n'
        "        inner = self.pipeline.module  # -> ddp-module"
    ),
    "a try whose except reads the model": (
        "try:\n"
        "        n_down = model.text_aligner.module.n_down  # -> ddp-module\n"
        "    except AttributeError:\n"
        "        n_down = model.text_aligner.n_down"
    ),
    "a plain attribute": "name = spec.module.name  # silent",
    "a try whose except falls back to a constant": (
        "try:\n        n = cfg.module.n  # silent\n    except AttributeError:\n        n = 0"
    ),
    "a choice on another attribute": (
        'kind = spec.module.kind if hasattr(spec, "kind") else None  # silent'
    ),
}


@pytest.mark.parametrize("spelling", _BOTH_HANDLED)
def test_module_read_where_the_code_handles_wrapped_and_bare_is_ddp_module(spelling: str) -> None:
    source = (
        "import torch\n"
        "def unwrap(self, model, spec, cfg):\n"
        f"    {_BOTH_HANDLED[spelling]}\n"
        "    return None\n"
    )
    _marked(source)


_PREFIXES = {
    "tested": 'if next(iter(checkpoint["model"])).startswith("{p}"):  # {mark}\n        pass',
    "replaced": 'sd = {{k.replace("{p}", ""): v for k, v in sd.items()}}  # {mark}',
    "removed": 'sd = {{k.removeprefix("{p}"): v for k, v in sd.items()}}  # {mark}',
    "cut by its length": 'sd = {{k[len("{p}"):]: v for k, v in sd.items()}}  # {mark}',
}


@pytest.mark.parametrize(
    ("spelling", "prefix"), list(itertools.product(_PREFIXES, ["module.", "model.", "module_"]))
)
def test_ddps_module_prefix_on_a_state_dicts_keys_is_ddp_module(spelling: str, prefix: str) -> None:
    mark = "-> ddp-module" if prefix == "module." else "silent"
    line = _PREFIXES[spelling].format(p=prefix, mark=mark)
    source = f"import torch\ndef load(checkpoint, sd):\n    {line}\n    return sd\n"
    _marked(source)
    if prefix == "module.":
        assert "no wrapper" in _advice(source, 3, "ddp-module")


# -- torch's device module kept in a module's name ------------------------------------------
_DEVICE_MODULES = {
    "None on another runtime": "None if _IS_MLX else getattr(torch, DEVICE_TYPE, None)",
    "None if torch has none": "getattr(torch, DEVICE_TYPE, None)",
    "by its type": "getattr(torch, DEVICE_TYPE)",
}
_MODULE_CALLS = {
    "_DEVICE_MODULE.empty_cache()": "cuda-empty-cache",
    "stats = _DEVICE_MODULE.get_device_properties(0)": "cuda-device-properties",
    "return _DEVICE_MODULE.current_device()": "accelerator-current-index",
    "_DEVICE_MODULE.synchronize()": "cuda-synchronize",
}


@pytest.mark.parametrize(("made", "call"), list(itertools.product(_DEVICE_MODULES, _MODULE_CALLS)))
def test_a_device_module_chosen_at_import_and_its_calls(made: str, call: str) -> None:
    source = (
        "import torch\n"
        "from mypackage import settings\n"
        "_IS_MLX = False\n"
        'DEVICE_TYPE = "cuda"\n'
        f"_DEVICE_MODULE = {_DEVICE_MODULES[made]}  # -> accelerator-current\n"
        "_SETTINGS = None if _IS_MLX else getattr(settings, DEVICE_TYPE, None)\n"
        "def use():\n"
        f"    {call}  # -> {_MODULE_CALLS[call]}\n"
        "    _SETTINGS.empty_cache()  # silent\n"
    )
    _marked(source)


# -- a variable's name held in a constant; torch's switches in the environment ------------------
_HELD_READS = {
    "indexed": "value = os.environ[CUDA_ENVVAR]",
    "through an f-string": 'value = os.environ[f"{CUDA_ENVVAR}"]',
    "read with a default": 'value = os.environ.get(CUDA_ENVVAR, "")',
    "written": "os.environ[CUDA_ENVVAR] = gpus",
    "tested": "value = CUDA_ENVVAR in os.environ",
}


@pytest.mark.parametrize(
    ("read", "variable"),
    list(
        itertools.product(
            _HELD_READS, ["CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "PYTORCH_CUDA_ALLOC_CONF"]
        )
    ),
)
def test_a_variables_name_in_a_module_constant_is_reported_where_held_and_used(
    read: str, variable: str
) -> None:
    rule = {
        "CUDA_VISIBLE_DEVICES": "cuda-visible-devices",
        "LOCAL_RANK": "dist-local-rank",
        "PYTORCH_CUDA_ALLOC_CONF": "cuda-alloc-conf",
    }[variable]
    used = "dist-env" if (variable, read) == ("LOCAL_RANK", "written") else rule
    source = (
        "import os\n"
        "import torch\n"
        f'CUDA_ENVVAR = "{variable}"  # -> {rule}\n'
        f'SHOWN = "{variable}"  # silent\n'
        "def setup(gpus):\n"
        f"    {_HELD_READS[read]}  # -> {used}\n"
        "    print(SHOWN)\n"
        "    return value if 'value' in dir() else None\n"
    )
    _marked(source)


def test_a_functions_own_name_for_a_variable_is_reported_where_read() -> None:
    source = (
        "import os\n"
        "def setup():\n"
        '    name = "CUDA_VISIBLE_DEVICES"  # silent\n'
        "    return os.environ[name]  # -> cuda-visible-devices\n"
    )
    _marked(source)


_SWITCHES = {
    "TORCHDYNAMO_DISABLE": ("torch-compile", "jax_disable_jit"),
    "TORCH_COMPILE_DISABLE": ("torch-compile", "jax_disable_jit"),
    "TORCHINDUCTOR_CACHE_DIR": ("torch-compile", "jax_compilation_cache_dir"),
    "PYTORCH_ENABLE_MPS_FALLBACK": ("cuda-alloc-conf", "CPU"),
    "PYTORCH_MPS_HIGH_WATERMARK_RATIO": ("cuda-alloc-conf", "preallocate"),
}
_ENVIRONMENT_WRITES = {
    "setdefault": 'os.environ.setdefault("{v}", "1")',
    "set": 'os.environ["{v}"] = "1"',
    "read": 'flag = os.getenv("{v}")',
}


@pytest.mark.parametrize(
    ("variable", "written"), list(itertools.product(_SWITCHES, _ENVIRONMENT_WRITES))
)
def test_torchs_compiler_and_mps_switches_in_the_environment(variable: str, written: str) -> None:
    rule, fits = _SWITCHES[variable]
    source = (
        "import os\n"
        "import torch\n"
        f"{_ENVIRONMENT_WRITES[written].format(v=variable)}  # -> {rule}\n"
        f"{_ENVIRONMENT_WRITES[written].format(v='UNSLOTH_COMPILE_DISABLE')}  # silent\n"
    )
    _marked(source)
    assert fits in _advice(source, 3, rule)


# -- x.type(dtype) ------------------------------------------------------------------------------
_TYPES = {
    "a dtype held in a parameter": ("x = x.type(dtype)", "tensor-to-dtype"),
    "torch's dtype": ("y = x.type(torch.float16)", "tensor-to-dtype"),
    "a module": ("model = model.type(torch.float64)", "module-to-dtype"),
    "a CUDA tensor type": ("y = x.type(torch.cuda.HalfTensor)", "tensor-to-device-dtype"),
    "a tensor type by name": ('y = x.type("torch.cuda.FloatTensor")', "tensor-to-device-dtype"),
    "a CPU tensor type": ("y = x.type(torch.FloatTensor)", "tensor-to-device-dtype"),
}
_NOT_CASTS = {
    "the type's name": "name = x.type()",
    "a field's type": 'kind = field.type("text")',
    "numpy's scalar type": "value = arr.dtype.type(3)",
}


@pytest.mark.parametrize("spelling", _TYPES)
def test_torchs_legacy_cast_is_a_dtype_move(spelling: str) -> None:
    line, rule = _TYPES[spelling]
    source = (
        "import numpy as np\nimport torch\n"
        "def convert(x, dtype, model, field, arr):\n"
        f"    {line}  # -> {rule}\n"
        + "".join(f"    {twin}  # silent\n" for twin in _NOT_CASTS.values())
    )
    _marked(source)
    assert "tj.to_device(" in _advice(source, 4, rule)


# -- a loss scaler handed to another object --------------------------------------------------
_SCALERS = {
    "torch's": "scaler = torch.cuda.amp.GradScaler(enabled=fp16)",
    "one named so": "scaler = getattr(self, f'scaler{index}')",
}
_HANDED = {
    "to the Accelerator": "self.accelerator.scaler = scaler  # -> grad-scaler",
    "to an optimizer": "optimizer.scaler = scaler  # -> grad-scaler",
    "kept by the object": "self.scaler = scaler  # silent",
}


@pytest.mark.parametrize(("made", "handed"), list(itertools.product(_SCALERS, _HANDED)))
def test_a_loss_scaler_handed_to_another_object_is_grad_scaler(made: str, handed: str) -> None:
    source = (
        "import torch\n"
        "from sklearn.preprocessing import StandardScaler\n"
        "class Trainer:\n"
        "    def set_scaler(self, index, fp16, optimizer, pipeline):\n"
        f"        {_SCALERS[made]}\n"
        f"        {_HANDED[handed]}\n"
        "        features = StandardScaler()\n"
        "        pipeline.scaler = features  # silent\n"
    )
    _marked(source)


# -- Click's --local_rank ------------------------------------------------------------------------
@pytest.mark.parametrize("flag", ["--local_rank", "--local-rank"])
@pytest.mark.parametrize("layout", ["one line", "the flag on a line of its own"])
def test_clicks_local_rank_option_is_the_launchers_argument(flag: str, layout: str) -> None:
    if layout == "one line":
        option = f'@click.option("{flag}", type=int, default=-1)  # -> dist-local-rank\n'
    else:
        option = f'@click.option(\n    "{flag}",  # -> dist-local-rank\n    type=int,\n)\n'
    source = (
        "import click\nimport torch\n"
        "@click.command()\n"
        + option
        + '@click.option("--rank-file", type=str)  # silent\n'
        + "def main(**kwargs):\n    pass\n"
    )
    _marked(source)


# -- a torch name read through getattr -------------------------------------------------------------
_GETATTR_READS = {
    'getattr(getattr(torch, "version", None), "hip", None)': "cuda-other",
    'getattr(torch.version, "cuda", None)': "cuda-other",
    'getattr(torch.cuda, "is_available")()': "cuda-is-available",
    'getattr(info.version, "hip", None)': None,
    'getattr(torch, "float16")': None,
}


@pytest.mark.parametrize("read", _GETATTR_READS)
def test_a_torch_name_read_through_getattr_is_its_rows(read: str) -> None:
    rule = _GETATTR_READS[read]
    mark = f"-> {rule}" if rule else "silent"
    _marked(f"import torch\ndef probe(info):\n    return bool({read})  # {mark}\n")


# -- Diffusers' xformers switch; a device-named default used as a device --------------------------
@pytest.mark.parametrize(
    "member",
    [
        "enable_xformers_memory_efficient_attention()",
        "disable_xformers_memory_efficient_attention()",
        "set_use_memory_efficient_attention_xformers(True)",
    ],
)
@pytest.mark.parametrize("receiver", ["self.pipe", "pipeline.unet", "unet"])
def test_diffusers_xformers_switch_is_sdp_kernel(member: str, receiver: str) -> None:
    source = (
        "from diffusers import StableDiffusionPipeline\n"
        "def setup(self, pipeline, unet):\n"
        f"    {receiver}.{member}  # -> sdp-kernel\n"
        "    self.pipe.enable_attention_slicing(1)  # silent\n"
    )
    _marked(source)
    # without Diffusers, a project's method of the same name
    check(f"import torch\ndef setup(self, pipeline, unet):\n    {receiver}.{member}  # silent\n")


_USED_AS_DEVICE = {
    "torch.device(loc)": "net = torch.load(path, map_location=torch.device(loc))",
    "map_location=": "net = torch.load(path, map_location=loc)",
    "a move": "net = net.to(loc)",
    "device=": "x = torch.zeros(3, device=loc)",
}


@pytest.mark.parametrize("use", _USED_AS_DEVICE)
@pytest.mark.parametrize("name", ["cpu", "cuda:0", "mps"])
def test_a_device_named_default_of_a_parameter_used_as_a_device(use: str, name: str) -> None:
    source = (
        "import torch\n"
        f"def dni(self, path, net, key='params', loc='{name}'):  # -> device-string\n"
        f"    {_USED_AS_DEVICE[use]}\n"
        "    return net\n"
        f"def report(self, mode='{name}'):  # silent\n"
        "    print(mode)\n"
    )
    check(source)
    advice_only(source)


# -- the libraries' rows: Lightning's old path, Lhotse, Whisper --------------------------------
_LIBRARY_CALLS = {
    "rank_zero_only": (
        "from pytorch_lightning.utilities.distributed import rank_zero_only\n",
        "@rank_zero_only  # -> library-process\ndef log_images(self):\n    pass\n",
    ),
    "fix_random_seed": (
        "from lhotse.utils import fix_random_seed\n",
        "fix_random_seed(params.seed)  # -> library-seed\n",
    ),
    "whisper.load_model": (
        "import whisper\n",
        "model = whisper.load_model(name, device)  # -> library-device\n",
    ),
    "ModelCheckpoint": (
        "from pytorch_lightning.callbacks import ModelCheckpoint\n",
        "saver = ModelCheckpoint(dirpath=path, save_last=True)  # -> library-checkpoint\n",
    ),
    "callbacks.model_checkpoint.ModelCheckpoint": (
        "from lightning.pytorch.callbacks.model_checkpoint import ModelCheckpoint\n",
        "saver = ModelCheckpoint(dirpath=path, save_last=True)  # -> library-checkpoint\n",
    ),
}


@pytest.mark.parametrize("call", _LIBRARY_CALLS)
def test_the_libraries_calls_and_a_projects_namesakes(call: str) -> None:
    header, body = _LIBRARY_CALLS[call]
    source = "import torch\n" + header + body
    rule = body.split("# -> ")[1].split()[0]
    assert {(f.line, f.rule) for f in scan_text(source)} == {(3, rule)}
    advice_only(source)
    namesake = body.replace("whisper.load_model(name, device)", "loader.load_model(path)")
    own = f"import torch\nfrom mypackage import loader, {call.rsplit('.', 1)[-1]}\n" + namesake
    assert scan_text(own) == []
    if call == "whisper.load_model":
        assert "tj.load_state(model, path, device=device)" in _advice(source, 3, rule)


# -- torch's optimizer class chosen from a table, then called ---------------------------------
_TABLES = {
    "dict(...)": "optimizers = dict(adam=torch.optim.Adam, lamb=Lamb)",
    "a literal": 'optimizers = {"adam": torch.optim.AdamW, "lamb": Lamb}',
}
_LOOKUPS = {
    "into another name": "optimizer_cls = optimizers[cfg.optimizer]",
    "into the table's name": "optimizers = optimizers[cfg.optimizer]",
}


@pytest.mark.parametrize(("table", "lookup"), list(itertools.product(_TABLES, _LOOKUPS)))
def test_an_optimizer_class_chosen_from_a_table_and_called(table: str, lookup: str) -> None:
    made = _LOOKUPS[lookup].split(" = ")[0]
    source = (
        "import torch\n"
        "from mypackage.optim import Lamb\n"
        "def build(model, cfg, kwargs):\n"
        f"    {_TABLES[table]}  # -> optimizer-torch-rules\n"
        f"    {_LOOKUPS[lookup]}\n"
        f"    optimizer = {made}(model.parameters(), **kwargs)  # -> optimizer-torch-rules\n"
        "    losses = dict(l1=l1_loss, l2=l2_loss)\n"
        "    loss_fn = losses[cfg.loss]\n"
        "    return optimizer, loss_fn(1, 2)  # silent\n"
    )
    _marked(source)
    cls = "Adam" if table == "dict(...)" else "AdamW"
    assert f"nnx.Optimizer(model, tj.optim.{cls}(**kwargs)" in _advice(
        source, 6, "optimizer-torch-rules"
    )
    assert f"tj.optim.{cls}" in _advice(source, 4, "optimizer-torch-rules")


# -- a TensorDict's point-to-point sends; Accelerate's lists of what it prepared -----------------
@pytest.mark.parametrize("call", ["data.isend(dst=0)", "data.irecv(src=rank)"])
def test_a_tensordicts_send_and_receive_are_library_collective(call: str) -> None:
    source = (
        "import torch\nfrom tensordict import TensorDict\n"
        f"def collect(data, rank, conn):\n    {call}  # -> library-collective\n"
    )
    _marked(source)
    assert "ppermute" in _advice(source, 4, "library-collective")
    check(f"import asyncio\ndef collect(data, rank):\n    {call}  # silent\n")


@pytest.mark.parametrize(
    ("member", "held"),
    [("_optimizers", "optimizer"), ("_models", "model"), ("_dataloaders", "loader")],
)
def test_accelerates_lists_of_what_it_prepared_are_library_prepare(member: str, held: str) -> None:
    source = (
        "from accelerate import Accelerator\n"
        "class Trainer:\n"
        "    def __init__(self):\n"
        "        self.accelerator = Accelerator()  # -> library-launcher\n"
        "    def patch(self, registry):\n"
        f"        for item in self.accelerator.{member}:  # -> library-prepare\n"
        "            item.patched = True\n"
        f"        for item in registry.{member}:  # silent\n"
        "            item.patched = True\n"
    )
    _marked(source)
    assert f"[{held}]" in _advice(source, 6, "library-prepare")
