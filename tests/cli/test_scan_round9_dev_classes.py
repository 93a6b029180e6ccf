"""``scan`` by class on round nine's development set (label9d, label9e, label9f: DLRM and
TorchRec, DINO, FlagEmbedding, Text Generation Inference, LoRA's GPT-2 example on
Horovod, ESM on fairscale, DeiT on timm, Graphormer on fairseq, DGL, SimCSE, Chatterbox,
a PPO implementation, Habitat): each class's spellings, crossed with the places a script
writes them, and its twin without device meaning that stays silent.

The torch classes: the launchers' variables named in a list over several lines (each name
on its own line) and read through a helper's parameter the file hands such lists
(``env2int(["PMI_SIZE", ...])``), gloo's and TunableOp's variables; an asynchronous
collective's work waited for (``work.wait()``); a torch profiler's report
(``prof.key_averages().table()``, ``prof.export_chrome_trace(p)``); ``model.share_memory()``
and a ``spawn`` context from Python's ``multiprocessing``; DDP under a project module's
name (``ext_dist.DDP(m)``); torch's ``empty_cache`` / ``synchronize`` under a project
helper's name; a module kept in an attribute (``args.dist = dist``); the legacy tensor
types asked with ``isinstance``; ``map_location="cpu"`` as a parameter's default.

The library classes: Horovod, TorchRec, fairscale, timm, fairseq and DGL by their
functions, keywords and objects; Transformers' ``TrainingArguments`` and ``Trainer``
internals (``no_cuda``, ``_n_gpu``, ``get_process_log_level``, ``sharded_dpp``,
``init_deepspeed``, ``is_torch_tpu_available``), Accelerate's
``optimizer_step_was_skipped``.

Each line that a class covers is marked in its snippet with ``# -> rule``, each twin with
``# silent`` (``tests/cli/test_scan_round7b_classes.py``'s marks).
"""

from __future__ import annotations

import itertools

import pytest

from tests.cli.test_scan_round7b_classes import check
from tests.cli.test_scan_round7b_classes import marked as _marked
from tests.cli.test_scan_round7b_classes import silenced as _silenced
from tests.support.cli import scan_text
from torch2jax_device.porting import catalog
from torch2jax_device.porting._recognise.library_functions import FUNCTIONS

# -- the launchers' variables named in a list over several lines --------------------------------
_LISTED = (
    '        "PMI_SIZE",  # -> dist-env\n'
    '        "OMPI_COMM_WORLD_SIZE",  # -> dist-env\n'
    '        "MV2_COMM_WORLD_SIZE",  # -> dist-env\n'
    '        "WORLD_SIZE",  # -> dist-env\n'
    '        "MPI_LOCALRANKID",  # -> dist-env\n'
    '        "LOCAL_RANK",  # -> dist-local-rank\n'
)
_LIST_PLACES = {
    "handed to a helper": "    size = env2int(\n        [\n{names}        ],\n        1,\n    )\n",
    "a tuple kept in a name": "    names = (\n{names}    )\n",
    "a keyword's list": "    size = env2int(\n        env_list=[\n{names}        ],\n    )\n",
}


@pytest.mark.parametrize("place", _LIST_PLACES)
def test_launcher_variables_listed_over_lines_are_each_reported(place: str) -> None:
    source = (
        "import os\n"
        "def env2int(env_list, default=-1):\n"
        "    return default\n"
        "def init():\n" + _LIST_PLACES[place].format(names=_LISTED)
    )
    _marked(source)
    twin = source
    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "WORLD_SIZE"):
        twin = twin.replace(f'"{name}"', f'"APP_{name}"')
    for name in ("MPI_LOCALRANKID", "LOCAL_RANK"):
        twin = twin.replace(f'"{name}"', f'"DATA_{name}"')
    check(_silenced(twin))  # a project's own variables


