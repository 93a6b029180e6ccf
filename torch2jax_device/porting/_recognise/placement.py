"""The "Placement" section: ``.to``, ``.cuda()``, ``.cpu()``, reading where a value is
(``.device``, ``.is_cuda``, ``.get_device()``, ``next(model.parameters()).device``, a
model's own ``self.device`` property), and a model's parameters handed over or counted."""

from __future__ import annotations

import ast
import re

from .._flow import is_jitted
from .._rewrites import Rewrite
from .._tables import ADVICE
from .._values import (
    FOREIGN,
    HF_BATCH,
    JAX_ARRAY,
    NNX_MODULE,
    NUMBER,
    PATH,
    TJ,
    TORCH_DEVICE,
    TORCH_MODULE,
    TORCH_TENSOR,
    last_name,
)
from .._written import short_text
from . import device_strings, libraries, optimizers
from .base import Recogniser

__all__ = [
    "cuda_call",
    "device_attribute",
    "get_device",
    "is_dtype",
    "move",
    "move_by_name",
    "parameters_call",
    "parameters_counted",
    "to_call",
    "unbound_move",
]

# What tj.to_device takes as torch's Tensor.to does (memory_format= changes no values).
_TO_KEYWORDS = frozenset({"device", "dtype", "non_blocking", "copy", "memory_format"})
# Tensor.to(device, dtype, non_blocking, copy): tj.to_device takes them in that order.
_TO_POSITIONAL = 4
_DTYPES = frozenset(
    "float16 half bfloat16 float32 float float64 double int8 int16 int32 int int64 long "
    "uint8 bool complex64 complex128 float8_e4m3fn float8_e5m2 cfloat cdouble".split()
)
# A name that says it holds a dtype (``dtype``, ``target_dtype``, ``self.param_dtype``):
# a parameter or setting whose values the scanner cannot see.
_DTYPE_NAME = re.compile(r"(^|_)dtype$")
_MEMORY_FORMAT_ONLY = frozenset({"memory_format"})
# A project's own optimizer factory, by its name or the name its result is given
# (``instantiate_torch_optimizer(name, model.parameters())``, ``opt = build(...)``).
_OPTIMIZER_WORDS = re.compile(r"optim|^opt$", re.IGNORECASE)
# x.to(other): argument names that say "a tensor" rather than "a device".
_TENSOR_NAMES = frozenset({"other", "ref", "reference", "like", "template", "tensor"})
# x.device is a setting, not an array's device, on objects with these names.
_SETTINGS = frozenset(
    "args cfg config conf opt opts options hparams hp settings flags FLAGS self accelerator "
    "trainer fabric state training_args parser namespace".split()
)


def to_call(r: Recogniser, call: ast.Call, method: ast.Attribute, where: tuple[int, int]) -> None:
    """``tensor-to-*``, ``module-to*``: ``x.to(...)`` becomes ``tj.to_device(x, ...)``."""
    keywords = {k.arg for k in call.keywords}
    if keywords and keywords <= _MEMORY_FORMAT_ONLY and not call.args:
        return  # a layout change, not a device or dtype
    receiver = method.value
    framework = r.file.values.module_framework(receiver)
    dtype_only = (not call.args and keywords == {"dtype"}) or (
        len(call.args) == 1
        and not keywords - {"non_blocking", "copy"}
        and is_dtype(r, call.args[0])
    )
    if framework is not None:
        rule = "module-to-dtype" if dtype_only else "module-to"
    elif HF_BATCH in r.file.values.kinds(receiver):
        rule = "batch-encoding-to-device"
    elif "non_blocking" in keywords:
        rule = "tensor-non-blocking"
    elif "copy" in keywords:
        rule = "tensor-to-copy"
    elif (
        len(call.args) == 2
        or {"device", "dtype"} <= keywords
        or (len(call.args) == 1 and "dtype" in keywords)
    ):
        rule = "tensor-to-device-dtype"
    elif dtype_only:
        rule = "tensor-to-dtype"
    elif call.args and _is_tensor_like(r, call.args[0]):
        rule = "tensor-to-other"
    else:
        rule = "tensor-to-device"
    problem = ""
    if any(isinstance(a, ast.Starred) for a in call.args) or None in keywords:
        problem = "*args/**kwargs: the scanner cannot see what tj.to_device would get"
    elif len(call.args) > _TO_POSITIONAL or keywords - _TO_KEYWORDS:
        extra = sorted(str(k) for k in keywords - _TO_KEYWORDS)
        problem = f"tj.to_device has no {', '.join(extra)}=" if extra else "too many arguments"
    move(r, call, method, where, rule, None, (), problem=problem, framework=framework)


