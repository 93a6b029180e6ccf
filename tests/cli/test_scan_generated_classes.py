"""``scan`` by class, not by case: each test generates the spellings of one shape of device
code (a table of shapes x spellings) and asserts every one is found under a row that fits.

Rounds five and six of unseen scripts (``test_scan_unseen_round5.py``, label6a's misses
of round six) missed lines one spelling away from lines already found: ``torch.mlu``
beside ``torch.xpu``, a device module held in ``self.device_module`` beside one held in a
local name, ``wrap(block)`` where ``wrap = partial(<an FSDP wrapper>, ...)``, an optimizer
built by the project's own factory. The generators below are those shapes with every
spelling the scanner must know, so the next line like a miss is already covered; each
has its negative twin (a non-device line of the same shape is not reported).
"""

from __future__ import annotations

import itertools

import pytest

from tests.support.cli import port_text, scan_text
from torch2jax_device.porting import catalog
from torch2jax_device.porting.catalog.availability import ACCELERATOR_MODULES


def rules_on(source: str, line: int) -> list[str]:
    return [f.rule for f in scan_text(source) if f.line == line]


def finding_on(source: str, line: int, rule: str) -> str:
    """The advice of the one finding of ``rule`` on ``line``."""
    found = [f for f in scan_text(source) if f.line == line and f.rule == rule]
    assert len(found) == 1, (source, [(f.line, f.rule) for f in scan_text(source)])
    return found[0].replacement


# -- every accelerator namespace x every query ------------------------------------------------
_QUERIES = {
    "is_available()": "xpu-npu-is-available",
    "device_count()": "xpu-npu-device-count",
    "current_device()": "xpu-npu-current-device",
    "set_device(local_rank)": "xpu-npu-current-device",
    "synchronize()": "xpu-npu-synchronize",
    "empty_cache()": "xpu-npu-other",
    "manual_seed(0)": "xpu-npu-other",
    "memory_allocated()": "xpu-npu-other",
    "get_device_name(0)": "xpu-npu-other",
    "mem_get_info()": "xpu-npu-other",
}
# The namespaces that are a module of calls (``torch_npu`` holds ``torch_npu.npu``).
_NAMESPACES = [m for m in ACCELERATOR_MODULES if m not in ("torch_npu", "torch_mlu", "torch_musa")]


def _import_of(namespace: str) -> str:
    root = namespace.rsplit(".", 1)[0] if namespace.startswith("torch.") else namespace
    return f"import {root}" if root != "torch" else "import torch"


@pytest.mark.parametrize(
    ("namespace", "query"), list(itertools.product(_NAMESPACES, _QUERIES)), ids=str
)
def test_every_accelerator_namespace_and_query_is_found_with_accelerator_advice(
    namespace: str, query: str
) -> None:
    source = f"import torch\n{_import_of(namespace)}\nresult = {namespace}.{query}\n"
    advice = finding_on(source, 3, _QUERIES[query])
    # the advice answers for the accelerator JAX has, never for CUDA alone
    assert "tj.cuda" not in advice and "tj.backends.cuda" not in advice


@pytest.mark.parametrize("query", ["synchronize()", "empty_cache()", "device_index(0)"])
def test_torch_accelerator_calls_get_accelerator_advice(query: str) -> None:
    advice = scan_text(f"import torch\nresult = torch.accelerator.{query}\n")[0].replacement
    assert "tj.backends.cuda" not in advice


def test_the_catch_all_of_cuda_no_longer_covers_the_other_accelerators() -> None:
    covered = catalog.get("cuda-other").torch_api
    assert not {"torch.mps.*", "torch.accelerator.*"} & set(covered)


# -- torch's device module through any accessor x its calls -----------------------------------
_ACCESSORS = {
    "a name": ("mod = getattr(torch, device_type)", "mod"),
    "getattr inline": ("", "getattr(torch, device_type)"),
    "get_device_module": ("", "torch.get_device_module(device)"),
    "a choice": ("mod = torch.cuda if device_type == 'cuda' else torch.xpu", "mod"),
    "an attribute": ("self.device_module = getattr(torch, device_type)", "self.device_module"),
}
_MODULE_CALLS = {
    "set_device(rank)": "accelerator-set-device-index",
    "device_count()": "accelerator-device-count",
    "synchronize()": "cuda-synchronize",
    "empty_cache()": "cuda-empty-cache",
    "manual_seed(0)": "cuda-manual-seed",
}


