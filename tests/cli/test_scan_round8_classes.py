"""``scan`` by class, round eight: CONTRIBUTING's labelling conventions ("How a blind set
is labelled") where ``scan`` did not follow them yet, and the classes behind round
seven's last misses. Each class is a table of spellings x places, each with its twin of
the same shape and no device meaning, which stays silent.

The classes: a device chosen by name in a string literal wherever code writes it (a
module's setting, an option's default or choices, a config's or the environment's
fallback, a dict, a return), over every device type of torch's (``mlu``, ``musa``,
``dipu``... included; ``meta`` only where it is evidently a device), prose never; a
name built from a type and an index (``"npu:" + str(rank)``, ``%``, ``.format``); a
device's name compared or cut (``device_type == "musa"``, ``model_device.split(":")``);
``isinstance(d, torch.device)``, False for a ``tj.device``; ``torch.jit.load``; a
``torch.Generator``'s ``get_state``/``set_state``; a profiler's report sorted by a
device's column; the MPI launchers' variables (``PMI_RANK``); a model's state dict under
``FSDP.state_dict_type``; a dtype handed to ``.to`` through a dict, a config's attribute
or a helper that returns it, and a device handed to a project's checkpoint loader through
a copy (the metamorphic oracle's ``through_*`` rewrites); and a module name bound twice
(``deepspeed.comm``, then ``torch.distributed``) read where only the last binding can be
seen. The findings of the device-name classes are advice: ``--diff`` leaves their lines.
"""

from __future__ import annotations

import itertools

import pytest

from tests.cli.test_scan_round7b_classes import advice_only, check
from tests.support.cli import port_text, scan_text

# torch's device types, as CONTRIBUTING lists them ("meta" apart), with an index too.
_NAMES = ("cpu", "cuda", "mps", "xpu", "npu", "mlu", "musa", "hpu", "dipu", "xla", "cuda:1")
# Strings of the same shapes that name no device: a word, longer strings holding one.
_WORDS = ("train", "cuda_time_total", "cuda_graphs", "cpu-offload", "mlu_ops")

# -- a device chosen by name, wherever it is written -----------------------------------------
_WRITTEN = {
    "a module's setting": 'DEVICE = "{name}"',
    "an option's default": 'parser.add_argument("--device", default="{name}")',
    "an option's default beside its help": (
        'parser.add_argument("--model_device", type=str, default="{name}", help="a device")'
    ),
    "an option's choices": 'parser.add_argument("--device", choices=["{name}", "auto"])',
    "a config's fallback": 'device = config.get("device", "{name}")',
    "the environment's fallback": 'device = os.environ.get("DEVICE", "{name}")',
    "a dict's value": 'settings = {{"device": "{name}", "seed": 0}}',
    "a return": 'return "{name}"',
    "a setting of the object": 'self.ppo_device = "{name}"',
}
_PLACES = {
    "at the top": "{line}",
    "in a function": "def setup(self, parser, config):\n    {line}",
    "in a method": "class Runner:\n    def setup(self, parser, config):\n        {line}",
}


def _written(place: str, line: str, mark: str) -> str:
    head = "import os\nimport torch\n"
    if place == "at the top" and line.startswith(("return", "self.")):
        place = "in a function"
    return head + _PLACES[place].format(line=line) + f"  # {mark}\n"


@pytest.mark.parametrize(
    ("written", "place", "name"), list(itertools.product(_WRITTEN, _PLACES, _NAMES))
)
def test_a_device_named_in_a_literal_is_device_string(written: str, place: str, name: str) -> None:
    line = _WRITTEN[written].format(name=name)
    source = _written(place, line, "-> device-string")
    check(source)
    advice_only(source)


@pytest.mark.parametrize(
    ("written", "place", "word"), list(itertools.product(_WRITTEN, _PLACES, _WORDS))
)
def test_another_word_in_the_same_place_is_silent(written: str, place: str, word: str) -> None:
    check(_written(place, _WRITTEN[written].format(name=word), "silent"))


_PROSE = {
    "an option's help": 'parser.add_argument("--fast", help="{name}")',
    "printed": 'print("{name}")',
    "logged": 'logger.info("{name}")',
    "warned": 'warnings.warn("{name}")',
    "raised": 'raise ValueError("{name}")',
    "asserted": 'assert ready, "{name}"',
    "a docstring": '"""{name}"""',
    "a message's f-string": 'message = f"{{rank}}{name}"',
}
# Keys: a table keyed by device types is reported where it is looked up (keyed_by_type).
_KEYS = {
    "a dict's key": 'backends = {{"{name}": "nccl", "gloo": "gloo"}}',
    "an entry": 'del budgets["{name}"]',
    "an entry popped": 'budgets.pop("{name}", None)',
}


