"""``scan`` by class on round seven's second development set (label7c: OpenRLHF, verl, FLUX,
DeepSeek-V3, Janus, CogVideoX, Wan2.1, Petals): each class's spellings, crossed with the
places a script writes them, and its non-device twin that stays silent.

The classes: Ray's GPU requests (``@ray.remote(num_gpus=1)``, ``.options(num_gpus=n)``, a
placement group's ``{"GPU": 1}`` bundles), the devices it gave (``ray.get_gpu_ids()``,
``get_runtime_context().get_accelerator_ids()``) and its collectives; xDiT's (xFuser's)
start-up and parallel state; DeepSpeed's engine in a project's names (``model.backward(
loss)``, ``model.step()``, ``engine.compile()``, ``get_global_grad_norm()``), AutoTP's
``tp_model_init``; Transformers' ``enable_full_determinism``; Accelerate's ``Accelerator``
imported from its own module and its ``native_amp`` switched off; torch's device module
handed out by a project's helper (verl's ``get_torch_device().empty_cache()``);
``hasattr(torch, "npu")``; ``map(torch.device, names)``; a mesh's axis queried
(``mesh["dp"].get_group()``); DDP's ``no_sync`` looked up with ``getattr``; safetensors'
``load_model(model, path)``; FSDP's ``_free_storage``; ``torch.device(f"{name}:{i}")``;
a helper returning a visible-devices variable's name; torch's private
``_set_allocator_settings``.

Each line that a class covers is marked in its snippet with ``# -> rule``, each twin
with ``# silent``; the snippets are real-shaped (the repositories' own spellings).
"""

from __future__ import annotations

import ast
import itertools
import re

import pytest

from tests.support.cli import port_text, scan_text
from torch2jax_device.porting import scanner

_MARK = re.compile(r"#\s*(->\s*(?P<rule>[\w-]+)|(?P<silent>silent))\s*$")


def marks(source: str) -> tuple[dict[int, str], list[int]]:
    """The lines marked ``# -> rule`` (with their rule) and those marked ``# silent``."""
    expected: dict[int, str] = {}
    silent: list[int] = []
    for number, text in enumerate(source.splitlines(), 1):
        found = _MARK.search(text)
        if found and found["rule"]:
            expected[number] = found["rule"]
        elif found:
            silent.append(number)
    return expected, silent


def check(source: str) -> None:
    """Every marked line gets its rule, advice only (``--diff`` leaves it), and every
    line marked silent gets nothing."""
    findings = scan_text(source)
    expected, silent = marks(source)
    assert expected or silent
    for line, rule in expected.items():
        on_line = [f for f in findings if f.line == line and f.rule == rule]
        assert on_line, (line, rule, [(f.line, f.rule) for f in findings])
        for finding in on_line:
            assert is_code_or_instruction(finding.replacement), finding.replacement
    for line in silent:
        assert [f.rule for f in findings if f.line == line] == [], (line, source)


def is_code_or_instruction(advice: str) -> bool:
    """Python a porter can paste, or a sentence of instruction ("word: ...")."""
    try:
        ast.parse(advice)
    except SyntaxError:
        return re.match(r"^[a-z][a-z' ]*: ", advice) is not None
    return True


def advice_only(source: str) -> None:
    """``scan --diff`` changes nothing on the marked lines."""
    expected, _ = marks(source)
    ported = port_text(source).splitlines()
    original = source.splitlines()
    for line in expected:
        assert ported[line - 1] == original[line - 1], (line, ported[line - 1])


def marked(source: str) -> None:
    """``check`` and ``advice_only``: every mark found, as advice."""
    check(source)
    advice_only(source)


def silenced(source: str) -> str:
    """``source`` with every mark made ``# silent`` (a class's twin)."""
    return re.sub(r"#\s*->\s*[\w-]+\s*$", "# silent", source, flags=re.MULTILINE)