def cuda_call(r: Recogniser, call: ast.Call, method: ast.Attribute, where: tuple[int, int]) -> None:
    """``tensor-cuda``: ``x.cuda(i, ...)`` becomes ``tj.to_device(x, "cuda:i", ...)``."""
    index = (
        call.args[0]
        if call.args
        else next((k.value for k in call.keywords if k.arg == "device"), None)
    )
    others = tuple(k for k in call.keywords if k.arg != "device")
    problem = ""
    if len(call.args) > 1 or any(k.arg not in ("device", "non_blocking") for k in call.keywords):
        problem = "tj.to_device takes the device and non_blocking= only"
    if index is None:
        target = '"cuda"'
    elif (
        isinstance(index, ast.Constant)
        and isinstance(index.value, int)
        and not isinstance(index.value, bool)
    ):
        target = f'"cuda:{index.value}"'
    else:
        target = f'f"cuda:{{{r.text(index)}}}"'
        problem = problem or (
            f"{r.text(index)} may be None, an index or a device: write the target yourself"
        )
    move(r, call, method, where, "tensor-cuda", target, others, problem=problem)


def move(
    r: Recogniser,
    call: ast.Call,
    method: ast.Attribute,
    where: tuple[int, int],
    rule: str,
    target: str | None,
    keywords: tuple[ast.keyword, ...],
    problem: str = "",
    framework: str | bool | None = False,
) -> None:
    """A ``.to``/``.cuda``/``.cpu`` call: ``tj.to_device(receiver, target, ...)``."""
    receiver = method.value
    parent = r.parent(call)
    if framework is False:
        framework = r.file.values.module_framework(receiver)
        if framework is not None:
            rule = "module-to"
    if framework is None and isinstance(parent, ast.Expr) and rule != "batch-encoding-to-device":
        rule = "module-to"  # the result is dropped: only a module moves in place
    start, end = r.file.span(call)
    receiver_span = r.file.receiver_span(method)
    if target is None:
        arguments = r.arguments(call)
        pieces: tuple[str | tuple[int, int], ...] = (
            "tj.to_device(",
            receiver_span,
            ", ",
            r.arguments_span(call),
        )
    else:
        extra = "".join(f", {r.text(k)}" for k in keywords)
        arguments = target + extra
        pieces = ("tj.to_device(", receiver_span, f", {target}")
        pieces += tuple(x for k in keywords for x in (", ", r.file.span(k)))
        pieces += (")",)
    replacement = f"tj.to_device({r.text(receiver)}, {arguments})"
    if rule == "tensor-cpu" and isinstance(parent, ast.Attribute) and parent.attr == "numpy":
        replacement = f"np.asarray({r.text(receiver)})"
    candidate = r.add(
        call,
        rule,
        replacement,
        position=where,
        rewrite=Rewrite(start, end, pieces),
        call=call,
        tj_name="tj.to_device",
        effect="value",
        subject=call,
    )
    if problem:
        candidate.reason = problem
    elif rule == "batch-encoding-to-device":
        candidate.reason = _batch_moved_in_place(r, call, receiver)
    elif framework == "torch" and _is_pipeline(r, receiver):
        candidate.reason = (
            f"{r.text(receiver)} is a Diffusers pipeline, whose .to moves its torch modules "
            "in place: tj.to_device moves arrays and Flax NNX modules, so port them first"
        )
    elif framework == "torch":
        candidate.reason = _torch_module_reason(r, receiver)
    elif framework == "module":
        candidate.reason = (
            f"{r.text(receiver)} looks like a module, and the scanner cannot tell it is a "
            "Flax NNX module (tj.to_device leaves torch modules where they are)"
        )
    elif framework is None and isinstance(parent, ast.Expr):
        candidate.reason = (
            "the result is dropped, so this moves a module in place: tj.to_device moves "
            "Flax NNX modules only"
        )
    elif framework == "nnx":
        candidate.effect = "module"