_READS = {
    "os.environ.get": "val = int(os.environ.get(e, -1))",
    "os.getenv": "val = int(os.getenv(e, '-1'))",
    "os.environ[...]": "val = int(os.environ[e])",
}
_HANDED = {
    "positional": 'env2int(["PMI_RANK", "OMPI_COMM_WORLD_RANK", "RANK"], 0)',
    "by keyword": 'env2int(env_list=("PMI_RANK", "RANK"))',
}


@pytest.mark.parametrize(("read", "handed"), list(itertools.product(_READS, _HANDED)))
def test_a_read_through_a_helpers_parameter_handed_launcher_variables(
    read: str, handed: str
) -> None:
    source = (
        "import os\n"
        "def env2int(env_list, default=-1):\n"
        "    for e in env_list:\n"
        f"        {_READS[read]}  # -> dist-env\n"
        "        if val >= 0:\n"
        "            return val\n"
        "    return default\n"
        f"rank = {_HANDED[handed]}\n"
    )
    _marked(source)
    local = source.replace(_HANDED[handed], 'env2int(["LOCAL_RANK"])')
    local = local.replace("# -> dist-env", "# -> dist-local-rank")
    _marked(local)
    twin = source.replace(_HANDED[handed], 'env2int(["CCL_WORKER_COUNT", "APP_THREADS"])')
    check(_silenced(twin))  # only variables of the project's (and oneCCL's)


_TORCHS_OWN = {"GLOO_SOCKET_IFNAME": "dist-env", "PYTORCH_TUNABLEOP_ENABLED": "cuda-other"}


@pytest.mark.parametrize("variable", _TORCHS_OWN)
def test_glooss_and_tunableops_variables_read_written_and_checked(variable: str) -> None:
    rule = _TORCHS_OWN[variable]
    source = (
        "import os\n"
        "def setup(ifname):\n"
        f'    if "{variable}" not in os.environ:  # -> {rule}\n'
        f'        os.environ["{variable}"] = ifname  # -> {rule}\n'
        f'    return os.environ.get("{variable}", "")  # -> {rule}\n'
    )
    _marked(source)
    check(_silenced(source.replace(variable, "MY_" + variable)))


# -- an asynchronous collective's work waited for -----------------------------------------------
_ASYNC = {
    "all_gather": "dist.all_gather(parts, x, async_op=True)",
    "all_reduce": "torch.distributed.all_reduce(x, async_op=True)",
    "isend": "dist.isend(x, dst=1)",
    "irecv": "dist.irecv(x, src=0)",
}


@pytest.mark.parametrize("collective", _ASYNC)
def test_an_asynchronous_collectives_work_waited_for_is_dist_other(collective: str) -> None:
    source = (
        "import threading\n"
        "import torch\n"
        "import torch.distributed as dist\n"
        "def exchange(x, parts):\n"
        f"    work = {_ASYNC[collective]}\n"
        "    work.wait()  # -> dist-other\n"
        "    done = threading.Event()\n"
        "    done.wait()  # silent\n"
        "    job = pool.submit(x)\n"
        "    job.wait()  # silent\n"
        "    return parts\n"
    )
    _marked(source)


# -- a torch profiler's report ------------------------------------------------------------------
_PROFILERS = {
    "with torch.profiler.profile": (
        "    with torch.profiler.profile(activities=activities) as prof:\n        step()\n"
    ),
    "with the autograd profiler": (
        "    with torch.autograd.profiler.profile(use_cuda=True) as prof:\n        step()\n"
    ),
    "assigned": "    prof = profile(schedule=schedule)\n    prof.start()\n    step()\n",
}
_REPORTS = (
    "    print(prof.key_averages(group_by_input_shape=True).table(sort_by='cpu_time'))"
    "  # -> profiler\n"
    "    prof.export_chrome_trace('trace.json')  # -> profiler\n"
    "    prof.export_stacks('stacks.txt')  # -> profiler\n"
)