# -- Ray: GPU requests, the devices given, the collectives -----------------------------------
_RAY_IMPORTS = {
    "import ray": "import ray\n",
    "import ray as r": "import ray as r\n",
}
_RAY_REQUESTS = {
    "an actor's decorator": (
        "@{ray}.remote(num_gpus=1)  # -> library-launcher\n"
        "class Actor:\n"
        "    pass\n"
        "@{ray}.remote(num_cpus=2)  # silent\n"
        "class CpuActor:\n"
        "    pass\n"
        "@{ray}.remote  # silent\n"
        "def task():\n"
        "    pass\n"
    ),
    "a task's decorator, fractional": (
        "@{ray}.remote(num_gpus=0.5, max_retries=3)  # -> library-launcher\n"
        "def infer(batch):\n"
        "    return batch\n"
        "@{ray}.remote(num_gpus=0)  # silent\n"
        "def on_cpu(batch):\n"
        "    return batch\n"
    ),
    "options, multi-line": (
        "def start(actor_type, n, pg):\n"
        "    handle = actor_type.options(\n"
        "        num_cpus=n,  # silent\n"
        "        num_gpus=n,  # -> library-launcher\n"
        "        resources=None,\n"
        "    ).remote(0)\n"
        "    return handle\n"
    ),
    "options, one line": (
        "def start(actor_type, n):\n"
        "    return actor_type.options(num_gpus=n).remote()  # -> library-launcher\n"
    ),
    "placement-group bundles": (
        "from ray.util.placement_group import placement_group\n"
        "def group(nodes, per_node):\n"
        '    bundles = [{{"GPU": 1, "CPU": 1}} for _ in range(nodes)]  # -> library-launcher\n'
        '    cpu_only = [{{"CPU": 4}} for _ in range(nodes)]  # silent\n'
        '    return placement_group(bundles, strategy="PACK")\n'
    ),
    "the devices given": (
        "def local_rank(device_name):\n"
        "    first = {ray}.get_gpu_ids()[0]  # -> library-device\n"
        "    ids = {ray}.get_runtime_context().get_accelerator_ids()  # -> library-device\n"
        "    node = {ray}.get_runtime_context().get_node_id()  # silent\n"
        "    return int(ids[device_name][0]), first, node\n"
    ),
}


@pytest.mark.parametrize(
    ("spelling", "imported"), list(itertools.product(_RAY_REQUESTS, _RAY_IMPORTS))
)
def test_rays_gpu_requests_and_devices_are_the_launchers(spelling: str, imported: str) -> None:
    alias = "r" if imported == "import ray as r" else "ray"
    source = _RAY_IMPORTS[imported] + _RAY_REQUESTS[spelling].format(ray=alias)
    check(source)
    advice_only(source)


@pytest.mark.parametrize("spelling", ["options, multi-line", "placement-group bundles"])
def test_gpu_keywords_and_bundles_without_ray_are_silent(spelling: str) -> None:
    # a scheduler of another library: its num_gpus= and {"GPU": 1} ask nothing of Ray
    source = "import torch\n" + _RAY_REQUESTS[spelling].format(ray="ray").replace(
        "-> library-launcher", "silent"
    ).replace("from ray.util.placement_group import placement_group\n", "")
    check(source)


_RAY_COLLECTIVES = {
    "module imported as a name": "import ray.util.collective as collective\n",
    "from ray.util": "from ray.util import collective\n",
}


@pytest.mark.parametrize("imported", _RAY_COLLECTIVES)
def test_rays_collectives_are_library_collective(imported: str) -> None:
    source = (
        "import torch\n"
        f"{_RAY_COLLECTIVES[imported]}"
        "def init(world_size, rank, group_name):\n"
        '    collective.init_collective_group(world_size=world_size, rank=rank, backend="nccl", '
        "group_name=group_name)  # -> library-collective\n"
        "def update(shape, group_name):\n"
        '    weight = torch.empty(shape, device="cuda")\n'
        "    collective.broadcast(weight, 0, group_name=group_name)  # -> library-collective\n"
    )
    check(source)
    # a project's own module of the same name
    twin = source.replace(_RAY_COLLECTIVES[imported], "from mypackage import collective\n")
    check(twin.replace("-> library-collective", "silent"))


