"""The "Distributed" section's attributes and methods: ``ddp.module``, ``ddp.no_sync()``,
``ddp.require_backward_grad_sync``, and a torch ``DeviceMesh``'s queries
(``mesh.get_local_rank("tp")``)."""

from __future__ import annotations

import ast

from .._values import DEVICE_MESH, WRAPPED, last_name
from .base import Recogniser
from .libraries import carried_values

__all__ = [
    "COMM_HOOK_ADVICE",
    "MESH_METHODS",
    "all_reduce_advice",
    "collective_advice",
    "device_keys_spread",
    "held_no_sync",
    "mesh_names_read",
    "mesh_query",
    "wrapped_keys",
    "wrapper_attribute",
    "wrapper_subclass_made",
]

#: A torch ``DeviceMesh``'s methods that ask where this process is in it; none of them is
#: a method of JAX's ``Mesh`` (whose ``size`` is a number, not a call).
MESH_METHODS = frozenset({"get_local_rank", "get_rank", "size", "get_group", "get_coordinate"})

#: DDP's (and FSDP's) ``register_comm_hook``: how the gradients' all-reduce runs.
COMM_HOOK_ADVICE = (
    "# no hook: jax.jit inserts the gradients' all-reduce; to compress it, cast the "
    "gradients (jax.tree.map(lambda g: g.astype(jnp.bfloat16), grads)) inside the step"
)

# torch's distributed calls that take a device: their row, and the keys that name it.
_DEVICE_KEYS = {
    "torch.distributed.init_process_group": ("dist-init-process-group", ("device_id",)),
    "torch.distributed.distributed_c10d.init_process_group": (
        "dist-init-process-group",
        ("device_id",),
    ),
    "torch.nn.parallel.DistributedDataParallel": (
        "dist-ddp-gradient",
        ("device_ids", "output_device"),
    ),
    "torch.nn.parallel.distributed.DistributedDataParallel": (
        "dist-ddp-gradient",
        ("device_ids", "output_device"),
    ),
    "torch.distributed.fsdp.FullyShardedDataParallel": ("dist-fsdp", ("device_id",)),
}


def wrapper_attribute(r: Recogniser, node: ast.Attribute) -> bool:
    """``ddp-module``, ``ddp-no-sync``; ``True`` if one was reported (its receiver is
    then visited). ``self.module`` in a subclass of a wrapper (StyleTTS2's
    ``MyDataParallel(torch.nn.DataParallel)``) is the wrapped module too."""
    receiver = node.value
    where = r.file.method_position(node)
    if node.attr == "module" and (
        WRAPPED in r.file.values.kinds(receiver)
        or r.file.values.module_framework(receiver) is not None
        or _a_wrappers_self(r, receiver)
        or _unwrapped_where_wrapped(r, receiver, node)
    ):
        fitting = (
            "model  # the wrapped module itself: JAX needs no wrapper class"
            if _a_wrappers_self(r, receiver)
            else r.text(receiver)
        )
        r.add(node, "ddp-module", fitting, position=where)
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


#: DDP's (and DataParallel's) prefix on the keys of a wrapped model's state dict.
_WRAPPED_PREFIX = "module."
_STRING_METHODS = frozenset({"startswith", "replace", "removeprefix", "lstrip", "split"})


def wrapped_keys(r: Recogniser, call: ast.Call) -> None:
    """``ddp-module``: a state dict's keys tested for or cut of the prefix ``"module."``
    that a model saved through its DDP wrapper carries (``k.startswith("module.")``,
    ``k.replace("module.", "")``, ``k[len("module."):]``); advice."""
    func = call.func
    if id(call) in r.reported or not call.args:
        return
    first = call.args[0]
    if not (isinstance(first, ast.Constant) and first.value == _WRAPPED_PREFIX):
        return
    if not (
        (isinstance(func, ast.Attribute) and func.attr in _STRING_METHODS)
        or r.file.values.builtin(func) == "len"
    ):
        return
    r.add(
        call,
        "ddp-module",
        f"{r.text(call)}  # keep it for checkpoints torch's DDP wrote: a JAX model has no "
        'wrapper, so a state it saves has no "module." prefix',
    )