@pytest.mark.parametrize("made", _PROFILERS)
def test_a_torch_profilers_report_is_profiler(made: str) -> None:
    source = (
        "import cProfile\n"
        "import torch\n"
        "from torch.profiler import profile\n"
        "def run(step, activities, schedule):\n" + _PROFILERS[made] + _REPORTS
    )
    _marked(source)
    twin = (
        "import cProfile\n"
        "import torch\n"
        "def run(step):\n"
        "    prof = cProfile.Profile()\n"
        "    prof.enable()\n"
        "    step()\n" + _REPORTS.replace("table(sort_by='cpu_time')", "table()")
    )
    check(_silenced(twin))  # Python's profiler (a project's key_averages, were it one)


# -- worker processes: a model's tensors shared, a spawn context ----------------------------------
@pytest.mark.parametrize("model", ["model", "self.model", "self.encoder_model"])
def test_a_model_shared_with_workers_is_mp_spawn(model: str) -> None:
    source = (
        "import torch\n"
        "class Pool:\n"
        "    def start(self, model):\n"
        f"        {model}.share_memory()  # -> mp-spawn\n"
        "        self.queue_store.share_memory()  # silent\n"
    )
    _marked(source)


_CONTEXTS = {
    "multiprocessing as mp": ("import multiprocessing as mp\n", 'mp.get_context("{m}")'),
    "get_context imported": ("from multiprocessing import get_context\n", 'get_context("{m}")'),
    "torch's": ("import torch.multiprocessing as tmp\n", 'tmp.get_context("{m}")'),
    "set_start_method": (
        "import multiprocessing\n",
        'multiprocessing.set_start_method("{m}", force=True)',
    ),
}


@pytest.mark.parametrize(
    ("spelling", "method"), list(itertools.product(_CONTEXTS, ["spawn", "forkserver"]))
)
def test_a_fresh_interpreters_start_method_is_mp_spawn(spelling: str, method: str) -> None:
    header, call = _CONTEXTS[spelling]
    source = (
        "import torch\n"
        + header
        + f"ctx = {call.format(m=method)}  # -> mp-spawn\n"
        + f"other = {call.format(m='fork')}  # silent\n"
    )
    loader = (
        "loader = DataLoader(data, num_workers=2, multiprocessing_context=loader_ctx)\n"
        f"loader_ctx = {call.format(m=method)}  # silent\n"  # the workers' (dataloader-workers)
        f"other = DataLoader(data, multiprocessing_context={call.format(m=method)})  # silent\n"
    )
    _marked(source + "from torch.utils.data import DataLoader\n" + loader)
    if "torch" not in header:  # no torch in the file: no CUDA to protect
        check(_silenced(source.replace("import torch\n", "")))


# -- torch's names reached through the project's own ----------------------------------------------
_DDP_ALIASES = {
    "DLRM's module": ("import extend_distributed as ext_dist\n", "ext_dist.DDP"),
    "a package's module": (
        "from mypackage import dist_utils\n",
        "dist_utils.DistributedDataParallel",
    ),
}


@pytest.mark.parametrize("alias", _DDP_ALIASES)
def test_ddp_under_a_project_modules_name_is_dist_ddp_gradient(alias: str) -> None:
    header, ddp = _DDP_ALIASES[alias]
    module = ddp.split(".")[0]
    source = (
        "import torch\n"
        + header
        + "def wrap(dlrm, use_gpu, rank):\n"
        + f"    dlrm.bot_l = {ddp}(dlrm.bot_l)  # -> dist-ddp-gradient\n"
        + f"    dlrm.top_l = {ddp}(dlrm.top_l, device_ids=[rank])  # -> dist-ddp-gradient\n"
        + f"    hooks = {module}.ddp_hooks(dlrm.top_l)  # silent\n"
        + "    return hooks\n"
    )
    _marked(source)