@pytest.mark.parametrize(
    ("accessor", "call"), list(itertools.product(_ACCESSORS, _MODULE_CALLS)), ids=str
)
def test_a_device_module_through_any_accessor_is_found(accessor: str, call: str) -> None:
    setup, receiver = _ACCESSORS[accessor]
    source = (
        "import torch\n"
        "class Trainer:\n"
        "    def __init__(self, device_type, device, rank):\n"
        f"        {setup or 'pass'}\n"
        f"        {receiver}.{call}\n"
    )
    assert _MODULE_CALLS[call] in rules_on(source, 5), source


def test_an_attribute_holding_something_else_is_not_a_device_module() -> None:
    source = (
        "import torch\n"
        "class Trainer:\n"
        "    def __init__(self, queue):\n"
        "        self.queue = queue\n"
        "        self.queue.synchronize()\n"
    )
    assert rules_on(source, 5) == []


# -- a callable of a row called through a name ------------------------------------------------
_CALLABLES = [
    ("from torch.distributed.fsdp import FullyShardedDataParallel", "FullyShardedDataParallel"),
    ("from torch.distributed.fsdp.wrap import wrap as fsdp_wrap", "fsdp_wrap"),
    (
        "from lightning.fabric.strategies.xla_fsdp import _activation_checkpointing_auto_wrapper",
        "_activation_checkpointing_auto_wrapper",
    ),
    ("import torch", "torch.cuda.synchronize"),
    ("import torch", "torch.cuda.set_device"),
]
_BINDINGS = {
    "partial": "wrap = partial({callable}, set())",
    "one branch of two": "wrap = options.pop('wrapper') if options else {callable}",
    "an if/else": (
        "if options:\n        wrap = options.pop('wrapper')\n    else:\n        wrap = {callable}"
    ),
}


@pytest.mark.parametrize(
    ("imported", "binding"), list(itertools.product(_CALLABLES, _BINDINGS)), ids=str
)
def test_a_callable_of_a_row_called_through_a_name_is_found(
    imported: tuple[str, str], binding: str
) -> None:
    import_line, callable_ = imported
    source = (
        f"from functools import partial\n{import_line}\n"
        "def shard(block, options):\n"
        f"    {_BINDINGS[binding].format(callable=callable_)}\n"
        "    return wrap(block, **options)\n"
    )
    lines = source.splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "return wrap(" in text)
    found = [f for f in scan_text(source) if f.line == line]
    assert found and not any(f.fixable for f in found), source  # advice: known at run time
    assert "wrap may be" in found[0].reason


def test_a_name_bound_to_no_row_is_not_reported() -> None:
    source = (
        "from functools import partial\n"
        "import torch\n"
        "def shard(block, options):\n"
        "    wrap = partial(print, sep='') if options else len\n"
        "    return wrap(block)\n"
    )
    assert rules_on(source, 5) == []


# -- an optimizer built by the project's own factory -------------------------------------------
_FACTORIES = [
    "optimizer = instantiate_torch_optimizer(name, model.parameters(), **kwargs)",
    "optimizer = helpers.build_optimizer(model.parameters(), lr=lr)",
    "opt = helpers.make(model.parameters(), lr=lr)",
    "self.optim = helpers.create(model.parameters())",
    "optimizer = Lion(model.parameters(), lr=lr)",
]
_NOT_OPTIMIZERS = [
    "clip_grad(model.parameters(), 1.0)",
    "total = helpers.count(model.parameters())",
    "helpers.init_weights(model.parameters())",
]


@pytest.mark.parametrize("line", _FACTORIES)
def test_parameters_handed_to_an_optimizer_factory_are_found(line: str) -> None:
    source = (
        "import torch\nfrom project import helpers, instantiate_torch_optimizer, Lion, clip_grad\n"
        f"model = torch.nn.Linear(2, 2)\n{line}\n"
    )
    assert "optimizer-parameters" in rules_on(source, 4)


