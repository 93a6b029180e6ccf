"""``scan``'s advice fits the line it is given for, checked by generators rather than by
cases.

Round six's development set (label6a) found advice that did not fit: ``dist-other``
offered an all-gather for FSDP's sharding strategies, DCP's state-dict helpers,
``new_group``, ``reduce`` and ``broadcast_object_list``; Accelerate's
``wait_for_everyone()`` (a barrier) got a gather; ``cudart().cudaProfilerStart()`` got
``tj.backends.cuda.is_built()``; a SLURM variable was said to be set by torchrun; and
``super().load_state_dict(sd)`` in a trainer that is no Module was advised
``super() = tj.load_state(super(), sd)``, which is not Python. The generators below
catch the next one of each kind:

- every name a catalog row covers, and every ``torch.distributed`` name the catch-all
  covers, called on a line: the advice names the line's API family (a barrier's names a
  barrier, a broadcast's a broadcast...);
- every finding on every fixture script, and every idiom that assigns its result back
  to the value it was given x every shape that value can have: the advice is Python (or
  a sentence of instruction) and assigns only to names, attributes and subscripts.
"""

from __future__ import annotations

import ast
import itertools
import re
import textwrap
from pathlib import Path

import pytest

from tests.support.cli import scan_text
from torch2jax_device.porting import catalog, scanner

FIXTURES = Path(__file__).resolve().parents[1] / "support" / "fixtures"

# An API family, by the names of the line's call -> what the advice must name.
_FAMILIES = (
    ("a barrier", r"barrier|wait_for_everyone|rendezvous", r"barrier"),
    ("a broadcast", r"broadcast", r"broadcast"),
    ("a gather", r"^(all_)?gather(_object|_for_metrics|_into_tensor)?$", r"allgather"),
    ("a reduction", r"^(all_)?reduce$|average_metrics|mesh_reduce", r"all_reduce"),
    ("a profiler range", r"profile|nvtx|cudart|record_function|range_(push|pop)", r"profiler"),
    ("state for a checkpoint", r"state_dict|StateDict|Stateful", r"state"),
    ("a process group", r"^(new_group|new_subgroups|group|get_process_group_ranks)$", r"mesh"),
    ("the backend", r"^(get_backend|Backend)$", r"backend"),
    ("padding", r"pad_across_processes", r"pad"),
    ("ZeRO-3's shards", r"GatheredParameters", r"shard"),
    ("FSDP", r"ShardingStrategy|WrapPolicy|OffloadPolicy|MixedPrecisionPolicy", r"shard|fsdp"),
    ("the local rank", r"^(get_)?local_rank$|^local_process_index$", r"get_local_rank"),
    ("the rank", r"^(get_rank|global_rank|process_index|rank)$", r"get_rank"),
    ("the world size", r"^(get_)?world_size$|^num_processes$", r"get_world_size"),
)
# Receivers of the libraries' members, named as their documentation names them.
_RECEIVERS = {
    "Accelerator": "accelerator",
    "Fabric": "fabric",
    "DeepSpeedEngine": "model_engine",
    "TrainingArguments": "training_args",
}
# torch.distributed names the catch-all row covers, beside the rows' own names.
_DISTRIBUTED = (
    "torch.distributed.broadcast_object_list",
    "torch.distributed.all_gather_object",
    "torch.distributed.all_gather_into_tensor",
    "torch.distributed.gather_object",
    "torch.distributed.gather",
    "torch.distributed.reduce",
    "torch.distributed.new_group",
    "torch.distributed.new_subgroups",
    "torch.distributed.get_backend",
    "torch.distributed.monitored_barrier",
    "torch.distributed.fsdp.ShardingStrategy",
    "torch.distributed.fsdp.wrap.ModuleWrapPolicy",
    "torch.distributed._composable.fsdp.CPUOffloadPolicy",
    "torch.distributed._composable.fsdp.MixedPrecisionPolicy",
    "torch.distributed.checkpoint.state_dict.StateDictOptions",
    "torch.distributed.checkpoint.state_dict.get_optimizer_state_dict",
    "torch.distributed.checkpoint.state_dict.set_optimizer_state_dict",
    "torch.distributed.checkpoint.state_dict.set_model_state_dict",
)


