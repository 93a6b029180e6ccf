"""``scan`` on the lines of libraries built on torch, by class: every placement keyword
the libraries take x every way a script hands it over, and every library object x every
way a script reaches it.

Round six's development set (label6a) missed ``device_map`` carried in a dict into
``from_pretrained(**kwargs)`` (LLaVA's model builder), Transformers' ``Trainer`` and
``TrainingArguments`` used through an annotated parameter, ``trainer.args`` and a
project's ``Trainer`` subclass, and Accelerate's plugin probed with ``getattr``. The
generators below are those shapes with every spelling; each has a negative twin (the
same shape holding no library object or no placement keyword is not reported).
"""

from __future__ import annotations

import ast
import itertools

import pytest

from tests.support.cli import scan_text


def on_line(source: str, line: int) -> list[tuple[str, str]]:
    """(rule, advice) of every finding on ``line``."""
    return [(f.rule, f.replacement) for f in scan_text(source) if f.line == line]


# -- placement keywords x the ways of handing them to from_pretrained ---------------------------
_PLACEMENTS = {
    "device_map auto": ("device_map", '"auto"'),
    "device_map one device": ("device_map", '{"": device}'),
    "device_map a name": ("device_map", "device_map"),
    "max_memory": ("max_memory", '{0: "20GiB", "cpu": "100GiB"}'),
    "offload_folder": ("offload_folder", '"offload"'),
}
# How the keyword reaches the call: (lines before the call, the call's keyword part,
# the line (1-based, of those lines) where the keyword is set; 0: the call's own line).
_WAYS = {
    "a keyword": ([], "{key}={value}", 0),
    "a dict literal": (["kwargs = {{{key!r}: {value}}}"], "**kwargs", 1),
    "a dict merged": (["kwargs = {{{key!r}: {value}, **extra}}"], "**kwargs", 1),
    "a key set": (["kwargs = {{}}", "kwargs[{key!r}] = {value}"], "**kwargs", 2),
    "dict()": (["kwargs = dict({key}={value})"], "**kwargs", 1),
    "update(dict())": (["kwargs = {{}}", "kwargs.update(dict({key}={value}))"], "**kwargs", 2),
    "update({})": (["kwargs = {{}}", "kwargs.update({{{key!r}: {value}}})"], "**kwargs", 2),
    "setdefault": (["kwargs = {{}}", "kwargs.setdefault({key!r}, {value})"], "**kwargs", 2),
}


def _loader(way: str, key: str, value: str, multiline: bool) -> tuple[str, int, int]:
    """(source, the line where the keyword is set, the line of the call's keyword)."""
    before, keyword, set_at = _WAYS[way]
    lines = [
        "from transformers import AutoModelForCausalLM",
        "def load(name, device, device_map, extra):",
        *(f"    {line.format(key=key, value=value)}" for line in before),
    ]
    keyword = keyword.format(key=key, value=value)
    if multiline:
        lines += [
            "    model = AutoModelForCausalLM.from_pretrained(",
            "        name,",
            f"        {keyword}",
            "    )",
        ]
        call_line = len(lines) - 1
    else:
        lines.append(f"    model = AutoModelForCausalLM.from_pretrained(name, {keyword})")
        call_line = len(lines)
    lines.append("    return model")
    return "\n".join(lines) + "\n", (2 + set_at if set_at else call_line), call_line


@pytest.mark.parametrize(
    ("placement", "way", "multiline"),
    list(itertools.product(_PLACEMENTS, _WAYS, (False, True))),
    ids=str,
)
def test_a_placement_keyword_is_found_where_it_is_set_and_where_it_is_handed_over(
    placement: str, way: str, multiline: bool
) -> None:
    key, value = _PLACEMENTS[placement]
    source, set_at, call_line = _loader(way, key, value, multiline)
    for line in (set_at, call_line):
        found = on_line(source, line)
        assert [rule for rule, _ in found] == ["library-device"], (source, line, found)
        advice = found[0][1]
        ast.parse(advice)  # advice is Python a porter can paste
        assert "tj.load_state(model, path" in advice, advice
        if key == "max_memory":
            assert "max_memory=" in advice