@pytest.mark.parametrize("line", _NOT_OPTIMIZERS)
def test_parameters_handed_to_other_helpers_are_not(line: str) -> None:
    source = (
        "import torch\nfrom project import helpers, clip_grad\n"
        f"model = torch.nn.Linear(2, 2)\n{line}\n"
    )
    assert rules_on(source, 4) == []


# -- a cast to a dtype held in a name that says so ----------------------------------------------
@pytest.mark.parametrize(
    ("argument", "rule"),
    [
        ("dtype", "tensor-to-dtype"),
        ("target_dtype", "tensor-to-dtype"),
        ("self.param_dtype", "tensor-to-dtype"),
        ("cfg.compute_dtype", "tensor-to-dtype"),
        ("device", "tensor-to-device"),
        ("self.device", "tensor-to-device"),
        ("dtype_or_device", "tensor-to-device"),
    ],
)
def test_a_move_to_a_named_dtype_is_a_cast(argument: str, rule: str) -> None:
    source = (
        "import torch\n"
        "def f(self, cfg, x, dtype, device, target_dtype, dtype_or_device):\n"
        f"    return x.to({argument})\n"
    )
    assert rules_on(source, 3) == [rule]


def test_a_dtype_named_variable_holding_a_device_string_stays_a_move() -> None:
    source = 'import torch\ndtype = "cuda"\ny = torch.ones(2).to(dtype)\n'
    assert rules_on(source, 3) != ["tensor-to-dtype"]


# -- a torch mode of the project's own that gives factories a device -----------------------------
@pytest.mark.parametrize(
    "base",
    [
        "torch.overrides.TorchFunctionMode",
        "torch.utils._python_dispatch.TorchDispatchMode",
        "torch.utils._device.DeviceContext",
    ],
)
def test_a_mode_that_sets_the_device_is_a_default_device(base: str) -> None:
    source = (
        "import torch\n"
        f"class OnDevice({base}):\n"
        "    def __init__(self, device):\n"
        "        self.device = device\n"
        "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
        "        kwargs = kwargs or {}\n"
        "        kwargs['device'] = self.device\n"
        "        return func(*args, **kwargs)\n"
    )
    assert rules_on(source, 2) == ["default-device-context"]
    assert "tj.device(" in finding_on(source, 2, "default-device-context")


def test_a_mode_without_a_device_is_not() -> None:
    source = (
        "import torch\n"
        "class Logged(torch.overrides.TorchFunctionMode):\n"
        "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
        "        print(func)\n"
        "        return func(*args, **(kwargs or {}))\n"
    )
    assert rules_on(source, 2) == []


def test_the_target_of_a_jax_arrays_move_is_not_an_escape() -> None:
    """``jnp.ones(3).to(x)``: only tj.to_device moves a JAX array, and it takes an array as
    its target, so ``x`` becoming one does not hold back ``x``'s own rewrite."""
    source = (
        "import jax.numpy as jnp\n"
        'x = jnp.ones(3).to("cuda:1")\n'
        "jnp.ones(3).to(x)\n"
        "y = jnp.ones(3).to(x)\n"
        "print(y)\n"
    )
    ported = port_text(source)
    assert 'x = tj.to_device(jnp.ones(3), "cuda:1")' in ported
    assert "y = tj.to_device(jnp.ones(3), x)" in ported
    held = port_text(
        'import torch\nimport jax.numpy as jnp\nx = jnp.ones(3).to("cuda:1")\ntorch.ones(3).to(x)\n'
    )
    assert 'x = jnp.ones(3).to("cuda:1")' in held  # a torch tensor's .to cannot take it


# -- round six (label6a's development set): torch's objects made elsewhere -----------------------
# A scaler or optimizer handed in (a parameter, an attribute, an annotated argument), its
# methods x how it arrives.
_ARRIVALS = {
    "a parameter": ("def step(scaler, optimizer, loss):", "scaler", "optimizer"),
    "an annotated parameter": (
        "def step(s: Optional[torch.amp.GradScaler], o: torch.optim.Optimizer, loss):",
        "s",
        "o",
    ),
    "an attribute": ("def step(self, loss):", "self.grad_scaler", "self.optimizer"),
    "a model's attribute": ("def step(model, optimizer, loss):", "model.fp16_scaler", "optimizer"),
}
_SCALER_CALLS = [
    "{s}.scale(loss).backward()",
    "{s}.unscale_({o})",
    "{s}.step({o})",
    "{s}.update()",
    "state = {s}.state_dict()",
    "{s}.load_state_dict(state)",
]
_OPTIMIZER_CALLS = ["state = {o}.state_dict()", "{o}.load_state_dict(state)"]