def _torch_module_reason(r: Recogniser, receiver: ast.expr) -> str:
    """Why a move of a torch module is not rewritten; where the name is bound to a Flax
    NNX module at one assignment and to a torch module at another (a ported
    ``net = LeNet()``, then ``net = torch.nn.DataParallel(net)``), the line that makes
    it torch's."""
    shown = r.text(receiver)
    values = r.file.values
    if isinstance(receiver, ast.Name) and NNX_MODULE in values.kinds(receiver):
        torch_bound = sorted(
            (
                (binding.node.lineno, binding.value)
                for binding in r.file.names.bindings(receiver)
                if isinstance(binding.node, ast.Name)
                and binding.value is not None
                and not _method_of(binding.value, receiver.id)
                and TORCH_MODULE in values.binding_kinds(binding)
            ),
            key=lambda found: found[0],
        )
        if torch_bound:
            line, value = torch_bound[0]
            return (
                f"{shown} is a Flax NNX module at one assignment, and line {line} makes it "
                f"a torch.nn.Module ({short_text(value)}): tj.to_device moves arrays and "
                "Flax NNX modules, so port that line first"
            )
    return (
        f"{shown} is a torch.nn.Module: tj.to_device moves arrays and Flax NNX modules, "
        "so port the module first"
    )


def _method_of(value: ast.expr, name: str) -> bool:
    """``value`` is a method call on ``name`` itself (``net.to(device)``): it holds what
    ``name`` already held, not a module of its own."""
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and isinstance(value.func.value, ast.Name)
        and value.func.value.id == name
    )


def _batch_moved_in_place(r: Recogniser, call: ast.Call, receiver: ast.expr) -> str:
    """Why ``tj.to_device(batch, ...)`` would not do what ``batch.to(...)`` does to a
    Hugging Face batch, which it moves in place: the batch is read again afterwards (or
    kept where the scanner cannot follow it), or the result is dropped; ``""`` when
    nothing can tell the two apart."""
    names = r.file.names
    statement = names.statement(call)
    shown = r.text(receiver)
    fix = (
        f"{shown}.to(...) moves the BatchEncoding in place, tj.to_device returns a moved "
        f"copy (assign it: {shown} = tj.to_device({shown}, ...))"
    )
    if isinstance(r.parent(call), ast.Expr):
        return f"the result is dropped: {fix}"
    tensors = _returned_tensors(r, receiver)
    if tensors is not None and tensors != "pt":
        return (
            f'return_tensors="{tensors}": BatchEncoding.to moves torch tensors only, so '
            f"{shown}.to(...) leaves these arrays as they are; tj.to_device would make "
            "JAX arrays of them"
        )
    if isinstance(receiver, ast.Call):
        return ""  # a new batch: nothing else holds it
    if not isinstance(receiver, ast.Name) or statement is None:
        return f"the scanner cannot follow what else holds {shown}: {fix}"
    rebound = isinstance(statement, ast.Assign) and any(  # x = ..., or x, y = ...
        isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id == receiver.id
        for target in statement.targets
        for node in ast.walk(target)
    )
    bindings = names.bindings(receiver)
    for load in names.loads(bindings[0]) if bindings else []:
        if load is receiver:
            continue
        if names.only_before(load, statement):
            if _gives_another_holder(names.parents.get(load), load):
                # b = x before x = x.to(d): torch moved b's batch too, tj.to_device not
                return f"line {load.lineno} gives {shown} another holder: {fix}"
            continue
        if rebound and names.statement(load) is not statement:
            continue  # x = x.to(d): later reads are of the result
        return f"line {load.lineno} reads {shown} again: {fix}"
    return ""