@pytest.mark.parametrize(("prose", "name"), list(itertools.product(_PROSE, _NAMES)))
def test_a_device_named_in_prose_is_silent(prose: str, name: str) -> None:
    check(_written("in a function", _PROSE[prose].format(name=name), "silent"))


@pytest.mark.parametrize(("key", "name"), list(itertools.product(_KEYS, _NAMES)))
def test_a_device_name_as_a_key_is_silent(key: str, name: str) -> None:
    check(_written("in a function", _KEYS[key].format(name=name), "silent"))


@pytest.mark.parametrize(
    "line",
    [
        'tj.to_device(x, "cpu")',
        'jax.devices("cpu")',
        'backend = "xla" if xm else "nccl"',
        'init(backend="cpu")',
    ],
)
def test_a_device_name_the_port_or_another_row_owns_is_silent(line: str) -> None:
    head = "import jax\nimport torch\nimport torch2jax_device as tj\n"
    check(f"{head}def f(x, xm, init):\n    {line}  # silent\n")


@pytest.mark.parametrize(
    "written", ["an option's default", "an option's choices", "a dict's value"]
)
def test_a_file_without_torch_names_no_torch_device(written: str) -> None:
    source = f"import argparse\n{_WRITTEN[written].format(name='cuda')}  # silent\n"
    check(source)


_META = {
    "a device kept": 'init_device = "meta"  # -> device-string',
    "a device's keyword": 'model = build(config, device="meta")  # -> device-string',
    "a device type compared": 'if device_type == "meta":  # -> device-string-logic',
    "a word kept": 'kind = "meta"  # silent',
    "a word compared": 'if key == "meta":  # silent',
    "a word handed over": 'save(model, tag="meta")  # silent',
}


@pytest.mark.parametrize("spelled", _META)
def test_meta_is_a_device_only_where_it_evidently_is_one(spelled: str) -> None:
    line = _META[spelled]
    body = f"    {line}\n" + ("        pass\n" if line.split("  #")[0].endswith(":") else "")
    check(f"import torch\ndef f(config, device_type, key, model):\n{body}")


# -- a device's name built from its type and an index ----------------------------------------
_BUILT = {
    "a concatenation": '"{kind}:" + str(rank)',
    "a % format": '"{kind}:%d" % rank',
    "a format": '"{kind}:{{}}".format(rank)',
    "a numbered format": '"{kind}:{{0}}".format(rank)',
    "an f-string": 'f"{kind}:{{rank}}"',
}
_KINDS = ("cuda", "npu", "mlu", "xpu", "musa")


@pytest.mark.parametrize(("built", "kind"), list(itertools.product(_BUILT, _KINDS)))
def test_a_device_name_built_from_an_index_is_device_indexed(built: str, kind: str) -> None:
    spelled = _BUILT[built].format(kind=kind)
    check(
        f"import torch\ndef f(self, rank):\n    self.device_name = {spelled}  # -> device-indexed\n"
    )
    # the same inside torch.device: one finding, as for the f-string
    made = f"import torch\ndef f(rank):\n    return torch.device({spelled})\n"
    assert [f.rule for f in scan_text(made)] == ["device-indexed"]


@pytest.mark.parametrize(
    "spelled", ['"step:" + str(i)', '"epoch:%d" % i', '"rank:{}".format(i)', 'f"rank:{i}"']
)
def test_another_name_built_from_an_index_is_silent(spelled: str) -> None:
    check(f"import torch\ndef f(self, i):\n    self.tag = {spelled}  # silent\n")


# -- a device's name compared or cut -----------------------------------------------------------
_INSPECTED = {
    "compared": 'if device_type == "{name}":',
    "compared the other way": 'if "{name}" != args.device:',
    "in a tuple": 'if device_type in ("{name}", "cpu"):',
    "a prefix": 'if device.startswith("{name}"):',
}


@pytest.mark.parametrize(("inspected", "name"), list(itertools.product(_INSPECTED, _NAMES)))
def test_a_device_name_compared_is_device_string_logic(inspected: str, name: str) -> None:
    test = _INSPECTED[inspected].format(name=name)
    source = (
        f"import torch\ndef f(args, device, device_type):\n    {test}  # -> device-string-logic\n"
        "        pass\n"
    )
    check(source)
    advice_only(source)