@pytest.mark.parametrize(
    ("arrival", "call"),
    [
        *itertools.product(_ARRIVALS, _SCALER_CALLS),
        *itertools.product(_ARRIVALS, _OPTIMIZER_CALLS),
    ],
    ids=str,
)
def test_a_scaler_or_optimizer_made_elsewhere_is_found(arrival: str, call: str) -> None:
    signature, scaler, optimizer = _ARRIVALS[arrival]
    source = (
        "import torch\nfrom typing import Optional\n"
        f"{signature}\n    {call.format(s=scaler, o=optimizer)}\n"
    )
    expected = "grad-scaler" if call in _SCALER_CALLS else "optimizer-state-dict"
    assert expected in rules_on(source, 4), source


@pytest.mark.parametrize(
    "line",
    [
        "scaler.fit_transform(data)",  # scikit-learn's StandardScaler
        "optimizer.state_dict()",  # Flax's nnx.Optimizer, known for what it is
    ],
)
def test_objects_of_the_same_name_from_elsewhere_are_not(line: str) -> None:
    source = (
        "from flax import nnx\nimport optax\n"
        "optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)\n"
        f"def f(scaler, data):\n    {line}\n"
    )
    assert rules_on(source, 5) == []


def test_a_reexported_import_is_the_import() -> None:
    source = (
        "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n"
        "ShardedGradScaler = ShardedGradScaler\n"
    )
    assert rules_on(source, 2) == ["grad-scaler"]


# -- the launcher's variables through a loop's variable -------------------------------------------
_TABLES = {
    "a for loop": ("for v in {names}:", "    "),
    "a for loop over a name": ("NAMES = {names}\nfor v in NAMES:", "    "),
}
_ACCESSES = {
    "read": ("value = int(os.environ[v])", {"dist-env", "dist-local-rank"}),
    "tested": ("if v in os.environ: pass", {"dist-env"}),
    "got": ("value = os.environ.get(v)", {"dist-env", "dist-local-rank"}),
}


@pytest.mark.parametrize(
    ("table", "access", "names"),
    [
        *itertools.product(
            ["a for loop"],
            _ACCESSES,
            ["('LOCAL_RANK', 'MPI_LOCALRANKID', 'SLURM_LOCALID')", "('RANK', 'PMI_RANK')"],
        ),
        ("a for loop over a name", "read", "('WORLD_SIZE', 'PMI_SIZE')"),
    ],
    ids=str,
)
def test_a_launcher_variable_read_through_a_loops_variable_is_found(
    table: str, access: str, names: str
) -> None:
    loop, indent = _TABLES[table]
    code, rules = _ACCESSES[access]
    source = f"import os\n{loop.format(names=names)}\n{indent}{code}\n"
    line = len(source.splitlines())
    assert set(rules_on(source, line)) & rules, source


def test_each_loop_reads_its_own_table() -> None:
    source = (
        "import os\n"
        "def info():\n"
        "    for v in ('LOCAL_RANK', 'SLURM_LOCALID'):\n"
        "        local_rank = int(os.environ[v])\n"
        "    for v in ('RANK', 'SLURM_PROCID'):\n"
        "        rank = int(os.environ[v])\n"
    )
    assert rules_on(source, 4) == ["dist-local-rank"] and rules_on(source, 6) == ["dist-env"]


def test_a_loop_over_other_variables_and_a_dict_of_them_written_at_once() -> None:
    source = (
        "import os\n"
        "for v in ('HOME', 'PATH'):\n"
        "    x = os.environ[v]\n"
        "env_vars = {'MASTER_ADDR': host, 'RANK': str(rank)}\n"
        "os.environ.update(env_vars)\n"
    )
    assert rules_on(source, 3) == []
    assert "dist-env" in rules_on(source, 5)


