"""The "Distributed" section's attributes and methods: ``ddp.module``, ``ddp.no_sync()``,
``ddp.require_backward_grad_sync``, and a torch ``DeviceMesh``'s queries
(``mesh.get_local_rank("tp")``)."""

from __future__ import annotations

import ast

from .._values import DEVICE_MESH, WRAPPED, last_name
from .base import Recogniser

__all__ = ["MESH_METHODS", "collective_advice", "mesh_query", "wrapper_attribute"]

#: A torch ``DeviceMesh``'s methods that ask where this process is in it; none of them is
#: a method of JAX's ``Mesh`` (whose ``size`` is a number, not a call).
MESH_METHODS = frozenset({"get_local_rank", "get_rank", "size", "get_group", "get_coordinate"})


def wrapper_attribute(r: Recogniser, node: ast.Attribute) -> bool:
    """``ddp-module``, ``ddp-no-sync``; ``True`` if one was reported (its receiver is
    then visited)."""
    receiver = node.value
    where = r.file.method_position(node)
    if node.attr == "module" and (
        WRAPPED in r.file.values.kinds(receiver)
        or r.file.values.module_framework(receiver) is not None
    ):
        r.add(node, "ddp-module", r.text(receiver), position=where)
        r.visit(receiver)
        return True
    if node.attr in ("device_ids", "output_device") and (
        WRAPPED in r.file.values.kinds(receiver)
        or r.file.values.module_framework(receiver) is not None
    ):
        r.add(node, "dist-ddp-gradient", position=where)  # model.device_ids of DDP's
        r.visit(receiver)
        return True
    if node.attr == "require_backward_grad_sync":
        parent = r.parent(node)
        r.add(parent if isinstance(parent, ast.Assign) else node, "ddp-no-sync", position=where)
        r.visit(receiver)
        return True
    return False


def mesh_query(r: Recogniser, call: ast.Call, method: ast.Attribute) -> bool:
    """``dist-mesh-queries``: ``mesh.get_local_rank("tp")`` on a mesh from
    ``init_device_mesh``, or on a name that says it is one (``device_mesh.size(0)``, a mesh
    handed to a function); ``True`` if reported."""
    receiver = method.value
    named = last_name(receiver)
    if DEVICE_MESH not in r.file.values.kinds(receiver) and (
        named is None or "mesh" not in named.lower()
    ):
        return False
    r.add(call, "dist-mesh-queries", position=r.file.method_position(method))
    return True


def collective_advice(r: Recogniser, call: ast.Call | None, name: str) -> str | None:
    """The advice for the collective (or other process-group call) the line makes, with
    its own arguments: ``dist.broadcast(t, 0)`` is a broadcast from process 0, not the
    catch-all's allgather; ``accelerator.wait_for_everyone()`` a barrier; ``dist.reduce(v,
    dst=0)`` a reduction of ``v``. ``name`` is the qualified name or ``Class.member``;
    ``None`` when nothing fits better than the row's own advice."""
    verb = name.rsplit(".", 1)[-1]
    for prefix, advice in _NOT_COLLECTIVES.items():
        if name == prefix or name.startswith(prefix + "."):
            return advice
    if call is None or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    parameters = _COLLECTIVE_PARAMETERS.get(verb)
    if parameters is None:
        return None
    kind, names = parameters
    arguments = dict(zip(names, call.args, strict=False))
    arguments.update({k.arg: k.value for k in call.keywords if k.arg in names})
    value = arguments.get(names[0]) if names else None
    text = r.text(value) if value is not None else None
    target = _target(r, call)
    if kind == "barrier":
        return "tj.distributed.barrier()"
    if kind == "pad":
        return f"{target or text} = {text}  # a global array needs no padding across processes"
    if text is None:
        return None
    if kind == "gather":
        into = target or text
        if len(names) > 1 and arguments.get(names[1]) is not None:
            second = r.text(arguments[names[1]])
            # all_gather(outputs, x) fills its first; gather_object(x, outputs) its second
            into, text = (text, second) if verb.startswith("all_gather") else (second, text)
        return f"{into} = list(multihost_utils.process_allgather({text}))"
    if kind == "reduce":
        return f"{target or text} = tj.distributed.all_reduce({text})  # every process gets it"
    if kind == "broadcast":
        src = arguments.get("src")
        source = r.text(src) if src is not None else "0"
        return (
            f"{target or text} = multihost_utils.broadcast_one_to_all({text}, "
            f"is_source=jax.process_index() == {source})"
        )
    return None


def _target(r: Recogniser, call: ast.Call) -> str | None:
    parent = r.parent(call)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        return r.text(parent.targets[0])
    return None


# Collectives by their last name (torch.distributed's, the libraries'): what they do, and
# their parameters in order (the first is the value reduced, gathered or sent).
_COLLECTIVE_PARAMETERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "broadcast": ("broadcast", ("tensor", "src")),
    "broadcast_object_list": ("broadcast", ("object_list", "src")),
    "broadcast_tensors": ("broadcast", ("tensors", "src")),
    "all_gather": ("gather", ("tensor_list", "tensor")),
    "all_gather_object": ("gather", ("object_list", "obj")),
    "all_gather_into_tensor": ("gather", ("output_tensor", "input_tensor")),
    "gather": ("gather", ("tensor", "gather_list")),
    "gather_object": ("gather", ("obj", "object_gather_list")),
    "gather_for_metrics": ("gather", ("input_data",)),
    "reduce": ("reduce", ("tensor", "dst")),
    "all_reduce": ("reduce", ("tensor",)),
    "mesh_reduce": ("reduce", ("tag", "data")),
    "average_metrics": ("reduce", ("metrics",)),
    "barrier": ("barrier", ()),
    "monitored_barrier": ("barrier", ()),
    "wait_for_everyone": ("barrier", ()),
    "rendezvous": ("barrier", ()),
    "pad_across_processes": ("pad", ("tensor",)),
}
# torch.distributed's names that are no collective, and what they become.
_NOT_COLLECTIVES = {
    "torch.distributed.is_available": "available = True  # jax.distributed comes with JAX",
    "torch.distributed.is_nccl_available": "available = True  # XLA brings its own transport",
    "torch.distributed.is_gloo_available": "available = True  # XLA brings its own transport",
    "torch.distributed.is_mpi_available": "available = True  # XLA brings its own transport",
    "torch.distributed.get_backend": (
        "backend = jax.default_backend()  # XLA picks the collectives' transport itself"
    ),
    "torch.distributed.Backend": "# no backend to choose: XLA picks the collectives' transport",
    "torch.distributed.new_group": (
        "mesh = jax.make_mesh((groups, size), ('group', 'member'))  # a group is a mesh "
        "axis; collectives name the axis"
    ),
    "torch.distributed.group": "# the default group is the whole mesh: collectives name its axis",
    "deepspeed.zero.GatheredParameters": (
        "# no block: JAX gathers a sharded array where code needs it whole"
    ),
}


def defined_here(r: Recogniser, method: ast.Attribute) -> bool:
    """``self.method`` where the enclosing class defines ``method`` (its body is found)."""
    if not (isinstance(method.value, ast.Name) and method.value.id in ("self", "cls")):
        return False
    owner = r.file.names.enclosing(method, ast.ClassDef)
    return isinstance(owner, ast.ClassDef) and any(
        isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == method.attr
        for item in owner.body
    )