@pytest.mark.parametrize("way", [w for w in _WAYS if w != "a keyword"])
def test_a_dict_without_a_placement_keyword_is_not_reported(way: str) -> None:
    source, set_at, call_line = _loader(way, "low_cpu_mem_usage", "True", False)
    assert on_line(source, set_at) == [] and on_line(source, call_line) == []


@pytest.mark.parametrize(
    "test",
    [
        'device_map != "auto"',
        "device_map == 'auto'",
        'device_map in ("auto", "balanced")',
        'self.device_map != "auto"',
    ],
)
def test_the_device_map_tested_by_its_value_is_found(test: str) -> None:
    source = f"def f(self, device_map):\n    if {test}:\n        pass\n"
    found = on_line(source, 2)
    assert [rule for rule, _ in found] == ["library-device"]
    ast.parse(found[0][1])


def test_a_placement_default_is_the_choice_itself() -> None:
    source = 'def load(path, device_map="auto", max_memory=None, device="cuda"):\n    pass\n'
    found = on_line(source, 1)
    assert ("library-device", found[0][1]) in found and 'device="auto"' in found[0][1]
    assert on_line("def load(path, device_map=None):\n    pass\n", 1) == []


# -- library objects x the ways a script reaches them -------------------------------------------
# class -> (import, constructor call, {member: rule}); a member ending in ")" is a call.
_OBJECTS = {
    "Accelerator": (
        "from accelerate import Accelerator",
        "Accelerator()",
        {
            "is_main_process": "library-process",
            "wait_for_everyone()": "library-collective",
            "save_state('out')": "library-checkpoint",
            "device": "library-device",
        },
    ),
    "Fabric": (
        "from lightning.fabric import Fabric",
        "Fabric(devices=2)",
        {
            "global_rank": "library-process",
            "barrier()": "library-collective",
            "device": "library-device",
        },
    ),
    "Trainer": (
        "from transformers import Trainer",
        "Trainer(model=model, args=args)",
        {
            "save_model('out')": "library-checkpoint",
            "is_world_process_zero()": "library-process",
            "deepspeed": "library-strategy",
            "args.local_rank": "library-process",
            "args.should_save": "library-process",
        },
    ),
    "TrainingArguments": (
        "from transformers import TrainingArguments",
        "TrainingArguments(output_dir='out')",
        {
            "local_rank": "library-process",
            "should_save": "library-process",
            "device": "library-device",
        },
    ),
    # objects a script is handed, not builds: no constructor ("an attribute of self" and
    # "a subclass's instance" do not apply)
    "DeepSpeedEngine": (
        "from deepspeed import DeepSpeedEngine",
        "",
        {
            "backward(loss)": "library-backward",
            "step()": "library-backward",
            "save_checkpoint('ckpt')": "library-checkpoint",
            "local_rank": "library-process",
            "device": "library-device",
        },
    ),
    "LightningModule": (
        "from lightning import LightningModule",
        "",
        {
            "device": "library-device",
            "global_rank": "library-process",
            "all_gather(x)": "library-collective",
            "trainer.is_global_zero": "library-process",
            "trainer.strategy": "library-strategy",
        },
    ),
}


def _reached(how: str, klass: str, member: str) -> str | None:
    """A file whose last line reads ``member`` of a ``klass`` reached ``how``; ``None``
    where that way does not apply."""
    imported, made, _ = _OBJECTS[klass]
    if how == "an annotated parameter":
        body = [f"def use(obj: {klass}):", f"    x = obj.{member}"]
    elif how == "an Optional parameter":
        body = [
            "from typing import Optional",
            f"def use(obj: Optional[{klass}] = None):",
            f"    x = obj.{member}",
        ]
    elif not made and how in ("an attribute of self", "a subclass's instance"):
        return None
    elif how == "an attribute of self":
        body = [
            "class Runner:",
            "    def __init__(self, model, args):",
            f"        self.obj = {made}",
            "    def use(self):",
            f"        x = self.obj.{member}",
        ]
    elif how == "a subclass's instance":
        body = [
            f"class Mine({klass}):",
            "    pass",
            f"obj = Mine{made[len(klass) :]}",
            f"x = obj.{member}",
        ]
    elif how == "self in a subclass":
        body = [f"class Mine({klass}):", "    def use(self):", f"        x = self.{member}"]
    elif how == "deepspeed.initialize's engine" and klass == "DeepSpeedEngine":
        imported = "import deepspeed"
        body = [
            "engine, optimizer, _, _ = deepspeed.initialize(model=net, config=config)",
            f"x = engine.{member}",
        ]
    elif how == "a project's Trainer" and klass == "Trainer":
        imported = "from project.trainers import ProjectTrainer"
        body = [
            "trainer = ProjectTrainer(model=model, args=training_args)",
            f"x = trainer.{member}",
        ]
    else:
        return None
    return "\n".join([imported, *body]) + "\n"