def _line_for(name: str) -> tuple[str, str] | None:
    """(imports, the line calling ``name``) for a qualified name or a library member;
    ``None`` for a member of another class (a tensor's, a module's)."""
    head, _, last = name.rpartition(".")
    if head in _RECEIVERS:
        return "", f"result = {_RECEIVERS[head]}.{last}(x)"
    if not head or any(part[:1].isupper() for part in head.split(".")):
        return None
    module, _, attribute = name.partition(".")
    return f"import {module}\nimport {head}", f"result = {module}.{attribute}(x)"


def _covered_names() -> list[tuple[str, str]]:
    names = [
        (row.id, name)
        for row in catalog.CATALOG
        if row.rewrite
        for name in row.torch_api
        if not name.endswith(".*")
    ]
    return [*names, *(("dist-other", name) for name in _DISTRIBUTED)]


_CASES = [
    (name, family, required)
    for _, name in _covered_names()
    for family, names, required in _FAMILIES
    if re.search(names, name.rsplit(".", 1)[-1]) and _line_for(name) is not None
]


@pytest.mark.parametrize(("name", "family", "required"), _CASES, ids=lambda v: str(v))
def test_the_advice_names_the_api_family_of_its_line(name: str, family: str, required: str) -> None:
    line = _line_for(name)
    assert line is not None
    imports, call = line
    source = f"{imports}\n{call}\n" if imports else f"{call}\n"
    number = source.count("\n")
    found = [f for f in scan_text(source) if f.line == number]
    assert found, (name, source)
    for finding in found:
        assert re.search(required, finding.replacement, re.IGNORECASE), (
            f"{name} is {family}: its advice ({finding.rule}) should name it",
            finding.replacement,
        )


def test_the_family_generator_covers_every_family() -> None:
    assert {family for _, family, _ in _CASES} == {family for family, _, _ in _FAMILIES}


# -- advice is Python that assigns only to what can be assigned to ------------------------------
# A sentence of instruction, not code: "unchanged: init_process_group reads it".
_INSTRUCTION = re.compile(r"^[a-z][a-z' ]*: ")


def _why_not_code(advice: str) -> str | None:
    """Why ``advice`` is neither Python a porter can paste nor an instruction; ``None``
    if it is one of them. A block header (``with tj.device(d):``) is completed by ``pass``."""
    text = textwrap.dedent(advice)
    try:
        tree = ast.parse(text)
    except SyntaxError as error:
        if not error.msg.startswith("expected an indented block"):
            return None if _INSTRUCTION.match(text) else f"not Python: {error.msg}"
        tree = ast.parse(text + "\n    pass")
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for part in _assigned(target):
                if not isinstance(part, (ast.Name, ast.Attribute, ast.Subscript)):
                    return f"assigns to {ast.unparse(part)}"
    return None