def test_torchs_calls_under_a_project_helpers_name() -> None:
    source = (
        "import torch\n"
        "from text_generation_server.utils.import_utils import empty_cache, synchronize\n"
        "class FlashCausalLM:\n"
        "    def warmup(self, batch):\n"
        "        empty_cache()  # -> cuda-empty-cache\n"
        "        synchronize(self.device)  # -> cuda-synchronize\n"
        "        synchronize(self.lock)  # silent\n"
        "        return batch\n"
    )
    _marked(source)
    barrier = (
        "import torch\n"
        "from distributed import synchronize\n"
        "torch.distributed.init_process_group(backend='nccl')\n"
        "synchronize()  # silent\n"  # stylegan2's: a barrier
    )
    check(barrier)
    check(_silenced(source.replace("import torch\n", "")))  # no torch in the file


_HELD_MODULES = {
    "torch.distributed": (
        "import torch.distributed as dist\n",
        "dist",
        (
            "    args.dist.barrier()  # -> dist-barrier\n"
            "    args.dist.destroy_process_group()  # -> dist-destroy\n"
        ),
    ),
    "Horovod": (
        "import horovod.torch as hvd\n",
        "hvd",
        (
            "    args.hvd.allreduce(torch.tensor(0), name='barrier')  # -> library-collective\n"
            "    args.hvd.broadcast_parameters(state, root_rank=0)  # -> library-collective\n"
        ),
    ),
}


@pytest.mark.parametrize("held", _HELD_MODULES)
def test_a_module_kept_in_an_attribute_is_its_functions_row(held: str) -> None:
    header, module, calls = _HELD_MODULES[held]
    attribute = calls.split(".")[1]
    source = (
        "import torch\n"
        + header
        + "def parse(args):\n"
        + f"    args.{attribute} = {module}\n"
        + "def sync(args, state):\n"
        + calls
    )
    _marked(source)
    twin = source.replace(f"args.{attribute} = {module}\n", f"args.{attribute} = store\n")
    check(_silenced(twin.replace("import torch\n", "import torch\nimport store\n")))


# -- the legacy tensor types asked with isinstance ------------------------------------------------
_LEGACY = ("FloatTensor", "LongTensor", "HalfTensor", "ByteTensor", "BoolTensor")


@pytest.mark.parametrize(
    ("kind", "module", "alone"),
    list(itertools.product(_LEGACY, ["torch", "torch.cuda"], [True, False])),
)
def test_a_legacy_tensor_type_asked_is_cuda_tensor_type(
    kind: str, module: str, alone: bool
) -> None:
    types = f"{module}.{kind}" if alone else f"(list, {module}.{kind})"
    source = (
        "import torch\n"
        "def step(actions):\n"
        f"    if isinstance(actions, {types}):  # -> cuda-tensor-type\n"
        "        actions = actions.squeeze(1)\n"
        "    if isinstance(actions, torch.Tensor):  # silent\n"
        "        actions = actions.squeeze(0)\n"
        "    return actions\n"
    )
    _marked(source)
    (advice,) = [f.replacement for f in scan_text(source) if f.rule == "cuda-tensor-type"]
    assert "isinstance(actions, jax.Array)" in advice and "dtype" in advice, advice  # it fits


# -- a device named as map_location's default ---------------------------------------------------
@pytest.mark.parametrize(
    "signature", ['cls, fpath, map_location="cpu"', 'path, *, map_location="cuda:0"']
)
def test_a_device_as_map_locations_default_is_device_string(signature: str) -> None:
    source = (
        "import torch\n"
        f"def load({signature}):  # -> device-string\n"
        "    return torch.load(fpath, map_location=map_location, weights_only=True)\n"
        "def read(path, map_location=None, mode='rb'):  # silent\n"
        "    return open(path, mode)\n"
    )
    _marked(source)