# -- a device's name taken apart, tested, rebuilt, defaulted ---------------------------------------
@pytest.mark.parametrize(
    ("line", "rule"),
    [
        ("device_type, *index = device.split(':', maxsplit=1)", "device-string-logic"),
        ("kind, _, index = self.device.partition(':')", "device-string-logic"),
        ("ok = device_type not in ('cpu', 'mps')", "device-string-logic"),
        ("ok = device_type in ['cuda', 'xpu']", "device-string-logic"),
        ("backend = backends.get(device_type, 'gloo')", "device-string-logic"),
        ("backend = backends[device_type]", "device-string-logic"),
        ("device = f'{device_type}:{local_rank}'", "device-string"),
        ("device = getattr(args, 'device', 'cuda')", "device-string"),
    ],
)
def test_a_device_name_taken_apart_or_rebuilt_is_found(line: str, rule: str) -> None:
    source = (
        "import torch\n"
        "backends = {'cuda': 'nccl', 'cpu': 'gloo', 'xpu': 'xccl'}\n"
        "def setup(self, args, device, device_type, local_rank):\n"
        f"    {line}\n"
    )
    assert rule in rules_on(source, 4), source


@pytest.mark.parametrize(
    "signature",
    [
        "def load(path, device='cuda'):",
        "def load(path, device: str = 'cuda'):",
        "def load(path, *, device='cpu'):",
        "def load(path, device_type='mps', other=1):",
    ],
)
def test_a_device_name_as_a_parameters_default_is_found(signature: str) -> None:
    assert "device-string" in rules_on(f"import torch\n{signature}\n    return path\n", 2)


@pytest.mark.parametrize(
    "line",
    [
        "mode = table.get(split, 'train')",  # a table not keyed by devices
        "name, _, rest = path.partition(':')",  # not a device
        "ok = split not in ('train', 'val')",
        "value = getattr(args, 'mode', 'cuda')",  # not the device setting
    ],
)
def test_other_names_taken_apart_are_not(line: str) -> None:
    source = f"table = {{'train': 1, 'val': 2}}\ndef f(args, split, path):\n    {line}\n"
    assert rules_on(source, 3) == []


def test_a_default_of_another_parameter_is_not() -> None:
    assert rules_on("def load(path, mode='cpu'):\n    return path\n", 1) == []


# -- a device handed to the project's own helper, by keyword ---------------------------------------
_HELPER_CALLS = {
    "model, positional = create_model(name, device=device)": "module-device-kwarg",
    "ema = ModelEMA(model, decay, device=self.device)": "module-device-kwarg",
    "batch = task.prepare_batch(batch, device=device)": "tensor-to-device",
    "opt = create_optimizer(args, model, device=args.device)": "factory-device",
    "rates = helpers.schedule(cfg, device='cuda:0')": "factory-device",
    "task.prepare_distributed(device_ids=[device], **ddp_args)": "dist-ddp-gradient",
    "wrapped = wrappers.ddp(model, output_device=local_rank)": "dist-ddp-gradient",
}


@pytest.mark.parametrize("line", list(_HELPER_CALLS))
def test_a_device_handed_to_a_project_helper_is_found(line: str) -> None:
    source = (
        "import torch\nfrom project import create_model, ModelEMA, create_optimizer, helpers, "
        "wrappers\n"
        f"def main(self, task, args, cfg, model, batch, device, decay, ddp_args, local_rank):\n"
        f"    {line}\n"
    )
    found = [f for f in scan_text(source) if f.line == 4]
    assert [f.rule for f in found] == [_HELPER_CALLS[line]], source
    assert not found[0].fixable and "port it where it is defined" in found[0].reason


@pytest.mark.parametrize(
    "line",
    [
        "print(x, device=device)",  # a builtin
        "log.info(x, mode=device)",  # not a device keyword
        "y = helpers.run(x, device=level)",  # a value not named or made as a device
        "y = local(x, device=device)",  # the file's own function: its body is found
        "y = partial(helpers.run, device=device)",  # a function kept, not called
    ],
)
def test_other_device_keywords_are_not(line: str) -> None:
    source = (
        "import torch\nfrom functools import partial\nfrom project import helpers, log\n"
        "def local(x, device):\n    return x\n"
        f"def main(x, device, level):\n    {line}\n"
    )
    assert rules_on(source, 7) == []