# -- xDiT (xFuser) and DeepSpeed's AutoTP, Transformers' determinism ---------------------------
def test_xfusers_start_up_and_parallel_state() -> None:
    source = (
        "import torch.distributed as dist\n"
        "def start(args):\n"
        "    from xfuser.core.distributed import (\n"
        "        init_distributed_environment,\n"
        "        initialize_model_parallel,\n"
        "        get_sequence_parallel_world_size,\n"
        "    )\n"
        "    init_distributed_environment(  # -> library-launcher\n"
        "        rank=dist.get_rank(), world_size=dist.get_world_size())\n"
        "    initialize_model_parallel(  # -> megatron-parallel-state\n"
        "        sequence_parallel_degree=dist.get_world_size(),\n"
        "        ring_degree=args.ring_size,\n"
        "        ulysses_degree=args.ulysses_size,\n"
        "    )\n"
        "    return get_sequence_parallel_world_size()  # -> megatron-parallel-state\n"
    )
    check(source)
    advice_only(source)
    # the project's own functions of those names
    twin = (
        "def init_distributed_environment(rank, world_size):\n"
        "    return rank, world_size\n"
        "init_distributed_environment(rank=0, world_size=1)  # silent\n"
    )
    check(twin)


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        (
            "tp_model = deepspeed.tp_model_init(model=model, tp_size=2, dtype=torch.bfloat16)",
            "library-prepare",
        ),
        ("transformers.enable_full_determinism(seed)", "library-seed"),
    ],
)
def test_a_librarys_own_function_by_its_name(line: str, rule: str) -> None:
    source = (
        "import deepspeed\nimport torch\nimport transformers\n"
        f"def setup(model, seed):\n    {line}  # -> {rule}\n"
    )
    check(source)
    advice_only(source)


# -- DeepSpeed's engine in a project's names ----------------------------------------------------
_ENGINE_CALLS = {
    "backward": ("{model}.backward(loss)", "library-backward"),
    "step": ("{model}.step()", "library-backward"),
    "compile": ("{model}.compile()", "torch-compile"),
}
_ENGINE_NAMES = ("model", "engine", "self.model_engine", "actor.model")


@pytest.mark.parametrize(("call", "name"), list(itertools.product(_ENGINE_CALLS, _ENGINE_NAMES)))
def test_deepspeeds_engine_in_a_projects_name(call: str, name: str) -> None:
    spelled, rule = _ENGINE_CALLS[call]
    body = spelled.format(model=name)
    source = (
        "import deepspeed\nimport torch.nn as nn\n"
        f"def train(self, actor, model: nn.Module, engine, loss):\n    {body}  # -> {rule}\n"
    )
    check(source)
    advice_only(source)
    if name != "self.model_engine":  # named as DeepSpeed's documentation names its engine
        # no DeepSpeed in the file: a project's model of its own
        check(source.replace("import deepspeed\n", "").replace(f"-> {rule}", "silent"))


def test_a_tensors_backward_and_an_optimizers_step_stay_torchs() -> None:
    source = (
        "import deepspeed\n"
        "def train(out, grad, optimizer, model):\n"
        "    out.backward(grad)  # silent\n"
        "    optimizer.step()  # silent\n"
        "    model.backward(out, retain_graph=True)  # silent\n"
    )
    check(source)


@pytest.mark.parametrize("imported", ["import deepspeed", "from accelerate import Accelerator"])
def test_the_engines_gradient_norm_wherever_it_is_reached(imported: str) -> None:
    source = (
        f"{imported}\n"
        "def step(self, accelerator):\n"
        "    if accelerator.sync_gradients:\n"
        "        norm = self.components.transformer.get_global_grad_norm()  # -> library-backward\n"
        "    return norm\n"
    )
    check(source)
    check(
        source.replace(f"{imported}\n", "import numpy\n").replace("-> library-backward", "silent")
    )


# -- Accelerate imported from its own module ----------------------------------------------------
def test_accelerates_launcher_from_its_module_and_native_amp() -> None:
    source = (
        "import torch\n"
        "from accelerate.accelerator import Accelerator\n"
        "def setup(args):\n"
        "    accelerator = Accelerator(  # -> library-launcher\n"
        "        gradient_accumulation_steps=args.gradient_accumulation_steps,\n"
        "    )\n"
        "    if torch.backends.mps.is_available():\n"
        "        accelerator.native_amp = False  # -> library-launcher\n"
        "    return accelerator\n"
    )
    check(source)
    advice_only(source)