_HOW = (
    "an annotated parameter",
    "an Optional parameter",
    "an attribute of self",
    "a subclass's instance",
    "self in a subclass",
    "a project's Trainer",
    "deepspeed.initialize's engine",
)
_CASES = [
    (how, klass, member)
    for how, klass in itertools.product(_HOW, _OBJECTS)
    for member in _OBJECTS[klass][2]
    if _reached(how, klass, member) is not None
]


@pytest.mark.parametrize(("how", "klass", "member"), _CASES, ids=str)
def test_a_library_objects_member_is_found_however_the_object_is_reached(
    how: str, klass: str, member: str
) -> None:
    source = _reached(how, klass, member)
    assert source is not None
    last = source.count("\n")
    rules = [rule for rule, _ in on_line(source, last)]
    assert _OBJECTS[klass][2][member] in rules, (source, rules)


# The libraries' callbacks: the parameters their hooks are given -> the object each holds.
_CALLBACKS = {
    "from transformers import TrainerCallback": (
        "TrainerCallback",
        "on_save(self, args, state, control, **kwargs)",
        {"args": "TrainingArguments", "state": None},
    ),
    "from lightning import Callback": (
        "Callback",
        "on_train_epoch_end(self, trainer, pl_module)",
        {"trainer": None, "pl_module": "LightningModule"},
    ),
}
# Members of the objects the callbacks are given that no _OBJECTS entry lists.
_HANDED = {
    ("TrainerCallback", "state"): {"is_world_process_zero": "library-process"},
    ("Callback", "trainer"): {
        "is_global_zero": "library-process",
        "strategy": "library-strategy",
        "save_checkpoint('last.ckpt')": "library-checkpoint",
    },
}
_CALLBACK_CASES = [
    (imported, parameter, member, rule)
    for imported, (base, _, parameters) in _CALLBACKS.items()
    for parameter, klass in parameters.items()
    for member, rule in (
        _OBJECTS[klass][2] if klass is not None else _HANDED[(base, parameter)]
    ).items()
]


@pytest.mark.parametrize(("imported", "parameter", "member", "rule"), _CALLBACK_CASES, ids=str)
def test_a_library_callbacks_hook_is_handed_the_librarys_objects(
    imported: str, parameter: str, member: str, rule: str
) -> None:
    base, hook, _ = _CALLBACKS[imported]
    source = (
        f"{imported}\nclass Saver({base}):\n    def {hook}:\n        x = {parameter}.{member}\n"
    )
    assert rule in [found for found, _ in on_line(source, 4)], source
    # a class of no library with the same hook: no library's finding (a module's
    # .device is still torch's)
    plain = source.replace(f"({base})", "").replace(imported, "import os")
    assert not [found for found, _ in on_line(plain, 4) if found.startswith("library-")], plain


@pytest.mark.parametrize(
    ("klass", "member"),
    [
        (k, m)
        for k in _OBJECTS
        for m in _OBJECTS[k][2]
        if _OBJECTS[k][1] and not m.endswith(")") and "." not in m
    ],
    ids=str,
)
def test_a_member_probed_with_getattr_is_found(klass: str, member: str) -> None:
    imported, made, members = _OBJECTS[klass]
    source = f"{imported}\nobj = {made}\nif getattr(obj, {member!r}, None):\n    pass\n"
    assert members[member] in [rule for rule, _ in on_line(source, 3)]