# -- an autocast, a sync toggle and FSDP applied by the project's own code -------------------------
@pytest.mark.parametrize(
    ("lines", "rule"),
    [
        ("autocast = get_autocast(args.precision, device_type='cuda')", "autocast"),
        ("with autocast():\n        pass", "autocast"),
        ("with self.amp_autocast(enabled=True):\n        pass", "autocast"),
        ("model.set_requires_gradient_sync(False)", "ddp-no-sync"),
        ("task.prepare_fsdp(model, **fsdp_kwargs)", "dist-fsdp"),
        ("assert not model.device_ids", "dist-ddp-gradient"),
        ("loader = make_data_loader(dataset, num_workers=cfg.workers)", "dataloader-workers"),
        ("plugin = getattr(accelerator.state, 'fsdp_plugin', None)", "library-strategy"),
    ],
)
def test_the_projects_own_device_work_is_found(lines: str, rule: str) -> None:
    source = (
        "import torch\nfrom project import get_autocast, make_data_loader\n"
        "def main(self, task, args, cfg, model, dataset, autocast, fsdp_kwargs, accelerator):\n"
        f"    {lines}\n"
    )
    assert rule in rules_on(source, 4), source


def test_the_files_own_fsdp_method_is_not_reported_at_its_call() -> None:
    source = (
        "import torch\n"
        "class Task:\n"
        "    def prepare_fsdp(self, model):\n"
        "        return model\n"
        "    def run(self, model):\n"
        "        return self.prepare_fsdp(model)\n"
    )
    assert rules_on(source, 6) == []


# -- a device_map carried in a dict of keyword arguments; Hugging Face's Trainer -------------
_CARRIERS = {
    "a dict literal": "kwargs = {'device_map': device_map, **kwargs}",
    "a key written": "kwargs['device_map'] = {'': device}",
    "dict(...)": "kwargs = dict(device_map={'': device}, load_in_4bit=True)",
    "an update": "kwargs.update(dict(device_map='auto'))",
}


@pytest.mark.parametrize("carrier", list(_CARRIERS))
@pytest.mark.parametrize(
    "call",
    [
        "model = AutoModelForCausalLM.from_pretrained(path, **kwargs)",
        "model = ProjectModel.from_pretrained(path, low_cpu_mem_usage=True, **kwargs)",
    ],
)
def test_a_device_map_handed_on_in_a_dict_is_found(carrier: str, call: str) -> None:
    source = (
        "from transformers import AutoModelForCausalLM\nfrom project import ProjectModel\n"
        "def load(path, device, device_map, kwargs):\n"
        f"    {_CARRIERS[carrier]}\n"
        f"    {call}\n"
    )
    assert "library-device" in rules_on(source, 5), source


def test_a_dict_without_a_device_map_handed_on_is_not() -> None:
    source = (
        "from transformers import AutoModelForCausalLM\n"
        "def load(path):\n"
        "    kwargs = {'revision': 'main'}\n"
        "    return AutoModelForCausalLM.from_pretrained(path, **kwargs)\n"
    )
    assert rules_on(source, 4) == []


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        ("if device_map != 'auto':\n        pass", "library-device"),
        ("if trainer.deepspeed:\n        pass", "library-strategy"),
        ("trainer.save_model(output_dir)", "library-checkpoint"),
        ("trainer._save(output_dir, state_dict=state)", "library-checkpoint"),
        ("if trainer.args.local_rank in (0, -1):\n        pass", "library-process"),
        ("rank = training_args.local_rank", "library-process"),
        ("if self.trainer.args.should_save:\n        pass", "library-process"),
        ("trainer = ProjectTrainer(model=model, args=training_args)", "library-launcher"),
    ],
)
def test_hugging_faces_trainer_and_a_device_map_are_found(line: str, rule: str) -> None:
    source = (
        "from project import ProjectTrainer\n"
        "def save(self, trainer, training_args, model, device_map, output_dir, state):\n"
        f"    {line}\n"
    )
    assert rule in rules_on(source, 3), source