def _unwrapped_where_wrapped(r: Recogniser, receiver: ast.expr, node: ast.Attribute) -> bool:
    """``x.module`` read where ``x`` may be a wrapper or not, the code handling both:
    ``x.module.f() if hasattr(x, "module") else x.f()``, ``if hasattr(x, "module"):``
    around it, or ``try: n = x.module.n`` whose ``except`` reads ``x`` itself
    (StyleTTS2's "in case not distributed")."""
    text = r.text(receiver)
    child: ast.AST = node
    parent = r.parent(node)
    while parent is not None:
        if isinstance(parent, (ast.IfExp, ast.If)) and child is not parent.test:
            if _asks_module_of(r, parent.test, text):
                return True
        if isinstance(parent, ast.Try) and child in parent.body:
            handled = " ".join(r.text(s) for h in parent.handlers for s in h.body)
            if text in handled and f"{text}.module" not in handled:
                return True
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return False
        child, parent = parent, r.parent(parent)
    return False


def _asks_module_of(r: Recogniser, test: ast.expr, text: str) -> bool:
    """``test`` is ``hasattr(x, "module")`` (or its negation) with ``x`` written ``text``."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    return (
        isinstance(test, ast.Call)
        and r.file.values.builtin(test.func) == "hasattr"
        and len(test.args) == 2
        and r.text(test.args[0]) == text
        and isinstance(test.args[1], ast.Constant)
        and test.args[1].value == "module"
    )


def _a_wrappers_self(r: Recogniser, node: ast.expr) -> bool:
    """``node`` is ``self`` in a method of a class of the file that subclasses a wrapper."""
    if not (isinstance(node, ast.Name) and node.id == "self"):
        return False
    owner = r.file.names.enclosing(node, ast.ClassDef)
    return isinstance(owner, ast.ClassDef) and WRAPPED in r.file.values.class_kinds(owner)


def wrapper_subclass_made(r: Recogniser, call: ast.Call) -> None:
    """``model = MyDataParallel(model)``: a class of the project that subclasses torch's
    ``DataParallel`` or ``DistributedDataParallel`` wraps the model as its base does;
    reported with the base's row, as advice."""
    func = call.func
    if not isinstance(func, ast.Name) or id(call) in r.reported:
        return
    for binding in r.file.names.bindings(func):
        if binding.kind != "class" or not isinstance(binding.node, ast.ClassDef):
            continue
        if WRAPPED not in r.file.values.class_kinds(binding.node):
            continue
        base = _wrapper_base(r, binding.node)
        row = "dist-ddp-gradient" if base and "Distributed" in base else "dist-data-parallel"
        candidate = r.add(call, row)
        candidate.reason = (
            f"{func.id} subclasses {base or 'a DDP wrapper'} (line {binding.node.lineno}): "
            "port the call as its base's"
        )
        return


def _wrapper_base(r: Recogniser, cls: ast.ClassDef, depth: int = 0) -> str | None:
    """The qualified name of the torch wrapper ``cls`` derives from, through the file's
    own classes."""
    for base in cls.bases:
        name = r.qualname(base)
        if name is not None and name.startswith("torch.nn."):
            return name
        if isinstance(base, ast.Name) and depth < 5:
            for binding in r.file.names.bindings(base):
                if isinstance(binding.node, ast.ClassDef):
                    found = _wrapper_base(r, binding.node, depth + 1)
                    if found is not None:
                        return found
    return None


def mesh_query(r: Recogniser, call: ast.Call, method: ast.Attribute) -> bool:
    """``dist-mesh-queries``: ``mesh.get_local_rank("tp")`` on a mesh from
    ``init_device_mesh``, or on a name that says it is one (``device_mesh.size(0)``, a mesh
    handed to a function), or on one of its axes (``mesh["dp"].get_group()``); ``True`` if
    reported."""
    receiver = method.value
    while isinstance(receiver, ast.Subscript):  # mesh["dp"]: the mesh's axis, a mesh too
        receiver = receiver.value
    named = last_name(receiver)
    if DEVICE_MESH not in r.file.values.kinds(receiver) and (
        named is None or "mesh" not in named.lower()
    ):
        return False
    r.add(call, "dist-mesh-queries", position=r.file.method_position(method))
    return True