@pytest.mark.parametrize("kept", ["model_device", "device", "args.device", "self.init_device"])
def test_a_device_name_cut_at_its_colon_is_device_string_logic(kept: str) -> None:
    source = (
        "import torch\ndef f(self, args, model_device, device):\n"
        f'    device_no = {kept}.split(":")[-1]  # -> device-string-logic\n'
    )
    check(source)


@pytest.mark.parametrize(
    "line",
    [
        'if mode == "train":',
        'if split in ("train", "val"):',
        'name, _, rest = path.split(":")',
        'if path.startswith("cuda_"):',
    ],
)
def test_other_names_compared_or_cut_are_silent(line: str) -> None:
    body = f"    {line}  # silent\n" + ("        pass\n" if line.endswith(":") else "")
    check(f"import torch\ndef f(mode, split, path):\n{body}")


# -- isinstance(d, torch.device): False for a tj.device -----------------------------------------
_IMPORTS = {
    "import torch": ("import torch\n", "torch.device"),
    "import torch as th": ("import torch as th\n", "th.device"),
    "from torch import device": ("from torch import device as Device\n", "Device"),
}
_TESTS = {
    "alone": "isinstance(d, {cls})",
    "in a tuple": "isinstance(d, (str, {cls}))",
    "negated": "not isinstance(d, {cls})",
}


@pytest.mark.parametrize(("imports", "test"), list(itertools.product(_IMPORTS, _TESTS)))
def test_isinstance_of_torch_device_is_device_type_advice(imports: str, test: str) -> None:
    head, cls = _IMPORTS[imports]
    spelled = _TESTS[test].format(cls=cls)
    source = f"{head}def f(d):\n    if {spelled}:  # -> device-type\n        d = d.type\n"
    check(source)
    (finding,) = [f for f in scan_text(source) if f.rule == "device-type"]
    # never rewritten: which devices reach the test is the program's; the advice tests
    # both classes, right before the port and after it
    assert finding.rewrite is None and "isinstance(d, tj.device)" in finding.reason
    assert "tj.device" in finding.replacement and cls in finding.replacement
    assert port_text(source) == source


@pytest.mark.parametrize("test", _TESTS)
def test_a_torch_device_reaching_isinstance_is_not_rewritten(test: str) -> None:
    # torch.device("cuda") -> tj.device("cuda") would turn the test False: --diff keeps it
    spelled = _TESTS[test].format(cls="torch.device")
    source = (
        "import torch\ndevice = torch.device('cuda')\n"
        f"def place(x, d):\n    if {spelled}:\n        return x\n    return x\n"
        "y = place(torch.ones(3), device)\n"
    )
    made = [f for f in scan_text(source) if f.line == 2]
    assert made and not any(f.fixable for f in made), made
    assert "isinstance" in made[0].reason
    assert port_text(source) == source


@pytest.mark.parametrize(
    "line",
    [
        "import jax\nok = isinstance(d, jax.Device)",
        "from mypkg import device\nok = isinstance(d, device)",
        "import torch\nok = isinstance(d, str)",
        "import torch\nok = isinstance(d, torch.Tensor)",
    ],
)
def test_isinstance_of_another_class_is_silent(line: str) -> None:
    check(f"{line}  # silent\n")


# -- torch.jit.load: a TorchScript program ------------------------------------------------------
@pytest.mark.parametrize(
    ("imports", "call"),
    [
        ("import torch", "torch.jit.load(path)"),
        ("import torch", 'torch.jit.load(f"{models_dir}/model.ptt", map_location="cpu")'),
        ("import torch as th", "th.jit.load(path)"),
        ("from torch import jit", "jit.load(path)"),
        ("from torch.jit import load", "load(path)"),
    ],
)
def test_torch_jit_load_is_torch_load_advice(imports: str, call: str) -> None:
    source = (
        f"{imports}\ndef f(self, path, models_dir):\n    self.model = {call}  # -> torch-load\n"
    )
    check(source)
    advice_only(source)


@pytest.mark.parametrize("call", ["json.load(path)", "pickle.load(path)", "mypkg.jit.load(path)"])
def test_another_load_is_silent(call: str) -> None:
    check(f"import json, pickle, torch, mypkg\ndef f(path):\n    return {call}  # silent\n")