# -- the libraries' functions, by their qualified names --------------------------------------------
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_each_library_function_is_its_rows(name: str) -> None:
    rule = FUNCTIONS[name][0]
    assert name in catalog.get(rule).torch_api, (name, rule)
    package, short = name.rsplit(".", 1)
    for header, called in (
        (f"from {package} import {short}\n", short),
        (f"import {package} as lib\n", f"lib.{short}"),
    ):
        source = (
            "import torch\n"
            + header
            + "def run(model, optimizer, sample, x):\n"
            + f"    out = {called}(x, optimizer)  # -> {rule}\n"
            + "    return out\n"
        )
        _marked(source)
        check(_silenced(source.replace(package, "mypackage.helpers")))  # the project's own


# -- the libraries' keywords -----------------------------------------------------------------
_KEYWORD_CALLS = {
    "TorchRec's model": (
        "from torchrec.models.dlrm import DLRM\n",
        "DLRM(\n        tables,\n        dense_device=device,  # -> library-device\n    )",
    ),
    "TorchRec's topology": (
        "from torchrec.distributed.planner import Topology\n",
        "Topology(\n        world_size=2,\n"
        "        compute_device=device.type,  # -> library-device\n    )",
    ),
    "DGL's loader": (
        "from dgl.dataloading import DataLoader\n",
        "DataLoader(\n        graph,\n        use_ddp=True,  # -> library-prepare\n"
        "        use_uva=use_uva,  # -> library-device\n    )",
    ),
    "fairscale's FSDP": (
        "from fairscale.nn.data_parallel import FullyShardedDataParallel as FSDP\n",
        "FSDP(\n        model,\n        mixed_precision=True,  # -> library-strategy\n"
        "        cpu_offload=True,  # -> library-strategy\n    )",
    ),
}


@pytest.mark.parametrize("call", _KEYWORD_CALLS)
def test_a_librarys_keywords_that_place_or_split_the_work(call: str) -> None:
    header, made = _KEYWORD_CALLS[call]
    source = (
        "import torch\n"
        + header
        + "from mypackage.loaders import Loader\n"
        + "def build(model, tables, graph, device, use_uva):\n"
        + f"    built = {made}\n"
        + "    own = Loader(graph, use_ddp=True, use_uva=use_uva, cpu_offload=True)  # silent\n"
        + "    return built, own\n"
    )
    _marked(source)


@pytest.mark.parametrize("into", ["enable_wrap", "FSDP"])
def test_fairscales_options_in_a_dict_splatted_into_its_call(into: str) -> None:
    source = (
        "import torch\n"
        "from fairscale.nn.data_parallel import FullyShardedDataParallel as FSDP\n"
        "from fairscale.nn.wrap import enable_wrap, wrap\n"
        "from mypackage import launch\n"
        "fsdp_params = dict(\n"
        "    mixed_precision=True,  # -> library-strategy\n"
        "    flatten_parameters=True,\n"
        "    cpu_offload=True,  # -> library-strategy\n"
        ")\n"
        "own = dict(\n"
        "    cpu_offload=True,  # silent\n"
        ")\n"
        + (
            "with enable_wrap(wrapper_cls=FSDP, **fsdp_params):  # -> library-strategy\n"
            "    model = wrap(model)  # -> library-strategy\n"
            if into == "enable_wrap"
            else "model = FSDP(model, **fsdp_params)  # -> library-strategy\n"
        )
        + "launch(**own)\n"
    )
    _marked(source)


# -- the libraries' objects, by their members --------------------------------------------------
def test_torchrecs_planner_and_pipeline_members() -> None:
    source = (
        "import torch\n"
        "from torch import distributed as dist\n"
        "from torchrec.distributed import TrainPipelineSparseDist\n"
        "from torchrec.distributed.planner import EmbeddingShardingPlanner\n"
        "def evaluate(pipeline: TrainPipelineSparseDist, other: Pipeline):\n"
        "    device = pipeline._device  # -> library-device\n"
        "    mine = other._device  # silent\n"
        "    return device, mine\n"
        "def shard(model, sharders, topology, planner2):\n"
        "    planner = EmbeddingShardingPlanner(topology=topology)  # -> library-strategy\n"
        "    plan = planner.collective_plan(\n"
        "        model, sharders, dist.GroupMember.WORLD  # -> dist-other\n"
        "    )\n"
        "    own = planner2.collective_plan(model)  # silent\n"
        "    return plan, own\n"
    )
    _marked(source)