def mesh_names_read(r: Recogniser, node: ast.Attribute) -> None:
    """``dist-mesh-queries``: ``device_mesh.mesh_dim_names`` read, on a mesh as
    ``mesh_query`` tells one (``if "tp" in device_mesh.mesh_dim_names:``)."""
    if node.attr != "mesh_dim_names" or not isinstance(node.ctx, ast.Load):
        return
    named = last_name(node.value)
    if id(node) in r.reported or (
        DEVICE_MESH not in r.file.values.kinds(node.value)
        and (named is None or "mesh" not in named.lower())
    ):
        return
    r.add(
        node,
        "dist-mesh-queries",
        f"{r.text(node.value)}.axis_names  # a jax.sharding.Mesh's names of its axes",
        position=r.file.method_position(node),
    )


def collective_advice(r: Recogniser, call: ast.Call | None, name: str) -> str | None:
    """``dist-other``'s advice for what the line does, with its own arguments:
    ``dist.broadcast(t, 0)`` is a broadcast from process 0, ``dist.reduce(t, dst=0)`` an
    all-reduce, ``dist.new_group(ranks)`` a mesh axis, a name of no family below says
    there is no counterpart; ``None`` outside ``torch.distributed`` (the row's advice).
    The row's allgather fits ``all_gather`` alone."""
    if not name.startswith("torch.distributed."):
        return None
    family = _family(name)
    if call is None or any(isinstance(a, ast.Starred) for a in call.args):
        return _FAMILY_ADVICE[family]
    parameters = _COLLECTIVE_PARAMETERS.get(name.rsplit(".", 1)[-1], ())
    nodes = {role: a for (_, role), a in zip(parameters, call.args, strict=False)}
    roles = dict(parameters)
    nodes.update({roles[k.arg]: k.value for k in call.keywords if k.arg in roles})
    arguments = {role: r.text(node) for role, node in nodes.items()}
    source = arguments.get("src", "0")
    if family == "broadcast" and "tensor" in arguments:
        tensor = arguments["tensor"]
        return r.loaded_into(
            nodes["tensor"],
            f"multihost_utils.broadcast_one_to_all({tensor}, "
            f"is_source=jax.process_index() == {source})",
            "returns the broadcast value: keep it in a name",
        ) + _objects(name)
    if family == "all-gather" and {"tensor_list", "tensor"} <= set(arguments):
        tensor = arguments["tensor"]
        tiled = ", tiled=True" if name.endswith("_into_tensor") else ""
        wrapped = (
            f"multihost_utils.process_allgather({tensor}{tiled})"
            if tiled
            else f"list(multihost_utils.process_allgather({tensor}))"
        )
        return r.loaded_into(nodes["tensor_list"], wrapped, "one per process") + _objects(name)
    if family == "gather" and "tensor" in arguments:
        kept = nodes.get("tensor_list")  # None on the processes that are not dst
        target = r.text(kept) if isinstance(kept, (ast.Name, ast.Attribute)) else "gathered"
        line = f"{target} = list(multihost_utils.process_allgather({arguments['tensor']}))"
        dst = arguments.get("dst", "0")
        return f"{line}  # every process gets them, process {dst} too" + _objects(name)
    if family == "reduce" and "tensor" in arguments:
        op = _reduce_op(arguments.get("op"))
        return r.loaded_into(
            nodes["tensor"],
            f"tj.distributed.all_reduce({arguments['tensor']}{op})",
            "returns the result: keep it in a name",
        ) + (
            f"  # every process gets it, process {arguments['dst']} too"
            if "dst" in arguments
            else ""
        )
    return _FAMILY_ADVICE[family]


def all_reduce_advice(r: Recogniser, call: ast.Call) -> str | None:
    """``dist-all-reduce``'s advice with the line's own value and operation:
    ``dist.all_reduce(v)`` is ``v = tj.distributed.all_reduce(v)``."""
    if not call.args or isinstance(call.args[0], ast.Starred):
        return None
    given = {k.arg: r.text(k.value) for k in call.keywords if k.arg is not None}
    op = _reduce_op(r.text(call.args[1]) if len(call.args) > 1 else given.get("op"))
    tensor = call.args[0]
    return r.loaded_into(
        tensor,
        f"tj.distributed.all_reduce({r.text(tensor)}{op})",
        "returns the result: keep it in a name",
    )


def _objects(name: str) -> str:
    """The note for a collective of Python objects: JAX's move arrays."""
    if "object" in name.rsplit(".", 1)[-1]:
        return "  # arrays and trees of them: encode other objects as arrays"
    return ""