def _assigned(target: ast.expr) -> list[ast.expr]:
    """What an assignment target binds: the elements of a tuple or list target."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [part for element in target.elts for part in _assigned(element)]
    if isinstance(target, ast.Starred):
        return _assigned(target.value)
    return [target]


_SCRIPTS = sorted(
    path
    for path in FIXTURES.rglob("*.py")
    if "oracle" not in path.parts and path.stat().st_size < 200_000
)


@pytest.mark.parametrize("path", _SCRIPTS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_advice_on_the_fixture_scripts_is_code_that_assigns_to_names(path: Path) -> None:
    source = path.read_text()
    try:
        ast.parse(source)
    except SyntaxError:
        pytest.skip("not Python 3 (a fixture of an error)")
    for finding in scanner.scan_source(source, str(path)):
        why = _why_not_code(finding.replacement)
        assert why is None, (finding.line, finding.rule, finding.replacement, why)
    ported = scanner.apply_edits(source, scanner.scan_source(source, str(path)))
    compile(ported, str(path), "exec")


# Idioms whose advice assigns the result back to the value given x every shape it has.
_GIVEN_BACK = (
    "{v}.load_state_dict(torch.load(path))",
    "{v}.load_state_dict(state, strict=False)",
    "dist.broadcast({v}, 0)",
    "dist.broadcast_object_list({v}, src=0)",
    "dist.all_reduce({v})",
    "dist.reduce({v}, dst=0)",
    "dist.all_gather({v}, t)",
    "dist.gather_object(t, {v}, dst=0)",
    "accelerator.reduce({v})",
    "accelerator.gather({v})",
    "fabric.broadcast({v})",
)
_SHAPES = ("model", "self.model", "models[0]", "self.get_model()", "super()", "torch.ones(2)")


@pytest.mark.parametrize(("idiom", "shape"), list(itertools.product(_GIVEN_BACK, _SHAPES)), ids=str)
def test_advice_given_back_to_any_shape_of_value_assigns_only_to_names(
    idiom: str, shape: str
) -> None:
    source = (
        "import torch\n"
        "import torch.distributed as dist\n"
        "class Net(torch.nn.Module):\n"
        "    def restore(self, models, path, state, t, accelerator, fabric):\n"
        f"        {idiom.format(v=shape)}\n"
    )
    for finding in scan_text(source):
        why = _why_not_code(finding.replacement)
        assert why is None, (finding.rule, finding.replacement, why)


def test_load_state_dict_of_a_class_that_is_no_module_is_no_finding() -> None:
    # detectron2's trainers: super().load_state_dict restores the trainer's own state
    trainer = (
        "from detectron2.engine import TrainerBase\n"
        "class SimpleTrainer(TrainerBase):\n"
        "    def load_state_dict(self, state_dict):\n"
        "        super().load_state_dict(state_dict)\n"
    )
    assert [f for f in scan_text(trainer) if f.line == 4] == []
    module = trainer.replace("from detectron2.engine import TrainerBase", "import torch").replace(
        "TrainerBase", "torch.nn.Module"
    )
    found = [f for f in scan_text(module) if f.line == 4]
    assert [f.rule for f in found] == ["load-model-state"]
    assert _why_not_code(found[0].replacement) is None and not found[0].fixable


OBJECT_COLLECTIVES = """\
import torch.distributed as dist
def share(objects, obj, out):
    dist.broadcast_object_list(objects, src=0)
    dist.all_gather_object(out, obj)