# -- torch's device module handed out by a project's helper -------------------------------------
_HELPER_IMPORTS = {
    "imported": "from verl.utils.device import get_torch_device\n",
    "defined here": (
        "def get_torch_device():\n"
        "    try:\n"
        "        return getattr(torch, get_device_name())\n"
        "    except AttributeError:\n"
        "        return torch.cuda\n"
    ),
}
_MODULE_CALLS = {
    "empty_cache": ("get_torch_device().empty_cache()", "cuda-empty-cache"),
    "synchronize": ("get_torch_device().synchronize()", "cuda-synchronize"),
    "set_device": ("get_torch_device().set_device(local_rank)", "accelerator-set-device-index"),
    "current_device": ("return get_torch_device().current_device()", "accelerator-current-index"),
    "kept in a name": ("module = get_torch_device()\n    module.empty_cache()", "cuda-empty-cache"),
}


@pytest.mark.parametrize(
    ("helper", "call"), list(itertools.product(_HELPER_IMPORTS, _MODULE_CALLS))
)
def test_a_helpers_device_module_is_torch_cudas(helper: str, call: str) -> None:
    spelled, rule = _MODULE_CALLS[call]
    source = (
        f"import torch\n{_HELPER_IMPORTS[helper]}"
        f"def free(local_rank):\n    {spelled}  # -> {rule}\n"
    )
    check(source)
    advice_only(source)


@pytest.mark.parametrize(
    "line",
    [
        'get_torch_device().replace("cuda", "npu")',  # a name a helper so named returns
        "get_cache().empty_cache()",  # a helper named for no device module
        "get_torch_device().count(x)",
    ],
)
def test_other_calls_on_a_helpers_value_are_silent(line: str) -> None:
    check(f"import torch\ndef use(x):\n    {line}  # silent\n")


# -- small classes: a module's presence, devices mapped, a mesh's axis, no_sync looked up -----
@pytest.mark.parametrize("module", ["npu", "xpu", "mlu", "musa", "hpu"])
def test_an_accelerator_modules_presence_is_its_availability(module: str) -> None:
    source = (
        "import torch\n"
        "def is_torch_npu_available():\n"
        f'    if not hasattr(torch, "{module}"):  # -> xpu-npu-is-available\n'
        "        return False\n"
        '    return hasattr(torch, "compile")  # silent\n'
    )
    check(source)
    advice_only(source)


@pytest.mark.parametrize(
    "spelled",
    [
        "devices = tuple(map(torch.device, names))",
        "devices = list(map(torch.device, names))",
        "labels = tuple(map(str, map(torch.device, names)))",
    ],
)
def test_names_mapped_to_devices_are_device_from_spec(spelled: str) -> None:
    source = (
        "import torch\n"
        f"def place(names, values):\n    {spelled}  # -> device-from-spec\n"
        "    tensors = list(map(torch.tensor, values))  # silent\n"
        "    return devices if 'devices' in dir() else labels, tensors\n"
    )
    check(source)
    advice_only(source)


@pytest.mark.parametrize(
    ("spelled", "rule"),
    [
        ('dp_group = self.ds_device_mesh["dp"].get_group()', "dist-mesh-queries"),
        ('size = device_mesh["tp"].size()', "dist-mesh-queries"),
        ('rank = mesh["dp"].get_local_rank()', "dist-mesh-queries"),
        ('size = groups["dp"].size()', None),
    ],
)
def test_a_meshs_axis_queried(spelled: str, rule: str | None) -> None:
    mark = f"-> {rule}" if rule else "silent"
    check(
        "import torch.distributed\ndef f(self, device_mesh, mesh, groups):\n"
        f"    {spelled}  # {mark}\n"
    )