def _reduce_op(op: str | None) -> str:
    """``, op=tj.distributed.ReduceOp.MAX`` for torch's ``dist.ReduceOp.MAX``; ``""`` for
    none given (a sum, as torch)."""
    if op is None:
        return ""
    member = op.rsplit("ReduceOp.", 1)[-1] if "ReduceOp." in op else None
    return f", op=tj.distributed.ReduceOp.{member}" if member else f", op={op}"


def _family(name: str) -> str:
    """What a ``torch.distributed`` name does, by its family (``_FAMILIES``);
    ``"no-counterpart"`` for the others."""
    parts = name.split(".")
    for family, members in _FAMILIES.items():
        if any(part in members for part in parts[2:]):
            return family
    return "no-counterpart"


# torch.distributed's names by what they do: a collective's family, or what a name that
# is no collective asks (a group, the backend).
_FAMILIES = {
    "broadcast": {"broadcast", "broadcast_object_list"},
    "all-gather": {"all_gather", "all_gather_object", "all_gather_into_tensor"},
    "gather": {"gather", "gather_object"},
    "reduce": {"reduce"},
    "scatter": {"scatter", "scatter_object_list"},
    "reduce-scatter": {"reduce_scatter", "reduce_scatter_tensor"},
    "all-to-all": {"all_to_all", "all_to_all_single"},
    "point-to-point": {"send", "recv", "isend", "irecv", "batch_isend_irecv", "P2POp"},
    "barrier": {"monitored_barrier"},
    "group": {
        "new_group",
        "new_subgroups",
        "new_subgroups_by_enumeration",
        "group",
        "GroupMember",
        "ProcessGroup",
        "get_process_group_ranks",
        "get_group_rank",
        "get_global_rank",
        "_get_default_group",
    },
    "backend": {
        "get_backend",
        "Backend",
        "is_nccl_available",
        "is_gloo_available",
        "is_mpi_available",
        "is_ucc_available",
        "is_xccl_available",
    },
    "available": {"is_available"},
    "launched": {"is_torchelastic_launched"},
    "reduce-op": {"ReduceOp"},
    "dtensor": {"tensor", "_tensor"},
    "sharded-optimizer": {"optim", "ZeroRedundancyOptimizer"},
}
#: The advice of each family where the line's arguments are not needed (or not known).
_FAMILY_ADVICE = {
    "broadcast": "x = multihost_utils.broadcast_one_to_all(x, is_source=jax.process_index() == 0)",
    "all-gather": "gathered = list(multihost_utils.process_allgather(x))",
    "gather": "gathered = list(multihost_utils.process_allgather(x))  # on every process",
    "reduce": "x = tj.distributed.all_reduce(x)  # every process gets the sum",
    "scatter": (
        "part = multihost_utils.broadcast_one_to_all(parts, is_source=jax.process_index() == 0)"
        "[jax.process_index()]"
    ),
    "reduce-scatter": (
        'part = jax.lax.psum_scatter(x, "data", tiled=True)  # inside shard_map: each '
        "device keeps its share of the sum"
    ),
    "all-to-all": (
        'y = jax.lax.all_to_all(x, "data", split_axis=0, concat_axis=0)  # inside shard_map'
    ),
    "point-to-point": (
        'y = jax.lax.ppermute(x, "data", perm=[(0, 1)])  # inside shard_map: device 0 sends to 1'
    ),
    "barrier": "tj.distributed.barrier()",
    "group": (
        'mesh = jax.make_mesh((jax.device_count(),), ("data",))  # a group is a mesh axis: '
        "collectives name the axis"
    ),
    "backend": (
        'backend = jax.default_backend()  # "gpu", "tpu" or "cpu": XLA picks the collectives'
    ),
    "available": "available = True  # jax.distributed ships with jax",
    "launched": 'launched = "RANK" in os.environ  # torchrun and torch2jax-device run set it',
    "reduce-op": 'op = tj.distributed.ReduceOp.SUM  # or "sum", "mean", "max", "min"',
    "dtensor": (
        'x = jax.device_put(x, NamedSharding(mesh, P("data")))  # Shard(0) is P("data"), '
        "Replicate() is P()"
    ),
    "sharded-optimizer": (
        "optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)  # its state "
        "is sharded as the parameters are (dist-fsdp)"
    ),
    "no-counterpart": (
        "# no tj counterpart: jax.experimental.multihost_utils between processes, jax.lax "
        "collectives inside shard_map (the guide's Distributed section)"
    ),
}
# torch.distributed's collectives: their parameters in order, each with its role in the
# advice (the value sent or reduced, the list gathered into, the source, the destination).
_COLLECTIVE_PARAMETERS = {
    "broadcast": (("tensor", "tensor"), ("src", "src")),
    "broadcast_object_list": (("object_list", "tensor"), ("src", "src")),
    "all_gather": (("tensor_list", "tensor_list"), ("tensor", "tensor")),
    "all_gather_object": (("object_list", "tensor_list"), ("obj", "tensor")),
    "all_gather_into_tensor": (("output_tensor", "tensor_list"), ("input_tensor", "tensor")),
    "gather": (("tensor", "tensor"), ("gather_list", "tensor_list"), ("dst", "dst")),
    "gather_object": (("obj", "tensor"), ("object_gather_list", "tensor_list"), ("dst", "dst")),
    "reduce": (("tensor", "tensor"), ("dst", "dst"), ("op", "op")),
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


def held_no_sync(r: Recogniser, node: ast.AST) -> None:
    """``ddp-no-sync``: DDP's ``no_sync`` kept unentered (``ctx = self.model.no_sync``,
    reported where it is read) and the name that keeps it called (``with ctx():``)."""
    if (
        isinstance(node, ast.Attribute)
        and node.attr == "no_sync"
        and isinstance(node.ctx, ast.Load)
        and r.qualname(node) is None
    ):
        parent = r.parent(node)
        if not (isinstance(parent, ast.Call) and parent.func is node):
            r.add(node, "ddp-no-sync", position=r.file.method_position(node))
    elif _no_sync_looked_up(r, node):
        r.add(node, "ddp-no-sync")
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and any(
            isinstance(held, ast.Attribute) and held.attr == "no_sync"
            for b in r.file.names.bindings(node.func)
            if b.kind == "assign"
            for held in (
                [b.value.body, b.value.orelse] if isinstance(b.value, ast.IfExp) else [b.value]
            )
        )
    ):
        r.add(node, "ddp-no-sync")