def test_a_device_map_default_is_found() -> None:
    source = "def load(path, device_map='auto', device='cuda'):\n    return path\n"
    assert sorted(rules_on(source, 1)) == ["device-string", "library-device"]


def test_another_trainer_keeps_its_own_methods() -> None:
    source = (
        "class Trainer:\n"
        "    def prepare(self, batch):\n"
        "        return batch\n"
        "trainer = Trainer()\n"
        "batch = trainer.prepare([1])\n"
        "trainer.save_checkpoint('ckpt')\n"
    )
    assert [f.line for f in scan_text(source)] == []


# -- advice that fits the line: each collective x how it is reached --------------------------------
_COLLECTIVES = {
    # call (written with the receiver {d}), what the advice must say, names it must use
    "{d}.broadcast_object_list(objects, src=src)": ("broadcast_one_to_all", ["objects", "src"]),
    "{d}.all_gather_object(objects, obj)": ("process_allgather(obj)", ["objects"]),
    "{d}.gather_object(obj, gathered, dst=0)": ("process_allgather(obj)", ["gathered"]),
    "{d}.all_gather(outputs, tensor)": ("process_allgather(tensor)", ["outputs"]),
    "{d}.reduce(values, dst=0)": ("all_reduce(values)", ["values"]),
    "{d}.all_reduce(v)": ("all_reduce(v)", ["v"]),
    "{d}.barrier()": ("tj.distributed.barrier()", []),
    "{d}.monitored_barrier()": ("tj.distributed.barrier()", []),
    "ok = {d}.is_available()": ("available = True", []),
    "b = {d}.get_backend()": ("XLA picks", []),
    "g = {d}.new_group([0, 1])": ("mesh", []),
    "w = {d}.group.WORLD": ("mesh", []),
}
_LIBRARY_COLLECTIVES = {
    "accelerator.wait_for_everyone()": "tj.distributed.barrier()",
    "fabric.barrier()": "tj.distributed.barrier()",
    "preds = accelerator.pad_across_processes(preds, dim=1)": "pad",
    "x = accelerator.gather(y)": "process_allgather(y)",
    "x = accelerator.gather_for_metrics(y)": "process_allgather(y)",
    "total = fabric.all_reduce(loss)": "all_reduce(loss",
    "with deepspeed.zero.GatheredParameters([param]):\n    pass": "sharded",
}


@pytest.mark.parametrize("alias", ["dist", "torch.distributed"])
@pytest.mark.parametrize("call", list(_COLLECTIVES))
def test_a_collectives_advice_is_written_from_its_own_call(call: str, alias: str) -> None:
    imported = "import torch.distributed as dist" if alias == "dist" else "import torch"
    source = f"{imported}\n{call.format(d=alias)}\n"
    (finding,) = [f for f in scan_text(source) if f.line == 2]
    says, names = _COLLECTIVES[call]
    assert says in finding.replacement, finding.replacement
    assert "process_allgather(t)" not in finding.replacement  # a name not on the line
    for name in names:
        assert name in finding.replacement


@pytest.mark.parametrize("call", list(_LIBRARY_COLLECTIVES))
def test_a_librarys_collective_gets_advice_for_what_it_does(call: str) -> None:
    source = (
        "import deepspeed\nfrom accelerate import Accelerator\nimport lightning as L\n"
        f"accelerator, fabric = Accelerator(), L.Fabric()\n{call}\n"
    )
    found = [f for f in scan_text(source) if f.line == 5]
    assert found and _LIBRARY_COLLECTIVES[call] in found[0].replacement, found


def test_a_slurm_variables_test_names_slurm_not_torchrun() -> None:
    found = scan_text("import os\nif 'SLURM_PROCID' in os.environ:\n    pass\n")
    assert "srun" in found[0].replacement
    assert "torchrun and torch2jax-device run set it" not in found[0].replacement


# -- no finding where the line is no device code of its own ---------------------------------------
@pytest.mark.parametrize(
    "line",
    [
        "super().load_state_dict(state_dict)",  # a trainer's own, handing on to its base's
        "ckpt = torch.load(p, map_location=lambda s, loc: s.cuda(gpu))",  # torch.load's only
    ],
)
def test_a_line_covered_elsewhere_or_not_a_models_is_not_reported_again(line: str) -> None:
    source = (
        "import torch\nclass Trainer(Base):\n"
        f"    def load(self, state_dict, p, gpu):\n        {line}\n"
    )
    rules = rules_on(source, 4)
    assert "load-model-state" not in rules and "tensor-cuda" not in rules