def _gives_another_holder(parent: ast.AST | None, load: ast.Name) -> bool:
    """``load`` is bound to another name or put in a container (``b = x``, ``[x]``)."""
    if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
        return parent.value is load
    return isinstance(parent, (ast.Tuple, ast.List, ast.Set, ast.Dict))


def _is_pipeline(r: Recogniser, receiver: ast.expr) -> bool:
    """``receiver`` was made by a Diffusers pipeline class
    (``StableDiffusionPipeline.from_pretrained(...)``), which is not an ``nn.Module``."""
    made: list[ast.expr | None] = [receiver]
    if isinstance(receiver, ast.Name):
        made = [b.value for b in r.file.names.bindings(receiver)]
    for value in made:
        while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
            if value.func.attr == "from_pretrained":
                name = r.qualname(value.func.value)
                if name is not None and name.startswith("diffusers.") and "Pipeline" in name:
                    return True
                break
            value = value.func.value  # pipeline.to(device) of one
    return False


def _returned_tensors(r: Recogniser, batch: ast.expr) -> str | None:
    """The constant ``return_tensors=`` of the tokenizer call that made ``batch`` (the
    call itself, or a name's one assignment), if the scanner can see one."""
    if isinstance(batch, ast.Name):
        bindings = r.file.names.bindings(batch)
        if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].element is not None:
            return None
        value = bindings[0].value
        batch = value if value is not None else batch
    if not isinstance(batch, ast.Call):
        return None
    for keyword in batch.keywords:
        if keyword.arg == "return_tensors" and isinstance(keyword.value, ast.Constant):
            return str(keyword.value.value)
    return None


def get_device(r: Recogniser, call: ast.Call, receiver: ast.expr, where: tuple[int, int]) -> None:
    """``tensor-device-type``: ``x.get_device()``."""
    r.add(call, "tensor-device-type", f"tj.get_device({r.text(receiver)})", position=where)


def _iterated(r: Recogniser, node: ast.expr) -> bool:
    """``node`` is a name every binding of which is a ``for`` loop's."""
    bindings = r.file.names.bindings(node) if isinstance(node, ast.Name) else []
    return bool(bindings) and all(b.kind == "for" for b in bindings)


def _type_of_a_kept_device(r: Recogniser, node: ast.Attribute) -> bool:
    """``device.type`` (``self._device.type``, ``torch_device.type``) compared with a
    device type's name (or a set of them: ``device.type in {"cpu", "mps"}``), or kept in
    the name of the device it is read from (``device = device.type``): the type of a
    device kept in a name or setting and made elsewhere (a parameter, a container's
    element: it must become a ``tj.device``). One this file makes with ``torch.device``,
    or a loop's over a list of them, is reported where it is made (``device-type``), and a
    ``tj.device`` answers ``.type`` as torch's; ``x.device.type`` is the tensor's, above."""
    receiver = node.value
    parent = r.parent(node)
    if isinstance(parent, ast.Compare):
        typed = any(_names_device_types(side) for side in (parent.left, *parent.comparators))
    else:  # device = device.type: the name now keeps the type
        typed = (
            isinstance(parent, ast.Assign)
            and parent.value is node
            and any(r.text(target) == r.text(receiver) for target in parent.targets)
        )
    return (
        typed
        and node.attr == "type"
        and isinstance(node.ctx, ast.Load)
        and isinstance(receiver, (ast.Name, ast.Attribute))
        and not (isinstance(receiver, ast.Attribute) and receiver.attr == "device")
        and r.qualname(receiver) is None
        and device_strings.keeps_device(receiver)
        and TORCH_DEVICE not in r.file.values.kinds(receiver)  # made here: a tj.device's .type
        and not _iterated(r, receiver)  # for device in devices: the list's, where it is made
    )