# -- a torch.Generator's state saved and restored -----------------------------------------------
_GENERATORS = {
    "made": "torch.Generator()",
    "seeded": "torch.Generator().manual_seed(seed)",
    "on a device": 'torch.Generator(device="cpu")',
}
_STATE_USES = {
    "saved in a dict": "state = {{'gen': {g}.get_state()}}",
    "restored": "{g}.set_state(checkpoint['gen'])",
}


@pytest.mark.parametrize(("made", "use"), list(itertools.product(_GENERATORS, _STATE_USES)))
def test_a_generators_state_is_rng_state(made: str, use: str) -> None:
    source = (
        f"import torch\ndef f(seed, checkpoint):\n    demo_gen = {_GENERATORS[made]}\n"
        f"    {_STATE_USES[use].format(g='demo_gen')}  # -> rng-state\n"
    )
    check(source)


@pytest.mark.parametrize("use", _STATE_USES)
def test_another_objects_state_is_silent(use: str) -> None:
    source = (
        "import torch, gym\ndef f(checkpoint):\n    env = gym.make('CartPole-v1')\n"
        f"    {_STATE_USES[use].format(g='env')}  # silent\n"
    )
    check(source)


# -- a profiler's report sorted by a device's column ---------------------------------------------
@pytest.mark.parametrize(
    ("column", "shape"),
    list(
        itertools.product(
            ["cuda_time_total", "self_cuda_time_total", "device_time_total", "cuda_memory_usage"],
            ["print({call})", "report = {call}"],
        )
    ),
)
def test_a_report_sorted_by_a_devices_column_is_profiler(column: str, shape: str) -> None:
    call = f'profiler.key_averages().table(sort_by="{column}", row_limit=10)'
    check(f"import torch\ndef f(profiler):\n    {shape.format(call=call)}  # -> profiler\n")


@pytest.mark.parametrize(
    "call",
    [
        'profiler.key_averages().table(sort_by="cpu_time_total")',
        'frame.table(sort_by="name")',
    ],
)
def test_a_report_sorted_otherwise_is_silent(call: str) -> None:
    check(f"import torch\ndef f(profiler, frame):\n    print({call})  # silent\n")


# -- the MPI launchers' variables ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("read", "name"),
    list(
        itertools.product(
            ['int(os.environ.get("{v}"))', 'os.environ["{v}"]', 'os.getenv("{v}", "0")'],
            ["PMI_RANK", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"],
        )
    ),
)
def test_an_mpi_launchers_variable_is_dist_env(read: str, name: str) -> None:
    source = f"import os\nimport torch\nrank = {read.format(v=name)}  # -> dist-env\n"
    check(source)
    advice_only(source)


@pytest.mark.parametrize("name", ["PMIDX", "MY_RANK", "MPI_HOME"])
def test_another_variable_is_silent(name: str) -> None:
    check(f'import os\nimport torch\nvalue = os.environ.get("{name}")  # silent\n')


# -- a model's state under FSDP.state_dict_type ------------------------------------------------
_FSDP_IMPORTS = {
    "the class as FSDP": (
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType\n",
        "FSDP",
    ),
    "the module": (
        "import torch.distributed.fsdp as fsdp\nfrom torch.distributed.fsdp import StateDictType\n",
        "fsdp.FullyShardedDataParallel",
    ),
}
_STATE_CALLS = {
    "kept": "cpu_state = model.state_dict()",
    "in a dict": "checkpoint = {'model': model.state_dict(), 'epoch': 1}",
}


@pytest.mark.parametrize(("imports", "call"), list(itertools.product(_FSDP_IMPORTS, _STATE_CALLS)))
def test_a_state_dict_under_fsdps_state_dict_type_is_dist_checkpoint_state(
    imports: str, call: str
) -> None:
    head, cls = _FSDP_IMPORTS[imports]
    source = (
        f"{head}def save(model, sd, policy, logs):\n"
        f"    with {cls}.state_dict_type(model, StateDictType.FULL_STATE_DICT, policy):\n"
        f"        if logs:\n            {_STATE_CALLS[call]}  # -> dist-checkpoint-state\n"
    )
    check(source)
    advice_only(source)


@pytest.mark.parametrize("call", _STATE_CALLS)
def test_a_state_dict_under_another_context_is_silent(call: str) -> None:
    source = (
        "import torch\nfrom contextlib import nullcontext\ndef save(model, sd):\n"
        f"    with nullcontext():\n        {_STATE_CALLS[call]}  # silent\n"
    )
    check(source)