def _no_sync_looked_up(r: Recogniser, node: ast.AST) -> bool:
    """``getattr(self.model, "no_sync", nullcontext)``: DDP's ``no_sync`` where the model
    has one (Wan2.1), a context that does nothing otherwise."""
    return (
        isinstance(node, ast.Call)
        and r.file.values.builtin(node.func) == "getattr"
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and node.args[1].value == "no_sync"
        and id(node) not in r.reported
    )


def device_keys_spread(r: Recogniser, node: ast.Assign | ast.Dict) -> None:
    """A device kept in a dict that is spread into torch's distributed call
    (``kwargs["device_id"] = device`` then ``dist.init_process_group(**kwargs)``;
    ``{"device_ids": [rank]}`` spread into ``DistributedDataParallel``): the call's row,
    on the line the device is given."""
    reported: list[tuple[ast.AST, object]] = []  # (node reported, the key)
    if isinstance(node, ast.Dict):
        holder = r.parent(node)
        if not (isinstance(holder, ast.Assign) and len(holder.targets) == 1):
            return
        kept = holder.targets[0]
        reported = [(k, k.value) for k in node.keys if isinstance(k, ast.Constant)]
    else:
        targets = [t for t in node.targets if isinstance(t, ast.Subscript)]
        if len(targets) != 1 or not isinstance(targets[0].slice, ast.Constant):
            return
        kept = targets[0].value
        reported = [(targets[0], targets[0].slice.value)]
    for where, key in reported:
        for name, (rule, named) in _DEVICE_KEYS.items():
            if key in named and _spread_into(r, kept, name):
                found = r.add(where, rule)
                found.reason = (
                    f"{key} is spread into {name.rsplit('.', 1)[1]}(**{r.text(kept)}): "
                    "the device it is given"
                )


def _spread_into(r: Recogniser, kept: ast.expr, name: str) -> bool:
    """The dict ``kept`` names is spread (``**kept``) into a call of ``name``."""
    _, uses = carried_values(r, kept)
    for use in uses:
        keyword = r.parent(use)
        if not (isinstance(keyword, ast.keyword) and keyword.arg is None):
            continue
        call = r.parent(keyword)
        if isinstance(call, ast.Call) and r.qualname(call.func) == name:
            return True
    return False