"""


@pytest.mark.idiom("dist-other")
def test_the_object_collectives_advice_leaves_what_torch_leaves() -> None:
    import jax
    import numpy as np
    import torch
    import torch.distributed as dist
    from jax.experimental import multihost_utils

    advice = {f.line: f.replacement for f in scan_text(OBJECT_COLLECTIVES)}
    broadcast, gather = advice[3], advice[4]
    assert broadcast.startswith("objects = multihost_utils.broadcast_one_to_all(objects")
    assert gather.startswith("out = list(multihost_utils.process_allgather(obj))")
    # The oracle, on one process (torch's group of one, JAX's process 0).
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        objects, out = [torch.arange(3.0)], [None]
        dist.broadcast_object_list(objects, src=0)
        dist.all_gather_object(out, torch.ones(2))
    finally:
        dist.destroy_process_group()
    scope = {"multihost_utils": multihost_utils, "jax": jax}
    scope.update(objects=[np.arange(3.0)], obj=np.ones(2, np.float32))
    exec(broadcast, scope)
    exec(gather, scope)
    assert [np.asarray(o).tolist() for o in scope["objects"]] == [o.tolist() for o in objects]
    assert [np.asarray(o).tolist() for o in scope["out"]] == [o.tolist() for o in out]


@pytest.mark.parametrize(
    ("call", "named"),
    [
        ("optimizer.state_dict()", "tj.optim.state_dict(optimizer, model)"),
        ("optimizer.load_state_dict(saved)", "tj.optim.load_state_dict(optimizer, model, saved)"),
    ],
)
def test_an_optimizers_state_call_is_advised_its_own_direction(call: str, named: str) -> None:
    # apex's resume loaded the optimizer state and was advised the save snippet
    source = f"import torch\noptimizer = torch.optim.SGD(params, lr=0.1)\nresult = {call}\n"
    found = [f for f in scan_text(source) if f.line == 3]
    assert [f.rule for f in found] == ["optimizer-state-dict"]
    assert found[0].replacement.startswith(named) and "torch.save" not in found[0].replacement


# The libraries' contexts that build a model: (import, the with line).
_MODEL_CONTEXTS = (
    ("from accelerate import init_empty_weights", "with init_empty_weights():", "eval_shape"),
    ("import deepspeed", "with deepspeed.zero.Init():", "eval_shape"),
    ("from accelerate import init_on_device", "with init_on_device(device):", "tj.device(device)"),
)


@pytest.mark.parametrize(("imported", "entered", "named"), _MODEL_CONTEXTS, ids=str)
def test_a_librarys_context_that_builds_a_model_is_advised_jaxs(
    imported: str, entered: str, named: str
) -> None:
    source = f"{imported}\n{entered}\n    model = Model(config)\n"
    found = [f for f in scan_text(source) if f.line == 2]
    assert [f.rule for f in found] == ["library-device"]
    assert named in found[0].replacement and _why_not_code(found[0].replacement) is None


@pytest.mark.parametrize(
    "built",
    [
        ("from dinov2.train import SSLMetaArch", "SSLMetaArch(cfg)"),
        ("import project.models as models", "models.ResNet50(num_classes=10)"),
        ("from project import Net", "Net()"),
    ],
    ids=str,
)
@pytest.mark.parametrize("target", ["device", 'torch.device("cuda")', "args.gpu"])
def test_a_project_model_built_and_moved_at_once_is_a_module_move(
    built: tuple[str, str], target: str
) -> None:
    # dinov2's SSLMetaArch(cfg).to(torch.device("cuda")) was advised a tensor move
    imported, made = built
    source = f"import torch\n{imported}\nmodel = {made}.to({target})\n"
    assert "module-to" in [f.rule for f in scan_text(source) if f.line == 3]


@pytest.mark.parametrize(
    "made",
    ["torch.Tensor(3)", "Batch(x)", "torch.ones(3)"],
)
def test_a_tensor_or_a_batch_built_and_moved_is_no_module(made: str) -> None:
    source = (
        "import torch\n"
        "class Batch:\n"
        "    def to(self, device):\n"
        "        return self\n"
        f"y = {made}.to(device)\n"
    )
    assert not [f.rule for f in scan_text(source) if f.line == 5 and f.rule.startswith("module")]


def test_the_fallback_of_a_device_module_chosen_by_name_is_advised_a_device_module() -> None:
    # peft's getattr(torch, self.device_type, torch.cuda) was advised tj.backends.cuda.is_built()
    source = "import torch\nmodule = getattr(torch, device_type, torch.cuda)\n"
    found = [f for f in scan_text(source) if f.line == 2 and "torch.cuda" == f.original]
    assert found and "device_module = tj.cuda" in found[0].replacement


@pytest.mark.parametrize(
    ("klass", "base"),
    list(
        itertools.product(
            ("SimpleTrainer", "StandardSolver", "DetectionCheckpointer", "EvalHook"),
            ("", "TrainerBase", "flashy.BaseSolver"),
        )
    ),
    ids=str,
)
@pytest.mark.parametrize("receiver", ["self", "super()"])
def test_a_runner_restoring_its_own_state_is_no_model_load(
    klass: str, base: str, receiver: str
) -> None:
    # audiocraft's solver and detectron2's trainers: self.load_state_dict(state) restores
    # the run (model, optimizer, history), through the class's own method
    source = (
        "import flashy\nfrom detectron2.engine import TrainerBase\n"
        f"class {klass}({base}):\n"
        "    def restore(self, state):\n"
        f"        {receiver}.load_state_dict(state)\n"
    )
    assert [f for f in scan_text(source) if f.line == 5] == [], source
    module = source.replace(f"({base})", "(torch.nn.Module)").replace(
        "import flashy", "import torch"
    )
    assert [f.rule for f in scan_text(module) if f.line == 5] == ["load-model-state"]


@pytest.mark.parametrize("receiver", ["state_source", "self.best_state", "train_state"])
def test_a_state_holder_restored_is_no_model_load(receiver: str) -> None:
    source = (
        f"def restore(state, {receiver.split('.')[-1]}):\n    {receiver}.load_state_dict(state)\n"
    )
    assert [f for f in scan_text(source) if f.line == 2] == []