def _names_device_types(node: ast.expr) -> bool:
    """``"cuda"``, or ``{"cpu", "mps"}`` (a tuple, list or set of device types)."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(_names_device_types(e) for e in node.elts)
    return isinstance(node, ast.Constant) and node.value in device_strings.DEVICE_TYPES


def device_attribute(r: Recogniser, node: ast.Attribute) -> bool:
    """``.device``, ``.is_cuda``, ``.device.type``, ``next(m.parameters()).device``;
    ``True`` if one was reported (its receiver is then visited)."""
    receiver = node.value
    where = r.file.method_position(node)
    if node.attr == "device" and _is_next_parameters(r, receiver):
        assert isinstance(receiver, ast.Call)
        parameters = receiver.args[0]
        assert isinstance(parameters, ast.Call) and isinstance(parameters.func, ast.Attribute)
        model = parameters.func.value
        start, end = r.file.span(parameters)
        candidate = r.add(
            node,
            "parameters-device",
            f"next(tj.parameters({r.text(model)})).device",
            position=where,
            rewrite=Rewrite(
                start, end, ("tj.parameters(", r.file.receiver_span(parameters.func), ")")
            ),
            call=parameters,
            tj_name="tj.parameters",
            effect="value",
            subject=node,
            policy="device",
        )
        if r.file.values.module_framework(model) != "nnx":
            candidate.reason = (
                f"{r.text(model)} may be a torch module: tj.parameters reads Flax NNX "
                "modules, so port the module first"
            )
        r.visit(model)
        return True
    if node.attr in ("is_cuda", "is_cpu") and isinstance(node.ctx, ast.Load):
        kind = "cuda" if node.attr == "is_cuda" else "cpu"
        r.add(
            node,
            "tensor-device-type",
            f'tj.device_of({r.text(receiver)}).type == "{kind}"',
            position=where,
        )
        r.visit(receiver)
        return True
    if node.attr == "is_meta" and isinstance(node.ctx, ast.Load) and r.qualname(node) is None:
        r.add(
            node,
            "tensor-device-type",
            f"isinstance({r.text(receiver)}, jax.ShapeDtypeStruct)  # an abstract array "
            "(nnx.eval_shape's), JAX's meta tensor",
            position=where,
        )
        r.visit(receiver)
        return True
    if (
        node.attr in ("type", "index")
        and isinstance(receiver, ast.Attribute)
        and receiver.attr == "device"
        and r.qualname(receiver) is None
        and not libraries.is_library_object(r, receiver.value)  # fabric.device: library-device
        and not _is_next_parameters(r, receiver.value)  # parameters-device, below
        and not _made_by_tj(r, receiver.value)
    ):
        owner = receiver.value
        r.add(
            node,
            "tensor-device-type",
            f"tj.device_of({r.text(owner)}).{node.attr}",
            position=r.file.method_position(receiver),
        )
        r.visit(owner)
        return True
    if _type_of_a_kept_device(r, node):  # device.type == "cuda" on a torch.device kept
        r.add(
            node,
            "tensor-device-type",
            f"{r.text(node)}  # a tj.device has torch's .type and .index",
            position=r.file.method_position(node),
        )
        r.visit(receiver)
        return True
    if (
        node.attr == "device"
        and isinstance(node.ctx, ast.Load)
        and not _in_factory_device(r, node)
        and r.qualname(receiver) is None
        and not _made_by_tj(r, receiver)
        and (_has_array_device(r, receiver) or _device_property(r, receiver))
    ):
        function = r.file.names.enclosing(node, ast.FunctionDef, ast.AsyncFunctionDef)
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_jitted(
            function, r.qualname
        ):
            replacement = (
                "delete the line: under jax.jit arrays are traced and have no device "
                "(the jitted call runs where its inputs are)"
            )
        else:
            replacement = f"tj.device_of({r.text(receiver)})"
        r.add(node, "tensor-device", replacement, position=where)
        r.visit(receiver)
        return True
    return False


def parameters_call(r: Recogniser, call: ast.Call, where: tuple[int, int]) -> None:
    """``optimizer-parameters`` and ``parameter-count``: ``model.parameters()`` handed to an
    optimizer's class or counted (``sum(p.numel() for p in model.parameters())``)."""
    parent = r.parent(call)
    if isinstance(parent, ast.keyword):
        parent = r.parent(parent)
    if isinstance(parent, ast.comprehension):
        expression = r.parent(parent)
        if expression is not None and any(
            isinstance(node, ast.Attribute) and node.attr in ("numel", "nelement")
            for node in ast.walk(expression)
        ):
            r.add(call, "parameter-count", position=where)
        return
    if not isinstance(parent, ast.Call) or call is parent.func:
        return
    if isinstance(parent.func, ast.Name) and r.file.names.is_builtin(parent.func):
        return  # next(...), list(...): not handed to an optimizer
    qualified = r.qualname(parent.func)
    if qualified in ADVICE and not qualified.startswith("torch.optim."):
        return  # deepspeed.zero.GatheredParameters(model.parameters()): a row of its own
    name = qualified or r.text(parent.func)
    if (
        name.startswith("torch.optim.")
        or name.split(".")[-1][:1].isupper()
        or _OPTIMIZER_WORDS.search(name.split(".")[-1])
        or _OPTIMIZER_WORDS.search(optimizers.assigned_name(r, parent, ""))
    ):
        advice = optimizers.optimizer_advice(r, parent)
        target = optimizers.assigned_name(r, parent, "optimizer")
        r.add(
            call,
            "optimizer-parameters",
            None if advice is None else f"{target} = tj.to_device({advice[0]}, device)",
            position=where,
            jax=""
            if advice is None or advice[1].startswith("#")
            else f"{target} = {advice[1]}  # its state is made beside the model's arrays",
        )


