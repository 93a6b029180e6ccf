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