@pytest.mark.parametrize(
    "source",
    [
        # the same members on objects of no library
        "class Runner:\n    pass\nobj = Runner()\nx = obj.local_rank\n",
        "class Foo:\n    pass\ndef use(obj: Foo):\n    x = obj.save_model('out')\n",
        "from project import Config\nclass Mine(Config):\n"
        "    def use(self):\n        x = self.should_save\n",
        "from project import ProjectTrainer\nrunner = ProjectTrainer(cfg)\nx = runner.deepspeed\n",
        "obj = object()\nif getattr(obj, 'fsdp_plugin', None):\n    pass\n",
        # a Trainer's save_state writes its step and log, not the model
        "from transformers import Trainer\ntrainer = Trainer(model=m, args=a)\n"
        "x = trainer.save_state()\n",
    ],
)
def test_the_same_members_on_other_objects_are_not_reported(source: str) -> None:
    last = source.count("\n")
    assert on_line(source, last) == [], source


def test_a_projects_trainer_built_with_training_arguments_is_the_librarys_launcher() -> None:
    source = (
        "from project.trainers import ProjectTrainer\n"
        "trainer = ProjectTrainer(model=model, tokenizer=tokenizer, args=training_args)\n"
        "other = ProjectTrainer(cfg)\n"
    )
    assert [rule for rule, _ in on_line(source, 2)] == ["library-launcher"]
    assert on_line(source, 3) == []


_RANK_ZERO = (
    "lightning.pytorch.utilities",
    "lightning.fabric.utilities",
    "pytorch_lightning.utilities",
    "pytorch_lightning.utilities.rank_zero",
)


@pytest.mark.parametrize(
    ("package", "use"),
    list(
        itertools.product(
            _RANK_ZERO,
            ("@rank_zero_only\ndef log():\n    pass", "if rank_zero_only.rank == 0:\n    pass"),
        )
    ),
    ids=str,
)
def test_lightnings_rank_zero_only_is_a_process_query(package: str, use: str) -> None:
    source = f"from {package} import rank_zero_only\n{use}\n"
    assert [rule for rule, _ in on_line(source, 2)] == ["library-process"]


@pytest.mark.parametrize(
    ("call", "rule"),
    [
        ("get_rank()", "library-process"),
        ("get_world_size()", "library-process"),
        ("barrier()", "library-collective"),
        ("all_reduce(t)", "library-collective"),
        ("new_group([0, 1])", "library-collective"),
        ("init_distributed()", "library-launcher"),
    ],
)
def test_deepspeed_comm_is_the_librarys_process_group(call: str, rule: str) -> None:
    # DeepSpeed's torch.distributed twin, imported as its code imports it
    source = f"import deepspeed.comm as dist\nx = dist.{call}\n"
    assert [found for found, _ in on_line(source, 2)] == [rule]


def test_the_device_map_a_model_was_placed_by_is_the_librarys_device() -> None:
    source = "from transformers import AutoModel\nprint(model.hf_device_map)\n"
    found = on_line(source, 2)
    assert [rule for rule, _ in found] == ["library-device"] and "modules()" in found[0][1]


# A dict kept on self: how the keyword is set (in __init__) -> the line it is set on.
_ON_SELF = {
    "a dict literal": ("self.load_kwargs = {{{key!r}: {value}}}", 4),
    "a key set": ("self.load_kwargs[{key!r}] = {value}", 5),
    "update()": ("self.load_kwargs.update({key}={value})", 5),
}


@pytest.mark.parametrize(
    ("placement", "way"), list(itertools.product(_PLACEMENTS, _ON_SELF)), ids=str
)
def test_a_placement_keyword_kept_on_self_is_found_where_it_is_handed_over(
    placement: str, way: str
) -> None:
    key, value = _PLACEMENTS[placement]
    line, set_at = _ON_SELF[way]
    source = (
        "from transformers import AutoModel\n"
        "class Loader:\n"
        "    def __init__(self, device, device_map):\n"
        f"        {'self.load_kwargs = {}' if set_at == 5 else line.format(key=key, value=value)}\n"
        f"        {line.format(key=key, value=value) if set_at == 5 else 'pass'}\n"
        "    def load(self, name):\n"
        "        return AutoModel.from_pretrained(name, **self.load_kwargs)\n"
    )
    assert [rule for rule, _ in on_line(source, set_at)] == ["library-device"], source
    assert [rule for rule, _ in on_line(source, 7)] == ["library-device"], source