_SCALERS = {
    "made here": (
        "from timm.utils import NativeScaler\n",
        "loss_scaler = NativeScaler()  # -> library-backward\n",
    ),
    "a parameter in a file of timm": ("from timm.utils import accuracy\n", ""),
}


@pytest.mark.parametrize("made", _SCALERS)
def test_a_timm_loss_scaler_runs_the_backward_and_is_saved(made: str) -> None:
    header, construction = _SCALERS[made]
    source = (
        "import torch\n"
        + header
        + construction
        + "def train_one_epoch(model, loss, optimizer, loss_scaler, checkpoint, max_norm):\n"
        "    loss_scaler(loss, optimizer, clip_grad=max_norm,  # -> library-backward\n"
        "                parameters=model.parameters())\n"
        "    loss_scaler.load_state_dict(checkpoint['scaler'])  # -> library-checkpoint\n"
        "    return {'scaler': loss_scaler.state_dict()}  # -> library-checkpoint\n"
    )
    if construction:
        source = source.replace("optimizer, loss_scaler, checkpoint", "optimizer, checkpoint")
    _marked(source)
    if not construction:  # no timm: a project's scaler called (its state is grad-scaler's)
        twin = source.replace(header, "").replace("  # -> library-checkpoint", "")
        check(_silenced(twin))


# -- Transformers' TrainingArguments and Trainer internals, Accelerate's skipped step --------
def test_a_training_arguments_subclasss_device_setup_is_library_device() -> None:
    source = (
        "import torch\n"
        "from transformers import TrainingArguments\n"
        "from transformers.file_utils import is_torch_tpu_available\n"
        "class OurTrainingArguments(TrainingArguments):  # -> library-launcher\n"
        "    def _setup_devices(self):\n"
        "        if self.no_cuda:  # -> library-device\n"
        "            self._n_gpu = 0  # -> library-device\n"
        "        elif is_torch_tpu_available():  # -> library-is-available\n"
        "            self._n_gpu = 0  # -> library-device\n"
        "        self.n_cpu = 0  # silent\n"
        "def main(training_args):\n"
        "    level = training_args.get_process_log_level()  # -> library-process\n"
        "    return level\n"
    )
    _marked(source)


def test_a_trainer_copys_internals_are_the_libraries() -> None:
    source = (
        "import torch\n"
        "from transformers import Trainer\n"
        "class CLTrainer(Trainer):\n"
        "    def train(self, model, max_steps):\n"
        "        model, optimizer, lr_scheduler = init_deepspeed(  # -> library-prepare\n"
        "            self, num_training_steps=max_steps\n"
        "        )\n"
        "        if self.sharded_dpp:  # -> library-strategy\n"
        "            model = ShardedDDP(model, self.optimizer)  # -> library-strategy\n"
        "        return model\n"
    )
    _marked(source)
    own = source.replace("import torch\n", "import torch\nfrom mypackage import init_deepspeed\n")
    own = own.replace("init_deepspeed(  # -> library-prepare", "init_deepspeed(  # silent")
    _marked(own)


def test_accelerates_skipped_step_is_library_backward() -> None:
    source = (
        "from accelerate import Accelerator\n"
        "def step(accelerator, lr_scheduler, monitor):\n"
        "    if not accelerator.optimizer_step_was_skipped:  # -> library-backward\n"
        "        lr_scheduler.step()\n"
        "    if not monitor.optimizer_step_was_skipped:  # silent\n"
        "        lr_scheduler.step()\n"
    )
    _marked(source)