# A running total named as a count: num_parameters, n_params, total, count, size.
_COUNT_NAME = re.compile(r"param|count|total|size|^n$|^n_|^num", re.IGNORECASE)
# What a loop over a model's parameters iterates: model.parameters(), a group["params"].
_PARAMETERS = frozenset({"parameters", "named_parameters"})


def parameters_counted(r: Recogniser, node: ast.AugAssign | ast.Assign) -> None:
    """``parameter-count``: a model's parameters counted in a loop (``for p in
    model.parameters(): n += p.numel()``; LAVIS's ``for p in group["params"]:
    num_parameters += p.data.nelement()``), or kept in a name first (LLaMA-Factory's
    ``num_params = param.numel()``)."""
    value = node.value
    target = node.target if isinstance(node, ast.AugAssign) else node.targets[0]
    if not (
        (isinstance(node, ast.Assign) or isinstance(node.op, ast.Add))
        and _COUNT_NAME.search(last_name(target) or "")
        and isinstance(value, ast.Call)
        and not value.args
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in ("numel", "nelement")
    ):
        return
    counted = value.func.value
    if isinstance(counted, ast.Attribute) and counted.attr == "data":
        counted = counted.value
    loop = r.parent(node)
    while loop is not None and not isinstance(loop, (ast.For, ast.FunctionDef)):
        loop = r.parent(loop)
    if not isinstance(loop, ast.For):
        return
    target = loop.target  # for p in model.parameters(), for name, p in named_parameters()
    if isinstance(target, ast.Tuple) and target.elts:
        target = target.elts[-1]
    if (
        isinstance(counted, ast.Name)
        and isinstance(target, ast.Name)
        and target.id == counted.id
        and _iterates_parameters(loop.iter)
    ):
        r.add(node, "parameter-count")