@pytest.mark.parametrize(
    "line", ["model = SSLMetaArch(cfg).to(device)", "agent = Agent(envs).to(device)"]
)
def test_a_class_made_inline_and_moved_is_a_model(line: str) -> None:
    source = f"import torch\nfrom project import SSLMetaArch, Agent\n{line}\n"
    assert rules_on(source, 3) == ["module-to"]


# -- every device keyword x every call form x every value source -----------------------------------
_DEVICE_KEYWORDS = {
    "device": ["'cuda'", "torch.device('cuda')", "device", "self.device", "args.device", "dev"],
    "map_location": ["'cpu'", "device", "torch.device('cpu')", "lambda s, loc: s"],
    "device_map": ["'auto'", "{'': device}", "device_map"],
    "device_ids": ["[local_rank]", "[device]"],
    "output_device": ["local_rank"],
}
_CALL_FORMS = [
    "helper({kw}={v})",
    "obj.method(x, {kw}={v})",
    "pkg.mod.func(x, {kw}={v})",
    "Builder(x, {kw}={v})",
    "y = helper(x, {kw}={v})",
]


@pytest.mark.parametrize("form", _CALL_FORMS)
@pytest.mark.parametrize(
    ("keyword", "value"), [(k, v) for k, values in _DEVICE_KEYWORDS.items() for v in values]
)
def test_every_device_keyword_to_any_call_is_found(keyword: str, value: str, form: str) -> None:
    source = (
        "import torch\nimport pkg.mod\nfrom project import helper, Builder\n"
        "def f(self, obj, x, args, device, dev, local_rank, device_map):\n"
        f"    {form.format(kw=keyword, v=value)}\n"
    )
    assert rules_on(source, 5), source


# -- a move however it is spelled: bound, unbound, by name, in a container -------------------------
_MOVE_SPELLINGS = {
    "x.to(device)": "tensor-to-device",
    "x.to(device=device, dtype=dtype)": "tensor-to-device-dtype",
    "x.cuda(device=0)": "tensor-cuda",
    "x.data.cuda()": "tensor-cuda",
    "x.float().cuda()": "tensor-cuda",
    "torch.Tensor.to(x, device)": "tensor-to-device",
    "torch.Tensor.cuda(x)": "tensor-cuda",
    "list(map(torch.Tensor.cuda, xs))": "tensor-cuda",
    "torch.nn.Module.to(model, device)": "module-to",
    'getattr(x, "cuda")()': "tensor-cuda",
    'getattr(x, "to")(device)': "tensor-to-device",
    "[t.to(device) for t in xs]": "tensor-to-device",
    "{k: v.to(device) for k, v in batch.items()}": "tensor-to-device",
    "list(map(lambda t: t.cuda(), xs))": "tensor-cuda",
    "tuple(t.cpu() for t in xs)": "tensor-cpu",
    "batch['x'].cuda()": "tensor-cuda",
    "self.model.to(device)": "module-to",
}


@pytest.mark.parametrize("expression", list(_MOVE_SPELLINGS))
def test_a_move_is_found_however_it_is_spelled(expression: str) -> None:
    source = (
        f"import torch\ndef f(self, x, xs, batch, model, device, dtype):\n    y = {expression}\n"
    )
    assert _MOVE_SPELLINGS[expression] in rules_on(source, 3), source


def test_an_attribute_asked_for_by_name_is_no_move() -> None:
    source = "import torch\ndef f(x):\n    return getattr(x, 'shape')\n"
    assert rules_on(source, 3) == []


def test_jax_codes_own_device_keyword_is_no_project_helper() -> None:
    """flax's ``jit(..., device=device)``, or any call in a file of JAX and no torch."""
    source = (
        "import jax\nfrom flax import nnx\n"
        "def compile(f, device, wrapped_cls):\n"
        "    g = jax.jit(f, device=device)\n"
        "    return wrapped_cls(f, device=device)\n"
    )
    assert [f.line for f in scan_text(source)] == []