# -- a module name bound twice: the last binding, where only it can be seen --------------------
_GUARDED = (
    "try:\n    import deepspeed.comm as dist\nexcept Exception:\n    pass\n"
    "import torch.distributed as dist\n"
)


@pytest.mark.parametrize(
    ("call", "rule"),
    [("dist.is_initialized()", "dist-is-initialized"), ("dist.barrier()", "dist-barrier")],
)
def test_a_name_rebound_before_the_function_reads_the_last_import(call: str, rule: str) -> None:
    source = f"{_GUARDED}def setup():\n    if {call}:  # -> {rule}\n        pass\n"
    check(source)


@pytest.mark.parametrize(
    "source",
    [
        # the function is defined before the last import: either module may be read
        "try:\n    import deepspeed.comm as dist\nexcept Exception:\n    pass\n"
        "def setup():\n    dist.barrier()  # silent\nimport torch.distributed as dist\n",
        # the last import is conditional
        "import torch.distributed as dist\nif fast:\n    import deepspeed.comm as dist\n"
        "def setup():\n    dist.barrier()  # silent\n",
        # a function rebinds the module's name
        "import deepspeed.comm as dist\nimport torch.distributed as dist\n"
        "def use_deepspeed():\n    global dist\n    import deepspeed.comm as dist\n"
        "def setup():\n    dist.barrier()  # silent\n",
    ],
)
def test_a_name_whose_binding_is_open_is_silent(source: str) -> None:
    check(source)


# -- a dtype handed to .to through a dict, a config or a helper --------------------------------
_DTYPE_ROUTES = {
    "a name": ("", "dtype"),
    "a dict's entry": ("    options = {'dtype': dtype}\n", "options['dtype']"),
    "a config's attribute": ("    cfg.dtype = dtype\n", "cfg.dtype"),
    "a helper returning it": ("", "passthrough(dtype)"),
    "a helper by keyword": ("", "passthrough(value=dtype)"),
}


@pytest.mark.parametrize("route", _DTYPE_ROUTES)
def test_a_dtype_handed_through_a_copy_is_still_a_dtype(route: str) -> None:
    before, spelled = _DTYPE_ROUTES[route]
    source = (
        "import torch\ndef passthrough(value):\n    return value\n"
        f"def cast(x, cfg, half):\n    dtype = torch.float16 if half else torch.float32\n"
        f"{before}    return x.to({spelled})  # -> tensor-to-dtype\n"
    )
    check(source)


@pytest.mark.parametrize(
    "spelled", ["options['device']", "cfg.device", "passthrough(device)", "helper(dtype)"]
)
def test_a_device_handed_through_a_copy_is_no_dtype(spelled: str) -> None:
    source = (
        "import torch\nfrom mypkg import helper\ndef passthrough(value):\n    return value\n"
        "def move(x, cfg, dtype):\n    device = torch.device('cuda')\n"
        "    options = {'device': device}\n    cfg.device = device\n"
        f"    return x.to({spelled})\n"
    )
    assert "tensor-to-dtype" not in {f.rule for f in scan_text(source) if f.line == 9}


# -- a device handed to a project's loader through a copy --------------------------------------
_DEVICE_ROUTES = {
    "a name": ("", "device"),
    "a copy": ("    value = device\n", "value"),
    "a tuple's copy": ("    value, _ = device, None\n", "value"),
    "a dict's entry": ("    options = {'device': device}\n", "options['device']"),
    "a config's attribute": ("    cfg.device = device\n", "cfg.device"),
}


@pytest.mark.parametrize("route", _DEVICE_ROUTES)
def test_a_device_handed_to_a_loader_through_a_copy_is_its_map_location(route: str) -> None:
    before, spelled = _DEVICE_ROUTES[route]
    source = (
        "import torch\ndef load_checkpoint(path, where):\n"
        "    return torch.load(path, map_location=where)\n"
        "def main(cfg, path):\n    device = torch.device('cuda')\n"
        f"{before}    state = load_checkpoint(path, {spelled})  # -> torch-load-map-location\n"
    )
    check(source)


@pytest.mark.parametrize("value", ["'weights.pt'", "path", "None"])
def test_another_value_handed_to_a_loader_through_a_copy_is_not(value: str) -> None:
    source = (
        "import torch\ndef load_checkpoint(path, where):\n"
        "    return torch.load(path, map_location=where)\n"
        f"def main(path):\n    value = {value}\n"
        "    state = load_checkpoint(path, value)\n"
    )
    assert "torch-load-map-location" not in {f.rule for f in scan_text(source) if f.line == 6}
