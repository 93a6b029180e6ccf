"""The libraries' work a script reaches by a method's name or a strategy's name alone
(round 8's development set: Diffusers' and Accelerate's text-to-image example, WeNet).

- Hugging Face's ``save_pretrained(dir)`` on a model, a pipeline or Diffusers'
  ``EMAModel`` (``pipeline.save_pretrained(args.output_dir)``, ``model.save_pretrained(...)``
  in Accelerate's save hook) writes the weights (``library-checkpoint``); a config's, a
  tokenizer's or a processor's writes no tensors and is left alone.
- Members only a library's object has, whatever the script names the object: Accelerate's
  DeepSpeed plugin's ``zero3_init_context_manager(enable=False)`` (a model built whole,
  not partitioned over the ranks), a Diffusers pipeline's ``enable_model_cpu_offload()``
  and ``enable_sequential_cpu_offload()`` (Accelerate's ``cpu_offload`` hooks on each of
  its models), and its models' and pipelines' ``enable_xformers_memory_efficient_attention()``
  (xformers' attention kernel chosen, as ``torch.backends.cuda.enable_mem_efficient_sdp``
  chooses torch's: ``sdp-kernel``); a TensorDict's point-to-point ``isend(dst=0)`` /
  ``irecv(src=1)`` (TorchRL's collectors: ``torch.distributed``'s underneath,
  ``library-collective``).
- DeepSpeed chosen by its name in a comparison (``args.train_engine == "deepspeed"``,
  ``if engine in ("deepspeed", ...)``) in a file that imports a library running it: the
  branch on the library's parallelism (``library-strategy``), as ``"deepspeed" in
  args.strategy`` is (``launch_settings.strategy_named``).
"""

from __future__ import annotations

import ast
import re

from .._values import FOREIGN, last_name
from .base import Recogniser
from .library_internals import imports_package

__all__ = ["engine_named", "pretrained_saved", "unique_member"]

# The packages whose models and pipelines save_pretrained writes the weights of.
_PRETRAINED = ("transformers", "diffusers", "peft", "sentence_transformers")
# Objects whose save_pretrained writes no tensors: a config, a tokenizer, a processor...
_NO_TENSORS = re.compile(
    r"(config|tokenizer|processor|extractor|template|scheduler)$", re.IGNORECASE
)
# Members that only one library's object has: name -> (its packages, row, advice).
_UNIQUE_MEMBERS = {
    "zero3_init_context_manager": (
        ("accelerate", "transformers", "diffusers"),
        "library-strategy",
        "model = Model(config, rngs=nnx.Rngs(0))  # built whole: shard it afterwards with "
        "jax.device_put(nnx.state(model), shardings) where ZeRO-3 would partition it",
    ),
    **dict.fromkeys(
        ("enable_model_cpu_offload", "enable_sequential_cpu_offload", "enable_group_offload"),
        (
            ("diffusers",),
            "library-prepare",
            'plan = tj.DeviceMap.plan(path, device_map={"": ("cuda:0", "pinned_host")})  # '
            "weights kept in host memory, brought to the device inside jit "
            "(library-cpu-offload)",
        ),
    ),
    **dict.fromkeys(
        (
            "enable_xformers_memory_efficient_attention",
            "disable_xformers_memory_efficient_attention",
            "set_use_memory_efficient_attention_xformers",
        ),
        (
            ("diffusers",),
            "sdp-kernel",
            'y = jax.nn.dot_product_attention(q, k, v, implementation="cudnn")  # the '
            "memory-efficient kernel: chosen per call, no switch on the model",
        ),
    ),
    **dict.fromkeys(
        ("isend", "irecv"),
        (
            ("tensordict", "torchrl"),
            "library-collective",
            'y = jax.lax.ppermute(x, "data", perm=[(src, dst)])  # inside shard_map: a '
            "TensorDict's send is torch.distributed's, per leaf; between hosts, "
            "multihost_utils.process_allgather(tree)",
        ),
    ),
}
# The libraries that run DeepSpeed, one of which a file imports where "deepspeed" names it.
_DEEPSPEED_RUNNERS = ("deepspeed", "accelerate", "transformers", "lightning", "pytorch_lightning")
_DEEPSPEED = re.compile(r"^deepspeed", re.IGNORECASE)


def pretrained_saved(r: Recogniser, call: ast.Call) -> None:
    """``library-checkpoint``: ``model.save_pretrained(dir)`` in a file of Hugging Face's
    libraries, on anything but a config, a tokenizer or a processor."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "save_pretrained"):
        return
    receiver = func.value
    if id(call) in r.reported or r.qualname(func) is not None:
        return  # LlamaForCausalLM.save_pretrained(model, ...): a class's, by its name
    if _NO_TENSORS.search(last_name(receiver) or "") or r.file.values.kinds(receiver) == {FOREIGN}:
        return
    if not imports_package(r, _PRETRAINED):
        return
    target = r.text(call.args[0]) if call.args else "output_dir"
    r.add(
        call,
        "library-checkpoint",
        f'tj.save_file({r.text(receiver)}, os.path.join({target}, "model.safetensors"))  '
        "# the weights as safetensors (a pipeline: each of its models)",
        position=r.file.method_position(func),
    )


def unique_member(r: Recogniser, call: ast.Call) -> None:
    """A member only one library's object has (``deepspeed_plugin.zero3_init_context_manager
    (enable=False)``), called in a file that imports that library."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in _UNIQUE_MEMBERS:
        return
    packages, rule, advice = _UNIQUE_MEMBERS[func.attr]
    if id(call) in r.reported or r.qualname(func) is not None:
        return
    if imports_package(r, packages):
        r.add(call, rule, advice, position=r.file.method_position(func))


def engine_named(r: Recogniser, node: ast.Compare) -> None:
    """``library-strategy``: ``args.train_engine == "deepspeed"``, ``engine in
    ("deepspeed", "zero3")``: DeepSpeed chosen by its name, in a file of a library that
    runs it."""
    if id(node) in r.reported or not all(
        isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops
    ):
        return
    sides = [node.left, *node.comparators]
    named = [side for side in sides if _names_deepspeed(side)]
    tested = [side for side in sides if not isinstance(side, (ast.Constant, ast.Tuple, ast.List))]
    if named and tested and imports_package(r, _DEEPSPEED_RUNNERS):
        r.add(
            node,
            "library-strategy",
            f"{r.text(node)}  # the same test of the sharding the port chose: sharded "
            "parameters and optimizer state where DeepSpeed's ZeRO ran (dist-fsdp)",
        )


def _names_deepspeed(node: ast.expr) -> bool:
    """``"deepspeed"``, ``"deepspeed_stage_2"``, or a tuple or list holding one."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_deepspeed(element) for element in node.elts)
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and _DEEPSPEED.match(node.value) is not None
    )