def _iterates_parameters(node: ast.expr) -> bool:
    """``model.parameters()``, ``group["params"]``: a model's parameters."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in _PARAMETERS
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and node.slice.value == "params"
    )


def _is_tensor_like(r: Recogniser, node: ast.AST) -> bool:
    """``x.to(other)``: the argument is evidently an array, not a device."""
    if r.file.values.kinds(node) & {TORCH_TENSOR, JAX_ARRAY}:
        return True
    name = node.id if isinstance(node, ast.Name) else None
    return name is not None and (name in _TENSOR_NAMES or name.endswith(("_like", "_tensor")))


def is_dtype(r: Recogniser, node: ast.AST, depth: int = 0) -> bool:
    """``torch.float16``, ``x.dtype``, or a name every binding of which is one (or None:
    ``target_dtype = None`` then ``target_dtype = torch.bfloat16`` where enabled)."""
    name = r.qualname(node)
    if (
        name is not None
        and name.split(".")[-1] in _DTYPES
        and name.startswith(("torch.", "jax.numpy.", "numpy."))
    ):
        return True
    if isinstance(node, ast.IfExp):
        return is_dtype(r, node.body, depth) and is_dtype(r, node.orelse, depth)
    if isinstance(node, ast.Name) and name is None and depth < 3:
        bindings = r.file.names.bindings(node)
        values = [b.value for b in bindings if b.kind == "assign" and b.element is None]
        if not bindings or len(values) != len(bindings):
            return _DTYPE_NAME.search(node.id) is not None and not _held_device(r, node)
        kept = [v for v in values if not (isinstance(v, ast.Constant) and v.value is None)]
        return bool(kept) and all(is_dtype(r, v, depth + 1) for v in kept if v is not None)
    if isinstance(node, (ast.Subscript, ast.Attribute)) and depth < 3:
        # options["dtype"], cfg.dtype: what the file stores there
        stored = r.file.names.assigned(node) or []
        held = [v for v in stored if not (isinstance(v, ast.Constant) and v.value is None)]
        if held and all(is_dtype(r, v, depth + 1) for v in held):
            return True
    key = node.slice if isinstance(node, ast.Subscript) else None
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return _DTYPE_NAME.search(key.value) is not None  # options["dtype"], as cfg.dtype
    if isinstance(node, ast.Call) and depth < 3:
        handed = _handed_back(r, node)  # passthrough(dtype): a helper returning it
        return handed is not None and is_dtype(r, handed, depth + 1)
    return isinstance(node, ast.Attribute) and _DTYPE_NAME.search(node.attr) is not None


def _handed_back(r: Recogniser, call: ast.Call) -> ast.expr | None:
    """The argument ``call`` gets back: a function of the file whose every ``return``
    hands back the same parameter (``def passthrough(value): return value``)."""
    func = call.func
    bindings = r.file.names.bindings(func) if isinstance(func, ast.Name) else []
    if len(bindings) != 1 or not isinstance(bindings[0].node, ast.FunctionDef):
        return None
    definition = bindings[0].node
    returned = {
        part.value.id if isinstance(part.value, ast.Name) else None
        for part in ast.walk(definition)
        if isinstance(part, ast.Return)
    }
    parameters = [a.arg for a in [*definition.args.posonlyargs, *definition.args.args]]
    if len(returned) != 1 or (name := returned.pop()) not in parameters:
        return None
    if any(isinstance(a, ast.Starred) for a in call.args):
        return None
    given = {k.arg: k.value for k in call.keywords if k.arg is not None}
    position = parameters.index(name)
    if name in given:
        return given[name]
    return call.args[position] if position < len(call.args) else None


def _held_device(r: Recogniser, node: ast.expr) -> bool:
    """What ``node`` holds may be a device: a ``torch.device`` or a string."""
    return bool(r.file.values.kinds(node) & {"torch-device", PATH})


def _has_array_device(r: Recogniser, receiver: ast.AST) -> bool:
    """``receiver.device`` reads where an array or module is, not a setting."""
    kinds = r.file.values.kinds(receiver)
    if kinds & {TORCH_TENSOR, JAX_ARRAY, "torch-module", NNX_MODULE}:
        return True
    if kinds & {"args", "args-value", PATH, NUMBER, "torch-device", FOREIGN}:
        return False
    name = receiver.id if isinstance(receiver, ast.Name) else None
    if isinstance(receiver, ast.Attribute):
        name = receiver.attr
    return name is None or name not in _SETTINGS


def _in_factory_device(r: Recogniser, node: ast.AST) -> bool:
    """``torch.zeros(3, device=x.device)``: the factory's finding covers it (a function of
    the script's own, ``f(x, device=x.device)``, gets a finding of its own)."""
    parent = r.parent(node)
    if not (isinstance(parent, ast.keyword) and parent.arg == "device"):
        return False
    return id(r.parent(parent)) in r.reported