def test_a_deepspeed_engine_accelerate_prepared_is_saved_through_the_library() -> None:
    source = (
        "from accelerate import Accelerator\n"
        "def train(args, model, optimizer, loader, step, snapshot):\n"
        "    accelerator = Accelerator()\n"
        "    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n"
        "    model.save_checkpoint(args.output_dir, step)  # -> library-checkpoint\n"
        "    model.load_checkpoint(args.output_dir)  # -> library-checkpoint\n"
        "    snapshot.save_checkpoint(args.output_dir, step)  # silent\n"
    )
    _marked(source)


def test_a_fairseq_models_load_state_dict_is_load_model_state() -> None:
    source = (
        "import torch\n"
        "from fairseq import tasks\n"
        "def evaluate(cfg, task, path):\n"
        "    model = task.build_model(cfg.model)\n"
        "    model.load_state_dict(  # -> load-model-state\n"
        "        torch.load(path)['model'], strict=True, model_cfg=cfg.model\n"
        "    )\n"
        "    return model\n"
    )
    _marked(source)
    check(_silenced(source.replace("from fairseq import tasks\n", "")))  # no fairseq


# -- optimizers known by what they are given ------------------------------------------------------
@pytest.mark.parametrize(
    ("rule", "held"),
    list(itertools.product(["Adagrad", "Adamax", "NAdam", "RAdam"], ["lambda", "def"])),
)
def test_an_optax_only_rule_given_its_parameters_in_a_name(rule: str, held: str) -> None:
    made = (
        f"torch.optim.{rule}(  # -> optimizer-torch-rules\n"
        "        params, lr=args.learning_rate\n    )"
    )
    source = "import torch\n" + (
        f"def make(args):\n    return lambda params: {made}\n"
        if held == "lambda"
        else f"def make(args, params):\n    optimizer = {made}\n    return optimizer\n"
    )
    _marked(source)
    (advice,) = [f.replacement for f in scan_text(source) if f.rule == "optimizer-torch-rules"]
    assert f"optax.{rule.lower()}(args.learning_rate)" in advice, advice


@pytest.mark.parametrize(
    "gathered",
    [
        "list(self.G.parameters()) + list(self.S.parameters())",
        "[*self.G.parameters(), *self.S.parameters()]",
        "itertools.chain(self.G.parameters(), self.S.parameters())",
    ],
)
def test_parameters_gathered_for_a_torch_optimizer_are_optimizer_parameters(gathered: str) -> None:
    source = (
        "import itertools\n"
        "from torch.optim import Adam\n"
        "from torch.optim.lr_scheduler import ExponentialLR\n"
        "class Trainer:\n"
        "    def __init__(self, lr):\n"
        f"        generator_params = {gathered}  # -> optimizer-parameters\n"
        "        self.G_opt = Adam(generator_params, lr=lr, betas=(0.5, 0.9))\n"
        f"        counted = {gathered}  # silent\n"
        "        self.size = sum(p.numel() for p in counted)\n"
        "        self.D_opt = Adam(self.D.parameters(), lr=lr)\n"
        "        self.sched = ExponentialLR(self.D_opt, gamma=0.9)\n"
    )
    _marked(source)
    # an optimizer handed to its scheduler is no gathering of parameters
    made = [f.replacement for f in scan_text(source) if f.line == 10]
    assert not any("the models whose parameters" in advice for advice in made), made


# -- the launcher's --local_rank option, on its own line ------------------------------------------
def test_a_local_rank_option_over_lines_is_reported_on_the_options_line() -> None:
    source = (
        "import argparse\n"
        "parser = argparse.ArgumentParser()\n"
        "parser.add_argument(\n"
        '    "--local_rank", type=int, default=0, help="local rank"  # -> dist-local-rank\n'
        ")\n"
        "parser.add_argument(\n"
        '    "--local_size", type=int, default=0  # silent\n'
        ")\n"
    )
    _marked(source)