def test_no_sync_looked_up_with_a_default_is_ddp_no_sync() -> None:
    source = (
        "import torch\nfrom contextlib import contextmanager\n"
        "@contextmanager\ndef noop_no_sync():\n    yield\n"
        "def generate(self):\n"
        "    no_sync = getattr(self.model, 'no_sync', noop_no_sync)  # -> ddp-no-sync\n"
        "    inner = getattr(self.model, 'module', self.model)  # silent\n"
        "    return no_sync, inner\n"
    )
    check(source)
    advice_only(source)


@pytest.mark.parametrize(
    "imported",
    [
        "from safetensors.torch import load_model",
        "from safetensors.torch import load_model as load_weights",
    ],
)
def test_safetensors_load_model_is_load_safetensors(imported: str) -> None:
    called = imported.rsplit(" ", 1)[-1]
    source = (
        f"import os\n{imported}\n"
        "def restore(model, ckpt_path, rank, world_size):\n"
        f'    {called}(model, os.path.join(ckpt_path, f"model{{rank}}-mp{{world_size}}.st"))'
        "  # -> load-safetensors\n"
    )
    check(source)
    advice_only(source)
    # Keras' load_model(path): another framework's
    check("from keras.models import load_model\nmodel = load_model('m.keras')  # silent\n")


def test_fsdps_storage_helpers_are_dist_fsdp() -> None:
    source = (
        "from torch.distributed.utils import _free_storage\n"
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "def free_model(model):\n"
        "    for m in model.modules():\n"
        "        if isinstance(m, FSDP):\n"
        "            _free_storage(m._handle.flat_param.data)  # -> dist-fsdp\n"
    )
    check(source)
    advice_only(source)


@pytest.mark.parametrize(
    ("spelled", "rule"),
    [
        ('torch.device(f"{get_device_name()}:{device_id}")', "device-from-spec"),
        ('torch.device(f"{self.device_type}:{rank}")', "device-from-spec"),
        ('torch.device(f"cuda:{device_id}")', "device-indexed"),
    ],
)
def test_a_device_formatted_from_its_type_is_device_from_spec(spelled: str, rule: str) -> None:
    source = f"import torch\ndef f(self, device_id, rank):\n    return {spelled}  # -> {rule}\n"
    check(source)
    # rewritten or not as f"cuda:{i}" is: tj.device takes the same grammar
    (made,) = [f for f in scan_text(source) if f.rule == rule]
    (indexed,) = scan_text(source.replace(spelled, 'torch.device(f"cuda:{device_id}")'))
    assert made.rewrite == indexed.rewrite


@pytest.mark.parametrize(
    ("returned", "rule"),
    [
        (
            '"CUDA_VISIBLE_DEVICES" if not npu_available() else "ASCEND_RT_VISIBLE_DEVICES"',
            "cuda-visible-devices",
        ),
        ('"CUDA_VISIBLE_DEVICES"', "cuda-visible-devices"),
        ('"HIP_VISIBLE_DEVICES" if is_rocm else "CUDA_VISIBLE_DEVICES"', "cuda-visible-devices"),
        ('"cuda" if cuda else "npu"', None),
        ('"CUDA_VISIBLE_DEVICES is not set"', None),
    ],
)
def test_a_helper_returning_a_variables_name(returned: str, rule: str | None) -> None:
    mark = f"-> {rule}" if rule else "silent"
    source = (
        "def get_visible_devices_keyword() -> str:\n"
        "    '''Returns 'CUDA_VISIBLE_DEVICES' if CUDA is available.'''\n"
        f"    return {returned}  # {mark}\n"
    )
    check(source)
    assert [f.line for f in scan_text(source) if f.line == 2] == []  # the docstring


def test_torchs_private_allocator_settings_are_cuda_alloc_conf() -> None:
    source = (
        "import torch\n"
        "def set_expandable_segments(enable):\n"
        '    torch.cuda.memory._set_allocator_settings(f"expandable_segments:{enable}")'
        "  # -> cuda-alloc-conf\n"
    )
    check(source)
    advice_only(source)


def test_every_rule_marked_here_is_a_scanner_rule() -> None:
    import inspect
    import sys

    text = inspect.getsource(sys.modules[__name__])
    marked = set(re.findall(r"# -> ([a-z][\w-]+)", text)) - {"rule"}  # f"# -> {rule}"
    assert marked <= scanner.RULES, marked - scanner.RULES