def _device_property(r: Recogniser, receiver: ast.AST) -> bool:
    """``self.device`` read in a model: a ``device`` property of the class, or a torch
    module's inherited one (Hugging Face's ``PreTrainedModel.device``), not a setting the
    class stores itself (``self.device = device``)."""
    if not (isinstance(receiver, ast.Name) and receiver.id == "self"):
        return False
    klass = r.file.names.enclosing(receiver, ast.ClassDef)
    if not isinstance(klass, ast.ClassDef):
        return False
    if any(
        isinstance(s, ast.FunctionDef)
        and s.name == "device"
        and any(isinstance(d, ast.Name) and d.id == "property" for d in s.decorator_list)
        for s in klass.body
    ):
        return True
    stored = any(
        isinstance(t, ast.Attribute)
        and t.attr == "device"
        and isinstance(t.value, ast.Name)
        and t.value.id == "self"
        and isinstance(t.ctx, ast.Store)
        for t in ast.walk(klass)
    )
    return not stored and "torch-module" in r.file.values.class_kinds(klass)


def _made_by_tj(r: Recogniser, node: ast.AST) -> bool:
    """``node`` is a torch2jax_device call's result, or its first item
    (``next(tj.parameters(model))``): its ``.device`` is torch2jax_device's, which is
    what ``--diff`` writes, not a torch idiom left to port."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "next"
        and r.file.names.is_builtin(node.func)
        and len(node.args) == 1
    ):
        node = node.args[0]
    if not isinstance(node, ast.Call):
        return False
    name = r.qualname(node.func)
    return name is not None and name.startswith(TJ + ".")


def _is_next_parameters(r: Recogniser, node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "next"
        and r.file.names.is_builtin(node.func)
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Call)
        and isinstance(node.args[0].func, ast.Attribute)
        and node.args[0].func.attr == "parameters"
        and not node.args[0].args
    )


# A move reached as torch's unbound method (``torch.Tensor.to(x, device)``,
# ``map(torch.Tensor.cuda, xs)``) or asked for by name (``getattr(x, "cuda")()``): the row
# of the method.
_MOVES = {"to": "tensor-to-device", "cuda": "tensor-cuda", "cpu": "tensor-cpu"}
_UNBOUND = {
    f"{owner}.{method}": rule
    for owner in ("torch.Tensor", "torch.nn.Module", "torch.nn.modules.module.Module")
    for method, rule in _MOVES.items()
}


def unbound_move(r: Recogniser, node: ast.expr, name: str, call: ast.Call | None) -> bool:
    """``torch.Tensor.to(x, device)``, ``map(torch.Tensor.cuda, xs)``: ``True`` if
    reported (advice: ``tj.to_device(x, device)``)."""
    rule = _UNBOUND.get(name)
    if rule is None:
        return False
    if rule == "tensor-to-device" and name.startswith("torch.nn."):
        rule = "module-to"
    r.add(call or node, rule)
    return True


def move_by_name(r: Recogniser, call: ast.Call) -> None:
    """``getattr(x, "cuda")()`` (or ``"to"``, ``"cpu"``), a move asked for by its name."""
    getter = call.func
    if not (
        isinstance(getter, ast.Call)
        and isinstance(getter.func, ast.Name)
        and getter.func.id == "getattr"
        and r.file.names.is_builtin(getter.func)
        and len(getter.args) == 2
        and isinstance(getter.args[1], ast.Constant)
        and getter.args[1].value in _MOVES
    ):
        return
    if r.file.values.kinds(getter.args[0]) == {FOREIGN}:
        return
    r.add(call, _MOVES[getter.args[1].value])
